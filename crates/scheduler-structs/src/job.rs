//! Jobs, task groups and tasks, in canonical form (every default filled).
//!
//! Invariant: these are what the store holds and the API returns; the job as submitted went
//! through `jobspec::canonicalize` first, so e.g. `TaskGroup::count` is the real count and a
//! service task group always has a `RestartPolicy`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Nanos, Resources};

pub const JOB_TYPE_SERVICE: &str = "service";
pub const JOB_TYPE_BATCH: &str = "batch";
pub const JOB_TYPE_SYSTEM: &str = "system";
pub const JOB_TYPE_SYSBATCH: &str = "sysbatch";

pub const JOB_STATUS_PENDING: &str = "pending";
pub const JOB_STATUS_RUNNING: &str = "running";
pub const JOB_STATUS_DEAD: &str = "dead";

/// A job (Nomad's `structs.Job`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct Job {
    pub region: String,
    pub namespace: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ParentID")]
    pub parent_id: String,
    pub name: String,
    #[serde(rename = "Type")]
    pub job_type: String,
    pub priority: i64,
    pub all_at_once: bool,
    pub datacenters: Vec<String>,
    pub node_pool: String,
    pub constraints: Vec<Constraint>,
    pub affinities: Vec<Affinity>,
    pub spreads: Vec<Spread>,
    pub task_groups: Vec<TaskGroup>,
    pub update: Option<Value>,
    /// Job-level `reschedule` and `migrate`: canonicalize has merged them into every group.
    pub reschedule: Option<Value>,
    pub migrate: Option<Value>,
    pub multiregion: Option<Value>,
    pub periodic: Option<Value>,
    pub parameterized_job: Option<Value>,
    pub dispatched: bool,
    pub dispatch_idempotency_token: String,
    pub payload: Option<Value>,
    pub meta: BTreeMap<String, String>,
    pub consul_token: String,
    pub consul_namespace: String,
    pub vault_token: String,
    pub vault_namespace: String,
    #[serde(rename = "NomadTokenID")]
    pub nomad_token_id: String,
    pub secrets_token: String,
    pub secrets_namespace: String,
    pub registry_token: String,
    #[serde(rename = "SchedulerTokenID")]
    pub scheduler_token_id: String,
    #[serde(rename = "UI")]
    pub ui: Option<Value>,
    pub version_tag: Option<Value>,
    pub stable: bool,
    pub stop: bool,
    pub submit_time: i64,
    pub status: String,
    pub status_description: String,
    pub version: u64,
    pub create_index: u64,
    pub modify_index: u64,
    pub job_modify_index: u64,
}

/// A `group` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct TaskGroup {
    pub name: String,
    pub count: i64,
    pub constraints: Vec<Constraint>,
    pub affinities: Vec<Affinity>,
    pub spreads: Vec<Spread>,
    pub restart_policy: Option<RestartPolicy>,
    pub reschedule_policy: Option<ReschedulePolicy>,
    pub migrate: Option<Value>,
    pub update: Option<Value>,
    pub ephemeral_disk: Option<EphemeralDisk>,
    pub networks: Vec<super::NetworkResource>,
    pub services: Vec<Value>,
    pub tasks: Vec<Task>,
    pub volumes: Option<BTreeMap<String, Value>>,
    pub scaling: Option<Value>,
    pub consul: Option<Value>,
    pub meta: BTreeMap<String, String>,
    pub shutdown_delay: Option<Nanos>,
    pub stop_after_client_disconnect: Option<Nanos>,
    pub max_client_disconnect: Option<Nanos>,
    pub prevent_reschedule_on_lost: bool,
    pub disconnect: Option<Value>,
    pub max_run_duration: Option<Nanos>,
}

/// A `task` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct Task {
    pub name: String,
    pub driver: String,
    pub user: String,
    pub config: BTreeMap<String, Value>,
    pub env: BTreeMap<String, String>,
    pub services: Vec<Value>,
    pub templates: Vec<Value>,
    pub constraints: Vec<Constraint>,
    pub affinities: Vec<Affinity>,
    pub resources: Resources,
    pub restart_policy: Option<RestartPolicy>,
    pub dispatch_payload: Option<Value>,
    pub lifecycle: Option<Value>,
    pub meta: BTreeMap<String, String>,
    pub kill_timeout: Nanos,
    pub kill_signal: String,
    pub kind: String,
    pub log_config: Option<Value>,
    pub artifacts: Vec<Value>,
    pub leader: bool,
    pub shutdown_delay: Nanos,
    pub volume_mounts: Vec<Value>,
    pub scaling_policies: Vec<Value>,
    #[serde(rename = "CSIPluginConfig")]
    pub csi_plugin_config: Option<Value>,
    pub vault: Option<Value>,
    pub consul: Option<Value>,
    pub identity: Option<Value>,
    pub identities: Vec<Value>,
    pub actions: Vec<Value>,
    pub schedule: Option<Value>,
    pub secrets_integration: Option<Value>,
    pub secrets: Option<Value>,
}

