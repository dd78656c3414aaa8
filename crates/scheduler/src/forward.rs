//! Forwarding to the leader: on a server that does not lead, every request that needs the
//! state writer or the leader's in-memory state is sent on to the leader over HTTP (HTTPS to a
//! leader whose scheduler listener uses TLS, verified against the `ca_file` of this server's
//! scheduler tls block: [`crate::Config::forward_tls`], `cluster::peer`) and the
//! leader's answer is passed back as it came (status, headers, body streamed, upgrades
//! spliced), as Nomad's followers forward RPCs.
//!
//! What is forwarded (when this server does not lead): every request that is not a GET or
//! HEAD (job register, deregister, plan, dispatch, evaluations, allocation stop, ACL and
//! namespace writes...), and the GETs served from what the leader holds in memory: the client
//! protocol (`/v1/internal/*`, so agents may talk to any server and their reverse channel
//! lives on the leader), the calls that travel over that channel (`/v1/client/*`: exec, fs,
//! logs, stats, gc, signal, pause), and the service and check registrations clients report
//! (`/v1/services`, `/v1/service/*`, `/v1/allocation/*/services|checks`). Every other read is
//! answered here from the followed snapshot or the store.
//!
//! Where it sits: a tower layer inside the header-alias layer of `routes.rs`, so the request
//! reaches the leader with the caller's headers (token included) and the leader's answer
//! already carries both header spellings.
//!
//! Invariants:
//! - On the leader the layer adds nothing (no allocation, no box) to a request.
//! - A forwarded request carries `X-Cairn-Forwarded`; a server receiving one never forwards it
//!   again (it waits briefly for its own term, else answers 500 `No cluster leader`), so a
//!   stale view of who leads can never loop a request.
//! - With no leader known, a request waits up to [`HOLD`] for one (Nomad's RPC hold timeout)
//!   and then answers 500 `No cluster leader`, as Nomad; a request the named leader cannot be
//!   connected for (never sent) is sent again to whoever leads next, within the same hold.
//! - After a forwarded write succeeds, the answer waits (at most [`HOLD`]) until this
//!   server's snapshot holds the leader's last committed index, so a read sent here after a
//!   write sent here sees it.
//! - Reads answered here on a follower carry the truth in `X-Nomad-KnownLeader` (a leader is
//!   known) and `X-Nomad-LastContact` (ms since the follower last knew it was current).

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, Either};
use http::{HeaderValue, Method, StatusCode, Uri, header};
use http_kit::query::QueryHeaders;
use hyper_util::rt::TokioIo;
use tower::{Layer, Service};

use crate::meta::SchedulerHeaders;
use crate::{Error, State};

/// Marks a request one server forwarded to another.
pub(crate) const FORWARDED: &str = "x-cairn-forwarded";

/// How long a request waits for a leader to be known (or for this server's term to start),
/// and how long a forwarded write's answer waits for the follower to catch up.
pub(crate) const HOLD: Duration = Duration::from_secs(5);

/// How long connecting to the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The HTTP(S) client requests are forwarded with: it keeps connections to the leader open
/// between requests (and retries a request a pooled connection closed before sending it).
type Client = hyper_util::client::legacy::Client<cluster::peer::PeerConnector, Body>;

/// The layer `routes.rs` wraps the routes in.
#[derive(Clone)]
pub(crate) struct ForwardLayer {
    state: State,
    client: Client,
}

impl std::fmt::Debug for ForwardLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardLayer").finish_non_exhaustive()
    }
}

impl ForwardLayer {
    pub(crate) fn new(state: State) -> ForwardLayer {
        let connector =
            cluster::peer::connector(state.config().forward_tls.as_ref(), CONNECT_TIMEOUT);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector);
        ForwardLayer { state, client }
    }
}

impl<S> Layer<S> for ForwardLayer {
    type Service = Forward<S>;

