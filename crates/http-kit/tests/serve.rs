//! End-to-end tests of `serve` and `serve_tls` on real sockets (127.0.0.1, port 0) with a
//! reqwest client: graceful drain, refused connections after shutdown, TLS with a self-signed
//! certificate, request ids, peer addresses, and service-shaped errors from the extractors.
//!
//! Invariant: every server started here is cancelled when its `TestServer` drops, and no test
//! waits on a sleep longer than the 300 ms slow handler.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use http_kit::{ApiError, ApiJson, HttpOptions, Rejection, Shutdown};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const SLOW_HANDLER: Duration = Duration::from_millis(300);
const BODY_LIMIT: usize = 1024;

/// A Vault-shaped service error: `{"errors":[...]}`.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Rejection(Rejection),
}

impl ApiError for Error {
    fn status(&self) -> StatusCode {
        match self {
            Error::Rejection(rejection) => rejection.status(),
        }
    }

    fn render(&self, status: StatusCode, public_message: &str) -> Response {
        http_kit::shape::errors_json(status, &[public_message])
    }

    fn from_rejection(rejection: Rejection) -> Self {
        Error::Rejection(rejection)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        http_kit::into_response(self)
    }
}

type Json<T> = ApiJson<T, Error>;

#[derive(Debug, Deserialize, Serialize)]
struct Payload {
    name: String,
}

/// The test service. `slow_started` is notified when `/slow` begins.
fn app(slow_started: Arc<Notify>) -> Router {
    let router = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route(
            "/slow",
            get(move || async move {
                slow_started.notify_one();
                tokio::time::sleep(SLOW_HANDLER).await;
                "done"
            }),
        )
        .route(
            "/long-poll",
            get(|Shutdown(shutdown): Shutdown| async move {
                tokio::select! {
                    () = shutdown.cancelled() => "shutdown",
                    () = tokio::time::sleep(Duration::from_secs(30)) => "timeout",
                }
            }),
        )
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
        .route(
            "/json",
            post(|Json { value, .. }: Json<Payload>| async move { Json::new(value) }),
        );
    http_kit::layers(
        router,
        &HttpOptions {
            body_limit: BODY_LIMIT,
            ..HttpOptions::default()
        },
    )
}

struct TestServer {
    address: SocketAddr,
    scheme: &'static str,
    shutdown: CancellationToken,
    handle: Option<JoinHandle<io::Result<()>>>,
}

