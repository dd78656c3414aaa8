//! Roles, registered keys and zero-address roles of the ssh engine, through the engine itself
//! (no HTTP): the shapes hvac's tests assert and every validation message.

mod support;

use secrets_sdk::{EngineError, Operation};
use serde_json::json;
use support::{data, fixture};

#[tokio::test]
async fn an_otp_role_reads_back_exactly_the_six_fields_hvac_checks() {
    let f = fixture();
    f.write(
        "roles/test_role",
        json!({"key_type": "otp", "default_user": "root", "admin_user": "", "cidr_list": "",
               "allowed_users": "", "port": 22, "key_bits": 1024,
               "allow_user_certificates": "", "default_extensions": null}),
    )
    .await;
    assert_eq!(
        f.read("roles/test_role").await.unwrap(),
        data(
            json!({"allowed_users": "", "cidr_list": "", "default_user": "root",
                    "exclude_cidr_list": "", "key_type": "otp", "port": 22})
        )
    );
    let listed = f
        .call(Operation::List, "roles/", json!({}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        listed.data.unwrap(),
        data(json!({"keys": ["test_role"], "key_info": {"test_role": {"key_type": "otp"}}}))
    );
}

#[tokio::test]
async fn role_writes_are_validated_with_vaults_messages() {
    let f = fixture();
    let cases = [
        (json!({}), "missing key type"),
        (json!({"key_type": "nope"}), "invalid key type"),
        (json!({"key_type": "otp"}), "missing default user"),
        (
            json!({"key_type": "otp", "default_user": "u", "admin_user": "root"}),
            "admin user not required for OTP type",
        ),
        (
            json!({"key_type": "otp", "default_user": "u", "cidr_list": "10.0.0.0/33"}),
            "failed to validate cidr_list: invalid CIDR address: 10.0.0.0/33",
        ),
        (
            json!({"key_type": "otp", "default_user": "u", "exclude_cidr_list": "x"}),
            "failed to validate exclude_cidr_list entry: invalid CIDR address: x",
        ),
        (json!({"key_type": "dynamic"}), "missing default user"),
        (
            json!({"key_type": "dynamic", "default_user": "u"}),
            "missing key name",
        ),
        (
            json!({"key_type": "dynamic", "default_user": "u", "key": "absent"}),
            r#"invalid 'key': "absent""#,
        ),
        (
            json!({"key_type": "ca"}),
            "Either 'allow_user_certificates' or 'allow_host_certificates' must be set to 'true'",
        ),
        (
            json!({"key_type": "ca", "allow_user_certificates": true, "ttl": "2h", "max_ttl": "1h"}),
            r#""ttl" value must be less than "max_ttl" when both are specified"#,
        ),
        (
            json!({"key_type": "ca", "allow_user_certificates": true, "algorithm_signer": "md5"}),
            r#"unknown algorithm signer "md5""#,
        ),
        (
            json!({"key_type": "ca", "allow_user_certificates": true,
                   "allowed_user_key_lengths": {"rsa": "big"}}),
            r#"error processing allowed_user_key_lengths: the value of "rsa" is not a key size: "big""#,
        ),
    ];
    for (body, message) in cases {
        assert_eq!(f.refused("roles/r", body.clone()).await, message, "{body}");
    }
    assert!(f.read("roles/r").await.is_none());
}

#[tokio::test]
async fn a_ca_role_keeps_every_parameter_and_defaults_the_signer_and_back_dating() {
    let f = fixture();
    f.write(
        "roles/ca",
        json!({"key_type": "CA", "allow_user_certificates": "true", "allowed_users": "alice,bob",
               "default_user": "alice", "ttl": "1h", "max_ttl": 7200,
               "allowed_extensions": "permit-pty", "default_extensions": {"permit-pty": ""},
               "default_critical_options": {"force-command": "/usr/bin/id"},
               "allowed_user_key_lengths": {"rsa": [2048, 4096], "ed25519": 0},
               "key_id_format": "{{role_name}}-{{token_display_name}}"}),
    )
    .await;
    let role = f.read("roles/ca").await.unwrap();
    assert_eq!(role["key_type"], "ca");
    assert_eq!(role["ttl"], 3600);
    assert_eq!(role["max_ttl"], 7200);
    assert_eq!(role["algorithm_signer"], "default");
    assert_eq!(role["not_before_duration"], 30);
    assert_eq!(
        role["allowed_user_key_lengths"],
        json!({"rsa": [2048, 4096], "ed25519": 0})
    );
    assert_eq!(
        role["default_critical_options"],
        json!({"force-command": "/usr/bin/id"})
    );
    assert_eq!(role["allow_host_certificates"], false);
    assert_eq!(
        role["key_id_format"],
        "{{role_name}}-{{token_display_name}}"
    );
}

#[tokio::test]
async fn a_dynamic_role_needs_a_registered_key_and_gets_the_built_in_script() {
    let f = fixture();
    let admin = support::keygen("ed25519", None);
    let private = std::fs::read_to_string(&admin.private).unwrap();
    assert_eq!(f.refused("keys/admin", json!({})).await, "Missing key");
    assert_eq!(
        f.refused("keys/admin", json!({"key": "not a key"})).await,
        "Invalid key"
    );
    f.write("keys/admin", json!({"key": private})).await;
    assert_eq!(
        f.call(Operation::Read, "keys/admin", json!({}))
            .await
            .unwrap_err(),
        EngineError::UnsupportedOperation
    );
    let base = json!({"key_type": "dynamic", "key": "admin", "default_user": "u"});
    let mut without_admin = base.clone();
    without_admin["cidr_list"] = json!("127.0.0.0/8");
    assert_eq!(
        f.refused("roles/dyn", without_admin).await,
        "missing admin username"
    );
    let mut bad_bits = base.clone();
    bad_bits["admin_user"] = json!("root");
    bad_bits["key_bits"] = json!(4096);
    assert_eq!(
        f.refused("roles/dyn", bad_bits).await,
        "invalid key_bits field"
    );
    let mut good = base.clone();
    good["admin_user"] = json!("root");
    good["key_option_specs"] = json!("no-pty");
    f.write("roles/dyn", good).await;
    let role = f.read("roles/dyn").await.unwrap();
    assert_eq!(role["key_bits"], 1024);
    assert_eq!(role["port"], 22);
    assert_eq!(role["key_option_specs"], "no-pty");
    assert!(
        role["install_script"]
            .as_str()
            .unwrap()
            .starts_with("#!/bin/sh")
    );
    // A key is write-only and its deletion is a 204 whether or not it existed.
    assert!(
        f.call(Operation::Delete, "keys/admin", json!({}))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        f.call(Operation::Delete, "keys/admin", json!({}))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn zero_address_roles_need_existing_roles_and_go_with_them() {
    let f = fixture();
    assert!(f.read("config/zeroaddress").await.is_none());
    assert_eq!(
        f.refused("config/zeroaddress", json!({"roles": ""})).await,
        "Missing roles"
    );
    f.write("roles/a", json!({"key_type": "otp", "default_user": "u"}))
        .await;
    f.write("roles/b", json!({"key_type": "otp", "default_user": "u"}))
        .await;
    assert_eq!(
        f.refused("config/zeroaddress", json!({"roles": "a,c"}))
            .await,
        r#"Role "c" does not exist"#
    );
    f.write("config/zeroaddress", json!({"roles": ["a", "b", "a"]}))
        .await;
    assert_eq!(
        f.read("config/zeroaddress").await.unwrap(),
        data(json!({"roles": ["a", "b"]}))
    );
    f.call(Operation::Delete, "roles/a", json!({}))
        .await
        .unwrap();
    assert_eq!(
        f.read("config/zeroaddress").await.unwrap(),
        data(json!({"roles": ["b"]}))
    );
    f.call(Operation::Delete, "config/zeroaddress", json!({}))
        .await
        .unwrap();
    assert!(f.read("config/zeroaddress").await.is_none());
}

#[tokio::test]
async fn unknown_paths_and_operations_are_vaults_404_and_405() {
    let f = fixture();
    assert_eq!(
        f.call(Operation::Read, "nope", json!({}))
            .await
            .unwrap_err(),
        EngineError::UnsupportedPath
    );
    assert_eq!(
        f.call(Operation::Read, "roles/bad name", json!({}))
            .await
            .unwrap_err(),
        EngineError::UnsupportedPath
    );
    assert_eq!(
        f.call(Operation::Read, "verify", json!({}))
            .await
            .unwrap_err(),
        EngineError::UnsupportedOperation
    );
    assert_eq!(
        f.call(Operation::Delete, "sign/x", json!({}))
            .await
            .unwrap_err(),
        EngineError::UnsupportedOperation
    );
    assert!(
        f.call(Operation::List, "roles/", json!({}))
            .await
            .unwrap()
            .is_none()
    );
    let paths = f.engine.special_paths();
    assert_eq!(paths.unauthenticated, ["verify", "public_key"]);
}
