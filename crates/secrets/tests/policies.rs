//! API tests for ACL policies: `sys/policies/acl`, legacy `sys/policy`, RGP/EGP storage and
//! validation, `sys/capabilities*`, and end-to-end enforcement on a kv version 1 mount at
//! `secret/` (read-only tokens, create vs update, parameter constraints, sudo on root-protected
//! paths).

mod support;

use http::StatusCode;
use serde_json::{Value, json};
use support::call;

const ROOT: &str = "root-token";

async fn app() -> axum::Router {
    support::dev_kv_v1(ROOT).await
}

async fn put_policy(app: &axum::Router, name: &str, policy: &str) {
    support::put_policy(app, ROOT, name, policy).await;
}

/// A token with exactly these policies (`default` only when listed).
async fn token_with(app: &axum::Router, policies: &[&str]) -> (String, String) {
    let body = json!({
        "policies": policies,
        "no_default_policy": !policies.contains(&"default"),
    });
    support::create_token(app, ROOT, body).await
}

fn error_text(body: &Value) -> String {
    body["errors"].to_string()
}

#[tokio::test]
async fn acl_policy_create_read_list_delete() {
    let app = app().await;
    let doc = "path \"secret/*\" {\n  capabilities = [\"read\", \"list\"]\n}\n";
    put_policy(&app, "reader", doc).await;

    let (status, body) = call(&app, "GET", "/v1/sys/policies/acl/reader", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["name"], "reader");
    assert_eq!(body["data"]["policy"], doc);

    let (status, body) = call(&app, "LIST", "/v1/sys/policies/acl", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["default", "reader", "root"]));
    let (status, same) = call(
        &app,
        "GET",
        "/v1/sys/policies/acl?list=true",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(same["data"]["keys"], body["data"]["keys"]);

    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/acl/reader",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&app, "GET", "/v1/sys/policies/acl/reader", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Deleting a missing policy is fine.
    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/acl/reader",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn policy_names_are_lower_cased_with_a_warning() {
    let app = app().await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/acl/DevOps",
        Some(ROOT),
        Some(json!({"policy": "path \"a\" { capabilities = [\"read\"] }"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["warnings"],
        json!(["policy name was converted to devops"])
    );
    let (status, _) = call(&app, "GET", "/v1/sys/policies/acl/devops", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn bad_policy_documents_are_400_and_change_nothing() {
    let app = app().await;
    for (body, needle) in [
        (json!({}), "'policy' parameter not supplied or empty"),
        (
            json!({"policy": ""}),
            "'policy' parameter not supplied or empty",
        ),
        (
            json!({"policy": "path \"a\" { capabilities = [\"fly\"] }"}),
            "failed to parse policy: path \"a\": invalid capability \"fly\"",
        ),
        (json!({"policy": "path \"a\" {"}), "failed to parse policy"),
        (
            json!({"policy": "path \"a/+*\" { capabilities = [\"read\"] }"}),
            "'+*' is forbidden",
        ),
    ] {
        let (status, response) = call(
            &app,
            "PUT",
            "/v1/sys/policies/acl/bad",
            Some(ROOT),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {response}");
        assert!(
            error_text(&response).contains(&needle.replace('"', "\\\"")),
            "{response}"
        );
    }
    let (status, _) = call(&app, "GET", "/v1/sys/policies/acl/bad", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn root_and_default_are_built_in() {
    let app = app().await;
    let (status, body) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/acl/root",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["errors"], json!(["cannot delete \"root\" policy"]));
    let (status, body) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/acl/default",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["errors"], json!(["cannot delete default policy"]));
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/acl/root",
        Some(ROOT),
        Some(json!({"policy": "path \"a\" { capabilities = [\"read\"] }"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/policies/acl/default",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["data"]["policy"]
            .as_str()
            .unwrap()
            .contains("auth/token/lookup-self")
    );
    // default is editable.
    put_policy(&app, "default", "path \"x\" { capabilities = [\"read\"] }").await;
}

#[tokio::test]
async fn base64_and_json_documents_are_accepted() {
    use base64::Engine as _;
    let app = app().await;
    let hcl = "path \"secret/b64\" { capabilities = [\"read\"] }";
    let encoded = base64::engine::general_purpose::STANDARD.encode(hcl);
    put_policy(&app, "b64", &encoded).await;
    let (_, body) = call(&app, "GET", "/v1/sys/policies/acl/b64", Some(ROOT), None).await;
    assert_eq!(body["data"]["policy"], hcl);

    let json_doc = r#"{"path": {"secret/json": {"capabilities": ["read"]}}}"#;
    put_policy(&app, "json", json_doc).await;
    let (token, _) = token_with(&app, &["json"]).await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities-self",
        Some(&token),
        Some(json!({"path": "secret/json"})),
    )
    .await;
    // capabilities-self is granted by `default` only; this token has none, so 403.
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities",
        Some(ROOT),
        Some(json!({"token": token, "path": "secret/json"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["capabilities"], json!(["read"]));
}

#[tokio::test]
async fn legacy_sys_policy_uses_rules_and_lists_policies() {
    let app = app().await;
    let doc = "path \"secret/*\" { capabilities = [\"read\"] }";
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policy/legacy",
        Some(ROOT),
        Some(json!({"policy": doc})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(&app, "GET", "/v1/sys/policy/legacy", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["rules"], doc);
    assert_eq!(body["data"]["name"], "legacy");

    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policy/old",
        Some(ROOT),
        Some(json!({"rules": doc})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["warnings"],
        json!(["'rules' is deprecated, please use 'policy' instead"])
    );

    let (status, body) = call(&app, "GET", "/v1/sys/policy", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let expected = json!(["default", "legacy", "old", "root"]);
    assert_eq!(body["data"]["policies"], expected);
    assert_eq!(body["data"]["keys"], expected);
    // Vault copies this route's data to the top level too (hvac reads it there).
    assert_eq!(body["policies"], expected);

    let (status, _) = call(&app, "DELETE", "/v1/sys/policy/legacy", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/sys/policies/acl/legacy", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn rgp_and_egp_are_validated_stored_and_listed() {
    let app = app().await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/rgp/business-hours",
        Some(ROOT),
        Some(json!({"policy": "main = rule { true }", "enforcement_level": "soft-mandatory"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/policies/rgp/business-hours",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["enforcement_level"], "soft-mandatory");
    assert_eq!(body["data"]["policy"], "main = rule { true }");

    for (kind, body, needle) in [
        (
            "rgp",
            json!({"enforcement_level": "advisory"}),
            "'policy' parameter",
        ),
        (
            "rgp",
            json!({"policy": "x"}),
            "'enforcement_level' parameter",
        ),
        (
            "rgp",
            json!({"policy": "x", "enforcement_level": "mandatory"}),
            "invalid enforcement_level",
        ),
        (
            "egp",
            json!({"policy": "x", "enforcement_level": "advisory"}),
            "'paths' parameter",
        ),
        (
            "egp",
            json!({"policy": "x", "enforcement_level": "advisory", "paths": ["a*/b"]}),
            "glob",
        ),
    ] {
        let (status, response) = call(
            &app,
            "PUT",
            &format!("/v1/sys/policies/{kind}/bad"),
            Some(ROOT),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {response}");
        assert!(error_text(&response).contains(needle), "{response}");
    }

    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/egp/cidr-check",
        Some(ROOT),
        Some(json!({"policy": "main = rule { true }", "enforcement_level": "hard-mandatory", "paths": "secret/*,sys/mounts"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/policies/egp/cidr-check",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["paths"], json!(["secret/*", "sys/mounts"]));
    let (status, body) = call(&app, "LIST", "/v1/sys/policies/egp", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["cidr-check"]));
    assert_eq!(
        body["data"]["name_path_map"]["cidr-check"],
        json!([{"path": "secret/", "glob": true}, {"path": "sys/mounts", "glob": false}])
    );
    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/egp/cidr-check",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "LIST", "/v1/sys/policies/egp", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn capabilities_endpoints_report_per_path_and_single_capabilities() {
    let app = app().await;
    put_policy(
        &app,
        "caps",
        "path \"secret/*\" {\n capabilities = [\"read\", \"update\"]\n}\npath \"secret/locked\" {\n capabilities = [\"deny\"]\n}\n",
    )
    .await;
    let (token, accessor) = token_with(&app, &["caps", "default"]).await;

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities",
        Some(ROOT),
        Some(json!({"token": token, "paths": ["secret/a", "secret/locked", "other/x"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["secret/a"], json!(["read", "update"]));
    assert_eq!(body["data"]["secret/locked"], json!(["deny"]));
    assert_eq!(body["data"]["other/x"], json!(["deny"]));
    assert!(body["data"].get("capabilities").is_none(), "{body}");

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities-self",
        Some(&token),
        Some(json!({"path": "secret/a"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["capabilities"], json!(["read", "update"]));
    assert_eq!(body["data"]["secret/a"], json!(["read", "update"]));
    assert_eq!(body["capabilities"], json!(["read", "update"]));

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities-accessor",
        Some(ROOT),
        Some(json!({"accessor": accessor, "path": "secret/a"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["capabilities"], json!(["read", "update"]));

    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities-self",
        Some(ROOT),
        Some(json!({"path": "anything"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["capabilities"], json!(["root"]));

    for (path, body, message) in [
        (
            "capabilities",
            json!({"token": "nope", "path": "a"}),
            "invalid token",
        ),
        ("capabilities", json!({"path": "a"}), "missing token"),
        (
            "capabilities-accessor",
            json!({"accessor": "nope", "path": "a"}),
            "invalid accessor",
        ),
        (
            "capabilities-accessor",
            json!({"path": "a"}),
            "missing accessor",
        ),
        ("capabilities-self", json!({}), "missing path"),
    ] {
        let (status, response) = call(
            &app,
            "POST",
            &format!("/v1/sys/{path}"),
            Some(ROOT),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {response}");
        assert_eq!(response["errors"], json!([message]));
    }
}

#[tokio::test]
async fn read_only_token_reads_but_cannot_write() {
    let app = app().await;
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/app",
        Some(ROOT),
        Some(json!({"k": "v"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    put_policy(
        &app,
        "ro",
        "path \"secret/*\" {\n capabilities = [\"read\", \"list\"]\n}\n",
    )
    .await;
    let (token, _) = token_with(&app, &["ro"]).await;

    let (status, body) = call(&app, "GET", "/v1/secret/app", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["k"], "v");
    let (status, body) = call(&app, "LIST", "/v1/secret", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = call(
        &app,
        "PUT",
        "/v1/secret/app",
        Some(&token),
        Some(json!({"k": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(error_text(&body).contains("permission denied"), "{body}");
    let (status, _) = call(&app, "DELETE", "/v1/secret/app", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Outside the policy's paths.
    let (status, _) = call(&app, "GET", "/v1/sys/mounts", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The value is unchanged.
    let (_, body) = call(&app, "GET", "/v1/secret/app", Some(ROOT), None).await;
    assert_eq!(body["data"]["k"], "v");
}

#[tokio::test]
async fn create_and_update_capabilities_follow_the_existence_check() {
    let app = app().await;
    put_policy(
        &app,
        "creator",
        "path \"secret/c/*\" {\n capabilities = [\"create\"]\n}\n",
    )
    .await;
    put_policy(
        &app,
        "updater",
        "path \"secret/u/*\" {\n capabilities = [\"update\"]\n}\n",
    )
    .await;
    let (token, _) = token_with(&app, &["creator", "updater"]).await;

    // create-only: a new item is fine, overwriting it is not.
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/secret/c/x",
        Some(&token),
        Some(json!({"a": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/c/x",
        Some(&token),
        Some(json!({"a": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // update-only: a new item is refused, an existing one may be changed.
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/u/y",
        Some(&token),
        Some(json!({"a": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/u/y",
        Some(ROOT),
        Some(json!({"a": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/secret/u/y",
        Some(&token),
        Some(json!({"a": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

#[tokio::test]
async fn parameter_constraints_are_enforced_end_to_end() {
    let app = app().await;
    put_policy(
        &app,
        "params",
        r#"
path "secret/req" {
  capabilities = ["create", "update"]
  required_parameters = ["owner"]
}
path "secret/allowed" {
  capabilities = ["create", "update"]
  allowed_parameters = {
    "env" = ["dev", "stage-*"]
  }
}
path "secret/denied" {
  capabilities = ["create", "update"]
  denied_parameters = {
    "password" = []
  }
}
"#,
    )
    .await;
    let (token, _) = token_with(&app, &["params"]).await;
    for (path, body, expected) in [
        (
            "secret/req",
            json!({"owner": "me", "x": 1}),
            StatusCode::NO_CONTENT,
        ),
        ("secret/req", json!({"x": 1}), StatusCode::FORBIDDEN),
        (
            "secret/allowed",
            json!({"env": "dev"}),
            StatusCode::NO_CONTENT,
        ),
        (
            "secret/allowed",
            json!({"env": "stage-2"}),
            StatusCode::NO_CONTENT,
        ),
        (
            "secret/allowed",
            json!({"env": "prod"}),
            StatusCode::FORBIDDEN,
        ),
        (
            "secret/allowed",
            json!({"env": "dev", "other": "x"}),
            StatusCode::FORBIDDEN,
        ),
        (
            "secret/denied",
            json!({"user": "a"}),
            StatusCode::NO_CONTENT,
        ),
        (
            "secret/denied",
            json!({"user": "a", "password": "p"}),
            StatusCode::FORBIDDEN,
        ),
    ] {
        let (status, response) = call(
            &app,
            "PUT",
            &format!("/v1/{path}"),
            Some(&token),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, expected, "{path} {body}: {response}");
    }
}

#[tokio::test]
async fn sudo_is_required_on_root_protected_paths() {
    let app = app().await;
    put_policy(
        &app,
        "rotate-no-sudo",
        "path \"sys/rotate\" {\n capabilities = [\"update\"]\n}\n",
    )
    .await;
    put_policy(
        &app,
        "rotate-sudo",
        "path \"sys/rotate\" {\n capabilities = [\"update\", \"sudo\"]\n}\n",
    )
    .await;
    let (plain, _) = token_with(&app, &["rotate-no-sudo"]).await;
    let (sudo, _) = token_with(&app, &["rotate-sudo"]).await;
    let (status, _) = call(&app, "PUT", "/v1/sys/rotate", Some(&plain), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = call(&app, "PUT", "/v1/sys/rotate", Some(&sudo), None).await;
    assert!(status.is_success(), "{status} {body}");
}

#[tokio::test]
async fn policy_changes_take_effect_immediately() {
    let app = app().await;
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/live",
        Some(ROOT),
        Some(json!({"k": "v"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    put_policy(
        &app,
        "live",
        "path \"secret/live\" {\n capabilities = [\"read\"]\n}\n",
    )
    .await;
    let (token, _) = token_with(&app, &["live"]).await;
    let (status, _) = call(&app, "GET", "/v1/secret/live", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    put_policy(
        &app,
        "live",
        "path \"secret/live\" {\n capabilities = [\"deny\"]\n}\n",
    )
    .await;
    let (status, _) = call(&app, "GET", "/v1/secret/live", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A deleted policy acts as an empty one.
    put_policy(
        &app,
        "live",
        "path \"secret/live\" {\n capabilities = [\"read\"]\n}\n",
    )
    .await;
    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/acl/live",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/secret/live", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn policies_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let storage: std::sync::Arc<dyn storage::Storage> =
        std::sync::Arc::new(storage::MemStorage::new());
    let key_file = dir.path().join("unseal.key");
    let app = support::dev_over(storage.clone(), ROOT, Some(key_file.clone())).await;
    put_policy(
        &app,
        "kept",
        "path \"secret/*\" {\n capabilities = [\"read\"]\n}\n",
    )
    .await;
    drop(app);
    let app = support::dev_over(storage, ROOT, Some(key_file)).await;
    let (status, body) = call(&app, "GET", "/v1/sys/policies/acl/kept", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = call(&app, "LIST", "/v1/sys/policies/acl", Some(ROOT), None).await;
    assert_eq!(body["data"]["keys"], json!(["default", "kept", "root"]));
}

#[tokio::test]
async fn entity_policies_and_templated_default_paths_count_in_capabilities() {
    let app = app().await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/auth/userpass",
        Some(ROOT),
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/userpass/users/alice",
        Some(ROOT),
        Some(json!({"password": "pw-alice-1", "policies": "default"})),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/userpass/login/alice",
        None,
        Some(json!({"password": "pw-alice-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["auth"]["client_token"].as_str().unwrap().to_owned();
    let entity_id = body["auth"]["entity_id"].as_str().unwrap().to_owned();
    assert!(!entity_id.is_empty(), "{body}");

    // `default` grants reading one's own entity through a templated path.
    let own = format!("identity/entity/id/{entity_id}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities-self",
        Some(&token),
        Some(json!({"paths": [own, "identity/entity/id/someone-else", "secret/team"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"][&own], json!(["read"]));
    assert_eq!(
        body["data"]["identity/entity/id/someone-else"],
        json!(["deny"])
    );
    assert_eq!(body["data"]["secret/team"], json!(["deny"]));

    // Policies on the entity add to the token's.
    put_policy(
        &app,
        "team",
        "path \"secret/team\" {\n capabilities = [\"read\"]\n}\n",
    )
    .await;
    let (status, body) = call(
        &app,
        "POST",
        &format!("/v1/identity/entity/id/{entity_id}"),
        Some(ROOT),
        Some(json!({"policies": ["team"]})),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/capabilities",
        Some(ROOT),
        Some(json!({"token": token, "path": "secret/team"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["capabilities"], json!(["read"]));
}
