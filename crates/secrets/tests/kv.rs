//! The kv engine, version 1 (mounted at `secret/` in place of the dev server's version 2), end
//! to end through the router with the root token and with a policy: write, read, list, delete,
//! nested paths, 404s, validation, and the ACL's create vs update through kv's existence check.

mod support;

use http::StatusCode;
use serde_json::json;
use support::{call, dev_kv_v1, token_with_policy};

const ROOT: &str = "root";

#[tokio::test]
async fn kv_write_read_list_delete_with_root_token() {
    let app = dev_kv_v1(ROOT).await;
    let secret = json!({"username": "app", "password": "hunter2", "port": 5432, "tags": ["a", "b"], "nested": {"k": true}});
    let (status, _) = call(
        &app,
        "POST",
        "/v1/secret/apps/db/prod",
        Some(ROOT),
        Some(secret.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/apps/web",
        Some(ROOT),
        Some(json!({"key": "v"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, body) = call(&app, "GET", "/v1/secret/apps/db/prod", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"], secret);

    let (status, body) = call(&app, "LIST", "/v1/secret/", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["apps/"]));
    let (_, body) = call(&app, "LIST", "/v1/secret/apps", Some(ROOT), None).await;
    assert_eq!(body["data"]["keys"], json!(["db/", "web"]));
    let (_, body) = call(
        &app,
        "GET",
        "/v1/secret/apps/db?list=true",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(body["data"]["keys"], json!(["prod"]));

    let (status, _) = call(&app, "DELETE", "/v1/secret/apps/db/prod", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/secret/apps/db/prod", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "LIST", "/v1/secret/apps/db", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, body) = call(&app, "LIST", "/v1/secret/apps", Some(ROOT), None).await;
    assert_eq!(body["data"]["keys"], json!(["web"]));
}

#[tokio::test]
async fn kv_overwrite_replaces_the_whole_secret() {
    let app = dev_kv_v1(ROOT).await;
    call(
        &app,
        "PUT",
        "/v1/secret/a",
        Some(ROOT),
        Some(json!({"x": 1, "y": 2})),
    )
    .await;
    call(
        &app,
        "PUT",
        "/v1/secret/a",
        Some(ROOT),
        Some(json!({"z": 3})),
    )
    .await;
    let (_, body) = call(&app, "GET", "/v1/secret/a", Some(ROOT), None).await;
    assert_eq!(body["data"], json!({"z": 3}));
}

#[tokio::test]
async fn kv_write_without_data_is_400_and_stores_nothing() {
    let app = dev_kv_v1(ROOT).await;
    for body in [None, Some(json!({}))] {
        let (status, resp) = call(&app, "PUT", "/v1/secret/empty", Some(ROOT), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(resp, json!({"errors": ["missing data fields"]}));
    }
    let (status, _) = call(&app, "GET", "/v1/secret/empty", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn kv_mount_root_lists_and_reads() {
    let app = dev_kv_v1(ROOT).await;
    let (status, _) = call(&app, "LIST", "/v1/secret", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    call(
        &app,
        "PUT",
        "/v1/secret/top",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    let (status, body) = call(&app, "LIST", "/v1/secret", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["keys"], json!(["top"]));
}

#[tokio::test]
async fn kv_create_vs_update_follows_the_acl_through_the_existence_check() {
    let app = dev_kv_v1(ROOT).await;
    let policy = r#"path "secret/create-only/*" { capabilities = ["create", "read"] }
path "secret/update-only/*" { capabilities = ["update", "read"] }"#;
    let token = token_with_policy(&app, ROOT, "kv-test", policy).await;

    // create-only: a new item is a create; overwriting an existing one is an update.
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/secret/create-only/a",
        Some(&token),
        Some(json!({"v": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/create-only/a",
        Some(&token),
        Some(json!({"v": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, body) = call(&app, "GET", "/v1/secret/create-only/a", Some(&token), None).await;
    assert_eq!(body["data"]["v"], 1);

    // update-only: a new item is refused; an existing one can be overwritten.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/update-only/b",
        Some(&token),
        Some(json!({"v": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    call(
        &app,
        "PUT",
        "/v1/secret/update-only/b",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/update-only/b",
        Some(&token),
        Some(json!({"v": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // Neither grants delete or list, nor anything outside its paths.
    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/secret/update-only/b",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "LIST", "/v1/secret/update-only", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "GET", "/v1/secret/other", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
