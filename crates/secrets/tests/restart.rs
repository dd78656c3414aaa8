//! Restart: a server-mode store on redb is initialised, unsealed and filled (policy, tokens,
//! a kv mount at a custom path with data); the store is closed and reopened; it comes back
//! sealed, and after unsealing with the same shares everything is there and still enforced.
//! (Lease deadlines across a restart are covered in `src/leases.rs`, `manager_tests`, with a
//! leasing test engine the registry does not offer to integration tests.)

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use secrets::{Config, State};
use serde_json::{Value, json};
use storage::Storage;
use storage_redb::RedbStorage;
use tower::ServiceExt;

async fn call(
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

async fn open(path: &Path) -> (Arc<RedbStorage>, Router) {
    let storage = Arc::new(RedbStorage::open(path).unwrap());
    let state = State::open(storage.clone(), Config::default())
        .await
        .unwrap();
    (storage, secrets::router(state))
}

async fn unseal(app: &Router, keys: &[String]) {
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
    }
    let (_, status) = call(app, "GET", "/v1/sys/seal-status", None, None).await;
    assert_eq!(status["sealed"], false, "{status}");
}

#[tokio::test]
async fn everything_survives_a_restart_and_stays_enforced_after_unseal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.redb");

    // First life: init with 3 shares (threshold 2), unseal, fill.
    let (storage, app) = open(&db).await;
    let (status, init) = call(
        &app,
        "PUT",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": 3, "secret_threshold": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{init}");
    let keys: Vec<String> = init["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 3);
    let root = init["root_token"].as_str().unwrap().to_owned();
    unseal(&app, &keys[..2]).await;
    let root = Some(root.as_str());

    let policy = r#"path "team-a/allowed/*" { capabilities = ["read", "list"] }"#;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/acl/reader",
        root,
        Some(json!({"policy": policy})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/team-a",
        root,
        Some(json!({"type": "kv", "options": {"version": "1"}, "config": {"max_lease_ttl": "2h"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for (path, value) in [("allowed/one", "1"), ("other/two", "2")] {
        let (status, body) = call(
            &app,
            "PUT",
            &format!("/v1/team-a/{path}"),
            root,
            Some(json!({"v": value})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    let (status, created) = call(
        &app,
        "POST",
        "/v1/auth/token/create",
        root,
        Some(json!({"policies": ["reader"], "ttl": "1h"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let limited = created["auth"]["client_token"].as_str().unwrap().to_owned();
    let (_, revoked) = call(
        &app,
        "POST",
        "/v1/auth/token/create",
        root,
        Some(json!({"ttl": "1h"})),
    )
    .await;
    let revoked = revoked["auth"]["client_token"].as_str().unwrap().to_owned();
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke",
        root,
        Some(json!({"token": revoked})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // Restart: close the store, open it again.
    drop(app);
    storage.close().await.unwrap();
    drop(storage);
    let (_storage, app) = open(&db).await;

    let (status, seal) = call(&app, "GET", "/v1/sys/seal-status", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seal["sealed"], true, "{seal}");
    assert_eq!(seal["initialized"], true, "{seal}");
    assert_eq!((seal["t"].clone(), seal["n"].clone()), (json!(2), json!(3)));
    let (status, body) = call(&app, "GET", "/v1/team-a/allowed/one", root, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "sealed: {body}");

    // One share is not enough; the other two shares (not the same two) are.
    let (_, progress) = call(
        &app,
        "PUT",
        "/v1/sys/unseal",
        None,
        Some(json!({"key": keys[2]})),
    )
    .await;
    assert_eq!(progress["sealed"], true, "{progress}");
    unseal(&app, &keys[1..2]).await;

    // Root token, policy, mount (with its tuning), data.
    let (status, policy_read) = call(&app, "GET", "/v1/sys/policies/acl/reader", root, None).await;
    assert_eq!(status, StatusCode::OK, "{policy_read}");
    assert_eq!(policy_read["data"]["policy"], policy);
    let (_, mounts) = call(&app, "GET", "/v1/sys/mounts", root, None).await;
    assert_eq!(mounts["data"]["team-a/"]["type"], "kv", "{mounts}");
    assert_eq!(
        mounts["data"]["team-a/"]["config"]["max_lease_ttl"], 7200,
        "{mounts}"
    );
    let (status, data) = call(&app, "GET", "/v1/team-a/other/two", root, None).await;
    assert_eq!(status, StatusCode::OK, "{data}");
    assert_eq!(data["data"], json!({"v": "2"}));

    // The limited token: still valid, still limited.
    let limited = Some(limited.as_str());
    let (status, me) = call(&app, "GET", "/v1/auth/token/lookup-self", limited, None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert!(
        me["data"]["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("reader")),
        "{me}"
    );
    let ttl = me["data"]["ttl"].as_u64().unwrap();
    assert!(ttl > 3500 && ttl <= 3600, "expiry kept: {ttl}");
    let (status, data) = call(&app, "GET", "/v1/team-a/allowed/one", limited, None).await;
    assert_eq!(status, StatusCode::OK, "{data}");
    assert_eq!(data["data"], json!({"v": "1"}));
    let (status, _) = call(&app, "GET", "/v1/team-a/other/two", limited, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/team-a/allowed/one",
        limited,
        Some(json!({"v": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "GET", "/v1/sys/policies/acl/reader", limited, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The token revoked before the restart stays revoked.
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(revoked.as_str()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
