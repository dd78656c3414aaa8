//! Credentials encrypted at rest under the platform's encryption password, over a redb store
//! on disk: after setting an SMTP password, an SMS auth token, cost-estimation secrets and a
//! VCS OAuth token (and issuing a signed upload URL, which creates the signing key), neither
//! the store's values nor its files hold any of them in clear; after a restart with the same
//! password everything still works (the SMS verification reaches a provider stub on
//! 127.0.0.1 with the right basic auth, an upload URL issued before the restart is accepted,
//! settings read back); a wrong or missing password is a clear start-up error; and records an
//! older release stored in clear still read and are sealed at start-up.

mod fixtures;
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path as AxumPath, State as AxumState};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use fixtures::{acme_web, config_archive, new_cv, upload};
use platform::Config;
use serde_json::json;
use storage::{Storage, StorageExt};
use support::{ROOT, TestPlatform};
use testkit::{SharedClock, TempStore, TestServer};

const SMTP_PASSWORD: &str = "smtp-pass-7f3a9c";
const SMS_TOKEN: &str = "sms-token-51be02";
const CLOUD_SECRET: &str = "cloud-secret-c0ffee";
const VCS_TOKEN: &str = "vcs-token-a11ce5";

/// Basic-auth headers the provider stub received.
type Received = Arc<Mutex<Vec<String>>>;

async fn messages(
    AxumState(received): AxumState<Received>,
    AxumPath(_account): AxumPath<String>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    received.lock().unwrap().push(auth);
    (StatusCode::CREATED, json!({"sid": "SM1"}).to_string())
}

async fn provider() -> (TestServer, Received) {
    let received: Received = Arc::default();
    let router = Router::new()
        .route(
            "/2010-04-01/Accounts/{account}/Messages.json",
            post(messages),
        )
        .with_state(received.clone());
    (TestServer::start(router).await, received)
}

fn config(password: Option<&str>, blobs: &Path) -> Config {
    Config {
        encryption_password: password.map(str::to_owned),
        blob_dir: blobs.to_path_buf(),
        ..TestPlatform::test_config()
    }
}

fn clock() -> SharedClock {
    Arc::new(stdx::clock::SystemClock)
}

async fn start(store: &TempStore, password: Option<&str>, blobs: &Path) -> TestPlatform {
    TestPlatform::over(store.storage(), config(password, blobs), clock())
        .await
        .expect("open platform")
}

fn expected_auth() -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("AC1:{SMS_TOKEN}"))
    )
}

async fn verify_sms(platform: &TestPlatform) {
    platform
        .post(
            "/api/v2/admin/sms-settings/verify",
            ROOT,
            json!({"data": {"type": "sms-settings", "attributes": {"test-number": "+15550001"}}}),
        )
        .await
        .expect(200);
}

/// Every file under `dir`, concatenated.
fn files_under(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            bytes.extend(files_under(&path));
        } else {
            bytes.extend(std::fs::read(&path).unwrap());
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// Every value under `platform/`, raw.
async fn raw_values(storage: &dyn Storage) -> Vec<(String, Vec<u8>)> {
    storage
        .scan_prefix(b"platform/")
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), kv.value))
        .collect()
}

