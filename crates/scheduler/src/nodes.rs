//! `/v1/nodes`, `/v1/node/:node_id`, `/v1/node/:node_id/allocations` and the node pools
//! (`/v1/node/pools`, `/v1/node/pool/:pool`).
//!
//! Where it sits: read-only handlers over snapshots (nodes are written by the client protocol,
//! `client_rpc.rs`, and the heartbeat monitor). Node pools are not stored: they are the
//! built-in `default` and `all` plus every pool a registered node names.
//!
//! Invariants: a node's `SecretID` never leaves the server here (blanked in reads, lists and
//! filter input); lists are in ID order with inclusive ID tokens.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::Value;

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::allocations::{by_create_index, with_job};
use crate::blocking::block_on;
use crate::meta::{self, Indexed, Page, QueryParams};
use crate::state::Snapshot;
use crate::structs::{
    ALL_NODE_POOL, Allocation, DEFAULT_NODE_POOL, DriverInfo, Node, NodeReservedResources,
    NodeResources,
};

/// The dotted paths of a node's JSON that are Go maps (for the filter).
const NODE_MAP_FIELDS: &[&str] = &[
    "Attributes",
    "Meta",
    "Links",
    "Drivers",
    "Drivers.*.Attributes",
    "HostVolumes",
    "Events.*.Details",
];

/// A node list entry (Nomad's `NodeListStub`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NodeListStub {
    address: String,
    #[serde(rename = "ID")]
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    attributes: Option<BTreeMap<String, String>>,
    datacenter: String,
    name: String,
    node_class: String,
    node_pool: String,
    version: String,
    drain: bool,
    scheduling_eligibility: String,
    status: String,
    status_description: String,
    drivers: BTreeMap<String, DriverInfo>,
    host_volumes: BTreeMap<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_resources: Option<NodeResources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reserved_resources: Option<NodeReservedResources>,
    last_drain: Option<Value>,
    create_index: u64,
    modify_index: u64,
}

/// Which optional parts a node list entry carries (`?resources=`, `?os=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct NodeStubFields {
    resources: bool,
    os: bool,
}

/// The host part of an `HTTPAddr` (`10.0.0.1:4646` → `10.0.0.1`, `[::1]:4646` → `::1`).
fn address_of(http_addr: &str) -> String {
    let host = match http_addr.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !host.is_empty() => host,
        _ => http_addr,
    };
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

fn node_stub(node: &Node, fields: NodeStubFields) -> NodeListStub {
    NodeListStub {
        address: address_of(&node.http_addr),
        id: node.id.clone(),
        attributes: fields.os.then(|| {
            node.attributes
                .iter()
                .filter(|(key, _)| key.as_str() == "os.name" || key.as_str() == "os.version")
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        }),
        datacenter: node.datacenter.clone(),
        name: node.name.clone(),
        node_class: node.node_class.clone(),
        node_pool: node.node_pool.clone(),
        version: node
            .attributes
            .get("nomad.version")
            .cloned()
            .unwrap_or_default(),
        drain: node.drain,
        scheduling_eligibility: node.scheduling_eligibility.clone(),
        status: node.status.clone(),
        status_description: node.status_description.clone(),
        drivers: node.drivers.clone(),
        host_volumes: node.host_volumes.clone(),
        node_resources: fields.resources.then(|| node.node_resources.clone()),
        reserved_resources: fields.resources.then(|| node.reserved_resources.clone()),
        last_drain: None,
        create_index: node.create_index,
        modify_index: node.modify_index,
    }
}

/// A node as the API shows it: without its secret.
fn public_node(node: &Node) -> Node {
    Node {
        secret_id: String::new(),
        ..node.clone()
    }
}

fn list_nodes(
    snapshot: &Snapshot,
    prefix: &str,
    paging: &meta::Paging,
    filter: Option<&crate::filter::Filter>,
    fields: NodeStubFields,
) -> Result<Page<NodeListStub>, Error> {
    let matching = snapshot
        .nodes
        .range(prefix.to_owned()..)
        .take_while(|(id, _)| id.starts_with(prefix))
        .map(|(_, node)| node);
    let ordered: Vec<&Arc<Node>> = if paging.reverse {
        matching.collect::<Vec<_>>().into_iter().rev().collect()
    } else {
        matching.collect()
    };
    meta::paginate(
        ordered,
        paging,
        |node, target| meta::id_token(&node.id, target),
        |node| {
            meta::passes(
                filter,
                || serde_json::to_value(public_node(node)).unwrap_or(Value::Null),
                NODE_MAP_FIELDS,
            )
        },
        |node| node_stub(node, fields),
    )
}

