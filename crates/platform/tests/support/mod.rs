//! Shared helpers for the platform's API tests: a [`TestPlatform`] over `testkit`'s memory
//! store (and a temporary blob directory), driving `platform::router` in-process through
//! `testkit::call` (no socket), on the system clock or a `testkit::ManualClock`; request
//! helpers that send JSON:API headers, and fixtures (organizations, invited and accepted users
//! with their tokens). What is not the platform's own (calling a router, stores, clocks)
//! comes from `testkit`.
//!
//! Each test binary compiles this module separately and uses only part of it.
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub(crate) mod counting;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use platform::{Config, State};
use serde_json::{Value, json};
use storage::{MemStorage, Storage};
use testkit::{ManualClock, SharedClock};

/// The dev root token of every test platform: a user token of the site administrator.
pub(crate) const ROOT: &str = "test-root-token";

/// The JSON:API media type.
pub(crate) const JSONAPI: &str = "application/vnd.api+json";

/// A platform over in-memory storage.
pub(crate) struct TestPlatform {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) state: State,
    router: Router,
    _blobs: Option<tempfile::TempDir>,
    /// Stops the platform's background loops when the test platform is dropped.
    _tasks: tokio_util::sync::DropGuard,
}

/// An answer, with the body parsed as JSON (`Value::Null` when empty or not JSON).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
    pub(crate) body: Value,
    /// The body as sent (binary bodies intact).
    pub(crate) bytes: Bytes,
}

impl Answer {
    /// Panics with the body when the status is not `expected`.
    #[track_caller]
    pub(crate) fn expect(self, expected: u16) -> Answer {
        assert_eq!(
            self.status.as_u16(),
            expected,
            "unexpected status; body: {}",
            self.text
        );
        self
    }

    /// `errors[0]` of an error document.
    pub(crate) fn error(&self) -> &Value {
        &self.body["errors"][0]
    }
}

impl TestPlatform {
    /// A platform with the dev root token [`ROOT`] and default limits, API rate limiting
    /// off (tests send many requests with one token in a tight loop; `rate_limit.rs` tests
    /// the limiter with [`TestPlatform::with_config`]).
    pub(crate) async fn new() -> TestPlatform {
        TestPlatform::with_config(TestPlatform::test_config()).await
    }

    /// Like [`TestPlatform::new`], with `clock` as its time (it moves only when the test
    /// moves it, so everything the test creates shares one millisecond until then).
    pub(crate) async fn with_clock(clock: &ManualClock) -> TestPlatform {
        TestPlatform::open(TestPlatform::test_config(), Arc::new(clock.clone())).await
    }

    /// Like [`TestPlatform::new`], over a [`counting::CountingStorage`] (returned too) that
    /// records which keys each request read.
    pub(crate) async fn counting() -> (TestPlatform, Arc<counting::CountingStorage>) {
        let storage = counting::CountingStorage::new();
        let blobs = tempfile::tempdir().expect("tempdir");
        let mut config = TestPlatform::test_config();
        config.blob_dir = blobs.path().to_path_buf();
        let mut platform = TestPlatform::over(
            Arc::clone(&storage) as Arc<dyn Storage>,
            config,
            Arc::new(stdx::clock::SystemClock),
        )
        .await
        .expect("open platform");
        platform._blobs = Some(blobs);
        (platform, storage)
    }

    /// A platform with `config` (its blob directory is set to a temporary one).
    pub(crate) async fn with_config(config: Config) -> TestPlatform {
        TestPlatform::open(config, Arc::new(stdx::clock::SystemClock)).await
    }

    /// A platform with `config` on `clock` (its blob directory is set to a temporary one).
    pub(crate) async fn with_config_and_clock(config: Config, clock: &ManualClock) -> TestPlatform {
        TestPlatform::open(config, Arc::new(clock.clone())).await
    }

    /// The configuration of [`TestPlatform::new`], for tests that change part of it.
    pub(crate) fn test_config() -> Config {
        Config {
            dev_root_token: Some(ROOT.to_owned()),
            api_rate_limiting_enabled: false,
            ..Config::default()
        }
    }

    async fn open(mut config: Config, clock: SharedClock) -> TestPlatform {
        let storage: Arc<MemStorage> = testkit::mem_storage();
        let blobs = tempfile::tempdir().expect("tempdir");
        config.blob_dir = blobs.path().to_path_buf();
        let mut platform = TestPlatform::over(storage, config, clock)
            .await
            .expect("open platform");
        platform._blobs = Some(blobs);
        platform
    }

