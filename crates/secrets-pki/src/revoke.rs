//! `revoke` (by `serial_number`, or by `certificate` for one issued here or signed by an
//! issuer of the mount) and the revocation behind a leased certificate's expiry
//! (`Engine::revoke`).
//!
//! Rules kept from upstream: an issuer's own certificate cannot be revoked this way; revoking
//! twice answers the first revocation; an expired certificate is not added (a warning says
//! so); the certificate's issuer's CRL is rebuilt at once.
//!
//! Invariant: the revocation record and the CRL entry are written under the issuers lock, so
//! concurrent revocations never lose an entry.

use secrets_sdk::{Data, EngineError, Request, Response, fields};
use serde_json::Value;

use crate::cert::{CertInfo, certs_in_pem, normalize_serial};
use crate::crl;
use crate::mount::Mount;
use crate::store::{CertRecord, CrlEntry, REVOKED_PREFIX, RevokedRecord};
use crate::validity::format_time;

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

/// `POST revoke`.
pub(crate) async fn revoke(
    mount: &Mount,
    request: &Request,
) -> Result<Option<Response>, EngineError> {
    let data = &request.data;
    let serial = fields::string(data, "serial_number")?;
    let certificate = fields::string(data, "certificate")?;
    let (cert, stored_issuer, write_cert) = match (serial, certificate) {
        (None, None) => {
            return Err(bad(
                "The serial number or certificate to revoke must be provided.",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(bad(
                "Must provide either the certificate or the serial to revoke; not both.",
            ));
        }
        (Some(serial), None) => {
            if serial.is_empty() {
                return Err(bad("The serial number must be provided"));
            }
            let key = normalize_serial(&serial)
                .ok_or_else(|| bad(format!("certificate with serial {serial} not found.")))?;
            let record = mount
                .store
                .cert(&key)
                .await?
                .ok_or_else(|| bad(format!("certificate with serial {serial} not found.")))?;
            let cert = CertInfo::from_pem(&record.certificate).map_err(EngineError::Internal)?;
            (cert, record.issuer_id, false)
        }
        (None, Some(text)) => {
            if text.len() < 75 {
                return Err(bad(
                    "provided certificate data was too short; perhaps a path was passed to the API rather than the contents of a PEM file",
                ));
            }
            let der = certs_in_pem(&text)
                .into_iter()
                .next()
                .ok_or_else(|| bad("certificate contains no PEM data"))?;
            let cert = CertInfo::from_der(&der)
                .map_err(|err| bad(format!("certificate could not be parsed: {err}")))?;
            let key = normalize_serial(&cert.serial).unwrap_or_default();
            match mount.store.cert(&key).await? {
                Some(record) => {
                    let stored =
                        CertInfo::from_pem(&record.certificate).map_err(EngineError::Internal)?;
                    if stored.der != cert.der {
                        return Err(bad(
                            "certificate with same serial but unequal value already present in this cluster's storage; refusing to revoke",
                        ));
                    }
                    (cert, record.issuer_id, false)
                }
                None => (cert, String::new(), true),
            }
        }
    };
    let _guard = mount.issuers_lock.lock().await;
    revoke_cert(mount, &cert, &stored_issuer, write_cert).await
}

/// Revokes `cert`; `write_cert` stores it first (a certificate brought by the caller).
pub(crate) async fn revoke_cert(
    mount: &Mount,
    cert: &CertInfo,
    stored_issuer: &str,
    write_cert: bool,
) -> Result<Option<Response>, EngineError> {
    let serial_key = normalize_serial(&cert.serial).unwrap_or_default();
    for issuer in mount.store.issuers().await? {
        if issuer.serial_number == cert.serial {
            return Err(bad(format!(
                "adding issuer (id: {}) to its own CRL is not allowed",
                issuer.id
            )));
        }
    }
    if let Some(existing) = mount.store.revoked(&serial_key).await? {
        return Ok(Some(Response::data(answer(&existing))));
    }
    let Some(issuer_id) = crl::issuer_of(mount, cert, stored_issuer).await? else {
        return Err(bad(
            "unable to verify signature on presented cert from any present issuer in this mount; certificates from previous CAs will need to have their issuing CA and key re-imported if revocation is necessary",
        ));
    };
    let now = mount.now();
    if cert.not_after < now + 2 {
        return Ok(Some(Response::default().with_warning(format!(
            "certificate with serial {} already expired; refusing to add to CRL",
            cert.serial
        ))));
    }
    if write_cert {
        mount
            .store
            .put_cert(
                &serial_key,
                &CertRecord {
                    certificate: cert.pem(),
                    issuer_id: issuer_id.clone(),
                    not_after: cert.not_after,
                },
            )
            .await?;
    }
    let record = RevokedRecord {
        serial_number: cert.serial.clone(),
        certificate: cert.pem(),
        issuer_id: issuer_id.clone(),
        revocation_time: now,
        revocation_time_rfc3339: format_time(now),
        not_after: cert.not_after,
    };
    mount
        .store
        .put(&format!("{REVOKED_PREFIX}{serial_key}"), &record)
        .await?;
    crl::add_entry(
        mount,
        &issuer_id,
        CrlEntry {
            serial: serial_key,
            revocation_time: now,
            not_after: cert.not_after,
        },
    )
    .await?;
    Ok(Some(Response::data(answer(&record))))
}

fn answer(record: &RevokedRecord) -> Data {
    let mut data = Data::new();
    data.insert(
        "revocation_time".to_owned(),
        Value::from(record.revocation_time),
    );
    data.insert(
        "revocation_time_rfc3339".to_owned(),
        Value::String(record.revocation_time_rfc3339.clone()),
    );
    data.insert("state".to_owned(), Value::String("revoked".to_owned()));
    data
}

/// Revokes the certificate a lease was issued for (the lease keeps its serial).
pub(crate) async fn revoke_leased(mount: &Mount, internal: &Data) -> Result<(), EngineError> {
    let Some(serial) = internal.get("serial_number").and_then(Value::as_str) else {
        return Ok(());
    };
    let Some(key) = normalize_serial(serial) else {
        return Ok(());
    };
    let Some(record) = mount.store.cert(&key).await? else {
        return Ok(());
    };
    let cert = CertInfo::from_pem(&record.certificate).map_err(EngineError::Internal)?;
    let _guard = mount.issuers_lock.lock().await;
    match revoke_cert(mount, &cert, &record.issuer_id, false).await {
        Ok(_) => Ok(()),
        // An issuer's own certificate, or one whose issuer is gone: nothing to revoke.
        Err(EngineError::BadRequest(_)) => Ok(()),
        Err(err) => Err(err),
    }
}
