//! Stored records and keys of the registry's kv family (see `store/mod.rs` for the layout).
//!
//! Keys:
//! ```text
//! registry/kv/<namespace>/<key>            KvRecord
//! registry/lock-delays/<namespace>/<key>   LockDelayRecord (acquire returns false until then)
//! ```
//!
//! Invariants: a KV entry's CreateIndex/ModifyIndex are its key's storage create/mod revisions;
//! the value is kept base64-encoded (as Consul sends it), `None` for an empty value (Consul's
//! `"Value": null`); namespaces never contain `/` (validated in `meta.rs`), so
//! `<namespace>/` prefixes are exact. Lock-delays are wall-clock Unix ms, read by acquire from
//! storage (they survive a restart); an expired one is deleted lazily by the next acquire.
//! An entry's `Session` is always also its `lock_record` (acquire sets both); a `lock_record`
//! naming a live session means that session's lock record for the key exists (only the
//! session's invalidation or the entry's deletion removes it).

use serde::{Deserialize, Serialize};
use storage::KeyRange;

use crate::store::{PREFIX, store_key};

/// The current version of every record in this file.
pub(crate) const RECORD_VERSION: u32 = 1;

/// Every KV key of `namespace` starting with `prefix`.
pub(crate) fn kv_range(namespace: &str, prefix: &str) -> KeyRange {
    KeyRange::prefix(format!("{PREFIX}kv/{namespace}/{prefix}"))
}

pub(crate) fn kv_key(namespace: &str, key: &str) -> Vec<u8> {
    store_key(&[PREFIX, "kv/", namespace, "/", key])
}

/// The length of `registry/kv/<namespace>/`, to strip it from stored keys.
pub(crate) fn kv_key_offset(namespace: &str) -> usize {
    format!("{PREFIX}kv/{namespace}/").len()
}

pub(crate) fn lock_delay_key(namespace: &str, key: &str) -> Vec<u8> {
    store_key(&[PREFIX, "lock-delays/", namespace, "/", key])
}

/// A KV entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KvRecord {
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) flags: u64,
    /// Base64 (standard alphabet, padded); `None` for an empty value.
    #[serde(default)]
    pub(crate) value: Option<String>,
    /// The session holding the lock on this key, if any.
    #[serde(default)]
    pub(crate) session: Option<String>,
    #[serde(default)]
    pub(crate) lock_index: u64,
    /// The session whose lock record for this key (`store/sessions.rs`) was written with or
    /// before this entry: the last session to acquire the key, kept by release and plain
    /// PUTs, so a holder that releases and acquires again writes only this entry. Not shown
    /// to clients. Absent in entries written before it existed (acquire then writes the lock
    /// record again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lock_record: Option<String>,
}

/// What the KV writes read of an entry they replace: its lock fields, decoded from the same
/// JSON as [`KvRecord`] without its value (skipped unread, not copied).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct KvLockState {
    #[serde(default)]
    pub(crate) session: Option<String>,
    #[serde(default)]
    pub(crate) lock_index: u64,
    #[serde(default)]
    pub(crate) lock_record: Option<String>,
}

/// A lock-delay on a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockDelayRecord {
    pub(crate) version: u32,
    /// Unix ms before which acquire returns `false`.
    pub(crate) until_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_state_reads_the_lock_fields_of_a_stored_entry() {
        let record = KvRecord {
            version: RECORD_VERSION,
            flags: 3,
            value: Some("dmFsdWU=".to_owned()),
            session: Some("s".to_owned()),
            lock_index: 7,
            lock_record: Some("s".to_owned()),
        };
        let key = kv_key("default", "k");
        let state: KvLockState =
            crate::store::decode(&key, &crate::store::encode(&key, &record).unwrap()).unwrap();
        assert_eq!(
            state,
            KvLockState {
                session: Some("s".to_owned()),
                lock_index: 7,
                lock_record: Some("s".to_owned()),
            }
        );
        // An entry written before `lock_record` existed.
        let old = br#"{"version":1,"flags":0,"value":null,"session":null,"lock_index":2}"#;
        let state: KvLockState = crate::store::decode(&key, old).unwrap();
        assert_eq!(state.lock_index, 2);
        assert_eq!(state.lock_record, None);
    }

    #[test]
    fn kv_key_offset_strips_the_namespace_prefix() {
        let key = kv_key("default", "a/b");
        assert_eq!(&key[kv_key_offset("default")..], b"a/b");
        assert!(kv_range("default", "a/").contains(&key));
        assert!(!kv_range("other", "").contains(&key));
    }
}
