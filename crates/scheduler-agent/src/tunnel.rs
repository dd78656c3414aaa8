//! The tunnel protocol of the server's calls to this client (the cairn-internal client
//! protocol's reverse channel): what a call is, and how its tunnel is answered. The server's
//! `client_rpc.rs` reads exactly this: the client first writes one head line,
//! `{"Status": code, "Error": text, "ContentType": type}`; after a 2xx head comes the call's
//! body: the HTTP body to pass through (fs, logs; the client closes the tunnel at its end), or
//! for exec newline-delimited JSON frames both ways (`exec/`).
//!
//! Where it sits: a leaf below `calls.rs` (the poll and dispatch) and every call's handler.
//!
//! Invariant: a refusal is one head and a closed tunnel; a head is flushed before any body.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::handles::ControlError;

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
