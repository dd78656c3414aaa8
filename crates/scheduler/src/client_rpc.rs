//! The cairn-internal client protocol (`/v1/internal/*`): what `scheduler-agent` calls to
//! register its node, heartbeat, pull its allocations and report their states. It stands in
//! for Nomad's client RPCs (`Node.Register`, `Node.UpdateStatus`, `Node.GetClientAllocs`,
//! `Node.UpdateAlloc`) over plain HTTP.
//!
//! Protocol (the agent is written to exactly this):
//! - The credential is the node's `SecretID`, sent as `X-Nomad-Token` (read here as
//!   `x-scheduler-token` after the header-alias layer) or `Authorization: Bearer`.
//! - `PUT /v1/internal/node/register` `{"Node": Node}` → `{"HeartbeatTTL": ns, "Index": n}`.
//!   A node that exists with another `SecretID` is refused (403).
//! - `PUT /v1/internal/node/:id/heartbeat` → `{"HeartbeatTTL": ns, "Index": n}`; a node the
//!   server marked down (or that is still initializing) becomes ready again. Unknown node 404.
//! - `GET /v1/internal/node/:id/allocations?index=&wait=` (blocking) → `{"Allocs":
//!   [Allocation with Job], "Index": n}`; the index is the highest `ModifyIndex` among the
//!   node's allocations, so an unchanged node does not wake its client.
//! - `PUT /v1/internal/allocations` `{"Allocs": [AllocClientUpdate]}` → `{"Index": n}`; every
//!   update must name the token's node.
//!
//! Invariants: no call here goes through the ACL system (the node secret is the credential);
//! a secret mismatch is always a 403 and changes nothing; a heartbeat resets the deadline
//! before it writes any status change, so the monitor never races a live node to `down`, and
//! a registration starts the deadline only once the node is stored.

use axum::extract::{Path, State};
use http::HeaderMap;
use http_kit::RawBody;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::allocations::{by_create_index, with_job};
use crate::blocking::block_on;
use crate::meta::{self, Indexed, QueryParams};
use crate::state::Command;
use crate::structs::{AllocClientUpdate, Allocation, NODE_STATUS_READY, Node};

/// The node secret the request carries, if any.
fn node_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-scheduler-token")
        .and_then(|value| value.to_str().ok())
        .filter(|token| !token.is_empty())
        .or_else(|| http_kit::bearer_token(headers))
}

/// The TTL handed to clients, in nanoseconds.
fn ttl_nanos(state: &crate::State) -> u64 {
    u64::try_from(state.heartbeat_ttl().as_nanos()).unwrap_or(u64::MAX)
}

/// Restarts the node's heartbeat deadline (TTL plus grace).
fn heard_from(state: &crate::State, node_id: &str) {
    state.heartbeats().reset(
        node_id,
        state.heartbeat_ttl() + state.config().heartbeat_grace,
    );
}

/// The node named `node_id`, checked against the request's secret.
fn authenticated_node(
    state: &crate::State,
    headers: &HeaderMap,
    node_id: &str,
) -> Result<Node, Error> {
    let snapshot = state.store().snapshot();
    let node = snapshot
        .node(node_id)
        .ok_or_else(|| Error::NotFound("node not found".to_owned()))?;
    if node_token(headers) != Some(node.secret_id.as_str()) {
        return Err(Error::PermissionDenied);
    }
    Ok((**node).clone())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RegisterRequest {
    node: Option<Node>,
}

/// The answer to a registration or a heartbeat.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct HeartbeatResponse {
    #[serde(rename = "HeartbeatTTL")]
    heartbeat_ttl: u64,
    index: u64,
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let value = meta::json_body(bytes)?;
    serde_json::from_value(value)
        .map_err(|err| Error::BadRequest(format!("failed to parse JSON input: {err}")))
}