impl TestServer {
    async fn start(router: Router) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(http_kit::serve(listener, router, shutdown.clone()));
        TestServer {
            address,
            scheme: "http",
            shutdown,
            handle: Some(handle),
        }
    }

    async fn start_tls(router: Router, tls: Arc<rustls::ServerConfig>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(http_kit::serve_tls(listener, tls, router, shutdown.clone()));
        TestServer {
            address,
            scheme: "https",
            shutdown,
            handle: Some(handle),
        }
    }

    fn url(&self, path: &str) -> String {
        // `localhost` so that the TLS certificate's name matches.
        format!("{}://localhost:{}{path}", self.scheme, self.address.port())
    }

    /// Cancels the server and waits for `serve` to return; how long that took.
    async fn stop(&mut self) -> Duration {
        let started = Instant::now();
        self.shutdown.cancel();
        let handle = self.handle.take().expect("stopped twice");
        tokio::time::timeout(Duration::from_secs(5), handle)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        started.elapsed()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_request_and_refuses_new_connections() {
    let slow_started = Arc::new(Notify::new());
    let mut server = TestServer::start(app(Arc::clone(&slow_started))).await;
    let in_flight = tokio::spawn(client().get(server.url("/slow")).send());
    slow_started.notified().await;

    server.shutdown.cancel();
    let refused_at = {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match TcpStream::connect(server.address).await {
                Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => break Instant::now(),
                // Accepted into the backlog just before the listener closed (then maybe reset).
                _ => {
                    assert!(Instant::now() < deadline, "still accepting after shutdown");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    };

    let response = in_flight.await.unwrap().unwrap();
    let finished_at = Instant::now();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "done");
    assert!(
        refused_at < finished_at,
        "new connections must be refused while draining"
    );
    let stop_took = server.stop().await;
    assert!(stop_took < Duration::from_secs(2), "{stop_took:?}");
}

#[tokio::test]
async fn shutdown_token_ends_long_poll_and_serve_returns_promptly() {
    let mut server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let long_poll = tokio::spawn(client().get(server.url("/long-poll")).send());
    // Give the request time to reach the handler.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stop_took = server.stop().await;
    let response = long_poll.await.unwrap().unwrap();
    assert_eq!(response.text().await.unwrap(), "shutdown");
    assert!(stop_took < Duration::from_secs(2), "{stop_took:?}");
}

#[tokio::test]
async fn idle_keep_alive_connection_does_not_hold_shutdown() {
    let mut server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let client = client();
    let response = client.get(server.url("/hello")).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "hello");
    // The client keeps the connection in its pool; the server must still stop at once.
    let stop_took = server.stop().await;
    assert!(stop_took < Duration::from_secs(2), "{stop_took:?}");
}

#[tokio::test]
async fn request_id_is_echoed_over_the_wire() {
    let server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let response = client()
        .get(server.url("/hello"))
        .header("X-Request-Id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "req-42");

    let response = client().get(server.url("/hello")).send().await.unwrap();
    let generated = response.headers()["x-request-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(generated).is_ok(), "{generated}");
}

#[tokio::test]
async fn connect_info_carries_the_peer_address() {
    let server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let response = client().get(server.url("/peer")).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "127.0.0.1");
}

#[tokio::test]
async fn malformed_json_gets_service_shaped_400() {
    let server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let response = client()
        .post(server.url("/json"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"errors":["failed to parse JSON input: key must be a string at line 1 column 2"]}"#
    );
}

#[tokio::test]
async fn oversized_body_gets_service_shaped_413() {
    let server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let body = format!(r#"{{"name":"{}"}}"#, "x".repeat(BODY_LIMIT));
    let response = client()
        .post(server.url("/json"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"errors":["request body too large: the limit is 1024 bytes"]}"#
    );
}

#[tokio::test]
async fn valid_json_round_trips() {
    let server = TestServer::start(app(Arc::new(Notify::new()))).await;
    let response = client()
        .post(server.url("/json"))
        .body(r#"{"name":"web"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.text().await.unwrap(), r#"{"name":"web"}"#);
}

/// A self-signed certificate for `localhost`, written as PEM files; the loaded server config
/// and the certificate PEM for the client to trust.
fn self_signed_tls(dir: &std::path::Path) -> (Arc<rustls::ServerConfig>, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (
        http_kit::load_tls_config(&cert_path, &key_path).unwrap(),
        cert.pem(),
    )
}

fn tls_client(cert_pem: &str) -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap();
    reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([cert])
        .build()
        .unwrap()
}

#[tokio::test]
async fn tls_serving_works_with_a_self_signed_certificate() {
    let temp = tempfile::tempdir().unwrap();
    let (tls, cert_pem) = self_signed_tls(temp.path());
    let mut server = TestServer::start_tls(app(Arc::new(Notify::new())), tls).await;
    let response = tls_client(&cert_pem)
        .get(server.url("/hello"))
        .header("X-Request-Id", "tls-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-request-id"], "tls-1");
    assert_eq!(response.text().await.unwrap(), "hello");
    let stop_took = server.stop().await;
    assert!(stop_took < Duration::from_secs(2), "{stop_took:?}");
}

#[tokio::test]
async fn tls_failed_handshake_does_not_affect_other_connections() {
    let temp = tempfile::tempdir().unwrap();
    let (tls, cert_pem) = self_signed_tls(temp.path());
    let server = TestServer::start_tls(app(Arc::new(Notify::new())), tls).await;

    // Plain HTTP to the TLS port, and a client that does not trust the certificate: both fail.
    let plain_url = server.url("/hello").replacen("https", "http", 1);
    assert!(client().get(plain_url).send().await.is_err());
    assert!(client().get(server.url("/hello")).send().await.is_err());
    // A stalled client that never sends a ClientHello does not block the accept loop.
    let _stalled = TcpStream::connect(server.address).await.unwrap();

    let response = tls_client(&cert_pem)
        .get(server.url("/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "hello");
}
