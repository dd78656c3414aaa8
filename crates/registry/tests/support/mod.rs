//! Shared helpers for the registry's API tests: a [`TestRegistry`] over an in-memory store and a
//! manual clock, driving `registry::router` in-process (no socket), with request helpers and
//! the ACL shapes several test files need (an ACL-enabled registry, a token with given rules).
//!
//! The generic parts come from `testkit`: in-process calls (`testkit::call`), the store
//! (`testkit::mem_storage`) and the clock (`testkit::ManualClock`); what is here knows the
//! registry (its config, its headers, its ACL endpoints).
//!
//! Each test binary compiles this module separately and uses only part of it.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::Method;
use registry::{AclConfig, Config, State};
use serde_json::json;
use storage::{MemStorage, Storage};
use testkit::ManualClock;
use tokio_util::sync::CancellationToken;

/// The node name every test registry registers itself as.
pub(crate) const NODE: &str = "test-node";

/// Where the manual clock starts (Unix ms; any fixed value works).
pub(crate) const START_MS: i64 = 1_700_000_000_000;

/// The initial management token of an ACL-enabled test registry ([`acl_config`]).
pub(crate) const ROOT: &str = "root-token";

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

/// ACLs on with [`ROOT`] as the initial management token, as `cairn dev` runs them;
/// `default_allow` is the anonymous default policy.
pub(crate) fn acl_config(default_allow: bool) -> AclConfig {
    AclConfig {
        enabled: true,
        initial_management_token: Some(ROOT.to_owned()),
        default_policy_allow: default_allow,
    }
}

impl TestRegistry {
    /// A fresh registry with [`test_config`]; background tasks are not running.
    pub(crate) async fn new() -> TestRegistry {
        TestRegistry::with_config(test_config()).await
    }

    /// A fresh registry with ACLs on, deny by default ([`acl_config`]).
    pub(crate) async fn with_acl() -> TestRegistry {
        let mut config = test_config();
        config.acl = acl_config(false);
        TestRegistry::with_config(config).await
    }

    pub(crate) async fn with_config(config: Config) -> TestRegistry {
        TestRegistry::open(testkit::mem_storage(), ManualClock::new(START_MS), config).await
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
        self.clock.advance(duration);
    }

    pub(crate) async fn request(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> TestResponse {
        let mut request = testkit::request(method.as_str(), uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.into()).expect("request");
        TestResponse(testkit::call(&self.router, request).await)
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

    /// A request presenting `token` in `X-Consul-Token`.
    pub(crate) async fn as_token(
        &self,
        method: Method,
        uri: &str,
        token: &str,
        body: impl Into<Body>,
    ) -> TestResponse {
        self.request(method, uri, &[("X-Consul-Token", token)], body)
            .await
    }

    /// Creates, as [`ROOT`], a policy with `rules` (under a fresh name) and a token linked to
    /// it; returns the token's SecretID.
    pub(crate) async fn token_with_rules(&self, rules: &str) -> String {
        let name = format!("p-{}", uuid::Uuid::new_v4().simple());
        let policy = self
            .as_token(
                Method::PUT,
                "/v1/acl/policy",
                ROOT,
                json!({"Name": name, "Rules": rules}).to_string(),
            )
            .await;
        policy.assert_status(200);
        let token = self
            .as_token(
                Method::PUT,
                "/v1/acl/token",
                ROOT,
                json!({"Policies": [{"ID": policy.json()["ID"]}]}).to_string(),
            )
            .await;
        token.assert_status(200);
        token.json()["SecretID"].as_str().unwrap().to_owned()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if let Some(runner) = self.tasks.take() {
            runner.shutdown_token().cancel();
        }
    }
}

/// A buffered response (`testkit::Response`: `status`, `headers`, `body`, `text()`,
/// `header()`), with the registry's checks.
#[derive(Debug)]
pub(crate) struct TestResponse(testkit::Response);

impl Deref for TestResponse {
    type Target = testkit::Response;

    fn deref(&self) -> &testkit::Response {
        &self.0
    }
}

impl TestResponse {
    /// The body as JSON; panics, showing the body, when it is not JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {:?}", self.text()))
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
