//! `sys/leases/*` and the legacy `sys/renew`, `sys/revoke`, `sys/revoke-prefix` through the
//! router, as hvac calls them (PUT). No mounted engine issues leases yet (kv never does), so
//! these tests pin the wire behaviour around unknown leases, validation and sudo; the
//! expiration manager itself (expiry, retries, irrevocable, renew caps, token and mount
//! revocation, restart) is tested with a leasing test engine in `src/leases.rs`.

mod support;

use axum::Router;
use http::{StatusCode, header};
use serde_json::{Value, json};

const ROOT: &str = "root";

async fn app() -> Router {
    support::dev(ROOT).await
}

/// [`support::call`], also checking that every 4xx is JSON (Vault's error shape).
async fn call(
    app: &Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let response = support::send(app, method, path, token, body).await;
    if response.status.is_client_error() {
        assert_eq!(
            response.headers[header::CONTENT_TYPE],
            "application/json",
            "{method} {path}"
        );
    }
    let value = if response.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&response.body).unwrap()
    };
    (response.status, value)
}

const UNKNOWN: &str = "secret/creds/nobody/AAAAAAAAAAAAAAAAAAAAAAAA";

#[tokio::test]
async fn looking_up_an_unknown_lease_is_invalid_lease() {
    let app = app().await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/lookup",
        Some(ROOT),
        Some(json!({"lease_id": UNKNOWN})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["invalid lease"]}));
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/lookup",
        Some(ROOT),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["lease_id must be specified"]}));
}

#[tokio::test]
async fn renewing_an_unknown_lease_is_lease_not_found_on_every_spelling() {
    let app = app().await;
    for (path, body) in [
        (
            "/v1/sys/leases/renew".to_owned(),
            json!({"lease_id": UNKNOWN, "increment": "1h"}),
        ),
        (
            format!("/v1/sys/leases/renew/{UNKNOWN}"),
            json!({"increment": 60}),
        ),
        ("/v1/sys/renew".to_owned(), json!({"lease_id": UNKNOWN})),
        (format!("/v1/sys/renew/{UNKNOWN}"), json!({})),
    ] {
        let (status, answer) = call(&app, "PUT", &path, Some(ROOT), Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer, json!({"errors": ["lease not found"]}), "{path}");
    }
    let (status, answer) = call(
        &app,
        "PUT",
        "/v1/sys/leases/renew",
        Some(ROOT),
        Some(json!({"lease_id": UNKNOWN, "increment": "soon"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("Field validation failed"),
        "{answer}"
    );
}

#[tokio::test]
async fn revoking_an_unknown_lease_is_204_on_every_spelling() {
    let app = app().await;
    for (path, body) in [
        (
            "/v1/sys/leases/revoke".to_owned(),
            Some(json!({"lease_id": UNKNOWN, "sync": true})),
        ),
        (format!("/v1/sys/leases/revoke/{UNKNOWN}"), None),
        (
            "/v1/sys/revoke".to_owned(),
            Some(json!({"lease_id": UNKNOWN})),
        ),
        (format!("/v1/sys/revoke/{UNKNOWN}"), None),
        ("/v1/sys/leases/revoke-prefix/secret/creds".to_owned(), None),
        ("/v1/sys/leases/revoke-force/secret/creds".to_owned(), None),
        ("/v1/sys/revoke-prefix/secret/creds".to_owned(), None),
        ("/v1/sys/revoke-force/secret/creds".to_owned(), None),
        ("/v1/sys/leases/tidy".to_owned(), None),
    ] {
        let (status, answer) = call(&app, "PUT", &path, Some(ROOT), body).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}: {answer}");
    }
    let (status, answer) = call(
        &app,
        "PUT",
        "/v1/sys/leases/revoke",
        Some(ROOT),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer, json!({"errors": ["lease_id must be specified"]}));
}

#[tokio::test]
async fn listing_leases_under_an_empty_prefix_is_404() {
    let app = app().await;
    for (method, path) in [
        ("LIST", "/v1/sys/leases/lookup/secret/creds"),
        ("LIST", "/v1/sys/leases/lookup/"),
        ("GET", "/v1/sys/leases/lookup/secret?list=true"),
    ] {
        let (status, body) = call(&app, method, path, Some(ROOT), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(body, json!({"errors": []}));
    }
}

#[tokio::test]
async fn wrong_verbs_and_unknown_lease_paths_are_refused() {
    let app = app().await;
    let (status, _) = call(&app, "GET", "/v1/sys/leases/lookup", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = call(&app, "GET", "/v1/sys/leases/renew", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/sys/leases/revoke-prefix/",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(&app, "PUT", "/v1/sys/leases/nonsense", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn prefix_revocation_and_lease_listing_need_sudo() {
    let app = app().await;
    let policy = r#"
        path "sys/leases/*" { capabilities = ["create", "read", "update", "list"] }
        path "sys/revoke-prefix/*" { capabilities = ["update"] }
    "#;
    let token = support::token_with_policy(&app, ROOT, "lease-admin", policy).await;
    let token = Some(token.as_str());

    // Without sudo: prefix revocation and listing are denied...
    for (method, path) in [
        ("PUT", "/v1/sys/leases/revoke-prefix/secret/creds"),
        ("PUT", "/v1/sys/leases/revoke-force/secret/creds"),
        ("PUT", "/v1/sys/revoke-prefix/secret/creds"),
        ("LIST", "/v1/sys/leases/lookup/secret/creds"),
    ] {
        let (status, body) = call(&app, method, path, token, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert_eq!(body, json!({"errors": ["permission denied"]}));
    }
    // ...while the per-lease calls need only update.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/sys/leases/revoke",
        token,
        Some(json!({"lease_id": UNKNOWN})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/leases/lookup",
        token,
        Some(json!({"lease_id": UNKNOWN})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // No token at all: denied before anything else.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/sys/leases/lookup",
        None,
        Some(json!({"lease_id": UNKNOWN})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
