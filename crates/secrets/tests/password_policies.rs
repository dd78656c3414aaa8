//! `sys/policies/password`: policies are written, read, listed, generate passwords that meet
//! their rules, refuse impossible or malformed documents with Vault's 400s, and go away.

mod support;

use http::StatusCode;
use serde_json::json;
use support::{call, dev};

const ROOT: &str = "root";

const POLICY: &str = r#"
length = 16
rule "charset" {
  charset = "abcdefghijklmnopqrstuvwxyz"
  min-chars = 2
}
rule "charset" {
  charset = "0123456789"
  min-chars = 3
}
"#;

#[tokio::test]
async fn a_policy_is_stored_read_listed_generates_matching_passwords_and_is_deleted() {
    let app = dev(ROOT).await;
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/sys/policies/password/digits",
        Some(ROOT),
        Some(json!({ "policy": POLICY })),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let (status, body) = call(
        &app,
        "GET",
        "/v1/sys/policies/password/digits",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["policy"], POLICY);

    let (status, body) = call(&app, "LIST", "/v1/sys/policies/password", Some(ROOT), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["keys"], json!(["digits"]));

    for _ in 0..5 {
        let (status, body) = call(
            &app,
            "GET",
            "/v1/sys/policies/password/digits/generate",
            Some(ROOT),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let password = body["data"]["password"].as_str().unwrap();
        assert_eq!(password.len(), 16);
        assert!(
            password
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert!(password.chars().filter(char::is_ascii_digit).count() >= 3);
        assert!(password.chars().filter(char::is_ascii_lowercase).count() >= 2);
    }

    let (status, _) = call(
        &app,
        "DELETE",
        "/v1/sys/policies/password/digits",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for path in [
        "/v1/sys/policies/password/digits",
        "/v1/sys/policies/password/digits/generate",
    ] {
        let (status, body) = call(&app, "GET", path, Some(ROOT), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body, json!({"errors": ["policy does not exist"]}), "{path}");
    }
}

#[tokio::test]
async fn bad_policies_are_refused_with_vaults_messages() {
    let app = dev(ROOT).await;
    let cases = [
        ("", "missing policy"),
        ("length = {", "invalid password policy"),
        (
            "length = 2\nrule \"charset\" {\n charset = \"a\"\n}",
            "passwords must be between 4 and 100 characters",
        ),
        (
            "length = 4\nrule \"charset\" {\n charset = \"a\"\n min-chars = 5\n}",
            "are the rules impossible?",
        ),
    ];
    for (policy, message) in cases {
        let (status, body) = call(
            &app,
            "PUT",
            "/v1/sys/policies/password/bad",
            Some(ROOT),
            Some(json!({ "policy": policy })),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{policy}: {body}");
        assert!(
            body["errors"][0].as_str().unwrap().contains(message),
            "{body}"
        );
    }
    let (status, _) = call(
        &app,
        "GET",
        "/v1/sys/policies/password/bad",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_base64_policy_is_decoded_before_it_is_stored() {
    use base64::Engine as _;
    let app = dev(ROOT).await;
    let encoded = base64::engine::general_purpose::STANDARD.encode(POLICY);
    let (status, body) = call(
        &app,
        "POST",
        "/v1/sys/policies/password/b64",
        Some(ROOT),
        Some(json!({ "policy": encoded })),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, body) = call(
        &app,
        "GET",
        "/v1/sys/policies/password/b64",
        Some(ROOT),
        None,
    )
    .await;
    assert_eq!(body["data"]["policy"], POLICY);
}