/// `GET /v1/nodes` (`prefix`, `filter`, paging, `resources`, `os`).
pub(crate) async fn list(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Indexed<Vec<NodeListStub>>, Error> {
    authz.allow_node_read()?;
    let prefix = meta::uuid_prefix(query.prefix(), "node")?;
    let paging = query.paging()?;
    let filter = query.filter()?;
    let fields = NodeStubFields {
        resources: query.flag("resources", false)?,
        os: query.flag("os", false)?,
    };
    let ((items, next_token), index) = block_on(&state, &query.blocking()?, |snapshot| {
        let page = list_nodes(snapshot, &prefix, &paging, filter.as_ref(), fields)?;
        Ok(((page.items, page.next_token), snapshot.tables.nodes))
    })
    .await?;
    Ok(Indexed::new(index, items).next_token(next_token))
}

/// `GET /v1/node/:node_id`.
pub(crate) async fn read(
    authz: Authz,
    State(state): State<crate::State>,
    Path(node_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Node>, Error> {
    authz.allow_node_read()?;
    let (node, index) = block_on(&state, &query.blocking()?, |snapshot| {
        Ok(match snapshot.node(&node_id) {
            Some(node) => (Some(public_node(node)), node.modify_index),
            None => (None, snapshot.tables.nodes),
        })
    })
    .await?;
    Ok(Indexed::new(
        index,
        node.ok_or_else(|| Error::NotFound("node not found".to_owned()))?,
    ))
}

/// `GET /v1/node/:node_id/allocations`: the node's allocations (with `Job`) in namespaces the
/// caller may read.
pub(crate) async fn allocations(
    authz: Authz,
    State(state): State<crate::State>,
    Path(node_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Allocation>>, Error> {
    authz.allow_node_read()?;
    let (allocs, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let mut on_node: Vec<&Arc<Allocation>> = snapshot
            .allocs_on_node(&node_id)
            .filter(|alloc| authz.allows_namespace(&alloc.namespace, Capability::ReadJob))
            .collect();
        on_node.sort_by(|a, b| by_create_index(a, b));
        let index = on_node
            .iter()
            .map(|alloc| alloc.modify_index)
            .max()
            .unwrap_or(snapshot.tables.allocs);
        Ok((
            on_node
                .into_iter()
                .map(|alloc| with_job(snapshot, alloc))
                .collect(),
            index,
        ))
    })
    .await?;
    Ok(Indexed::new(index, allocs))
}

/// A node pool (Nomad's `NodePool`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NodePool {
    name: String,
    description: String,
    meta: Option<BTreeMap<String, String>>,
    scheduler_configuration: Option<Value>,
    create_index: u64,
    modify_index: u64,
}

/// Every pool: the built-ins plus the pools registered nodes name, by name.
fn node_pools(snapshot: &Snapshot) -> Vec<NodePool> {
    let mut pools: BTreeMap<String, NodePool> = BTreeMap::new();
    for (name, description) in [
        (ALL_NODE_POOL, "Node pool with all nodes in the cluster."),
        (DEFAULT_NODE_POOL, "Default node pool."),
    ] {
        pools.insert(
            name.to_owned(),
            NodePool {
                name: name.to_owned(),
                description: description.to_owned(),
                meta: None,
                scheduler_configuration: None,
                create_index: 1,
                modify_index: 1,
            },
        );
    }
    for node in snapshot.nodes.values() {
        if node.node_pool.is_empty() || pools.contains_key(&node.node_pool) {
            continue;
        }
        pools.insert(
            node.node_pool.clone(),
            NodePool {
                name: node.node_pool.clone(),
                description: String::new(),
                meta: None,
                scheduler_configuration: None,
                create_index: node.create_index,
                modify_index: node.create_index,
            },
        );
    }
    pools.into_values().collect()
}

/// `GET /v1/node/pools` (`prefix`): the pools the token may read.
pub(crate) async fn list_pools(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Indexed<Vec<NodePool>>, Error> {
    let prefix = query.prefix().to_owned();
    let (pools, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let pools: Vec<NodePool> = node_pools(snapshot)
            .into_iter()
            .filter(|pool| {
                pool.name.starts_with(&prefix) && authz.allows_node_pool_read(&pool.name)
            })
            .collect();
        Ok((pools, snapshot.tables.nodes))
    })
    .await?;
    Ok(Indexed::new(index, pools))
}

/// `GET /v1/node/pool/:pool`.
pub(crate) async fn read_pool(
    authz: Authz,
    State(state): State<crate::State>,
    Path(name): Path<String>,
    query: QueryParams,
) -> Result<Indexed<NodePool>, Error> {
    if !authz.allows_node_pool_read(&name) {
        return Err(Error::PermissionDenied);
    }
    let (pool, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let pool = node_pools(snapshot)
            .into_iter()
            .find(|pool| pool.name == name);
        let index = pool
            .as_ref()
            .map_or(snapshot.tables.nodes, |pool| pool.modify_index);
        Ok((pool, index))
    })
    .await?;
    Ok(Indexed::new(
        index,
        pool.ok_or_else(|| Error::NotFound("node pool not found".to_owned()))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_is_the_host_of_the_http_address() {
        assert_eq!(address_of("10.0.0.1:4646"), "10.0.0.1");
        assert_eq!(address_of("[::1]:4646"), "::1");
        assert_eq!(address_of("host"), "host");
        assert_eq!(address_of(""), "");
    }

    #[test]
    fn pools_are_builtins_plus_node_pools() {
        let mut snapshot = Snapshot::default();
        for (id, pool) in [("a", "gpu"), ("b", "default"), ("c", "gpu")] {
            snapshot.nodes.insert(
                id.to_owned(),
                Arc::new(Node {
                    id: id.to_owned(),
                    node_pool: pool.to_owned(),
                    create_index: 5,
                    ..Node::default()
                }),
            );
        }
        let names: Vec<String> = node_pools(&snapshot)
            .into_iter()
            .map(|pool| pool.name)
            .collect();
        assert_eq!(names, vec!["all", "default", "gpu"]);
    }

    #[test]
    fn stubs_and_reads_never_carry_the_secret() {
        let node = Node {
            id: "n1".to_owned(),
            secret_id: "s3cret".to_owned(),
            ..Node::default()
        };
        let stub =
            serde_json::to_string(&node_stub(&node, NodeStubFields::default())).unwrap_or_default();
        assert!(!stub.contains("s3cret"));
        assert!(public_node(&node).secret_id.is_empty());
    }
}
