//! Stored configuration versions and the URL signing key (see `store/mod.rs` for the layout).
//!
//! ```text
//! platform/configuration-versions/<cv-id>                         ConfigurationVersionRecord
//! platform/workspace-cvs/<ws-id>/<created ms, 20 digits>.<cv-id>  IdRef (creation order)
//! platform/url-signing-key                                        SigningKeyRecord
//! ```
//!
//! Invariants: a record and its workspace index are created and removed together, each version
//! in a transaction of its own, and a workspace's list is in creation order: the order of the
//! revisions that created the index keys (the key's timestamp can tie); the blob
//! of an upload lives in the blob store under `configuration-versions/<cv-id>/…` and the
//! record names it (`upload.blob_key`) only while it exists; the signing key is created once
//! (compare `Missing`) and never changes.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use storage::{Compare, KeyRange, Op, Storage, Txn};

use crate::Error;
use crate::store::{
    IdRef, PREFIX, RECORD_VERSION, Stored, commit, load, load_ids_in_creation_order,
};

/// `attributes.status` of a configuration version (the five values pytfe accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CvStatus {
    Pending,
    Fetching,
    Uploaded,
    Archived,
    Errored,
}

impl CvStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CvStatus::Pending => "pending",
            CvStatus::Fetching => "fetching",
            CvStatus::Uploaded => "uploaded",
            CvStatus::Archived => "archived",
            CvStatus::Errored => "errored",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConfigurationVersionRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) workspace_id: String,
    pub(crate) organization: String,
    pub(crate) auto_queue_runs: bool,
    pub(crate) speculative: bool,
    pub(crate) provisional: bool,
    /// `tfe-api`, `terraform`, `terraform+cloud` (API origins) or a VCS provider name.
    pub(crate) source: String,
    pub(crate) status: CvStatus,
    /// `<event>-at` → Unix ms (`started-at`, `finished-at`, `uploaded-at`, ...).
    #[serde(default)]
    pub(crate) status_timestamps: BTreeMap<String, u64>,
    #[serde(default)]
    pub(crate) error: Option<String>,
    #[serde(default)]
    pub(crate) error_message: Option<String>,
    /// The accepted upload (also kept for an errored archive, so a repeated PUT of the same
    /// bytes gets the same answer).
    #[serde(default)]
    pub(crate) upload: Option<UploadRecord>,
    #[serde(default)]
    pub(crate) created_by: Option<String>,
    pub(crate) created_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UploadRecord {
    /// The SHA-256 of an errored archive, whose blob is discarded, so a repeated PUT of it can
    /// be recognized; `None` for an accepted archive, which a repeat is compared with instead.
    #[serde(default)]
    pub(crate) sha256: Option<String>,
    pub(crate) size: u64,
    /// The blob holding the archive; `None` once discarded (errored or archived).
    pub(crate) blob_key: Option<String>,
}

impl ConfigurationVersionRecord {
    /// Whether the version came from the API or the CLI rather than a VCS provider.
    pub(crate) fn is_api_sourced(&self) -> bool {
        matches!(
            self.source.as_str(),
            "tfe-api" | "terraform" | "terraform+cloud"
        )
    }
}

pub(crate) fn cv_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}configuration-versions/{id}").into_bytes()
}

pub(crate) fn workspace_cvs_prefix(workspace_id: &str) -> String {
    format!("{PREFIX}workspace-cvs/{workspace_id}/")
}

pub(crate) fn workspace_cv_key(cv: &ConfigurationVersionRecord) -> Vec<u8> {
    format!(
        "{}{:020}.{}",
        workspace_cvs_prefix(&cv.workspace_id),
        cv.created_at_ms,
        cv.id
    )
    .into_bytes()
}

/// Where the blobs of configuration version `id` live in the blob store.
pub(crate) fn blob_prefix(id: &str) -> String {
    format!("configuration-versions/{id}")
}

