//! The mount keeps issuers parsed between requests; these tests change issuers and keys in
//! every way (through the API and behind the engine's back in storage, as a restore does) and
//! check that the very next issuance follows, with the openssl CLI judging who signed. Also:
//! the facts an issue answers (serial, validity) match the certificate it returns.

mod support;

use serde_json::{Value, json};
use support::{Pki, s};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Issues `host.example.com` on `path`; returns the answer's data.
async fn issue(pki: &Pki, path: &str) -> Value {
    pki.ok(path, json!({"common_name": "host.example.com"}))
        .await
}

async fn role(pki: &Pki, name: &str, issuer_ref: &str) {
    pki.ok(
        &format!("roles/{name}"),
        json!({"issuer_ref": issuer_ref, "allowed_domains": "example.com",
               "allow_subdomains": true, "key_type": "ec", "ttl": "1h"}),
    )
    .await;
}

fn issuer_id(root: &Value) -> String {
    s(&root["issuer_id"]).to_owned()
}

#[tokio::test]
async fn issuance_follows_defaults_renames_usages_and_deletes_at_once() {
    let pki = Pki::new();
    let a = pki.root("ec", "a").await;
    let b = pki.root("ed25519", "b").await;
    role(&pki, "by-default", "default").await;
    role(&pki, "by-name", "b").await;

    let leaf = issue(&pki, "issue/by-default").await;
    assert_eq!(leaf["issuing_ca"], a["certificate"]);
    pki.verify(s(&a["certificate"]), &[], s(&leaf["certificate"]), &[])
        .unwrap();
    let leaf = issue(&pki, "issue/by-name").await;
    assert_eq!(leaf["issuing_ca"], b["certificate"]);

    // A new default takes effect for the next request.
    pki.ok("config/issuers", json!({"default": issuer_id(&b)}))
        .await;
    let leaf = issue(&pki, "issue/by-default").await;
    assert_eq!(leaf["issuing_ca"], b["certificate"]);
    pki.verify(s(&b["certificate"]), &[], s(&leaf["certificate"]), &[])
        .unwrap();

    // A rename: the old name no longer resolves, the new one does, and a third issuer may
    // take the old name.
    pki.ok("issuer/b", json!({"issuer_name": "c"})).await;
    let error = pki
        .refused("issue/by-name", json!({"common_name": "host.example.com"}))
        .await;
    assert!(
        error.contains("unable to find PKI issuer for reference: b"),
        "{error}"
    );
    let leaf = issue(&pki, "issuer/c/issue/by-name").await;
    assert_eq!(leaf["issuing_ca"], b["certificate"]);
    let d = pki.root("ec", "b").await;
    let leaf = issue(&pki, "issue/by-name").await;
    assert_eq!(leaf["issuing_ca"], d["certificate"]);
    pki.verify(s(&d["certificate"]), &[], s(&leaf["certificate"]), &[])
        .unwrap();

    // A usage change is honoured at once.
    let patched = pki
        .call(
            secrets_sdk::Operation::Patch,
            "issuer/a",
            json!({"usage": "read-only,crl-signing"}),
        )
        .await;
    assert_eq!(patched["status"], 200, "{patched}");
    let error = pki
        .refused(
            "issuer/a/issue/by-default",
            json!({"common_name": "host.example.com"}),
        )
        .await;
    assert!(
        error.contains("requested usage issuing-certificates"),
        "{error}"
    );

    // A deleted issuer is gone, by id and by name.
    pki.delete(&format!("issuer/{}", issuer_id(&d))).await;
    let error = pki
        .refused("issue/by-name", json!({"common_name": "host.example.com"}))
        .await;
    assert!(error.contains("unable to find PKI issuer"), "{error}");
    let error = pki
        .refused(
            &format!("issuer/{}/issue/by-name", issuer_id(&d)),
            json!({"common_name": "host.example.com"}),
        )
        .await;
    assert!(error.contains("unable to find PKI issuer"), "{error}");
}