#[tokio::test]
async fn credentials_are_sealed_at_rest_and_work_after_a_restart_with_the_same_password() {
    let (stub, received) = provider().await;
    let mut store = TempStore::new();
    let blobs = tempfile::tempdir().unwrap();
    let password = Some("correct horse battery staple");

    let platform = start(&store, password, blobs.path()).await;
    let ws = acme_web(&platform).await;
    platform
        .patch(
            "/api/v2/admin/smtp-settings",
            ROOT,
            json!({"data": {"type": "smtp-settings", "attributes": {
                "enabled": false, "host": "127.0.0.1", "port": 2525, "sender": "ops@acme.example.com",
                "auth": "plain", "username": "mailer", "password": SMTP_PASSWORD,
            }}}),
        )
        .await
        .expect(200);
    platform
        .patch(
            "/api/v2/admin/sms-settings",
            ROOT,
            json!({"data": {"type": "sms-settings", "attributes": {
                "enabled": true, "account-sid": "AC1", "auth-token": SMS_TOKEN,
                "from-number": "+15550000", "base-url": stub.url(""),
            }}}),
        )
        .await
        .expect(200);
    platform
        .patch(
            "/api/v2/admin/cost-estimation-settings",
            ROOT,
            json!({"data": {"type": "cost-estimation-settings", "attributes": {
                "enabled": true, "cloud-a-access-key-id": "AKIA1", "cloud-a-secret-key": CLOUD_SECRET,
            }}}),
        )
        .await
        .expect(200);
    let client = platform
        .post(
            "/api/v2/organizations/acme/oauth-clients",
            ROOT,
            json!({"data": {"type": "oauth-clients", "attributes": {
                "name": "git host", "service-provider": "github",
                "http-url": "https://git.example.com", "api-url": "https://git.example.com",
                "oauth-token-string": VCS_TOKEN,
            }}}),
        )
        .await
        .expect(201);
    let token_id = client.body["data"]["relationships"]["oauth-tokens"]["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_cv, upload_url) = new_cv(&platform, &ws, json!({"auto-queue-runs": false})).await;
    verify_sms(&platform).await;

    // At rest: no value holds a credential, the sealed families are sealed.
    let values = raw_values(store.storage().as_ref()).await;
    for (key, value) in &values {
        for secret in [SMTP_PASSWORD, SMS_TOKEN, CLOUD_SECRET, VCS_TOKEN] {
            assert!(!contains(value, secret), "{key} holds {secret} in clear");
        }
        if key.starts_with("platform/oauth-tokens/")
            || key.starts_with("platform/site-settings/s")
            || key == "platform/url-signing-key"
        {
            assert_eq!(value.first(), Some(&0), "{key} is not sealed");
        }
    }
    assert!(
        values
            .iter()
            .any(|(key, _)| key == "platform/url-signing-key")
    );
    drop(platform);
    store.reopen().await;
    let on_disk = files_under(store.dir());
    for secret in [SMTP_PASSWORD, SMS_TOKEN, CLOUD_SECRET, VCS_TOKEN] {
        assert!(
            !contains(&on_disk, secret),
            "the store's files hold {secret}"
        );
    }

    // A restart with the same password: everything reads and works.
    let platform = start(&store, password, blobs.path()).await;
    verify_sms(&platform).await;
    assert_eq!(
        *received.lock().unwrap(),
        vec![expected_auth(), expected_auth()]
    );
    upload(&platform, &upload_url, config_archive())
        .await
        .expect(200);
    let cost = platform
        .get("/api/v2/admin/cost-estimation-settings", ROOT)
        .await
        .expect(200);
    assert_eq!(
        cost.body["data"]["attributes"]["cloud-a-secret-key"],
        CLOUD_SECRET
    );
    let smtp = platform
        .get("/api/v2/admin/smtp-settings", ROOT)
        .await
        .expect(200);
    assert_eq!(smtp.body["data"]["attributes"]["username"], "mailer");
    platform
        .get(&format!("/api/v2/oauth-tokens/{token_id}"), ROOT)
        .await
        .expect(200);
}

#[tokio::test]
async fn a_wrong_or_missing_password_is_a_clear_start_up_error() {
    let store = TempStore::new();
    let blobs = tempfile::tempdir().unwrap();
    drop(start(&store, Some("the right one"), blobs.path()).await);

    let wrong = TestPlatform::over(
        store.storage(),
        config(Some("the wrong one"), blobs.path()),
        clock(),
    )
    .await
    .err()
    .expect("a wrong password is refused");
    assert!(
        wrong
            .to_string()
            .contains("encryption password is not the one this store was written with"),
        "{wrong}"
    );
    let missing = TestPlatform::over(store.storage(), config(None, blobs.path()), clock())
        .await
        .err()
        .expect("a missing password is refused");
    assert!(
        missing.to_string().contains("encryption_password"),
        "{missing}"
    );
    // The right one still opens it.
    drop(start(&store, Some("the right one"), blobs.path()).await);
}

#[tokio::test]
async fn records_stored_in_clear_by_an_older_release_read_and_are_sealed_at_start_up() {
    let (stub, received) = provider().await;
    let store = TempStore::new();
    let blobs = tempfile::tempdir().unwrap();
    let raw = store.storage();
    let sms = json!({"version": 1, "enabled": true, "account_sid": "AC1", "auth_token": SMS_TOKEN,
        "from_number": "+15550000", "base_url": stub.url("").trim_end_matches('/')});
    let cost = json!({"version": 1, "enabled": true, "cloud_a_access_key_id": "AKIA1",
        "cloud_a_secret_key": CLOUD_SECRET});
    raw.put(b"platform/site-settings/sms", sms.to_string().as_bytes())
        .await
        .unwrap();
    raw.put(
        b"platform/site-settings/cost-estimation",
        cost.to_string().as_bytes(),
    )
    .await
    .unwrap();

    let platform = start(&store, Some("pw"), blobs.path()).await;
    for (key, value) in raw_values(raw.as_ref()).await {
        for secret in [SMS_TOKEN, CLOUD_SECRET] {
            assert!(!contains(&value, secret), "{key} still holds {secret}");
        }
    }
    verify_sms(&platform).await;
    assert_eq!(*received.lock().unwrap(), vec![expected_auth()]);
    let read = platform
        .get("/api/v2/admin/cost-estimation-settings", ROOT)
        .await
        .expect(200);
    assert_eq!(
        read.body["data"]["attributes"]["cloud-a-secret-key"],
        CLOUD_SECRET
    );
}
