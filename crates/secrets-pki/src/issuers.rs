//! Issuer and key management: `LIST issuers`, `issuer/<ref>` (read, update, patch, delete),
//! `issuer/<ref>/json|pem|der` (unauthenticated), `config/issuers` (the default issuer),
//! `LIST keys`, `key/<ref>` (read, rename, delete), `config/keys`, and `config/urls` (the AIA
//! and CRL distribution URLs embedded in issued certificates).
//!
//! Rules kept from upstream: `POST issuer/<ref>` sets every field, absent ones to their
//! defaults (`PATCH` changes only what it is given); names are unique and never `default`;
//! `usage` names are `read-only`, `issuing-certificates`, `crl-signing`, `ocsp-signing`;
//! `manual_chain` (issuer references or `self`) replaces the computed chain; deleting the
//! default issuer leaves no default (with a warning); a key in use by an issuer cannot be
//! deleted.
//!
//! Invariant: every write holds the mount's issuers lock and ends with the chains rebuilt.

use secrets_sdk::{Data, EngineError, Operation, RawResponse, Request, Response, fields};
use serde_json::{Value, json};

use crate::ca::{check_name, rebuild_chains};
use crate::mount::Mount;
use crate::store::{IssuerRecord, KEY_PREFIX, UrlsConfig};

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

fn object(value: Value) -> Data {
    value.as_object().cloned().unwrap_or_default()
}

/// The issuer read response.
pub(crate) fn issuer_data(issuer: &IssuerRecord) -> Data {
    let urls = issuer.urls.clone().unwrap_or_default();
    let mut data = object(json!({
        "issuer_id": issuer.id,
        "issuer_name": issuer.name,
        "key_id": issuer.key_id,
        "certificate": issuer.certificate,
        "manual_chain": if issuer.manual_chain.is_empty() { Value::Null } else { json!(issuer.manual_chain) },
        "ca_chain": issuer.ca_chain,
        "leaf_not_after_behavior": issuer.leaf_not_after_behavior,
        "usage": issuer.usage.join(","),
        "revocation_signature_algorithm": issuer.revocation_signature_algorithm,
        "revoked": issuer.revoked,
        "issuing_certificates": urls.issuing_certificates,
        "crl_distribution_points": urls.crl_distribution_points,
        "delta_crl_distribution_points": [],
        "ocsp_servers": urls.ocsp_servers,
    }));
    if issuer.urls.is_some() {
        data.insert(
            "enable_aia_url_templating".to_owned(),
            Value::Bool(urls.enable_templating),
        );
    }
    data
}

/// `LIST issuers`: ids with `key_info` (name, default flag, serial, key id).
pub(crate) async fn list(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let config = mount.store.issuers_config().await?;
    let mut keys = Vec::new();
    let mut info = Data::new();
    for issuer in mount.store.issuers().await? {
        info.insert(
            issuer.id.clone(),
            json!({
                "issuer_name": issuer.name,
                "is_default": issuer.id == config.default,
                "serial_number": issuer.serial_number,
                "key_id": issuer.key_id,
            }),
        );
        keys.push(issuer.id);
    }
    let mut response = Response::list(keys);
    if let Some(data) = response.data.as_mut() {
        data.insert("key_info".to_owned(), Value::Object(info));
    }
    Ok(Some(response))
}

pub(crate) async fn read(mount: &Mount, reference: &str) -> Result<Option<Response>, EngineError> {
    let issuer = mount.store.require_issuer(reference).await?;
    Ok(Some(Response::data(issuer_data(&issuer))))
}

/// How `issuer/<ref>/...` shows the certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawForm {
    Json,
    Pem,
    Der,
}

/// `issuer/<ref>/json`, `/pem`, `/der`.
pub(crate) async fn read_raw(
    mount: &Mount,
    reference: &str,
    form: RawForm,
) -> Result<Option<Response>, EngineError> {
    let issuer = mount.store.require_issuer(reference).await?;
    let raw = |content_type: &str, body: Vec<u8>| Response {
        raw: Some(RawResponse {
            status: 200,
            content_type: content_type.to_owned(),
            body,
        }),
        ..Response::default()
    };
    Ok(Some(match form {
        RawForm::Json => Response::data(object(json!({
            "certificate": issuer.certificate,
            "ca_chain": issuer.ca_chain,
            "issuer_id": issuer.id,
            "issuer_name": issuer.name,
        }))),
        RawForm::Pem => raw(
            "application/pem-certificate-chain",
            issuer.certificate.clone().into_bytes(),
        ),
        RawForm::Der => raw("application/pkix-cert", issuer.cert()?.der),
    }))
}

