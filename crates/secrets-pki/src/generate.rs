//! What generating a CA key (and its certificate or CSR) takes from a request, shared by
//! `root/generate/<type>` and `intermediate/generate/<type>`: the generation type
//! (`internal`, `exported`, `existing`; `kms` refused), the output format, the key (new, or an
//! existing one by `key_ref`), the subject fields, and the implicit role a CA's names are
//! checked against (any name, no hostname rules).
//!
//! Invariant: a request that fails here has changed nothing.

use secrets_sdk::{Data, EngineError, fields};

use crate::keys::{KeySpec, PrivateKey, check_signature_bits};
use crate::mount::Mount;
use crate::render::{self, Format};
use crate::roles::Role;

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

/// A parsed generation request.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) exported: bool,
    pub(crate) format: Format,
    pub(crate) pkcs8: bool,
    pub(crate) key: PrivateKey,
    /// Whether the key is one the mount already had (`existing`).
    pub(crate) existing_key: bool,
    pub(crate) role: Role,
    pub(crate) signature_bits: i64,
}

/// The implicit role CA names are checked against (Vault's `getGenerationParams`): any name,
/// no hostname rules, any URI, other SAN and subject serial number.
pub(crate) fn ca_role(data: &Data) -> Result<Role, EngineError> {
    let list = |name: &str| -> Result<Vec<String>, EngineError> {
        Ok(fields::comma_list(data, name)?.unwrap_or_default())
    };
    Ok(Role {
        ttl: fields::duration(data, "ttl")?.map_or(0, |d| d.as_secs()),
        allow_any_name: true,
        enforce_hostnames: false,
        allowed_uri_sans: vec!["*".to_owned()],
        allowed_other_sans: vec!["*".to_owned()],
        allowed_serial_numbers: vec!["*".to_owned()],
        allowed_user_ids: vec!["*".to_owned()],
        cn_validations: vec!["disabled".to_owned()],
        require_cn: false,
        use_csr_common_name: false,
        use_csr_sans: false,
        ou: list("ou")?,
        organization: list("organization")?,
        country: list("country")?,
        locality: list("locality")?,
        province: list("province")?,
        street_address: list("street_address")?,
        postal_code: list("postal_code")?,
        not_before_duration: fields::duration(data, "not_before_duration")?
            .map_or(30, |d| d.as_secs()),
        not_after_bound: String::new(),
        not_before_bound: "permit".to_owned(),
        ..Role::default()
    })
}

/// Reads the generation type, format and key of a request; generates the key unless it is
/// `existing`.
pub(crate) async fn generation(
    mount: &Mount,
    kind: &str,
    data: &Data,
) -> Result<Generation, EngineError> {
    let exported = match kind {
        "exported" => true,
        "internal" | "existing" => false,
        "kms" => return Err(bad("managed keys (kms) are not supported by this server")),
        _ => {
            return Err(bad(
                r#"the "exported" path parameter must be "internal", "existing", exported" or "kms""#,
            ));
        }
    };
    let format = render::format(data)?;
    let pkcs8 = render::pkcs8(data)?;
    if fields::bool(data, "use_pss")?.unwrap_or(false) {
        return Err(bad(
            "use_pss is not supported: this server signs with RSA PKCS#1 v1.5 only",
        ));
    }
    let signature_bits = fields::int(data, "signature_bits")?.unwrap_or(0);
    let (key, existing_key) =
        if kind == "existing" {
            let reference = fields::string(data, "key_ref")?
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_owned());
            let id =
                mount.store.resolve_key(&reference).await?.ok_or_else(|| {
                    bad(format!("unable to find PKI key for reference: {reference}"))
                })?;
            let record =
                mount.store.key(&id).await?.ok_or_else(|| {
                    bad(format!("unable to find PKI key for reference: {reference}"))
                })?;
            (record.private_key()?, true)
        } else {
            let key_type = fields::string(data, "key_type")?.unwrap_or_else(|| "rsa".to_owned());
            let key_bits = fields::int(data, "key_bits")?.unwrap_or(0);
            if key_type == "any" {
                return Err(bad("unknown key type any"));
            }
            let spec = KeySpec::parse(&key_type, key_bits).map_err(bad)?;
            (
                PrivateKey::generate(spec).map_err(EngineError::Internal)?,
                false,
            )
        };
    check_signature_bits(Some(key.spec.kind), signature_bits).map_err(bad)?;
    Ok(Generation {
        exported,
        format,
        pkcs8,
        key,
        existing_key,
        role: ca_role(data)?,
        signature_bits,
    })
}

/// A new issuer or key name from `field`, checked (empty when not given).
pub(crate) fn new_name(data: &Data, field: &str, what: &str) -> Result<String, EngineError> {
    match fields::string(data, field)? {
        None => Ok(String::new()),
        Some(name) => {
            let name = name.trim().to_owned();
            if name.is_empty() {
                return Ok(name);
            }
            crate::ca::check_name(&name, what)?;
            Ok(name)
        }
    }
}

/// The key usages a CA certificate gets: the requested ones plus `CertSign` and `CRLSign`.
pub(crate) fn ca_key_usage(data: &Data) -> Result<Vec<String>, EngineError> {
    let mut usage = fields::comma_list(data, "key_usage")?.unwrap_or_default();
    for needed in ["CertSign", "CRLSign"] {
        if !usage.iter().any(|u| u.eq_ignore_ascii_case(needed)) {
            usage.push(needed.to_owned());
        }
    }
    Ok(usage)
}
