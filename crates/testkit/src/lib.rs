//! What every service's tests repeat, once: calling a router in-process, serving one on port 0,
//! temporary stores, and clock control.
//!
//! - [`call`] sends one request through an `axum::Router` (no socket) and collects a
//!   [`Response`]; [`request`] and [`json_request`] build requests.
//! - [`TestServer`] serves a router on `127.0.0.1:0` through `http_kit::serve`, for tests that
//!   need a real socket (long polls, upstream clients, HTTP checks).
//! - [`RawConnection`] speaks raw HTTP/1.1 on one socket, for tests about the connection
//!   itself (keep-alive, `Connection: close`); [`keep_alive`] is the keep-alive scenario for
//!   rejected request bodies every service runs with its own requests.
//! - [`mem_storage`] and [`TempStore`] (redb in a temporary directory, reopenable to test
//!   restarts) are the stores services run over in tests.
//! - [`ManualClock`] (from `stdx`) moves time without sleeping.
//!
//! Where it sits: a dev-dependency of service crates only; never a dependency of product code.
//! It knows no service: service-specific helpers (tokens, fixtures, body shapes) stay in each
//! service's `tests/support`.
//!
//! Invariants: nothing here sleeps; every server and store it starts is stopped or removed when
//! its handle drops.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use storage::{MemStorage, Storage};
use storage_redb::RedbStorage;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

pub use http1::{READ_TIMEOUT, RawConnection, RawResponse};
pub use stdx::clock::{Clock, ManualClock, SharedClock};

mod http1;
pub mod keep_alive;

/// A collected response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// The body as JSON: `Value::Null` when empty, a `Value::String` of the text when it is
    /// not JSON.
    pub fn json(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|_| Value::String(self.text()))
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value as text, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// A request builder for `method` and `path` (`"/v1/kv/foo?recurse"`).
pub fn request(method: &str, path: &str) -> http::request::Builder {
    Request::builder().method(method).uri(path)
}

/// A request with a JSON body and `Content-Type: application/json`.
pub fn json_request(method: &str, path: &str, body: &Value) -> Request<Body> {
    request(method, path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("a valid request")
}

/// Sends `request` through `router` in-process and collects the response.
pub async fn call(router: &Router, request: Request<Body>) -> Response {
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("a router is infallible");
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .expect("an in-process body can be read")
        .to_bytes();
    Response {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A router served on `127.0.0.1:0`; stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Binds a free port on loopback and serves `router` there (with http-kit's layers).
    pub async fn start(router: Router) -> TestServer {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("a bound address");
        let router = http_kit::layers(router, &http_kit::HttpOptions::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(http_kit::serve(listener, router, shutdown.clone()));
        TestServer {
            addr,
            shutdown,
            task: Some(task),
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops serving and waits for in-flight requests to drain.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// An empty in-memory store.
pub fn mem_storage() -> Arc<MemStorage> {
    Arc::new(MemStorage::new())
}

/// A redb store in a temporary directory, removed when dropped. Reopen it to test restarts.
#[derive(Debug)]
pub struct TempStore {
    dir: tempfile::TempDir,
    storage: Arc<RedbStorage>,
}

impl TempStore {
    /// A fresh store.
    pub fn new() -> TempStore {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let storage = open(dir.path());
        TempStore { dir, storage }
    }

    /// The store, as services take it.
    pub fn storage(&self) -> Arc<dyn Storage> {
        self.storage.clone()
    }

    /// The directory holding the store's file (for services that keep files beside it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Closes the store and opens it again from disk (what a restart sees). Callers must have
    /// dropped every other handle to the old store.
    pub async fn reopen(&mut self) {
        self.storage.close().await.expect("close the store");
        self.storage = open(self.dir.path());
    }
}

impl Default for TempStore {
    fn default() -> TempStore {
        TempStore::new()
    }
}

fn open(dir: &Path) -> Arc<RedbStorage> {
    Arc::new(RedbStorage::open(&dir.join("store.redb")).expect("open a redb store"))
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use serde_json::json;
    use storage::StorageExt;

    use super::*;

    fn echo_router() -> Router {
        Router::new()
            .route("/json", get(|| async { axum::Json(json!({"ok": true})) }))
            .route("/text", get(|| async { "plain" }))
    }

    #[tokio::test]
    async fn call_collects_status_headers_and_body() {
        let router = echo_router();
        let answer = call(
            &router,
            request("GET", "/json").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.json(), json!({"ok": true}));
        assert_eq!(answer.header("content-type"), Some("application/json"));
        let text = call(
            &router,
            request("GET", "/text").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(text.json(), Value::String("plain".into()));
        let missing = call(
            &router,
            request("GET", "/nope").body(Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert_eq!(missing.json(), Value::Null);
    }

    #[tokio::test]
    async fn a_test_server_answers_on_a_free_port_until_stopped() {
        let server = TestServer::start(echo_router()).await;
        assert_ne!(server.addr().port(), 0);
        let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET /text HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("plain"), "{answer}");
        let addr = server.addr();
        server.stop().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn a_temp_store_keeps_writes_across_a_reopen() {
        let mut store = TempStore::new();
        store.storage().put(b"k", b"v").await.unwrap();
        store.reopen().await;
        let got = store.storage().get(b"k").await.unwrap();
        assert_eq!(got.map(|kv| kv.value), Some(b"v".to_vec()));
    }
}
