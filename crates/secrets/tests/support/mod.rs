//! Helpers shared by the secrets API tests: one request through the router, and the
//! init/unseal steps most tests start with. Keep it small; add helpers, don't change them.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use secrets::{Config, State};
use serde_json::{Value, json};
use storage::Storage;
use tower::ServiceExt;

/// One request; the body is JSON when given. Returns the status and the parsed body
/// (`Value::Null` when empty, a string when not JSON).
pub(crate) async fn call(
    app: &Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("X-Vault-Token", token);
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = app
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, value)
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

/// A dev-mode service (initialised and unsealed, `root` as root token) over fresh memory
/// storage, as `cairn dev` runs.
pub(crate) async fn dev(root: &str) -> Router {
    dev_over(Arc::new(storage::MemStorage::new()), root, None).await
}

/// A dev-mode service over `storage`, keeping the unseal key in `key_file` (so a second call
/// over the same storage is a restart).
pub(crate) async fn dev_over(
    storage: Arc<dyn Storage>,
    root: &str,
    key_file: Option<std::path::PathBuf>,
) -> Router {
    let config = Config {
        dev_root_token: Some(root.to_owned()),
        dev_unseal_key_file: key_file,
    };
    secrets::router(State::open(storage, config).await.unwrap())
}

/// Like [`call`], with request headers of the caller's choice and a raw body; also returns
/// the response headers.
pub(crate) async fn call_raw(
    app: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, headers, value)
}
