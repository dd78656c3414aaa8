//! Persistence of tokens: storage keys, id hashing, random ids, and the single place where the
//! token store reads and writes through the barrier.
//!
//! Keys (logical, through the barrier; all owned by `tokens/`):
//! - `sys/token/id/<sha256 hex of the token id>` → the [`TokenEntry`](super::TokenEntry) as JSON
//! - `sys/token/accessor/<accessor>` → `{"hash": "<sha256 hex of the token id>"}`
//! - `sys/token/parent/<parent hash>/<child hash>` → empty (the parent → child index)
//! - `sys/token/role/<role name>` → a [`Role`](super::roles::Role) as JSON
//!
//! Invariant: a token id never appears in a key, only its SHA-256; values are encrypted by the
//! barrier like everything else.

use rand::Rng;
use serde::de::DeserializeOwned;

use crate::mounts::Backend;
use crate::{Error, State};

pub(crate) const ID_PREFIX: &str = "sys/token/id/";
pub(crate) const ACCESSOR_PREFIX: &str = "sys/token/accessor/";
pub(crate) const PARENT_PREFIX: &str = "sys/token/parent/";
pub(crate) const ROLE_PREFIX: &str = "sys/token/role/";

/// SHA-256 of a token id, lowercase hex: the only form of the id used in keys and indexes.
pub(crate) fn hash_id(id: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, id.as_bytes());
    stdx::hex::encode(digest.as_ref())
}

/// `n` random base62 characters from the OS-seeded thread RNG.
pub(crate) fn random_base62(n: usize) -> String {
    rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}

/// A new service token id: `hvs.` + 24 base62 characters (Vault's format).
pub(crate) fn new_token_id() -> String {
    format!("hvs.{}", random_base62(24))
}

/// A new accessor: 24 base62 characters.
pub(crate) fn new_accessor() -> String {
    random_base62(24)
}

pub(crate) fn id_key(hash: &str) -> String {
    format!("{ID_PREFIX}{hash}")
}

pub(crate) fn accessor_key(accessor: &str) -> String {
    format!("{ACCESSOR_PREFIX}{accessor}")
}

pub(crate) fn parent_key(parent_hash: &str, child_hash: &str) -> String {
    format!("{PARENT_PREFIX}{parent_hash}/{child_hash}")
}

pub(crate) fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    })
}

pub(crate) fn encode<T: serde::Serialize>(key: &str, value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(|err| Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    })
}

// The barrier, as the token store, identity and roles use it. Every access of this module
// family goes through these functions.

pub(crate) async fn get(state: &State, key: &str) -> Result<Option<Vec<u8>>, Error> {
    state.barrier().get(key).await
}

pub(crate) async fn put(state: &State, key: &str, value: &[u8]) -> Result<(), Error> {
    state.barrier().put(key, value).await
}

/// The value at `key` with its store revision, for a compare-and-swap through [`put_if`].
pub(crate) async fn get_revisioned(
    state: &State,
    key: &str,
) -> Result<Option<(Vec<u8>, storage::Revision)>, Error> {
    state.barrier().get_revisioned(key).await
}

/// Stores `value` at `key` only if the key is still at `revision`; `false` if it moved.
pub(crate) async fn put_if(
    state: &State,
    key: &str,
    value: &[u8],
    revision: storage::Revision,
) -> Result<bool, Error> {
    state.barrier().put_if_unchanged(key, value, revision).await
}

pub(crate) async fn delete(state: &State, key: &str) -> Result<(), Error> {
    state.barrier().delete(key).await
}

/// Immediate children of `prefix`, sorted; directories end in `/`.
pub(crate) async fn list(state: &State, prefix: &str) -> Result<Vec<String>, Error> {
    state.barrier().list(prefix).await
}

/// Every key under `prefix` with its value.
pub(crate) async fn scan(state: &State, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Error> {
    state.barrier().scan(prefix).await
}

/// Revokes every lease the token with this accessor created (the expiration manager's side).
pub(crate) async fn revoke_leases(state: &State, accessor: &str) -> Result<(), Error> {
    state.leases().revoke_by_token(state, accessor).await
}

/// Drops what every mounted engine keeps for the token with this hash (its cubbyhole).
pub(crate) async fn drop_engine_data(state: &State, hash: &str) -> Result<(), Error> {
    let mounts = state.mounts();
    for entry in mounts.entries() {
        if let Some((_, Backend::Engine(engine))) = mounts.by_uuid(&entry.uuid) {
            engine.token_revoked(hash).await?;
        }
    }
    Ok(())
}

pub(crate) async fn get_json<T: DeserializeOwned>(
    state: &State,
    key: &str,
) -> Result<Option<T>, Error> {
    match get(state, key).await? {
        Some(bytes) => decode(key, &bytes).map(Some),
        None => Ok(None),
    }
}

pub(crate) async fn put_json<T: serde::Serialize>(
    state: &State,
    key: &str,
    value: &T,
) -> Result<(), Error> {
    put(state, key, &encode(key, value)?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_are_hvs_and_24_base62() {
        let id = new_token_id();
        assert!(id.starts_with("hvs."));
        assert_eq!(id.len(), 28);
        assert!(id[4..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, new_token_id());
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            hash_id("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
