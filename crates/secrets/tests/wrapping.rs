//! Response wrapping through the router: `X-Vault-Wrap-TTL`/`X-Secrets-Wrap-TTL` on any
//! request, `sys/wrapping/{wrap,unwrap,lookup,rewrap}`, single-use wrapping tokens limited to
//! the unwrap paths, expiry with their TTL (and their cubbyhole with them), survival across a
//! restart, and `min_wrapping_ttl`/`max_wrapping_ttl` in policies.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::StatusCode;
use secrets::State;
use serde_json::{Value, json};
use storage::Storage;
use support::{call, call_raw, create_token, dev, dev_config, dev_over, token_with_policy};

const ROOT: &str = "root";

/// A kv version 1 mount at `kv1/` holding `kv1/app` = `{"password": "hunter2"}`.
async fn with_secret(app: &Router) {
    let mount = json!({"type": "kv", "options": {"version": "1"}});
    let (status, body) = call(app, "POST", "/v1/sys/mounts/kv1", Some(ROOT), Some(mount)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let secret = json!({"password": "hunter2"});
    let (status, _) = call(app, "PUT", "/v1/kv1/app", Some(ROOT), Some(secret)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

/// `method path` as `token` with the wrap TTL header (`X-Vault-Wrap-TTL`) and a JSON body.
async fn wrapped(
    app: &Router,
    method: &str,
    path: &str,
    token: &str,
    ttl: &str,
    body: Value,
) -> (StatusCode, Value) {
    let headers = [("X-Vault-Token", token), ("X-Vault-Wrap-TTL", ttl)];
    let (status, _, body) = call_raw(app, method, path, &headers, &body.to_string()).await;
    (status, body)
}

/// [`wrapped`], asserting 200 and returning `wrap_info`.
async fn wrap_info(app: &Router, method: &str, path: &str, ttl: &str, body: Value) -> Value {
    let (status, body) = wrapped(app, method, path, ROOT, ttl, body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["wrap_info"].clone()
}

/// `sys/wrapping/unwrap` naming `wrapping_token` in the body, as `caller`.
async fn unwrap_as(app: &Router, caller: &str, wrapping_token: &str) -> (StatusCode, Value) {
    let body = json!({ "token": wrapping_token });
    call(
        app,
        "POST",
        "/v1/sys/wrapping/unwrap",
        Some(caller),
        Some(body),
    )
    .await
}

fn token_of(info: &Value) -> String {
    info["token"].as_str().unwrap().to_owned()
}

const INVALID: &str = "wrapping token is not valid or does not exist";

#[tokio::test]
async fn wrap_returns_only_wrap_info_and_unwrap_returns_the_data_once() {
    let app = dev(ROOT).await;
    let (status, body) = wrapped(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        ROOT,
        "60",
        json!({"a": "b", "n": [1, 2]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let info = &body["wrap_info"];
    assert!(
        info["token"].as_str().unwrap().starts_with("hvs."),
        "{body}"
    );
    assert_eq!(info["accessor"].as_str().unwrap().len(), 24);
    assert_eq!(info["ttl"], 60);
    assert_eq!(info["creation_path"], "sys/wrapping/wrap");
    assert!(info.get("wrapped_accessor").is_none());
    let created = info["creation_time"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{created}");
    for (field, empty) in [
        ("request_id", json!("")),
        ("lease_id", json!("")),
        ("renewable", json!(false)),
        ("lease_duration", json!(0)),
        ("data", Value::Null),
        ("warnings", Value::Null),
        ("auth", Value::Null),
    ] {
        assert_eq!(body[field], empty, "{field} in {body}");
    }

    let (status, unwrapped) = unwrap_as(&app, ROOT, &token_of(info)).await;
    assert_eq!(status, StatusCode::OK, "{unwrapped}");
    assert_eq!(unwrapped["data"], json!({"a": "b", "n": [1, 2]}));
    assert_eq!(unwrapped["wrap_info"], Value::Null);
    assert!(!unwrapped["request_id"].as_str().unwrap().is_empty());

    let (status, body) = unwrap_as(&app, ROOT, &token_of(info)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({ "errors": [INVALID] }));
}

#[tokio::test]
async fn wrap_without_a_wrap_ttl_is_400() {
    let app = dev(ROOT).await;
    let body = Some(json!({"a": "b"}));
    let (status, body) = call(&app, "POST", "/v1/sys/wrapping/wrap", Some(ROOT), body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"errors": ["endpoint requires response wrapping to be used"]})
    );
}

#[tokio::test]
async fn a_wrapped_read_is_unwrapped_by_the_wrapping_token_itself() {
    let app = dev(ROOT).await;
    with_secret(&app).await;
    let headers = [("X-Secrets-Token", ROOT), ("X-Secrets-Wrap-TTL", "5m")];
    let (status, _, body) = call_raw(&app, "GET", "/v1/kv1/app", &headers, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], Value::Null, "the secret is not in the answer");
    let info = &body["wrap_info"];
    assert_eq!(
        (info["ttl"].clone(), info["creation_path"].clone()),
        (json!(300), json!("kv1/app"))
    );

    let wrapping = token_of(info);
    let (status, unwrapped) = call(
        &app,
        "POST",
        "/v1/sys/wrapping/unwrap",
        Some(&wrapping),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{unwrapped}");
    assert_eq!(unwrapped["data"], json!({"password": "hunter2"}));

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/wrapping/unwrap",
        Some(&wrapping),
        None,
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::BAD_REQUEST, json!({ "errors": [INVALID] }))
    );
}

#[tokio::test]
async fn any_token_with_the_default_policy_may_unwrap() {
    let app = dev(ROOT).await;
    let info = wrap_info(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        "60",
        json!({"k": "v"}),
    )
    .await;
    let (other, _) = create_token(&app, ROOT, json!({"policies": ["default"]})).await;
    let (status, body) = unwrap_as(&app, &other, &token_of(&info)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], json!({"k": "v"}));
}

#[tokio::test]
async fn unwrapping_a_token_that_is_not_a_wrapping_token_is_400() {
    let app = dev(ROOT).await;
    let (plain, _) = create_token(&app, ROOT, json!({})).await;
    for named in [plain.as_str(), "hvs.nonexistent", ROOT] {
        let (status, body) = unwrap_as(&app, ROOT, named).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{named}");
        assert_eq!(body, json!({ "errors": [INVALID] }), "{named}");
    }
    let (status, body) = call(&app, "POST", "/v1/sys/wrapping/unwrap", None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body,
        json!({"errors": ["error validating wrapping token: token is empty"]})
    );
}

#[tokio::test]
async fn lookup_needs_no_token_and_does_not_spend_the_wrapping_token() {
    let app = dev(ROOT).await;
    let info = wrap_info(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        "90s",
        json!({"k": "v"}),
    )
    .await;
    let body = Some(json!({ "token": token_of(&info) }));
    for _ in 0..2 {
        let (status, looked) =
            call(&app, "POST", "/v1/sys/wrapping/lookup", None, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{looked}");
        assert_eq!(
            looked["data"],
            json!({
                "creation_ttl": 90,
                "creation_time": info["creation_time"],
                "creation_path": "sys/wrapping/wrap",
            })
        );
    }
    let (status, looked) = call(
        &app,
        "POST",
        "/v1/sys/wrapping/lookup",
        Some(&token_of(&info)),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the wrapping token may look itself up: {looked}"
    );
    let (status, _) = unwrap_as(&app, ROOT, &token_of(&info)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&app, "POST", "/v1/sys/wrapping/lookup", None, body).await;
    assert_eq!(
        (status, body),
        (StatusCode::BAD_REQUEST, json!({ "errors": [INVALID] }))
    );
}

#[tokio::test]
async fn rewrap_moves_the_response_to_a_new_token_and_spends_the_old_one() {
    let app = dev(ROOT).await;
    with_secret(&app).await;
    let first = wrap_info(&app, "GET", "/v1/kv1/app", "120", json!({})).await;
    let body = Some(json!({ "token": token_of(&first) }));
    let (status, rewrapped) = call(&app, "POST", "/v1/sys/wrapping/rewrap", Some(ROOT), body).await;
    assert_eq!(status, StatusCode::OK, "{rewrapped}");
    let second = &rewrapped["wrap_info"];
    assert_ne!(second["token"], first["token"]);
    assert_eq!(second["ttl"], 120);
    assert_eq!(second["creation_path"], "kv1/app");
    assert_eq!(rewrapped["data"], Value::Null);

    let (status, _) = unwrap_as(&app, ROOT, &token_of(&first)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "the old token is spent");
    let (status, unwrapped) = unwrap_as(&app, ROOT, &token_of(second)).await;
    assert_eq!(status, StatusCode::OK, "{unwrapped}");
    assert_eq!(unwrapped["data"], json!({"password": "hunter2"}));
}

#[tokio::test]
async fn a_wrapped_token_create_names_the_wrapped_accessor() {
    let app = dev(ROOT).await;
    let info = wrap_info(
        &app,
        "POST",
        "/v1/auth/token/create",
        "60",
        json!({"ttl": "1h"}),
    )
    .await;
    assert_eq!(info["creation_path"], "auth/token/create");
    let wrapped_accessor = info["wrapped_accessor"].as_str().unwrap().to_owned();

    let (status, unwrapped) = call(
        &app,
        "POST",
        "/v1/sys/wrapping/unwrap",
        Some(&token_of(&info)),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{unwrapped}");
    assert_eq!(unwrapped["auth"]["accessor"], wrapped_accessor.as_str());
    let created = unwrapped["auth"]["client_token"].as_str().unwrap();
    let (status, me) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(created),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["data"]["accessor"], wrapped_accessor.as_str());
}

#[tokio::test]
async fn a_write_answered_with_204_is_not_wrapped() {
    let app = dev(ROOT).await;
    let (status, body) = wrapped(&app, "PUT", "/v1/cubbyhole/x", ROOT, "60", json!({"v": 1})).await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
}

#[tokio::test]
async fn a_wrapping_token_can_do_nothing_but_unwrap() {
    let app = dev(ROOT).await;
    with_secret(&app).await;
    let info = wrap_info(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        "60",
        json!({"k": "v"}),
    )
    .await;
    let wrapping = token_of(&info);
    for (method, path) in [
        ("GET", "/v1/kv1/app"),
        ("GET", "/v1/auth/token/lookup-self"),
        ("GET", "/v1/cubbyhole/other"),
        ("POST", "/v1/sys/wrapping/rewrap"),
        ("POST", "/v1/sys/wrapping/wrap"),
    ] {
        let (status, body) = call(&app, method, path, Some(&wrapping), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
    }
    let (status, body) = unwrap_as(&app, ROOT, &wrapping).await;
    assert_eq!(status, StatusCode::OK, "refusals spend no use: {body}");
}

#[tokio::test]
async fn reading_cubbyhole_response_directly_works_once_with_a_warning() {
    let app = dev(ROOT).await;
    let info = wrap_info(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        "60",
        json!({"k": "v"}),
    )
    .await;
    let wrapping = token_of(&info);
    let (status, body) = call(&app, "GET", "/v1/cubbyhole/response", Some(&wrapping), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stored: Value = serde_json::from_str(body["data"]["response"].as_str().unwrap()).unwrap();
    assert_eq!(stored["data"], json!({"k": "v"}));
    assert!(body["warnings"][0].as_str().unwrap().contains("deprecated"));
    let (status, _) = unwrap_as(&app, ROOT, &wrapping).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "the one use is spent");
}

#[tokio::test]
async fn bad_wrap_ttl_headers_are_400() {
    let app = dev(ROOT).await;
    for (ttl, why) in [
        ("-5", "requested wrap ttl cannot be negative"),
        ("soon", "invalid duration \"soon\""),
    ] {
        let (status, body) = wrapped(&app, "GET", "/v1/sys/mounts", ROOT, ttl, json!({})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{ttl}");
        let message = format!("error parsing X-Vault-Wrap-TTL header: {why}");
        assert_eq!(body, json!({ "errors": [message] }), "{ttl}");
    }
}

#[tokio::test]
async fn response_wrapping_policy_cannot_be_assigned_or_changed() {
    let app = dev(ROOT).await;
    let body = Some(json!({"policies": ["response-wrapping"]}));
    let (status, out) = call(&app, "POST", "/v1/auth/token/create", Some(ROOT), body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        out,
        json!({"errors": ["cannot assign policy \"response-wrapping\""]})
    );
    let policy = Some(json!({"policy": r#"path "*" { capabilities = ["sudo"] }"#}));
    let path = "/v1/sys/policies/acl/response-wrapping";
    let (status, out) = call(&app, "PUT", path, Some(ROOT), policy).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        out,
        json!({"errors": ["cannot update \"response-wrapping\" policy"]})
    );
    let (status, out) = call(&app, "DELETE", path, Some(ROOT), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        out,
        json!({"errors": ["cannot delete \"response-wrapping\" policy"]})
    );
}

#[tokio::test]
async fn policy_wrapping_bounds_admit_only_wrapped_requests_within_them() {
    let app = dev(ROOT).await;
    with_secret(&app).await;
    let rules = r#"path "kv1/*" {
        capabilities = ["read"]
        min_wrapping_ttl = "1m"
        max_wrapping_ttl = "1h"
    }"#;
    let token = token_with_policy(&app, ROOT, "wrapped-only", rules).await;
    let (status, _) = call(&app, "GET", "/v1/kv1/app", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "unwrapped");
    for ttl in ["30s", "2h"] {
        let (status, _) = wrapped(&app, "GET", "/v1/kv1/app", &token, ttl, json!({})).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{ttl}");
    }
    for ttl in ["1m", "5m", "3600"] {
        let (status, body) = wrapped(&app, "GET", "/v1/kv1/app", &token, ttl, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{ttl}: {body}");
        let (status, unwrapped) = unwrap_as(&app, &token, &token_of(&body["wrap_info"])).await;
        assert_eq!(status, StatusCode::OK, "{unwrapped}");
        assert_eq!(unwrapped["data"], json!({"password": "hunter2"}));
    }
}

#[tokio::test]
async fn a_wrapping_token_expires_with_its_ttl_and_its_cubbyhole_goes() {
    let storage = testkit::mem_storage();
    let storage_dyn: Arc<dyn Storage> = storage.clone();
    let clock = testkit::ManualClock::at_system_time();
    let state = State::open_with_clock(storage, dev_config(ROOT, None), Arc::new(clock.clone()))
        .await
        .unwrap();
    let app = secrets::router(state);
    let info = wrap_info(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        "60",
        json!({"k": "v"}),
    )
    .await;
    let (_, mounts) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    let uuid = mounts["data"]["cubbyhole/"]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let prefix = format!("secrets/barrier/logical/{uuid}/");
    let stored = || async {
        let range = storage::KeyRange::prefix(prefix.as_bytes());
        storage_dyn.scan(range, None).await.unwrap().kvs.len()
    };
    assert_eq!(stored().await, 2, "response and wrapinfo");

    clock.advance(Duration::from_secs(59));
    let body = Some(json!({ "token": token_of(&info) }));
    let (status, _) = call(&app, "POST", "/v1/sys/wrapping/lookup", None, body.clone()).await;
    assert_eq!(status, StatusCode::OK, "still alive after 59 s");
    clock.advance(Duration::from_secs(2));
    let (status, _) = call(&app, "POST", "/v1/sys/wrapping/lookup", None, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "expired after 61 s");
    let (status, _) = call(&app, "POST", "/v1/auth/token/tidy", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stored().await, 0, "the expired token's cubbyhole is gone");
}

#[tokio::test]
async fn a_wrapping_token_survives_a_restart() {
    let mut store = testkit::TempStore::new();
    let key_path = store.dir().join("unseal.key");
    let app = dev_over(store.storage(), ROOT, Some(key_path.clone())).await;
    let info = wrap_info(
        &app,
        "POST",
        "/v1/sys/wrapping/wrap",
        "1h",
        json!({"k": "v"}),
    )
    .await;
    drop(app);

    store.reopen().await;
    let app = dev_over(store.storage(), ROOT, Some(key_path)).await;
    let (status, body) = unwrap_as(&app, ROOT, &token_of(&info)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], json!({"k": "v"}));
}
