//! The userpass auth method end to end: users CRUD, login → a token bound to an entity found
//! again on the next login, Vault's error for bad credentials, and the token doing what its
//! policies allow.

mod support;

use axum::Router;
use http::StatusCode;
use serde_json::{Value, json};
use support::call;

const ROOT: &str = "root-token-for-userpass-tests";

async fn dev_with_userpass() -> Router {
    let app = support::dev(ROOT).await;
    let (status, body) = root(
        &app,
        "POST",
        "sys/auth/userpass",
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    app
}

async fn root(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    call(app, method, &format!("/v1/{path}"), Some(ROOT), body).await
}

async fn login(app: &Router, user: &str, password: &str) -> (StatusCode, Value) {
    call(
        app,
        "POST",
        &format!("/v1/auth/userpass/login/{user}"),
        None,
        Some(json!({ "password": password })),
    )
    .await
}

#[tokio::test]
async fn users_crud_never_shows_the_password() {
    let app = dev_with_userpass().await;
    let (status, body) = root(
        &app,
        "POST",
        "auth/userpass/users/dana",
        Some(json!({"password": "pw-1", "token_policies": "reader", "token_ttl": "1h"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = root(&app, "GET", "auth/userpass/users/dana", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["token_policies"], json!(["reader"]));
    assert_eq!(body["data"]["token_ttl"], 3600);
    assert!(!body.to_string().contains("pw-1"));
    let (status, body) = root(&app, "LIST", "auth/userpass/users", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["dana"]));
    let (status, _) = root(
        &app,
        "POST",
        "auth/userpass/users/dana/policies",
        Some(json!({"token_policies": ["a", "b"]})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = root(&app, "GET", "auth/userpass/users/dana", None).await;
    assert_eq!(body["data"]["token_policies"], json!(["a", "b"]));
    let (status, _) = root(&app, "DELETE", "auth/userpass/users/dana", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = root(&app, "GET", "auth/userpass/users/dana", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn login_returns_a_token_bound_to_an_entity_found_again_through_its_alias() {
    let app = dev_with_userpass().await;
    root(
        &app,
        "POST",
        "auth/userpass/users/erin",
        Some(json!({"password": "correct horse", "policies": "reader"})),
    )
    .await;

    let (status, body) = login(&app, "erin", "correct horse").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let auth = &body["auth"];
    assert_eq!(auth["policies"], json!(["default", "reader"]));
    assert_eq!(auth["metadata"], json!({"username": "erin"}));
    assert_eq!(auth["orphan"], true);
    let entity = auth["entity_id"].as_str().unwrap().to_owned();
    assert!(!entity.is_empty());
    let token = auth["client_token"].as_str().unwrap().to_owned();

    let (status, body) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["display_name"], "userpass-erin");
    assert_eq!(body["data"]["entity_id"], entity);
    assert_eq!(body["data"]["path"], "auth/userpass/login/erin");

    let (status, body) = login(&app, "erin", "correct horse").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["auth"]["entity_id"], entity);

    let (status, body) = root(&app, "GET", &format!("identity/entity/id/{entity}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["aliases"][0]["name"], "erin");
    assert_eq!(body["data"]["aliases"][0]["mount_type"], "userpass");
}

#[tokio::test]
async fn bad_credentials_answer_vaults_message() {
    let app = dev_with_userpass().await;
    root(
        &app,
        "POST",
        "auth/userpass/users/finn",
        Some(json!({"password": "right"})),
    )
    .await;
    for (user, password) in [("finn", "wrong"), ("nobody", "right")] {
        let (status, body) = login(&app, user, password).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["errors"], json!(["invalid username or password"]));
    }
}

#[tokio::test]
async fn a_login_token_does_what_its_policies_allow() {
    let app = dev_with_userpass().await;
    let (status, body) = root(&app, "POST", "sys/mounts/kv", Some(json!({"type": "kv"}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    root(&app, "POST", "kv/shared", Some(json!({"v": "1"}))).await;
    support::put_policy(
        &app,
        ROOT,
        "reader",
        r#"path "kv/shared" { capabilities = ["read"] }"#,
    )
    .await;
    root(
        &app,
        "POST",
        "auth/userpass/users/gus",
        Some(json!({"password": "pw", "token_policies": "reader"})),
    )
    .await;
    let (_, body) = login(&app, "gus", "pw").await;
    let token = body["auth"]["client_token"].as_str().unwrap().to_owned();
    let (status, body) = call(&app, "GET", "/v1/kv/shared", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["v"], "1");
    let (status, _) = call(
        &app,
        "POST",
        "/v1/kv/shared",
        Some(&token),
        Some(json!({"v": "2"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
