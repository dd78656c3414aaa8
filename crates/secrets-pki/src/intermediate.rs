//! Bringing CA material in: `intermediate/generate/<type>` (a key and a CSR for a parent CA
//! to sign), `intermediate/set-signed` (the signed certificate, linked to its key),
//! `issuers/import/cert`, `issuers/import/bundle` and `config/ca` (certificates, and keys for
//! the bundle forms).
//!
//! Rules kept from upstream: the generated key is stored at once (so the signed certificate
//! finds it); imports skip issuers and keys the mount already has and report them as
//! `existing_*`; `mapping` pairs each issuer with its key id (empty when the mount has no key
//! for it); `certificate`-only paths refuse private keys.
//!
//! Invariant: every import holds the mount's issuers lock; issuers get a CRL when they can sign
//! one.

use std::collections::BTreeMap;

use secrets_sdk::{Data, EngineError, Request, Response, fields};
use serde_json::{Value, json};

use crate::cert::{CertInfo, San};
use crate::generate::{self, new_name};
use crate::issue;
use crate::keys::PrivateKey;
use crate::mount::Mount;
use crate::pem;
use crate::render::{self, Format};
use crate::{ca, crl, template};

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

/// `POST intermediate/generate/<type>` (and `issuers/generate/intermediate/<type>`).
pub(crate) async fn generate(
    mount: &Mount,
    request: &Request,
    kind: &str,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let _guard = mount.issuers_lock.lock().await;
    let key_name = new_name(data, "key_name", "key")?;
    if !key_name.is_empty() && mount.store.resolve_key(&key_name).await?.is_some() {
        return Err(bad("key name already in use"));
    }
    let generation = generate::generation(mount, kind, data).await?;
    let names = issue::names(&generation.role, data, None, "")?;
    let subject = issue::subject(&generation.role, &names);
    let add_basic_constraints = fields::bool(data, "add_basic_constraints")?.unwrap_or(false);
    let sans: Vec<San> = names.sans.clone();
    let der = template::csr(
        &subject,
        &sans,
        &generation.key,
        add_basic_constraints,
        Vec::new(),
    )
    .map_err(bad)?;
    let (key_record, _) = ca::import_key(mount, &generation.key, &key_name).await?;

    let format = generation.format;
    let csr_pem = pem::encode("CERTIFICATE REQUEST", &der)
        .trim_end()
        .to_owned();
    let private_key = render::key(format, &generation.key, generation.pkcs8);
    let mut out = Data::new();
    let csr_text = match format {
        Format::Der => pem::base64(&der),
        Format::PemBundle if generation.exported => format!("{private_key}\n{csr_pem}"),
        _ => csr_pem,
    };
    out.insert("csr".to_owned(), Value::String(csr_text));
    if generation.exported {
        out.insert("private_key".to_owned(), Value::String(private_key));
        out.insert(
            "private_key_type".to_owned(),
            Value::String(generation.key.spec.kind.name().to_owned()),
        );
    }
    out.insert("key_id".to_owned(), Value::String(key_record.id));
    let mut response = Response::data(out);
    if mount.store.urls_config().await?.urls_for("").is_empty() {
        response.warnings.push("This mount hasn't configured any authority information access (AIA) fields; this may make it harder for systems to find missing certificates in the chain or to validate revocation status of certificates. Consider updating /config/urls or the newly generated issuer with this information. Since this certificate is an intermediate, it might be useful to regenerate this certificate after fixing this problem for the root mount.".to_owned());
    }
    let _ = generation.existing_key;
    Ok(Some(response))
}

/// Which import path asked, and so whether keys are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImportPath {
    /// `intermediate/set-signed` and `issuers/import/cert`: certificates only.
    Certificates,
    /// `issuers/import/bundle` and `config/ca`: certificates and keys.
    Bundle,
}

