//! Issuance: `issue/<role>`, `sign/<role>`, `sign-verbatim[/<role>]` and their
//! `issuer/<ref>/...` twins (the issuer from the path instead of the role's `issuer_ref`), plus
//! the shared steps `root.rs` signs CA certificates with.
//!
//! Steps (Vault's `generateCreationBundle` and `pathIssueSignCert`): the common name (from the
//! CSR with `use_csr_common_name`, else `common_name`, required unless `require_cn=false`);
//! DNS and email SANs from the CSR (`use_csr_sans`) or `alt_names`, plus the CN unless
//! `exclude_cn_from_sans`; every name, IP, URI and other SAN checked against the role, one
//! name outside it refusing the whole request; the subject from the role's fields; the
//! validity window (`validity.rs`); a serial unused in the mount; then the certificate is
//! built, stored under `certs/` (unless `no_store`) and answered in the requested format,
//! leased when the role has `generate_lease`.
//!
//! Invariant: nothing is stored and no key leaves the engine unless the certificate was built;
//! a role's key type and size bind CSRs (`key_type=any` takes any supported key).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use rcgen::ExtendedKeyUsagePurpose;
use secrets_sdk::{Data, EngineError, LeaseOptions, MountTtls, Request, Response, fields};
use serde_json::Value;

use crate::ca;
use crate::cert::{CertInfo, CsrInfo, Issued, San, parse_csr, spki_bits, spki_kind};
use crate::keys::{KeyKind, KeySpec, PrivateKey};
use crate::mount::Mount;
use crate::names;
use crate::render::{self, Format};
use crate::roles::{self, Role};
use crate::sans;
use crate::signing::SigningIssuer;
use crate::template::{self, Signer, Subject, SubjectKey, Template};
use crate::validity::{self, ValidityInput};

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

/// The names a certificate will carry, after the role's checks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    pub(crate) common_name: String,
    pub(crate) subject_serial: String,
    pub(crate) sans: Vec<San>,
}

fn dedup_push(list: &mut Vec<String>, value: String) {
    if !list.contains(&value) {
        list.push(value);
    }
}

