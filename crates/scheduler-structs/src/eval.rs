//! Evaluations (a reason to run the scheduler for one job) and plans (what one scheduler run
//! wants to change).
//!
//! Invariant: a plan only names allocations of its evaluation's job; the plan applier commits
//! the part that still fits and reports what it refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{AllocMetric, Allocation};

pub const EVAL_STATUS_PENDING: &str = "pending";
pub const EVAL_STATUS_BLOCKED: &str = "blocked";
pub const EVAL_STATUS_COMPLETE: &str = "complete";
pub const EVAL_STATUS_FAILED: &str = "failed";
pub const EVAL_STATUS_CANCELED: &str = "canceled";

pub const TRIGGER_JOB_REGISTER: &str = "job-register";
pub const TRIGGER_JOB_DEREGISTER: &str = "job-deregister";
pub const TRIGGER_NODE_UPDATE: &str = "node-update";
pub const TRIGGER_ALLOC_STOP: &str = "alloc-stop";
pub const TRIGGER_ALLOC_FAILURE: &str = "alloc-failure";
pub const TRIGGER_RETRY_FAILED_ALLOC: &str = "alloc-failure";
pub const TRIGGER_QUEUED_ALLOCS: &str = "queued-allocs";
pub const TRIGGER_RESCHEDULE: &str = "alloc-reschedule";
pub const TRIGGER_MAX_PLANS: &str = "max-plan-attempts";

/// An evaluation (Nomad's `structs.Evaluation`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Evaluation {
    #[serde(rename = "ID")]
    pub id: String,
    pub namespace: String,
    pub priority: i64,
    #[serde(rename = "Type")]
    pub job_type: String,
    pub triggered_by: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub job_modify_index: u64,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    pub node_modify_index: u64,
    pub status: String,
    pub status_description: String,
    /// Unix nanoseconds before which the evaluation must not run (delayed reschedules).
    pub wait_until: i64,
    pub next_eval: String,
    pub previous_eval: String,
    pub blocked_eval: String,
    /// Nomad's `FailedTGAllocs` (serde's PascalCase would say `FailedTgAllocs`, which records
    /// stored before this name was fixed still use).
    #[serde(rename = "FailedTGAllocs", alias = "FailedTgAllocs")]
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    pub class_eligibility: BTreeMap<String, bool>,
    pub escaped_computed_class: bool,
    pub annotate_plan: bool,
    pub queued_allocations: BTreeMap<String, i64>,
    pub snapshot_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
    /// Unix nanoseconds.
    pub create_time: i64,
    /// Unix nanoseconds.
    pub modify_time: i64,
}

impl Evaluation {
    pub fn terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            EVAL_STATUS_COMPLETE | EVAL_STATUS_FAILED | EVAL_STATUS_CANCELED
        )
    }
}

/// An allocation the plan stops (or marks lost), with the new server-side status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocStop {
    pub alloc_id: String,
    pub desired_status: String,
    pub desired_description: String,
    /// Set when the server decides the client status (lost allocations of a down node).
    pub client_status: Option<String>,
    /// Set when a replacement links back (`NextAllocation`).
    pub next_allocation: Option<String>,
}

/// What one scheduler run wants: the output of `placement::compute`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The evaluation being processed, with its final status, queued counts and failed
    /// placement metrics filled in.
    pub eval: Evaluation,
    /// The job index the plan was computed against; the applier refuses the plan if the job
    /// changed since.
    pub job_modify_index: u64,
    /// The index of the snapshot the plan was computed from.
    pub snapshot_index: u64,
    /// New or updated allocations, by node. Shared: the plan applier stores each one in the
    /// state as it is (it is the only holder of a fresh plan's allocations, so completing one
    /// copies nothing), and the plan keeps the stored version.
    pub node_allocation: BTreeMap<String, Vec<Arc<Allocation>>>,
    /// Allocations to stop, by node.
    pub node_update: BTreeMap<String, Vec<AllocStop>>,
    /// `AllAtOnce`: if any node does not fit, commit nothing.
    pub all_at_once: bool,
    /// Evaluations to create alongside (a blocked eval for placements that found no room, a
    /// delayed follow-up for rescheduling later).
    pub new_evals: Vec<Evaluation>,
}

impl Plan {
    pub fn is_no_op(&self) -> bool {
        self.node_allocation.is_empty() && self.node_update.is_empty()
    }
}

/// What the applier did with a plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanResult {
    /// Nodes whose part of the plan was committed.
    pub committed_nodes: Vec<String>,
    /// Nodes whose part was refused because it no longer fits.
    pub refused_nodes: Vec<String>,
    /// The index at which the committed part landed (0 when nothing was committed).
    pub index: u64,
}
