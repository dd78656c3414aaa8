//! Stored policy-engine versions (see `store/mod.rs` for the layout).
//!
//! ```text
//! platform/policy-engine-versions/<tool-id>            PolicyEngineVersionRecord
//! platform/policy-engine-version-names/<version>       IdRef → version (unique)
//! ```
//!
//! Invariants: a record and its name index are created, renamed and removed in one
//! transaction, so a version string names at most one record; the list is in creation order
//! (the revision that created each record's key), never by timestamp alone. Version strings
//! are validated (`N.N.N` or `N.N.N-name`) before they reach a key.

use serde::{Deserialize, Serialize};
use storage::{Compare, Storage, Txn};

use crate::Error;
use crate::store::{IdRef, PREFIX, Stored, commit, delete, load, load_all, put};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PolicyEngineVersionRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    /// The engine's version string (`0.26.0`, `0.26.0-bundle`).
    pub(crate) engine_version: String,
    pub(crate) url: String,
    pub(crate) sha: String,
    pub(crate) deprecated: bool,
    pub(crate) deprecated_reason: Option<String>,
    pub(crate) official: bool,
    pub(crate) enabled: bool,
    pub(crate) beta: bool,
    pub(crate) created_at_ms: u64,
}

pub(crate) fn version_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}policy-engine-versions/{id}").into_bytes()
}

fn versions_prefix() -> String {
    format!("{PREFIX}policy-engine-versions/")
}

pub(crate) fn name_key(engine_version: &str) -> Vec<u8> {
    format!("{PREFIX}policy-engine-version-names/{engine_version}").into_bytes()
}

pub(crate) async fn load_version(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<PolicyEngineVersionRecord>>, Error> {
    if id.contains('/') {
        return Ok(None);
    }
    load(storage, &version_key(id)).await
}

/// Every version, oldest first.
pub(crate) async fn load_versions(
    storage: &dyn Storage,
) -> Result<Vec<PolicyEngineVersionRecord>, Error> {
    let mut all = load_all::<PolicyEngineVersionRecord>(storage, &versions_prefix()).await?;
    all.sort_by_key(|stored| stored.created);
    Ok(all.into_iter().map(|stored| stored.record).collect())
}

/// Creates `record`; `false` when its version string is taken.
pub(crate) async fn create_version(
    storage: &dyn Storage,
    record: &PolicyEngineVersionRecord,
) -> Result<bool, Error> {
    let txn = Txn::new()
        .when(Compare::Missing(version_key(&record.id)))
        .when(Compare::Missing(name_key(&record.engine_version)))
        .then(put(version_key(&record.id), record)?)
        .then(put(
            name_key(&record.engine_version),
            &IdRef::new(&record.id),
        )?);
    commit(storage, txn).await
}

/// Replaces `before` (read at `revision`) with `after`, moving the name index when the version
/// string changed; `false` when the record changed meanwhile or the new name is taken.
pub(crate) async fn update_version(
    storage: &dyn Storage,
    before: &PolicyEngineVersionRecord,
    revision: storage::Revision,
    after: &PolicyEngineVersionRecord,
) -> Result<bool, Error> {
    let mut txn = Txn::new()
        .when(Compare::ModRevision(version_key(&before.id), revision))
        .then(put(version_key(&after.id), after)?);
    if before.engine_version != after.engine_version {
        txn = txn
            .when(Compare::Missing(name_key(&after.engine_version)))
            .then(delete(name_key(&before.engine_version)))
            .then(put(
                name_key(&after.engine_version),
                &IdRef::new(&after.id),
            )?);
    }
    commit(storage, txn).await
}

/// Whether a version string is taken (by any record).
pub(crate) async fn name_taken(storage: &dyn Storage, engine_version: &str) -> Result<bool, Error> {
    Ok(storage.get(&name_key(engine_version)).await?.is_some())
}

/// Deletes `record` (read at `revision`) and its name index; `false` when it changed meanwhile.
pub(crate) async fn delete_version(
    storage: &dyn Storage,
    record: &PolicyEngineVersionRecord,
    revision: storage::Revision,
) -> Result<bool, Error> {
    let txn = Txn::new()
        .when(Compare::ModRevision(version_key(&record.id), revision))
        .then(delete(version_key(&record.id)))
        .then(delete(name_key(&record.engine_version)));
    commit(storage, txn).await
}
