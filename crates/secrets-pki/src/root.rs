//! `root/generate/<type>` (a new self-signed issuer; a second call makes a second issuer),
//! `DELETE root` (every issuer and key), `root/sign-intermediate` and
//! `issuer/<ref>/sign-intermediate` (CA certificates from CSRs), `root/sign-self-issued` and
//! `issuer/<ref>/sign-self-issued` (re-signing a self-issued CA certificate as it is).
//!
//! Rules kept from upstream: CA certificates get `keyCertSign, cRLSign` on top of any
//! requested `key_usage`; `max_path_length` -1 means unlimited, and when not given a signed CA
//! gets one less than its signer (a signer at zero cannot sign CAs at all);
//! `permitted_dns_domains` become critical name constraints; sign-intermediate ignores the
//! issuer's `leaf_not_after_behavior` (permit, with a warning when the result outlives it);
//! `use_csr_values` copies the CSR's subject, names and extensions (but never its basic
//! constraints); self-issued certificates keep their template, serial included, and only the
//! issuer name, authority key id and distribution points change.
//!
//! Invariant: every change to issuers and keys holds the mount's issuers lock.

use secrets_sdk::{Data, EngineError, Request, Response, fields};
use serde_json::Value;

use crate::ca;
use crate::cert::{CertInfo, cert_extensions, cert_sans, certs_in_pem, signature_algorithm_name};
use crate::generate::{self, ca_key_usage, new_name};
use crate::issue;
use crate::mount::Mount;
use crate::render::{self, Format};
use crate::signing::SigningIssuer;
use crate::template::{self, Signer, SubjectKey, Template};
use crate::{crl, names};

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

const NO_AIA_WARNING: &str = "This mount hasn't configured any authority information access (AIA) fields; this may make it harder for systems to find missing certificates in the chain or to validate revocation status of certificates. Consider updating /config/urls or the newly generated issuer with this information.";
const NO_SUBJECT_WARNING: &str = "This issuer certificate was generated without a Subject; this makes it likely that issuing leaf certs with this certificate will cause TLS validation libraries to reject this certificate.";

/// `ext_key_usage` and `ext_key_usage_oids` of a CA request.
fn requested_ext_key_usage(
    data: &Data,
) -> Result<Vec<rcgen::ExtendedKeyUsagePurpose>, EngineError> {
    let mut out = Vec::new();
    for name in fields::comma_list(data, "ext_key_usage")?.unwrap_or_default() {
        if let Some(eku) = template::ext_key_usage(&name) {
            out.push(eku);
        }
    }
    for oid in fields::comma_list(data, "ext_key_usage_oids")?.unwrap_or_default() {
        let arcs = crate::der::parse_oid(&oid).ok_or_else(|| {
            bad(format!(
                "{oid:?} could not be parsed as a valid oid for an extended key usage"
            ))
        })?;
        out.push(rcgen::ExtendedKeyUsagePurpose::Other(arcs));
    }
    Ok(out)
}

/// `permitted_dns_domains`, checked to be names.
fn permitted_dns_domains(data: &Data) -> Result<Vec<String>, EngineError> {
    let domains = fields::comma_list(data, "permitted_dns_domains")?.unwrap_or_default();
    for domain in &domains {
        let bare = domain.strip_prefix('.').unwrap_or(domain);
        if !names::is_hostname(bare) || bare.contains('*') {
            return Err(bad(format!("invalid permitted DNS domain {domain:?}")));
        }
    }
    Ok(domains)
}

