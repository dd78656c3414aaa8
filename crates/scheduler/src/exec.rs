//! `GET /v1/client/allocation/:alloc_id/exec`: a command run in a task's context, over a
//! WebSocket (Nomad's `alloc exec`).
//!
//! Before the upgrade, the query is checked as upstream's HTTP handler does: `command` must be
//! a JSON array of strings (`failed to marshal command into json: ...`) and `tty` a boolean
//! (`tty value is not a boolean: ...`), both 400 here where upstream answers 500. Everything
//! after the upgrade is reported as a close frame (1008 for a 4xx, 1011 for a 5xx, with
//! upstream's reason): the `ws_handshake` auth frame (`{"version":1,"auth_token":...}`), the
//! token, the allocation, the ACL capabilities (`alloc-exec`, plus `alloc-node-exec` for a
//! `raw_exec` task, which has no filesystem isolation), the task and the command, and what the
//! client answers.
//!
//! Then frames pass through: the user's frames go to the client running the allocation as
//! lines of the call's tunnel (`client_rpc.rs`), the client's lines come back as text frames,
//! and this side adds an empty `{}` heartbeat frame every [`HEARTBEAT`] so idle sessions stay
//! open through proxies (there is no idle timeout). After the exit frame the socket is closed
//! with 1000.
//!
//! Invariants: the exit frame, when the command ends, is the last data frame; when the user's
//! socket closes, the tunnel is closed and the client kills the command; a close reason never
//! exceeds the 123 bytes a close frame can carry.

use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::{IntoResponse as _, Response};
use http::HeaderMap;
use http_kit::ApiError as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::Error;
use crate::acl::{self, Capability};
use crate::allocations::with_job;
use crate::client_rpc::client_alloc;
use crate::meta::QueryParams;

/// How often an empty frame is sent to keep the socket busy (upstream's clients send one every
/// 10 s too).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// How long the `ws_handshake` auth frame may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest close reason (125 bytes of payload less the code).
const MAX_REASON: usize = 123;

/// The exec request as the query gives it.
#[derive(Debug, Clone)]
struct ExecRequest {
    alloc_id: String,
    task: String,
    command: Vec<String>,
    tty: bool,
    ws_handshake: bool,
    header_token: Option<String>,
}

/// The token the request's headers present (as the ACL extractor reads them).
fn header_token(headers: &HeaderMap) -> Option<String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    header("x-scheduler-token")
        .or_else(|| header("x-nomad-token"))
        .or_else(|| http_kit::bearer_token(headers).map(str::to_owned))
}

