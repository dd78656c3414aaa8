//! API tests of Consul's ACL bootstrap, `PUT /v1/acl/bootstrap`: the first management token
//! once, in the token read endpoint's shape after Consul's legacy `ID`; a given
//! `BootstrapSecret`; the 403 with a stable reset index afterwards, also when an initial
//! management token is configured; 401 with ACLs off; one winner among concurrent requests; the
//! bootstrap surviving a restart of a redb store.
//!
//! Each test drives `registry::router` in-process (`support::TestRegistry`, or a `State` opened
//! over a `testkit::TempStore` for restarts) over a fresh store.

mod support;

use std::sync::Arc;

use http::Method;
use registry::{AclConfig, State};
use serde_json::{Value, json};
use storage::{Op, Storage, Txn};
use support::{ROOT, TestRegistry, TestResponse, acl_config, test_config};
use testkit::{ManualClock, TempStore};

const GLOBAL_MANAGEMENT_ID: &str = "00000000-0000-0000-0000-000000000001";
const SECRET: &str = "8c5c5c6e-bd3c-4b0a-9f5e-2b0e0b5b7a11";

/// ACLs on, deny by default, and no initial management token: `cairn server`'s default.
fn unbootstrapped() -> AclConfig {
    AclConfig {
        enabled: true,
        initial_management_token: None,
        default_policy_allow: false,
    }
}

async fn registry(acl: AclConfig) -> TestRegistry {
    let mut config = test_config();
    config.acl = acl;
    TestRegistry::with_config(config).await
}

async fn bootstrap(registry: &TestRegistry, body: &str) -> TestResponse {
    registry.put("/v1/acl/bootstrap", body.to_owned()).await
}

/// The 403 every bootstrap after the first gets.
fn refusal(reset_index: u64) -> String {
    format!("Permission denied: ACL bootstrap no longer allowed (reset index: {reset_index})\n")
}

