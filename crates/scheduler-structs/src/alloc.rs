//! Allocations (a task group placed on a node) and what the client reports about them.
//!
//! Invariants: in the store an allocation's `job` is `None` (the job version it runs is
//! `JobVersion` of job `JobID`, kept in the job-version table); the API fills it on reads of
//! one allocation. `TaskStates[*].Events` holds at most [`MAX_TASK_EVENTS`] events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AllocatedResources, Job, Nanos, Resources};

pub const ALLOC_DESIRED_RUN: &str = "run";
pub const ALLOC_DESIRED_STOP: &str = "stop";
pub const ALLOC_DESIRED_EVICT: &str = "evict";

pub const ALLOC_CLIENT_PENDING: &str = "pending";
pub const ALLOC_CLIENT_RUNNING: &str = "running";
pub const ALLOC_CLIENT_COMPLETE: &str = "complete";
pub const ALLOC_CLIENT_FAILED: &str = "failed";
pub const ALLOC_CLIENT_LOST: &str = "lost";
pub const ALLOC_CLIENT_UNKNOWN: &str = "unknown";

pub const TASK_STATE_PENDING: &str = "pending";
pub const TASK_STATE_RUNNING: &str = "running";
pub const TASK_STATE_DEAD: &str = "dead";

/// Task events kept per task, newest last.
pub const MAX_TASK_EVENTS: usize = 10;

/// An allocation (Nomad's `structs.Allocation`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Allocation {
    #[serde(rename = "ID")]
    pub id: String,
    pub namespace: String,
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    /// `<job>.<group>[<index>]`.
    pub name: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    pub node_name: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub job_type: String,
    pub job_version: u64,
    pub job: Option<Box<Job>>,
    pub task_group: String,
    pub resources: Option<Resources>,
    pub shared_resources: Option<Resources>,
    pub task_resources: BTreeMap<String, Resources>,
    pub allocated_resources: AllocatedResources,
    pub metrics: AllocMetric,
    pub desired_status: String,
    pub desired_description: String,
    pub desired_transition: DesiredTransition,
    pub client_status: String,
    pub client_description: String,
    pub task_states: BTreeMap<String, TaskState>,
    pub deployment_status: Option<Value>,
    pub previous_allocation: String,
    pub next_allocation: String,
    #[serde(rename = "FollowupEvalID")]
    pub followup_eval_id: String,
    pub reschedule_tracker: Option<RescheduleTracker>,
    pub preempted_allocations: Vec<String>,
    pub preempted_by_allocation: String,
    pub create_index: u64,
    pub modify_index: u64,
    pub alloc_modify_index: u64,
    /// Unix nanoseconds.
    pub create_time: i64,
    /// Unix nanoseconds.
    pub modify_time: i64,
}

impl Allocation {
    /// Whether the server no longer wants it running.
    pub fn server_terminal(&self) -> bool {
        self.desired_status == ALLOC_DESIRED_STOP || self.desired_status == ALLOC_DESIRED_EVICT
    }

    /// Whether the client has finished with it.
    pub fn client_terminal(&self) -> bool {
        matches!(
            self.client_status.as_str(),
            ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_FAILED | ALLOC_CLIENT_LOST
        )
    }

    /// Terminal in either sense: it no longer holds resources on its node.
    pub fn terminal(&self) -> bool {
        self.server_terminal() || self.client_terminal()
    }

    /// The allocation's index within its group, from its name `job.group[N]`.
    pub fn index(&self) -> Option<u64> {
        let open = self.name.rfind('[')?;
        self.name[open + 1..].strip_suffix(']')?.parse().ok()
    }
}

