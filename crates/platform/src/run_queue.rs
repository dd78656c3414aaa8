//! A workspace's run queue: what creating a run, and a run leaving the queue, do to the
//! workspace. Runs wait `pending` while another non-speculative run holds the workspace or it is
//! locked; when the holder finishes or the lock is lifted, the oldest pending run starts.
//!
//! Where it sits: `runs.rs` (`POST /runs` and the run actions), `objects.rs` (the run an upload
//! with `auto-queue-runs` queues) and `workspaces/lock.rs` (unlock) call it; which run may start
//! is the pure `run_state.rs`; the ops it returns write `store/runs.rs` records.
//!
//! Invariants: every function here changes the workspace record it is given in place and
//! returns the run ops; the caller commits both in one transaction compared on the workspace's
//! mod revision, so a workspace's queue (`active_run_id`, `current_run_id`, `latest_run_id`)
//! changes one transaction at a time. A non-speculative run past `pending` and not final holds
//! the workspace (`active_run_id`); speculative runs never wait.

use serde_json::Value;
use storage::Op;

use crate::run_state::{self, QueuedRun, RunStatus};
use crate::store::RECORD_VERSION;
use crate::store::configuration_versions::ConfigurationVersionRecord;
use crate::store::runs::{RunRecord, RunVariable, create_run_ops, load_active_runs, save_run_ops};
use crate::store::workspaces::WorkspaceRecord;
use crate::{Error, State, ids};

/// The options of a new run (`POST /runs` attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunOptions {
    pub(crate) message: String,
    pub(crate) source: &'static str,
    pub(crate) plan_only: bool,
    pub(crate) is_destroy: bool,
    pub(crate) refresh: bool,
    pub(crate) refresh_only: bool,
    pub(crate) auto_apply: Option<bool>,
    pub(crate) allow_empty_apply: bool,
    pub(crate) save_plan: bool,
    pub(crate) target_addrs: Vec<String>,
    pub(crate) replace_addrs: Vec<String>,
    pub(crate) variables: Vec<RunVariable>,
    pub(crate) terraform_version: Option<String>,
}

impl RunOptions {
    /// The run an upload with `auto-queue-runs` queues.
    pub(crate) fn auto_queued() -> RunOptions {
        RunOptions {
            message: "Triggered via API".to_owned(),
            source: "tfe-configuration-version",
            plan_only: false,
            is_destroy: false,
            refresh: true,
            refresh_only: false,
            auto_apply: None,
            allow_empty_apply: false,
            save_plan: false,
            target_addrs: Vec::new(),
            replace_addrs: Vec::new(),
            variables: Vec::new(),
            terraform_version: None,
        }
    }
}

/// A new run of `cv` in `workspace`: its record and the ops that create it. Updates the
/// workspace's queue fields in place; the caller writes the workspace in the same
/// transaction, compared on the revision it read.
pub(crate) fn queue_run(
    workspace: &mut WorkspaceRecord,
    cv: &ConfigurationVersionRecord,
    options: RunOptions,
    created_by: Option<String>,
    now: u64,
) -> Result<(RunRecord, Vec<Op>), Error> {
    let plan_only = options.plan_only || cv.speculative;
    let status = run_state::initial_status(
        plan_only,
        workspace.lock.is_some(),
        workspace.active_run_id.is_some(),
    );
    let auto_apply = options.auto_apply.unwrap_or_else(|| {
        workspace
            .settings
            .get("auto-apply")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    });
    let mut run = RunRecord {
        version: RECORD_VERSION,
        id: ids::new_id("run"),
        workspace_id: workspace.id.clone(),
        organization: workspace.organization.clone(),
        configuration_version_id: cv.id.clone(),
        status,
        status_timestamps: Default::default(),
        message: options.message,
        source: options.source.to_owned(),
        plan_only,
        is_destroy: options.is_destroy,
        refresh: options.refresh,
        refresh_only: options.refresh_only,
        auto_apply,
        allow_empty_apply: options.allow_empty_apply,
        save_plan: options.save_plan,
        target_addrs: options.target_addrs,
        replace_addrs: options.replace_addrs,
        variables: options.variables,
        terraform_version: options.terraform_version,
        created_by,
        created_at_ms: now,
    };
    enter(&mut run, status, now);
    workspace.latest_run_id = Some(run.id.clone());
    if status != RunStatus::Pending && !plan_only {
        workspace.active_run_id = Some(run.id.clone());
        workspace.current_run_id = Some(run.id.clone());
    }
    Ok((run.clone(), create_run_ops(&run)?))
}

/// Records that `run` entered `status` at `now`.
pub(crate) fn enter(run: &mut RunRecord, status: RunStatus, now: u64) {
    run.status = status;
    if let Some(key) = status.timestamp_key() {
        run.status_timestamps.insert(key, now);
    }
    if status == RunStatus::PlanQueued {
        run.status_timestamps
            .insert("plan-queueable-at".to_owned(), now);
    }
}

/// When nothing holds `workspace` and it is unlocked, starts its oldest pending run: the ops
/// that write that run, with the workspace's queue fields updated in place. `changed` is a
/// run of this workspace written in the same transaction (its new status counts).
pub(crate) async fn promote_ops(
    state: &State,
    workspace: &mut WorkspaceRecord,
    changed: Option<&RunRecord>,
) -> Result<Vec<Op>, Error> {
    if workspace.lock.is_some() || workspace.active_run_id.is_some() {
        return Ok(Vec::new());
    }
    let mut active = load_active_runs(state.storage(), &workspace.id).await?;
    if let Some(changed) = changed {
        for run in &mut active {
            if run.id == changed.id {
                run.clone_from(changed);
            }
        }
    }
    let queue: Vec<QueuedRun> = active
        .iter()
        .map(|run| QueuedRun {
            status: run.status,
            speculative: run.plan_only,
        })
        .collect();
    let Some(index) = run_state::next_to_start(&queue, false) else {
        return Ok(Vec::new());
    };
    let mut run = active.swap_remove(index);
    enter(&mut run, RunStatus::PlanQueued, state.now_ms());
    workspace.active_run_id = Some(run.id.clone());
    workspace.current_run_id = Some(run.id.clone());
    save_run_ops(&run)
}
