//! The disk test: a server-mode store on redb in a temporary directory is initialised,
//! unsealed and filled with known secret values through the HTTP API (kv writes, a token, a
//! policy, a userpass user, a key rotation); the store is closed; then every file in the
//! directory is read as bytes and none of the known values, the shares, the root key or the
//! root token may appear in it. (The barrier's own unit test does the same for values written
//! straight through the barrier: `barrier::tests`.)

mod support;

use std::path::Path;
use std::sync::Arc;

use http::StatusCode;
use serde_json::json;
use storage::Storage;
use support::{call, server, unseal};

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn no_secret_value_reaches_the_data_directory_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> =
        Arc::new(storage_redb::RedbStorage::open(&dir.path().join("cairn.redb")).unwrap());
    let app = server(storage.clone()).await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/init",
        None,
        Some(json!({"secret_shares": 3, "secret_threshold": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let keys: Vec<String> = serde_json::from_value(body["keys"].clone()).unwrap();
    let keys_b64: Vec<String> = serde_json::from_value(body["keys_base64"].clone()).unwrap();
    let root_token = body["root_token"].as_str().unwrap().to_owned();
    unseal(&app, &keys[..2]).await;
    let root = Some(root_token.as_str());

    let mut secrets: Vec<String> = Vec::new();
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/mounts/vault",
        root,
        Some(json!({"type": "kv", "options": {"version": "1"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for i in 0..40 {
        let value = format!("known-secret-{i}-{}", uuid::Uuid::new_v4().simple());
        let (status, body) = call(
            &app,
            "PUT",
            &format!("/v1/vault/app/item{i}"),
            root,
            Some(json!({"password": value})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        secrets.push(value);
        if i == 20 {
            let (status, body) = call(&app, "PUT", "/v1/sys/rotate", root, None).await;
            assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        }
    }
    // A token, whose id is a secret too.
    let (status, created) = call(
        &app,
        "POST",
        "/v1/auth/token/create",
        root,
        Some(json!({"policies": ["default"], "meta": {"note": "token-meta-secret-9f3a"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    secrets.push(created["auth"]["client_token"].as_str().unwrap().to_owned());
    secrets.push("token-meta-secret-9f3a".to_owned());
    // A policy document.
    let policy = r#"path "vault/app/policy-marker-77c1/*" { capabilities = ["read"] }"#;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/acl/marker",
        root,
        Some(json!({"policy": policy})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    secrets.push("policy-marker-77c1".to_owned());

    // A userpass user (the password is hashed, then encrypted) and a login with it.
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/auth/userpass",
        root,
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/userpass/users/alice",
        root,
        Some(json!({"password": password, "policies": "default"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, login) = call(
        &app,
        "POST",
        "/v1/auth/userpass/login/alice",
        None,
        Some(json!({"password": password})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{login}");
    secrets.push(password);
    secrets.push(login["auth"]["client_token"].as_str().unwrap().to_owned());

    // Everything reads back before the store closes.
    let (status, body) = call(&app, "GET", "/v1/vault/app/item0", root, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["password"], secrets[0].as_str());
    drop(app);
    storage.close().await.unwrap();
    drop(storage);

    // The root key, rebuilt from two shares, must not be on disk either.
    let shares: Vec<blahaj::Share> = keys[..2]
        .iter()
        .map(|k| {
            let bytes = stdx::hex::decode(k).unwrap();
            blahaj::Share::try_from(bytes.as_slice()).unwrap()
        })
        .collect();
    let root_key = blahaj::Sharks(2).recover(&shares).unwrap();
    assert_eq!(root_key.len(), 32);

    let mut needles: Vec<Vec<u8>> = secrets.iter().map(|s| s.as_bytes().to_vec()).collect();
    needles.push(root_token.as_bytes().to_vec());
    needles.push(root_key.clone());
    needles.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
    needles.extend(keys_b64.iter().map(|k| k.as_bytes().to_vec()));
    let found = files(dir.path());
    assert!(!found.is_empty());
    for path in &found {
        let bytes = std::fs::read(path).unwrap();
        for needle in &needles {
            assert!(
                !contains(&bytes, needle),
                "{} holds a known secret in clear ({} bytes)",
                path.display(),
                needle.len()
            );
        }
    }

    // The data really is in there: reopen, unseal, read.
    let storage: Arc<dyn Storage> =
        Arc::new(storage_redb::RedbStorage::open(&dir.path().join("cairn.redb")).unwrap());
    let app = server(storage.clone()).await;
    unseal(&app, &keys[1..]).await;
    let (status, body) = call(&app, "GET", "/v1/vault/app/item39", root, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["password"], secrets[39].as_str());
    drop(app);
    storage.close().await.unwrap();
}

#[tokio::test]
async fn the_disk_test_would_notice_a_value_stored_in_clear() {
    // Control: the same scan finds a value written around the barrier, so a pass above means
    // something.
    let dir = tempfile::tempdir().unwrap();
    let storage = storage_redb::RedbStorage::open(&dir.path().join("cairn.redb")).unwrap();
    storage::StorageExt::put(&storage, b"secrets/plain", b"visible-marker-1234")
        .await
        .unwrap();
    storage.close().await.unwrap();
    let hit = files(dir.path())
        .iter()
        .any(|p| contains(&std::fs::read(p).unwrap(), b"visible-marker-1234"));
    assert!(hit);
}
