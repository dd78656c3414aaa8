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
//!   node's allocations, so an unchanged node does not wake its client. With `&since=m` (the
//!   highest `AllocModifyIndex` the client holds in full), an allocation whose
//!   `AllocModifyIndex` is at most `m` comes as a stub in `"Unchanged": [{"ID",
//!   "AllocModifyIndex", "DesiredStatus"}]` instead (what the client compares to find a change)
//!   and only the others come whole, as Nomad's `Node.GetClientAllocs` answers indexes and the
//!   client pulls only the changed allocations: a client holding n allocations no longer reads
//!   all n with their jobs whenever one changes. Without `since`, the answer is as before.
//! - `PUT /v1/internal/allocations` `{"Allocs": [AllocClientUpdate]}` → `{"Index": n}`; every
//!   update must name the token's node.
//! - `GET /v1/internal/node/:id/calls?wait=` (long poll) → `{"Calls": [ClientCall]}`: the
//!   calls the server has for the client (signal, restart, exec, fs and logs of its
//!   allocations), answered at once when some are queued, else after `wait` with none.
//! - `GET /v1/internal/node/:id/call/:call_id` with `Connection: Upgrade`, `Upgrade:
//!   cairn-call` → `101`: the client dials back for each call it received, and the upgraded
//!   connection is the call's tunnel. The client writes one head line
//!   `{"Status": code, "Error": text, "ContentType": type}` and then, for a 2xx, the call's
//!   body: an HTTP body passed through as it comes (fs, logs), or, for exec, newline-delimited
//!   JSON frames in both directions (the exec WebSocket's frames, one per line).
//!
//! Why a reverse channel: the server reaches the client that runs an allocation over a
//! connection the client opened, as Nomad's servers use their clients' RPC connections, so a
//! client needs no listener of its own and works behind NAT, in `cairn dev` (the in-process
//! client polls its own server over loopback) and with `cairn agent --servers` alike. A call
//! reaches a client only through the server the client polls; a client that has not polled
//! within [`CLIENT_SEEN_WITHIN`] answers `No path to node` (404).
//!
//! Invariants: no call here goes through the ACL system (the node secret is the credential);
//! a secret mismatch is always a 403 and changes nothing; a heartbeat resets the deadline
//! before it writes any status change, so the monitor never races a live node to `down`, and
//! a registration starts the deadline only once the node is stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode};
use http_kit::RawBody;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, oneshot};

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
    /// With `since`: the allocations the client holds unchanged, as stubs (the field is absent
    /// otherwise, keeping the answer without `since` as it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    unchanged: Option<Vec<AllocStub>>,
}

/// An allocation the client already holds (its `AllocModifyIndex` is at most `since`): what
/// the client compares with what it holds.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AllocStub {
    #[serde(rename = "ID")]
    id: String,
    alloc_modify_index: u64,
    desired_status: String,
}

