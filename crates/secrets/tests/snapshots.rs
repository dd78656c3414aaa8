//! Manual snapshots and the automated snapshot configuration API, through the router:
//! a snapshot holds only the secrets service's keys, as ciphertext; a restore brings back
//! deleted data and forgets what came after; a snapshot of another store needs the force
//! path and leaves the store sealed for that store's keys; bad snapshots are 400s; the ACL
//! decides (sudo for the schedules); schedules read back without credentials, in the
//! spelling they were written with.

mod support;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use http::StatusCode;
use serde_json::{Value, json};
use storage::{Snapshot, Storage, StorageExt};
use support::{call, create_token, init, put_policy, server, token_with_policy, unseal};

const ROOT: &str = "root";

async fn take(app: &Router, token: &str) -> Vec<u8> {
    let response = support::send(
        app,
        "GET",
        "/v1/sys/storage/raft/snapshot",
        Some(token),
        None,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.text());
    response.body.to_vec()
}

async fn restore(app: &Router, path: &str, token: &str, bytes: Vec<u8>) -> (StatusCode, Value) {
    let request = testkit::request("POST", path)
        .header("X-Vault-Token", token)
        .body(Body::from(bytes))
        .unwrap();
    let response = testkit::call(app, request).await;
    (response.status, response.json())
}

