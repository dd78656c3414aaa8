//! Every storage key the registry writes, and its stored records, one file per family:
//! `catalog.rs` (nodes, services, checks), `sessions.rs` (sessions and the keys each holds),
//! `kv.rs` (KV entries and lock-delays), `acl.rs` (policies and tokens).
//!
//! Layout under [`PREFIX`]:
//! ```text
//! registry/catalog/nodes/<node>
//! registry/catalog/services/<node>/<service-id>
//! registry/catalog/checks/<node>/<check-id>
//! registry/sessions/<session-id>
//! registry/session-deadlines/<session-id>                 (checkpointed TTL deadline, Unix ms)
//! registry/session-checkpoint                              (when the last checkpoint ran)
//! registry/session-locks/<session-id>/<namespace>/<key>   (the keys a session holds)
//! registry/check-deadlines/<node>/<check-id>              (TTL check deadlines, Unix ms)
//! registry/kv/<namespace>/<key>
//! registry/lock-delays/<namespace>/<key>                   (Unix ms until acquire may succeed)
//! registry/acl/policies/<id>, registry/acl/tokens/<accessor-id>, ...
//! ```
//!
//! This module also holds what every family shares: the JSON codec ([`decode`], [`encode`]),
//! [`Stored`] (a record with its storage revisions) and the plain reads over them. The
//! transactions that change records live in `domain/`.
//!
//! Invariants: every key starts with [`PREFIX`]; every record is JSON with a `version` field
//! (so a later release can upgrade it in place); an index reported to clients for a family is
//! `Storage::range_revision` of that family's prefix (or of the exact key), so it moves only
//! when what a query reads changes.

pub(crate) mod acl;
pub(crate) mod catalog;
pub(crate) mod kv;
pub(crate) mod sessions;

use serde::Serialize;
use serde::de::DeserializeOwned;
use storage::{KeyRange, KeyValue, Storage};

use crate::Error;

/// The registry's key prefix in the shared store.
pub(crate) const PREFIX: &str = "registry/";

/// A storage key made of `parts`, in one allocation (the hot paths build several keys a
/// request).
pub(crate) fn store_key(parts: &[&str]) -> Vec<u8> {
    let mut key = Vec::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        key.extend_from_slice(part.as_bytes());
    }
    key
}

/// Decodes a stored JSON record; a bad record is a 500 naming the key, never a panic.
pub(crate) fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::CorruptRecord {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: err.to_string(),
    })
}

/// Encodes a record for storage (`serde_json::to_vec`'s bytes, written by http-kit's faster
/// serialiser).
pub(crate) fn encode<T: Serialize>(key: &[u8], record: &T) -> Result<Vec<u8>, Error> {
    http_kit::json::to_vec(record).map_err(|err| Error::CorruptRecord {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: err.to_string(),
    })
}

/// A record with the storage revisions Consul reports as CreateIndex / ModifyIndex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored<T> {
    pub(crate) record: T,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

impl<T: DeserializeOwned> Stored<T> {
    pub(crate) fn from_kv(kv: &KeyValue) -> Result<Stored<T>, Error> {
        Ok(Stored {
            record: decode(&kv.key, &kv.value)?,
            create_index: kv.create_revision,
            modify_index: kv.mod_revision,
        })
    }
}

/// Every record in `range`, decoded.
pub(crate) async fn scan_records<T: DeserializeOwned>(
    storage: &dyn Storage,
    range: KeyRange,
) -> Result<Vec<Stored<T>>, Error> {
    let scanned = storage.scan(range, None).await?;
    scanned.kvs.iter().map(Stored::from_kv).collect()
}

/// The index of several ranges: the last change to any of them.
pub(crate) async fn ranges_index(storage: &dyn Storage, ranges: &[KeyRange]) -> Result<u64, Error> {
    let mut index = 0;
    for range in ranges {
        index = index.max(storage.range_revision(range.clone()).await?);
    }
    Ok(index)
}