/// `GET /v1/internal/node/:node_id/allocations?index=&wait=`.
pub(crate) async fn allocations(
    State(state): State<crate::State>,
    Path(node_id): Path<String>,
    headers: HeaderMap,
    query: QueryParams,
) -> Result<Indexed<NodeAllocations>, Error> {
    authenticated_node(&state, &headers, &node_id)?;
    let since =
        match query.get("since") {
            Some(raw) => Some(raw.parse::<u64>().map_err(|_| {
                Error::BadRequest(format!("Failed to parse since parameter: {raw:?}"))
            })?),
            None => None,
        };
    // While the query waits, every new snapshot only has its index read (shared handles, no
    // copies); the answer, each allocation copied with its job, is built once, from the
    // snapshot that ends the wait.
    let ((snapshot, mut on_node), index) = block_on(&state, &query.blocking()?, |snapshot| {
        let on_node: Vec<Arc<Allocation>> = snapshot.allocs_on_node(&node_id).cloned().collect();
        let index = on_node
            .iter()
            .map(|alloc| alloc.modify_index)
            .max()
            .unwrap_or(0);
        Ok(((Arc::clone(snapshot), on_node), index))
    })
    .await?;
    on_node.sort_by(by_create_index);
    let Some(since) = since else {
        let allocs = on_node
            .iter()
            .map(|alloc| with_job(&snapshot, alloc))
            .collect();
        return Ok(Indexed::new(
            index,
            NodeAllocations {
                allocs,
                index,
                unchanged: None,
            },
        ));
    };
    let mut allocs = Vec::new();
    let mut unchanged = Vec::new();
    for alloc in &on_node {
        if alloc.alloc_modify_index <= since {
            unchanged.push(AllocStub {
                id: alloc.id.clone(),
                alloc_modify_index: alloc.alloc_modify_index,
                desired_status: alloc.desired_status.clone(),
            });
        } else {
            allocs.push(with_job(&snapshot, alloc));
        }
    }
    Ok(Indexed::new(
        index,
        NodeAllocations {
            allocs,
            index,
            unchanged: Some(unchanged),
        },
    ))
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

/// The `Upgrade` protocol name of a call's tunnel.
pub(crate) const CALL_PROTOCOL: &str = "cairn-call";

/// A client counts as reachable while it polls, and this long after its last poll ended.
pub(crate) const CLIENT_SEEN_WITHIN: Duration = Duration::from_secs(5);

/// How long a queued call waits for its client to dial back.
const DIAL_BACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest head line a client may send.
const MAX_HEAD: usize = 64 * 1024;

/// Upstream's answer when no client connection can carry a call.
const NO_PATH: &str = "No path to node";

/// A call the server has for a client.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ClientCall {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    /// `signal`, `restart`, `exec`, `fs/ls`, `fs/stat`, `fs/cat`, `fs/readat`, `fs/logs`.
    pub(crate) op: String,
    #[serde(rename = "AllocID")]
    pub(crate) alloc_id: String,
    /// The operation's parameters (a JSON object).
    pub(crate) params: Value,
}

/// The connection a client dialled back for one call.
pub(crate) type TunnelIo = TokioIo<hyper::upgrade::Upgraded>;

/// The head line a client answers a call with.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct CallHead {
    pub(crate) status: u16,
    pub(crate) error: String,
    pub(crate) content_type: String,
}

/// An open call: the head the client answered and the tunnel, positioned after the head.
#[derive(Debug)]
pub(crate) struct Tunnel {
    pub(crate) head: CallHead,
    pub(crate) io: BufReader<TunnelIo>,
}

impl Tunnel {
    /// The client's refusal as the scheduler's error (statuses as upstream's client RPCs).
    pub(crate) fn refusal(&self) -> Option<Error> {
        let message = self.head.error.clone();
        match self.head.status {
            200..=299 => None,
            400 => Some(Error::BadRequest(message)),
            403 => Some(Error::PermissionDenied),
            404 => Some(Error::NotFound(message)),
            409 => Some(Error::Conflict(message)),
            _ => Some(Error::Internal(message)),
        }
    }
}

#[derive(Debug, Default)]
struct NodeCalls {
    queue: Vec<ClientCall>,
    notify: Arc<Notify>,
    polling: usize,
    last_poll: Option<Instant>,
}

#[derive(Debug, Default)]
struct CallsInner {
    nodes: HashMap<String, NodeCalls>,
    /// Call ID → (node ID, where its tunnel goes).
    waiting: HashMap<String, (String, oneshot::Sender<TunnelIo>)>,
}

/// The calls waiting for their clients, per node (one per server process).
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientCalls {
    inner: Arc<Mutex<CallsInner>>,
}

impl ClientCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, CallsInner> {
        // Plain maps; a panic elsewhere cannot leave them half-updated.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `node_id` polls this server now or did a moment ago.
    fn reachable(&self, node_id: &str) -> bool {
        self.lock().nodes.get(node_id).is_some_and(|node| {
            node.polling > 0
                || node
                    .last_poll
                    .is_some_and(|at| at.elapsed() <= CLIENT_SEEN_WITHIN)
        })
    }

