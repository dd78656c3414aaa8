//! Request handling through the router (docs/design.md §U1, §U2): verbs, `?list` spellings, the
//! 200/204/404 rules and LIST's 404, the envelope, JSON and form bodies, nulls, PATCH's
//! content type, the three token headers, 403 vs 404 on unknown paths, and 503 while sealed.
//! A kv version 1 mount at `secret/` (in dev mode) is the backend.

mod support;

use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};
use support::{call, call_raw, dev_kv_v1};

const ROOT: &str = "root";

#[tokio::test]
async fn write_is_204_read_is_200_with_vaults_envelope() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/secret/app",
        Some(ROOT),
        Some(json!({"password": "p1"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(body, Value::Null);

    let (status, headers, body) = call_raw(
        &app,
        "GET",
        "/v1/secret/app",
        &[("x-vault-token", ROOT)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "auth",
            "data",
            "lease_duration",
            "lease_id",
            "renewable",
            "request_id",
            "warnings",
            "wrap_info"
        ]
    );
    assert_eq!(body["data"], json!({"password": "p1"}));
    assert_eq!(body["lease_id"], "");
    assert_eq!(body["renewable"], false);
    assert_eq!(body["wrap_info"], Value::Null);
    assert_eq!(body["warnings"], Value::Null);
    assert_eq!(body["auth"], Value::Null);
    assert!(!body["request_id"].as_str().unwrap().is_empty());
}

#[tokio::test]
async fn read_of_missing_item_is_404_with_empty_errors() {
    let app = dev_kv_v1(ROOT).await;
    let (status, headers, body) = call_raw(
        &app,
        "GET",
        "/v1/secret/nope",
        &[("x-vault-token", ROOT)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body, json!({"errors": []}));
}

#[tokio::test]
async fn delete_is_204_even_when_missing() {
    let app = dev_kv_v1(ROOT).await;
    call(
        &app,
        "PUT",
        "/v1/secret/a",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    let (status, _) = call(&app, "DELETE", "/v1/secret/a", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "DELETE", "/v1/secret/a", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&app, "GET", "/v1/secret/a", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn list_verb_and_get_list_spellings_list_keys() {
    let app = dev_kv_v1(ROOT).await;
    for path in ["dir/a", "dir/b", "dir/sub/c"] {
        let (status, _) = call(
            &app,
            "PUT",
            &format!("/v1/secret/{path}"),
            Some(ROOT),
            Some(json!({"v": 1})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    let expected = json!(["a", "b", "sub/"]);
    let (status, body) = call(&app, "LIST", "/v1/secret/dir", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], expected);
    for spelling in ["true", "True", "TRUE", "t", "T", "1"] {
        let (status, body) = call(
            &app,
            "GET",
            &format!("/v1/secret/dir/?list={spelling}"),
            Some(ROOT),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{spelling}: {body}");
        assert_eq!(body["data"]["keys"], expected, "{spelling}");
    }
    // `list=false` is a plain read of `secret/dir`, which holds nothing.
    let (status, _) = call(&app, "GET", "/v1/secret/dir?list=false", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn get_list_with_bad_boolean_is_400() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/secret/?list=yes", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["errors"][0].as_str().unwrap().contains("list"),
        "{body}"
    );
}

#[tokio::test]
async fn list_with_no_keys_is_404() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(&app, "LIST", "/v1/secret/empty", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"errors": []}));
}

#[tokio::test]
async fn form_bodies_are_accepted_and_json_with_form_type_too() {
    let app = dev_kv_v1(ROOT).await;
    let form = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-vault-token", ROOT),
    ];
    let (status, _, _) = call_raw(
        &app,
        "POST",
        "/v1/secret/form",
        &form,
        "user=alice&tags=a&tags=b",
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&app, "GET", "/v1/secret/form", Some(ROOT), None).await;
    assert_eq!(body["data"], json!({"user": "alice", "tags": "a,b"}));

    let (status, _, _) = call_raw(&app, "POST", "/v1/secret/json", &form, r#"  {"n": 2}"#).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&app, "GET", "/v1/secret/json", Some(ROOT), None).await;
    assert_eq!(body["data"], json!({"n": 2}));
}

#[tokio::test]
async fn json_null_fields_are_absent() {
    let app = dev_kv_v1(ROOT).await;
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/n",
        Some(ROOT),
        Some(json!({"a": 1, "b": null})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&app, "GET", "/v1/secret/n", Some(ROOT), None).await;
    assert_eq!(body["data"], json!({"a": 1}));
    // Only nulls: no data at all, which kv refuses.
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/secret/m",
        Some(ROOT),
        Some(json!({"a": null})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body, json!({"errors": ["missing data fields"]}));
}

#[tokio::test]
async fn malformed_json_is_400_in_vaults_shape() {
    let app = dev_kv_v1(ROOT).await;
    let (status, headers, body) = call_raw(
        &app,
        "POST",
        "/v1/secret/x",
        &[("x-vault-token", ROOT)],
        "{\"a\":",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(headers["content-type"], "application/json");
    assert!(
        body["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("failed to parse JSON input"),
        "{body}"
    );
    let (status, _, _) = call_raw(
        &app,
        "POST",
        "/v1/secret/x",
        &[("x-vault-token", ROOT)],
        "[1,2]",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn patch_without_merge_patch_content_type_is_415() {
    let app = dev_kv_v1(ROOT).await;
    let (status, _, body) = call_raw(
        &app,
        "PATCH",
        "/v1/secret/x",
        &[
            ("x-vault-token", ROOT),
            ("content-type", "application/json"),
        ],
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        body["errors"][0],
        "PATCH requires Content-Type of application/merge-patch+json, provided application/json"
    );
    // With the right type it reaches kv v1, which has no patch.
    let (status, _, _) = call_raw(
        &app,
        "PATCH",
        "/v1/secret/x",
        &[
            ("x-vault-token", ROOT),
            ("content-type", "application/merge-patch+json"),
        ],
        "{\"a\":1}",
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn unknown_verbs_are_405() {
    let app = dev_kv_v1(ROOT).await;
    let (status, _, body) =
        call_raw(&app, "BREW", "/v1/secret/x", &[("x-vault-token", ROOT)], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body, json!({"errors": ["unsupported operation"]}));
}

#[tokio::test]
async fn head_and_options_are_allowed() {
    let app = dev_kv_v1(ROOT).await;
    call(
        &app,
        "PUT",
        "/v1/secret/h",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    let (status, _, _) =
        call_raw(&app, "HEAD", "/v1/secret/h", &[("x-vault-token", ROOT)], "").await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, _) = call_raw(&app, "OPTIONS", "/v1/secret/h", &[], "").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(headers["allow"].to_str().unwrap().contains("LIST"));
}

#[tokio::test]
async fn token_is_read_from_secrets_vault_and_bearer_headers() {
    let app = dev_kv_v1(ROOT).await;
    call(
        &app,
        "PUT",
        "/v1/secret/t",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    for header in [
        ("x-secrets-token", ROOT.to_owned()),
        ("x-vault-token", ROOT.to_owned()),
        ("authorization", format!("Bearer {ROOT}")),
    ] {
        let (status, _, body) = call_raw(
            &app,
            "GET",
            "/v1/secret/t",
            &[(header.0, header.1.as_str())],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{}: {body}", header.0);
        assert_eq!(body["data"]["v"], 1);
    }
}

#[tokio::test]
async fn missing_or_unknown_token_is_403_permission_denied() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/secret/t", None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body, json!({"errors": ["permission denied"]}));
    let (status, body) = call(&app, "GET", "/v1/secret/t", Some("hvs.nope"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body, json!({"errors": ["permission denied"]}));
    let (status, _, _) = call_raw(
        &app,
        "GET",
        "/v1/secret/t",
        &[("authorization", "Basic abc")],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn unknown_path_is_404_for_root_and_403_for_others() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/nowhere/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"errors": ["no handler for route \"nowhere/x\". route entry not found."]})
    );
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/token/create",
        Some(ROOT),
        Some(json!({"policies": ["default"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["auth"]["client_token"].as_str().unwrap().to_owned();
    let (status, body) = call(&app, "GET", "/v1/nowhere/x", Some(&token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

#[tokio::test]
async fn unknown_sys_path_is_404_unsupported_path() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/sys/not-a-thing", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"errors": ["unsupported path"]}));
}

#[tokio::test]
async fn sys_mounts_data_is_also_at_top_level() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(&app, "GET", "/v1/sys/mounts", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["secret/"]["type"], "kv");
    assert_eq!(body["secret/"]["type"], "kv");
    assert_eq!(body["sys/"]["type"], "system");
    // Not every sys route: a kv read never gets top-level data.
    call(
        &app,
        "PUT",
        "/v1/secret/k",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    let (_, body) = call(&app, "GET", "/v1/secret/k", Some(ROOT), None).await;
    assert!(body.get("v").is_none());
}

#[tokio::test]
async fn sealed_store_answers_503_everywhere_but_health() {
    let app = support::server(Arc::new(storage::MemStorage::new())).await;
    let (status, body) = call(&app, "GET", "/v1/secret/x", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, json!({"errors": ["Vault is sealed"]}));
    let (status, _) = call(&app, "LIST", "/v1/sys/mounts", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn percent_encoded_paths_are_decoded() {
    let app = dev_kv_v1(ROOT).await;
    let (status, _) = call(
        &app,
        "PUT",
        "/v1/secret/with%20space",
        Some(ROOT),
        Some(json!({"v": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&app, "LIST", "/v1/secret/", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["keys"], json!(["with space"]));
}

#[tokio::test]
async fn userpass_login_is_unauthenticated_and_returns_a_token() {
    let app = dev_kv_v1(ROOT).await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/auth/people",
        Some(ROOT),
        Some(json!({"type": "userpass"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/people/users/alice",
        Some(ROOT),
        Some(json!({"password": "s3cret-pw", "policies": "default"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/auth/people/login/alice",
        None,
        Some(json!({"password": "s3cret-pw"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["auth"]["client_token"].as_str().unwrap().to_owned();
    assert!(
        body["auth"]["entity_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{body}"
    );
    // The new token works (lookup-self is in `default`).
    let (status, body) = call(
        &app,
        "GET",
        "/v1/auth/token/lookup-self",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A bad password is refused, still without a token.
    let (status, _) = call(
        &app,
        "POST",
        "/v1/auth/people/login/alice",
        None,
        Some(json!({"password": "wrong"})),
    )
    .await;
    assert!(status.is_client_error(), "{status}");
}
