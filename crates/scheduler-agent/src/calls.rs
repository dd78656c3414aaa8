//! The client's side of the server's calls (the reverse channel of the cairn-internal client
//! protocol): a long poll for the calls the server has for this node (signal, restart, exec,
//! fs and logs, stats and garbage collection of its allocations; host stats and a full
//! garbage collection of the node, whose calls name no allocation), and for each call a connection dialled back to the server
//! and upgraded into the call's tunnel.
//!
//! Tunnel protocol (the server's `client_rpc.rs` reads exactly this): the client first writes
//! one head line, `{"Status": code, "Error": text, "ContentType": type}`; after a 2xx head
//! comes the call's body: the HTTP body to pass through (fs, logs; the client closes the
//! tunnel at its end), or for exec newline-delimited JSON frames both ways (`exec/`).
//!
//! Invariants: every call gets exactly one head (an unknown operation or bad parameters get a
//! 4xx head, never a dropped tunnel); a call's work lives in a `JoinSet` owned by [`run`], so
//! nothing outlives the agent; a failed poll is retried with backoff until shutdown.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::Shared;
use crate::backoff::Backoff;
use crate::handles::ControlError;
use crate::server_client::ServerClient;

/// A call the server has for this client.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ClientCall {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    pub(crate) op: String,
    #[serde(rename = "AllocID")]
    pub(crate) alloc_id: String,
    pub(crate) params: Value,
}

/// How a call failed before its body: the head's status and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(400, message)
    }

    pub(crate) fn unknown_allocation(alloc_id: &str) -> Refusal {
        Refusal::new(
            404,
            ControlError::UnknownAllocation(alloc_id.to_owned()).to_string(),
        )
    }
}

impl From<ControlError> for Refusal {
    fn from(error: ControlError) -> Refusal {
        Refusal::new(error.status(), error.to_string())
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Head<'a> {
    status: u16,
    error: &'a str,
    content_type: &'a str,
}

/// Writes the head line of a call.
pub(crate) async fn write_head<W: AsyncWrite + Unpin>(
    io: &mut W,
    status: u16,
    error: &str,
    content_type: &str,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(&Head {
        status,
        error,
        content_type,
    })
    .map_err(std::io::Error::other)?;
    line.push(b'\n');
    io.write_all(&line).await?;
    io.flush().await
}

/// Answers a call with a refusal and closes the tunnel.
pub(crate) async fn refuse<W: AsyncWrite + Unpin>(io: &mut W, refusal: &Refusal) {
    let _ = write_head(io, refusal.status, &refusal.message, "text/plain").await;
    let _ = io.shutdown().await;
}

/// Answers a call with a JSON body and closes the tunnel.
pub(crate) async fn answer_json<W: AsyncWrite + Unpin>(io: &mut W, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    if write_head(io, 200, "", "application/json").await.is_ok() {
        let _ = io.write_all(&bytes).await;
    }
    let _ = io.shutdown().await;
}

/// Polls for calls until `shared.shutdown`, handling each on its own task.
pub(crate) async fn run(
    shared: Arc<Shared>,
    client: Arc<ServerClient>,
    mut epoch: watch::Receiver<u64>,
    wait: Duration,
) {
    tokio::select! {
        () = shared.shutdown.cancelled() => return,
        registered = epoch.wait_for(|epoch| *epoch > 0) => if registered.is_err() { return },
    }
    let node_id = shared.node.id.clone();
    let mut calls = JoinSet::new();
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        while calls.try_join_next().is_some() {}
        let polled = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            polled = client.calls(&node_id, wait) => polled,
        };
        match polled {
            Ok(list) => {
                backoff.reset();
                for call in list {
                    calls.spawn(handle(shared.clone(), client.clone(), call));
                }
            }
            Err(error) => {
                tracing::debug!(%error, "cannot poll the server for calls");
                tokio::select! {
                    () = shared.shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        }
    }
    calls.shutdown().await;
}

/// Dials back for one call and answers it.
async fn handle(shared: Arc<Shared>, client: Arc<ServerClient>, call: ClientCall) {
    let mut io = match client.dial_back(&shared.node.id, &call.id).await {
        Ok(io) => io,
        Err(error) => {
            tracing::warn!(call = %call.id, op = %call.op, %error, "cannot dial the server back for a call");
            return;
        }
    };
    tracing::debug!(call = %call.id, op = %call.op, alloc_id = %call.alloc_id, "answering a server call");
    match call.op.as_str() {
        "signal" => match signal(&shared, &call).await {
            Ok(()) => answer_json(&mut io, &serde_json::json!({})).await,
            Err(refusal) => refuse(&mut io, &refusal).await,
        },
        "restart" => match restart(&shared, &call).await {
            Ok(()) => answer_json(&mut io, &serde_json::json!({})).await,
            Err(refusal) => refuse(&mut io, &refusal).await,
        },
        "exec" => crate::exec::serve(&shared, &call, io).await,
        "stats/alloc" => match crate::stats::alloc_stats(&shared, &call).await {
            Ok(stats) => answer_json(&mut io, &stats).await,
            Err(refusal) => refuse(&mut io, &refusal).await,
        },
        "stats/host" => answer_json(&mut io, &crate::stats::host_stats(&shared).await).await,
        "gc/alloc" => match crate::gc::collect(&shared, &call.alloc_id) {
            Ok(()) => answer_json(&mut io, &Value::Null).await,
            Err(refusal) => refuse(&mut io, &refusal).await,
        },
        "gc/all" => {
            crate::gc::collect_all(&shared);
            answer_json(&mut io, &Value::Null).await;
        }
        op if op.starts_with("fs/") => crate::fs::serve(&shared, &call, io).await,
        other => {
            refuse(
                &mut io,
                &Refusal::bad_request(format!("unknown client call {other:?}")),
            )
            .await;
        }
    }
}

/// A string parameter (`null` and absent read as empty).
pub(crate) fn param_str<'a>(call: &'a ClientCall, name: &str) -> &'a str {
    call.params.get(name).and_then(Value::as_str).unwrap_or("")
}

/// A boolean parameter (absent: false).
pub(crate) fn param_bool(call: &ClientCall, name: &str) -> bool {
    call.params
        .get(name)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

async fn signal(shared: &Shared, call: &ClientCall) -> Result<(), Refusal> {
    let task = Some(param_str(call, "Task")).filter(|task| !task.is_empty());
    let signal = param_str(call, "Signal");
    shared
        .controls
        .signal(&call.alloc_id, task, signal)
        .await
        .map_err(Refusal::from)
}

async fn restart(shared: &Shared, call: &ClientCall) -> Result<(), Refusal> {
    let task = Some(param_str(call, "TaskName")).filter(|task| !task.is_empty());
    let all = param_bool(call, "AllTasks");
    shared
        .controls
        .restart_tasks(&call.alloc_id, task, all)
        .await
        .map_err(Refusal::from)
}