/// `GET /v1/client/allocation/:alloc_id/exec?task=&command=&tty=&ws_handshake=`.
pub(crate) async fn exec(
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
    query: QueryParams,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, Error> {
    let command = match query.get("command") {
        None | Some("") => Vec::new(),
        Some(raw) => serde_json::from_str::<Vec<String>>(raw).map_err(|err| {
            Error::BadRequest(format!("failed to marshal command into json: {err}"))
        })?,
    };
    let tty = match query.get("tty") {
        None | Some("") => false,
        Some(raw) => stdx::strconv::parse_bool(raw).ok_or_else(|| {
            Error::BadRequest(format!(
                "tty value is not a boolean: strconv.ParseBool: parsing {raw:?}: invalid syntax"
            ))
        })?,
    };
    let ws_handshake = match query.get("ws_handshake") {
        None | Some("") => false,
        Some(raw) => stdx::strconv::parse_bool(raw).ok_or_else(|| {
            Error::BadRequest(format!(
                "ws_handshake value is not a boolean: strconv.ParseBool: parsing {raw:?}: invalid syntax"
            ))
        })?,
    };
    let request = ExecRequest {
        alloc_id,
        task: query.get("task").unwrap_or("").to_owned(),
        command,
        tty,
        ws_handshake,
        header_token: header_token(&headers),
    };
    // A request that is no WebSocket upgrade gets axum's answer (400, 405 or 426).
    match upgrade {
        Ok(upgrade) => Ok(upgrade.on_upgrade(move |socket| session(state, request, socket))),
        Err(rejection) => Ok(rejection.into_response()),
    }
}

/// A refusal after the upgrade: its close code and reason.
#[derive(Debug)]
struct Refusal {
    code: u16,
    reason: String,
}

impl From<Error> for Refusal {
    fn from(error: Error) -> Refusal {
        let status = error.status();
        let reason = match &error {
            // A 500's details stay in the log, as for every other endpoint.
            Error::Internal(_) | Error::Storage(_) => {
                tracing::error!(%error, "exec session failed");
                "internal error".to_owned()
            }
            _ => error.to_string(),
        };
        Refusal {
            code: if status.is_server_error() { 1011 } else { 1008 },
            reason,
        }
    }
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let frame = CloseFrame {
        code,
        reason: reason[..end].into(),
    };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

async fn session(state: crate::State, request: ExecRequest, mut socket: WebSocket) {
    match open(&state, &request, &mut socket).await {
        Ok(tunnel) => relay(&mut socket, tunnel).await,
        Err(refusal) => close(&mut socket, refusal.code, &refusal.reason).await,
    }
}

/// Reads the `ws_handshake` auth frame: the token to use.
async fn handshake(
    request: &ExecRequest,
    socket: &mut WebSocket,
) -> Result<Option<String>, Refusal> {
    let bad = |reason: String| Refusal { code: 1008, reason };
    let message = match tokio::time::timeout(HANDSHAKE_TIMEOUT, socket.recv()).await {
        Ok(Some(Ok(message))) => message,
        Ok(_) => return Err(bad("the socket closed before the handshake".to_owned())),
        Err(_) => return Err(bad("no handshake frame in time".to_owned())),
    };
    let text = match &message {
        Message::Text(text) => text.as_str().to_owned(),
        Message::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        _ => return Err(bad("the first frame must be the handshake".to_owned())),
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|err| bad(format!("failed to read the handshake frame: {err}")))?;
    let version = value.get("version").cloned().unwrap_or(Value::Null);
    if version.as_i64() != Some(1) {
        let shown = match &version {
            Value::Null => "0".to_owned(),
            other => other.to_string(),
        };
        return Err(bad(format!("unexpected handshake value: {shown}")));
    }
    let token = value
        .get("auth_token")
        .and_then(Value::as_str)
        .filter(|token| !token.is_empty())
        .map(str::to_owned);
    match (&token, &request.header_token) {
        (Some(frame), Some(header)) if frame != header => Err(bad(
            "handshake auth token mismatched auth header token".to_owned(),
        )),
        (Some(_), _) => Ok(token),
        (None, header) => Ok(header.clone()),
    }
}

/// Checks everything and opens the call to the client: the tunnel, past its head.
async fn open(
    state: &crate::State,
    request: &ExecRequest,
    socket: &mut WebSocket,
) -> Result<crate::client_rpc::Tunnel, Refusal> {
    let token = if request.ws_handshake {
        handshake(request, socket).await?
    } else {
        request.header_token.clone()
    };
    let authz = acl::resolve(state, token.as_deref()).await?;
    if request.alloc_id.is_empty() {
        return Err(Error::BadRequest("must provide a valid alloc id".to_owned()).into());
    }
    let alloc = client_alloc(state, &request.alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::AllocExec)?;
    if request.task.is_empty() {
        return Err(Error::BadRequest("must provide task name".to_owned()).into());
    }
    if request.command.is_empty() {
        return Err(Error::BadRequest("command is not present".to_owned()).into());
    }
    let driver = {
        let snapshot = state.store().snapshot();
        let alloc = with_job(&snapshot, &alloc);
        alloc
            .job
            .as_deref()
            .and_then(|job| job.task_group(&alloc.task_group))
            .and_then(|group| group.tasks.iter().find(|task| task.name == request.task))
            .map(|task| task.driver.clone())
    };
    let Some(driver) = driver else {
        let message = format!("unknown task name {:?}", request.task);
        return Err(Error::BadRequest(message).into());
    };
    // A driver without filesystem isolation hands out the node itself.
    if driver == "raw_exec" {
        authz.allow_namespace(&alloc.namespace, Capability::AllocNodeExec)?;
    }
    let params = json!({
        "Task": request.task,
        "Command": request.command,
        "Tty": request.tty,
    });
    let tunnel = state
        .client_calls()
        .open(&alloc.node_id, "exec", &alloc.id, params)
        .await?;
    if let Some(error) = tunnel.refusal() {
        return Err(error.into());
    }
    Ok(tunnel)
}

/// Passes frames both ways until the command exits or either side goes away.
async fn relay(socket: &mut WebSocket, tunnel: crate::client_rpc::Tunnel) {
    let (reader, mut writer) = tokio::io::split(tunnel.io);
    let mut lines = BufReader::new(reader).lines();
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.tick().await;
    loop {
        tokio::select! {
            message = socket.recv() => {
                let text = match message {
                    Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
                    Some(Ok(Message::Binary(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    // The user closed the socket or it broke: ending the tunnel ends the command.
                    Some(Ok(Message::Close(_)) | Err(_)) | None => {
                        let _ = writer.shutdown().await;
                        return;
                    }
                };
                // Frames go on as compact JSON objects, one per line; heartbeats and anything
                // else stay here.
                let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if value.as_object().is_some_and(serde_json::Map::is_empty) {
                    continue;
                }
                let mut line = value.to_string();
                line.push('\n');
                if crate::client_rpc::write_all(&mut writer, line.as_bytes()).await.is_err() {
                    close(socket, 1011, "the client closed the exec session").await;
                    return;
                }
            }
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    let exited = serde_json::from_str::<Value>(&line)
                        .ok()
                        .and_then(|value| value.get("exited").and_then(Value::as_bool))
                        .unwrap_or(false);
                    if socket.send(Message::Text(line.into())).await.is_err() {
                        let _ = writer.shutdown().await;
                        return;
                    }
                    if exited {
                        close(socket, 1000, "").await;
                        return;
                    }
                }
                Ok(None) | Err(_) => {
                    close(socket, 1011, "the client ended the exec session without an exit code").await;
                    return;
                }
            },
            _ = heartbeat.tick() => {
                if socket.send(Message::Text("{}".into())).await.is_err() {
                    let _ = writer.shutdown().await;
                    return;
                }
            }
        }
    }
}
