//! Engines see their mount's lease TTLs (`secrets_sdk::MountTtls`), as Vault's engines read
//! `System().DefaultLeaseTTL()`/`MaxLeaseTTL()`: a pki mount tuned past the system's 768h
//! issues a certificate for longer, and one tuned below it caps its certificates.

mod support;

use http::StatusCode;
use serde_json::json;
use support::{call, dev};

const ROOT: &str = "root";
const HOUR: i64 = 3600;

/// Mounts pki at `path` with the given tuning, a root and a role allowing any name.
async fn pki(app: &axum::Router, path: &str, config: serde_json::Value) {
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/sys/mounts/{path}"),
        Some(ROOT),
        Some(json!({"type": "pki", "config": config})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/{path}/root/generate/internal"),
        Some(ROOT),
        Some(json!({"common_name": "Root", "ttl": "87600h", "key_type": "ec"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/{path}/roles/any"),
        Some(ROOT),
        Some(json!({"allow_any_name": true, "key_type": "ec"})),
    )
    .await;
    assert!(status.is_success(), "{body}");
}

/// Issues `example.com` with `ttl` and answers the certificate's lifetime in seconds.
async fn lifetime(app: &axum::Router, path: &str, ttl: &str) -> (i64, serde_json::Value) {
    let (status, body) = call(
        app,
        "POST",
        &format!("/v1/{path}/issue/any"),
        Some(ROOT),
        Some(json!({"common_name": "example.com", "ttl": ttl})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let serial = body["data"]["serial_number"].as_str().unwrap().to_owned();
    let expiration = body["data"]["expiration"].as_i64().unwrap();
    let (_, cert) = call(
        app,
        "GET",
        &format!("/v1/{path}/cert/{serial}"),
        Some(ROOT),
        None,
    )
    .await;
    assert!(cert["data"]["certificate"].is_string(), "{cert}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    (expiration - now, body)
}

#[tokio::test]
async fn a_mount_tuned_past_the_system_max_issues_for_longer() {
    let app = dev(ROOT).await;
    pki(&app, "pki-long", json!({"max_lease_ttl": "8760h"})).await;
    let (seconds, body) = lifetime(&app, "pki-long", "2000h").await;
    assert!(
        (2000 * HOUR - 120..=2000 * HOUR + 120).contains(&seconds),
        "{seconds} s: {body}"
    );
    assert!(body["warnings"].is_null(), "not capped: {body}");
}

#[tokio::test]
async fn a_mount_tuned_below_the_system_max_caps_its_certificates() {
    let app = dev(ROOT).await;
    pki(&app, "pki-short", json!({"max_lease_ttl": "2h"})).await;
    let (seconds, body) = lifetime(&app, "pki-short", "10h").await;
    assert!(
        (2 * HOUR - 120..=2 * HOUR + 120).contains(&seconds),
        "{seconds} s: {body}"
    );
}
