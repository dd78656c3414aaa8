//! Consul's JSON shapes of catalog records: nodes, services, service instances and health
//! checks, as the catalog, health and agent endpoints answer them.
//!
//! Where it sits: pure functions from `store/catalog.rs` records (with their indexes) to
//! `serde_json::Value`, called by the handlers; `?filter=` (`filter.rs`) is evaluated over these
//! shapes.
//!
//! Invariants: field names and empty values are Consul's (`"Weights": {"Passing": 1, ...}`,
//! omitted empty `Definition` fields); CreateIndex/ModifyIndex are the records' storage
//! revisions; durations are Go `Duration.String()` text.

use std::time::Duration;

use serde_json::{Map, Value, json};
use stdx::duration::format_go_std;

use crate::store::Stored;
use crate::store::catalog::{CheckDefinition, CheckKind, CheckRecord, NodeRecord, ServiceRecord};

/// A node as the catalog and health endpoints show it.
pub(crate) fn node_json(node: &Stored<NodeRecord>) -> Value {
    let record = &node.record;
    json!({
        "ID": record.id,
        "Node": record.node,
        "Address": record.address,
        "Datacenter": record.datacenter,
        "TaggedAddresses": record.tagged_addresses,
        "Meta": record.meta,
        "CreateIndex": node.create_index,
        "ModifyIndex": node.modify_index,
    })
}

/// A service as `/v1/catalog/node/:node` and `/v1/health/service/:service` show it.
pub(crate) fn service_json(service: &Stored<ServiceRecord>) -> Value {
    let record = &service.record;
    json!({
        "ID": record.id,
        "Service": record.service,
        "Tags": record.tags,
        "Address": record.address,
        "Meta": record.meta,
        "Port": record.port,
        "Weights": {"Passing": 1, "Warning": 1},
        "EnableTagOverride": record.enable_tag_override,
        "Proxy": {"Mode": "", "MeshGateway": {}, "Expose": {}},
        "Connect": {},
        "PeerName": "",
        "CreateIndex": service.create_index,
        "ModifyIndex": service.modify_index,
    })
}

/// A service instance as `/v1/catalog/service/:service` shows it (node fields flattened).
pub(crate) fn service_node_json(
    node: &Stored<NodeRecord>,
    service: &Stored<ServiceRecord>,
) -> Value {
    let (n, s) = (&node.record, &service.record);
    json!({
        "ID": n.id,
        "Node": n.node,
        "Address": n.address,
        "Datacenter": n.datacenter,
        "TaggedAddresses": n.tagged_addresses,
        "NodeMeta": n.meta,
        "ServiceKind": "",
        "ServiceID": s.id,
        "ServiceName": s.service,
        "ServiceTags": s.tags,
        "ServiceAddress": s.address,
        "ServiceWeights": {"Passing": 1, "Warning": 1},
        "ServiceMeta": s.meta,
        "ServicePort": s.port,
        "ServiceSocketPath": "",
        "ServiceEnableTagOverride": s.enable_tag_override,
        "ServiceProxy": {"Mode": "", "MeshGateway": {}, "Expose": {}},
        "ServiceConnect": {},
        "CreateIndex": service.create_index,
        "ModifyIndex": service.modify_index,
    })
}

/// A stored duration (ms) as Go's `Duration.String()`; empty when unset (Consul's omitempty).
fn duration_field(ms: u64) -> String {
    if ms == 0 {
        String::new()
    } else {
        format_go_std(Duration::from_millis(ms))
    }
}

/// A check's `Definition`, with Consul's omitempty fields.
fn definition_json(definition: &CheckDefinition) -> Value {
    let mut map = Map::new();
    let mut text = |name: &str, value: &str| {
        if !value.is_empty() {
            map.insert(name.to_owned(), Value::String(value.to_owned()));
        }
    };
    text("HTTP", &definition.http);
    text("TLSServerName", &definition.tls_server_name);
    text("Method", &definition.method);
    text("Body", &definition.body);
    text("TCP", &definition.tcp);
    text("Interval", &duration_field(definition.interval_ms));
    text("Timeout", &duration_field(definition.timeout_ms));
    text(
        "DeregisterCriticalServiceAfter",
        &duration_field(definition.deregister_critical_service_after_ms),
    );
    text("TTL", &duration_field(definition.ttl_ms));
    if definition.tls_skip_verify {
        map.insert("TLSSkipVerify".to_owned(), Value::Bool(true));
    }
    if !definition.header.is_empty() {
        map.insert("Header".to_owned(), json!(definition.header));
    }
    Value::Object(map)
}

/// A health check as the health, catalog and agent endpoints show it.
pub(crate) fn check_json(check: &Stored<CheckRecord>) -> Value {
    let record = &check.record;
    let (interval, timeout) = match record.kind {
        CheckKind::Http | CheckKind::Tcp => (
            duration_field(record.definition.interval_ms),
            duration_field(record.definition.timeout_ms),
        ),
        CheckKind::Ttl | CheckKind::None => (String::new(), String::new()),
    };
    json!({
        "Node": record.node,
        "CheckID": record.check_id,
        "Name": record.name,
        "Status": record.status.as_str(),
        "Notes": record.notes,
        "Output": record.output,
        "ServiceID": record.service_id,
        "ServiceName": record.service_name,
        "ServiceTags": record.service_tags,
        "Type": record.kind.type_name(),
        "Interval": interval,
        "Timeout": timeout,
        "ExposedPort": 0,
        "Definition": definition_json(&record.definition),
        "CreateIndex": check.create_index,
        "ModifyIndex": check.modify_index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_format_like_go() {
        let format = |ms| format_go_std(Duration::from_millis(ms));
        assert_eq!(format(0), "0s");
        assert_eq!(format(100), "100ms");
        assert_eq!(format(1_500), "1.5s");
        assert_eq!(format(10_000), "10s");
        assert_eq!(format(90_000), "1m30s");
        assert_eq!(format(3_600_000), "1h0m0s");
        assert_eq!(duration_field(0), "");
        assert_eq!(duration_field(1_500), "1.5s");
    }
}