/// `POST root/generate/<type>` (and `issuers/generate/root/<type>`).
pub(crate) async fn generate(
    mount: &Mount,
    request: &Request,
    kind: &str,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let _guard = mount.issuers_lock.lock().await;
    let issuer_name = new_name(data, "issuer_name", "issuer")?;
    if !issuer_name.is_empty() && mount.store.resolve_issuer(&issuer_name).await?.is_some() {
        return Err(bad("issuer name already in use"));
    }
    let key_name = new_name(data, "key_name", "key")?;
    if !key_name.is_empty() && mount.store.resolve_key(&key_name).await?.is_some() {
        return Err(bad("key name already in use"));
    }
    let generation = generate::generation(mount, kind, data).await?;
    let role = &generation.role;
    let names = issue::names(role, data, None, "")?;
    let window = issue::validity(mount, request.ttls, role, data, None)?;
    let mut warnings = window.warnings.clone();

    let urls_config = mount.store.urls_config().await?;
    let mut urls = urls_config.urls_for("");
    if urls_config.enable_templating && format!("{urls:?}").contains("{{issuer_id}}") {
        urls = template::Urls::default();
        warnings.push("When generating root CA, found global AIA configuration with issuer_id template unsuitable for root generation. This AIA configuration has been ignored. To include AIA on this root CA, set the global AIA configuration to not include issuer_id and instead to refer to a static issuer name.".to_owned());
    }
    let max_path_len = fields::int(data, "max_path_length")?.unwrap_or(-1);
    let template = Template {
        subject: issue::subject(role, &names),
        sans: names.sans.clone(),
        serial: ca::new_serial(mount).await?,
        not_before: window.not_before,
        not_after: window.not_after,
        is_ca: true,
        max_path_len,
        key_usage: ca_key_usage(data)?,
        ext_key_usage: requested_ext_key_usage(data)?,
        permitted_dns_domains: permitted_dns_domains(data)?,
        urls: urls.clone(),
        ..Template::default()
    };
    let key = &generation.key;
    let der = template::build(
        &template,
        SubjectKey::Private(key),
        Signer::SelfSigned(key),
        generation.signature_bits,
    )
    .map_err(bad)?;
    let cert = CertInfo::from_der(&der).map_err(EngineError::Internal)?;

    let (key_record, _) = ca::import_key(mount, key, &key_name).await?;
    let (mut issuer, _) = ca::import_issuer(mount, &cert, &issuer_name).await?;
    issuer.revocation_signature_algorithm =
        signature_algorithm_name(key.spec.kind, generation.signature_bits, key.spec.bits);
    mount.store.put_issuer(&issuer).await?;
    ca::store_cert(mount, &cert.serial, &cert.der, cert.not_after, &issuer.id).await?;
    if let Err(err) = crl::rebuild(mount, &issuer.id).await {
        warnings.push(err.to_string());
    }

    let format = generation.format;
    let mut out = Data::new();
    out.insert("expiration".to_owned(), Value::from(cert.not_after));
    out.insert(
        "serial_number".to_owned(),
        Value::String(cert.serial.clone()),
    );
    out.insert(
        "issuing_ca".to_owned(),
        Value::String(render::cert(format, &cert.der)),
    );
    let private_key = render::key(format, key, generation.pkcs8);
    let certificate = match format {
        Format::PemBundle if generation.exported => {
            format!("{private_key}\n{}", cert.pem_trimmed())
        }
        _ => render::cert(format, &cert.der),
    };
    out.insert("certificate".to_owned(), Value::String(certificate));
    if generation.exported {
        out.insert("private_key".to_owned(), Value::String(private_key));
        out.insert(
            "private_key_type".to_owned(),
            Value::String(key.spec.kind.name().to_owned()),
        );
    }
    out.insert("issuer_id".to_owned(), Value::String(issuer.id.clone()));
    out.insert("issuer_name".to_owned(), Value::String(issuer.name.clone()));
    out.insert("key_id".to_owned(), Value::String(key_record.id.clone()));
    out.insert(
        "key_name".to_owned(),
        Value::String(key_record.name.clone()),
    );
    let mut response = Response::data(out);
    response.warnings = warnings;
    if names.common_name.is_empty()
        && template
            .subject
            .to_dn()
            .map(|dn| dn.iter().next().is_none())
            .unwrap_or(false)
    {
        response.warnings.push(NO_SUBJECT_WARNING.to_owned());
    }
    if urls.is_empty() {
        response.warnings.push(NO_AIA_WARNING.to_owned());
    }
    if max_path_len == 0 {
        response.warnings.push("Max path length of the generated certificate is zero. This certificate cannot be used to issue intermediate CA certificates.".to_owned());
    }
    Ok(Some(response))
}

/// `DELETE root`: every issuer, key and CRL of the mount.
pub(crate) async fn delete_all(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let _guard = mount.issuers_lock.lock().await;
    for id in mount.store.issuer_ids().await? {
        mount.store.delete_issuer(&id).await?;
        mount.signers.forget(&id);
    }
    for id in mount.store.key_ids().await? {
        mount
            .store
            .delete(&format!("{}{id}", crate::store::KEY_PREFIX))
            .await?;
    }
    mount.store.put_issuers_config(&Default::default()).await?;
    mount.store.put_keys_config(&Default::default()).await?;
    Ok(Some(Response::default().with_warning("DELETE /root deletes all keys and issuers; prefer the new DELETE /key/:key_ref and DELETE /issuer/:issuer_ref for finer granularity, unless removal of all keys and issuers is desired.")))
}

