//! `config/ca` and `public_key`: the CA that `sign/:role` signs with (Vault's
//! `path_config_ca.go`, `path_fetch.go`).
//!
//! - write: with `generate_signing_key` true, or unset with neither key given, a key pair is
//!   generated: `key_type` `ssh-rsa` (default; `key_bits` 0 means 4096, below 2048 refused),
//!   `ecdsa-sha2-nistp256|384|521`, `ec` (`key_bits` 256, 384 or 521), `ssh-ed25519`/`ed25519`.
//!   With `generate_signing_key` false, or unset with both keys given, `private_key` and
//!   `public_key` are imported (both required; each must parse; they must be one pair).
//!   One key without the other and no flag → 400 `only one of public_key and private_key set;
//!   both must be set to use, or both must be blank to auto-generate`; keys with the flag true →
//!   400 `public_key and private_key must not be set when generate_signing_key is set to true`.
//!   A write replaces the CA in place (the specification's rule; Vault 1.12 refused with
//!   `keys are already configured`). The answer: 200 with `data.public_key` when
//!   `generate_signing_key` was given as true, else 204 (the specification's rule, also when a
//!   key pair was generated because neither key was given).
//! - read → `{public_key}`; none → 400 `keys haven't been configured yet`.
//! - delete → 204; signing then fails until a CA is written again.
//! - `public_key` (unauthenticated) → 200 `text/plain`, the CA's authorized_keys line; none →
//!   404.
//!
//! Invariants: the private key is stored in OpenSSH format and never answered; the public key
//! is stored as an authorized_keys line ending in a newline. The parsed private key is kept
//! between signs ([`CaCache`]) and used only while storage holds exactly the bytes it was
//! parsed from: a write, a delete or a restore behind the engine is seen by the next sign.

use std::sync::{Arc, Mutex};

use secrets_sdk::{Data, EngineError, EngineStorage, RawResponse, Response, fields};
use serde_json::json;
use ssh_key::PrivateKey;

use crate::store::{self, NamedKey};
use crate::{bad, crypto, text};

/// The CA's private key as last parsed, with the stored record it came from.
#[derive(Debug, Default)]
pub(crate) struct CaCache {
    parsed: Mutex<Option<(Vec<u8>, Arc<PrivateKey>)>>,
}

impl CaCache {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(Vec<u8>, Arc<PrivateKey>)>> {
        // One immutable value behind the lock: a panic elsewhere leaves nothing half-done.
        self.parsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, stored: &[u8]) -> Option<Arc<PrivateKey>> {
        match &*self.slot() {
            Some((bytes, key)) if bytes.as_slice() == stored => Some(key.clone()),
            _ => None,
        }
    }

    fn put(&self, stored: Vec<u8>, key: Arc<PrivateKey>) {
        *self.slot() = Some((stored, key));
    }

    /// Drops the parsed key (after a write or delete: memory only, since an entry whose bytes
    /// differ from storage's is never used).
    pub(crate) fn clear(&self) {
        *self.slot() = None;
    }
}

