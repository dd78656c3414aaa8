//! Identity entities and aliases through the router: create, read, update, delete, list,
//! lookup by name, aliases bound to a mount accessor.

mod support;

use axum::Router;
use http::StatusCode;
use serde_json::{Value, json};
use support::call;

const ROOT: &str = "root-token-for-identity-tests";

async fn dev() -> Router {
    support::dev(ROOT).await
}

async fn req(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    call(app, method, &format!("/v1/{path}"), Some(ROOT), body).await
}

#[tokio::test]
async fn entity_crud_by_id_and_by_name() {
    let app = dev().await;
    let (status, body) = req(
        &app,
        "POST",
        "identity/entity",
        Some(json!({"name": "alice", "policies": "dev,ops", "metadata": {"team": "a"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(body["data"]["name"], "alice");

    let (status, body) = req(&app, "GET", &format!("identity/entity/id/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["policies"], json!(["dev", "ops"]));
    assert_eq!(data["metadata"], json!({"team": "a"}));
    assert_eq!(data["disabled"], false);
    assert_eq!(data["aliases"], json!([]));
    assert!(data["creation_time"].as_str().unwrap().ends_with('Z'));

    // Update by id: 204, then visible by name.
    let (status, _) = req(
        &app,
        "POST",
        &format!("identity/entity/id/{id}"),
        Some(json!({"policies": ["ops"], "disabled": true})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = req(&app, "GET", "identity/entity/name/alice", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["id"], id);
    assert_eq!(body["data"]["policies"], json!(["ops"]));
    assert_eq!(body["data"]["disabled"], true);

    // Create by name, list both ways, name uniqueness.
    let (status, body) = req(&app, "POST", "identity/entity/name/bob", Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let bob = body["data"]["id"].as_str().unwrap().to_owned();
    let (status, body) = req(&app, "LIST", "identity/entity/name", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["keys"], json!(["alice", "bob"]));
    let (_, body) = req(&app, "LIST", "identity/entity/id", None).await;
    assert_eq!(body["data"]["keys"].as_array().unwrap().len(), 2);
    assert_eq!(body["data"]["key_info"][&bob]["name"], "bob");
    let (status, body) = req(
        &app,
        "POST",
        &format!("identity/entity/id/{bob}"),
        Some(json!({"name": "alice"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Delete by name and by id.
    let (status, _) = req(&app, "DELETE", "identity/entity/name/bob", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = req(&app, "DELETE", &format!("identity/entity/id/{id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = req(&app, "GET", &format!("identity/entity/id/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = req(&app, "LIST", "identity/entity/id", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn aliases_bind_a_mount_name_to_an_entity() {
    let app = dev().await;
    let (status, body) = req(
        &app,
        "POST",
        "sys/auth/userpass",
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, body) = req(&app, "GET", "sys/auth", None).await;
    let accessor = body["data"]["userpass/"]["accessor"]
        .as_str()
        .unwrap()
        .to_owned();

    let (_, body) = req(
        &app,
        "POST",
        "identity/entity",
        Some(json!({"name": "carol"})),
    )
    .await;
    let entity = body["data"]["id"].as_str().unwrap().to_owned();
    let (status, body) = req(
        &app,
        "POST",
        "identity/entity-alias",
        Some(json!({"name": "carol", "canonical_id": entity, "mount_accessor": accessor})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["canonical_id"], entity);
    let alias = body["data"]["id"].as_str().unwrap().to_owned();

    let (status, body) = req(
        &app,
        "GET",
        &format!("identity/entity-alias/id/{alias}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["mount_path"], "auth/userpass/");
    assert_eq!(body["data"]["mount_type"], "userpass");
    assert_eq!(body["data"]["name"], "carol");
    let (_, body) = req(&app, "GET", &format!("identity/entity/id/{entity}"), None).await;
    assert_eq!(body["data"]["aliases"][0]["id"], alias);

    // Same (mount, name) again: refused; unknown accessor: refused.
    let (status, _) = req(
        &app,
        "POST",
        "identity/entity-alias",
        Some(json!({"name": "carol", "mount_accessor": accessor})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = req(
        &app,
        "POST",
        "identity/entity-alias",
        Some(json!({"name": "x", "mount_accessor": "auth_nope_123"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, body) = req(&app, "LIST", "identity/entity-alias/id", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["keys"], json!([alias]));

    // Deleting the entity deletes its aliases.
    req(
        &app,
        "DELETE",
        &format!("identity/entity/id/{entity}"),
        None,
    )
    .await;
    let (status, _) = req(
        &app,
        "GET",
        &format!("identity/entity-alias/id/{alias}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
