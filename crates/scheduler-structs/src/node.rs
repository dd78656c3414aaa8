//! Client nodes: what a client registers (resources, attributes, drivers) and the status the
//! server keeps for it.
//!
//! Invariant: `SecretID` never leaves the server except in the response to the node's own
//! registration; API reads blank it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{NodeReservedResources, NodeResources};

pub const NODE_STATUS_INIT: &str = "initializing";
pub const NODE_STATUS_READY: &str = "ready";
pub const NODE_STATUS_DOWN: &str = "down";
pub const NODE_STATUS_DISCONNECTED: &str = "disconnected";

pub const NODE_ELIGIBLE: &str = "eligible";
pub const NODE_INELIGIBLE: &str = "ineligible";

/// A client node (Nomad's `structs.Node`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Node {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    pub datacenter: String,
    pub name: String,
    pub node_pool: String,
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
    #[serde(rename = "TLSEnabled")]
    pub tls_enabled: bool,
    pub attributes: BTreeMap<String, String>,
    pub node_resources: NodeResources,
    pub reserved_resources: NodeReservedResources,
    pub links: BTreeMap<String, String>,
    pub meta: BTreeMap<String, String>,
    pub node_class: String,
    pub computed_class: String,
    pub drain: bool,
    pub drain_strategy: Option<serde_json::Value>,
    pub scheduling_eligibility: String,
    pub status: String,
    pub status_description: String,
    /// Unix seconds of the last status change.
    pub status_updated_at: i64,
    pub drivers: BTreeMap<String, DriverInfo>,
    pub host_volumes: BTreeMap<String, serde_json::Value>,
    pub events: Vec<NodeEvent>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Node {
    /// Whether placement may put new allocations here.
    pub fn ready_for_placement(&self) -> bool {
        self.status == NODE_STATUS_READY
            && self.scheduling_eligibility != NODE_INELIGIBLE
            && !self.drain
    }

    /// Whether the node has driver `name` detected and healthy.
    pub fn has_driver(&self, name: &str) -> bool {
        if let Some(info) = self.drivers.get(name) {
            return info.detected && info.healthy;
        }
        self.attributes
            .get(&format!("driver.{name}"))
            .is_some_and(|value| value == "1" || value == "true")
    }

    /// What the node can give to allocations: its resources minus what it reserves.
    pub fn capacity(&self) -> super::Comparable {
        let mut capacity = self.node_resources.comparable();
        capacity.subtract(&self.reserved_resources.comparable());
        capacity
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DriverInfo {
    pub attributes: BTreeMap<String, String>,
    pub detected: bool,
    pub healthy: bool,
    pub health_description: String,
    /// RFC 3339.
    pub update_time: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeEvent {
    pub message: String,
    pub subsystem: String,
    pub details: BTreeMap<String, String>,
    /// RFC 3339.
    pub timestamp: Option<String>,
    pub create_index: u64,
}
