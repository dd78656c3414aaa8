//! The client's side of the server's calls (the reverse channel of the cairn-internal client
//! protocol): a long poll for the calls the server has for this node (signal, restart, exec,
//! fs and logs, stats and garbage collection of its allocations; host stats and a full
//! garbage collection of the node, whose calls name no allocation), and for each call a connection dialled back to the server
//! and upgraded into the call's tunnel.
//!
//! The tunnel protocol every call's handler speaks (head line, refusals, parameters) is in
//! `tunnel.rs`, below this dispatcher and the handlers (`exec/`, `fs.rs`, `stats.rs`, `gc.rs`).
//!
//! Invariants: every call gets exactly one head (an unknown operation or bad parameters get a
//! 4xx head, never a dropped tunnel); a call's work lives in a `JoinSet` owned by [`run`], so
//! nothing outlives the agent; a failed poll is retried with backoff until shutdown.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::Shared;
use crate::backoff::Backoff;
use crate::server_client::ServerClient;
use crate::tunnel::{ClientCall, Refusal, answer_json, param_bool, param_str, refuse};

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