/// The path length a CA signed by `signer` gets: the request's, else one less than the
/// signer's (unlimited stays unlimited).
fn derived_path_len(signer: &CertInfo, requested: Option<i64>) -> Result<i64, EngineError> {
    if signer.max_path_len == Some(0) {
        return Err(bad(
            "signing certificate has a max path length of zero, and cannot issue further CA certificates",
        ));
    }
    Ok(match requested {
        Some(len) => len,
        None => match signer.max_path_len {
            None => -1,
            Some(len) => i64::from(len) - 1,
        },
    })
}

/// `root/sign-intermediate` and `issuer/<ref>/sign-intermediate`.
pub(crate) async fn sign_intermediate(
    mount: &Mount,
    request: &Request,
    issuer_ref: &str,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let format = render::format(data)?;
    if fields::bool(data, "use_pss")?.unwrap_or(false) {
        return Err(bad(
            "use_pss is not supported: this server signs with RSA PKCS#1 v1.5 only",
        ));
    }
    let mut role = generate::ca_role(data)?;
    role.key_type = "any".to_owned();
    role.signature_bits = fields::int(data, "signature_bits")?.unwrap_or(0);
    role.not_before = fields::string(data, "not_before")?.unwrap_or_default();
    role.use_csr_common_name = fields::string(data, "common_name")?
        .unwrap_or_default()
        .is_empty();
    let issuer = ca::signing_issuer(mount, issuer_ref).await?;
    crate::keys::check_signature_bits(issuer.cert.key_kind, role.signature_bits).map_err(bad)?;
    let text = fields::string(data, "csr")?.unwrap_or_default();
    if text.is_empty() {
        return Err(bad(r#""csr" is empty"#));
    }
    let csr = crate::cert::parse_csr(&text).map_err(bad)?;
    if crate::cert::spki_kind(&csr.spki) == Some(crate::keys::KeyKind::Rsa)
        && crate::cert::spki_bits(&csr.spki).unwrap_or(0) < 2048
    {
        return Err(bad("RSA keys < 2048 bits are unsafe and not supported"));
    }
    let use_csr_values = fields::bool(data, "use_csr_values")?.unwrap_or(false);
    let names = issue::names(&role, data, Some(&csr), "")?;
    let max_path_len = derived_path_len(&issuer.cert, fields::int(data, "max_path_length")?)?;
    let window = issue::validity(
        mount,
        request.ttls,
        &role,
        data,
        Some((&issuer.cert, "permit")),
    )?;
    let skid = match fields::string(data, "skid")?.filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => {
            let clean: String = text
                .chars()
                .filter(|c| !matches!(c, ':' | '-' | ' '))
                .collect();
            Some(stdx::hex::decode(&clean).ok_or_else(|| {
                bad(format!(
                    "cannot parse requested SKID value as hex: {text:?}"
                ))
            })?)
        }
    };
    let mut template = Template {
        subject: issue::subject(&role, &names),
        sans: names.sans.clone(),
        serial: ca::new_serial(mount).await?,
        not_before: window.not_before,
        not_after: window.not_after,
        is_ca: true,
        max_path_len,
        key_usage: ca_key_usage(data)?,
        ext_key_usage: requested_ext_key_usage(data)?,
        permitted_dns_domains: permitted_dns_domains(data)?,
        urls: ca::urls_for(mount, &issuer.record).await?,
        skid,
        ..Template::default()
    };
    if use_csr_values {
        template.raw_subject = Some(csr.subject_raw.clone());
        template.sans = csr.sans.clone();
        template.extra_extensions = csr.extensions.clone();
    }
    let der = template::build(
        &template,
        SubjectKey::Public(&csr.spki),
        Signer::Issuer(issuer.signer(role.signature_bits).map_err(bad)?),
        role.signature_bits,
    )
    .map_err(bad)?;
    let cert = CertInfo::from_der(&der).map_err(EngineError::Internal)?;
    ca::store_cert(
        mount,
        &cert.serial,
        &cert.der,
        cert.not_after,
        &issuer.record.id,
    )
    .await?;

    let mut response = signed_ca_answer(&issuer, &cert, format);
    response.warnings.extend(window.warnings);
    if cert.not_after > issuer.cert.not_after {
        response.warnings.push("The expiration time for the signed certificate is after the CA's expiration time. If the new certificate is not treated as a root, validation paths with the certificate past the issuing CA's expiration time will fail.".to_owned());
    }
    if template.urls.is_empty() {
        response.warnings.push(NO_AIA_WARNING.to_owned());
    }
    if max_path_len == 0 {
        response.warnings.push("Max path length of the signed certificate is zero. This certificate cannot be used to issue intermediate CA certificates.".to_owned());
    }
    Ok(Some(response))
}

/// sign-intermediate's answer: `ca_chain` is the new certificate then the issuer's chain.
fn signed_ca_answer(issuer: &SigningIssuer, cert: &CertInfo, format: Format) -> Response {
    let chain = issuer.chain();
    let mut out = Data::new();
    out.insert("expiration".to_owned(), Value::from(cert.not_after));
    out.insert(
        "serial_number".to_owned(),
        Value::String(cert.serial.clone()),
    );
    let certificate = match format {
        Format::PemBundle => render::bundle(None, &cert.der, chain),
        _ => render::cert(format, &cert.der),
    };
    out.insert("certificate".to_owned(), Value::String(certificate));
    out.insert(
        "issuing_ca".to_owned(),
        Value::String(render::cert(format, &issuer.cert.der)),
    );
    out.insert(
        "ca_chain".to_owned(),
        render::strings(
            std::iter::once(cert)
                .chain(chain.iter())
                .map(|c| render::cert(format, &c.der)),
        ),
    );
    Response::data(out)
}

/// `root/sign-self-issued` (sudo) and `issuer/<ref>/sign-self-issued`.
pub(crate) async fn sign_self_issued(
    mount: &Mount,
    request: &Request,
    issuer_ref: &str,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let text = fields::string(data, "certificate")?.unwrap_or_default();
    let blocks = certs_in_pem(&text);
    if blocks.is_empty() {
        return Err(bad("certificate could not be PEM-decoded"));
    }
    if blocks.len() != 1 {
        return Err(bad(format!(
            "{} certificates found in PEM file, expected 1",
            blocks.len()
        )));
    }
    let cert = CertInfo::from_der(&blocks[0])
        .map_err(|err| bad(format!("error parsing certificate: {err}")))?;
    if !cert.is_ca {
        return Err(bad("given certificate is not a CA certificate"));
    }
    if cert.subject_raw != cert.issuer_raw {
        return Err(bad("given certificate is not self-issued"));
    }
    let issuer = ca::signing_issuer(mount, issuer_ref).await?;
    let require_matching =
        fields::bool(data, "require_matching_certificate_algorithms")?.unwrap_or(false);
    if require_matching && issuer.cert.key_kind != cert.key_kind {
        let name =
            |k: Option<crate::keys::KeyKind>| k.map_or("unknown", |k| k.name()).to_uppercase();
        return Err(bad(format!(
            "signing certificate's public key algorithm ({}) does not match submitted certificate's ({}), and require_matching_certificate_algorithms is true",
            name(issuer.cert.key_kind),
            name(cert.key_kind)
        )));
    }
    let template = Template {
        raw_subject: Some(cert.subject_raw.clone()),
        sans: cert_sans(&cert.der),
        serial: cert.serial_bytes.clone(),
        not_before: cert.not_before,
        not_after: cert.not_after,
        is_ca: true,
        max_path_len: cert.max_path_len.map_or(-1, i64::from),
        skid: cert.skid.clone(),
        urls: ca::urls_for(mount, &issuer.record).await?,
        extra_extensions: cert_extensions(&cert.der),
        ..Template::default()
    };
    let der = template::build(
        &template,
        SubjectKey::Public(&cert.spki),
        Signer::Issuer(issuer.signer(0).map_err(bad)?),
        0,
    )
    .map_err(bad)?;
    let signed = CertInfo::from_der(&der).map_err(EngineError::Internal)?;
    let mut out = Data::new();
    out.insert(
        "certificate".to_owned(),
        Value::String(signed.pem_trimmed()),
    );
    out.insert(
        "issuing_ca".to_owned(),
        Value::String(issuer.cert.pem_trimmed()),
    );
    Ok(Some(Response::data(out)))
}