/// Vault's name handling in `generateCreationBundle`.
pub(crate) fn names(
    role: &Role,
    data: &Data,
    csr: Option<&CsrInfo>,
    display_name: &str,
) -> Result<Names, EngineError> {
    let use_csr_sans = csr.is_some() && role.use_csr_sans;
    let mut cn = String::new();
    if let Some(csr) = csr.filter(|_| role.use_csr_common_name) {
        cn = csr.common_name.clone();
    }
    if cn.is_empty() {
        cn = fields::string(data, "common_name")?.unwrap_or_default();
        if cn.is_empty() && role.require_cn {
            return Err(bad(
                r#"the common_name field is required, or must be provided in a CSR with "use_csr_common_name" set to true, unless "require_cn" is set to false"#,
            ));
        }
    }
    let mut subject_serial = fields::string(data, "serial_number")?.unwrap_or_default();
    if subject_serial.is_empty()
        && let Some(csr) = csr
    {
        subject_serial = csr.subject_serial.clone();
    }

    let mut dns: Vec<String> = Vec::new();
    let mut emails: Vec<String> = Vec::new();
    if let Some(csr) = csr.filter(|_| use_csr_sans) {
        for san in &csr.sans {
            match san {
                San::Dns(name) => dns.push(name.clone()),
                San::Email(email) => emails.push(email.clone()),
                _ => {}
            }
        }
    }
    let exclude_cn = fields::bool(data, "exclude_cn_from_sans")?.unwrap_or(false);
    if !cn.is_empty() && !exclude_cn {
        if cn.contains('@') {
            emails.push(cn.clone());
        } else if cn.is_ascii() && names::is_hostname(&cn) {
            dns.push(cn.clone());
        }
    }
    if !use_csr_sans && let Some(alt) = fields::string(data, "alt_names")? {
        let mut seen: Vec<String> = Vec::new();
        for name in alt.trim().split(',').filter(|s| !s.is_empty()) {
            dedup_push(&mut seen, name.to_owned());
        }
        for name in seen {
            if name.contains('@') {
                emails.push(name);
            } else if name.is_ascii() && names::is_hostname(&name) {
                dns.push(name);
            }
        }
    }

    if !cn.is_empty() && !names::common_name_allowed(role, display_name, &cn) {
        return Err(bad(format!("common name {cn} not allowed by this role")));
    }
    if !subject_serial.is_empty() && !names::serial_number_allowed(role, &subject_serial) {
        return Err(bad(format!(
            "serial_number {subject_serial} not allowed by this role"
        )));
    }
    if let Some(name) = names::first_bad_name(role, display_name, &dns) {
        return Err(bad(format!(
            "subject alternate name {name} not allowed by this role"
        )));
    }
    if let Some(name) = names::first_bad_name(role, display_name, &emails) {
        return Err(bad(format!(
            "email address {name} not allowed by this role"
        )));
    }

    let mut other_input: Vec<String> = fields::comma_list(data, "other_sans")?.unwrap_or_default();
    if let Some(csr) = csr.filter(|_| use_csr_sans) {
        for san in &csr.sans {
            if let San::Other(oid, value) = san {
                other_input.push(format!("{oid};UTF8:{value}"));
            }
        }
    }
    let mut others: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if !other_input.is_empty() {
        others = sans::parse_other_sans(&other_input)
            .map_err(|err| bad(format!("could not parse requested other SAN: {err}")))?;
        names::check_other_sans(role, &others).map_err(bad)?;
    }

    let mut ips: Vec<IpAddr> = Vec::new();
    let ip_source = if use_csr_sans { "CSR" } else { "the API" };
    if let Some(csr) = csr.filter(|_| use_csr_sans) {
        ips.extend(csr.sans.iter().filter_map(|san| match san {
            San::Ip(ip) => Some(*ip),
            _ => None,
        }));
    } else {
        for text in fields::comma_list(data, "ip_sans")?.unwrap_or_default() {
            let ip = template::parse_ip(&text)
                .ok_or_else(|| bad(format!("the value {text:?} is not a valid IP address")))?;
            ips.push(ip);
        }
    }
    if !ips.is_empty() {
        if !role.allow_ip_sans {
            return Err(bad(format!(
                "IP Subject Alternative Names are not allowed in this role, but was provided via {ip_source}"
            )));
        }
        let cidrs: Vec<sans::Cidr> = role
            .allowed_ip_sans_cidr
            .iter()
            .filter_map(|c| sans::parse_cidr(c))
            .collect();
        if !cidrs.is_empty() {
            for ip in &ips {
                if !cidrs.iter().any(|net| net.contains(ip)) {
                    return Err(bad(format!(
                        "the IP address {:?} is not allowed in this role",
                        ip.to_string()
                    )));
                }
            }
        }
    }

    let mut uris: Vec<String> = Vec::new();
    if let Some(csr) = csr.filter(|_| use_csr_sans) {
        let requested: Vec<String> = csr
            .sans
            .iter()
            .filter_map(|san| match san {
                San::Uri(uri) => Some(uri.clone()),
                _ => None,
            })
            .collect();
        if !requested.is_empty() {
            if role.allowed_uri_sans.is_empty() {
                return Err(bad(
                    "URI Subject Alternative Names are not allowed in this role, but were provided via CSR",
                ));
            }
            if requested.iter().any(|uri| !names::uri_allowed(role, uri)) {
                return Err(bad(
                    "URI Subject Alternative Names were provided via CSR which are not valid for this role",
                ));
            }
            uris = requested;
        }
    } else {
        let requested = fields::comma_list(data, "uri_sans")?.unwrap_or_default();
        if !requested.is_empty() {
            if role.allowed_uri_sans.is_empty() {
                return Err(bad(
                    "URI Subject Alternative Names are not allowed in this role, but were provided via the API",
                ));
            }
            for uri in &requested {
                if !names::uri_allowed(role, uri) {
                    return Err(bad(
                        "URI Subject Alternative Names were provided via the API which are not valid for this role",
                    ));
                }
                if !uri.contains(':') || uri.chars().any(char::is_whitespace) {
                    return Err(bad(format!(
                        "the provided URI Subject Alternative Name {uri:?} is not a valid URI"
                    )));
                }
            }
            uris = requested;
        }
    }

    let mut sans: Vec<San> = Vec::new();
    let mut seen_dns: Vec<String> = Vec::new();
    for name in dns {
        dedup_push(&mut seen_dns, name);
    }
    let mut seen_emails: Vec<String> = Vec::new();
    for email in emails {
        dedup_push(&mut seen_emails, email);
    }
    sans.extend(seen_dns.into_iter().map(San::Dns));
    sans.extend(seen_emails.into_iter().map(San::Email));
    sans.extend(ips.into_iter().map(San::Ip));
    sans.extend(uris.into_iter().map(San::Uri));
    for (oid, values) in others {
        sans.extend(values.into_iter().map(|v| San::Other(oid.clone(), v)));
    }
    Ok(Names {
        common_name: cn,
        subject_serial,
        sans,
    })
}

