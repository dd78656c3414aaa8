//! The token API (`auth/token/*`) through the router: create (plain, orphan, role), lookup,
//! renew, revoke (tree, orphan, accessor), the subset rule, roles, num_uses, TTL expiry and a
//! restart over the same storage.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::StatusCode;
use serde_json::{Value, json};
use storage::{MemStorage, Storage};
use support::{call, create_token, dev_over, put_policy};

const ROOT: &str = "root-token-for-tests";

async fn dev() -> Router {
    support::dev(ROOT).await
}

async fn create(app: &Router, token: &str, body: Value) -> (StatusCode, Value) {
    call(
        app,
        "POST",
        "/v1/auth/token/create",
        Some(token),
        Some(body),
    )
    .await
}

async fn lookup_self(app: &Router, token: &str) -> (StatusCode, Value) {
    call(app, "GET", "/v1/auth/token/lookup-self", Some(token), None).await
}

#[tokio::test]
async fn create_returns_vaults_auth_block_and_lookup_shows_the_token() {
    let app = dev().await;
    let (status, body) = create(
        &app,
        ROOT,
        json!({"policies": ["b", "a"], "meta": {"team": "x"}, "display_name": "ci bot", "ttl": "1h"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], Value::Null);
    let auth = &body["auth"];
    let token = auth["client_token"].as_str().unwrap();
    assert!(token.starts_with("hvs.") && token.len() == 28, "{token}");
    assert_eq!(auth["policies"], json!(["a", "b", "default"]));
    assert_eq!(auth["token_policies"], json!(["a", "b", "default"]));
    assert_eq!(auth["metadata"], json!({"team": "x"}));
    assert_eq!(auth["lease_duration"], 3600);
    assert_eq!(auth["renewable"], true);
    assert_eq!(auth["orphan"], false);
    assert_eq!(auth["token_type"], "service");

    let (status, body) = lookup_self(&app, token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["id"], token);
    assert_eq!(data["accessor"], auth["accessor"]);
    assert_eq!(data["display_name"], "token-ci-bot");
    assert_eq!(data["path"], "auth/token/create");
    assert_eq!(data["creation_ttl"], 3600);
    assert!(data["ttl"].as_u64().unwrap() > 3590);
    assert!(data["expire_time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(data["meta"], json!({"team": "x"}));
    assert_eq!(data["num_uses"], 0);
    assert_eq!(data["entity_id"], "");
    assert_eq!(data["type"], "service");

    // lookup {token} and lookup-accessor {accessor} (which hides the id).
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/lookup",
        Some(ROOT),
        Some(json!({"token": token})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["id"], token);
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/lookup-accessor",
        Some(ROOT),
        Some(json!({"accessor": auth["accessor"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["id"], "");
    assert_eq!(body["data"]["display_name"], "token-ci-bot");
}

#[tokio::test]
async fn root_token_lookup_matches_vault() {
    let app = dev().await;
    let (status, body) = lookup_self(&app, ROOT).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["policies"], json!(["root"]));
    assert_eq!(data["ttl"], 0);
    assert_eq!(data["expire_time"], Value::Null);
    assert_eq!(data["path"], "auth/token/root");
    assert_eq!(data["display_name"], "root");
    assert_eq!(data["orphan"], true);
}

#[tokio::test]
async fn revoking_a_parent_revokes_its_children_but_revoke_orphan_keeps_them() {
    let app = dev().await;
    let (parent, _) = create_token(&app, ROOT, json!({})).await;
    let (child, _) = create_token(&app, &parent, json!({})).await;
    let (grandchild, _) = create_token(&app, &child, json!({})).await;
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke",
        Some(ROOT),
        Some(json!({"token": parent})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for token in [&parent, &child, &grandchild] {
        assert_eq!(lookup_self(&app, token).await.0, StatusCode::FORBIDDEN);
    }

    let (parent, _) = create_token(&app, ROOT, json!({})).await;
    let (child, _) = create_token(&app, &parent, json!({})).await;
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke-orphan",
        Some(ROOT),
        Some(json!({"token": parent})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(lookup_self(&app, &parent).await.0, StatusCode::FORBIDDEN);
    let (status, body) = lookup_self(&app, &child).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["orphan"], true);

    // revoke-self and revoke-accessor.
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke-self",
        Some(&child),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(lookup_self(&app, &child).await.0, StatusCode::FORBIDDEN);
    let (token, accessor) = create_token(&app, ROOT, json!({})).await;
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke-accessor",
        Some(ROOT),
        Some(json!({"accessor": accessor})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(lookup_self(&app, &token).await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn orphans_have_no_parent_and_no_parent_needs_sudo() {
    let app = dev().await;
    put_policy(
        &app,
        ROOT,
        "maker",
        r#"path "auth/token/*" { capabilities = ["create", "update", "read"] }"#,
    )
    .await;
    let (maker, _) = create_token(&app, ROOT, json!({"policies": ["maker"]})).await;
    let (status, body) = create(&app, &maker, json!({"no_parent": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["errors"][0],
        "root or sudo privileges required to create orphan token"
    );
    let (status, body) = create(&app, &maker, json!({"period": "1h"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = create(&app, &maker, json!({"id": "custom-id"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // create-orphan needs no sudo; its tokens outlive the parent.
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/create-orphan",
        Some(&maker),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["auth"]["orphan"], true);
    let orphan = body["auth"]["client_token"].as_str().unwrap().to_owned();
    call(
        &app,
        "POST",
        "/v1/auth/token/revoke-self",
        Some(&maker),
        None,
    )
    .await;
    assert_eq!(lookup_self(&app, &orphan).await.0, StatusCode::OK);

    // Root may pick the id and make periodic orphans.
    let (status, body) = create(
        &app,
        ROOT,
        json!({"id": "my-own-id", "no_parent": true, "period": 600}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["auth"]["client_token"], "my-own-id");
    assert_eq!(body["auth"]["lease_duration"], 600);
    let (_, body) = lookup_self(&app, "my-own-id").await;
    assert_eq!(body["data"]["period"], 600);
    assert_eq!(body["data"]["orphan"], true);
    let (status, _) = create(&app, ROOT, json!({"id": "my-own-id"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn non_root_parents_grant_only_a_subset_of_their_policies() {
    let app = dev().await;
    put_policy(
        &app,
        ROOT,
        "maker",
        r#"path "auth/token/create" { capabilities = ["update"] }"#,
    )
    .await;
    put_policy(
        &app,
        ROOT,
        "other",
        r#"path "secret/*" { capabilities = ["read"] }"#,
    )
    .await;
    let (maker, _) = create_token(&app, ROOT, json!({"policies": ["maker"]})).await;
    let (status, body) = create(&app, &maker, json!({"policies": ["other"]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["errors"][0], "child policies must be subset of parent");
    let (status, body) = create(&app, &maker, json!({"policies": ["root"]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, body) = create(&app, &maker, json!({"policies": ["maker"]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["auth"]["policies"], json!(["default", "maker"]));
    // No policies: the parent's.
    let (_, body) = create(&app, &maker, json!({})).await;
    assert_eq!(body["auth"]["policies"], json!(["default", "maker"]));
    let (_, body) = create(&app, &maker, json!({"no_default_policy": true})).await;
    assert_eq!(body["auth"]["policies"], json!(["maker"]));
}

#[tokio::test]
async fn roles_crud_and_role_tokens_follow_the_role() {
    let app = dev().await;
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/roles/deployer",
        Some(ROOT),
        Some(json!({"allowed_policies": "deploy,read", "disallowed_policies": "admin", "orphan": true, "period": "30m", "path_suffix": "v1", "renewable": true})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(
        &app,
        "GET",
        "/v1/auth/token/roles/deployer",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["allowed_policies"], json!(["deploy", "read"]));
    assert_eq!(body["data"]["orphan"], true);
    assert_eq!(body["data"]["period"], 1800);
    assert_eq!(body["data"]["token_period"], 1800);
    assert_eq!(body["data"]["name"], "deployer");
    let (status, body) = call(&app, "LIST", "/v1/auth/token/roles", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["keys"], json!(["deployer"]));

    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/create/deployer",
        Some(ROOT),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["auth"]["policies"],
        json!(["default", "deploy", "read"])
    );
    assert_eq!(body["auth"]["orphan"], true);
    assert_eq!(body["auth"]["lease_duration"], 1800);
    let token = body["auth"]["client_token"].as_str().unwrap().to_owned();
    let (_, body) = lookup_self(&app, &token).await;
    assert_eq!(body["data"]["path"], "auth/token/create/deployer/v1");
    assert_eq!(body["data"]["role"], "deployer");

    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/create/deployer",
        Some(ROOT),
        Some(json!({"policies": ["admin"]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/create/missing",
        Some(ROOT),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/auth/token/roles/deployer",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(
        &app,
        "GET",
        "/v1/auth/token/roles/deployer",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "LIST", "/v1/auth/token/roles", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn num_uses_limits_how_often_a_token_works() {
    let app = dev().await;
    let (token, _) = create_token(&app, ROOT, json!({"num_uses": 2})).await;
    let (status, body) = lookup_self(&app, &token).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["num_uses"], 1);
    assert_eq!(lookup_self(&app, &token).await.0, StatusCode::OK);
    assert_eq!(lookup_self(&app, &token).await.0, StatusCode::FORBIDDEN);
    let (status, body) = create(&app, ROOT, json!({"num_uses": -1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn renew_extends_within_the_max_and_respects_renewable() {
    let app = dev().await;
    let (token, accessor) =
        create_token(&app, ROOT, json!({"ttl": "10m", "explicit_max_ttl": "1h"})).await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/renew-self",
        Some(&token),
        Some(json!({"increment": "30m"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["auth"]["lease_duration"], 1800);
    assert_eq!(body["auth"]["client_token"], token);
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/renew",
        Some(ROOT),
        Some(json!({"token": token, "increment": 7200})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let granted = body["auth"]["lease_duration"].as_u64().unwrap();
    assert!(
        (3590..=3600).contains(&granted),
        "capped by explicit_max_ttl: {granted}"
    );
    assert!(body["warnings"].is_array());
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/renew-accessor",
        Some(ROOT),
        Some(json!({"accessor": accessor})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["auth"]["client_token"], "");
    let (_, body) = lookup_self(&app, &token).await;
    assert!(body["data"]["last_renewal"].is_string());

    let (fixed, _) = create_token(&app, ROOT, json!({"renewable": false})).await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/renew-self",
        Some(&fixed),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["errors"][0], "lease is not renewable");
}

#[tokio::test]
async fn expired_tokens_are_gone() {
    let (state, clock) = support::dev_on_clock(ROOT).await;
    let app = secrets::router(state);
    let (parent, _) = create_token(&app, ROOT, json!({"ttl": "1s"})).await;
    let (child, _) = create_token(&app, ROOT, json!({"ttl": "1h"})).await;
    assert_eq!(lookup_self(&app, &parent).await.0, StatusCode::OK);
    clock.advance(Duration::from_millis(1100));
    assert_eq!(lookup_self(&app, &parent).await.0, StatusCode::FORBIDDEN);
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/lookup",
        Some(ROOT),
        Some(json!({"token": parent})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(lookup_self(&app, &child).await.0, StatusCode::OK);
}

#[tokio::test]
async fn accessors_list_needs_sudo() {
    let app = dev().await;
    let (_, accessor) = create_token(&app, ROOT, json!({})).await;
    let (status, body) = call(&app, "LIST", "/v1/auth/token/accessors", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["data"]["keys"]
            .as_array()
            .unwrap()
            .contains(&json!(accessor))
    );
    put_policy(
        &app,
        ROOT,
        "lister",
        r#"path "auth/token/accessors" { capabilities = ["list"] }"#,
    )
    .await;
    let (lister, _) = create_token(&app, ROOT, json!({"policies": ["lister"]})).await;
    let (status, _) = call(
        &app,
        "LIST",
        "/v1/auth/token/accessors",
        Some(&lister),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn batch_tokens_and_bad_input_are_4xx() {
    let app = dev().await;
    let (status, body) = create(&app, ROOT, json!({"type": "batch"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = create(&app, ROOT, json!({"ttl": "forever"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/lookup-accessor",
        Some(ROOT),
        Some(json!({"accessor": "nope"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/token/revoke",
        Some(ROOT),
        Some(json!({"token": "hvs.unknown"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/auth/token/nonsense", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tokens_and_their_expiry_survive_a_restart() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("unseal-key");
    let app = dev_over(storage.clone(), ROOT, Some(key_file.clone())).await;
    let (long, _) = create_token(&app, ROOT, json!({"ttl": "1h", "meta": {"k": "v"}})).await;
    let (short, _) = create_token(&app, ROOT, json!({"ttl": "1s"})).await;
    let (_, before) = lookup_self(&app, &long).await;
    drop(app);

    let app = dev_over(storage, ROOT, Some(key_file)).await;
    let (status, after) = lookup_self(&app, &long).await;
    assert_eq!(status, StatusCode::OK, "{after}");
    assert_eq!(after["data"]["expire_time"], before["data"]["expire_time"]);
    assert_eq!(after["data"]["meta"], json!({"k": "v"}));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(lookup_self(&app, &short).await.0, StatusCode::FORBIDDEN);
}

/// Polls `lookup-self` (in short steps, up to ~3 s) until the token is gone.
async fn gone_soon(app: &Router, token: &str) -> bool {
    for _ in 0..30 {
        if lookup_self(app, token).await.0 == StatusCode::FORBIDDEN {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn the_background_pass_revokes_subtrees_of_expired_and_used_up_tokens() {
    let (state, clock) = support::dev_on_clock(ROOT).await;
    let app = secrets::router(state.clone());
    let runner = cluster::Runner::embedded(tokio_util::sync::CancellationToken::new());
    secrets::start_tasks(&state, &runner);

    let (parent, _) = create_token(&app, ROOT, json!({"ttl": "1s"})).await;
    let (child, _) = create_token(&app, &parent, json!({"ttl": "1h"})).await;
    // A one-use token whose only use creates a child: the child goes when the parent is
    // revoked after its last use.
    let (once, _) = create_token(&app, ROOT, json!({"num_uses": 1})).await;
    let (once_child, _) = create_token(&app, &once, json!({"ttl": "1h"})).await;
    assert_eq!(lookup_self(&app, &child).await.0, StatusCode::OK);

    clock.advance(Duration::from_secs(2));
    assert!(gone_soon(&app, &child).await, "child of an expired parent");
    assert!(
        gone_soon(&app, &once_child).await,
        "child of a used-up parent"
    );
    assert_eq!(lookup_self(&app, ROOT).await.0, StatusCode::OK);
    runner.shutdown_and_wait().await;
}
