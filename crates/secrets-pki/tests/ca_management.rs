//! CA management through the engine: generating roots of every key type (checked by
//! `openssl x509 -text`), several issuers per mount, the default issuer, issuer and key
//! management, and the fetch endpoints.

mod support;

use serde_json::json;
use support::{Pki, s};

#[tokio::test]
async fn roots_of_every_key_type_are_self_signed_cas_openssl_accepts() {
    let pki = Pki::new();
    for (key_type, bits, expect) in [
        ("rsa", 2048, "rsaEncryption"),
        ("rsa", 3072, "3072 bit"),
        ("ec", 256, "prime256v1"),
        ("ec", 384, "secp384r1"),
        ("ec", 521, "secp521r1"),
        ("ed25519", 0, "ED25519"),
    ] {
        let name = format!("{key_type}{bits}");
        let data = pki
            .ok(
                "root/generate/exported",
                json!({"common_name": "Example Root", "key_type": key_type, "key_bits": bits, "issuer_name": name, "ou": "Ops", "organization": "Example", "country": "US"}),
            )
            .await;
        let cert = s(&data["certificate"]);
        assert_eq!(data["issuing_ca"], data["certificate"]);
        assert!(
            data["private_key"]
                .as_str()
                .unwrap()
                .contains("PRIVATE KEY")
        );
        assert_eq!(data["private_key_type"], key_type);
        assert_eq!(data["issuer_name"], name.as_str());
        let text = pki.text(cert);
        assert!(text.contains(expect), "{key_type} {bits}: {text}");
        assert!(text.contains("CA:TRUE"), "{text}");
        assert!(text.contains("Certificate Sign, CRL Sign"), "{text}");
        assert!(text.contains("Subject Key Identifier"), "{text}");
        assert!(
            text.contains("C = US, O = Example, OU = Ops, CN = Example Root"),
            "{text}"
        );
        pki.verify(cert, &[], cert, &[]).unwrap();
        // The serial is lower-case colon hex of the certificate's serial.
        let serial = s(&data["serial_number"]);
        assert!(
            serial
                .split(':')
                .all(|p| p.len() == 2 && p == p.to_lowercase())
        );
    }
}

