//! Seal API tests: `sys/init`, `sys/unseal`, `sys/seal-status`, `sys/seal`, `sys/health` codes,
//! `sys/rotate` and `sys/key-status`, restarts in server mode (sealed, unsealed by shares) and
//! in dev mode (unsealed by the dev key file), all through the router.

mod support;

use std::sync::Arc;

use http::StatusCode;
use secrets::{Config, State};
use serde_json::{Value, json};
use storage::{MemStorage, Storage};
use support::{call, init, server, unseal};

fn mem() -> Arc<dyn Storage> {
    Arc::new(MemStorage::new())
}

async fn seal_status(app: &axum::Router) -> Value {
    let (status, body) = call(app, "GET", "/v1/sys/seal-status", None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn submit(app: &axum::Router, key: &str) -> (StatusCode, Value) {
    call(
        app,
        "PUT",
        "/v1/sys/unseal",
        None,
        Some(json!({"key": key})),
    )
    .await
}

/// A share with one y byte changed: well formed, but reconstructs the wrong key.
fn corrupt(share: &str) -> String {
    let mut bytes: Vec<char> = share.chars().collect();
    let last = bytes.len() - 1;
    bytes[last] = if bytes[last] == '0' { '1' } else { '0' };
    bytes.into_iter().collect()
}

#[tokio::test]
async fn init_returns_shares_and_root_token_and_leaves_the_store_sealed() {
    let app = server(mem()).await;
    let (status, body) = call(&app, "GET", "/v1/sys/init", None, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"initialized": false}))
    );
    let status = seal_status(&app).await;
    assert_eq!(status["initialized"], false);
    assert_eq!(status["sealed"], true);
    assert_eq!(
        (status["t"].clone(), status["n"].clone()),
        (json!(0), json!(0))
    );

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": 5, "secret_threshold": 3, "root_token_pgp_key": null})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let keys = body["keys"].as_array().unwrap();
    let keys_b64 = body["keys_base64"].as_array().unwrap();
    assert_eq!((keys.len(), keys_b64.len()), (5, 5));
    for key in keys {
        assert_eq!(key.as_str().unwrap().len(), 66, "33 bytes in hex");
    }
    assert!(!body["root_token"].as_str().unwrap().is_empty());

    let (_, body) = call(&app, "GET", "/v1/sys/init", None, None).await;
    assert_eq!(body, json!({"initialized": true}));
    let status = seal_status(&app).await;
    assert_eq!(status["type"], "shamir");
    assert_eq!(status["initialized"], true);
    assert_eq!(status["sealed"], true);
    assert_eq!(
        (status["t"].clone(), status["n"].clone()),
        (json!(3), json!(5))
    );
    assert_eq!(status["progress"], 0);
    assert_eq!(status["nonce"], "");
    for field in [
        "version",
        "build_date",
        "cluster_name",
        "cluster_id",
        "storage_type",
    ] {
        assert!(status[field].is_string(), "{field} in {status}");
    }
    assert_eq!(status["migration"], false);
    assert_eq!(status["recovery_seal"], false);
}