/// The subject for `names` with the role's organisation fields.
pub(crate) fn subject(role: &Role, names: &Names) -> Subject {
    Subject {
        common_name: names.common_name.clone(),
        serial_number: names.subject_serial.clone(),
        country: role.country.clone(),
        province: role.province.clone(),
        locality: role.locality.clone(),
        street_address: role.street_address.clone(),
        postal_code: role.postal_code.clone(),
        organization: role.organization.clone(),
        ou: role.ou.clone(),
    }
}

/// The role's extended key usages: the four flags, `ext_key_usage` names, then OIDs.
pub(crate) fn ext_key_usages(role: &Role) -> Vec<ExtendedKeyUsagePurpose> {
    let mut out = Vec::new();
    let mut add = |eku: ExtendedKeyUsagePurpose| {
        if !out.contains(&eku) {
            out.push(eku);
        }
    };
    if role.server_flag {
        add(ExtendedKeyUsagePurpose::ServerAuth);
    }
    if role.client_flag {
        add(ExtendedKeyUsagePurpose::ClientAuth);
    }
    if role.code_signing_flag {
        add(ExtendedKeyUsagePurpose::CodeSigning);
    }
    if role.email_protection_flag {
        add(ExtendedKeyUsagePurpose::EmailProtection);
    }
    for name in &role.ext_key_usage {
        if let Some(eku) = template::ext_key_usage(name) {
            add(eku);
        }
    }
    for oid in &role.ext_key_usage_oids {
        if let Some(arcs) = crate::der::parse_oid(oid) {
            add(ExtendedKeyUsagePurpose::Other(arcs));
        }
    }
    out
}

/// The validity window for a certificate under `role`, signed by `issuer` (if any), within the
/// mount's TTLs.
pub(crate) fn validity(
    mount: &Mount,
    ttls: MountTtls,
    role: &Role,
    data: &Data,
    issuer: Option<(&CertInfo, &str)>,
) -> Result<validity::Validity, EngineError> {
    validity::decide(&ValidityInput {
        now: mount.now(),
        ttl: fields::duration(data, "ttl")?.unwrap_or(Duration::ZERO),
        not_after: fields::string(data, "not_after")?.filter(|s| !s.is_empty()),
        not_before: fields::string(data, "not_before")?.filter(|s| !s.is_empty()),
        role_ttl: Duration::from_secs(role.ttl),
        role_max_ttl: Duration::from_secs(role.max_ttl),
        role_not_after: role.not_after.clone(),
        role_not_after_bound: role.not_after_bound.clone(),
        role_not_before: role.not_before.clone(),
        role_not_before_bound: role.not_before_bound.clone(),
        not_before_duration: Duration::from_secs(role.not_before_duration),
        mount_default_ttl: ttls.default,
        mount_max_ttl: ttls.max,
        issuer: issuer.map(|(cert, behavior)| (cert.not_after, behavior.to_owned())),
    })
}