#[tokio::test]
async fn bootstrap_creates_a_management_token_in_the_token_shape() {
    let registry = registry(unbootstrapped()).await;
    let created = bootstrap(&registry, "").await;
    created.assert_status(200);
    let mut token = created.json();
    let secret = token["SecretID"].as_str().unwrap().to_owned();
    let accessor = token["AccessorID"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::try_parse(&secret).is_ok(), "{secret}");
    assert!(uuid::Uuid::try_parse(&accessor).is_ok(), "{accessor}");
    assert_ne!(secret, accessor);
    // Consul's legacy `ID` comes first and repeats the SecretID.
    assert_eq!(created.text().find("\"ID\""), Some(1), "{}", created.text());
    assert_eq!(token["ID"], secret.as_str());
    assert_eq!(token["Description"], "Bootstrap Token (Global Management)");
    assert_eq!(
        token["Policies"],
        json!([{"ID": GLOBAL_MANAGEMENT_ID, "Name": "global-management"}])
    );
    assert_eq!(token["Local"], false);
    assert_eq!(token["CreateTime"], "2023-11-14T22:13:20.000Z");
    assert_eq!(token["Hash"].as_str().unwrap().len(), 44);
    let index = token["CreateIndex"].as_u64().unwrap();
    assert!(index > 0);
    assert_eq!(token["ModifyIndex"], index);

    // Apart from `ID`, exactly what reading the token answers; and it manages ACLs.
    let read = registry
        .as_token(
            Method::GET,
            &format!("/v1/acl/token/{accessor}"),
            &secret,
            "",
        )
        .await;
    read.assert_status(200);
    token.as_object_mut().unwrap().remove("ID");
    assert_eq!(read.json(), token);
    registry
        .as_token(Method::PUT, "/v1/kv/anything", &secret, "x")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn bootstrap_is_allowed_once_then_403_with_a_stable_reset_index() {
    let registry = registry(unbootstrapped()).await;
    let created = bootstrap(&registry, "{}").await;
    created.assert_status(200);
    let json = created.json();
    let secret = json["SecretID"].as_str().unwrap();
    let index = json["CreateIndex"].as_u64().unwrap();
    for body in ["", "{}", &json!({"BootstrapSecret": SECRET}).to_string()] {
        let refused = bootstrap(&registry, body).await;
        refused.assert_status(403);
        assert_eq!(refused.text(), refusal(index));
        refused.index();
    }
    // Later writes move the store's index, not the reset index.
    registry
        .as_token(Method::PUT, "/v1/kv/later", secret, "x")
        .await
        .assert_status(200);
    assert_eq!(bootstrap(&registry, "").await.text(), refusal(index));
    // Still one management token besides the anonymous one.
    let tokens = registry
        .as_token(Method::GET, "/v1/acl/tokens", secret, "")
        .await
        .json();
    assert_eq!(tokens.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn bootstrap_uses_the_given_secret() {
    let registry = registry(unbootstrapped()).await;
    let created = bootstrap(&registry, &json!({"BootstrapSecret": SECRET}).to_string()).await;
    created.assert_status(200);
    assert_eq!(created.json()["SecretID"], SECRET);
    assert_eq!(created.json()["ID"], SECRET);
    registry
        .as_token(Method::GET, "/v1/acl/token/self", SECRET, "")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn bootstrap_refuses_bad_secrets_with_400_and_stays_allowed() {
    let registry = registry(unbootstrapped()).await;
    for (body, message) in [
        (
            json!({"BootstrapSecret": "root"}).to_string(),
            "uuid string is wrong length",
        ),
        (
            json!({"BootstrapSecret": "8c5c5c6e-bd3c-4b0a-9f5e-2b0e0b5b7a1g"}).to_string(),
            "encoding/hex: invalid byte: U+0067 'g'",
        ),
        (
            json!({"BootstrapSecret": "00000000-0000-0000-0000-000000000042"}).to_string(),
            "Provided token cannot be used because a token with that secret already exists.",
        ),
        // The anonymous token's AccessorID is taken.
        (
            json!({"BootstrapSecret": "00000000-0000-0000-0000-000000000002"}).to_string(),
            "Provided token cannot be used because a token with that secret already exists.",
        ),
        (
            json!({"BootstrapSecret": 42}).to_string(),
            "Request decoding failed: invalid type: integer `42`, expected a string",
        ),
        ("{".to_owned(), "Request decoding failed: "),
    ] {
        let refused = bootstrap(&registry, &body).await;
        refused.assert_status(400);
        assert!(
            refused.text().starts_with(message),
            "{body}: {}",
            refused.text()
        );
    }
    bootstrap(&registry, "").await.assert_status(200);
}

#[tokio::test]
async fn bootstrap_ignores_the_token_the_request_presents() {
    let registry = registry(unbootstrapped()).await;
    registry
        .as_token(Method::PUT, "/v1/acl/bootstrap", "no-such-token", "")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn bootstrap_is_refused_when_an_initial_management_token_is_configured() {
    let registry = registry(acl_config(false)).await;
    let tokens = registry
        .as_token(Method::GET, "/v1/acl/tokens", ROOT, "")
        .await
        .json();
    let root = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|token| token["SecretID"] == ROOT)
        .unwrap();
    let refused = bootstrap(&registry, "").await;
    refused.assert_status(403);
    assert_eq!(
        refused.text(),
        refusal(root["CreateIndex"].as_u64().unwrap())
    );
}

#[tokio::test]
async fn bootstrap_is_401_when_acls_are_disabled() {
    let registry = registry(AclConfig::default()).await;
    let refused = bootstrap(&registry, "").await;
    refused.assert_status(401);
    assert_eq!(refused.text(), "ACL support disabled\n");
    refused.index();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_bootstraps_have_exactly_one_winner() {
    let registry = registry(unbootstrapped()).await;
    let router = registry::router(registry.state.clone());
    let attempts: Vec<_> = (0..8)
        .map(|_| {
            let router = router.clone();
            tokio::spawn(async move {
                let request = testkit::request("PUT", "/v1/acl/bootstrap")
                    .body(axum::body::Body::empty())
                    .unwrap();
                testkit::call(&router, request).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for attempt in attempts {
        answers.push(attempt.await.unwrap());
    }
    let winners: Vec<Value> = answers
        .iter()
        .filter(|answer| answer.status == 200)
        .map(|answer| answer.json())
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    let index = winners[0]["CreateIndex"].as_u64().unwrap();
    for answer in answers.iter().filter(|answer| answer.status != 200) {
        assert_eq!(answer.status, 403);
        assert_eq!(answer.text(), refusal(index));
    }
}

/// A registry over `storage`, as `cairn server` opens it; its router.
async fn open(storage: Arc<dyn Storage>, acl: AclConfig) -> axum::Router {
    let mut config = test_config();
    config.acl = acl;
    let clock = ManualClock::new(support::START_MS);
    let state = State::open(storage, config, Arc::new(clock))
        .await
        .expect("open registry");
    registry::router(state)
}

async fn call(router: &axum::Router, method: &str, uri: &str, token: &str) -> testkit::Response {
    let request = testkit::request(method, uri)
        .header("X-Consul-Token", token)
        .body(axum::body::Body::empty())
        .unwrap();
    testkit::call(router, request).await
}

#[tokio::test]
async fn bootstrap_survives_a_restart() {
    let mut store = TempStore::new();
    let router = open(store.storage(), unbootstrapped()).await;
    let created = call(&router, "PUT", "/v1/acl/bootstrap", "").await;
    assert_eq!(created.status, 200, "{}", created.text());
    let created = created.json();
    let secret = created["SecretID"].as_str().unwrap();
    drop(router);
    store.reopen().await;

    let router = open(store.storage(), unbootstrapped()).await;
    let refused = call(&router, "PUT", "/v1/acl/bootstrap", "").await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.text(),
        refusal(created["CreateIndex"].as_u64().unwrap())
    );
    let self_token = call(&router, "GET", "/v1/acl/token/self", secret).await;
    assert_eq!(self_token.status, 200);
    assert_eq!(self_token.json()["AccessorID"], created["AccessorID"]);
}

#[tokio::test]
async fn a_store_whose_initial_management_token_predates_the_bootstrap_mark_counts_as_bootstrapped()
{
    let storage = testkit::mem_storage();
    let first = TestRegistry::open(storage.clone(), ManualClock::new(support::START_MS), {
        let mut config = test_config();
        config.acl = acl_config(false);
        config
    })
    .await;
    drop(first);
    // What a store written before the mark existed looks like.
    let result = storage
        .txn(Txn::new().then(Op::Delete {
            key: b"registry/acl/bootstrapped".to_vec(),
        }))
        .await
        .unwrap();
    assert!(result.succeeded);

    let mut config = test_config();
    config.acl = acl_config(false);
    let second = TestRegistry::open(storage, ManualClock::new(support::START_MS), config).await;
    let refused = bootstrap(&second, "").await;
    refused.assert_status(403);
    assert!(
        refused
            .text()
            .starts_with("Permission denied: ACL bootstrap no longer allowed (reset index: "),
        "{}",
        refused.text()
    );
}
