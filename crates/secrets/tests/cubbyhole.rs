//! The `cubbyhole/` mount through the router: present in dev and server stores and listed by
//! `sys/mounts` as Vault lists it, per-token storage (read, write, LIST, delete), gone with
//! its token (revoked or expired, counted in the store itself), kept across a restart, and
//! impossible to unmount, move or mount again.

mod support;

use std::sync::Arc;

use http::StatusCode;
use secrets::State;
use serde_json::{Value, json};
use storage::Storage;
use support::{call, create_token, dev, dev_config, dev_over, init, server, unseal};

const ROOT: &str = "root";

/// The number of stored keys under the cubbyhole mount's barrier prefix (keys are stored in
/// clear under `secrets/barrier/`, values encrypted).
async fn cubbyhole_keys(app: &axum::Router, storage: &Arc<dyn Storage>) -> usize {
    let (_, mounts) = call(app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    let uuid = mounts["data"]["cubbyhole/"]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let prefix = format!("secrets/barrier/logical/{uuid}/");
    let scan = storage
        .scan(storage::KeyRange::prefix(prefix.as_bytes()), None)
        .await
        .unwrap();
    scan.kvs.len()
}

#[tokio::test]
async fn cubbyhole_is_listed_by_sys_mounts_as_vault_lists_it() {
    let app = dev(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    let entry = &body["data"]["cubbyhole/"];
    assert_eq!(entry["type"], "cubbyhole", "{body}");
    assert_eq!(entry["description"], "per-token private secret storage");
    assert_eq!(entry["local"], true);
    assert_eq!(entry["seal_wrap"], false);
    assert_eq!(entry["options"], Value::Null);
    assert!(
        entry["accessor"]
            .as_str()
            .unwrap()
            .starts_with("cubbyhole_")
    );
    assert_eq!(
        body["cubbyhole/"], *entry,
        "sys/mounts repeats data at the top level"
    );
}

#[tokio::test]
async fn server_stores_mount_cubbyhole_too() {
    let app = server(testkit::mem_storage()).await;
    let (keys, root) = init(&app, 1, 1).await;
    unseal(&app, &keys).await;
    let token = Some(root.as_str());
    let (status, body) = call(&app, "GET", "/v1/sys/mounts", token, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["cubbyhole/"]["type"], "cubbyhole", "{body}");
    let (status, _) = call(&app, "PUT", "/v1/cubbyhole/x", token, Some(json!({"v": 1}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&app, "GET", "/v1/cubbyhole/x", token, None).await;
    assert_eq!((status, &body["data"]), (StatusCode::OK, &json!({"v": 1})));
}

#[tokio::test]
async fn write_read_list_and_delete_answer_as_vault() {
    let app = dev(ROOT).await;
    let root = Some(ROOT);
    let secret = json!({"password": "hunter2", "n": 3});
    let (status, body) = call(
        &app,
        "POST",
        "/v1/cubbyhole/app/db",
        root,
        Some(secret.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    call(
        &app,
        "POST",
        "/v1/cubbyhole/top",
        root,
        Some(json!({"v": 1})),
    )
    .await;

    let (status, body) = call(&app, "GET", "/v1/cubbyhole/app/db", root, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"], secret);
    assert_eq!(body["lease_duration"], 0);

    let (status, body) = call(&app, "LIST", "/v1/cubbyhole", root, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["keys"], json!(["app/", "top"]));
    let (_, body) = call(&app, "GET", "/v1/cubbyhole/app?list=true", root, None).await;
    assert_eq!(body["data"]["keys"], json!(["db"]));

    let (status, _) = call(&app, "DELETE", "/v1/cubbyhole/app/db", root, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&app, "GET", "/v1/cubbyhole/app/db", root, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"errors": []}))
    );
    let (status, _) = call(&app, "LIST", "/v1/cubbyhole/app", root, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = call(&app, "POST", "/v1/cubbyhole/empty", root, Some(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["missing data fields"]}));
}

#[tokio::test]
async fn each_token_sees_only_its_own_cubbyhole() {
    let app = dev(ROOT).await;
    call(
        &app,
        "PUT",
        "/v1/cubbyhole/shared-name",
        Some(ROOT),
        Some(json!({"owner": "root"})),
    )
    .await;
    // A child holding only `default`, whose `cubbyhole/*` rule is all it needs here.
    let (child, _) = create_token(&app, ROOT, json!({"policies": ["default"]})).await;
    let child = Some(child.as_str());

    let (status, _) = call(&app, "GET", "/v1/cubbyhole/shared-name", child, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "LIST", "/v1/cubbyhole", child, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/cubbyhole/shared-name",
        child,
        Some(json!({"owner": "child"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (_, body) = call(&app, "GET", "/v1/cubbyhole/shared-name", child, None).await;
    assert_eq!(body["data"], json!({"owner": "child"}));
    let (_, body) = call(&app, "GET", "/v1/cubbyhole/shared-name", Some(ROOT), None).await;
    assert_eq!(body["data"], json!({"owner": "root"}));
}

#[tokio::test]
async fn revoking_a_token_destroys_its_cubbyhole() {
    let storage = testkit::mem_storage();
    let storage_dyn: Arc<dyn Storage> = storage.clone();
    let app = dev_over(storage.clone(), ROOT, None).await;
    let (token, _) = create_token(&app, ROOT, json!({"policies": ["default"]})).await;
    for path in ["a", "b/c"] {
        let (status, _) = call(
            &app,
            "PUT",
            &format!("/v1/cubbyhole/{path}"),
            Some(&token),
            Some(json!({"v": 1})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    call(
        &app,
        "PUT",
        "/v1/cubbyhole/kept",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    assert_eq!(cubbyhole_keys(&app, &storage_dyn).await, 3);

    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke-self",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        cubbyhole_keys(&app, &storage_dyn).await,
        1,
        "only root's entry is left"
    );
}

#[tokio::test]
async fn an_expired_tokens_cubbyhole_goes_with_it() {
    let storage = testkit::mem_storage();
    let storage_dyn: Arc<dyn Storage> = storage.clone();
    let clock = testkit::ManualClock::at_system_time();
    let state = State::open_with_clock(
        storage.clone(),
        dev_config(ROOT, None),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    let app = secrets::router(state);
    let (token, _) = create_token(&app, ROOT, json!({"policies": ["default"], "ttl": "1m"})).await;
    call(
        &app,
        "PUT",
        "/v1/cubbyhole/a",
        Some(&token),
        Some(json!({"v": 1})),
    )
    .await;
    assert_eq!(cubbyhole_keys(&app, &storage_dyn).await, 1);

    clock.advance(std::time::Duration::from_secs(61));
    let (status, _) = call(&app, "GET", "/v1/cubbyhole/a", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an expired token is refused");
    // The expiry pass the lease loop runs every second, asked for directly.
    let (status, _) = call(&app, "POST", "/v1/auth/token/tidy", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cubbyhole_keys(&app, &storage_dyn).await, 0);
}

#[tokio::test]
async fn cubbyhole_data_survives_a_restart() {
    let mut store = testkit::TempStore::new();
    let key_path = store.dir().join("unseal.key");
    let app = dev_over(store.storage(), ROOT, Some(key_path.clone())).await;
    call(
        &app,
        "PUT",
        "/v1/cubbyhole/a",
        Some(ROOT),
        Some(json!({"v": "kept"})),
    )
    .await;
    let (_, before) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    drop(app);

    store.reopen().await;
    let app = dev_over(store.storage(), ROOT, Some(key_path)).await;
    let (_, after) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(
        after["data"]["cubbyhole/"]["uuid"],
        before["data"]["cubbyhole/"]["uuid"]
    );
    let (status, body) = call(&app, "GET", "/v1/cubbyhole/a", Some(ROOT), None).await;
    assert_eq!(
        (status, &body["data"]),
        (StatusCode::OK, &json!({"v": "kept"}))
    );
}

#[tokio::test]
async fn cubbyhole_cannot_be_unmounted_moved_or_mounted_again() {
    let app = dev(ROOT).await;
    let root = Some(ROOT);
    let (status, body) = call(&app, "DELETE", "/v1/sys/mounts/cubbyhole", root, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["cannot unmount \"cubbyhole/\""]}));

    let move_it = json!({"from": "cubbyhole", "to": "elsewhere"});
    let (status, _) = call(&app, "POST", "/v1/sys/remount", root, Some(move_it)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/second",
        root,
        Some(json!({"type": "cubbyhole"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body,
        json!({"errors": ["mount type of \"cubbyhole\" is not mountable"]})
    );

    let (_, body) = call(&app, "GET", "/v1/sys/mounts", root, None).await;
    assert_eq!(body["data"]["cubbyhole/"]["type"], "cubbyhole");
    assert!(body["data"].get("second/").is_none() && body["data"].get("elsewhere/").is_none());
}
