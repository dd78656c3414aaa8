//! Stored runs (see `store/mod.rs` for the layout).
//!
//! ```text
//! platform/runs/<run-id>                                              RunRecord
//! platform/workspace-runs/<ws-id>/<created ms, 20 digits>.<run-id>    IdRef (every run)
//! platform/workspace-active-runs/<ws-id>/<created ms>.<run-id>        IdRef (runs not final)
//! platform/cv-runs/<cv-id>/<run-id>                                   IdRef (runs of a version)
//! ```
//!
//! Invariants: a run is in `workspace-active-runs/` exactly while its status is not final
//! ([`save_run_ops`] keeps the index in step); every write of a run also writes its
//! workspace record, compared on its mod revision, so the queue of one workspace changes one
//! transaction at a time. Each run is created in a transaction of its own, with its index
//! keys, and every list of runs is in creation order: the order of the revisions that created
//! those keys (runs created in one millisecond tie on the key's timestamp, never on that).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use storage::{KeyRange, Op, Storage};

use crate::Error;
use crate::run_state::RunStatus;
use crate::store::{IdRef, PREFIX, Stored, load, load_ids_in_creation_order};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) workspace_id: String,
    pub(crate) organization: String,
    pub(crate) configuration_version_id: String,
    pub(crate) status: RunStatus,
    /// `<status>-at` → Unix ms.
    #[serde(default)]
    pub(crate) status_timestamps: BTreeMap<String, u64>,
    pub(crate) message: String,
    /// `tfe-api`, or `tfe-configuration-version` for a run queued by an upload.
    pub(crate) source: String,
    /// `plan-only`: a speculative run (also forced by a speculative configuration version).
    pub(crate) plan_only: bool,
    pub(crate) is_destroy: bool,
    pub(crate) refresh: bool,
    pub(crate) refresh_only: bool,
    pub(crate) auto_apply: bool,
    pub(crate) allow_empty_apply: bool,
    pub(crate) save_plan: bool,
    #[serde(default)]
    pub(crate) target_addrs: Vec<String>,
    #[serde(default)]
    pub(crate) replace_addrs: Vec<String>,
    #[serde(default)]
    pub(crate) variables: Vec<RunVariable>,
    #[serde(default)]
    pub(crate) terraform_version: Option<String>,
    #[serde(default)]
    pub(crate) created_by: Option<String>,
    pub(crate) created_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunVariable {
    pub(crate) key: String,
    pub(crate) value: String,
}

pub(crate) fn run_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}runs/{id}").into_bytes()
}

/// Every run record (the metrics endpoint counts them by status).
pub(crate) fn runs_prefix() -> String {
    format!("{PREFIX}runs/")
}

pub(crate) fn workspace_runs_prefix(workspace_id: &str) -> String {
    format!("{PREFIX}workspace-runs/{workspace_id}/")
}

pub(crate) fn active_runs_prefix(workspace_id: &str) -> String {
    format!("{PREFIX}workspace-active-runs/{workspace_id}/")
}

pub(crate) fn cv_runs_prefix(cv_id: &str) -> String {
    format!("{PREFIX}cv-runs/{cv_id}/")
}

fn order_suffix(run: &RunRecord) -> String {
    format!("{:020}.{}", run.created_at_ms, run.id)
}

