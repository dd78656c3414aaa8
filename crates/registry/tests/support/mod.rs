//! Shared helpers for the registry's API tests: a [`TestRegistry`] over `MemStorage` and a
//! `ManualClock`, driving `registry::router` in-process (no socket), with small request helpers.
//!
//! Each test binary compiles this module separately and uses only part of it.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http::{HeaderMap, Method, Request, StatusCode};
use registry::{Config, ManualClock, State};
use storage::{MemStorage, Storage};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The node name every test registry registers itself as.
pub(crate) const NODE: &str = "test-node";

/// Where the manual clock starts (Unix ms; any fixed value works).
pub(crate) const START_MS: i64 = 1_700_000_000_000;

/// A registry over in-memory storage and a manual clock.
pub(crate) struct TestRegistry {
    pub(crate) state: State,
    pub(crate) storage: Arc<MemStorage>,
    pub(crate) clock: ManualClock,
    pub(crate) config: Config,
    router: Router,
    tasks: Option<cluster::Runner>,
}

/// The test configuration: node [`NODE`], ACLs off, Consul's defaults otherwise.
pub(crate) fn test_config() -> Config {
    let mut config = Config::new(SocketAddr::from(([127, 0, 0, 1], 8500)));
    config.node_name = NODE.to_owned();
    config
}

impl TestRegistry {
    /// A fresh registry with [`test_config`]; background tasks are not running.
    pub(crate) async fn new() -> TestRegistry {
        TestRegistry::with_config(test_config()).await
    }

    pub(crate) async fn with_config(config: Config) -> TestRegistry {
        TestRegistry::open(
            Arc::new(MemStorage::new()),
            ManualClock::new(START_MS),
            config,
        )
        .await
    }

    /// Opens a registry over existing storage and clock (a restart).
    pub(crate) async fn open(
        storage: Arc<MemStorage>,
        clock: ManualClock,
        config: Config,
    ) -> TestRegistry {
        let state = State::open(
            Arc::clone(&storage) as Arc<dyn Storage>,
            config.clone(),
            Arc::new(clock.clone()),
        )
        .await
        .expect("open registry");
        let router = registry::router(state.clone());
        TestRegistry {
            state,
            storage,
            clock,
            config,
            router,
            tasks: None,
        }
    }

    /// Starts the background loops (session TTL reaper, check runners) through a runner that
    /// always leads, as `cairn` does with the embedded store.
    pub(crate) fn start_tasks(&mut self) {
        let runner = cluster::Runner::embedded(CancellationToken::new());
        registry::start_tasks(&self.state, &runner);
        self.tasks = Some(runner);
    }

    /// Stops the background loops and waits for them (their final checkpoints included).
    pub(crate) async fn stop_tasks(&mut self) {
        if let Some(runner) = self.tasks.take() {
            runner.shutdown_and_wait().await;
        }
    }

    /// Moves the manual clock forward.
    pub(crate) fn advance(&self, duration: Duration) {
        self.clock.advance_ms(duration.as_millis() as u64);
    }

    pub(crate) async fn request(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> TestResponse {
        let mut request = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.into()).expect("request");
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        TestResponse {
            status,
            headers,
            body,
        }
    }

    pub(crate) async fn get(&self, uri: &str) -> TestResponse {
        self.request(Method::GET, uri, &[], Body::empty()).await
    }

    pub(crate) async fn put(&self, uri: &str, body: impl Into<Body>) -> TestResponse {
        self.request(Method::PUT, uri, &[], body).await
    }

    pub(crate) async fn delete(&self, uri: &str) -> TestResponse {
        self.request(Method::DELETE, uri, &[], Body::empty()).await
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if let Some(runner) = self.tasks.take() {
            runner.shutdown_token().cancel();
        }
    }
}

/// A buffered response.
#[derive(Debug)]
pub(crate) struct TestResponse {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl TestResponse {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {:?}", self.text()))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `X-Registry-Index` (and checks that `X-Consul-Index` carries the same).
    #[track_caller]
    pub(crate) fn index(&self) -> u64 {
        let index = self.header("x-registry-index").expect("X-Registry-Index");
        assert_eq!(
            self.header("x-consul-index"),
            Some(index),
            "X-Consul-Index alias"
        );
        index.parse().expect("numeric index")
    }

    #[track_caller]
    pub(crate) fn assert_status(&self, expected: u16) -> &TestResponse {
        assert_eq!(
            self.status.as_u16(),
            expected,
            "unexpected status; body: {:?}",
            self.text()
        );
        self
    }
}