/// Checks a CSR's key against the role (Vault's `signCert` key checks).
fn check_csr_key(role: &Role, csr: &CsrInfo) -> Result<(), EngineError> {
    let kind = spki_kind(&csr.spki).ok_or_else(|| bad("could not parse CSR's public key"))?;
    let bits = i64::from(spki_bits(&csr.spki).unwrap_or(0));
    let wanted = match role.key_type.as_str() {
        "rsa" => Some(KeyKind::Rsa),
        "ec" => Some(KeyKind::Ec),
        "ed25519" => Some(KeyKind::Ed25519),
        _ => None,
    };
    if let Some(wanted) = wanted
        && wanted != kind
    {
        return Err(bad(format!("role requires keys of type {}", role.key_type)));
    }
    let minimum = if role.is_any_key() {
        match kind {
            KeyKind::Rsa => 2048,
            KeyKind::Ec => 224,
            KeyKind::Ed25519 => 0,
        }
    } else {
        role.key_bits
    };
    match kind {
        KeyKind::Rsa => {
            if bits < minimum {
                return Err(bad(format!(
                    "role requires a minimum of a {minimum}-bit key, but CSR's key is {bits} bits"
                )));
            }
            if bits < 2048 {
                return Err(bad(format!(
                    "Vault requires a minimum of a 2048-bit key, but CSR's key is {bits} bits"
                )));
            }
        }
        KeyKind::Ec if bits < minimum => {
            return Err(bad(format!(
                "role requires a minimum of a {minimum}-bit key, but CSR's key is {bits} bits"
            )));
        }
        _ => {}
    }
    Ok(())
}

fn use_pss(role: &Role, data: &Data) -> Result<(), EngineError> {
    if role.use_pss || fields::bool(data, "use_pss")?.unwrap_or(false) {
        return Err(bad(
            "use_pss is not supported: this server signs with RSA PKCS#1 v1.5 only",
        ));
    }
    Ok(())
}

fn display_name(request: &Request) -> String {
    request
        .auth
        .as_ref()
        .map(|auth| auth.display_name.clone())
        .unwrap_or_default()
}

/// What `issue`, `sign` and `sign-verbatim` do differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Issue,
    Sign,
    Verbatim,
}

/// `issue/<role>` and `issuer/<ref>/issue/<role>`.
pub(crate) async fn issue(
    mount: &Mount,
    request: &Request,
    role_name: &str,
    issuer_ref: Option<&str>,
) -> Result<Option<Response>, EngineError> {
    let mut role = roles::require(mount, role_name).await?;
    let data = &request.data;
    let key_type = fields::string(data, "key_type")?;
    let key_bits = fields::int(data, "key_bits")?;
    let mut warning = None;
    if role.is_any_key() {
        let Some(key_type) = key_type else {
            return Err(bad(
                r#"role key type "any" not allowed for issuing certificates without providing key_type and/or key_bits request parameters"#,
            ));
        };
        role.key_type = key_type;
        role.key_bits = key_bits.unwrap_or(0);
    } else if key_type.is_some() || key_bits.is_some() {
        warning = Some("parameters key_type and key_bits ignored as role had specific values");
    }
    let mut response = leaf(mount, request, role, issuer_ref, Mode::Issue).await?;
    if let (Some(warning), Some(response)) = (warning, response.as_mut()) {
        response.warnings.push(warning.to_owned());
    }
    Ok(response)
}

/// `sign/<role>` and `issuer/<ref>/sign/<role>`.
pub(crate) async fn sign(
    mount: &Mount,
    request: &Request,
    role_name: &str,
    issuer_ref: Option<&str>,
) -> Result<Option<Response>, EngineError> {
    let role = roles::require(mount, role_name).await?;
    leaf(mount, request, role, issuer_ref, Mode::Sign).await
}