pub(crate) async fn load_run(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<RunRecord>>, Error> {
    load(storage, &run_key(id)).await
}

/// The ids of a workspace's runs, oldest first.
pub(crate) async fn load_workspace_run_ids(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<String>, Error> {
    load_ids_in_creation_order(storage, &workspace_runs_prefix(workspace_id)).await
}

/// A workspace's runs that are not final, oldest first.
pub(crate) async fn load_active_runs(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<RunRecord>, Error> {
    load_runs(storage, &active_runs_prefix(workspace_id)).await
}

/// The runs of configuration version `cv_id`, oldest first.
pub(crate) async fn load_cv_runs(
    storage: &dyn Storage,
    cv_id: &str,
) -> Result<Vec<RunRecord>, Error> {
    load_runs(storage, &cv_runs_prefix(cv_id)).await
}

/// The runs an index under `prefix` points at, oldest first.
async fn load_runs(storage: &dyn Storage, prefix: &str) -> Result<Vec<RunRecord>, Error> {
    let mut runs = Vec::new();
    for id in load_ids_in_creation_order(storage, prefix).await? {
        if let Some(run) = load_run(storage, &id).await? {
            runs.push(run.record);
        }
    }
    Ok(runs)
}

/// The ops that create `run` with its indexes.
pub(crate) fn create_run_ops(run: &RunRecord) -> Result<Vec<Op>, Error> {
    let suffix = order_suffix(run);
    let mut ops = vec![
        super::put(
            format!("{}{suffix}", workspace_runs_prefix(&run.workspace_id)).into_bytes(),
            &IdRef::new(&run.id),
        )?,
        super::put(
            format!(
                "{}{}",
                cv_runs_prefix(&run.configuration_version_id),
                run.id
            )
            .into_bytes(),
            &IdRef::new(&run.id),
        )?,
    ];
    ops.extend(save_run_ops(run)?);
    Ok(ops)
}

/// The ops that write `run` and keep the active index in step with its status.
pub(crate) fn save_run_ops(run: &RunRecord) -> Result<Vec<Op>, Error> {
    let active_key = format!(
        "{}{}",
        active_runs_prefix(&run.workspace_id),
        order_suffix(run)
    )
    .into_bytes();
    let index = if run.status.is_final() {
        super::delete(active_key)
    } else {
        super::put(active_key, &IdRef::new(&run.id))?
    };
    Ok(vec![super::put(run_key(&run.id), run)?, index])
}

/// Deletes of every run of a workspace with their indexes.
pub(crate) async fn delete_workspace_runs_ops(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<Op>, Error> {
    let mut ops = Vec::new();
    for id in load_workspace_run_ids(storage, workspace_id).await? {
        if let Some(run) = load_run(storage, &id).await? {
            ops.push(super::delete(run_key(&id)));
            ops.push(Op::DeleteRange(KeyRange::prefix(
                cv_runs_prefix(&run.record.configuration_version_id).as_str(),
            )));
        }
    }
    ops.push(Op::DeleteRange(KeyRange::prefix(
        workspace_runs_prefix(workspace_id).as_str(),
    )));
    ops.push(Op::DeleteRange(KeyRange::prefix(
        active_runs_prefix(workspace_id).as_str(),
    )));
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use storage::{MemStorage, Txn};

    use super::*;
    use crate::store::RECORD_VERSION;

    /// A pending run `id` of workspace `ws-1` and version `cv-1`, created at `created_at_ms`.
    fn run(id: &str, created_at_ms: u64) -> RunRecord {
        RunRecord {
            version: RECORD_VERSION,
            id: id.to_owned(),
            workspace_id: "ws-1".to_owned(),
            organization: "acme".to_owned(),
            configuration_version_id: "cv-1".to_owned(),
            status: RunStatus::Pending,
            status_timestamps: BTreeMap::new(),
            message: String::new(),
            source: "tfe-api".to_owned(),
            plan_only: false,
            is_destroy: false,
            refresh: true,
            refresh_only: false,
            auto_apply: false,
            allow_empty_apply: false,
            save_plan: false,
            target_addrs: Vec::new(),
            replace_addrs: Vec::new(),
            variables: Vec::new(),
            terraform_version: None,
            created_by: None,
            created_at_ms,
        }
    }

    fn ids(runs: &[RunRecord]) -> Vec<&str> {
        runs.iter().map(|run| run.id.as_str()).collect()
    }

    #[tokio::test]
    async fn runs_created_in_one_millisecond_list_in_creation_order() {
        let storage = MemStorage::new();
        // Ids that sort against their creation order, all in the same millisecond.
        let created = ["run-c", "run-b", "run-a"];
        for id in created {
            let mut txn = Txn::new();
            txn.success
                .extend(create_run_ops(&run(id, 1_700_000_000_000)).unwrap());
            storage.txn(txn).await.unwrap();
        }
        assert_eq!(
            load_workspace_run_ids(&storage, "ws-1").await.unwrap(),
            created
        );
        assert_eq!(
            ids(&load_active_runs(&storage, "ws-1").await.unwrap()),
            created
        );
        assert_eq!(ids(&load_cv_runs(&storage, "cv-1").await.unwrap()), created);
    }

    #[tokio::test]
    async fn saving_a_run_keeps_its_place_in_the_queue() {
        let storage = MemStorage::new();
        for id in ["run-b", "run-a"] {
            let mut txn = Txn::new();
            txn.success
                .extend(create_run_ops(&run(id, 1_700_000_000_000)).unwrap());
            storage.txn(txn).await.unwrap();
        }
        let mut first = run("run-b", 1_700_000_000_000);
        first.status = RunStatus::PlanQueued;
        let mut txn = Txn::new();
        txn.success.extend(save_run_ops(&first).unwrap());
        storage.txn(txn).await.unwrap();
        assert_eq!(
            ids(&load_active_runs(&storage, "ws-1").await.unwrap()),
            ["run-b", "run-a"]
        );
    }
}
