//! The fetch endpoints, most of them unauthenticated: `ca` (DER), `ca/pem`, `ca_chain` (PEM
//! chain), `cert/ca`, `cert/ca_chain` (JSON), `cert/<serial>` (JSON; `/raw` DER, `/raw/pem`),
//! `LIST certs` (hyphenated serials) and `LIST certs/revoked`.
//!
//! Raw answers with nothing to send are an empty 204, as Vault's; `cert/<serial>` of an
//! unknown serial is a 404.
//!
//! Invariant: reads only; nothing here takes the issuers lock.

use secrets_sdk::{Data, EngineError, RawResponse, Response};
use serde_json::Value;

use crate::cert::{CertInfo, normalize_serial};
use crate::mount::Mount;
use crate::store::{CERT_PREFIX, DEFAULT_REF, REVOKED_PREFIX};

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

/// The default issuer's certificate and chain, if there is a default.
async fn default_chain(mount: &Mount) -> Result<Option<(CertInfo, Vec<String>)>, EngineError> {
    let Some(id) = mount.store.resolve_issuer(DEFAULT_REF).await? else {
        return Ok(None);
    };
    let Some(issuer) = mount.store.issuer(&id).await? else {
        return Ok(None);
    };
    let cert = issuer.cert()?;
    let chain = issuer
        .ca_chain
        .iter()
        .map(|pem| pem.trim().to_owned())
        .collect();
    Ok(Some((cert, chain)))
}

/// `ca` and `ca/pem`.
pub(crate) async fn ca(mount: &Mount, as_pem: bool) -> Result<Option<Response>, EngineError> {
    let cert = default_chain(mount).await?.map(|(cert, _)| cert);
    Ok(Some(match (cert, as_pem) {
        (Some(cert), true) => raw(
            "application/pem-certificate-chain",
            cert.pem_trimmed().into_bytes(),
        ),
        (Some(cert), false) => raw("application/pkix-cert", cert.der),
        (None, true) => raw("application/pem-certificate-chain", Vec::new()),
        (None, false) => raw("application/pkix-cert", Vec::new()),
    }))
}

/// `ca_chain`: the default issuer's chain as concatenated PEM.
pub(crate) async fn ca_chain(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let body = default_chain(mount)
        .await?
        .map(|(_, chain)| chain.join("\n").into_bytes())
        .unwrap_or_default();
    Ok(Some(raw("application/pkix-cert", body)))
}

fn cert_json(
    certificate: String,
    revocation: Option<(i64, String, String)>,
    chain: Option<String>,
) -> Response {
    let mut data = Data::new();
    data.insert("certificate".to_owned(), Value::String(certificate));
    let (time, rfc3339, issuer) = revocation.unwrap_or_default();
    data.insert("revocation_time".to_owned(), Value::from(time));
    data.insert("revocation_time_rfc3339".to_owned(), Value::String(rfc3339));
    if !issuer.is_empty() {
        data.insert("issuer_id".to_owned(), Value::String(issuer));
    }
    if let Some(chain) = chain {
        data.insert("ca_chain".to_owned(), Value::String(chain));
    }
    Response::data(data)
}

/// `cert/ca_chain` and `cert/ca` as JSON.
pub(crate) async fn cert_ca(mount: &Mount, chain: bool) -> Result<Option<Response>, EngineError> {
    let Some((cert, pems)) = default_chain(mount).await? else {
        return Err(EngineError::BadRequest(
            "no default issuer currently configured".to_owned(),
        ));
    };
    Ok(Some(if chain {
        let joined = pems.join("\n");
        cert_json(joined.clone(), None, Some(joined))
    } else {
        cert_json(cert.pem_trimmed(), None, None)
    }))
}

/// How `cert/<serial>` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CertForm {
    Json,
    Der,
    Pem,
}

/// `cert/<serial>`, `cert/<serial>/raw`, `cert/<serial>/raw/pem`.
pub(crate) async fn cert(
    mount: &Mount,
    serial: &str,
    form: CertForm,
) -> Result<Option<Response>, EngineError> {
    let Some(key) = normalize_serial(serial) else {
        return Err(EngineError::BadRequest(format!(
            "invalid serial number {serial:?}"
        )));
    };
    let Some(record) = mount.store.cert(&key).await? else {
        return Ok(match form {
            CertForm::Json => None,
            CertForm::Der => Some(raw("application/pkix-cert", Vec::new())),
            CertForm::Pem => Some(raw("application/pem-certificate-chain", Vec::new())),
        });
    };
    let cert = CertInfo::from_pem(&record.certificate).map_err(EngineError::Internal)?;
    Ok(Some(match form {
        CertForm::Der => raw("application/pkix-cert", cert.der),
        CertForm::Pem => raw(
            "application/pem-certificate-chain",
            cert.pem_trimmed().into_bytes(),
        ),
        CertForm::Json => {
            let revocation = mount
                .store
                .revoked(&key)
                .await?
                .map(|r| (r.revocation_time, r.revocation_time_rfc3339, r.issuer_id));
            cert_json(cert.pem_trimmed(), revocation, None)
        }
    }))
}

/// `LIST certs`.
pub(crate) async fn list(mount: &Mount) -> Result<Option<Response>, EngineError> {
    Ok(Some(Response::list(mount.store.list(CERT_PREFIX).await?)))
}

/// `LIST certs/revoked`.
pub(crate) async fn list_revoked(mount: &Mount) -> Result<Option<Response>, EngineError> {
    Ok(Some(Response::list(
        mount.store.list(REVOKED_PREFIX).await?,
    )))
}
