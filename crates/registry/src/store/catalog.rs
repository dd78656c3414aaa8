//! Stored records and keys of the registry's catalog family: nodes, services and health checks
//! (see `store/mod.rs` for the layout), plus the TTL-check deadlines.
//!
//! Keys:
//! ```text
//! registry/catalog/nodes/<node>
//! registry/catalog/services/<node>/<service-id>
//! registry/catalog/checks/<node>/<check-id>
//! registry/check-deadlines/<node>/<check-id>     (TTL checks: Unix ms when the TTL runs out)
//! ```
//!
//! Invariants: node names never contain `/` (validated on register), so `<node>/` prefixes are
//! exact; a check or service of a node exists only while the node record exists (register and
//! deregister keep them together in one transaction); a record's CreateIndex/ModifyIndex are its
//! key's storage create/mod revisions, so rewriting an identical record is skipped to keep the
//! indexes still. TTL deadlines live outside `registry/catalog/` so that a TTL heartbeat which
//! does not change a check's status or output does not move catalog or health indexes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use storage::{KeyRange, Storage};

use crate::Error;
use crate::store::{PREFIX, Stored};

/// The current record version of every catalog record.
pub(crate) const RECORD_VERSION: u32 = 1;

pub(crate) fn catalog_prefix() -> String {
    format!("{PREFIX}catalog/")
}

pub(crate) fn nodes_prefix() -> String {
    format!("{PREFIX}catalog/nodes/")
}

pub(crate) fn services_prefix() -> String {
    format!("{PREFIX}catalog/services/")
}

pub(crate) fn checks_prefix() -> String {
    format!("{PREFIX}catalog/checks/")
}

pub(crate) fn deadlines_prefix() -> String {
    format!("{PREFIX}check-deadlines/")
}

pub(crate) fn node_key(node: &str) -> Vec<u8> {
    format!("{PREFIX}catalog/nodes/{node}").into_bytes()
}

pub(crate) fn service_key(node: &str, service_id: &str) -> Vec<u8> {
    format!("{PREFIX}catalog/services/{node}/{service_id}").into_bytes()
}

pub(crate) fn check_key(node: &str, check_id: &str) -> Vec<u8> {
    format!("{PREFIX}catalog/checks/{node}/{check_id}").into_bytes()
}

pub(crate) fn deadline_key(node: &str, check_id: &str) -> Vec<u8> {
    format!("{PREFIX}check-deadlines/{node}/{check_id}").into_bytes()
}

/// Every key of the catalog (nodes, services, checks).
pub(crate) fn catalog_range() -> KeyRange {
    KeyRange::prefix(catalog_prefix())
}

pub(crate) fn nodes_range() -> KeyRange {
    KeyRange::prefix(nodes_prefix())
}

pub(crate) fn services_range() -> KeyRange {
    KeyRange::prefix(services_prefix())
}

pub(crate) fn checks_range() -> KeyRange {
    KeyRange::prefix(checks_prefix())
}

pub(crate) fn node_services_range(node: &str) -> KeyRange {
    KeyRange::prefix(format!("{PREFIX}catalog/services/{node}/"))
}

pub(crate) fn node_checks_range(node: &str) -> KeyRange {
    KeyRange::prefix(format!("{PREFIX}catalog/checks/{node}/"))
}

pub(crate) fn node_deadlines_range(node: &str) -> KeyRange {
    KeyRange::prefix(format!("{PREFIX}check-deadlines/{node}/"))
}

pub(crate) fn deadlines_range() -> KeyRange {
    KeyRange::prefix(deadlines_prefix())
}

/// A node of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeRecord {
    pub(crate) version: u32,
    /// A UUID.
    pub(crate) id: String,
    pub(crate) node: String,
    pub(crate) address: String,
    pub(crate) datacenter: String,
    #[serde(default)]
    pub(crate) tagged_addresses: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) meta: BTreeMap<String, String>,
}

/// A service instance on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ServiceRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) service: String,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) address: String,
    #[serde(default)]
    pub(crate) port: u16,
    #[serde(default)]
    pub(crate) meta: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) enable_tag_override: bool,
}

/// A health check's status, as Consul spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CheckStatus {
    Passing,
    Warning,
    Critical,
}