    fn layer(&self, inner: S) -> Forward<S> {
        Forward {
            inner,
            state: self.state.clone(),
            client: self.client.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Forward<S> {
    inner: S,
    state: State,
    client: Client,
}

impl<S> std::fmt::Debug for Forward<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward").finish_non_exhaustive()
    }
}

/// Whether a request must be served by the leader.
fn needs_leader(method: &Method, path: &str) -> bool {
    if method != Method::GET && method != Method::HEAD {
        return true;
    }
    if path.starts_with("/v1/internal/")
        || path.starts_with("/v1/client/")
        || path == "/v1/services"
        || path.starts_with("/v1/service/")
    {
        return true;
    }
    path.strip_prefix("/v1/allocation/")
        .is_some_and(|rest| rest.ends_with("/services") || rest.ends_with("/checks"))
}

impl<S> Service<Request> for Forward<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let clustered = self.state.config().cluster.is_some();
        if !clustered || self.state.role().leading() {
            return Either::Left(self.inner.call(request));
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        let client = self.client.clone();
        if !needs_leader(request.method(), request.uri().path()) {
            // Answered here, from the followed snapshot: say how current it is.
            let answer = inner.call(request);
            return Either::Right(Box::pin(async move {
                let mut response = answer.await?;
                stamp_leader_headers(&state, &mut response);
                Ok(response)
            }));
        }
        Either::Right(Box::pin(async move {
            Ok(to_leader(&state, &client, &mut inner, request).await)
        }))
    }
}

/// Sets the known-leader and last-contact headers a local read already carries.
fn stamp_leader_headers(state: &State, response: &mut Response) {
    let headers = response.headers_mut();
    if headers.contains_key(<SchedulerHeaders as QueryHeaders>::KNOWN_LEADER) {
        let known = state
            .config()
            .cluster
            .as_ref()
            .is_some_and(|cluster| (cluster.leader_url)().is_some());
        headers.insert(
            <SchedulerHeaders as QueryHeaders>::KNOWN_LEADER,
            HeaderValue::from_static(if known { "true" } else { "false" }),
        );
    }
    if headers.contains_key(<SchedulerHeaders as QueryHeaders>::LAST_CONTACT) {
        headers.insert(
            <SchedulerHeaders as QueryHeaders>::LAST_CONTACT,
            HeaderValue::from(state.role().last_contact_ms()),
        );
    }
}

