//! kv version 2 at the dev server's `secret/`, end to end through the router: the envelope
//! around each answer, the 404 that carries a deleted version's metadata, check-and-set
//! failures as 400s, PATCH through the core, ACL paths under `data/` and `metadata/` (with
//! create vs update from kv's existence check), times from the store's clock, and versions
//! surviving a restart.

mod support;

use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};
use storage::Storage;
use support::{call, call_raw, dev, send, token_with_policy};

const ROOT: &str = "root";

async fn put(app: &axum::Router, key: &str, data: Value) -> Value {
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/secret/data/{key}"),
        Some(ROOT),
        Some(json!({"options": {}, "data": data})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn write_and_read_answer_in_vaults_envelope() {
    let app = dev(ROOT).await;
    let written = put(&app, "app/db", json!({"user": "alice"})).await;
    assert_eq!(written["data"]["version"], 1);
    assert_eq!(written["data"]["deletion_time"], "");
    assert_eq!(written["data"]["destroyed"], false);
    assert_eq!(written["data"]["custom_metadata"], Value::Null);
    assert_eq!(written["lease_id"], "");
    assert_eq!(written["wrap_info"], Value::Null);

    let (status, read) = call(&app, "GET", "/v1/secret/data/app/db", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["data"]["data"], json!({"user": "alice"}));
    assert_eq!(read["data"]["metadata"]["version"], 1);
    assert_eq!(
        read["data"]["metadata"]["created_time"],
        written["data"]["created_time"]
    );
    assert!(read["request_id"].as_str().is_some_and(|id| !id.is_empty()));

    put(&app, "app/db", json!({"user": "bob"})).await;
    let (_, first) = call(
        &app,
        "GET",
        "/v1/secret/data/app/db?version=1",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(first["data"]["data"], json!({"user": "alice"}));
    let (status, body) = call(
        &app,
        "GET",
        "/v1/secret/data/app/db?version=9",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"errors": []}))
    );
}