    /// A platform over `storage` with `config` as given (blob directory included), or the
    /// error `State::open` answered (a restart with a wrong encryption password, ...).
    pub(crate) async fn over(
        storage: Arc<dyn Storage>,
        config: Config,
        clock: SharedClock,
    ) -> Result<TestPlatform, platform::Error> {
        let opened = State::open_with_clock(Arc::clone(&storage), config, clock).await?;
        // As `cairn` runs it: with its background loops, so every test goes through the auth
        // cache once its watch runs (waited for here).
        let shutdown = tokio_util::sync::CancellationToken::new();
        let runner = cluster::Runner::embedded(shutdown.clone());
        platform::start_tasks(&opened.state, &runner);
        let started = std::time::Instant::now();
        while !opened.state.auth_cache_serves() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "the auth cache's watch did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(TestPlatform {
            router: platform::router(opened.state.clone()),
            state: opened.state,
            storage,
            _blobs: None,
            _tasks: shutdown.drop_guard(),
        })
    }

    /// Sends `request` as is.
    pub(crate) async fn send(&self, request: Request<Body>) -> Answer {
        let response = testkit::call(&self.router, request).await;
        Answer {
            status: response.status,
            text: response.text(),
            body: serde_json::from_slice(&response.body).unwrap_or(Value::Null),
            headers: response.headers,
            bytes: response.body,
        }
    }

    /// A request with `Authorization: Bearer <token>` (when given) and the JSON:API
    /// content type, with `body` serialized.
    pub(crate) async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", JSONAPI)
            .header("accept", JSONAPI);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let body = body.map_or_else(Body::empty, |body| Body::from(body.to_string()));
        self.send(request.body(body).expect("request")).await
    }

    pub(crate) async fn get(&self, uri: &str, token: &str) -> Answer {
        self.call(Method::GET, uri, Some(token), None).await
    }

    pub(crate) async fn post(&self, uri: &str, token: &str, body: Value) -> Answer {
        self.call(Method::POST, uri, Some(token), Some(body)).await
    }

    pub(crate) async fn patch(&self, uri: &str, token: &str, body: Value) -> Answer {
        self.call(Method::PATCH, uri, Some(token), Some(body)).await
    }

    pub(crate) async fn delete(&self, uri: &str, token: &str) -> Answer {
        self.call(Method::DELETE, uri, Some(token), None).await
    }

    /// Creates organization `name` as the site administrator.
    pub(crate) async fn create_org(&self, name: &str) -> Value {
        let body = json!({"data": {"type": "organizations", "attributes": {
            "name": name, "email": format!("ops@{name}.example.com")
        }}});
        self.post("/api/v2/organizations", ROOT, body)
            .await
            .expect(201)
            .body
    }

    /// The id of organization `name`'s owners team.
    pub(crate) async fn owners_team(&self, organization: &str) -> String {
        self.team_id(organization, "owners").await
    }

    /// The id of team `team` of `organization`.
    pub(crate) async fn team_id(&self, organization: &str, team: &str) -> String {
        let list = self
            .get(
                &format!("/api/v2/organizations/{organization}/teams?filter%5Bnames%5D={team}"),
                ROOT,
            )
            .await
            .expect(200);
        list.body["data"][0]["id"]
            .as_str()
            .expect("team id")
            .to_owned()
    }

    /// Creates team `name` in `organization` with `organization-access` `access`.
    pub(crate) async fn create_team(
        &self,
        organization: &str,
        name: &str,
        access: Value,
    ) -> String {
        let body = json!({"data": {"type": "teams", "attributes": {
            "name": name, "visibility": "organization", "organization-access": access
        }}});
        let answer = self
            .post(
                &format!("/api/v2/organizations/{organization}/teams"),
                ROOT,
                body,
            )
            .await
            .expect(201);
        answer.body["data"]["id"]
            .as_str()
            .expect("team id")
            .to_owned()
    }

    /// Invites `email` into `teams` of `organization` as `token`.
    pub(crate) async fn invite(
        &self,
        organization: &str,
        email: &str,
        teams: &[&str],
        token: &str,
    ) -> Answer {
        let teams: Vec<Value> = teams
            .iter()
            .map(|id| json!({"id": id, "type": "teams"}))
            .collect();
        let body = json!({"data": {
            "type": "organization-memberships",
            "attributes": {"email": email},
            "relationships": {"teams": {"data": teams}}
        }});
        self.post(
            &format!("/api/v2/organizations/{organization}/organization-memberships"),
            token,
            body,
        )
        .await
    }

    /// Invites `email` (a new user) into `teams` and accepts as `username`; returns the
    /// membership id, the user id and the user's first token.
    pub(crate) async fn member(
        &self,
        organization: &str,
        username: &str,
        teams: &[&str],
    ) -> Member {
        let email = format!("{username}@example.com");
        let invited = self
            .invite(organization, &email, teams, ROOT)
            .await
            .expect(201);
        let membership_id = invited.body["data"]["id"]
            .as_str()
            .expect("ou id")
            .to_owned();
        let invitation = invited.body["meta"]["invitation"]["token"]
            .as_str()
            .expect("invitation")
            .to_owned();
        let accepted = self
            .call(
                Method::POST,
                &format!("/api/v2/organization-memberships/{membership_id}/actions/accept"),
                None,
                Some(
                    json!({"data": {"type": "organization-memberships", "attributes": {
                        "invitation-token": invitation, "username": username
                    }}}),
                ),
            )
            .await
            .expect(200);
        Member {
            membership_id,
            user_id: accepted.body["data"]["relationships"]["user"]["data"]["id"]
                .as_str()
                .expect("user id")
                .to_owned(),
            token: accepted.body["meta"]["authentication-token"]["token"]
                .as_str()
                .expect("first token")
                .to_owned(),
        }
    }
}

/// An accepted member: see [`TestPlatform::member`].
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) membership_id: String,
    pub(crate) user_id: String,
    pub(crate) token: String,
}