/// Sends `request` to the leader (or serves it here if this server starts leading while it
/// waits for one). A request without an upgrade is read whole first, so that it can be sent
/// again when the leader named cannot be reached (it died and the next one is not known yet):
/// such a request waits, up to [`HOLD`], for a leader that answers.
async fn to_leader<S>(state: &State, client: &Client, inner: &mut S, request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let role = state.role();
    if request.headers().contains_key(FORWARDED) {
        // Another server thinks this one leads: wait for the term that is surely starting.
        if role.wait_leading(HOLD).await {
            return serve_here(inner, request).await;
        }
        return Error::NoLeader.into_response();
    }
    let Some(cluster) = state.config().cluster.as_ref() else {
        return serve_here(inner, request).await;
    };
    let write = request.method() != Method::GET && request.method() != Method::HEAD;
    let deadline = tokio::time::Instant::now() + HOLD;
    if request.headers().contains_key(header::UPGRADE) {
        // An upgrade (exec) is sent once: its connection cannot be replayed.
        let leader = loop {
            if role.leading() {
                return serve_here(inner, request).await;
            }
            if let Some(url) = (cluster.leader_url)() {
                break url;
            }
            if tokio::time::Instant::now() >= deadline {
                return Error::NoLeader.into_response();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        return match send(client, &leader, request).await {
            Ok(response) => response,
            Err(failed) => forward_failed(&leader, failed),
        };
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(err) => {
            return Error::BadRequest(format!("reading the request body: {err}")).into_response();
        }
    };
    loop {
        if role.leading() {
            return serve_here(inner, Request::from_parts(parts, Body::from(body))).await;
        }
        let Some(leader) = (cluster.leader_url)() else {
            if tokio::time::Instant::now() >= deadline {
                return Error::NoLeader.into_response();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let attempt = Request::from_parts(copy_head(&parts), Body::from(body.clone()));
        match send(client, &leader, attempt).await {
            Ok(response) => {
                if write && response.status().is_success() {
                    state.store().wait_caught_up(HOLD).await;
                }
                return response;
            }
            Err(failed) if failed.unreached && tokio::time::Instant::now() < deadline => {
                tracing::debug!(leader = %leader, error = %failed.message, "the leader is unreachable; waiting for one");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(failed) => return forward_failed(&leader, failed),
        }
    }
}

/// A request's method, URI, version and headers (extensions stay with the original).
fn copy_head(parts: &http::request::Parts) -> http::request::Parts {
    let mut head = http::Request::new(());
    *head.method_mut() = parts.method.clone();
    *head.uri_mut() = parts.uri.clone();
    *head.version_mut() = parts.version;
    *head.headers_mut() = parts.headers.clone();
    head.into_parts().0
}

fn forward_failed(leader: &str, failed: Failed) -> Response {
    let message = format!(
        "{}{}",
        failed.message,
        cluster::peer::hint("scheduler", leader)
    );
    tracing::warn!(leader = %leader, error = %message, "cannot forward to the leader");
    Error::Forward(message).into_response()
}

async fn serve_here<S>(inner: &mut S, request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Why a request could not be forwarded.
#[derive(Debug)]
struct Failed {
    /// The leader could not be connected to: the request was never sent (safe to retry).
    unreached: bool,
    message: String,
}

impl Failed {
    fn other(message: String) -> Failed {
        Failed {
            unreached: false,
            message,
        }
    }
}

/// Sends one request to `leader` (a base URL) and returns the answer with its body
/// streaming; a `101 Switching Protocols` answer splices the two upgraded connections
/// together.
async fn send(client: &Client, leader: &str, mut request: Request) -> Result<Response, Failed> {
    let base: Uri = leader
        .parse()
        .map_err(|err| Failed::other(format!("bad leader URL {leader:?}: {err}")))?;
    let scheme = match base.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        _ => {
            return Err(Failed::other(format!(
                "forwarding to {leader}: not an http:// or https:// URL"
            )));
        }
    };
    let authority = base
        .authority()
        .ok_or_else(|| Failed::other(format!("bad leader URL {leader:?}: no host")))?
        .clone();
    let upgrade = request
        .headers()
        .contains_key(header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    parts.uri = format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|err| Failed::other(format!("forwarding {path}: {err}")))?;
    parts.version = http::Version::HTTP_11;
    parts.extensions = http::Extensions::new();
    if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
        parts.headers.insert(header::HOST, host);
    }
    parts
        .headers
        .insert(FORWARDED, HeaderValue::from_static("1"));
    if upgrade.is_none() {
        parts.headers.remove(header::CONNECTION);
        parts.headers.remove("keep-alive");
    }
    let mut response = client
        .request(http::Request::from_parts(parts, body))
        .await
        .map_err(|err| Failed {
            unreached: err.is_connect(),
            message: format!(
                "forwarding to {scheme}://{authority}: {}",
                with_causes(&err)
            ),
        })?;

    if response.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(caller) = upgrade
    {
        let leader_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            let (caller, leader_side) = tokio::join!(caller, leader_side);
            match (caller, leader_side) {
                (Ok(caller), Ok(leader_side)) => {
                    let mut caller = TokioIo::new(caller);
                    let mut leader_side = TokioIo::new(leader_side);
                    let _ = tokio::io::copy_bidirectional(&mut caller, &mut leader_side).await;
                }
                (caller, leader_side) => tracing::debug!(
                    caller_ok = caller.is_ok(),
                    leader_ok = leader_side.is_ok(),
                    "a forwarded upgrade did not complete"
                ),
            }
        });
    }
    let (mut parts, body) = response.into_parts();
    if parts.status != StatusCode::SWITCHING_PROTOCOLS {
        parts.headers.remove(header::CONNECTION);
        parts.headers.remove("keep-alive");
        parts.headers.remove(header::TRANSFER_ENCODING);
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// `err` and every error under it (hyper-util's own message is only `client error
/// (Connect)`; the cause, such as an unknown certificate issuer, is in its sources).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_leader_held_reads_need_the_leader_and_snapshot_reads_do_not() {
        for (method, path) in [
            (Method::POST, "/v1/jobs"),
            (Method::PUT, "/v1/job/web"),
            (Method::DELETE, "/v1/job/web"),
            (Method::POST, "/v1/acl/policy/x"),
            (Method::GET, "/v1/internal/node/n1/allocations"),
            (Method::GET, "/v1/client/fs/logs/a1"),
            (Method::GET, "/v1/client/allocation/a1/exec"),
            (Method::GET, "/v1/services"),
            (Method::GET, "/v1/service/web"),
            (Method::GET, "/v1/allocation/a1/services"),
            (Method::GET, "/v1/allocation/a1/checks"),
        ] {
            assert!(needs_leader(&method, path), "{method} {path}");
        }
        for (method, path) in [
            (Method::GET, "/v1/jobs"),
            (Method::GET, "/v1/job/web/allocations"),
            (Method::GET, "/v1/allocation/a1"),
            (Method::GET, "/v1/nodes"),
            (Method::GET, "/v1/status/leader"),
            (Method::GET, "/v1/acl/policies"),
            (Method::HEAD, "/v1/jobs"),
        ] {
            assert!(!needs_leader(&method, path), "{method} {path}");
        }
    }
}