/// The name of allocation `index` of `group` in `job`.
pub fn alloc_name(job: &str, group: &str, index: u64) -> String {
    format!("{job}.{group}[{index}]")
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DesiredTransition {
    pub migrate: Option<bool>,
    pub reschedule: Option<bool>,
    pub force_reschedule: Option<bool>,
    pub no_shutdown_delay: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RescheduleTracker {
    pub events: Vec<RescheduleEvent>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RescheduleEvent {
    /// Unix nanoseconds.
    pub reschedule_time: i64,
    #[serde(rename = "PrevAllocID")]
    pub prev_alloc_id: String,
    #[serde(rename = "PrevNodeID")]
    pub prev_node_id: String,
    pub delay: Nanos,
}

/// Placement metrics (Nomad's `AllocMetric`), on every allocation and on failed placements.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocMetric {
    pub nodes_evaluated: i64,
    pub nodes_filtered: i64,
    pub nodes_in_pool: i64,
    pub nodes_available: BTreeMap<String, i64>,
    pub class_filtered: BTreeMap<String, i64>,
    pub constraint_filtered: BTreeMap<String, i64>,
    pub nodes_exhausted: i64,
    pub class_exhausted: BTreeMap<String, i64>,
    pub dimension_exhausted: BTreeMap<String, i64>,
    pub quota_exhausted: Vec<String>,
    pub resources_exhausted: Option<Value>,
    /// Deprecated upstream map of `node.scorer` to score.
    pub scores: BTreeMap<String, f64>,
    pub score_meta_data: Vec<NodeScoreMeta>,
    /// Nanoseconds spent placing.
    pub allocation_time: i64,
    pub coalesced_failures: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeScoreMeta {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    pub scores: BTreeMap<String, f64>,
    pub norm_score: f64,
}

/// One task's state inside an allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskState {
    pub state: String,
    pub failed: bool,
    pub restarts: u64,
    /// RFC 3339 time or null, as Nomad renders Go `time.Time`.
    pub last_restart: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub task_handle: Option<Value>,
    pub events: Vec<TaskEvent>,
}

impl TaskState {
    /// Appends an event, keeping the newest [`MAX_TASK_EVENTS`].
    pub fn push_event(&mut self, event: TaskEvent) {
        self.events.push(event);
        if self.events.len() > MAX_TASK_EVENTS {
            let excess = self.events.len() - MAX_TASK_EVENTS;
            self.events.drain(..excess);
        }
    }
}

pub const EVENT_SETUP_FAILURE: &str = "Setup Failure";
pub const EVENT_DRIVER_FAILURE: &str = "Driver Failure";
pub const EVENT_STARTED: &str = "Started";
pub const EVENT_TERMINATED: &str = "Terminated";
pub const EVENT_KILLING: &str = "Killing";
pub const EVENT_KILLED: &str = "Killed";
pub const EVENT_RECEIVED: &str = "Received";
pub const EVENT_FAILED_VALIDATION: &str = "Failed Validation";
pub const EVENT_RESTARTING: &str = "Restarting";
pub const EVENT_NOT_RESTARTING: &str = "Not Restarting";
pub const EVENT_DOWNLOADING_ARTIFACTS: &str = "Downloading Artifacts";
pub const EVENT_RESTART_SIGNAL: &str = "Restart Signaled";
pub const EVENT_SIGNALING: &str = "Signaling";
pub const EVENT_SIBLING_FAILED: &str = "Sibling Task Failed";
pub const EVENT_LEADER_DEAD: &str = "Leader Task Dead";
pub const EVENT_DRIVER_MESSAGE: &str = "Driver";
pub const EVENT_TASK_SETUP: &str = "Task Setup";

/// A task event (Nomad's `TaskEvent`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskEvent {
    #[serde(rename = "Type")]
    pub event_type: String,
    /// Unix nanoseconds.
    pub time: i64,
    pub display_message: String,
    pub message: String,
    pub details: BTreeMap<String, String>,
    pub fails_task: bool,
    pub restart_reason: String,
    pub setup_error: String,
    pub driver_error: String,
    pub exit_code: i64,
    pub signal: i64,
    pub kill_timeout: Nanos,
    pub kill_error: String,
    pub kill_reason: String,
    pub start_delay: Nanos,
    pub download_error: String,
    pub validation_error: String,
    pub disk_limit: i64,
    pub failed_sibling: String,
    pub vault_error: String,
    pub task_signal_reason: String,
    pub task_signal: String,
    pub driver_message: String,
    pub generic_source: String,
}

/// What a client reports about one of its allocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocClientUpdate {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    pub client_status: String,
    pub client_description: String,
    pub task_states: BTreeMap<String, TaskState>,
}
