//! Runtime facts a client reports about its allocations and the overrides the server hands back
//! (cairn's internal client protocol, beside `AllocClientUpdate`): Nomad-native service
//! registrations (`ServiceRegistration`, as `GET /v1/allocation/:id/services` shows them), the
//! results of the client's checks (as `GET /v1/allocation/:id/checks` shows them) and each
//! scheduled task's pause state.
//!
//! Invariants: plain data; a report is always a node's whole runtime state (the server replaces
//! what it held for the node), so a report lost or a server restarted is healed by the next one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A service registered with provider `nomad` (Nomad's `structs.ServiceRegistration`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServiceRegistration {
    #[serde(rename = "ID")]
    pub id: String,
    pub service_name: String,
    pub namespace: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    pub datacenter: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    pub tags: Vec<String>,
    pub address: String,
    pub port: i64,
    pub create_index: u64,
    pub modify_index: u64,
}

/// One check's latest result (Nomad's `structs.CheckQueryResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CheckResult {
    #[serde(rename = "ID")]
    pub id: String,
    /// The check's name.
    pub check: String,
    /// The allocation's name, `job.group[index]`.
    pub group: String,
    /// `healthiness` or `readiness`.
    pub mode: String,
    pub output: String,
    pub service: String,
    /// `success`, `failure` or `pending`.
    pub status: String,
    /// The HTTP status of an HTTP check, 0 otherwise.
    #[serde(skip_serializing_if = "is_zero")]
    pub status_code: i64,
    /// Unix seconds of the result.
    pub timestamp: i64,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// Everything a client reports about its allocations' runtime, replacing its previous report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeRuntimeReport {
    pub services: Vec<ServiceRegistration>,
    /// Allocation ID → check ID → result.
    pub checks: BTreeMap<String, BTreeMap<String, CheckResult>>,
    /// Allocation ID → task → `ScheduleState` as read (`""`, `force_run`, `force_pause`,
    /// `scheduled_pause`), for tasks with a schedule.
    pub schedules: BTreeMap<String, BTreeMap<String, String>>,
}

/// A pause override asked through the API, waiting for (or applied by) the client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ScheduleOverride {
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    pub task: String,
    /// `pause`, `run` or `scheduled`.
    pub schedule_state: String,
    /// The server's sequence number of the request.
    pub index: u64,
}