#[tokio::test]
async fn any_three_of_five_shares_unseal_and_base64_shares_work_too() {
    let storage = mem();
    let app = server(storage.clone()).await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": 5, "secret_threshold": 3})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let hex: Vec<String> = serde_json::from_value(body["keys"].clone()).unwrap();
    let b64: Vec<String> = serde_json::from_value(body["keys_base64"].clone()).unwrap();
    // Each subset on a fresh process over the same store (a restart comes up sealed).
    for subset in [[0, 1, 2], [2, 3, 4], [4, 0, 3]] {
        let app = server(storage.clone()).await;
        assert_eq!(seal_status(&app).await["sealed"], true);
        let (status, first) = submit(&app, &hex[subset[0]]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(first["sealed"], true);
        assert_eq!(first["progress"], 1);
        assert!(!first["nonce"].as_str().unwrap().is_empty());
        let (_, second) = submit(&app, &b64[subset[1]]).await;
        assert_eq!(second["progress"], 2);
        assert_eq!(second["nonce"], first["nonce"], "one round, one nonce");
        let (status, third) = submit(&app, &hex[subset[2]]).await;
        assert_eq!(status, StatusCode::OK, "{third}");
        assert_eq!(third["sealed"], false, "{third}");
        assert_eq!(third["progress"], 0);
        // More shares once unsealed: still the status.
        let (status, again) = submit(&app, &hex[0]).await;
        assert_eq!(
            (status, again["sealed"].clone()),
            (StatusCode::OK, json!(false))
        );
    }
}

#[tokio::test]
async fn two_shares_do_not_unseal_and_a_wrong_share_resets_progress() {
    let app = server(mem()).await;
    let (keys, _) = init(&app, 5, 3).await;

    submit(&app, &keys[0]).await;
    let (_, body) = submit(&app, &keys[1]).await;
    assert_eq!(
        (body["sealed"].clone(), body["progress"].clone()),
        (json!(true), json!(2))
    );
    // The same share again does not count twice.
    let (status, body) = submit(&app, &keys[1]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["progress"], 2);

    // A well-formed but wrong third share: 400, sealed, and the round starts over.
    let (status, body) = submit(&app, &corrupt(&keys[2])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body, json!({"errors": ["Unseal failed, invalid key"]}));
    let status = seal_status(&app).await;
    assert_eq!(
        (status["sealed"].clone(), status["progress"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(status["nonce"], "");

    // Two good shares after the reset are still not enough; `reset` drops them.
    submit(&app, &keys[3]).await;
    submit(&app, &keys[4]).await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/unseal",
        None,
        Some(json!({"reset": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["sealed"].clone(), body["progress"].clone()),
        (json!(true), json!(0))
    );

    unseal(&app, &keys[2..5]).await;
}

#[tokio::test]
async fn unseal_input_errors_are_400_with_vaults_messages() {
    let app = server(mem()).await;
    let (status, body) = submit(&app, "abcd").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["Vault is not initialized"]}));

    let (keys, _) = init(&app, 3, 2).await;
    let (status, body) = call(&app, "PUT", "/v1/sys/unseal", None, Some(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["errors"][0],
        "'key' must be specified in request body as JSON, or 'reset' set to true"
    );
    let (status, body) = call(&app, "PUT", "/v1/sys/unseal", None, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = submit(&app, "not a key!").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["errors"][0],
        "'key' must be a valid hex or base64 string"
    );
    let (status, _) = call(&app, "PUT", "/v1/sys/unseal", None, Some(json!({"key": 7}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/sys/unseal",
        None,
        Some(json!({"key": keys[0], "reset": "maybe"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(&app, "PUT", "/v1/sys/unseal", None, Some(json!(["x"]))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(&app, "GET", "/v1/sys/unseal", None, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // None of that counted as a share.
    assert_eq!(seal_status(&app).await["progress"], 0);
    unseal(&app, &keys[..2]).await;
}

#[tokio::test]
async fn init_rejects_bad_configurations_pgp_keys_and_a_second_init() {
    let app = server(mem()).await;
    for (body, message) in [
        (
            json!({}),
            "invalid seal configuration: shares must be at least one",
        ),
        (
            json!({"secret_shares": 3, "secret_threshold": 1}),
            "invalid seal configuration: threshold must be greater than one for multiple shares",
        ),
        (
            json!({"secret_shares": 2, "secret_threshold": 3}),
            "invalid seal configuration: threshold cannot be larger than shares",
        ),
        (
            json!({"secret_shares": 256, "secret_threshold": 3}),
            "invalid seal configuration: shares must be less than 256",
        ),
    ] {
        let (status, answer) = call(&app, "PUT", "/v1/sys/init", None, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(answer, json!({"errors": [message]}));
    }
    for extra in [
        json!({"pgp_keys": ["a", "b", "c"]}),
        json!({"root_token_pgp_key": "key"}),
        json!({"recovery_shares": 3}),
        json!({"stored_shares": 1}),
        json!({"secret_shares": "many"}),
    ] {
        let mut body = json!({"secret_shares": 3, "secret_threshold": 2});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, answer) = call(&app, "PUT", "/v1/sys/init", None, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    }
    let (status, _) = call(&app, "PUT", "/v1/sys/init", None, Some(json!("[1"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // None of that initialized anything.
    let (_, body) = call(&app, "GET", "/v1/sys/init", None, None).await;
    assert_eq!(body, json!({"initialized": false}));

    // Weakly typed numbers are fine; a second init is refused.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": "1", "secret_threshold": 1, "pgp_keys": []})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": 1, "secret_threshold": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["Vault is already initialized"]}));
}

#[tokio::test]
async fn one_share_is_the_root_key_itself() {
    let app = server(mem()).await;
    let (keys, _) = init(&app, 1, 1).await;
    assert_eq!(keys[0].len(), 64, "a 1-of-1 key is the 32-byte root key");
    unseal(&app, &keys).await;
}

#[tokio::test]
async fn health_codes_follow_uninitialized_sealed_and_active() {
    let app = server(mem()).await;
    let (status, body) = call(&app, "GET", "/v1/sys/health", None, None).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(
        (body["initialized"].clone(), body["sealed"].clone()),
        (json!(false), json!(true))
    );
    let (status, _) = call(&app, "GET", "/v1/sys/health?uninitcode=200", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, "HEAD", "/v1/sys/health", None, None).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);

    let (keys, _) = init(&app, 3, 2).await;
    let (status, body) = call(&app, "GET", "/v1/sys/health", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        (body["initialized"].clone(), body["sealed"].clone()),
        (json!(true), json!(true))
    );
    let (status, _) = call(&app, "GET", "/v1/sys/health?sealedcode=299", None, None).await;
    assert_eq!(status.as_u16(), 299);

    unseal(&app, &keys[..2]).await;
    let (status, body) = call(&app, "GET", "/v1/sys/health", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["initialized"].clone(), body["sealed"].clone()),
        (json!(true), json!(false))
    );
}

#[tokio::test]
async fn everything_else_answers_503_while_sealed() {
    let app = server(mem()).await;
    let (keys, root) = init(&app, 3, 2).await;
    for (method, path) in [
        ("GET", "/v1/auth/token/lookup-self"),
        ("GET", "/v1/sys/mounts"),
        ("PUT", "/v1/sys/seal"),
        ("GET", "/v1/secret/anything"),
        ("LIST", "/v1/sys/policies/acl"),
    ] {
        let (status, body) = call(&app, method, path, Some(&root), None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{method} {path}");
        assert_eq!(
            body,
            json!({"errors": ["Vault is sealed"]}),
            "{method} {path}"
        );
    }
    unseal(&app, &keys[..2]).await;
    let (status, _) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(&root), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn seal_needs_a_sudo_token_then_seals_until_unsealed_again() {
    let app = server(mem()).await;
    let (keys, root) = init(&app, 3, 2).await;
    unseal(&app, &keys[..2]).await;

    let (status, _) = call(&app, "PUT", "/v1/sys/seal", None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A token without sudo on sys/seal cannot seal either.
    let (status, created) = call(
        &app,
        "POST",
        "/v1/auth/token/create",
        Some(&root),
        Some(json!({"policies": ["default"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let plain = created["auth"]["client_token"].as_str().unwrap().to_owned();
    let (status, _) = call(&app, "PUT", "/v1/sys/seal", Some(&plain), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(seal_status(&app).await["sealed"], false);

    let (status, body) = call(&app, "PUT", "/v1/sys/seal", Some(&root), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(seal_status(&app).await["sealed"], true);
    let (status, _) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(&root), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // Unseal again with other shares; the tokens are all still there.
    unseal(&app, &keys[1..3]).await;
    let (status, _) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(&root), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(&plain),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn rotate_adds_a_term_and_old_and_new_values_stay_readable() {
    let storage = mem();
    let app = server(storage.clone()).await;
    let (keys, root) = init(&app, 3, 2).await;
    unseal(&app, &keys[..2]).await;
    let root = Some(root.as_str());

    let (status, body) = call(&app, "GET", "/v1/sys/key-status", root, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["term"], 1, "{body}");
    assert!(
        body["data"]["install_time"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/kv",
        root,
        Some(json!({"type": "kv", "options": {"version": "1"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/kv/old",
        root,
        Some(json!({"v": "before"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, body) = call(&app, "PUT", "/v1/sys/rotate", root, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, body) = call(&app, "GET", "/v1/sys/key-status", root, None).await;
    assert_eq!(body["data"]["term"], 2, "{body}");
    let (status, _) = call(&app, "PUT", "/v1/kv/new", root, Some(json!({"v": "after"}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    for (path, value) in [("old", "before"), ("new", "after")] {
        let (status, body) = call(&app, "GET", &format!("/v1/kv/{path}"), root, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"]["v"], value);
    }

    // After a restart and unseal, both terms still decrypt.
    let app = server(storage).await;
    unseal(&app, &keys[1..]).await;
    let (_, body) = call(&app, "GET", "/v1/sys/key-status", root, None).await;
    assert_eq!(body["data"]["term"], 2, "{body}");
    for (path, value) in [("old", "before"), ("new", "after")] {
        let (status, body) = call(&app, "GET", &format!("/v1/kv/{path}"), root, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"]["v"], value);
    }
}

#[tokio::test]
async fn a_server_restart_comes_up_sealed_and_unseals_with_the_shares() {
    let storage = mem();
    let app = server(storage.clone()).await;
    let (keys, root) = init(&app, 5, 3).await;
    unseal(&app, &keys[..3]).await;
    let (status, _) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(&root), None).await;
    assert_eq!(status, StatusCode::OK);

    let app = server(storage).await;
    let status = seal_status(&app).await;
    assert_eq!(
        (status["initialized"].clone(), status["sealed"].clone()),
        (json!(true), json!(true))
    );
    let (status, _) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(&root), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    unseal(&app, &keys[2..]).await;
    let (status, body) = call(&app, "GET", "/v1/auth/token/lookup-self", Some(&root), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn dev_config(key_file: &std::path::Path) -> Config {
    support::dev_config("dev-root", Some(key_file.to_path_buf()))
}

#[tokio::test]
async fn dev_mode_unseals_itself_and_again_after_a_restart_with_its_key_file() {
    let mut store = testkit::TempStore::new();
    let key_file = store.dir().join("unseal.key");

    let state = State::open(store.storage(), dev_config(&key_file))
        .await
        .unwrap();
    let app = secrets::router(state);
    let status = seal_status(&app).await;
    assert_eq!(
        (status["initialized"].clone(), status["sealed"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(
        (status["t"].clone(), status["n"].clone()),
        (json!(1), json!(1))
    );
    let (status, body) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some("dev-root"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let key = std::fs::read_to_string(&key_file).unwrap();
    assert_eq!(key.trim().len(), 64);
    drop(app);
    store.reopen().await;

    // Restart: same store, same key file: unsealed, same key, the root token works.
    let state = State::open(store.storage(), dev_config(&key_file))
        .await
        .unwrap();
    let app = secrets::router(state);
    assert_eq!(seal_status(&app).await["sealed"], false);
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), key);
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some("dev-root"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The dev key also works as an unseal key after a manual seal.
    let (status, _) = call(&app, "PUT", "/v1/sys/seal", Some("dev-root"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    unseal(&app, &[key.trim().to_owned()]).await;
    drop(app);
    store.reopen().await;

    // Without the key file an initialized dev store cannot open: a clear error, no panic.
    let missing = store.dir().join("gone.key");
    let err = State::open(store.storage(), dev_config(&missing))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unseal key file"), "{err}");
}

#[tokio::test]
async fn in_memory_dev_mode_needs_no_key_file() {
    let app = support::dev("root").await;
    assert_eq!(seal_status(&app).await["sealed"], false);
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some("root"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}