/// A `constraint` block: `LTarget Operand RTarget`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Constraint {
    pub l_target: String,
    pub r_target: String,
    pub operand: String,
}

/// An `affinity` block; `Weight` in [-100, 100].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Affinity {
    pub l_target: String,
    pub r_target: String,
    pub operand: String,
    pub weight: i64,
}

/// A `spread` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Spread {
    pub attribute: String,
    pub weight: i64,
    pub spread_target: Vec<SpreadTarget>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SpreadTarget {
    pub value: String,
    pub percent: i64,
}

pub const RESTART_MODE_FAIL: &str = "fail";
pub const RESTART_MODE_DELAY: &str = "delay";

/// A `restart` block (client-side restarts in place).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RestartPolicy {
    pub attempts: i64,
    pub interval: Nanos,
    pub delay: Nanos,
    pub mode: String,
    pub render_templates: bool,
}

/// A `reschedule` block (server-side replacement of failed allocations).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ReschedulePolicy {
    pub attempts: i64,
    pub interval: Nanos,
    pub delay: Nanos,
    pub delay_function: String,
    pub max_delay: Nanos,
    pub unlimited: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EphemeralDisk {
    pub sticky: bool,
    #[serde(rename = "SizeMB")]
    pub size_mb: i64,
    pub migrate: bool,
}

impl Job {
    /// Whether the scheduler keeps this job's allocations running (not stopped or dead).
    pub fn is_stopped(&self) -> bool {
        self.stop
    }

    pub fn is_periodic(&self) -> bool {
        self.periodic
            .as_ref()
            .and_then(|periodic| periodic.get("Enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    pub fn is_parameterized(&self) -> bool {
        self.parameterized_job
            .as_ref()
            .is_some_and(|p| !p.is_null())
            && !self.dispatched
    }

    pub fn task_group(&self, name: &str) -> Option<&TaskGroup> {
        self.task_groups.iter().find(|group| group.name == name)
    }

    /// The namespaced key of this job.
    pub fn key(&self) -> JobKey {
        JobKey::new(&self.namespace, &self.id)
    }
}

impl TaskGroup {
    /// The disk every allocation of this group reserves.
    pub fn disk_mb(&self) -> i64 {
        self.ephemeral_disk.as_ref().map_or(0, |disk| disk.size_mb)
    }

    /// What one allocation of this group asks for.
    pub fn comparable(&self) -> super::Comparable {
        let mut total = super::Comparable {
            disk_mb: self.disk_mb(),
            ..super::Comparable::default()
        };
        for task in &self.tasks {
            total.cpu = total.cpu.saturating_add(task.resources.cpu);
            total.memory_mb = total.memory_mb.saturating_add(task.resources.memory_mb);
        }
        total
    }
}

/// A job's identity: namespace and id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobKey {
    pub namespace: String,
    pub id: String,
}

impl JobKey {
    pub fn new(namespace: &str, id: &str) -> JobKey {
        JobKey {
            namespace: namespace.to_owned(),
            id: id.to_owned(),
        }
    }
}

/// `JobSummary` (list entries and `/v1/job/:id/summary`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobSummary {
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub namespace: String,
    pub summary: BTreeMap<String, TaskGroupSummary>,
    pub children: JobChildrenSummary,
    pub create_index: u64,
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroupSummary {
    pub queued: i64,
    pub complete: i64,
    pub failed: i64,
    pub running: i64,
    pub starting: i64,
    pub lost: i64,
    pub unknown: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobChildrenSummary {
    pub pending: i64,
    pub running: i64,
    pub dead: i64,
}

/// A job submission record (the source as sent, kept for the latest versions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobSubmission {
    pub source: String,
    pub format: String,
    pub variable_flags: BTreeMap<String, String>,
    pub variables: String,
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub version: u64,
    pub job_modify_index: u64,
}
