//! Every storage key the platform writes, and its stored records, one file per family:
//! `users.rs`, `organizations.rs`, `teams.rs` (teams and team membership), `memberships.rs`
//! (organization memberships), `tokens.rs` (user, team and organization tokens). Engineer P2's
//! families (workspaces, configuration versions, runs) add their own files here.
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
//! platform/team-members/<team-id>/<user-id>           TeamMemberRecord
//! platform/user-teams/<user-id>/<org>/<team-id>       IdRef (a user's teams, by organization)
//! platform/memberships/<org>/<ou-id>                  MembershipRecord
//! platform/membership-ids/<ou-id>                     OrganizationRef → organization
//! platform/user-memberships/<user-id>/<org>           IdRef → membership (one per pair)
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
//! - Index records (`IdRef`, `HashRef`, `OrganizationRef`) are written and deleted in the same
//!   transaction as the record they point at; a write that depends on what it read compares
//!   the mod revision of what it read (compare-and-swap), and creations compare `Missing` on
//!   every uniqueness index (usernames, emails, team names, one membership per user and
//!   organization).
//! - Organization names, usernames and team names are validated to `[A-Za-z0-9_.-]` before
//!   they reach a key, so a `/` never splits a key; emails are keys only in `user-emails/`,
//!   the last segment.

pub(crate) mod memberships;
pub(crate) mod organizations;
pub(crate) mod teams;
pub(crate) mod tokens;
pub(crate) mod users;
// Engineer P2 (layouts in each file):
pub(crate) mod configuration_versions;
pub(crate) mod runs;
pub(crate) mod workspaces;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use storage::{KeyRange, Op, Revision, Storage, Txn};

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