/// `sign-verbatim[/<role>]` and `issuer/<ref>/sign-verbatim[/<role>]`: the CSR's subject,
/// names and extensions as they are, under an implicit role that allows any name.
pub(crate) async fn sign_verbatim(
    mount: &Mount,
    request: &Request,
    role_name: Option<&str>,
    issuer_ref: Option<&str>,
) -> Result<Option<Response>, EngineError> {
    let base = match role_name {
        Some(name) => Some(roles::require(mount, name).await?),
        None => None,
    };
    let data = &request.data;
    let mut role = Role {
        allow_any_name: true,
        enforce_hostnames: false,
        key_type: "any".to_owned(),
        allowed_other_sans: vec!["*".to_owned()],
        allowed_serial_numbers: vec!["*".to_owned()],
        allowed_uri_sans: vec!["*".to_owned()],
        allowed_user_ids: vec!["*".to_owned()],
        cn_validations: vec!["disabled".to_owned()],
        server_flag: false,
        client_flag: false,
        ..Role::default()
    };
    if let Some(usage) = fields::comma_list(data, "key_usage")? {
        role.key_usage = usage;
    }
    role.ext_key_usage = fields::comma_list(data, "ext_key_usage")?.unwrap_or_default();
    role.ext_key_usage_oids = fields::comma_list(data, "ext_key_usage_oids")?.unwrap_or_default();
    role.signature_bits = fields::int(data, "signature_bits")?.unwrap_or(0);
    role.use_pss = fields::bool(data, "use_pss")?.unwrap_or(false);
    let bc = fields::bool(data, "basic_constraints_valid_for_non_ca")?;
    role.basic_constraints_valid_for_non_ca = bc.unwrap_or(false);
    if let Some(base) = base {
        if base.ttl > 0 {
            role.ttl = base.ttl;
        }
        if base.max_ttl > 0 {
            role.max_ttl = base.max_ttl;
        }
        role.generate_lease = base.generate_lease;
        if base.not_before_duration > 0 {
            role.not_before_duration = base.not_before_duration;
        }
        role.no_store = base.no_store;
        role.issuer_ref = base.issuer_ref.clone();
        if bc.is_none() {
            role.basic_constraints_valid_for_non_ca = base.basic_constraints_valid_for_non_ca;
        }
    }
    leaf(mount, request, role, issuer_ref, Mode::Verbatim).await
}