impl CheckStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passing => "passing",
            CheckStatus::Warning => "warning",
            CheckStatus::Critical => "critical",
        }
    }

    /// Parses Consul's spelling (case-insensitive); `None` for anything else.
    pub(crate) fn parse(raw: &str) -> Option<CheckStatus> {
        match raw.to_ascii_lowercase().as_str() {
            "passing" => Some(CheckStatus::Passing),
            "warning" => Some(CheckStatus::Warning),
            "critical" => Some(CheckStatus::Critical),
            _ => None,
        }
    }
}

/// What runs a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CheckKind {
    /// Updated by clients (pass/warn/fail/update); critical when not updated within its TTL.
    Ttl,
    /// The server GETs (or `method`s) a URL at an interval.
    Http,
    /// The server opens a TCP connection at an interval.
    Tcp,
    /// A catalog-only check nothing runs (`Type: ""`), such as `serfHealth`.
    #[default]
    None,
}

impl CheckKind {
    /// Consul's `Type` field.
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            CheckKind::Ttl => "ttl",
            CheckKind::Http => "http",
            CheckKind::Tcp => "tcp",
            CheckKind::None => "",
        }
    }
}

/// How a check is run. Durations in milliseconds (0: unset).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct CheckDefinition {
    #[serde(default)]
    pub(crate) interval_ms: u64,
    #[serde(default)]
    pub(crate) timeout_ms: u64,
    #[serde(default)]
    pub(crate) http: String,
    #[serde(default)]
    pub(crate) method: String,
    #[serde(default)]
    pub(crate) header: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub(crate) body: String,
    #[serde(default)]
    pub(crate) tls_skip_verify: bool,
    #[serde(default)]
    pub(crate) tls_server_name: String,
    #[serde(default)]
    pub(crate) tcp: String,
    #[serde(default)]
    pub(crate) ttl_ms: u64,
    #[serde(default)]
    pub(crate) deregister_critical_service_after_ms: u64,
}

/// A health check of a node (node-level when `service_id` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckRecord {
    pub(crate) version: u32,
    pub(crate) node: String,
    pub(crate) check_id: String,
    pub(crate) name: String,
    pub(crate) status: CheckStatus,
    #[serde(default)]
    pub(crate) notes: String,
    #[serde(default)]
    pub(crate) output: String,
    #[serde(default)]
    pub(crate) service_id: String,
    #[serde(default)]
    pub(crate) service_name: String,
    #[serde(default)]
    pub(crate) service_tags: Vec<String>,
    #[serde(default)]
    pub(crate) kind: CheckKind,
    #[serde(default)]
    pub(crate) definition: CheckDefinition,
}

/// A TTL check's deadline: when it goes critical unless updated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeadlineRecord {
    pub(crate) version: u32,
    /// Unix ms.
    pub(crate) deadline_ms: u64,
}

/// The node named `node`, with its indexes.
pub(crate) async fn load_node(
    storage: &dyn Storage,
    node: &str,
) -> Result<Option<Stored<NodeRecord>>, Error> {
    if !valid_key_part(node) {
        return Ok(None);
    }
    match storage.get(&node_key(node)).await? {
        Some(kv) => Ok(Some(Stored::from_kv(&kv)?)),
        None => Ok(None),
    }
}

/// The check `check_id` of `node`, with its indexes (its status is `.record.status`).
pub(crate) async fn load_check(
    storage: &dyn Storage,
    node: &str,
    check_id: &str,
) -> Result<Option<Stored<CheckRecord>>, Error> {
    if !valid_key_part(node) || check_id.is_empty() {
        return Ok(None);
    }
    match storage.get(&check_key(node, check_id)).await? {
        Some(kv) => Ok(Some(Stored::from_kv(&kv)?)),
        None => Ok(None),
    }
}

/// Whether `name` can be a node name (and so a key part): not empty, no `/`.
pub(crate) fn valid_key_part(name: &str) -> bool {
    !name.is_empty() && !name.contains('/')
}

/// The node name in a service key (`registry/catalog/services/<node>/<id>`).
pub(crate) fn node_of_service_key(key: &[u8]) -> Option<String> {
    let prefix_len = services_prefix().len();
    let rest = String::from_utf8_lossy(key.get(prefix_len..)?).into_owned();
    rest.split_once('/').map(|(node, _)| node.to_owned())
}

/// The check ID in a check key of `node` (`registry/catalog/checks/<node>/<check-id>`).
pub(crate) fn check_id_of_key(key: &[u8], node: &str) -> String {
    let prefix = check_key(node, "");
    String::from_utf8_lossy(&key[prefix.len().min(key.len())..]).into_owned()
}
