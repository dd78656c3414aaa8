//! `sys/mounts`, `sys/remount` and `sys/auth` through the router (docs/design.md §U5): engines at
//! custom paths, one type several times, conflicts, reserved paths, unknown types, tune,
//! remount, disable, and the table surviving a restart.

mod support;

use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};
use storage::Storage;
use support::{call, dev, dev_over, token_with_policy};

const ROOT: &str = "root";

/// What hvac's `enable_secrets_engine` sends: nulls for what it was not given.
fn hvac_enable(kind: &str) -> Value {
    json!({
        "type": kind, "description": null, "config": null, "options": null,
        "plugin_name": null, "local": false, "seal_wrap": false,
    })
}

async fn enable(app: &axum::Router, path: &str, body: Value) -> (StatusCode, Value) {
    call(
        app,
        "POST",
        &format!("/v1/sys/mounts/{path}"),
        Some(ROOT),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn dev_mode_lists_builtin_mounts_and_kv_at_secret() {
    let app = dev(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    let data = body["data"].as_object().unwrap();
    assert_eq!(data["secret/"]["type"], "kv");
    assert_eq!(data["sys/"]["type"], "system");
    assert_eq!(data["identity/"]["type"], "identity");
    assert!(
        !data.contains_key("token/"),
        "auth methods are listed by sys/auth"
    );
    let entry = &data["secret/"];
    for field in [
        "type",
        "description",
        "accessor",
        "uuid",
        "config",
        "options",
        "local",
        "seal_wrap",
        "external_entropy_access",
    ] {
        assert!(entry.get(field).is_some(), "missing {field}: {entry}");
    }
    assert_eq!(entry["config"]["default_lease_ttl"], 0);
    assert_eq!(entry["config"]["max_lease_ttl"], 0);
    assert_eq!(entry["config"]["force_no_cache"], false);
    // kv version 2, as Vault's dev server mounts it.
    assert_eq!(entry["options"], json!({"version": "2"}));
}

#[tokio::test]
async fn one_engine_type_mounts_at_several_custom_paths_with_separate_data() {
    let app = dev(ROOT).await;
    assert_eq!(
        enable(&app, "team-a", hvac_enable("kv")).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        enable(&app, "team/b/", hvac_enable("kv")).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(body["team-a/"]["type"], "kv");
    assert_eq!(body["team/b/"]["type"], "kv");
    assert_ne!(body["team-a/"]["accessor"], body["team/b/"]["accessor"]);
    assert_ne!(body["team-a/"]["uuid"], body["team/b/"]["uuid"]);

    call(
        &app,
        "PUT",
        "/v1/team-a/x",
        Some(ROOT),
        Some(json!({"owner": "a"})),
    )
    .await;
    call(
        &app,
        "PUT",
        "/v1/team/b/x",
        Some(ROOT),
        Some(json!({"owner": "b"})),
    )
    .await;
    let (_, a) = call(&app, "GET", "/v1/team-a/x", Some(ROOT), None).await;
    let (_, b) = call(&app, "GET", "/v1/team/b/x", Some(ROOT), None).await;
    assert_eq!(a["data"]["owner"], "a");
    assert_eq!(b["data"]["owner"], "b");
    let (status, _) = call(&app, "GET", "/v1/secret/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn enable_reads_config_and_options() {
    let app = dev(ROOT).await;
    let (status, body) = enable(
        &app,
        "cfg",
        json!({"type": "kv", "description": "team kv", "config": {"default_lease_ttl": "1h", "max_lease_ttl": 7200}, "options": {"version": "1"}}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(&app, "GET", "/v1/sys/mounts/cfg", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["description"], "team kv");
    assert_eq!(body["data"]["config"]["default_lease_ttl"], 3600);
    assert_eq!(body["data"]["config"]["max_lease_ttl"], 7200);
    assert_eq!(body["data"]["options"], json!({"version": "1"}));
}

#[tokio::test]
async fn overlapping_paths_are_409() {
    let app = dev(ROOT).await;
    let (status, body) = enable(&app, "secret", hvac_enable("kv")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({"errors": ["path is already in use at secret/"]})
    );
    let (status, _) = enable(&app, "secret/inner", hvac_enable("kv")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    enable(&app, "outer/inner", hvac_enable("kv")).await;
    let (status, body) = enable(&app, "outer", hvac_enable("kv")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({"errors": ["path is already in use at outer/inner/"]})
    );
}

#[tokio::test]
async fn reserved_paths_are_403() {
    let app = dev(ROOT).await;
    for (path, shown) in [
        ("sys", "sys/"),
        ("sys/x", "sys/x/"),
        ("auth/x", "auth/x/"),
        ("identity", "identity/"),
        ("cubbyhole", "cubbyhole/"),
    ] {
        let (status, body) = enable(&app, path, hvac_enable("kv")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(
            body,
            json!({"errors": [format!("cannot mount {shown:?}")]}),
            "{path}"
        );
    }
}

#[tokio::test]
async fn unknown_type_is_400_and_changes_nothing() {
    let app = dev(ROOT).await;
    let (status, body) = enable(&app, "x", hvac_enable("nope")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["unknown backend type: \"nope\""]}));
    let (status, _) = enable(&app, "y", json!({"description": "no type"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // An auth method is not a secrets engine.
    let (status, _) = enable(&app, "z", hvac_enable("userpass")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Unsupported kv version.
    let (status, body) = enable(
        &app,
        "v3",
        json!({"type": "kv", "options": {"version": "3"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["invalid version provided: 3"]}));
    let (_, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    for path in ["x/", "y/", "z/", "v3/"] {
        assert!(body["data"].get(path).is_none(), "{path}");
    }
}

#[tokio::test]
async fn kv_mounts_take_version_1_or_2_and_the_kv_v2_alias() {
    let app = dev(ROOT).await;
    let mounted = [
        ("one", json!({"type": "kv", "options": {"version": "1"}})),
        ("two", json!({"type": "kv", "options": {"version": 2}})),
        ("alias", json!({"type": "kv-v2"})),
        ("alias1", json!({"type": "kv-v1"})),
    ];
    for (path, body) in &mounted {
        let (status, reply) = enable(&app, path, body.clone()).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}: {reply}");
    }
    let (_, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    for (path, version) in [
        ("one/", "1"),
        ("two/", "2"),
        ("alias/", "2"),
        ("alias1/", "1"),
    ] {
        assert_eq!(body["data"][path]["type"], "kv", "{path}");
        assert_eq!(
            body["data"][path]["options"],
            json!({ "version": version }),
            "{path}"
        );
    }
    // A version 2 mount answers on data/; a version 1 mount at the plain path.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/two/data/x",
        Some(ROOT),
        Some(json!({"data": {"v": 2}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "GET", "/v1/two/data/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "PUT", "/v1/one/x", Some(ROOT), Some(json!({"v": 1}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Only kv takes a version.
    let (status, body) = enable(
        &app,
        "up",
        json!({"type": "userpass", "options": {"version": "2"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body,
        json!({"errors": ["secrets engine \"userpass\" does not allow setting a version"]})
    );
}

#[tokio::test]
async fn tuning_a_kv_mount_to_version_2_upgrades_its_secrets_and_never_goes_back() {
    let app = dev(ROOT).await;
    enable(&app, "legacy", hvac_enable("kv")).await;
    call(
        &app,
        "PUT",
        "/v1/legacy/app/db",
        Some(ROOT),
        Some(json!({"user": "a"})),
    )
    .await;
    let tune = |version: Value| json!({"options": {"version": version}});
    for bad in [json!("3"), json!("x")] {
        let (status, body) = call(
            &app,
            "POST",
            "/v1/sys/mounts/legacy/tune",
            Some(ROOT),
            Some(tune(bad)),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/legacy/tune",
        Some(ROOT),
        Some(tune(json!("2"))),
    )
    .await;
    assert!(status.is_success(), "{body}");
    let (status, body) = call(&app, "GET", "/v1/legacy/data/app/db", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["data"], json!({"user": "a"}));
    assert_eq!(body["data"]["metadata"]["version"], 1);
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/legacy/tune",
        Some(ROOT),
        Some(tune(json!("1"))),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"errors": ["cannot downgrade mount from version 2"]})
    );
}

#[tokio::test]
async fn tune_reads_system_defaults_and_writes_ttls_and_description() {
    let app = dev(ROOT).await;
    enable(&app, "tuned", hvac_enable("kv")).await;
    let (status, body) = call(&app, "GET", "/v1/sys/mounts/tuned/tune", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["default_lease_ttl"], 2_764_800);
    assert_eq!(body["data"]["max_lease_ttl"], 2_764_800);

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/tuned/tune",
        Some(ROOT),
        Some(
            json!({"default_lease_ttl": "1h", "max_lease_ttl": "24h", "description": "tuned one"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, body) = call(&app, "GET", "/v1/sys/mounts/tuned/tune", Some(ROOT), None).await;
    assert_eq!(body["data"]["default_lease_ttl"], 3600);
    assert_eq!(body["data"]["max_lease_ttl"], 86400);
    assert_eq!(body["data"]["description"], "tuned one");
    let (_, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(body["tuned/"]["config"]["max_lease_ttl"], 86400);

    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/mounts/tuned/tune",
        Some(ROOT),
        Some(json!({"default_lease_ttl": "48h"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(&app, "GET", "/v1/sys/mounts/absent/tune", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn remount_moves_the_mount_and_keeps_its_data() {
    let app = dev(ROOT).await;
    enable(&app, "old", hvac_enable("kv")).await;
    call(&app, "PUT", "/v1/old/x", Some(ROOT), Some(json!({"v": 7}))).await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/remount",
        Some(ROOT),
        Some(json!({"from": "old", "to": "new/"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body["data"]["migration_id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &app,
        "GET",
        &format!("/v1/sys/remount/status/{id}"),
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["migration_info"]["status"], "success");

    let (_, body) = call(&app, "GET", "/v1/new/x", Some(ROOT), None).await;
    assert_eq!(body["data"]["v"], 7);
    let (status, _) = call(&app, "GET", "/v1/old/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert!(body["data"].get("old/").is_none());
    assert_eq!(body["data"]["new/"]["type"], "kv");

    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/remount",
        Some(ROOT),
        Some(json!({"from": "new", "to": "secret"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/remount",
        Some(ROOT),
        Some(json!({"from": "absent", "to": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/remount",
        Some(ROOT),
        Some(json!({"from": "new", "to": "sys/x"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/remount",
        Some(ROOT),
        Some(json!({"from": "sys", "to": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn disable_removes_the_mount_and_its_data() {
    let app = dev(ROOT).await;
    enable(&app, "gone", hvac_enable("kv")).await;
    call(&app, "PUT", "/v1/gone/x", Some(ROOT), Some(json!({"v": 1}))).await;
    let (status, _) = call(&app, "DELETE", "/v1/sys/mounts/gone", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&app, "GET", "/v1/gone/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["errors"][0],
        "no handler for route \"gone/x\". route entry not found."
    );
    // Mounting again at the same path starts empty.
    enable(&app, "gone", hvac_enable("kv")).await;
    let (status, _) = call(&app, "GET", "/v1/gone/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Missing mounts are fine.
    let (status, _) = call(&app, "DELETE", "/v1/sys/mounts/never", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Built-ins cannot go.
    let (status, _) = call(&app, "DELETE", "/v1/sys/mounts/sys", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn mount_table_and_data_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("unseal.key");
    let storage: Arc<dyn Storage> = Arc::new(storage::MemStorage::new());
    let app = dev_over(storage.clone(), ROOT, Some(key_file.clone())).await;
    enable(
        &app,
        "kept",
        json!({"type": "kv", "description": "kept kv"}),
    )
    .await;
    call(&app, "PUT", "/v1/kept/x", Some(ROOT), Some(json!({"v": 1}))).await;
    call(&app, "DELETE", "/v1/sys/mounts/secret", Some(ROOT), None).await;
    let (_, before) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    drop(app);

    let app = dev_over(storage, ROOT, Some(key_file)).await;
    let (_, after) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(before["data"], after["data"]);
    assert!(
        after["data"].get("secret/").is_none(),
        "a disabled secret/ stays disabled"
    );
    let (_, body) = call(&app, "GET", "/v1/kept/x", Some(ROOT), None).await;
    assert_eq!(body["data"]["v"], 1);
}

#[tokio::test]
async fn sys_auth_enables_lists_tunes_and_disables_methods_at_any_path() {
    let app = dev(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/sys/auth", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["token/"]["type"], "token");
    assert_eq!(body["token/"]["type"], "token");

    for path in ["userpass", "corp/people"] {
        let (status, body) = call(
            &app,
            "POST",
            &format!("/v1/sys/auth/{path}"),
            Some(ROOT),
            Some(json!({"type": "userpass", "description": null, "config": null})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}: {body}");
    }
    let (_, body) = call(&app, "GET", "/v1/sys/auth", Some(ROOT), None).await;
    assert_eq!(body["data"]["userpass/"]["type"], "userpass");
    assert_eq!(body["data"]["corp/people/"]["type"], "userpass");
    assert!(
        body["data"]["userpass/"]["accessor"]
            .as_str()
            .unwrap()
            .starts_with("auth_userpass_")
    );

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/auth/userpass",
        Some(ROOT),
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/auth/kvauth",
        Some(ROOT),
        Some(json!({"type": "kv"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/auth/userpass/tune",
        Some(ROOT),
        Some(json!({"max_lease_ttl": "2h"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(&app, "GET", "/v1/sys/auth/userpass/tune", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["max_lease_ttl"], 7200);

    let (status, _) = call(&app, "DELETE", "/v1/sys/auth/userpass", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&app, "GET", "/v1/sys/auth", Some(ROOT), None).await;
    assert!(body["data"].get("userpass/").is_none());
    assert_eq!(body["data"]["corp/people/"]["type"], "userpass");
    let (status, _) = call(&app, "DELETE", "/v1/sys/auth/token", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn enabling_auth_methods_needs_sudo_but_mounts_do_not() {
    let app = dev(ROOT).await;
    let policy = r#"path "sys/auth/*" { capabilities = ["create", "update", "read"] }
path "sys/mounts/*" { capabilities = ["create", "update", "read"] }"#;
    let token = token_with_policy(&app, ROOT, "mounter", policy).await;

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/mine",
        Some(&token),
        Some(json!({"type": "kv"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = call(
        &app,
        "POST",
        "/v1/sys/auth/mine",
        Some(&token),
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
