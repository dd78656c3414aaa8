//! Roles through the engine: upstream's defaults on read, validation as 400s, patch keeping
//! stored fields, listing, deletion, and the warnings a write can carry.

mod support;

use secrets_sdk::Operation;
use serde_json::json;
use support::Pki;

#[tokio::test]
async fn a_role_reads_back_with_every_upstream_field_and_default() {
    let pki = Pki::new();
    let answer = pki
        .write(
            "roles/web",
            json!({"allowed_domains": ["example.com"], "ttl": "1h"}),
        )
        .await;
    assert_eq!(answer["status"], 200);
    assert!(
        answer["warnings"]
            .to_string()
            .contains("no default issuing certificate")
    );
    let data = pki.read("roles/web").await["data"].clone();
    for (field, expected) in [
        ("ttl", json!(3600)),
        ("max_ttl", json!(0)),
        ("allow_localhost", json!(true)),
        ("allowed_domains", json!(["example.com"])),
        ("allow_subdomains", json!(false)),
        ("allow_bare_domains", json!(false)),
        ("allow_glob_domains", json!(false)),
        ("allow_wildcard_certificates", json!(true)),
        ("allow_any_name", json!(false)),
        ("enforce_hostnames", json!(true)),
        ("allow_ip_sans", json!(true)),
        ("allowed_uri_sans", json!([])),
        ("allowed_other_sans", json!([])),
        ("server_flag", json!(true)),
        ("client_flag", json!(true)),
        ("code_signing_flag", json!(false)),
        ("email_protection_flag", json!(false)),
        ("key_type", json!("rsa")),
        ("key_bits", json!(2048)),
        ("signature_bits", json!(256)),
        (
            "key_usage",
            json!(["DigitalSignature", "KeyAgreement", "KeyEncipherment"]),
        ),
        ("use_csr_common_name", json!(true)),
        ("use_csr_sans", json!(true)),
        ("generate_lease", json!(false)),
        ("no_store", json!(false)),
        ("require_cn", json!(true)),
        ("cn_validations", json!(["email", "hostname"])),
        ("not_before_duration", json!(30)),
        ("issuer_ref", json!("default")),
        ("use_pss", json!(false)),
    ] {
        assert_eq!(data[field], expected, "{field}");
    }
    assert_eq!(pki.list("roles/").await["data"]["keys"], json!(["web"]));
}

#[tokio::test]
async fn a_post_resets_unspecified_fields_and_a_patch_keeps_them() {
    let pki = Pki::new();
    pki.ok(
        "roles/web",
        json!({"allowed_domains": "example.com", "allow_subdomains": true, "key_type": "ec"}),
    )
    .await;
    let patched = pki
        .call(Operation::Patch, "roles/web", json!({"max_ttl": "2h"}))
        .await;
    assert_eq!(patched["data"]["allow_subdomains"], true);
    assert_eq!(patched["data"]["key_type"], "ec");
    assert_eq!(patched["data"]["key_bits"], 256);
    assert_eq!(patched["data"]["max_ttl"], 7200);
    let posted = pki.ok("roles/web", json!({"max_ttl": "2h"})).await;
    assert_eq!(posted["allow_subdomains"], false);
    assert_eq!(posted["key_type"], "rsa");
    assert_eq!(
        pki.call(Operation::Patch, "roles/missing", json!({})).await["error"],
        "Unable to fetch role entry to patch"
    );
    assert_eq!(pki.delete("roles/web").await["status"], "none");
    assert_eq!(pki.read("roles/web").await["status"], "none");
}

#[tokio::test]
async fn role_writes_refuse_bad_values_and_warn_about_leases_and_unknown_fields() {
    let pki = Pki::new();
    assert!(
        pki.refused("roles/r", json!({"key_type": "ec", "key_bits": 1}))
            .await
            .contains("EC key")
    );
    assert!(
        pki.refused("roles/r", json!({"ttl": "x"}))
            .await
            .starts_with("Field validation failed")
    );
    assert!(
        pki.refused("roles/r", json!({"allow_localhost": "maybe"}))
            .await
            .contains("allow_localhost")
    );
    let answer = pki
        .write(
            "roles/r",
            json!({"no_store": true, "generate_lease": true, "bogus": 1}),
        )
        .await;
    let warnings = answer["warnings"].to_string();
    assert!(
        warnings.contains("no_store=true takes priority"),
        "{warnings}"
    );
    assert!(
        warnings.contains("unrecognized parameters: [bogus]"),
        "{warnings}"
    );
    assert_eq!(answer["data"]["generate_lease"], false);
}
