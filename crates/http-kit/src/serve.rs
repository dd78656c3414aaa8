//! The accept loop every service runs: [`serve`] for plain HTTP, [`serve_tls`] for HTTPS.
//!
//! The caller binds the `TcpListener` (so tests pass port 0) and owns the shutdown token. Each
//! accepted connection gets its own task, which does the TLS handshake (never the accept loop,
//! so one slow client cannot stall accepting), then serves HTTP/1.1 with keep-alive and upgrades
//! through hyper-util, handing every request to the router with two extensions added:
//! [`Shutdown`] (so long polls can end early) and `ConnectInfo<SocketAddr>` (the peer). Each
//! request runs through `keep_alive::respond` (what the handler left of the body is discarded
//! or the answer says `Connection: close`) on a `keep_alive::Lingering` socket (such a close
//! shuts the write side first and lingers, so the client reads the answer, not a reset).
//!
//! Invariants:
//! - An accept error (EMFILE, ENFILE, ENOBUFS, ...) is logged and retried after a short pause;
//!   it never ends the loop.
//! - On shutdown the listener is closed at once (new connections are refused), in-flight
//!   requests finish, idle and finished connections close gracefully, and after
//!   [`DRAIN_TIMEOUT`] whatever is left is dropped. `serve` returns only after that.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts};
use http::Request;
use http::request::Parts;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::keep_alive::{self, Linger, Lingering};

/// How long shutdown waits for in-flight requests before dropping the remaining connections.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the accept loop pauses after an accept error such as EMFILE before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// How long a client has to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send a request's headers once it starts one.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's shutdown token, in every request's extensions.
///
/// Long polls select on `shutdown.0.cancelled()` so that a draining server answers them at once
/// instead of holding the drain for their whole wait. As an extractor it never fails: outside
/// [`serve`] (for example in `Router::oneshot` tests) it yields a token that is never cancelled.
#[derive(Debug, Clone)]
pub struct Shutdown(pub CancellationToken);

impl<S: Send + Sync> FromRequestParts<S> for Shutdown {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let shutdown = parts.extensions.get::<Shutdown>().cloned();
        Ok(shutdown.unwrap_or_else(|| Shutdown(CancellationToken::new())))
    }
}

/// Serves `router` over plain HTTP on `listener` until `shutdown` is cancelled, then drains.
///
/// Returns once every connection has closed or [`DRAIN_TIMEOUT`] has passed. The only error is
/// failing to read the listener's local address at start.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    run(listener, None, router, shutdown).await
}

/// Serves `router` over HTTPS on `listener` until `shutdown` is cancelled, then drains.
///
/// `tls` usually comes from [`load_tls_config`](crate::load_tls_config). Handshakes run in the
/// per-connection tasks and fail (logged at debug) without affecting other connections.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    run(listener, Some(TlsAcceptor::from(tls)), router, shutdown).await
}

async fn run(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let address = listener.local_addr()?;
    info!(message = "Listening.", %address, tls = tls.is_some());

    let builder = Arc::new(connection_builder());
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            Some(finished) = connections.join_next(), if !connections.is_empty() => {
                log_connection_task_failure(finished);
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    pause_after_accept_error(&err, &shutdown).await;
                    continue;
                }
            },
        };
        // Small request/response exchanges should not wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_connection(
            stream,
            peer,
            tls.clone(),
            Arc::clone(&builder),
            router.clone(),
            shutdown.clone(),
            graceful.watcher(),
        ));
    }

    drop(listener);
    info!(message = "Shutting down; draining connections.", %address, connections = connections.len());
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        graceful.shutdown().await;
        while let Some(finished) = connections.join_next().await {
            log_connection_task_failure(finished);
        }
    })
    .await;
    if drained.is_err() {
        warn!(
            message = "Drain timeout reached; dropping remaining connections.",
            %address,
            connections = connections.len(),
            timeout_secs = DRAIN_TIMEOUT.as_secs(),
        );
        connections.shutdown().await;
    }
    info!(message = "Stopped.", %address);
    Ok(())
}

/// The HTTP connection settings: HTTP/1.1 with keep-alive (and h2c prior knowledge, which the
/// auto builder detects for free), upgrades allowed, a deadline on reading request headers.
fn connection_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// One connection, from handshake to close. Runs in its own task.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    router: Router,
    shutdown: CancellationToken,
    watcher: Watcher,
) {
    let Some(acceptor) = tls else {
        serve_http(stream, peer, &builder, router, shutdown, watcher).await;
        return;
    };
    let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream));
    let stream = tokio::select! {
        () = shutdown.cancelled() => return,
        handshake = handshake => match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                debug!(message = "TLS handshake failed.", %peer, error = %err);
                return;
            }
            Err(_elapsed) => {
                debug!(message = "TLS handshake timed out.", %peer);
                return;
            }
        },
    };
    serve_http(stream, peer, &builder, router, shutdown, watcher).await;
}

/// Serves HTTP on one connection's socket. Every request goes through
/// [`keep_alive::respond`], which settles what its handler left of the body; the socket is
/// [`Lingering`], so a connection closed over an unread body closes gracefully.
async fn serve_http<S>(
    stream: S,
    peer: SocketAddr,
    builder: &auto::Builder<TokioExecutor>,
    router: Router,
    shutdown: CancellationToken,
    watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let linger = Linger::default();
    let io = TokioIo::new(Lingering::new(stream, linger.clone()));
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(Shutdown(shutdown.clone()));
        // Router is always ready and cheap to clone (an Arc inside).
        let router = router.clone();
        let linger = linger.clone();
        async move { Ok::<_, Infallible>(keep_alive::respond(router, request, &linger).await) }
    });
    let connection = builder.serve_connection_with_upgrades(io, service);
    if let Err(err) = watcher.watch(connection).await {
        // Client resets, malformed requests and header timeouts end up here; none is ours.
        debug!(message = "Connection closed with an error.", %peer, error = %err);
    }
}

async fn pause_after_accept_error(err: &io::Error, shutdown: &CancellationToken) {
    // A peer that gave up before we accepted it is not our problem and needs no pause.
    if matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    ) {
        debug!(message = "Accept failed; peer went away.", error = %err);
        return;
    }
    error!(
        message = "Accept failed; retrying after a pause.",
        error = %err,
        pause_ms = ACCEPT_ERROR_PAUSE.as_millis() as u64,
    );
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
    }
}

fn log_connection_task_failure(finished: Result<(), tokio::task::JoinError>) {
    if let Err(err) = finished
        && err.is_panic()
    {
        error!(message = "Connection task panicked.", error = %err);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_extractor_defaults_to_a_live_token_outside_serve() {
        let (mut parts, ()) = Request::new(()).into_parts();
        let Shutdown(token) = Shutdown::from_request_parts(&mut parts, &()).await.unwrap();
        assert!(!token.is_cancelled());
    }

    #[tokio::test]
    async fn shutdown_extractor_returns_the_server_token() {
        let token = CancellationToken::new();
        let mut request = Request::new(());
        request.extensions_mut().insert(Shutdown(token.clone()));
        let (mut parts, ()) = request.into_parts();
        let Shutdown(extracted) = Shutdown::from_request_parts(&mut parts, &()).await.unwrap();
        token.cancel();
        assert!(extracted.is_cancelled());
    }

    #[tokio::test]
    async fn accept_error_pause_ends_early_on_shutdown() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let started = std::time::Instant::now();
        let err = io::Error::from_raw_os_error(24); // EMFILE
        pause_after_accept_error(&err, &shutdown).await;
        assert!(started.elapsed() < ACCEPT_ERROR_PAUSE);
    }
}
