//! Every storage key the platform writes, and its stored records, one file per family:
//! `users.rs`, `organizations.rs`, `teams.rs` (teams and team membership), `memberships.rs`
//! (organization memberships), `tokens.rs` (user, team and organization tokens),
//! `workspaces.rs`, `configuration_versions.rs` (and the URL signing key), `runs.rs`,
//! `registry_modules.rs` (modules, versions, parsed details, webhooks), `oauth_clients.rs`
//! (VCS connections), `site_settings.rs` (the site administration singletons) and
//! `policy_versions.rs` (the policy-engine version catalogue); the last seven list their keys
//! in their own files.
//!
//! Layout under [`PREFIX`]:
//! ```text
//! platform/bootstrap                                  BootstrapRecord (site admin created)
//! platform/users/<user-id>                            UserRecord
//! platform/usernames/<username lowercased>            IdRef → user
//! platform/user-emails/<email lowercased>             IdRef → user
//! platform/organizations/<name>                       OrganizationRecord
//! platform/teams/<team-id>                            TeamRecord
//! platform/org-teams/<org>/<team-id>                  IdRef (the organization's teams)
//! platform/org-team-names/<org>/<name lowercased>     IdRef → team (names are unique)
//! platform/team-members/<team-id>/<user-id>           TeamMemberRecord (the reverse of a
//!                                                     membership's `team_ids`)
//! platform/memberships/<org>/<seq>                    MembershipRecord (seq: 16 hex digits,
//!                                                     creation order = the list's order;
//!                                                     holds the user's teams there)
//! platform/membership-statuses/<org>/<status>/<seq>   MembershipRef (the list per status)
//! platform/membership-counts/<org>/<shard>            status counts, one partial sum per shard
//! platform/membership-ids/<ou-id>                     MembershipRef → organization and seq
//! platform/user-memberships/<user-id>/<org>           MembershipRef (one per pair)
//! platform/tokens/<sha256 of secret>                  TokenRecord
//! platform/token-ids/<at-id>                          HashRef → token
//! platform/user-tokens/<user-id>/<at-id>              HashRef
//! platform/team-tokens/<team-id>                      HashRef (one per team)
//! platform/organization-tokens/<org>                  HashRef (one per organization)
//! ```
//!
//! Invariants:
//! - Every key starts with [`PREFIX`]; every record is JSON with a `version` field
//!   ([`RECORD_VERSION`]), so a later release can upgrade it in place.
//! - Index records (`IdRef`, `HashRef`, `MembershipRef`) are written and deleted in the same
//!   transaction as the record they point at; a write that depends on what it read compares
//!   the mod revision of what it read (compare-and-swap), and creations compare `Missing` on
//!   every uniqueness index (usernames, emails, team names, one membership per user and
//!   organization).
//! - Organization names, usernames and team names are validated to `[A-Za-z0-9_.-]` before
//!   they reach a key, so a `/` never splits a key; emails are keys only in `user-emails/`,
//!   the last segment.
//! - A list that may be long is laid out in its key order and read a window at a time
//!   ([`scan_window`]); what it counts is maintained beside it in the writing transaction
//!   (`membership-counts/`), so serving a page never reads the whole list.
//! - Every list has a total order, never a timestamp alone (records created in one
//!   millisecond tie on it): organizations, teams and workspaces by their unique names;
//!   memberships by their `seq`; tokens, runs and configuration versions by the revision that
//!   created their key ([`Stored::created`], [`load_ids_in_creation_order`]).

pub(crate) mod configuration_versions;
pub(crate) mod memberships;
pub(crate) mod oauth_clients;
pub(crate) mod organizations;
pub(crate) mod policy_versions;
pub(crate) mod registry_modules;
pub(crate) mod runs;
pub(crate) mod site_settings;
pub(crate) mod teams;
pub(crate) mod tokens;
pub(crate) mod users;
pub(crate) mod workspaces;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use storage::{KeyRange, KeyValue, Op, Revision, Storage, Txn};