#[tokio::test]
async fn a_deleted_version_is_a_json_404_with_its_metadata() {
    let app = dev(ROOT).await;
    put(&app, "gone", json!({"v": 1})).await;
    let (status, _) = call(&app, "DELETE", "/v1/secret/data/gone", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let response = send(&app, "GET", "/v1/secret/data/gone", Some(ROOT), None).await;
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert_eq!(response.headers["content-type"], "application/json");
    let body = response.json();
    assert_eq!(body["data"]["data"], Value::Null);
    assert_eq!(body["data"]["metadata"]["version"], 1);
    assert_ne!(body["data"]["metadata"]["deletion_time"], "");

    let (status, _) = call(
        &app,
        "POST",
        "/v1/secret/undelete/gone",
        Some(ROOT),
        Some(json!({"versions": [1]})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/secret/data/gone", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn bad_input_and_cas_failures_are_400s_in_vaults_shape() {
    let app = dev(ROOT).await;
    let cases = [
        (json!({"options": {}}), "no data provided"),
        (
            json!({"data": {}, "options": {"cas": 3}}),
            "check-and-set parameter did not match the current version",
        ),
        (
            json!({"data": {}, "options": {"cas": "x"}}),
            "error parsing check-and-set parameter",
        ),
    ];
    for (body, message) in cases {
        let (status, reply) = call(&app, "POST", "/v1/secret/data/k", Some(ROOT), Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
        assert_eq!(reply, json!({ "errors": [message] }));
    }
    let (status, reply) = call(
        &app,
        "POST",
        "/v1/secret/data/k",
        Some(ROOT),
        Some(json!({"data": "not a map"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    let (status, reply) = call(
        &app,
        "GET",
        "/v1/secret/data/k?version=abc",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
    let (status, reply) = call(
        &app,
        "POST",
        "/v1/secret/destroy/k",
        Some(ROOT),
        Some(json!({"versions": []})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{reply}");
}

#[tokio::test]
async fn patch_merges_through_the_core() {
    let app = dev(ROOT).await;
    put(&app, "p", json!({"a": 1, "b": 2})).await;
    let headers = [
        ("x-vault-token", ROOT),
        ("content-type", "application/merge-patch+json"),
    ];
    let (status, _, body) = call_raw(
        &app,
        "PATCH",
        "/v1/secret/data/p",
        &headers,
        r#"{"data": {"b": null, "c": 3}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["version"], 2);
    let (_, read) = call(&app, "GET", "/v1/secret/data/p", Some(ROOT), None).await;
    assert_eq!(read["data"]["data"], json!({"a": 1, "c": 3}));
}

#[tokio::test]
async fn metadata_lists_reads_and_deletes_every_version() {
    let app = dev(ROOT).await;
    put(&app, "team/a", json!({"v": 1})).await;
    put(&app, "team/a", json!({"v": 2})).await;
    put(&app, "team/sub/b", json!({"v": 1})).await;
    let (status, body) = call(&app, "LIST", "/v1/secret/metadata/team", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["a", "sub/"]));
    let (status, _) = call(&app, "LIST", "/v1/secret/metadata/none", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, meta) = call(&app, "GET", "/v1/secret/metadata/team/a", Some(ROOT), None).await;
    assert_eq!(meta["data"]["current_version"], 2);
    assert_eq!(meta["data"]["delete_version_after"], "0s");
    assert_eq!(
        meta["data"]["versions"].as_object().unwrap().len(),
        2,
        "{meta}"
    );
    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/secret/metadata/team/a",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/secret/metadata/team/a", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "GET",
        "/v1/secret/data/team/a?version=1",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_plain_path_on_a_version_2_mount_is_404_with_a_warning() {
    let app = dev(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/secret/foo", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["warnings"][0],
        "Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv get' for this operation."
    );
}

#[tokio::test]
async fn policies_name_the_data_and_metadata_paths() {
    let app = dev(ROOT).await;
    let rules = r#"
path "secret/data/team/*" { capabilities = ["create", "read"] }
path "secret/metadata/team/*" { capabilities = ["list"] }
"#;
    let token = token_with_policy(&app, ROOT, "team-kv", rules).await;
    let write = |value: i64| json!({"data": {"v": value}});
    let (status, body) = call(
        &app,
        "POST",
        "/v1/secret/data/team/x",
        Some(&token),
        Some(write(1)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "create is allowed: {body}");
    // The key exists now: a second write is an update, which the policy does not grant.
    let (status, _) = call(
        &app,
        "POST",
        "/v1/secret/data/team/x",
        Some(&token),
        Some(write(2)),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, "GET", "/v1/secret/data/team/x", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(
        &app,
        "LIST",
        "/v1/secret/metadata/team/",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(
        (status, body["data"]["keys"].clone()),
        (StatusCode::OK, json!(["x"]))
    );
    for (method, path) in [
        ("GET", "/v1/secret/metadata/team/x"),
        ("DELETE", "/v1/secret/data/team/x"),
        ("GET", "/v1/secret/data/other"),
        ("GET", "/v1/secret/team/x"),
    ] {
        let (status, _) = call(&app, method, path, Some(&token), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}");
    }
}

#[tokio::test]
async fn versions_are_stamped_by_the_stores_clock() {
    let (state, clock) = support::dev_on_clock(ROOT).await;
    let app = secrets::router(state);
    clock.set_ms(1_714_557_600_250);
    let written = put(&app, "t", json!({})).await;
    assert_eq!(written["data"]["created_time"], "2024-05-01T10:00:00.25Z");
    let (_, config) = call(
        &app,
        "POST",
        "/v1/secret/config",
        Some(ROOT),
        Some(json!({"delete_version_after": "1m"})),
    )
    .await;
    assert_eq!(config, Value::Null);
    let written = put(&app, "t", json!({})).await;
    assert_eq!(written["data"]["deletion_time"], "2024-05-01T10:01:00.25Z");
    clock.advance_ms(60_000);
    let (status, _) = call(&app, "GET", "/v1/secret/data/t", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn versions_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("unseal.key");
    let storage: Arc<dyn Storage> = Arc::new(storage::MemStorage::new());
    let app = support::dev_over(storage.clone(), ROOT, Some(key_file.clone())).await;
    put(&app, "kept", json!({"v": 1})).await;
    put(&app, "kept", json!({"v": 2})).await;
    drop(app);
    let app = support::dev_over(storage, ROOT, Some(key_file)).await;
    let (_, read) = call(
        &app,
        "GET",
        "/v1/secret/data/kept?version=1",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(read["data"]["data"], json!({"v": 1}));
    let (_, meta) = call(&app, "GET", "/v1/secret/metadata/kept", Some(ROOT), None).await;
    assert_eq!(meta["data"]["current_version"], 2);
}