async fn leaf(
    mount: &Mount,
    request: &Request,
    role: Role,
    issuer_ref: Option<&str>,
    mode: Mode,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let format = render::format(data)?;
    let pkcs8 = render::pkcs8(data)?;
    use_pss(&role, data)?;
    let reference = issuer_ref.unwrap_or(&role.issuer_ref).to_owned();
    let issuer = ca::signing_issuer(mount, &reference).await?;

    let csr = match mode {
        Mode::Issue => None,
        Mode::Sign | Mode::Verbatim => {
            let text = fields::string(data, "csr")?.unwrap_or_default();
            if text.is_empty() {
                return Err(bad(r#""csr" is empty"#));
            }
            let csr = parse_csr(&text).map_err(bad)?;
            check_csr_key(&role, &csr)?;
            Some(csr)
        }
    };
    let display = display_name(request);
    let names = names(&role, data, csr.as_ref(), &display)?;
    let window = validity(
        mount,
        request.ttls,
        &role,
        data,
        Some((&issuer.cert, &issuer.record.leaf_not_after_behavior)),
    )?;
    let mut warnings = window.warnings.clone();

    let generated = match mode {
        Mode::Issue => {
            let spec = KeySpec::parse(&role.key_type, role.key_bits).map_err(bad)?;
            Some(PrivateKey::generate(spec).map_err(EngineError::Internal)?)
        }
        _ => None,
    };
    let mut template = Template {
        subject: subject(&role, &names),
        sans: names.sans.clone(),
        serial: ca::new_serial(mount).await?,
        not_before: window.not_before,
        not_after: window.not_after,
        is_ca: false,
        max_path_len: -1,
        basic_constraints_for_leaf: role.basic_constraints_valid_for_non_ca,
        key_usage: role.key_usage.clone(),
        ext_key_usage: ext_key_usages(&role),
        urls: ca::urls_for(mount, &issuer.record).await?,
        policy_identifiers: role.policy_identifiers.clone(),
        ..Template::default()
    };
    if let Some(csr) = csr.as_ref() {
        if mode == Mode::Verbatim {
            template.raw_subject = Some(csr.subject_raw.clone());
            template.sans = csr.sans.clone();
            template.extra_extensions = csr.extensions.clone();
        }
        if csr.has_basic_constraints && !role.basic_constraints_valid_for_non_ca {
            warnings.push("specified CSR contained a Basic Constraints extension that was ignored during issuance".to_owned());
        }
    }
    let subject_key = match (&generated, &csr) {
        (Some(key), _) => SubjectKey::Private(key),
        (None, Some(csr)) => SubjectKey::Public(&csr.spki),
        (None, None) => return Err(EngineError::Internal("no subject key".to_owned())),
    };
    let der = template::build(
        &template,
        subject_key,
        Signer::Issuer(issuer.signer(role.signature_bits).map_err(bad)?),
        role.signature_bits,
    )
    .map_err(bad)?;
    let cert = Issued::new(
        der,
        &template.serial,
        template.not_before,
        template.not_after,
    );

    let mut response = answer(&issuer, &cert, generated.as_ref(), format, pkcs8, data)?;
    if !role.no_store {
        ca::store_cert(
            mount,
            &cert.serial,
            &cert.der,
            cert.not_after,
            &issuer.record.id,
        )
        .await?;
    }
    if role.generate_lease {
        let ttl = (cert.not_after - mount.now()).max(1);
        let mut internal = Data::new();
        internal.insert(
            "serial_number".to_owned(),
            Value::String(cert.serial.clone()),
        );
        response.secret = Some(LeaseOptions {
            ttl: Duration::from_secs(ttl as u64),
            max_ttl: None,
            renewable: false,
            internal,
        });
    }
    if matches!(mode, Mode::Sign) {
        if role.use_csr_common_name
            && !fields::string(data, "common_name")?
                .unwrap_or_default()
                .is_empty()
        {
            response.warnings.push(r#"the common_name field was provided but the role is set with "use_csr_common_name" set to true"#.to_owned());
        }
        if role.use_csr_sans
            && !fields::string(data, "alt_names")?
                .unwrap_or_default()
                .is_empty()
        {
            response.warnings.push(r#"the alt_names field was provided but the role is set with "use_csr_sans" set to true"#.to_owned());
        }
    }
    response.warnings.extend(warnings);
    Ok(Some(response))
}

/// The issued certificate's answer: `certificate`, `issuing_ca`, `ca_chain` (without roots
/// when `remove_roots_from_chain`), `serial_number`, `not_before`, `expiration`, and the
/// private key when one was generated.
fn answer(
    issuer: &SigningIssuer,
    cert: &Issued,
    key: Option<&PrivateKey>,
    format: Format,
    pkcs8: bool,
    data: &Data,
) -> Result<Response, EngineError> {
    let remove_roots = fields::bool(data, "remove_roots_from_chain")?.unwrap_or(false);
    let chain: Vec<&CertInfo> = issuer
        .chain()
        .iter()
        .filter(|c| !remove_roots || !c.is_self_signed())
        .collect();
    let mut out = Data::new();
    out.insert("not_before".to_owned(), Value::from(cert.not_before));
    out.insert("expiration".to_owned(), Value::from(cert.not_after));
    out.insert(
        "serial_number".to_owned(),
        Value::String(cert.serial.clone()),
    );
    out.insert(
        "issuing_ca".to_owned(),
        Value::String(render::cert(format, &issuer.cert.der)),
    );
    let certificate = match format {
        Format::PemBundle => render::bundle(
            key.map(|k| k.pem(false).trim_end().to_owned()),
            &cert.der,
            chain.iter().copied(),
        ),
        _ => render::cert(format, &cert.der),
    };
    out.insert("certificate".to_owned(), Value::String(certificate));
    if !chain.is_empty() {
        out.insert(
            "ca_chain".to_owned(),
            render::strings(chain.iter().map(|c| render::cert(format, &c.der))),
        );
    }
    if let Some(key) = key {
        out.insert(
            "private_key".to_owned(),
            Value::String(render::key(format, key, pkcs8)),
        );
        out.insert(
            "private_key_type".to_owned(),
            Value::String(key.spec.kind.name().to_owned()),
        );
    }
    Ok(Response::data(out))
}