use crate::Error;

/// The platform's key prefix in the shared store.
pub(crate) const PREFIX: &str = "platform/";

/// The current version of every record.
pub(crate) const RECORD_VERSION: u32 = 1;

/// How many times a compare-and-swap write is retried before answering 409.
pub(crate) const MAX_ATTEMPTS: usize = 16;

/// A record and the mod revision it was read at.
#[derive(Debug, Clone)]
pub(crate) struct Stored<T> {
    pub(crate) record: T,
    pub(crate) revision: Revision,
    /// The revision that created the key: a total order of creation (timestamps can tie).
    pub(crate) created: Revision,
}

/// An index record pointing at an id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdRef {
    pub(crate) version: u32,
    pub(crate) id: String,
}

impl IdRef {
    pub(crate) fn new(id: impl Into<String>) -> IdRef {
        IdRef {
            version: RECORD_VERSION,
            id: id.into(),
        }
    }
}

/// Decodes a stored JSON record; a bad record is a 500 naming the key, never a panic.
pub(crate) fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::CorruptRecord {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: err.to_string(),
    })
}

/// Encodes a record for storage.
pub(crate) fn encode<T: Serialize>(key: &[u8], record: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(record).map_err(|err| Error::CorruptRecord {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: err.to_string(),
    })
}

/// A put of `record` at `key`.
pub(crate) fn put<T: Serialize>(key: Vec<u8>, record: &T) -> Result<Op, Error> {
    let value = encode(&key, record)?;
    Ok(Op::Put { key, value })
}

pub(crate) fn delete(key: Vec<u8>) -> Op {
    Op::Delete { key }
}

/// The record at `key`, with its mod revision.
pub(crate) async fn load<T: DeserializeOwned>(
    storage: &dyn Storage,
    key: &[u8],
) -> Result<Option<Stored<T>>, Error> {
    match storage.get(key).await? {
        None => Ok(None),
        Some(kv) => Ok(Some(Stored {
            record: decode(&kv.key, &kv.value)?,
            revision: kv.mod_revision,
            created: kv.create_revision,
        })),
    }
}

/// Every record under `prefix`, in key order.
pub(crate) async fn load_all<T: DeserializeOwned>(
    storage: &dyn Storage,
    prefix: &str,
) -> Result<Vec<Stored<T>>, Error> {
    let scan = storage.scan(KeyRange::prefix(prefix), None).await?;
    scan.kvs
        .iter()
        .map(|kv| {
            Ok(Stored {
                record: decode(&kv.key, &kv.value)?,
                revision: kv.mod_revision,
                created: kv.create_revision,
            })
        })
        .collect()
}

/// The ids the [`IdRef`] index records under `prefix` point at, in creation order: by the
/// revision that created each index key (the store's sequence of commits; a creation timestamp
/// can tie, and ids are random), then in key order among keys one transaction created.
pub(crate) async fn load_ids_in_creation_order(
    storage: &dyn Storage,
    prefix: &str,
) -> Result<Vec<String>, Error> {
    let scan = storage.scan(KeyRange::prefix(prefix), None).await?;
    let mut entries = scan
        .kvs
        .iter()
        .map(|kv| Ok((kv.create_revision, decode::<IdRef>(&kv.key, &kv.value)?.id)))
        .collect::<Result<Vec<_>, Error>>()?;
    // A stable sort: keys created together keep their key order.
    entries.sort_by_key(|(created, _)| *created);
    Ok(entries.into_iter().map(|(_, id)| id).collect())
}

/// The last key segments under `prefix` (e.g. the ids of `platform/org-teams/<org>/`).
pub(crate) async fn list_suffixes(
    storage: &dyn Storage,
    prefix: &str,
) -> Result<Vec<String>, Error> {
    let scan = storage.scan(KeyRange::prefix(prefix), None).await?;
    Ok(scan
        .kvs
        .iter()
        .filter_map(|kv| kv.key.strip_prefix(prefix.as_bytes()))
        .map(|rest| String::from_utf8_lossy(rest).into_owned())
        .collect())
}