fn usage_names(list: &[String]) -> Result<Vec<String>, EngineError> {
    let known = crate::store::all_usages();
    let mut out: Vec<String> = Vec::new();
    for (index, name) in list.iter().enumerate() {
        if !known.contains(name) {
            return Err(bad(format!(
                "unknown name for usage at index {index}: {name}"
            )));
        }
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out.sort();
    Ok(out)
}

fn check_urls(field: &str, urls: &[String]) -> Result<(), EngineError> {
    for url in urls {
        let ok = url
            .split_once("://")
            .is_some_and(|(scheme, rest)| !scheme.is_empty() && !rest.is_empty())
            && !url.chars().any(char::is_whitespace);
        if !ok {
            return Err(bad(format!(
                "invalid URL found in Authority Information Access (AIA) parameter {field}: {url}"
            )));
        }
    }
    Ok(())
}

/// `POST` (every field, defaults for absent ones) and `PATCH` (given fields) on
/// `issuer/<ref>`.
pub(crate) async fn update(
    mount: &Mount,
    request: &Request,
    reference: &str,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let patch = request.operation == Operation::Patch;
    let _guard = mount.issuers_lock.lock().await;
    let mut issuer = mount.store.require_issuer(reference).await.map_err(|_| {
        bad(format!(
            "unable to resolve issuer id for reference: {reference}"
        ))
    })?;
    let mut response = Response::default();

    match fields::string(data, "issuer_name")? {
        Some(name) => {
            let name = name.trim().to_owned();
            if !name.is_empty() {
                check_name(&name, "issuer")?;
                if let Some(other) = mount.store.resolve_issuer(&name).await?
                    && other != issuer.id
                {
                    return Err(bad("issuer name already in use"));
                }
            }
            issuer.name = name;
        }
        None if !patch => issuer.name = String::new(),
        None => {}
    }
    match fields::string(data, "leaf_not_after_behavior")? {
        Some(behavior) => match behavior.as_str() {
            "err" | "truncate" | "permit" => issuer.leaf_not_after_behavior = behavior,
            _ => {
                return Err(bad(
                    r#"Unknown value for field `leaf_not_after_behavior`. Possible values are `err`, `truncate`, and `permit`."#,
                ));
            }
        },
        None if !patch => issuer.leaf_not_after_behavior = "err".to_owned(),
        None => {}
    }
    match fields::comma_list(data, "usage")? {
        Some(list) => issuer.usage = usage_names(&list)?,
        None if !patch => issuer.usage = crate::store::all_usages(),
        None => {}
    }
    if let Some(alg) = fields::string(data, "revocation_signature_algorithm")? {
        issuer.revocation_signature_algorithm = alg;
    }
    match fields::comma_list(data, "manual_chain")? {
        Some(chain) => {
            let mut ids = Vec::new();
            for entry in chain {
                let id = if entry == "self" {
                    issuer.id.clone()
                } else {
                    mount.store.resolve_issuer(&entry).await?.ok_or_else(|| {
                        bad(format!(
                            "unable to resolve issuer id for reference: {entry}"
                        ))
                    })?
                };
                ids.push(id);
            }
            if !ids.is_empty() && ids[0] != issuer.id {
                return Err(bad(
                    "expected first cert in chain to be a self-reference, but was: ".to_owned()
                        + &ids[0],
                ));
            }
            issuer.manual_chain = ids;
        }
        None if !patch => issuer.manual_chain = Vec::new(),
        None => {}
    }
    let url_fields = [
        "issuing_certificates",
        "crl_distribution_points",
        "ocsp_servers",
        "enable_aia_url_templating",
    ];
    if url_fields
        .iter()
        .any(|f| data.get(*f).is_some_and(|v| !v.is_null()))
    {
        let mut urls = issuer.urls.clone().unwrap_or_default();
        for (name, slot) in [
            ("issuing_certificates", &mut urls.issuing_certificates),
            ("crl_distribution_points", &mut urls.crl_distribution_points),
            ("ocsp_servers", &mut urls.ocsp_servers),
        ] {
            if let Some(list) = fields::comma_list(data, name)? {
                *slot = list;
            }
        }
        if let Some(templating) = fields::bool(data, "enable_aia_url_templating")? {
            urls.enable_templating = templating;
        }
        if !urls.enable_templating {
            check_urls("issuing_certificates", &urls.issuing_certificates)?;
            check_urls("crl_distribution_points", &urls.crl_distribution_points)?;
            check_urls("ocsp_servers", &urls.ocsp_servers)?;
        }
        issuer.urls = (urls != UrlsConfig::default()).then_some(urls);
    } else if !patch {
        issuer.urls = None;
    }
    if issuer.leaf_not_after_behavior != "err"
        && issuer.usage.iter().all(|u| u != "issuing-certificates")
    {
        response.warnings.push(
            "Issuer's leaf_not_after_behavior only matters with the issuing-certificates usage"
                .to_owned(),
        );
    }
    mount.store.put_issuer(&issuer).await?;
    rebuild_chains(mount).await?;
    let issuer = mount.store.issuer(&issuer.id).await?.unwrap_or(issuer);
    response.data = Some(issuer_data(&issuer));
    Ok(Some(response))
}

/// `DELETE issuer/<ref>`.
pub(crate) async fn delete(
    mount: &Mount,
    reference: &str,
) -> Result<Option<Response>, EngineError> {
    let _guard = mount.issuers_lock.lock().await;
    let Some(id) = mount.store.resolve_issuer(reference).await? else {
        return Ok(None);
    };
    mount.store.delete_issuer(&id).await?;
    mount.signers.forget(&id);
    let mut response = Response::default();
    let mut config = mount.store.issuers_config().await?;
    if config.default == id {
        config.default = String::new();
        mount.store.put_issuers_config(&config).await?;
        response.warnings.push(format!("Deleted issuer {id} (via issuer_ref {reference}); this was configured as the default issuer. Operations without an explicit issuer will not work until a new default is configured."));
    }
    rebuild_chains(mount).await?;
    Ok((!response.warnings.is_empty()).then_some(response))
}

/// `GET config/issuers`.
pub(crate) async fn read_config(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let config = mount.store.issuers_config().await?;
    Ok(Some(Response::data(object(json!({
        "default": config.default,
        "default_follows_latest_issuer": config.default_follows_latest_issuer,
    })))))
}

/// `POST config/issuers` (`default`, `default_follows_latest_issuer`).
pub(crate) async fn write_config(
    mount: &Mount,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let _guard = mount.issuers_lock.lock().await;
    let mut config = mount.store.issuers_config().await?;
    let mut response = Response::default();
    if let Some(reference) = fields::string(data, "default")? {
        if reference.is_empty() {
            return Err(bad(
                "Invalid issuer specification; must be non-empty and can't be 'default'.",
            ));
        }
        let id = mount
            .store
            .resolve_issuer(&reference)
            .await?
            .filter(|_| reference != "default")
            .ok_or_else(|| bad(format!("Error resolving issuer reference: unable to find PKI issuer for reference: {reference}")))?;
        if let Some(issuer) = mount.store.issuer(&id).await?
            && issuer.key_id.is_empty()
        {
            response.warnings.push("This selected default issuer has no key associated with it. Some operations like issuing certificates and signing CRLs will be unavailable with the requested default issuer until a key is imported or the default issuer is changed.".to_owned());
        }
        config.default = id;
    }
    if let Some(follows) = fields::bool(data, "default_follows_latest_issuer")? {
        config.default_follows_latest_issuer = follows;
    }
    mount.store.put_issuers_config(&config).await?;
    response.data = Some(object(json!({
        "default": config.default,
        "default_follows_latest_issuer": config.default_follows_latest_issuer,
    })));
    Ok(Some(response))
}

/// `LIST keys`.
pub(crate) async fn list_keys(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let mut keys = Vec::new();
    let mut info = Data::new();
    for key in mount.store.keys().await? {
        info.insert(key.id.clone(), json!({"key_name": key.name}));
        keys.push(key.id);
    }
    let mut response = Response::list(keys);
    if let Some(data) = response.data.as_mut() {
        data.insert("key_info".to_owned(), Value::Object(info));
    }
    Ok(Some(response))
}

async fn require_key(
    mount: &Mount,
    reference: &str,
) -> Result<crate::store::KeyRecord, EngineError> {
    let id = mount
        .store
        .resolve_key(reference)
        .await?
        .ok_or_else(|| bad(format!("unable to find PKI key for reference: {reference}")))?;
    mount
        .store
        .key(&id)
        .await?
        .ok_or_else(|| bad(format!("unable to find PKI key for reference: {reference}")))
}

fn key_data(key: &crate::store::KeyRecord) -> Result<Data, EngineError> {
    let spki = key
        .private_key()?
        .public_key_der()
        .map_err(EngineError::Internal)?;
    Ok(object(json!({
        "key_id": key.id,
        "key_name": key.name,
        "key_type": key.key_type,
        "subject_key_id": crate::cert::format_serial(&crate::template::key_id(&spki)),
    })))
}

/// `GET key/<ref>`.
pub(crate) async fn read_key(
    mount: &Mount,
    reference: &str,
) -> Result<Option<Response>, EngineError> {
    let key = require_key(mount, reference).await?;
    Ok(Some(Response::data(key_data(&key)?)))
}

/// `POST key/<ref>` (`key_name`).
pub(crate) async fn update_key(
    mount: &Mount,
    request: &Request,
    reference: &str,
) -> Result<Option<Response>, EngineError> {
    let _guard = mount.issuers_lock.lock().await;
    let mut key = require_key(mount, reference).await?;
    let name = fields::string(&request.data, "key_name")?.unwrap_or_default();
    let name = name.trim().to_owned();
    if !name.is_empty() {
        check_name(&name, "key")?;
        if let Some(other) = mount.store.resolve_key(&name).await?
            && other != key.id
        {
            return Err(bad("key name already in use"));
        }
    }
    key.name = name;
    mount.store.put_key(&key).await?;
    Ok(Some(Response::data(key_data(&key)?)))
}

/// `DELETE key/<ref>`: refused while an issuer uses the key.
pub(crate) async fn delete_key(
    mount: &Mount,
    reference: &str,
) -> Result<Option<Response>, EngineError> {
    let _guard = mount.issuers_lock.lock().await;
    let Some(id) = mount.store.resolve_key(reference).await? else {
        return Ok(None);
    };
    if let Some(issuer) = mount
        .store
        .issuers()
        .await?
        .into_iter()
        .find(|i| i.key_id == id)
    {
        return Err(bad(format!(
            "Failed to Delete Key.  Key in Use by Issuer: {}",
            issuer.id
        )));
    }
    mount.store.delete(&format!("{KEY_PREFIX}{id}")).await?;
    let mut config = mount.store.keys_config().await?;
    if config.default == id {
        config.default = String::new();
        mount.store.put_keys_config(&config).await?;
    }
    Ok(None)
}

/// `GET config/keys`.
pub(crate) async fn read_keys_config(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let config = mount.store.keys_config().await?;
    Ok(Some(Response::data(object(
        json!({"default": config.default}),
    ))))
}

/// `POST config/keys` (`default`).
pub(crate) async fn write_keys_config(
    mount: &Mount,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let _guard = mount.issuers_lock.lock().await;
    let mut config = mount.store.keys_config().await?;
    if let Some(reference) = fields::string(&request.data, "default")? {
        config.default = require_key(mount, &reference).await?.id;
    }
    mount.store.put_keys_config(&config).await?;
    Ok(Some(Response::data(object(
        json!({"default": config.default}),
    ))))
}

fn urls_data(urls: &UrlsConfig) -> Data {
    object(json!({
        "issuing_certificates": urls.issuing_certificates,
        "crl_distribution_points": urls.crl_distribution_points,
        "delta_crl_distribution_points": [],
        "ocsp_servers": urls.ocsp_servers,
        "enable_templating": urls.enable_templating,
    }))
}

/// `GET config/urls`.
pub(crate) async fn read_urls(mount: &Mount) -> Result<Option<Response>, EngineError> {
    Ok(Some(Response::data(urls_data(
        &mount.store.urls_config().await?,
    ))))
}

/// `POST config/urls`: the given lists replace the stored ones.
pub(crate) async fn write_urls(
    mount: &Mount,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let mut urls = mount.store.urls_config().await?;
    for (name, slot) in [
        ("issuing_certificates", &mut urls.issuing_certificates),
        ("crl_distribution_points", &mut urls.crl_distribution_points),
        ("ocsp_servers", &mut urls.ocsp_servers),
    ] {
        if let Some(list) = fields::comma_list(data, name)? {
            *slot = list;
        }
    }
    if let Some(templating) = fields::bool(data, "enable_templating")? {
        urls.enable_templating = templating;
    }
    if !urls.enable_templating {
        check_urls("issuing_certificates", &urls.issuing_certificates)?;
        check_urls("crl_distribution_points", &urls.crl_distribution_points)?;
        check_urls("ocsp_servers", &urls.ocsp_servers)?;
    }
    mount.store.put_urls_config(&urls).await?;
    Ok(None)
}