    /// Queues `op` for the client of `node_id`, waits for it to dial back and reads its head.
    pub(crate) async fn open(
        &self,
        node_id: &str,
        op: &str,
        alloc_id: &str,
        params: Value,
    ) -> Result<Tunnel, Error> {
        if !self.reachable(node_id) {
            return Err(Error::NotFound(NO_PATH.to_owned()));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let (sender, receiver) = oneshot::channel();
        {
            let mut inner = self.lock();
            inner
                .waiting
                .insert(id.clone(), (node_id.to_owned(), sender));
            let node = inner.nodes.entry(node_id.to_owned()).or_default();
            node.queue.push(ClientCall {
                id: id.clone(),
                op: op.to_owned(),
                alloc_id: alloc_id.to_owned(),
                params,
            });
            node.notify.notify_waiters();
        }
        let io = match tokio::time::timeout(DIAL_BACK_TIMEOUT, receiver).await {
            Ok(Ok(io)) => io,
            _ => {
                let mut inner = self.lock();
                inner.waiting.remove(&id);
                if let Some(node) = inner.nodes.get_mut(node_id) {
                    node.queue.retain(|call| call.id != id);
                }
                return Err(Error::NotFound(NO_PATH.to_owned()));
            }
        };
        let mut io = BufReader::new(io);
        let head = read_head(&mut io).await?;
        Ok(Tunnel { head, io })
    }

    /// The calls queued for `node_id`, waiting up to `wait` for one.
    async fn take(&self, node_id: &str, wait: Duration) -> Vec<ClientCall> {
        let deadline = tokio::time::Instant::now() + wait;
        let notify = {
            let mut inner = self.lock();
            let node = inner.nodes.entry(node_id.to_owned()).or_default();
            node.polling += 1;
            node.notify.clone()
        };
        let calls = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let queued = {
                let mut inner = self.lock();
                inner
                    .nodes
                    .get_mut(node_id)
                    .map(|node| std::mem::take(&mut node.queue))
                    .unwrap_or_default()
            };
            if !queued.is_empty() {
                break queued;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break Vec::new();
            }
        };
        let mut inner = self.lock();
        if let Some(node) = inner.nodes.get_mut(node_id) {
            node.polling = node.polling.saturating_sub(1);
            node.last_poll = Some(Instant::now());
        }
        calls
    }

    /// The tunnel slot of `call_id`, if it is a call for `node_id` still waiting.
    fn claim(&self, node_id: &str, call_id: &str) -> Option<oneshot::Sender<TunnelIo>> {
        let mut inner = self.lock();
        match inner.waiting.get(call_id) {
            Some((node, _)) if node == node_id => {
                inner.waiting.remove(call_id).map(|(_, sender)| sender)
            }
            _ => None,
        }
    }
}

/// Reads the client's head line.
async fn read_head<R: AsyncRead + Unpin>(io: &mut BufReader<R>) -> Result<CallHead, Error> {
    let mut line = Vec::new();
    let read = async {
        let mut limited = (&mut *io).take(MAX_HEAD as u64);
        limited.read_until(b'\n', &mut line).await
    };
    match read.await {
        Ok(0) | Err(_) => {
            return Err(Error::Internal(
                "the client closed the call without an answer".to_owned(),
            ));
        }
        Ok(_) => {}
    }
    serde_json::from_slice(&line)
        .map_err(|err| Error::Internal(format!("malformed answer from the client: {err}")))
}

/// `GET /v1/internal/node/:node_id/calls?wait=` answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NodeCallsResponse {
    calls: Vec<ClientCall>,
}

/// `GET /v1/internal/node/:node_id/calls?wait=` (long poll).
pub(crate) async fn calls(
    State(state): State<crate::State>,
    Path(node_id): Path<String>,
    headers: HeaderMap,
    query: QueryParams,
) -> Result<http_kit::Json<NodeCallsResponse>, Error> {
    authenticated_node(&state, &headers, &node_id)?;
    let wait = match query.get("wait") {
        None | Some("") => Duration::from_secs(30),
        Some(raw) => {
            stdx::duration::parse_go(raw).map_err(|err| Error::BadRequest(err.go_message()))?
        }
    }
    .min(Duration::from_secs(60));
    let calls = tokio::select! {
        calls = state.client_calls().take(&node_id, wait) => calls,
        () = state.shutdown_token().cancelled() => Vec::new(),
    };
    Ok(http_kit::Json(NodeCallsResponse { calls }))
}