#[tokio::test]
async fn records_rewritten_in_storage_behind_the_engine_are_used_at_once() {
    use secrets_sdk::EngineStorage as _;

    let pki = Pki::new();
    let a = pki.root("ec", "a").await;
    role(&pki, "web", "a").await;
    let first = issue(&pki, "issue/web").await;
    pki.verify(s(&a["certificate"]), &[], s(&first["certificate"]), &[])
        .unwrap();

    let issuer_path = format!("issuer/{}", issuer_id(&a));
    let key_path = format!("key/{}", s(&a["key_id"]));
    let issuer_bytes = pki.storage.get(&issuer_path).await.unwrap().unwrap();
    let key_bytes = pki.storage.get(&key_path).await.unwrap().unwrap();

    // The issuer record, restored with other usages.
    let mut record: Value = serde_json::from_slice(&issuer_bytes).unwrap();
    record["usage"] = json!(["read-only"]);
    pki.storage
        .put(&issuer_path, &serde_json::to_vec(&record).unwrap())
        .await
        .unwrap();
    let error = pki
        .refused("issue/web", json!({"common_name": "host.example.com"}))
        .await;
    assert!(
        error.contains("requested usage issuing-certificates"),
        "{error}"
    );
    pki.storage.put(&issuer_path, &issuer_bytes).await.unwrap();
    issue(&pki, "issue/web").await;

    // The key record, restored with another key (the one of a second mount's root): the
    // engine signs with what storage holds now, so openssl no longer accepts the leaf
    // under the old certificate.
    let other = Pki::new();
    let b = other
        .ok(
            "root/generate/exported",
            json!({"common_name": "b Root", "key_type": "ec"}),
        )
        .await;
    let mut key_record: Value = serde_json::from_slice(&key_bytes).unwrap();
    key_record["private_key"] = b["private_key"].clone();
    pki.storage
        .put(&key_path, &serde_json::to_vec(&key_record).unwrap())
        .await
        .unwrap();
    let leaf = issue(&pki, "issue/web").await;
    assert!(
        pki.verify(s(&a["certificate"]), &[], s(&leaf["certificate"]), &[])
            .is_err()
    );
    pki.storage.put(&key_path, &key_bytes).await.unwrap();
    let leaf = issue(&pki, "issue/web").await;
    pki.verify(s(&a["certificate"]), &[], s(&leaf["certificate"]), &[])
        .unwrap();

    // Everything deleted behind the engine (a restore of an older, empty mount).
    for key in pki.storage.keys() {
        if key.starts_with("issuer/") || key.starts_with("key/") || key.starts_with("config/") {
            pki.storage.delete(&key).await.unwrap();
        }
    }
    let error = pki
        .refused("issue/web", json!({"common_name": "host.example.com"}))
        .await;
    assert!(error.contains("unable to find PKI issuer"), "{error}");
}

#[tokio::test]
async fn answered_serials_and_validity_are_the_certificates_own() {
    let pki = Pki::new();
    for key_type in ["ec", "ed25519", "rsa"] {
        pki.root(key_type, key_type).await;
        pki.ok(
            &format!("roles/{key_type}"),
            json!({"issuer_ref": key_type, "allowed_domains": "example.com",
                   "allow_subdomains": true, "key_type": key_type, "ttl": "1h"}),
        )
        .await;
        for path in [format!("issue/{key_type}"), format!("issue/{key_type}")] {
            let data = pki
                .ok(
                    &path,
                    json!({"common_name": "host.example.com", "format": "der"}),
                )
                .await;
            let der = base64_decode(s(&data["certificate"]));
            let (_, cert) = X509Certificate::from_der(&der).unwrap();
            let serial: Vec<String> = cert
                .raw_serial()
                .iter()
                .skip_while(|b| **b == 0)
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(data["serial_number"], serial.join(":"), "{key_type}");
            assert_eq!(
                data["not_before"],
                cert.validity().not_before.timestamp(),
                "{key_type}"
            );
            assert_eq!(
                data["expiration"],
                cert.validity().not_after.timestamp(),
                "{key_type}"
            );
        }
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