/// How many keys one scan of a long list reads at most.
pub(crate) const SCAN_CHUNK: usize = 512;

/// The smallest key after `key`.
pub(crate) fn key_after(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// The keys under `prefix` from the `offset`-th (0-based, in key order) on, at most `limit` of
/// them; the keys before are skipped [`SCAN_CHUNK`] at a time, so memory stays bounded by the
/// window and the cost of the skip is a key walk, not a decode.
pub(crate) async fn scan_window(
    storage: &dyn Storage,
    prefix: &str,
    offset: usize,
    limit: usize,
) -> Result<Vec<KeyValue>, Error> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut range = KeyRange::prefix(prefix);
    let mut to_skip = offset;
    let mut window = Vec::new();
    loop {
        let wanted = to_skip + (limit - window.len());
        let scan = storage
            .scan(range.clone(), Some(wanted.min(SCAN_CHUNK.max(limit))))
            .await?;
        let next_start = scan.kvs.last().map(|last| key_after(&last.key));
        let mut kvs = scan.kvs;
        if to_skip >= kvs.len() {
            to_skip -= kvs.len();
        } else {
            kvs.drain(..to_skip);
            to_skip = 0;
            window.extend(kvs);
            window.truncate(limit);
        }
        match next_start {
            Some(start) if scan.more && window.len() < limit => range.start = start,
            _ => return Ok(window),
        }
    }
}

/// Commits `txn`; `true` when its compares held.
pub(crate) async fn commit(storage: &dyn Storage, txn: Txn) -> Result<bool, Error> {
    Ok(storage.txn(txn).await?.succeeded)
}

/// The bootstrap marker: written once, when the site administrator is created.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BootstrapRecord {
    pub(crate) version: u32,
    pub(crate) admin_user_id: String,
    pub(crate) created_at_ms: u64,
}

pub(crate) fn bootstrap_key() -> Vec<u8> {
    format!("{PREFIX}bootstrap").into_bytes()
}

#[cfg(test)]
mod tests {
    use storage::{MemStorage, StorageExt};

    use super::*;

    /// A store holding `n` keys `list/<5 digits>` (values irrelevant) and one key on each side.
    async fn list_of(n: usize) -> MemStorage {
        let storage = MemStorage::new();
        let mut txn = Txn::new()
            .then(Op::Put {
                key: b"lisa".to_vec(),
                value: Vec::new(),
            })
            .then(Op::Put {
                key: b"list0".to_vec(),
                value: Vec::new(),
            });
        for index in 0..n {
            txn = txn.then(Op::Put {
                key: format!("list/{index:05}").into_bytes(),
                value: Vec::new(),
            });
        }
        storage.txn(txn).await.unwrap();
        storage
    }

    #[track_caller]
    fn check_window(kvs: &[KeyValue], expected: std::ops::Range<usize>) {
        let keys: Vec<String> = kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect();
        let wanted: Vec<String> = expected.map(|index| format!("list/{index:05}")).collect();
        assert_eq!(keys, wanted);
    }

    #[tokio::test]
    async fn scan_window_reads_any_window_across_chunk_boundaries() {
        let n = 2 * SCAN_CHUNK + 37;
        let storage = list_of(n).await;
        for (offset, limit) in [
            (0, 20),
            (SCAN_CHUNK - 10, 20),
            (SCAN_CHUNK, 100),
            (2 * SCAN_CHUNK + 30, 20),
            (n - 1, 5),
        ] {
            let kvs = scan_window(&storage, "list/", offset, limit).await.unwrap();
            check_window(&kvs, offset..(offset + limit).min(n));
        }
        assert!(
            scan_window(&storage, "list/", n, 20)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            scan_window(&storage, "list/", 0, 0)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(storage.scan_prefix(b"list/").await.unwrap().kvs.len(), n);
    }
}
