//! `sys/step-down` sent to a standby: forwarded to the active node, as Vault's standbys
//! forward requests (step-down included) to the active one, so the active node steps down.
//!
//! Where it sits: `seal.rs` serves `sys/step-down`; on a standby (leadership elected, another
//! server leads) it checks the caller's `sudo` there, then calls [`forward_to_active`], which
//! sends `PUT /v1/sys/step-down` with the caller's token to the active node's secrets URL from
//! the cluster membership, over HTTPS when that URL is `https://` (verified against this
//! server's secrets `tls { ca_file }`, `cluster::peer`). The active node's 204 becomes this
//! server's 204; its refusal (403, 503 sealed) becomes the same refusal here.
//!
//! Invariants:
//! - a forwarded request carries [`FORWARDED`] in its body; a server that receives one and does
//!   not lead answers 204 without forwarding again (the node the caller saw as active is no
//!   longer active), so a stale view of who leads can never loop a request.
//! - with no active node known, the answer is a 500 (Vault's standby answers an error when it
//!   cannot find the active node); nothing is retried, and nothing waits longer than
//!   [`TIMEOUT`].

use std::time::Duration;

use axum::body::Body;
use http::{Method, StatusCode, header};
use secrets_sdk::EngineError;

use crate::Error;

/// The body key marking a step-down one server forwarded to another.
pub(crate) const FORWARDED: &str = "cairn_forwarded";

/// How long the whole forwarded request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting to the active node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest error body read from the active node (for the log).
const MAX_BODY: usize = 64 * 1024;

fn internal(message: String) -> Error {
    tracing::warn!(error = %message, "sys/step-down: cannot forward to the active node");
    Error::Engine(EngineError::Internal(message))
}

/// Sends the caller's step-down (with `token`) to the active node and answers as it does.
pub(crate) async fn forward_to_active(
    cluster: &dyn cluster::Leadership,
    token: Option<&str>,
) -> Result<(), Error> {
    let Some(leader) = cluster.leader() else {
        return Err(internal(
            "local node not active but active cluster node not found".to_owned(),
        ));
    };
    let Some(base) = leader.url("secrets") else {
        return Err(internal(format!(
            "the active node {} serves no secrets listener",
            leader.id
        )));
    };
    let url = format!("{base}/v1/sys/step-down");
    let tls = cluster.peer_tls("secrets");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Body>(cluster::peer::connector(tls.as_ref(), CONNECT_TIMEOUT));
    let mut request = http::Request::builder()
        .method(Method::PUT)
        .uri(&url)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        request = request.header("X-Vault-Token", token);
    }
    let request = request
        .body(Body::from(format!("{{\"{FORWARDED}\":true}}")))
        .map_err(|err| internal(format!("building the request to {url}: {err}")))?;
    let response = match tokio::time::timeout(TIMEOUT, client.request(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => {
            return Err(internal(format!(
                "forwarding to {url}: {}{}",
                with_causes(&err),
                cluster::peer::hint("secrets", &url)
            )));
        }
        Err(_) => {
            return Err(internal(format!(
                "forwarding to {url}: no answer within {TIMEOUT:?}"
            )));
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = axum::body::to_bytes(Body::new(response.into_body()), MAX_BODY)
        .await
        .unwrap_or_default();
    match status {
        StatusCode::FORBIDDEN => Err(Error::PermissionDenied),
        StatusCode::SERVICE_UNAVAILABLE => Err(Error::Sealed),
        other => Err(internal(format!(
            "the active node at {url} answered {other}: {}",
            String::from_utf8_lossy(&body)
        ))),
    }
}

/// `err` and every error under it (hyper-util's own message is only `client error
/// (Connect)`; the cause is in its sources).
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
