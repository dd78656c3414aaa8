//! One-time passwords: creds for `otp` roles (usernames, CIDR rules, zero-address roles),
//! `verify` (once, then refused; refused after the lease is revoked), the echo, and `lookup`.

mod support;

use secrets_sdk::Operation;
use serde_json::json;
use support::{data, fixture};

async fn otp_role(f: &support::Fixture) {
    f.write(
        "roles/web",
        json!({"key_type": "otp", "default_user": "deploy", "cidr_list": "10.0.0.0/8,127.0.0.0/8",
               "exclude_cidr_list": "10.9.0.0/16", "allowed_users": "alice, bob", "port": 2222}),
    )
    .await;
}

#[tokio::test]
async fn an_otp_verifies_once_then_is_refused() {
    let f = fixture();
    otp_role(&f).await;
    let response = f
        .call(
            Operation::Update,
            "creds/web",
            json!({"ip": "10.1.2.3", "username": "alice"}),
        )
        .await
        .unwrap()
        .unwrap();
    let secret = response.secret.as_ref().expect("an OTP is leased");
    assert!(!secret.renewable);
    assert!(secret.ttl.is_zero(), "the mount's default TTL");
    let out = response.data.clone().unwrap();
    assert_eq!(out["key_type"], "otp");
    assert_eq!(out["username"], "alice");
    assert_eq!(out["ip"], "10.1.2.3");
    assert_eq!(out["port"], 2222);
    let otp = out["key"].as_str().unwrap().to_owned();
    assert_eq!(otp.len(), 36, "a UUID");
    // The OTP itself is never stored.
    assert!(
        f.storage.keys().iter().all(|key| !key.contains(&otp)),
        "{:?}",
        f.storage.keys()
    );
    let verified = f.write("verify", json!({"otp": otp})).await;
    assert_eq!(
        verified,
        data(json!({"username": "alice", "ip": "10.1.2.3", "role_name": "web"}))
    );
    assert_eq!(
        f.refused("verify", json!({"otp": otp})).await,
        "OTP not found"
    );
}

#[tokio::test]
async fn a_revoked_or_expired_otp_no_longer_verifies() {
    let f = fixture();
    otp_role(&f).await;
    let response = f
        .call(Operation::Update, "creds/web", json!({"ip": "127.0.0.1"}))
        .await
        .unwrap()
        .unwrap();
    let out = response.data.clone().unwrap();
    assert_eq!(out["username"], "deploy", "the default user");
    f.revoke("creds/web", &response).await.unwrap();
    assert_eq!(
        f.refused("verify", json!({"otp": out["key"]})).await,
        "OTP not found"
    );
}

#[tokio::test]
async fn verify_answers_the_helpers_echo_and_needs_an_otp() {
    let f = fixture();
    assert_eq!(
        f.write("verify", json!({"otp": "verify-echo-request"}))
            .await,
        data(json!({"message": "verify-echo-response"}))
    );
    assert_eq!(f.refused("verify", json!({})).await, "Missing otp");
    assert_eq!(
        f.refused(
            "verify",
            json!({"otp": "f0f0f0f0-0000-4000-8000-000000000000"})
        )
        .await,
        "OTP not found"
    );
}

#[tokio::test]
async fn creds_follow_the_roles_users_and_cidr_rules() {
    let f = fixture();
    otp_role(&f).await;
    let cases = [
        (json!({"username": "alice"}), "Missing ip"),
        (json!({"ip": "10.0.0.300"}), r#"Invalid IP "10.0.0.300""#),
        (
            json!({"ip": "10.0.0.1", "username": "eve"}),
            "Username is not present is allowed users list",
        ),
        (
            json!({"ip": "192.168.0.1"}),
            "Error validating IP: IP does not belong to role",
        ),
        (
            json!({"ip": "10.9.1.1"}),
            "Error validating IP: IP does not belong to role",
        ),
    ];
    for (body, message) in cases {
        assert_eq!(
            f.refused("creds/web", body.clone()).await,
            message,
            "{body}"
        );
    }
    assert_eq!(
        f.refused("creds/absent", json!({"ip": "10.0.0.1"})).await,
        r#"Role "absent" not found"#
    );
    f.write(
        "roles/strict",
        json!({"key_type": "otp", "default_user": "deploy", "cidr_list": "0.0.0.0/0"}),
    )
    .await;
    assert_eq!(
        f.refused(
            "creds/strict",
            json!({"ip": "1.2.3.4", "username": "alice"})
        )
        .await,
        "Username has to be either in allowed users list or has to be a default username"
    );
    f.write(
        "roles/ca",
        json!({"key_type": "ca", "allow_user_certificates": true}),
    )
    .await;
    assert_eq!(
        f.refused("creds/ca", json!({"ip": "1.2.3.4"})).await,
        "No default username registered. Use 'username' option"
    );
}

#[tokio::test]
async fn a_zero_address_role_takes_any_ip_even_without_a_cidr_list() {
    let f = fixture();
    f.write(
        "roles/any",
        json!({"key_type": "otp", "default_user": "root", "cidr_list": ""}),
    )
    .await;
    assert_eq!(
        f.refused("creds/any", json!({"ip": "203.0.113.9"})).await,
        "Error validating IP: IP does not belong to role"
    );
    f.write("config/zeroaddress", json!({"roles": "any"})).await;
    let out = f.write("creds/any", json!({"ip": "203.0.113.9"})).await;
    assert_eq!(out["ip"], "203.0.113.9");
}

#[tokio::test]
async fn lookup_lists_the_roles_covering_an_ip() {
    let f = fixture();
    otp_role(&f).await;
    f.write(
        "roles/other",
        json!({"key_type": "otp", "default_user": "u", "cidr_list": "192.168.0.0/16"}),
    )
    .await;
    f.write(
        "roles/zero",
        json!({"key_type": "otp", "default_user": "u"}),
    )
    .await;
    f.write("config/zeroaddress", json!({"roles": "zero"}))
        .await;
    assert_eq!(
        f.write("lookup", json!({"ip": "10.1.1.1"})).await,
        data(json!({"roles": ["web", "zero"]}))
    );
    assert_eq!(
        f.write("lookup", json!({"ip": "10.9.1.1"})).await,
        data(json!({"roles": ["zero"]}))
    );
    assert_eq!(f.refused("lookup", json!({})).await, "Missing ip");
    assert_eq!(
        f.refused("lookup", json!({"ip": "nope"})).await,
        r#"Invalid IP "nope""#
    );
}
