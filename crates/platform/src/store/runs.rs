//! Stored runs (see `store/mod.rs` for the layout).
//!
//! ```text
//! platform/runs/<run-id>                                          RunRecord
//! platform/workspace-runs/<ws-id>/<created ms, 20 digits>.<run-id>    IdRef (creation order)
//! platform/workspace-active-runs/<ws-id>/<created ms>.<run-id>        IdRef (runs not final)
//! platform/cv-runs/<cv-id>/<run-id>                               IdRef (runs of a version)
//! ```
//!
//! Invariants: a run is in `workspace-active-runs/` exactly while its status is not final
//! ([`save_run_ops`] keeps the index in step); every write of a run also writes its
//! workspace record, compared on its mod revision, so the queue of one workspace changes one
//! transaction at a time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use storage::{KeyRange, Op, Storage};

use crate::Error;
use crate::run_state::RunStatus;
use crate::store::{IdRef, PREFIX, Stored, load};

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

async fn load_index(storage: &dyn Storage, prefix: &str) -> Result<Vec<String>, Error> {
    let scan = storage.scan(KeyRange::prefix(prefix), None).await?;
    scan.kvs
        .iter()
        .map(|kv| super::decode::<IdRef>(&kv.key, &kv.value).map(|index| index.id))
        .collect()
}

/// The ids of a workspace's runs, oldest first.
pub(crate) async fn load_workspace_run_ids(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<String>, Error> {
    load_index(storage, &workspace_runs_prefix(workspace_id)).await
}

/// A workspace's runs that are not final, oldest first.
pub(crate) async fn load_active_runs(
    storage: &dyn Storage,
    workspace_id: &str,
) -> Result<Vec<RunRecord>, Error> {
    let mut runs = Vec::new();
    for id in load_index(storage, &active_runs_prefix(workspace_id)).await? {
        if let Some(run) = load_run(storage, &id).await? {
            runs.push(run.record);
        }
    }
    Ok(runs)
}

/// The runs of configuration version `cv_id`, oldest first.
pub(crate) async fn load_cv_runs(
    storage: &dyn Storage,
    cv_id: &str,
) -> Result<Vec<RunRecord>, Error> {
    let mut runs = Vec::new();
    for id in load_index(storage, &cv_runs_prefix(cv_id)).await? {
        if let Some(run) = load_run(storage, &id).await? {
            runs.push(run.record);
        }
    }
    runs.sort_by_key(|run| run.created_at_ms);
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