pub(crate) async fn load_cv(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<ConfigurationVersionRecord>>, Error> {
    load(storage, &cv_key(id)).await
}

/// The ids of a workspace's configuration versions, oldest first.
pub(crate) async fn load_workspace_cv_ids(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<String>, Error> {
    load_ids_in_creation_order(storage, &workspace_cvs_prefix(workspace_id)).await
}

/// The ops that create `cv` with its workspace index.
pub(crate) fn create_cv_ops(
    cv: &ConfigurationVersionRecord,
) -> Result<(Vec<Compare>, Vec<Op>), Error> {
    Ok((
        vec![Compare::Missing(cv_key(&cv.id))],
        vec![
            super::put(cv_key(&cv.id), cv)?,
            super::put(workspace_cv_key(cv), &IdRef::new(&cv.id))?,
        ],
    ))
}

/// Deletes of every configuration version of a workspace.
pub(crate) async fn delete_workspace_cvs_ops(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<Op>, Error> {
    let mut ops: Vec<Op> = load_workspace_cv_ids(storage, workspace_id)
        .await?
        .iter()
        .map(|id| super::delete(cv_key(id)))
        .collect();
    ops.push(Op::DeleteRange(KeyRange::prefix(
        workspace_cvs_prefix(workspace_id).as_str(),
    )));
    Ok(ops)
}

/// The server's URL signing key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SigningKeyRecord {
    pub(crate) version: u32,
    /// 32 random bytes, base64.
    pub(crate) key: String,
}

pub(crate) fn signing_key_key() -> Vec<u8> {
    format!("{PREFIX}url-signing-key").into_bytes()
}

/// The signing key, created from `fresh` when the store has none yet (a concurrent creator
/// wins and its key is returned).
pub(crate) async fn load_or_create_signing_key(
    storage: &dyn Storage,
    fresh: [u8; 32],
) -> Result<Vec<u8>, Error> {
    let key = signing_key_key();
    for _ in 0..2 {
        if let Some(stored) = load::<SigningKeyRecord>(storage, &key).await? {
            return STANDARD
                .decode(stored.record.key)
                .map_err(|err| Error::CorruptRecord {
                    key: String::from_utf8_lossy(&key).into_owned(),
                    reason: err.to_string(),
                });
        }
        let record = SigningKeyRecord {
            version: RECORD_VERSION,
            key: STANDARD.encode(fresh),
        };
        let txn = Txn::new()
            .when(Compare::Missing(key.clone()))
            .then(super::put(key.clone(), &record)?);
        if commit(storage, txn).await? {
            return Ok(fresh.to_vec());
        }
    }
    Err(Error::Contention)
}

#[cfg(test)]
mod tests {
    use storage::MemStorage;

    use super::*;

    fn cv(id: &str, created_at_ms: u64) -> ConfigurationVersionRecord {
        ConfigurationVersionRecord {
            version: RECORD_VERSION,
            id: id.to_owned(),
            workspace_id: "ws-1".to_owned(),
            organization: "acme".to_owned(),
            auto_queue_runs: true,
            speculative: false,
            provisional: false,
            source: "tfe-api".to_owned(),
            status: CvStatus::Pending,
            status_timestamps: BTreeMap::new(),
            error: None,
            error_message: None,
            upload: None,
            created_by: None,
            created_at_ms,
        }
    }

    #[tokio::test]
    async fn versions_created_in_one_millisecond_list_in_creation_order() {
        let storage = MemStorage::new();
        // Ids that sort against their creation order, all in the same millisecond.
        let created = ["cv-c", "cv-b", "cv-a"];
        for id in created {
            let (compares, ops) = create_cv_ops(&cv(id, 1_700_000_000_000)).unwrap();
            let mut txn = Txn::new();
            txn.compares.extend(compares);
            txn.success.extend(ops);
            assert!(commit(&storage, txn).await.unwrap());
        }
        assert_eq!(
            load_workspace_cv_ids(&storage, "ws-1").await.unwrap(),
            created
        );
    }
}