pub(crate) async fn write(
    storage: &dyn EngineStorage,
    cache: &CaCache,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let public_key = text(data, "public_key")?;
    let private_key = text(data, "private_key")?;
    let generate_flag = fields::bool(data, "generate_signing_key")?;
    let generate = match generate_flag {
        Some(true) => {
            if !public_key.is_empty() || !private_key.is_empty() {
                return Err(bad(
                    "public_key and private_key must not be set when generate_signing_key is set to true",
                ));
            }
            true
        }
        Some(false) => false,
        None if !public_key.is_empty() && !private_key.is_empty() => false,
        None if public_key.is_empty() && private_key.is_empty() => true,
        None => {
            return Err(bad(
                "only one of public_key and private_key set; both must be set to use, or both must be blank to auto-generate",
            ));
        }
    };
    let (public_line, private_pem) = if generate {
        let key_type = match text(data, "key_type")? {
            key_type if key_type.is_empty() => "ssh-rsa".to_owned(),
            key_type => key_type,
        };
        let key_bits = fields::int(data, "key_bits")?.unwrap_or(0);
        let key_bits =
            u32::try_from(key_bits).map_err(|_| bad(format!("invalid key_bits {key_bits}")))?;
        let key = tokio::task::spawn_blocking(move || crypto::generate_ca_key(&key_type, key_bits))
            .await
            .map_err(|err| EngineError::Internal(format!("key generation stopped: {err}")))?
            .map_err(bad)?;
        let line = crypto::authorized_key_line(key.public_key().key_data()).map_err(internal)?;
        (line, crypto::private_key_pem(&key).map_err(internal)?)
    } else {
        if public_key.is_empty() {
            return Err(bad("missing public_key"));
        }
        if private_key.is_empty() {
            return Err(bad("missing private_key"));
        }
        let private = crypto::parse_private_key(&private_key).map_err(|err| {
            bad(format!(
                "Unable to parse private_key as an SSH private key: {err}"
            ))
        })?;
        let public = crypto::parse_public_key(&public_key).map_err(|err| {
            bad(format!(
                "Unable to parse public_key as an SSH public key: {err}"
            ))
        })?;
        if public.key_data() != private.public_key().key_data() {
            return Err(bad("public_key does not match private_key"));
        }
        let line = crypto::authorized_key_line(public.key_data()).map_err(internal)?;
        (line, crypto::private_key_pem(&private).map_err(internal)?)
    };
    let private_record = NamedKey {
        version: 1,
        key: private_pem,
    };
    let public_record = NamedKey {
        version: 1,
        key: public_line.clone(),
    };
    store::put(storage, store::CA_PRIVATE_KEY, &private_record).await?;
    store::put(storage, store::CA_PUBLIC_KEY, &public_record).await?;
    cache.clear();
    if generate_flag == Some(true) {
        let mut out = Data::new();
        out.insert("public_key".to_owned(), json!(public_line));
        return Ok(Some(Response::data(out)));
    }
    Ok(None)
}

fn internal(err: String) -> EngineError {
    EngineError::Internal(err)
}

pub(crate) async fn read(storage: &dyn EngineStorage) -> Result<Option<Response>, EngineError> {
    let Some(public) = store::get::<NamedKey>(storage, store::CA_PUBLIC_KEY).await? else {
        return Err(bad("keys haven't been configured yet"));
    };
    let mut out = Data::new();
    out.insert("public_key".to_owned(), json!(public.key));
    Ok(Some(Response::data(out)))
}

pub(crate) async fn delete(
    storage: &dyn EngineStorage,
    cache: &CaCache,
) -> Result<Option<Response>, EngineError> {
    storage.delete(store::CA_PRIVATE_KEY).await?;
    storage.delete(store::CA_PUBLIC_KEY).await?;
    cache.clear();
    Ok(None)
}

/// `public_key`: the raw authorized_keys line.
pub(crate) async fn public_key(
    storage: &dyn EngineStorage,
) -> Result<Option<Response>, EngineError> {
    let Some(public) = store::get::<NamedKey>(storage, store::CA_PUBLIC_KEY).await? else {
        return Ok(None);
    };
    Ok(Some(Response {
        raw: Some(RawResponse {
            status: 200,
            content_type: "text/plain".to_owned(),
            body: public.key.into_bytes(),
        }),
        ..Response::default()
    }))
}

/// The CA's private key, if one is configured: parsed once per stored record.
pub(crate) async fn signing_key(
    storage: &dyn EngineStorage,
    cache: &CaCache,
) -> Result<Option<Arc<PrivateKey>>, EngineError> {
    let Some(bytes) = storage.get(store::CA_PRIVATE_KEY).await? else {
        return Ok(None);
    };
    if let Some(key) = cache.get(&bytes) {
        return Ok(Some(key));
    }
    let record: NamedKey = store::decode(store::CA_PRIVATE_KEY, &bytes)?;
    let key = crypto::parse_private_key(&record.key)
        .map_err(|err| EngineError::Internal(format!("the stored CA key does not parse: {err}")))?;
    let key = Arc::new(key);
    cache.put(bytes, key.clone());
    Ok(Some(key))
}
