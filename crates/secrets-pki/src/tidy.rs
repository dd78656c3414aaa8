//! `tidy` and `tidy-status`: dropping certificates (`tidy_cert_store`) and revocation entries
//! (`tidy_revoked_certs`) whose certificates expired more than `safety_buffer` ago (72h by
//! default), and taking the dropped entries off their issuers' CRLs.
//!
//! Tidy runs inline, in the request that asks for it (no background task: the status it
//! leaves is final when the answer arrives), and answers with Vault's "started" warning;
//! `tidy-status` reports the last run.
//!
//! Invariant: tidy holds the issuers lock while it edits CRL entries, and never removes a
//! certificate that has not expired.

use std::time::Duration;

use secrets_sdk::{Data, EngineError, Request, Response, fields};
use serde_json::{Value, json};

use crate::cert::CertInfo;
use crate::crl;
use crate::mount::Mount;
use crate::store::{CERT_PREFIX, CertRecord, REVOKED_PREFIX, RevokedRecord};
use crate::tidy_status::TidyStatus;
use crate::validity::format_time;

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

/// `POST tidy`.
pub(crate) async fn tidy(
    mount: &Mount,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let tidy_cert_store = fields::bool(data, "tidy_cert_store")?.unwrap_or(false);
    let tidy_revoked_certs = fields::bool(data, "tidy_revoked_certs")?.unwrap_or(false)
        || fields::bool(data, "tidy_revocation_list")?.unwrap_or(false);
    let safety_buffer =
        fields::duration(data, "safety_buffer")?.unwrap_or(Duration::from_secs(72 * 3600));
    if safety_buffer.is_zero() {
        return Err(bad("safety_buffer must be greater than zero"));
    }
    if !tidy_cert_store && !tidy_revoked_certs {
        return Err(bad("at least one operation must be enabled"));
    }
    let started = mount.now();
    {
        let mut status = mount
            .tidy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *status = TidyStatus {
            state: "Running".to_owned(),
            safety_buffer: safety_buffer.as_secs(),
            tidy_cert_store,
            tidy_revoked_certs,
            time_started: Some(started),
            ..TidyStatus::default()
        };
    }
    let outcome = run(mount, tidy_cert_store, tidy_revoked_certs, safety_buffer).await;
    let finished = mount.now();
    let mut status = mount
        .tidy
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    status.time_finished = Some(finished);
    match outcome {
        Ok(counts) => {
            status.state = "Finished".to_owned();
            status.cert_store_deleted_count = counts.0;
            status.revoked_cert_deleted_count = counts.1;
            status.current_cert_store_count = counts.2;
            status.current_revoked_cert_count = counts.3;
        }
        Err(err) => {
            status.state = "Error".to_owned();
            status.error = Some(err.to_string());
            return Err(err);
        }
    }
    Ok(Some(Response::default().with_warning(
        "Tidy operation successfully started. Any information from the operation will be printed to the server's logs.",
    )))
}

/// (certs deleted, revocations deleted, certs left, revocations left).
async fn run(
    mount: &Mount,
    cert_store: bool,
    revoked: bool,
    buffer: Duration,
) -> Result<(u64, u64, u64, u64), EngineError> {
    let cutoff = mount.now() - i64::try_from(buffer.as_secs()).unwrap_or(i64::MAX / 2);
    let _guard = mount.issuers_lock.lock().await;
    let (mut certs_deleted, mut revoked_deleted) = (0u64, 0u64);
    let mut touched_issuers: Vec<String> = Vec::new();
    let serials = mount.store.list(CERT_PREFIX).await?;
    let mut certs_left = serials.len() as u64;
    if cert_store {
        for serial in &serials {
            let key = format!("{CERT_PREFIX}{serial}");
            let Some(record) = mount.store.get::<CertRecord>(&key).await? else {
                continue;
            };
            let not_after = if record.not_after != 0 {
                record.not_after
            } else {
                CertInfo::from_pem(&record.certificate).map_or(i64::MAX, |c| c.not_after)
            };
            if not_after < cutoff {
                mount.store.delete(&key).await?;
                certs_deleted += 1;
                certs_left -= 1;
            }
        }
    }
    let revoked_serials = mount.store.list(REVOKED_PREFIX).await?;
    let mut revoked_left = revoked_serials.len() as u64;
    if revoked {
        for serial in &revoked_serials {
            let key = format!("{REVOKED_PREFIX}{serial}");
            let Some(record) = mount.store.get::<RevokedRecord>(&key).await? else {
                continue;
            };
            if record.not_after < cutoff {
                mount.store.delete(&key).await?;
                revoked_deleted += 1;
                revoked_left -= 1;
                if let Some(mut entry) = mount.store.crl(&record.issuer_id).await? {
                    entry.entries.retain(|e| &e.serial != serial);
                    mount.store.put_crl(&record.issuer_id, &entry).await?;
                    if !touched_issuers.contains(&record.issuer_id) {
                        touched_issuers.push(record.issuer_id.clone());
                    }
                }
            }
        }
    }
    for issuer in touched_issuers {
        crl::rebuild(mount, &issuer).await?;
    }
    Ok((certs_deleted, revoked_deleted, certs_left, revoked_left))
}

/// `GET tidy-status`.
pub(crate) async fn status(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let status = mount
        .tidy
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let time = |t: Option<i64>| t.map_or(Value::Null, |t| Value::String(format_time(t)));
    let data: Data = json!({
        "safety_buffer": status.safety_buffer,
        "tidy_cert_store": status.tidy_cert_store,
        "tidy_revoked_certs": status.tidy_revoked_certs,
        "tidy_revoked_cert_issuer_associations": false,
        "tidy_expired_issuers": false,
        "state": if status.state.is_empty() { "Inactive".to_owned() } else { status.state.clone() },
        "error": status.error,
        "time_started": time(status.time_started),
        "time_finished": time(status.time_finished),
        "message": Value::Null,
        "cert_store_deleted_count": status.cert_store_deleted_count,
        "revoked_cert_deleted_count": status.revoked_cert_deleted_count,
        "missing_issuer_cert_count": 0,
        "current_cert_store_count": status.current_cert_store_count,
        "current_revoked_cert_count": status.current_revoked_cert_count,
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    Ok(Some(Response::data(data)))
}