/// `GET /v1/internal/node/:node_id/call/:call_id` (upgraded to the call's tunnel).
pub(crate) async fn dial_back(
    State(state): State<crate::State>,
    Path((node_id, call_id)): Path<(String, String)>,
    mut request: Request,
) -> Result<Response, Error> {
    authenticated_node(&state, request.headers(), &node_id)?;
    let wants_tunnel = request
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case(CALL_PROTOCOL));
    if !wants_tunnel {
        return Err(Error::BadRequest(format!(
            "a call is answered over an upgrade to {CALL_PROTOCOL}"
        )));
    }
    let sender = state
        .client_calls()
        .claim(&node_id, &call_id)
        .ok_or_else(|| Error::NotFound("call not found".to_owned()))?;
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let _ = sender.send(TokioIo::new(upgraded));
            }
            Err(error) => tracing::warn!(%error, "a client's call tunnel failed to upgrade"),
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    headers.insert(
        http::header::UPGRADE,
        HeaderValue::from_static(CALL_PROTOCOL),
    );
    Ok(response)
}

/// The allocation a client endpoint names (the full ID), or upstream's 404
/// `Unknown allocation "<id>"`.
pub(crate) fn client_alloc(state: &crate::State, alloc_id: &str) -> Result<Arc<Allocation>, Error> {
    state
        .store()
        .snapshot()
        .alloc(alloc_id)
        .cloned()
        .ok_or_else(|| Error::NotFound(format!("Unknown allocation {alloc_id:?}")))
}

/// Makes call `op` to the client running `alloc` and answers with what it sends: its refusal
/// as the scheduler's error, else its body, passed through as it comes (so a followed log
/// streams) with the content type it names.
pub(crate) async fn forward(
    state: &crate::State,
    alloc: &Allocation,
    op: &str,
    params: Value,
) -> Result<Response, Error> {
    forward_to(state, &alloc.node_id, op, &alloc.id, params).await
}

/// Makes call `op` about the node itself (no allocation) to its client, answered as
/// [`forward`] answers.
pub(crate) async fn forward_node(
    state: &crate::State,
    node_id: &str,
    op: &str,
    params: Value,
) -> Result<Response, Error> {
    forward_to(state, node_id, op, "", params).await
}

/// The nodes whose clients poll this server now (or did a moment ago), in ID order.
pub(crate) fn connected_nodes(state: &crate::State) -> Vec<String> {
    let calls = state.client_calls();
    let mut nodes: Vec<String> = calls.lock().nodes.keys().cloned().collect();
    nodes.retain(|node_id| calls.reachable(node_id));
    nodes.sort();
    nodes
}

async fn forward_to(
    state: &crate::State,
    node_id: &str,
    op: &str,
    alloc_id: &str,
    params: Value,
) -> Result<Response, Error> {
    let tunnel = state
        .client_calls()
        .open(node_id, op, alloc_id, params)
        .await?;
    if let Some(error) = tunnel.refusal() {
        return Err(error);
    }
    let content_type = HeaderValue::from_str(&tunnel.head.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let body = futures::stream::unfold(tunnel.io, |mut io| async move {
        let mut buffer = vec![0_u8; 64 * 1024];
        match io.read(&mut buffer).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buffer.truncate(n);
                Some((Ok::<_, std::io::Error>(axum::body::Bytes::from(buffer)), io))
            }
        }
    });
    let mut response = axum::body::Body::from_stream(body).into_response();
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, content_type);
    Ok(response)
}

/// Writes `bytes` to a tunnel (exec frames toward the client).
pub(crate) async fn write_all<W: AsyncWrite + Unpin>(
    io: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    io.write_all(bytes).await?;
    io.flush().await
}

#[cfg(test)]
mod tests {
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
