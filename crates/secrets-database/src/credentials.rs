//! Credential types and their `credential_config` (Vault's `credentials.go`): `password`
//! (`password_policy`, else the connection's, else the default policy), `rsa_private_key`
//! (`key_bits` 2048/3072/4096, `format` pkcs8; the user is created with `{{public_key}}`, the
//! client gets `rsa_private_key`) and `client_certificate` (`common_name_template`, `ca_cert`,
//! `ca_private_key`, `key_type` rsa/ec/ed25519, `key_bits`, `signature_bits`; the user is
//! created with `{{subject}}`, the client gets the certificate and its key).
//!
//! Invariant: a config is validated (and completed with its defaults) when a role is written,
//! so issuing never meets a bad one.

use std::collections::BTreeMap;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, RsaKeySize,
};
use secrets_sdk::{Data, EngineError};
use serde_json::Value;

use crate::template::{self, UsernameMetadata};

fn bad(message: impl std::fmt::Display) -> EngineError {
    EngineError::BadRequest(message.to_string())
}

/// Checks `credential_type` and `config`, returning the config with its defaults filled in.
pub(crate) fn validate(
    credential_type: &str,
    config: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, EngineError> {
    let mut out = config.clone();
    let fail = |why: &str| bad(format!("credential_config validation failed: {why}"));
    match credential_type {
        "password" => {
            out.retain(|k, _| k == "password_policy");
        }
        "rsa_private_key" => {
            match config.get("format").map(|f| f.to_lowercase()).as_deref() {
                None | Some("") | Some("pkcs8") => {
                    out.insert("format".to_owned(), "pkcs8".to_owned());
                }
                Some(other) => return Err(fail(&format!("invalid format: {other}"))),
            }
            match config.get("key_bits").map(String::as_str).unwrap_or("0") {
                "0" | "" => {
                    out.insert("key_bits".to_owned(), "2048".to_owned());
                }
                "2048" | "3072" | "4096" => {}
                other => return Err(fail(&format!("invalid key_bits: {other}"))),
            }
        }
        "client_certificate" => {
            let key_type = config.get("key_type").map(String::as_str).unwrap_or("");
            let bits = config.get("key_bits").map(String::as_str).unwrap_or("0");
            let bits = match (key_type, bits) {
                ("rsa", "0" | "") => "2048",
                ("rsa", b @ ("2048" | "3072" | "4096")) => b,
                ("ec", "0" | "") => "256",
                ("ec", b @ ("224" | "256" | "384" | "521")) => b,
                ("ed25519", _) => "0",
                ("rsa" | "ec", _) => return Err(fail("invalid key_bits")),
                _ => return Err(fail("invalid key_type")),
            };
            out.insert("key_bits".to_owned(), bits.to_owned());
            match config
                .get("signature_bits")
                .map(String::as_str)
                .unwrap_or("0")
            {
                "0" | "" => {
                    out.insert("signature_bits".to_owned(), "256".to_owned());
                }
                "256" | "384" | "512" => {}
                _ => return Err(fail("invalid signature_bits")),
            }
            let cn = config
                .get("common_name_template")
                .cloned()
                .unwrap_or_default();
            if cn.is_empty() {
                return Err(fail("missing required common_name_template"));
            }
            template::render(&cn, &UsernameMetadata::default(), 0)
                .map_err(|err| fail(&format!("invalid common_name_template: {err}")))?;
            let ca_cert = config.get("ca_cert").cloned().unwrap_or_default();
            let ca_key = config.get("ca_private_key").cloned().unwrap_or_default();
            if ca_cert.is_empty() {
                return Err(fail("missing required ca_cert"));
            }
            if ca_key.is_empty() {
                return Err(fail("missing required ca_private_key"));
            }
            issuer(&ca_cert, &ca_key).map_err(|err| fail(&err))?;
        }
        other => return Err(bad(format!("invalid credential_type {other:?}"))),
    }
    Ok(out)
}

fn issuer(ca_cert: &str, ca_key: &str) -> Result<Issuer<'static, KeyPair>, String> {
    let key = KeyPair::from_pem(ca_key).map_err(|err| format!("invalid ca_private_key: {err}"))?;
    let issuer =
        Issuer::from_ca_cert_pem(ca_cert, key).map_err(|err| format!("invalid ca_cert: {err}"))?;
    Ok(issuer)
}

/// A fresh RSA key pair: (public key PEM for the database, PKCS#8 private key PEM for the
/// client).
pub(crate) fn rsa_key_pair(
    config: &BTreeMap<String, String>,
) -> Result<(String, String), EngineError> {
    let size = match config.get("key_bits").map(String::as_str) {
        Some("3072") => RsaKeySize::_3072,
        Some("4096") => RsaKeySize::_4096,
        _ => RsaKeySize::_2048,
    };
    let key = KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size)
        .map_err(|err| EngineError::Internal(format!("failed to generate RSA key pair: {err}")))?;
    Ok((key.public_key_pem(), key.serialize_pem()))
}

/// A client certificate signed by the configured CA, valid until `not_after_ms`: the subject
/// (`CN=<name>`) for the database and the response data for the client.
pub(crate) fn client_certificate(
    config: &BTreeMap<String, String>,
    meta: &UsernameMetadata,
    now_ms: i64,
    not_after_ms: i64,
) -> Result<(String, Data), EngineError> {
    let internal = |err: String| {
        EngineError::Internal(format!("failed to generate client certificate: {err}"))
    };
    let get = |k: &str| config.get(k).cloned().unwrap_or_default();
    let common_name =
        template::render(&get("common_name_template"), meta, now_ms).map_err(internal)?;
    let (algorithm, key_type) = match (get("key_type").as_str(), get("key_bits").as_str()) {
        ("ec", "384") => (&rcgen::PKCS_ECDSA_P384_SHA384, "ec"),
        ("ec", "521") => (&rcgen::PKCS_ECDSA_P521_SHA512, "ec"),
        ("ec", _) => (&rcgen::PKCS_ECDSA_P256_SHA256, "ec"),
        ("ed25519", _) => (&rcgen::PKCS_ED25519, "ed25519"),
        _ => (&rcgen::PKCS_RSA_SHA256, "rsa"),
    };
    let key = if key_type == "rsa" {
        let size = match get("key_bits").as_str() {
            "3072" => RsaKeySize::_3072,
            "4096" => RsaKeySize::_4096,
            _ => RsaKeySize::_2048,
        };
        KeyPair::generate_rsa_for(algorithm, size)
    } else {
        KeyPair::generate_for(algorithm)
    }
    .map_err(|err| internal(err.to_string()))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name.clone());
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.not_before = offset(now_ms - 30_000);
    params.not_after = offset(not_after_ms);
    let issuer = issuer(&get("ca_cert"), &get("ca_private_key")).map_err(internal)?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|err| internal(err.to_string()))?;
    let mut data = Data::new();
    data.insert("client_certificate".to_owned(), Value::String(cert.pem()));
    data.insert("private_key".to_owned(), Value::String(key.serialize_pem()));
    data.insert(
        "private_key_type".to_owned(),
        Value::String(key_type.to_owned()),
    );
    Ok((format!("CN={common_name}"), data))
}

fn offset(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}
