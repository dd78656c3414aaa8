//! Stored records and keys of the registry's sessions family (see `store/mod.rs` for the layout).
//!
//! Keys:
//! ```text
//! registry/sessions/<session-id>                          SessionRecord
//! registry/session-locks/<session-id>/<namespace>/<key>   SessionLockRecord (a key it holds)
//! registry/session-deadlines/<session-id>                 DeadlineRecord (TTL checkpoint)
//! registry/session-checkpoint                             CheckpointRecord (last checkpoint)
//! ```
//!
//! Invariants:
//! - A session record is written once, at create, and deleted at invalidation: its
//!   CreateIndex/ModifyIndex are the key's storage revisions and never move afterwards (Consul's
//!   renew does not move them either). Everything that changes while a session lives (held keys,
//!   renewed TTL deadlines) lives under other prefixes, so `registry/sessions/` (the index of
//!   session info/node/list) moves only when a session is created or invalidated.
//! - Session ids are lowercase hyphenated UUIDs, so `<session-id>/` prefixes are exact.
//! - A lock record exists for every KV entry whose `Session` or `lock_record` is that session
//!   (written in the same transaction as the session's first acquire of the key, see
//!   `domain/kv.rs`); a stale one (its key released, deleted or overwritten since) is allowed
//!   and ignored: invalidation checks the KV entry itself, and deletes every lock record of the
//!   session, stale or not. Release keeps the record, so a session keeps one per key it
//!   acquired until it is invalidated, or the key is deleted while its entry still names the
//!   session.
//! - A deadline record, when present, is at least as late as the record's `expires_at_ms`;
//!   `domain/session_timers.rs` explains how the two bound the real deadline after a restart.

use serde::{Deserialize, Serialize};
use storage::KeyRange;

use crate::store::{PREFIX, store_key};

/// The current version of every record in this file.
pub(crate) const RECORD_VERSION: u32 = 1;

pub(crate) fn sessions_prefix() -> String {
    format!("{PREFIX}sessions/")
}

/// Every session record: what session info, node and list read.
pub(crate) fn sessions_range() -> KeyRange {
    KeyRange::prefix(sessions_prefix())
}

pub(crate) fn session_key(id: &str) -> Vec<u8> {
    store_key(&[PREFIX, "sessions/", id])
}

/// The lock records of one session.
pub(crate) fn session_locks_range(id: &str) -> KeyRange {
    KeyRange::prefix(session_locks_prefix(id))
}

pub(crate) fn session_locks_prefix(id: &str) -> String {
    format!("{PREFIX}session-locks/{id}/")
}

/// The record saying session `id` holds `key` in `namespace`.
pub(crate) fn session_lock_key(id: &str, namespace: &str, key: &str) -> Vec<u8> {
    store_key(&[PREFIX, "session-locks/", id, "/", namespace, "/", key])
}

/// Splits a lock record's key back into (namespace, key).
pub(crate) fn parse_session_lock_key(id: &str, stored: &[u8]) -> Option<(String, String)> {
    let rest = stored.strip_prefix(session_locks_prefix(id).as_bytes())?;
    let rest = std::str::from_utf8(rest).ok()?;
    let (namespace, key) = rest.split_once('/')?;
    Some((namespace.to_owned(), key.to_owned()))
}

pub(crate) fn deadlines_range() -> KeyRange {
    KeyRange::prefix(format!("{PREFIX}session-deadlines/"))
}

pub(crate) fn deadline_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}session-deadlines/{id}").into_bytes()
}

/// The id a deadline record's key names.
pub(crate) fn parse_deadline_key(stored: &[u8]) -> Option<&str> {
    let rest = stored.strip_prefix(format!("{PREFIX}session-deadlines/").as_bytes())?;
    std::str::from_utf8(rest).ok()
}

pub(crate) fn checkpoint_key() -> Vec<u8> {
    format!("{PREFIX}session-checkpoint").into_bytes()
}

/// What a session does to the keys it holds when it is invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Behavior {
    /// Clear the key's `Session`, keep its value and `LockIndex`.
    Release,
    /// Delete the key.
    Delete,
}