async fn kv_put(app: &Router, token: &str, path: &str, value: &str) {
    let (status, body) = call(
        app,
        "PUT",
        &format!("/v1/secret/{path}"),
        Some(token),
        Some(json!({"v": value})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

async fn kv_get(app: &Router, token: &str, path: &str) -> (StatusCode, Value) {
    call(app, "GET", &format!("/v1/secret/{path}"), Some(token), None).await
}

#[tokio::test]
async fn a_restored_snapshot_brings_back_deleted_data_and_forgets_what_came_after() {
    let app = support::dev_kv_v1(ROOT).await;
    kv_put(&app, ROOT, "kept", "before").await;
    put_policy(
        &app,
        ROOT,
        "reader",
        r#"path "secret/*" { capabilities = ["read"] }"#,
    )
    .await;
    let (early_token, _) = create_token(&app, ROOT, json!({"policies": ["reader"]})).await;

    let snapshot = take(&app, ROOT).await;

    // After the snapshot: the secret and the policy are deleted, another secret and a token
    // appear.
    let (status, _) = call(&app, "DELETE", "/v1/secret/kept", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/acl/reader",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    kv_put(&app, ROOT, "later", "after").await;
    let (late_token, _) = create_token(&app, ROOT, json!({})).await;
    assert_eq!(kv_get(&app, ROOT, "kept").await.0, StatusCode::NOT_FOUND);

    let (status, body) = restore(&app, "/v1/sys/storage/raft/snapshot", ROOT, snapshot).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let (status, body) = kv_get(&app, ROOT, "kept").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["v"], "before");
    assert_eq!(kv_get(&app, ROOT, "later").await.0, StatusCode::NOT_FOUND);
    // The policy is back and enforced for the token from before the snapshot.
    let (status, body) = kv_get(&app, &early_token, "kept").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The token created after the snapshot is gone.
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(&late_token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_snapshot_holds_only_the_secrets_keys_as_ciphertext_and_restore_leaves_other_services_alone()
 {
    let storage: Arc<dyn Storage> = testkit::mem_storage();
    let app = support::dev_over(storage.clone(), ROOT, None).await;
    let app = {
        // secret/ as kv v1 keeps the test short.
        let (status, _) = call(&app, "DELETE", "/v1/sys/mounts/secret", Some(ROOT), None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, _) = call(
            &app,
            "POST",
            "/v1/sys/mounts/secret",
            Some(ROOT),
            Some(json!({"type": "kv", "options": {"version": "1"}})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        app
    };
    storage.put(b"registry/kv/x", b"one").await.unwrap();
    kv_put(&app, ROOT, "plain", "a-very-recognisable-secret-value").await;

    let bytes = take(&app, ROOT).await;
    let decoded = Snapshot::from_bytes(&bytes).unwrap();
    assert!(!decoded.entries.is_empty());
    assert!(
        decoded
            .entries
            .iter()
            .all(|kv| kv.key.starts_with(b"secrets/")),
        "only the secrets prefix"
    );
    let needle = b"a-very-recognisable-secret-value";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the secret is in the snapshot in clear"
    );

    storage.put(b"registry/kv/x", b"two").await.unwrap();
    let (status, body) = restore(&app, "/v1/sys/storage/raft/snapshot", ROOT, bytes).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let other = storage.get(b"registry/kv/x").await.unwrap().unwrap();
    assert_eq!(other.value, b"two", "another service's key was touched");
}

#[tokio::test]
async fn a_snapshot_of_another_store_needs_force_and_then_opens_with_that_stores_keys() {
    let a = server(testkit::mem_storage()).await;
    let (a_keys, a_root) = init(&a, 1, 1).await;
    unseal(&a, &a_keys).await;
    let b = server(testkit::mem_storage()).await;
    let (b_keys, b_root) = init(&b, 1, 1).await;
    unseal(&b, &b_keys).await;
    for (app, root) in [(&a, &a_root), (&b, &b_root)] {
        let (status, body) = call(
            app,
            "POST",
            "/v1/sys/mounts/kv",
            Some(root),
            Some(json!({"type": "kv"})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    let (status, _) = call(
        &b,
        "PUT",
        "/v1/kv/from-b",
        Some(&b_root),
        Some(json!({"v": "b"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let from_b = take(&b, &b_root).await;

    let (status, body) =
        restore(&a, "/v1/sys/storage/raft/snapshot", &a_root, from_b.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .contains("snapshot-force"),
        "{body}"
    );
    // Refused: A is untouched and still unsealed.
    let (status, _) = call(&a, "GET", "/v1/sys/mounts", Some(&a_root), None).await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = restore(&a, "/v1/sys/storage/raft/snapshot-force", &a_root, from_b).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, seal) = call(&a, "GET", "/v1/sys/seal-status", None, None).await;
    assert_eq!(seal["sealed"], true, "{seal}");
    let (status, _) = call(
        &a,
        "PUT",
        "/v1/sys/unseal",
        None,
        Some(json!({"key": a_keys[0]})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "A's own key no longer opens it"
    );
    unseal(&a, &b_keys).await;
    let (status, body) = call(&a, "GET", "/v1/kv/from-b", Some(&b_root), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["v"], "b");
}

#[tokio::test]
async fn corrupt_foreign_or_missing_snapshots_are_400s_and_change_nothing() {
    let app = support::dev_kv_v1(ROOT).await;
    kv_put(&app, ROOT, "x", "1").await;
    let good = take(&app, ROOT).await;

    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x55;
    let whole_store = Snapshot {
        revision: 1,
        entries: vec![storage::KeyValue {
            key: b"registry/x".to_vec(),
            value: b"1".to_vec(),
            create_revision: 1,
            mod_revision: 1,
            version: 1,
        }],
    }
    .to_bytes();
    for (bytes, want) in [
        (flipped, "checksum"),
        (good[..good.len() - 3].to_vec(), "failed to read snapshot"),
        (
            b"{\"not\": \"a snapshot\"}".to_vec(),
            "failed to read snapshot",
        ),
        (whole_store, "outside secrets/"),
        (Vec::new(), "missing snapshot"),
    ] {
        let (status, body) =
            restore(&app, "/v1/sys/storage/raft/snapshot-force", ROOT, bytes).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body["errors"][0].as_str().unwrap().contains(want),
            "{body} lacks {want}"
        );
    }
    assert_eq!(kv_get(&app, ROOT, "x").await.0, StatusCode::OK);
}

#[tokio::test]
async fn the_acl_decides_and_the_schedules_need_sudo() {
    let app = support::dev_kv_v1(ROOT).await;
    let reader = token_with_policy(
        &app,
        ROOT,
        "snap-reader",
        r#"path "sys/storage/raft/snapshot" { capabilities = ["read"] }"#,
    )
    .await;
    let snapshot = take(&app, &reader).await;
    let (status, _) = restore(
        &app,
        "/v1/sys/storage/raft/snapshot",
        &reader,
        snapshot.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = restore(
        &app,
        "/v1/sys/storage/raft/snapshot",
        "nope",
        snapshot.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let writer = token_with_policy(
        &app,
        ROOT,
        "snap-writer",
        r#"path "sys/storage/raft/snapshot" { capabilities = ["update"] }"#,
    )
    .await;
    let (status, body) = restore(&app, "/v1/sys/storage/raft/snapshot", &writer, snapshot).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let config = json!({"storage_type": "local", "interval": "1h", "path_prefix": "/tmp/cairn-never-written", "local_max_space": 1000});
    let plain = token_with_policy(
        &app,
        ROOT,
        "auto-plain",
        r#"path "sys/storage/raft/snapshot-auto/*" { capabilities = ["create", "read", "update", "delete", "list"] }"#,
    )
    .await;
    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/storage/raft/snapshot-auto/config/daily",
        Some(&plain),
        Some(config.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no sudo");
    let sudo = token_with_policy(
        &app,
        ROOT,
        "auto-sudo",
        r#"path "sys/storage/raft/snapshot-auto/*" { capabilities = ["create", "read", "update", "delete", "list", "sudo"] }"#,
    )
    .await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/storage/raft/snapshot-auto/config/daily",
        Some(&sudo),
        Some(config),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = call(
        &app,
        "LIST",
        "/v1/sys/storage/raft/snapshot-auto/config",
        Some(&plain),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The status is not sudo-protected (as in Vault).
    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/storage/raft/snapshot-auto/status/daily",
        Some(&plain),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn schedules_read_back_in_their_writers_spelling_without_credentials_and_list_and_delete() {
    let app = support::dev(ROOT).await;
    let path = "/v1/sys/storage/raft/snapshot-auto/config";
    let s3 = json!({
        "storage_type": "aws-s3", "interval": "24h", "retain": 3, "path_prefix": "nightly",
        "aws_s3_bucket": "backups", "aws_s3_region": "eu-west-1",
        "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "very-secret-key",
        "aws_s3_endpoint": "127.0.0.1:9", "aws_s3_disable_tls": true, "aws_s3_force_path_style": true,
    });
    let (status, body) = call(
        &app,
        "POST",
        &format!("{path}/nightly"),
        Some(ROOT),
        Some(s3),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let gcs = json!({
        "storage_type": "cloud-c-object", "interval": 3600, "path_prefix": "hourly/",
        "cloud_c_bucket": "b", "cloud_c_endpoint": "http://127.0.0.1:9",
        "cloud_c_service_account_key": "{\"type\": \"service_account\", \"private_key\": \"k\", \"private_key_id\": \"i\", \"client_email\": \"e\", \"disable_oauth\": true}",
    });
    let (status, body) = call(
        &app,
        "POST",
        &format!("{path}/hourly"),
        Some(ROOT),
        Some(gcs),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let (status, body) = call(&app, "GET", &format!("{path}/nightly"), Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["storage_type"], "aws-s3");
    assert_eq!(data["interval"], 86_400);
    assert_eq!(data["retain"], 3);
    assert_eq!(data["file_prefix"], "store-snapshot");
    assert_eq!(data["aws_s3_bucket"], "backups");
    assert_eq!(data["aws_s3_force_path_style"], true);
    let text = body.to_string();
    assert!(
        !text.contains("very-secret-key") && !text.contains("AKIAEXAMPLE"),
        "{text}"
    );

    let (_, body) = call(&app, "GET", &format!("{path}/hourly"), Some(ROOT), None).await;
    assert_eq!(body["data"]["storage_type"], "cloud-c-object");
    assert_eq!(body["data"]["cloud_c_bucket"], "b");
    assert!(!body.to_string().contains("private_key"), "{body}");

    // An update that names only the interval keeps everything else.
    let (status, _) = call(
        &app,
        "POST",
        &format!("{path}/nightly"),
        Some(ROOT),
        Some(json!({"interval": "12h"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&app, "GET", &format!("{path}/nightly"), Some(ROOT), None).await;
    assert_eq!(
        (
            body["data"]["interval"].clone(),
            body["data"]["aws_s3_bucket"].clone()
        ),
        (json!(43_200), json!("backups"))
    );

    let (status, body) = call(&app, "LIST", path, Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["hourly", "nightly"]));

    // Never run yet: Go's zero times and no URL.
    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/storage/raft/snapshot-auto/status/nightly",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["last_snapshot_start"], "0001-01-01T00:00:00Z");
    assert_eq!(body["data"]["last_snapshot_url"], "");

    let (status, body) = call(&app, "POST", &format!("{path}/bad"), Some(ROOT), Some(json!({"storage_type": "google-gcs", "interval": 60, "path_prefix": "no-slash", "google_gcs_bucket": "b"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["errors"][0].as_str().unwrap().contains("trailing")
            || body["errors"][0].as_str().unwrap().contains("slash"),
        "{body}"
    );

    for name in ["nightly", "hourly"] {
        let (status, _) = call(&app, "DELETE", &format!("{path}/{name}"), Some(ROOT), None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    let (status, _) = call(&app, "GET", &format!("{path}/nightly"), Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "GET",
        "/v1/sys/storage/raft/snapshot-auto/status/nightly",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "LIST", path, Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
