//! The mount's CA material as a model: importing issuers and keys (deduplicated, linked to
//! each other by public key), building each issuer's chain from the issuers the mount knows,
//! choosing the signing issuer for a request, minting serial numbers unique across issuers,
//! and recording issued certificates.
//!
//! Invariants: callers hold [`crate::mount::Mount::issuers_lock`] around every import or
//! deletion; an issuer's `ca_chain` starts with its own certificate and follows signatures
//! (never names alone) up to a self-signed root or the last issuer the mount has; the first
//! issuer imported into a mount without a default becomes the default (and the same for keys).

use std::sync::Arc;

use secrets_sdk::EngineError;

use crate::cert::{CertInfo, normalize_serial};
use crate::keys::PrivateKey;
use crate::mount::Mount;
use crate::signing::SigningIssuer;
use crate::store::{
    CertRecord, DEFAULT_REF, IssuerRecord, KeyRecord, all_usages, decode, issuer_key, key_key,
};
use crate::template::Urls;

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Vault's name check for issuers and keys (`\w(([\w-.]+)?\w)?`), and `default` is reserved.
pub(crate) fn check_name(name: &str, what: &str) -> Result<(), EngineError> {
    if name.eq_ignore_ascii_case("default") {
        return Err(EngineError::BadRequest(format!(
            "reserved keyword 'default' can not be used as {what} name"
        )));
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let chars: Vec<char> = name.chars().collect();
    let ok = match chars.as_slice() {
        [] => false,
        [one] => word(*one),
        [first, middle @ .., last] => {
            word(*first) && word(*last) && middle.iter().all(|c| word(*c) || *c == '-' || *c == '.')
        }
    };
    if ok {
        Ok(())
    } else {
        Err(EngineError::BadRequest(format!(
            "{what} name contained invalid characters"
        )))
    }
}

/// Stores `key` unless the mount has it already; returns the record and whether it existed.
pub(crate) async fn import_key(
    mount: &Mount,
    key: &PrivateKey,
    name: &str,
) -> Result<(KeyRecord, bool), EngineError> {
    let public = key.public_key_der().map_err(EngineError::Internal)?;
    let keys = mount.store.keys().await?;
    for existing in &keys {
        if existing
            .private_key()?
            .public_key_der()
            .map_err(EngineError::Internal)?
            == public
        {
            return Ok((existing.clone(), true));
        }
    }
    if !name.is_empty() && keys.iter().any(|k| k.name == name) {
        return Err(EngineError::BadRequest(
            "key name already in use".to_owned(),
        ));
    }
    let record = KeyRecord {
        version: 1,
        id: new_id(),
        name: name.to_owned(),
        key_type: key.spec.kind.name().to_owned(),
        key_bits: key.spec.bits,
        private_key: key.pem(true),
    };
    mount.store.put_key(&record).await?;
    // Link issuers waiting for this key.
    for mut issuer in mount.store.issuers().await? {
        if issuer.key_id.is_empty() && issuer.cert()?.spki == public {
            issuer.key_id = record.id.clone();
            mount.store.put_issuer(&issuer).await?;
        }
    }
    let mut config = mount.store.keys_config().await?;
    if config.default.is_empty() {
        config.default = record.id.clone();
        mount.store.put_keys_config(&config).await?;
    }
    Ok((record, false))
}

/// Stores a CA certificate as an issuer unless the mount has it already; links a stored key
/// with the same public key; returns the record and whether it existed.
pub(crate) async fn import_issuer(
    mount: &Mount,
    cert: &CertInfo,
    name: &str,
) -> Result<(IssuerRecord, bool), EngineError> {
    if !cert.is_ca {
        return Err(EngineError::BadRequest(
            "Refusing to import non-CA certificate".to_owned(),
        ));
    }
    if cert.key_kind.is_none() {
        return Err(EngineError::BadRequest("Refusing to import CA certificate with empty PublicKey. This usually means the SubjectPublicKeyInfo field has an OID not recognized by Go, such as 1.2.840.113549.1.1.10 for rsaPSS.".to_owned()));
    }
    let issuers = mount.store.issuers().await?;
    let mut name_taken = false;
    for existing in &issuers {
        if existing.cert()?.der == cert.der {
            return Ok((existing.clone(), true));
        }
        name_taken |= !name.is_empty() && existing.name == name;
    }
    if name_taken {
        return Err(EngineError::BadRequest(format!(
            "another issuer is using the requested name: {name}"
        )));
    }
    let mut key_id = String::new();
    for key in mount.store.keys().await? {
        if key
            .private_key()?
            .public_key_der()
            .map_err(EngineError::Internal)?
            == cert.spki
        {
            key_id = key.id;
            break;
        }
    }
    let mut usage = all_usages();
    if cert.cannot_sign_crls {
        usage.retain(|u| u != "crl-signing");
    }
    let record = IssuerRecord {
        version: 1,
        id: new_id(),
        name: name.to_owned(),
        key_id,
        certificate: cert.pem(),
        ca_chain: vec![cert.pem()],
        manual_chain: Vec::new(),
        leaf_not_after_behavior: "err".to_owned(),
        usage,
        revocation_signature_algorithm: String::new(),
        revoked: false,
        revocation_time: 0,
        serial_number: cert.serial.clone(),
        urls: None,
    };
    mount.store.put_issuer(&record).await?;
    let mut config = mount.store.issuers_config().await?;
    if config.default.is_empty() || config.default_follows_latest_issuer {
        config.default = record.id.clone();
        mount.store.put_issuers_config(&config).await?;
    }
    rebuild_chains(mount).await?;
    let record = mount.store.issuer(&record.id).await?.unwrap_or(record);
    Ok((record, false))
}

/// Recomputes every issuer's `ca_chain`: its `manual_chain` when set, else itself and then,
/// repeatedly, the issuer whose key signed the last certificate.
pub(crate) async fn rebuild_chains(mount: &Mount) -> Result<(), EngineError> {
    let issuers = mount.store.issuers().await?;
    let certs: Vec<CertInfo> = issuers
        .iter()
        .map(IssuerRecord::cert)
        .collect::<Result<_, _>>()?;
    for (index, issuer) in issuers.iter().enumerate() {
        let chain: Vec<String> = if issuer.manual_chain.is_empty() {
            let mut order = vec![index];
            let mut current = index;
            while !certs[current].is_self_signed() && order.len() <= issuers.len() {
                let parent = (0..certs.len())
                    .find(|&p| !order.contains(&p) && certs[current].signed_by(&certs[p]));
                match parent {
                    Some(p) => {
                        order.push(p);
                        current = p;
                    }
                    None => break,
                }
            }
            order.into_iter().map(|i| certs[i].pem()).collect()
        } else {
            issuer
                .manual_chain
                .iter()
                .filter_map(|id| issuers.iter().position(|i| &i.id == id))
                .map(|i| certs[i].pem())
                .collect()
        };
        if chain != issuer.ca_chain {
            let mut updated = issuer.clone();
            updated.ca_chain = chain;
            mount.store.put_issuer(&updated).await?;
        }
    }
    Ok(())
}

/// The issuer `reference` resolves to, with its key, for issuance: Vault's
/// `could not fetch the CA certificate (was one set?): ...` when missing or unusable. Served
/// from the mount's [`SignerCache`](crate::signing::SignerCache) when the stored issuer and
/// key records are byte for byte those the cached entry was built from.
pub(crate) async fn signing_issuer(
    mount: &Mount,
    reference: &str,
) -> Result<Arc<SigningIssuer>, EngineError> {
    let wrap = |err: EngineError| match err {
        EngineError::BadRequest(msg) => EngineError::BadRequest(format!(
            "could not fetch the CA certificate (was one set?): {msg}"
        )),
        other => other,
    };
    let (id, issuer_bytes) = stored_issuer(mount, reference).await.map_err(wrap)?;
    let usage = "issuing-certificates";
    if let Some(hit) = mount.signers.get(&id, &issuer_bytes) {
        check_usage(&hit.record, usage).map_err(wrap)?;
        if !hit.record.key_id.is_empty()
            && let Some(key_bytes) = mount.store.raw(&key_key(&hit.record.key_id)).await?
            && hit.built_from_key(&key_bytes)
        {
            return Ok(hit);
        }
    }
    let record: IssuerRecord = decode(&issuer_key(&id), &issuer_bytes)?;
    let built = build_signing(mount, record, usage, issuer_bytes)
        .await
        .map_err(wrap)?;
    let built = Arc::new(built);
    mount.signers.put(built.clone());
    Ok(built)
}

/// The id and stored bytes of the issuer `reference` (`default`, an id or a name) names, with
/// [`Store::require_issuer`](crate::store::Store::require_issuer)'s errors.
async fn stored_issuer(mount: &Mount, reference: &str) -> Result<(String, Vec<u8>), EngineError> {
    let not_found = || {
        if reference == DEFAULT_REF {
            EngineError::BadRequest("no default issuer currently configured".to_owned())
        } else {
            EngineError::BadRequest(format!(
                "unable to find PKI issuer for reference: {reference}"
            ))
        }
    };
    let id = if reference == DEFAULT_REF {
        let config = mount.store.issuers_config().await?;
        if config.default.is_empty() {
            return Err(not_found());
        }
        config.default
    } else if let Some(bytes) = mount.store.raw(&issuer_key(reference)).await? {
        return Ok((reference.to_owned(), bytes));
    } else {
        return mount
            .store
            .issuer_named(reference)
            .await?
            .ok_or_else(not_found);
    };
    match mount.store.raw(&issuer_key(&id)).await? {
        Some(bytes) => Ok((id, bytes)),
        None => Err(not_found()),
    }
}

fn check_usage(record: &IssuerRecord, usage: &str) -> Result<(), EngineError> {
    if record.has_usage(usage) {
        return Ok(());
    }
    Err(EngineError::BadRequest(format!(
        "error while attempting to use issuer {}: requested usage {usage} for issuer [{}] but only had usage {}",
        record.id,
        record.id,
        record.usage.join(",")
    )))
}

/// The key of `record` for a use (`issuing-certificates`, `crl-signing`), read afresh.
pub(crate) async fn load_signing(
    mount: &Mount,
    record: IssuerRecord,
    usage: &str,
) -> Result<SigningIssuer, EngineError> {
    build_signing(mount, record, usage, Vec::new()).await
}

/// Parses `record` (whose stored bytes are `issuer_bytes`, empty when not from storage) and
/// its key into a [`SigningIssuer`].
async fn build_signing(
    mount: &Mount,
    record: IssuerRecord,
    usage: &str,
    issuer_bytes: Vec<u8>,
) -> Result<SigningIssuer, EngineError> {
    check_usage(&record, usage)?;
    let cert = record.cert()?;
    let no_key = || {
        EngineError::BadRequest(format!(
            "unable to fetch corresponding key for issuer {}; unable to use this issuer for signing",
            record.id
        ))
    };
    if record.key_id.is_empty() {
        return Err(no_key());
    }
    let key_storage_key = key_key(&record.key_id);
    let Some(key_bytes) = mount.store.raw(&key_storage_key).await? else {
        return Err(no_key());
    };
    let key = decode::<KeyRecord>(&key_storage_key, &key_bytes)?.private_key()?;
    let key_bytes = if issuer_bytes.is_empty() {
        Vec::new()
    } else {
        key_bytes
    };
    Ok(SigningIssuer::new(
        record,
        cert,
        key,
        issuer_bytes,
        key_bytes,
    ))
}

/// The AIA and CRL URLs certificates issued by `issuer` carry: its own, else the mount's.
pub(crate) async fn urls_for(mount: &Mount, issuer: &IssuerRecord) -> Result<Urls, EngineError> {
    let config = match &issuer.urls {
        Some(own) => own.clone(),
        None => mount.store.urls_config().await?,
    };
    Ok(config.urls_for(&issuer.id))
}

/// A fresh serial: a random integer below 2^159 (20 bytes, top bit clear), minimal bytes,
/// unused by any certificate the mount stored.
pub(crate) async fn new_serial(mount: &Mount) -> Result<Vec<u8>, EngineError> {
    use aws_lc_rs::rand::SecureRandom as _;
    let rng = aws_lc_rs::rand::SystemRandom::new();
    for _ in 0..8 {
        let mut bytes = [0u8; 20];
        rng.fill(&mut bytes)
            .map_err(|_| EngineError::Internal("random source failed".to_owned()))?;
        bytes[0] &= 0x7f;
        let skip = bytes.iter().take_while(|&&b| b == 0).count().min(19);
        let serial = bytes[skip..].to_vec();
        let key = crate::cert::format_serial(&serial).replace(':', "-");
        if !mount
            .store
            .exists(&format!("{}{key}", crate::store::CERT_PREFIX))
            .await?
        {
            return Ok(serial);
        }
    }
    Err(EngineError::Internal(
        "unable to find an unused serial number".to_owned(),
    ))
}

/// Records an issued certificate (`serial` in colon hex, `der`) under `certs/<serial>`.
pub(crate) async fn store_cert(
    mount: &Mount,
    serial: &str,
    der: &[u8],
    not_after: i64,
    issuer_id: &str,
) -> Result<(), EngineError> {
    let serial = normalize_serial(serial).unwrap_or_default();
    mount
        .store
        .put_cert(
            &serial,
            &CertRecord {
                certificate: crate::pem::encode("CERTIFICATE", der),
                issuer_id: issuer_id.to_owned(),
                not_after,
            },
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_word_characters_and_never_default() {
        assert!(check_name("root-2024.a", "issuer").is_ok());
        assert!(check_name("x", "issuer").is_ok());
        assert!(check_name("-x", "issuer").is_err());
        assert!(check_name("a b", "issuer").is_err());
        assert_eq!(
            check_name("Default", "issuer").unwrap_err().to_string(),
            "reserved keyword 'default' can not be used as issuer name"
        );
    }
}
