//! How certificates and keys are written into answers: `format` (`pem`, `der` as base64,
//! `pem_bundle`) and `private_key_format` (`der` or `pem`: PKCS#1/SEC 1; `pkcs8`), PEM values
//! trimmed of their final newline as Vault's `CertBundle` holds them.
//!
//! Invariant: an unknown `format` or `private_key_format` is a 400 before anything is signed.

use secrets_sdk::{Data, EngineError, fields};

use crate::cert::CertInfo;
use crate::keys::PrivateKey;
use crate::pem;

/// Vault's `format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Pem,
    Der,
    PemBundle,
}

/// The request's `format` (default `pem`).
pub(crate) fn format(data: &Data) -> Result<Format, EngineError> {
    match fields::string(data, "format")?.as_deref() {
        None | Some("") | Some("pem") => Ok(Format::Pem),
        Some("der") => Ok(Format::Der),
        Some("pem_bundle") => Ok(Format::PemBundle),
        Some(_) => Err(EngineError::BadRequest(
            r#"the "format" path parameter must be "pem", "der", or "pem_bundle""#.to_owned(),
        )),
    }
}

/// Whether `private_key_format` asks for PKCS#8.
pub(crate) fn pkcs8(data: &Data) -> Result<bool, EngineError> {
    match fields::string(data, "private_key_format")?.as_deref() {
        None | Some("") | Some("der") | Some("pem") => Ok(false),
        Some("pkcs8") => Ok(true),
        Some(other) => Err(EngineError::BadRequest(format!(
            r#"invalid private_key_format {other:?}: must be "der", "pem" or "pkcs8""#
        ))),
    }
}

/// A certificate (DER) as `format` writes it (pem_bundle writes the bare PEM here; bundles
/// are assembled by [`bundle`]).
pub(crate) fn cert(format: Format, der: &[u8]) -> String {
    match format {
        Format::Der => pem::base64(der),
        Format::Pem | Format::PemBundle => cert_pem(der),
    }
}

/// A certificate's PEM without the final newline.
pub(crate) fn cert_pem(der: &[u8]) -> String {
    let mut text = pem::encode("CERTIFICATE", der);
    text.truncate(text.trim_end().len());
    text
}

/// A key as `format` writes it.
pub(crate) fn key(format: Format, key: &PrivateKey, pkcs8: bool) -> String {
    match format {
        Format::Der => pem::base64(&key.export(pkcs8).1),
        Format::Pem | Format::PemBundle => key.pem(pkcs8).trim_end().to_owned(),
    }
}

/// Vault's `ToPEMBundle`: the private key (if any), the certificate, then the chain, joined
/// by newlines.
pub(crate) fn bundle<'a>(
    key: Option<String>,
    cert_der: &[u8],
    chain: impl IntoIterator<Item = &'a CertInfo>,
) -> String {
    let mut parts: Vec<String> = key.into_iter().collect();
    parts.push(cert_pem(cert_der));
    parts.extend(chain.into_iter().map(CertInfo::pem_trimmed));
    parts.join("\n")
}

/// A string array value.
pub(crate) fn strings(values: impl IntoIterator<Item = String>) -> serde_json::Value {
    serde_json::Value::Array(values.into_iter().map(serde_json::Value::String).collect())
}
