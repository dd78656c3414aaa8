//! Helpers shared by the secrets API tests: one request through the router (over
//! `testkit::call`), the service in dev or server mode (optionally on a manual clock), the
//! init/unseal steps most server-mode tests start with, and the ACL shape many tests repeat
//! (write a policy, create a token that holds it). Keep it small; add helpers, don't change
//! them.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{HeaderMap, StatusCode};
use secrets::{Config, State};
use serde_json::{Value, json};
use storage::Storage;
use testkit::ManualClock;

/// One request with `X-Vault-Token` when `token` is given; the body is JSON text when given
/// (no content type, as hvac sends it). Returns the whole response.
pub(crate) async fn send(
    app: &Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> testkit::Response {
    let mut request = testkit::request(method, path);
    if let Some(token) = token {
        request = request.header("X-Vault-Token", token);
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    testkit::call(app, request.body(body).unwrap()).await
}

/// [`send`], returning the status and the parsed body (`Value::Null` when empty, a string when
/// not JSON).
pub(crate) async fn call(
    app: &Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let response = send(app, method, path, token, body).await;
    (response.status, response.json())
}

/// Like [`call`], with request headers of the caller's choice and a raw body; also returns
/// the response headers.
pub(crate) async fn call_raw(
    app: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, HeaderMap, Value) {
    let mut request = testkit::request(method, path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = testkit::call(app, request.body(Body::from(body.to_owned())).unwrap()).await;
    let value = response.json();
    (response.status, response.headers, value)
}

/// A server-mode (not dev) service over `storage`.
pub(crate) async fn server(storage: Arc<dyn Storage>) -> Router {
    let state = State::open(storage, Config::default()).await.unwrap();
    secrets::router(state)
}

/// `sys/init` with `shares`/`threshold`: returns the hex keys and the root token.
pub(crate) async fn init(app: &Router, shares: u8, threshold: u8) -> (Vec<String>, String) {
    let (status, body) = call(
        app,
        "PUT",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": shares, "secret_threshold": threshold})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let keys = body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    (keys, body["root_token"].as_str().unwrap().to_owned())
}

/// Submits each key to `sys/unseal` and asserts the store ends unsealed.
pub(crate) async fn unseal(app: &Router, keys: &[String]) {
    let mut last = Value::Null;
    for key in keys {
        let (status, body) = call(
            app,
            "PUT",
            "/v1/sys/unseal",
            None,
            Some(json!({"key": key})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        last = body;
    }
    assert_eq!(last["sealed"], false, "{last}");
}

/// The configuration of `cairn dev`: `root` as root token, the unseal key in `key_file` (so
/// a second start over the same storage is a restart).
pub(crate) fn dev_config(root: &str, key_file: Option<std::path::PathBuf>) -> Config {
    Config {
        dev_root_token: Some(root.to_owned()),
        dev_unseal_key_file: key_file,
        ..Config::default()
    }
}

/// A dev-mode service (initialised and unsealed, `root` as root token) over fresh memory
/// storage, as `cairn dev` runs.
pub(crate) async fn dev(root: &str) -> Router {
    dev_over(testkit::mem_storage(), root, None).await
}

/// A dev-mode service whose `secret/` is kv version 1 (the dev server mounts version 2 there):
/// for the tests that use a plain kv as the backend they exercise the core through.
pub(crate) async fn dev_kv_v1(root: &str) -> Router {
    let app = dev(root).await;
    let (status, body) = call(&app, "DELETE", "/v1/sys/mounts/secret", Some(root), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/secret",
        Some(root),
        Some(json!({"type": "kv", "options": {"version": "1"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    app
}

/// A dev-mode service over `storage`, keeping the unseal key in `key_file` (so a second call
/// over the same storage is a restart).
pub(crate) async fn dev_over(
    storage: Arc<dyn Storage>,
    root: &str,
    key_file: Option<std::path::PathBuf>,
) -> Router {
    secrets::router(dev_state(storage, root, key_file).await)
}

/// The state behind [`dev_over`], for tests that also start its background loops.
pub(crate) async fn dev_state(
    storage: Arc<dyn Storage>,
    root: &str,
    key_file: Option<std::path::PathBuf>,
) -> State {
    State::open(storage, dev_config(root, key_file))
        .await
        .unwrap()
}

/// A dev-mode state over fresh memory storage on a manual clock (standing at the system
/// time): moving the clock moves token, lease and policy time alike.
pub(crate) async fn dev_on_clock(root: &str) -> (State, ManualClock) {
    let clock = ManualClock::at_system_time();
    let state = State::open_with_clock(
        testkit::mem_storage(),
        dev_config(root, None),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    (state, clock)
}

/// Writes the ACL policy `name` (HCL `rules`) as `token`; asserts Vault's 204.
pub(crate) async fn put_policy(app: &Router, token: &str, name: &str, rules: &str) {
    let (status, body) = call(
        app,
        "PUT",
        &format!("/v1/sys/policies/acl/{name}"),
        Some(token),
        Some(json!({ "policy": rules })),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

/// `auth/token/create` as `parent` with `body`; asserts 200 and returns the new token's
/// (client_token, accessor).
pub(crate) async fn create_token(app: &Router, parent: &str, body: Value) -> (String, String) {
    let (status, body) = call(
        app,
        "POST",
        "/v1/auth/token/create",
        Some(parent),
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (
        body["auth"]["client_token"].as_str().unwrap().to_owned(),
        body["auth"]["accessor"].as_str().unwrap().to_owned(),
    )
}

/// The ACL shape most enforcement tests start with: writes policy `name` as `root` and
/// returns a token (a child of `root`) that holds it.
pub(crate) async fn token_with_policy(app: &Router, root: &str, name: &str, rules: &str) -> String {
    put_policy(app, root, name, rules).await;
    create_token(app, root, json!({ "policies": [name] }))
        .await
        .0
}
