//! `/v1/client/stats`, `/v1/client/gc`, `/v1/client/allocation/:id/stats` and
//! `/v1/client/allocation/:id/gc`: resource statistics and garbage collection, answered by the
//! client that runs the allocation (or the named node's client) through a call
//! (`client_rpc.rs`), its body passed through unchanged.
//!
//! Node endpoints take `?node_id=` (a full ID; an unknown one is upstream's 404 `Unknown node
//! "<id>"`); without it the node is the only client polling this server, as a Nomad agent that
//! runs a client answers for its own node, and with none or several it is upstream's 400 `No
//! local Node and node_id not provided`. ACL: `read-job` for allocation stats, `submit-job`
//! for an allocation's gc, `node:read` for host stats and `node:write` for a node's gc.
//!
//! Invariants: nothing reaches a client before the allocation or node and the token are
//! checked; a client that is not reachable is `No path to node` (404).

use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::json;

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::client_rpc::{client_alloc, connected_nodes, forward, forward_node};
use crate::meta::QueryParams;

/// Upstream's refusal when no node is named and none is implied.
const NO_LOCAL_NODE: &str = "No local Node and node_id not provided";

/// The node a node endpoint is about.
fn target_node(state: &crate::State, query: &QueryParams) -> Result<String, Error> {
    match query.get("node_id") {
        Some(node_id) if !node_id.is_empty() => {
            if state.store().snapshot().node(node_id).is_none() {
                return Err(Error::NotFound(format!("Unknown node {node_id:?}")));
            }
            Ok(node_id.to_owned())
        }
        _ => {
            let mut nodes = connected_nodes(state);
            match (nodes.pop(), nodes.is_empty()) {
                (Some(node_id), true) => Ok(node_id),
                _ => Err(Error::BadRequest(NO_LOCAL_NODE.to_owned())),
            }
        }
    }
}

/// `GET /v1/client/stats?node_id=`: the host's memory, CPU, disk and uptime.
pub(crate) async fn host(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Response, Error> {
    authz.allow_node_read()?;
    let node_id = target_node(&state, &query)?;
    forward_node(&state, &node_id, "stats/host", json!({})).await
}

/// `GET|PUT|POST /v1/client/gc?node_id=`: collects every terminal allocation of the node.
pub(crate) async fn gc_node(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Response, Error> {
    authz.allow_node_write()?;
    let node_id = target_node(&state, &query)?;
    forward_node(&state, &node_id, "gc/all", json!({})).await
}

/// `GET /v1/client/allocation/:id/stats?task=`: the allocation's (or one task's) usage.
pub(crate) async fn alloc(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Response, Error> {
    let alloc = client_alloc(&state, &alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::ReadJob)?;
    let task = query.get("task").unwrap_or("");
    forward(&state, &alloc, "stats/alloc", json!({ "Task": task })).await
}

/// `GET|PUT|POST /v1/client/allocation/:id/gc`: collects one terminal allocation.
pub(crate) async fn gc_alloc(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
) -> Result<Response, Error> {
    let alloc = client_alloc(&state, &alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::SubmitJob)?;
    forward(&state, &alloc, "gc/alloc", json!({})).await
}
