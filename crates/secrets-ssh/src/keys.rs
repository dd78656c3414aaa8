//! `keys/:name`: the private keys dynamic roles log in to hosts with (Vault before 1.13,
//! `path_keys.go`). Write and delete only; a key is never read back.
//!
//! - write `{key}` → 204; missing → 400 `Missing key`; a key that does not parse (OpenSSH, or
//!   PKCS#1/PKCS#8 RSA PEM; never encrypted) → 400 `Invalid key`.
//! - delete → 204, also when missing. Roles naming the key keep the name; their creds and
//!   the revocation of their leases fail until a key of that name is written again.
//! - read → 405 (`unsupported operation`): a private key never leaves the engine.

use secrets_sdk::{Data, EngineError, EngineStorage, Response};

use crate::store::{self, NamedKey};
use crate::{bad, crypto, text};

pub(crate) async fn get(
    storage: &dyn EngineStorage,
    name: &str,
) -> Result<Option<NamedKey>, EngineError> {
    store::get(storage, &format!("{}{name}", store::KEYS)).await
}

pub(crate) async fn write(
    storage: &dyn EngineStorage,
    name: &str,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let key = text(data, "key")?;
    if key.is_empty() {
        return Err(bad("Missing key"));
    }
    if crypto::parse_private_key(&key).is_err() {
        return Err(bad("Invalid key"));
    }
    let record = NamedKey {
        version: 1,
        key: normalised(&key),
    };
    store::put(storage, &format!("{}{name}", store::KEYS), &record).await?;
    Ok(None)
}

pub(crate) async fn delete(
    storage: &dyn EngineStorage,
    name: &str,
) -> Result<Option<Response>, EngineError> {
    storage.delete(&format!("{}{name}", store::KEYS)).await?;
    Ok(None)
}

/// The key text as OpenSSH tools read it: trimmed, one trailing newline.
fn normalised(key: &str) -> String {
    format!("{}\n", key.trim())
}