#[tokio::test]
async fn a_second_root_is_a_second_issuer_and_the_first_stays_default() {
    let pki = Pki::new();
    let first = pki.root("ec", "one").await;
    let second = pki.root("ec", "two").await;
    assert_ne!(first["issuer_id"], second["issuer_id"]);
    let listed = pki.list("issuers/").await;
    let keys = listed["data"]["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    let info = &listed["data"]["key_info"];
    assert_eq!(info[s(&first["issuer_id"])]["is_default"], true);
    assert_eq!(info[s(&second["issuer_id"])]["issuer_name"], "two");
    assert_eq!(
        pki.read("config/issuers").await["data"]["default"],
        first["issuer_id"]
    );
    // Make the second the default, by name.
    let data = pki.ok("config/issuers", json!({"default": "two"})).await;
    assert_eq!(data["default"], second["issuer_id"]);
    let ca = pki.read("ca/pem").await;
    assert_eq!(ca["content_type"], "application/pem-certificate-chain");
    assert_eq!(ca["body"], second["certificate"]);
    // Names are unique and never `default`.
    assert!(
        pki.refused(
            "root/generate/internal",
            json!({"common_name": "x", "issuer_name": "two"})
        )
        .await
        .contains("issuer name already in use")
    );
    assert!(
        pki.refused(
            "root/generate/internal",
            json!({"common_name": "x", "issuer_name": "default"})
        )
        .await
        .contains("reserved keyword")
    );
}

#[tokio::test]
async fn issuers_are_read_updated_fetched_raw_and_deleted_by_id_name_or_default() {
    let pki = Pki::new();
    let root = pki.root("rsa", "main").await;
    let id = s(&root["issuer_id"]);
    for reference in [id, "main", "default"] {
        let data = pki.read(&format!("issuer/{reference}")).await["data"].clone();
        assert_eq!(data["issuer_id"], id);
        assert_eq!(data["leaf_not_after_behavior"], "err");
        assert_eq!(
            data["usage"],
            "crl-signing,issuing-certificates,ocsp-signing,read-only"
        );
        assert_eq!(data["ca_chain"].as_array().unwrap().len(), 1);
        assert_eq!(data["revocation_signature_algorithm"], "SHA256-RSA");
    }
    let updated = pki
        .ok(
            "issuer/main",
            json!({"issuer_name": "renamed", "leaf_not_after_behavior": "truncate", "usage": "read-only,issuing-certificates"}),
        )
        .await;
    assert_eq!(updated["issuer_name"], "renamed");
    assert_eq!(updated["leaf_not_after_behavior"], "truncate");
    assert_eq!(updated["usage"], "issuing-certificates,read-only");
    assert!(
        pki.refused(
            "issuer/renamed",
            json!({"leaf_not_after_behavior": "sometimes"})
        )
        .await
        .contains("leaf_not_after_behavior")
    );
    assert!(
        pki.refused("issuer/renamed", json!({"usage": "everything"}))
            .await
            .contains("unknown name for usage")
    );
    let json_form = pki.read("issuer/renamed/json").await;
    assert_eq!(
        json_form["data"]["certificate"],
        root["certificate"].as_str().unwrap().to_owned() + "\n"
    );
    let der = pki.read("issuer/renamed/der").await;
    assert_eq!(der["content_type"], "application/pkix-cert");
    let pem = pki.read("issuer/renamed/pem").await;
    assert!(s(&pem["body"]).starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(pki.read("issuer/nothing").await["status"], 400);

    let deleted = pki.delete("issuer/renamed").await;
    assert!(
        deleted["warnings"][0]
            .as_str()
            .unwrap()
            .contains("default issuer")
    );
    assert_eq!(pki.list("issuers/").await["data"]["keys"], json!([]));
    assert_eq!(pki.read("config/issuers").await["data"]["default"], "");
    assert_eq!(pki.read("ca").await["status"], 204);
}

#[tokio::test]
async fn keys_are_listed_named_and_kept_while_an_issuer_uses_them() {
    let pki = Pki::new();
    let root = pki
        .ok(
            "root/generate/internal",
            json!({"common_name": "K", "key_type": "ec", "key_name": "k1"}),
        )
        .await;
    let key_id = s(&root["key_id"]);
    assert_eq!(root["key_name"], "k1");
    let listed = pki.list("keys/").await;
    assert_eq!(listed["data"]["keys"], json!([key_id]));
    let key = pki.read("key/k1").await["data"].clone();
    assert_eq!(key["key_type"], "ec");
    assert_eq!(key["key_id"], key_id);
    assert!(
        pki.delete("key/k1").await["error"]
            .as_str()
            .unwrap()
            .contains("Key in Use by Issuer")
    );
    // A root from the existing key.
    let again = pki
        .ok(
            "root/generate/existing",
            json!({"common_name": "K2", "key_ref": "k1", "issuer_name": "k2"}),
        )
        .await;
    assert_eq!(again["key_id"], key_id);
}

#[tokio::test]
async fn fetch_endpoints_serve_the_default_issuer_and_its_chain() {
    let pki = Pki::new();
    assert_eq!(pki.read("ca/pem").await["status"], 204);
    assert_eq!(pki.read("ca_chain").await["status"], 204);
    let root = pki.root("ec", "r").await;
    let der = pki.read("ca").await;
    assert_eq!(der["content_type"], "application/pkix-cert");
    assert_eq!(pki.read("ca_chain").await["body"], root["certificate"]);
    let chain = pki.read("cert/ca_chain").await["data"].clone();
    assert_eq!(chain["ca_chain"], root["certificate"]);
    assert_eq!(chain["certificate"], root["certificate"]);
    let serial = s(&root["serial_number"]).replace(':', "-");
    let by_serial = pki.read(&format!("cert/{serial}")).await["data"].clone();
    assert_eq!(by_serial["certificate"], root["certificate"]);
    assert_eq!(by_serial["revocation_time"], 0);
    assert_eq!(pki.read("cert/aa-bb").await["status"], "none");
    let special = pki.engine.special_paths();
    assert!(special.unauthenticated.contains(&"ca/pem".to_owned()));
    assert!(special.root.contains(&"root/sign-self-issued".to_owned()));
}

#[tokio::test]
async fn root_generation_refuses_bad_parameters_with_400s() {
    let pki = Pki::new();
    for (path, body, expected) in [
        (
            "root/generate/bogus",
            json!({}),
            "exported\" path parameter",
        ),
        ("root/generate/kms", json!({}), "managed keys"),
        (
            "root/generate/internal",
            json!({"key_type": "rsa", "key_bits": 1024}),
            "RSA keys < 2048 bits",
        ),
        (
            "root/generate/internal",
            json!({"key_type": "ec", "key_bits": 224}),
            "unsupported bit length for EC key: 224",
        ),
        (
            "root/generate/internal",
            json!({"format": "p12"}),
            "\"format\" path parameter",
        ),
        (
            "root/generate/internal",
            json!({"use_pss": true}),
            "use_pss is not supported",
        ),
        (
            "root/generate/internal",
            json!({"ttl": "1h", "not_after": "2030-01-01T00:00:00Z"}),
            "Either ttl or not_after",
        ),
        (
            "root/generate/internal",
            json!({"key_type": "rsa", "signature_bits": 100}),
            "unsupported hash signature algorithm",
        ),
    ] {
        let message = pki.refused(path, body).await;
        assert!(message.contains(expected), "{path}: {message}");
    }
    assert_eq!(pki.list("issuers/").await["data"]["keys"], json!([]));
}

#[tokio::test]
async fn delete_root_removes_every_issuer_and_key() {
    let pki = Pki::new();
    pki.root("ec", "a").await;
    pki.root("ed25519", "b").await;
    let answer = pki.delete("root").await;
    assert!(
        answer["warnings"][0]
            .as_str()
            .unwrap()
            .contains("deletes all keys and issuers")
    );
    assert_eq!(pki.list("issuers/").await["data"]["keys"], json!([]));
    assert_eq!(pki.list("keys/").await["data"]["keys"], json!([]));
}