/// Imports every certificate and key of a PEM bundle (`pem_bundle` or `certificate`).
pub(crate) async fn import(
    mount: &Mount,
    request: &Request,
    path: ImportPath,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let bundle = fields::string(data, "pem_bundle")?.unwrap_or_default();
    let certificate = fields::string(data, "certificate")?.unwrap_or_default();
    let mut keys_allowed = path == ImportPath::Bundle;
    let text = match (bundle.is_empty(), certificate.is_empty()) {
        (true, true) => return Err(bad("'pem_bundle' and 'certificate' parameters were empty")),
        (false, false) => {
            return Err(bad(
                "'pem_bundle' and 'certificate' parameters were both provided",
            ));
        }
        (false, true) => bundle,
        (true, false) => {
            keys_allowed = false;
            certificate
        }
    };
    if text.len() < 75 {
        return Err(bad(
            "provided data for import was too short; perhaps a path was passed to the API rather than the contents of a PEM file",
        ));
    }
    let blocks = pem::decode_all(&text);
    if blocks.is_empty() {
        return Err(bad("error when parsing block 1: invalid PEM data"));
    }
    let mut certs = Vec::new();
    let mut keys = Vec::new();
    for block in blocks {
        match block.label.as_str() {
            "CERTIFICATE" | "X509 CERTIFICATE" => certs.push(block.der),
            "CRL" | "X509 CRL" | "EC PARAMS" | "EC PARAMETERS" => {}
            _ => keys.push(block),
        }
    }
    if !keys.is_empty() && !keys_allowed {
        return Err(bad(
            "private keys found in the PEM bundle but not allowed by the path; use /issuers/import/bundle",
        ));
    }

    let _guard = mount.issuers_lock.lock().await;
    let mut imported_keys = Vec::new();
    let mut existing_keys = Vec::new();
    for (index, block) in keys.iter().enumerate() {
        let key = PrivateKey::from_der(&block.label, &block.der)
            .map_err(|err| bad(format!("Error parsing key {index}: {err}")))?;
        let (record, existed) = ca::import_key(mount, &key, "").await?;
        if existed {
            existing_keys.push(record.id);
        } else {
            imported_keys.push(record.id);
        }
    }
    let mut imported_issuers = Vec::new();
    let mut existing_issuers = Vec::new();
    let mut mapping = BTreeMap::new();
    for (index, der) in certs.iter().enumerate() {
        let cert = CertInfo::from_der(der)
            .map_err(|err| bad(format!("Error parsing issuer {index}: {err}")))?;
        let (record, existed) =
            ca::import_issuer(mount, &cert, "")
                .await
                .map_err(|err| match err {
                    EngineError::BadRequest(msg) => {
                        bad(format!("Error parsing issuer {index}: {msg}"))
                    }
                    other => other,
                })?;
        mapping.insert(record.id.clone(), record.key_id.clone());
        if existed {
            existing_issuers.push(record.id);
        } else {
            imported_issuers.push(record.id);
        }
    }
    // Keys imported after their certificates link on import; refresh the mapping.
    for (issuer_id, key_id) in mapping.iter_mut() {
        if let Some(issuer) = mount.store.issuer(issuer_id).await? {
            *key_id = issuer.key_id;
        }
    }
    let mut response = Response::data(
        json!({
            "mapping": mapping,
            "imported_keys": if imported_keys.is_empty() { Value::Null } else { json!(imported_keys) },
            "imported_issuers": if imported_issuers.is_empty() { Value::Null } else { json!(imported_issuers) },
            "existing_keys": if existing_keys.is_empty() { Value::Null } else { json!(existing_keys) },
            "existing_issuers": if existing_issuers.is_empty() { Value::Null } else { json!(existing_issuers) },
        })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    );
    let config = mount.store.issuers_config().await?;
    if mapping.get(&config.default).is_some_and(String::is_empty) {
        response.warnings.push("The default issuer has no key associated with it. Some operations like issuing certificates and signing CRLs will be unavailable with the requested default issuer until a key is imported or the default issuer is changed.".to_owned());
    }
    if mount.store.urls_config().await?.urls_for("").is_empty() {
        response.warnings.push("This mount hasn't configured any authority information access (AIA) fields; this may make it harder for systems to find missing certificates in the chain or to validate revocation status of certificates. Consider updating /config/urls or the newly generated issuer with this information.".to_owned());
    }
    for id in &imported_issuers {
        if let Err(err) = crl::rebuild(mount, id).await {
            response
                .warnings
                .push(format!("rebuilding the CRL failed: {err}"));
        }
    }
    Ok(Some(response))
}
