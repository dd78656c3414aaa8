//! Certificate revocation lists: one per issuer (`crls/<issuer id>`), each with its own
//! entries, so revoking a certificate rebuilds only its issuer's CRL; `crl`, `crl/pem` (the
//! default issuer's), `issuer/<ref>/crl[/der|/pem]`, `config/crl`, `crl/rotate`.
//!
//! A CRL is signed by its issuer's key with the CRL number one above the last, `thisUpdate`
//! now and `nextUpdate` now plus `config/crl`'s `expiry` (72h by default); with `disable` set
//! it lists nothing. An issuer without a key or without the `crl-signing` usage has no CRL.
//!
//! Invariants: CRL rebuilds hold the mount's issuers lock or run inside a caller that does;
//! the entry list is the source of truth, the DER is derived from it.

use std::time::Duration;

use secrets_sdk::{Data, EngineError, RawResponse, Request, Response, fields};
use serde_json::{Value, json};

use crate::ca;
use crate::cert::CertInfo;
use crate::mount::Mount;
use crate::pem;
use crate::store::{CrlConfig, CrlEntry, DEFAULT_REF};
use crate::template::{self, RevokedEntry};

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

fn expiry(config: &CrlConfig) -> Duration {
    secrets_sdk::fields::parse_duration(&config.expiry).unwrap_or(Duration::from_secs(72 * 3600))
}

/// Re-signs `issuer_id`'s CRL from its stored entries (a no-op for an issuer that cannot sign
/// CRLs).
pub(crate) async fn rebuild(mount: &Mount, issuer_id: &str) -> Result<(), EngineError> {
    let Some(record) = mount.store.issuer(issuer_id).await? else {
        return Ok(());
    };
    if record.key_id.is_empty() || !record.has_usage("crl-signing") {
        return Ok(());
    }
    let issuer = ca::load_signing(mount, record, "crl-signing").await?;
    let config = mount.store.crl_config().await?;
    let mut crl = mount.store.crl(issuer_id).await?.unwrap_or_default();
    crl.number += 1;
    let now = mount.now();
    let revoked: Vec<RevokedEntry> = if config.disable {
        Vec::new()
    } else {
        crl.entries
            .iter()
            .filter_map(|entry| {
                let bytes = stdx::hex::decode(&entry.serial.replace('-', ""))?;
                Some(RevokedEntry {
                    serial_bytes: bytes,
                    revocation_time: entry.revocation_time,
                })
            })
            .collect()
    };
    let next = now + i64::try_from(expiry(&config).as_secs()).unwrap_or(72 * 3600);
    let der = template::crl(&issuer.cert, &issuer.key, crl.number, now, next, &revoked)
        .map_err(|err| EngineError::BadRequest(format!("Error during CRL building: {err}")))?;
    crl.der = pem::base64(&der);
    mount.store.put_crl(issuer_id, &crl).await
}

/// Adds a revoked certificate to its issuer's CRL and rebuilds that CRL.
pub(crate) async fn add_entry(
    mount: &Mount,
    issuer_id: &str,
    entry: CrlEntry,
) -> Result<(), EngineError> {
    let mut crl = mount.store.crl(issuer_id).await?.unwrap_or_default();
    if !crl.entries.iter().any(|e| e.serial == entry.serial) {
        crl.entries.push(entry);
        mount.store.put_crl(issuer_id, &crl).await?;
    }
    rebuild(mount, issuer_id).await
}

/// The current CRL DER of an issuer, built on first use.
async fn current(mount: &Mount, issuer_id: &str) -> Result<Option<Vec<u8>>, EngineError> {
    let existing = mount.store.crl(issuer_id).await?;
    if existing.as_ref().is_none_or(|crl| crl.der.is_empty()) {
        let _guard = mount.issuers_lock.lock().await;
        rebuild(mount, issuer_id).await?;
    }
    Ok(mount
        .store
        .crl(issuer_id)
        .await?
        .and_then(|crl| pem::from_base64(&crl.der))
        .filter(|der| !der.is_empty()))
}

fn raw(content_type: &str, body: Vec<u8>) -> Response {
    Response {
        raw: Some(RawResponse {
            status: if body.is_empty() { 204 } else { 200 },
            content_type: content_type.to_owned(),
            body,
        }),
        ..Response::default()
    }
}

fn crl_pem(der: &[u8]) -> String {
    pem::encode("X509 CRL", der).trim_end().to_owned()
}

/// `crl` (DER) and `crl/pem`: the default issuer's CRL; an empty 204 when there is none.
pub(crate) async fn fetch_default(
    mount: &Mount,
    as_pem: bool,
) -> Result<Option<Response>, EngineError> {
    let der = match mount.store.resolve_issuer(DEFAULT_REF).await? {
        Some(id) => current(mount, &id).await?.unwrap_or_default(),
        None => Vec::new(),
    };
    Ok(Some(if as_pem {
        let body = if der.is_empty() {
            Vec::new()
        } else {
            crl_pem(&der).into_bytes()
        };
        raw("application/x-pem-file", body)
    } else {
        raw("application/pkix-crl", der)
    }))
}