impl Behavior {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Behavior::Release => "release",
            Behavior::Delete => "delete",
        }
    }

    /// Consul's spellings; an empty string is the default, `release`.
    pub(crate) fn parse(raw: &str) -> Option<Behavior> {
        match raw {
            "" | "release" => Some(Behavior::Release),
            "delete" => Some(Behavior::Delete),
            _ => None,
        }
    }
}

/// A service check a session is bound to (`ServiceChecks` entries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ServiceCheckRef {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) namespace: String,
}

/// A session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionRecord {
    pub(crate) version: u32,
    /// Lowercase hyphenated UUID.
    pub(crate) id: String,
    pub(crate) namespace: String,
    #[serde(default)]
    pub(crate) name: String,
    pub(crate) node: String,
    /// Nanoseconds; 0 disables the lock-delay. Capped at 60 s when applied.
    pub(crate) lock_delay_ns: u64,
    pub(crate) behavior: Behavior,
    /// The TTL as the client wrote it (`"30s"`), empty for none.
    #[serde(default)]
    pub(crate) ttl: String,
    /// The TTL in milliseconds (rounded up), 0 for none.
    #[serde(default)]
    pub(crate) ttl_ms: u64,
    /// The deprecated `Checks` list, after Consul's fixup (`None`: omitted from responses).
    #[serde(default)]
    pub(crate) checks: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) node_checks: Vec<String>,
    #[serde(default)]
    pub(crate) service_checks: Vec<ServiceCheckRef>,
    /// For a TTL session: Unix ms of its deadline at create.
    #[serde(default)]
    pub(crate) expires_at_ms: Option<u64>,
}

impl SessionRecord {
    /// Every check id the session is bound to: `Checks ∪ NodeChecks ∪ ServiceChecks[].ID`, each
    /// once, in that order (Consul's `Session.CheckIDs`).
    pub(crate) fn check_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = Vec::new();
        let all = self
            .checks
            .iter()
            .flatten()
            .chain(self.node_checks.iter())
            .map(String::as_str)
            .chain(self.service_checks.iter().map(|check| check.id.as_str()));
        for id in all {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

/// The record saying a session holds a key (its key says which; the value carries nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionLockRecord {
    pub(crate) version: u32,
}

/// A TTL session's deadline as of the last checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeadlineRecord {
    pub(crate) version: u32,
    /// Unix ms.
    pub(crate) expires_at_ms: u64,
}

/// When the last checkpoint of renewed deadlines was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointRecord {
    pub(crate) version: u32,
    /// Unix ms at which the checkpointed deadlines were read from memory: every renewal before
    /// it is in storage.
    pub(crate) at_ms: u64,
    /// Written by the final checkpoint of a clean shutdown, after which renewals were written
    /// through: every stored deadline is exact.
    #[serde(default)]
    pub(crate) clean: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_round_trip() {
        let key = session_lock_key("abc", "default", "a/b/c");
        assert_eq!(
            parse_session_lock_key("abc", &key),
            Some(("default".to_owned(), "a/b/c".to_owned()))
        );
        assert_eq!(parse_session_lock_key("abd", &key), None);
    }

    #[test]
    fn session_prefixes_do_not_overlap() {
        let sessions = sessions_range();
        assert!(!sessions.contains(&session_lock_key("a", "default", "k")));
        assert!(!sessions.contains(&deadline_key("a")));
        assert!(!sessions.contains(&checkpoint_key()));
        assert!(sessions.contains(&session_key("a")));
    }

    #[test]
    fn check_ids_are_the_union_without_duplicates() {
        let record = SessionRecord {
            version: RECORD_VERSION,
            id: "x".to_owned(),
            namespace: "default".to_owned(),
            name: String::new(),
            node: "n".to_owned(),
            lock_delay_ns: 0,
            behavior: Behavior::Release,
            ttl: String::new(),
            ttl_ms: 0,
            checks: Some(vec!["a".to_owned(), "serfHealth".to_owned()]),
            node_checks: vec!["serfHealth".to_owned()],
            service_checks: vec![ServiceCheckRef {
                id: "svc".to_owned(),
                namespace: String::new(),
            }],
            expires_at_ms: None,
        };
        assert_eq!(record.check_ids(), vec!["a", "serfHealth", "svc"]);
    }
}