/// `PUT /v1/internal/node/register`.
pub(crate) async fn register(
    State(state): State<crate::State>,
    headers: HeaderMap,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Indexed<HeartbeatResponse>, Error> {
    let request: RegisterRequest = decode(&bytes)?;
    let mut node = request
        .node
        .ok_or_else(|| Error::BadRequest("missing node for client registration".to_owned()))?;
    if node.id.is_empty() {
        return Err(Error::BadRequest(
            "missing node ID for client registration".to_owned(),
        ));
    }
    if node.datacenter.is_empty() {
        return Err(Error::BadRequest(
            "missing datacenter for client registration".to_owned(),
        ));
    }
    let token = node_token(&headers);
    if node.secret_id.is_empty() {
        node.secret_id = token.unwrap_or_default().to_owned();
    } else if token.is_some_and(|token| token != node.secret_id) {
        return Err(Error::PermissionDenied);
    }
    if let Some(existing) = state.store().snapshot().node(&node.id)
        && existing.secret_id != node.secret_id
    {
        return Err(Error::PermissionDenied);
    }
    let node_id = node.id.clone();
    heard_from(&state, &node_id);
    let applied = state
        .store()
        .apply(Command::UpsertNode(Box::new(node)))
        .await?;
    Ok(meta::written(
        applied.index,
        HeartbeatResponse {
            heartbeat_ttl: ttl_nanos(&state),
            index: applied.index,
        },
    ))
}

/// `PUT /v1/internal/node/:node_id/heartbeat`.
pub(crate) async fn heartbeat(
    State(state): State<crate::State>,
    Path(node_id): Path<String>,
    headers: HeaderMap,
) -> Result<Indexed<HeartbeatResponse>, Error> {
    let node = authenticated_node(&state, &headers, &node_id)?;
    heard_from(&state, &node_id);
    let index = if node.status == NODE_STATUS_READY {
        state.store().snapshot().index
    } else {
        let command = Command::SetNodeStatus {
            node_id,
            status: NODE_STATUS_READY.to_owned(),
        };
        state.store().apply(command).await?.index
    };
    Ok(meta::written(
        index,
        HeartbeatResponse {
            heartbeat_ttl: ttl_nanos(&state),
            index,
        },
    ))
}

/// `GET /v1/internal/node/:node_id/allocations` answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NodeAllocations {
    allocs: Vec<Allocation>,
    index: u64,
}

/// `GET /v1/internal/node/:node_id/allocations?index=&wait=`.
pub(crate) async fn allocations(
    State(state): State<crate::State>,
    Path(node_id): Path<String>,
    headers: HeaderMap,
    query: QueryParams,
) -> Result<Indexed<NodeAllocations>, Error> {
    authenticated_node(&state, &headers, &node_id)?;
    let (allocs, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let mut on_node: Vec<_> = snapshot.allocs_on_node(&node_id).collect();
        on_node.sort_by(|a, b| by_create_index(a, b));
        let index = on_node
            .iter()
            .map(|alloc| alloc.modify_index)
            .max()
            .unwrap_or(0);
        Ok((
            on_node
                .into_iter()
                .map(|alloc| with_job(snapshot, alloc))
                .collect(),
            index,
        ))
    })
    .await?;
    Ok(Indexed::new(index, NodeAllocations { allocs, index }))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateRequest {
    #[serde(default)]
    allocs: Vec<AllocClientUpdate>,
}

/// `PUT /v1/internal/allocations` answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct UpdateResponse {
    index: u64,
}

/// `PUT /v1/internal/allocations`.
pub(crate) async fn update_allocations(
    State(state): State<crate::State>,
    headers: HeaderMap,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Indexed<UpdateResponse>, Error> {
    let request: UpdateRequest = decode(&bytes)?;
    let Some(first) = request.allocs.first() else {
        let index = state.store().snapshot().index;
        return Ok(meta::written(index, UpdateResponse { index }));
    };
    let node_id = first.node_id.clone();
    if request
        .allocs
        .iter()
        .any(|update| update.node_id != node_id)
    {
        return Err(Error::PermissionDenied);
    }
    match authenticated_node(&state, &headers, &node_id) {
        Ok(_) => {}
        Err(Error::NotFound(_)) => return Err(Error::PermissionDenied),
        Err(err) => return Err(err),
    }
    let applied = state
        .store()
        .apply(Command::ClientAllocUpdates(request.allocs))
        .await?;
    Ok(meta::written(
        applied.index,
        UpdateResponse {
            index: applied.index,
        },
    ))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn node_token_reads_the_canonical_header_or_bearer() {
        let mut headers = HeaderMap::new();
        assert_eq!(node_token(&headers), None);
        headers.insert("authorization", HeaderValue::from_static("Bearer abc"));
        assert_eq!(node_token(&headers), Some("abc"));
        headers.insert("x-scheduler-token", HeaderValue::from_static("xyz"));
        assert_eq!(node_token(&headers), Some("xyz"));
    }
}