/// `cert/crl`: the default issuer's CRL as JSON.
pub(crate) async fn fetch_default_json(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let der = match mount.store.resolve_issuer(DEFAULT_REF).await? {
        Some(id) => current(mount, &id).await?.unwrap_or_default(),
        None => Vec::new(),
    };
    let mut data = Data::new();
    data.insert(
        "certificate".to_owned(),
        Value::String(if der.is_empty() {
            String::new()
        } else {
            crl_pem(&der)
        }),
    );
    data.insert("revocation_time".to_owned(), Value::from(0));
    data.insert(
        "revocation_time_rfc3339".to_owned(),
        Value::String(String::new()),
    );
    Ok(Some(Response::data(data)))
}

/// How `issuer/<ref>/crl...` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CrlForm {
    Json,
    Der,
    Pem,
}

/// `issuer/<ref>/crl` (`{"crl": pem}`), `/crl/der`, `/crl/pem`.
pub(crate) async fn fetch_issuer(
    mount: &Mount,
    reference: &str,
    form: CrlForm,
) -> Result<Option<Response>, EngineError> {
    let issuer = mount.store.require_issuer(reference).await?;
    let der = current(mount, &issuer.id).await?.unwrap_or_default();
    Ok(Some(match form {
        CrlForm::Json => Response::data(
            json!({"crl": if der.is_empty() { String::new() } else { crl_pem(&der) }})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
        CrlForm::Der => raw("application/pkix-crl", der),
        CrlForm::Pem => {
            let body = if der.is_empty() {
                Vec::new()
            } else {
                crl_pem(&der).into_bytes()
            };
            raw("application/x-pem-file", body)
        }
    }))
}

/// `crl/rotate`: every issuer's CRL re-signed.
pub(crate) async fn rotate(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let _guard = mount.issuers_lock.lock().await;
    for id in mount.store.issuer_ids().await? {
        rebuild(mount, &id).await?;
    }
    Ok(Some(Response::data(
        json!({"success": true})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )))
}

fn config_data(config: &CrlConfig) -> Data {
    json!({
        "expiry": config.expiry,
        "disable": config.disable,
        "ocsp_disable": config.ocsp_disable,
        "auto_rebuild": config.auto_rebuild,
        "auto_rebuild_grace_period": config.auto_rebuild_grace_period,
        "ocsp_expiry": config.ocsp_expiry,
        "enable_delta": config.enable_delta,
        "delta_rebuild_interval": config.delta_rebuild_interval,
        "cross_cluster_revocation": false,
        "unified_crl": false,
        "unified_crl_on_existing_paths": false,
    })
    .as_object()
    .cloned()
    .unwrap_or_default()
}

/// `GET config/crl`.
pub(crate) async fn read_config(mount: &Mount) -> Result<Option<Response>, EngineError> {
    Ok(Some(Response::data(config_data(
        &mount.store.crl_config().await?,
    ))))
}

/// `POST config/crl`: only the given fields change; every CRL is rebuilt when `disable` or
/// `expiry` changed.
pub(crate) async fn write_config(
    mount: &Mount,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let _guard = mount.issuers_lock.lock().await;
    let mut config = mount.store.crl_config().await?;
    let before = (config.expiry.clone(), config.disable);
    for (name, slot) in [
        ("expiry", &mut config.expiry),
        (
            "auto_rebuild_grace_period",
            &mut config.auto_rebuild_grace_period,
        ),
        ("ocsp_expiry", &mut config.ocsp_expiry),
        ("delta_rebuild_interval", &mut config.delta_rebuild_interval),
    ] {
        if let Some(value) = fields::string(data, name)? {
            secrets_sdk::fields::parse_duration(&value)
                .map_err(|err| bad(format!("given {name} could not be decoded: {err}")))?;
            *slot = value;
        }
    }
    for (name, slot) in [
        ("disable", &mut config.disable),
        ("ocsp_disable", &mut config.ocsp_disable),
        ("auto_rebuild", &mut config.auto_rebuild),
        ("enable_delta", &mut config.enable_delta),
    ] {
        if let Some(value) = fields::bool(data, name)? {
            *slot = value;
        }
    }
    if config.enable_delta && !config.auto_rebuild {
        return Err(bad(
            "Delta CRLs cannot be enabled when auto rebuilding is disabled as the complete CRL is always regenerated!",
        ));
    }
    mount.store.put_crl_config(&config).await?;
    if before != (config.expiry.clone(), config.disable) {
        for id in mount.store.issuer_ids().await? {
            rebuild(mount, &id).await?;
        }
    }
    Ok(Some(Response::data(config_data(&config))))
}

/// Which issuer of the mount signed `cert` (the stored issuer id first).
pub(crate) async fn issuer_of(
    mount: &Mount,
    cert: &CertInfo,
    stored: &str,
) -> Result<Option<String>, EngineError> {
    if !stored.is_empty() && mount.store.issuer(stored).await?.is_some() {
        return Ok(Some(stored.to_owned()));
    }
    for issuer in mount.store.issuers().await? {
        if cert.signed_by(&issuer.cert()?) {
            return Ok(Some(issuer.id));
        }
    }
    Ok(None)
}
