//! Revocation and CRLs, checked by openssl: revoking by serial and by certificate, per-issuer
//! CRLs (`openssl crl`, `openssl verify -crl_check`), the fetch forms, config/crl, rotation,
//! AIA and CRL distribution URLs in issued certificates, and tidy under a moved clock.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Pki, s};

async fn setup(pki: &Pki) -> serde_json::Value {
    let root = pki.root("ec", "root").await;
    pki.ok(
        "roles/web",
        json!({"allowed_domains": "example.com", "allow_subdomains": true, "key_type": "ec"}),
    )
    .await;
    root
}

#[tokio::test]
async fn a_revoked_certificate_is_on_its_issuers_crl_and_fails_crl_checks() {
    let pki = Pki::new();
    let root = setup(&pki).await;
    let ca = s(&root["certificate"]).to_owned();
    let revoked = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "old.example.com"}),
        )
        .await;
    let kept = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "new.example.com"}),
        )
        .await;

    let empty = pki.read("crl/pem").await;
    assert_eq!(empty["content_type"], "application/x-pem-file");
    pki.verify(&ca, &[], s(&revoked["certificate"]), &[s(&empty["body"])])
        .unwrap();

    let answer = pki
        .ok("revoke", json!({"serial_number": revoked["serial_number"]}))
        .await;
    assert_eq!(answer["state"], "revoked");
    assert!(answer["revocation_time"].as_i64().unwrap() > 0);
    let again = pki
        .ok("revoke", json!({"serial_number": revoked["serial_number"]}))
        .await;
    assert_eq!(again["revocation_time"], answer["revocation_time"]);

    let crl = s(&pki.read("crl/pem").await["body"]).to_owned();
    let text = pki.crl_text(&crl);
    let serial_upper = s(&revoked["serial_number"]).replace(':', "").to_uppercase();
    assert!(text.contains(&serial_upper), "{text}");
    assert!(text.contains("X509v3 CRL Number"), "{text}");
    assert!(!text.contains(&s(&kept["serial_number"]).replace(':', "").to_uppercase()));
    let err = pki
        .verify(&ca, &[], s(&revoked["certificate"]), &[&crl])
        .unwrap_err();
    assert!(err.contains("certificate revoked"), "{err}");
    pki.verify(&ca, &[], s(&kept["certificate"]), &[&crl])
        .unwrap();

    let issuer_crl = pki.read("issuer/root/crl").await["data"]["crl"].clone();
    assert_eq!(s(&issuer_crl), crl);
    assert_eq!(
        pki.read("issuer/root/crl/der").await["content_type"],
        "application/pkix-crl"
    );
    assert_eq!(
        pki.read("crl").await["content_type"],
        "application/pkix-crl"
    );
    let hyphen = s(&revoked["serial_number"]).replace(':', "-");
    let fetched = pki.read(&format!("cert/{hyphen}")).await["data"].clone();
    assert_eq!(fetched["revocation_time"], answer["revocation_time"]);
    assert_eq!(fetched["issuer_id"], root["issuer_id"]);
    assert_eq!(
        pki.list("certs/revoked/").await["data"]["keys"],
        json!([hyphen])
    );
}

#[tokio::test]
async fn crls_are_per_issuer_and_a_revocation_rebuilds_only_its_own() {
    let pki = Pki::new();
    setup(&pki).await;
    pki.root("rsa", "other").await;
    let before = pki.read("issuer/other/crl").await["data"]["crl"].clone();
    let leaf = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    pki.ok("revoke", json!({"certificate": leaf["certificate"]}))
        .await;
    assert_eq!(pki.read("issuer/other/crl").await["data"]["crl"], before);
    let root_crl = pki.crl_text(s(&pki.read("issuer/root/crl/pem").await["body"]));
    assert!(root_crl.contains("Revoked Certificates"), "{root_crl}");
    // Rotation re-signs every CRL with a new number.
    pki.read("crl/rotate").await;
    let rotated = pki.crl_text(s(&pki.read("issuer/other/crl/pem").await["body"]));
    assert!(rotated.contains("X509v3 CRL Number"), "{rotated}");
    assert_ne!(pki.read("issuer/other/crl").await["data"]["crl"], before);
}

#[tokio::test]
async fn revocation_refuses_what_upstream_refuses() {
    let pki = Pki::new();
    let root = setup(&pki).await;
    assert!(
        pki.refused("revoke", json!({}))
            .await
            .contains("must be provided")
    );
    assert!(
        pki.refused("revoke", json!({"serial_number": "aa", "certificate": "x"}))
            .await
            .contains("not both")
    );
    assert!(
        pki.refused("revoke", json!({"serial_number": "aa:bb"}))
            .await
            .contains("not found")
    );
    assert!(
        pki.refused("revoke", json!({"serial_number": root["serial_number"]}))
            .await
            .contains("to its own CRL is not allowed")
    );
    let foreign = Pki::new();
    setup(&foreign).await;
    let stranger = foreign
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "x.example.com"}),
        )
        .await;
    assert!(
        pki.refused("revoke", json!({"certificate": stranger["certificate"]}))
            .await
            .contains("unable to verify signature")
    );
}

#[tokio::test]
async fn config_crl_disable_empties_the_crl_and_expiry_sets_next_update() {
    let pki = Pki::new();
    let root = setup(&pki).await;
    let leaf = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    pki.ok("revoke", json!({"serial_number": leaf["serial_number"]}))
        .await;
    let config = pki.read("config/crl").await["data"].clone();
    assert_eq!(config["expiry"], "72h");
    assert_eq!(config["disable"], false);
    let written = pki
        .ok("config/crl", json!({"disable": true, "expiry": "24h"}))
        .await;
    assert_eq!(written["disable"], true);
    let crl = s(&pki.read("crl/pem").await["body"]).to_owned();
    let text = pki.crl_text(&crl);
    assert!(text.contains("No Revoked Certificates"), "{text}");
    pki.verify(
        s(&root["certificate"]),
        &[],
        s(&leaf["certificate"]),
        &[&crl],
    )
    .unwrap();
    assert!(
        pki.refused("config/crl", json!({"expiry": "soon"}))
            .await
            .contains("expiry")
    );
}

#[tokio::test]
async fn config_urls_are_embedded_in_issued_certificates() {
    let pki = Pki::new();
    pki.write(
        "config/urls",
        json!({"issuing_certificates": "http://127.0.0.1:8200/v1/pki/ca", "crl_distribution_points": ["http://127.0.0.1:8200/v1/pki/crl"], "ocsp_servers": "http://127.0.0.1:8200/v1/pki/ocsp"}),
    )
    .await;
    let urls = pki.read("config/urls").await["data"].clone();
    assert_eq!(
        urls["crl_distribution_points"],
        json!(["http://127.0.0.1:8200/v1/pki/crl"])
    );
    let root = setup(&pki).await;
    let leaf = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    for cert in [s(&root["certificate"]), s(&leaf["certificate"])] {
        let text = pki.text(cert);
        assert!(
            text.contains("CA Issuers - URI:http://127.0.0.1:8200/v1/pki/ca"),
            "{text}"
        );
        assert!(
            text.contains("OCSP - URI:http://127.0.0.1:8200/v1/pki/ocsp"),
            "{text}"
        );
        assert!(text.contains("X509v3 CRL Distribution Points"), "{text}");
        assert!(
            text.contains("URI:http://127.0.0.1:8200/v1/pki/crl"),
            "{text}"
        );
    }
    assert!(
        pki.refused("config/urls", json!({"issuing_certificates": "not a url"}))
            .await
            .contains("invalid URL")
    );
}

#[tokio::test]
async fn tidy_drops_expired_certificates_and_revocations_after_the_safety_buffer() {
    let pki = Pki::new();
    setup(&pki).await;
    let short = pki
        .ok(
            "issue/web",
            json!({"common_name": "short.example.com", "ttl": "1h"}),
        )
        .await;
    let long = pki
        .ok(
            "issue/web",
            json!({"common_name": "long.example.com", "ttl": "720h"}),
        )
        .await;
    pki.ok("revoke", json!({"serial_number": short["serial_number"]}))
        .await;
    assert!(
        pki.refused("tidy", json!({}))
            .await
            .contains("at least one operation")
    );
    // Nothing has expired yet.
    pki.write(
        "tidy",
        json!({"tidy_cert_store": true, "tidy_revoked_certs": true}),
    )
    .await;
    assert_eq!(
        pki.list("certs/").await["data"]["keys"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    pki.clock.advance(Duration::from_secs(3 * 3600));
    let answer = pki
        .write(
            "tidy",
            json!({"tidy_cert_store": true, "tidy_revoked_certs": true, "safety_buffer": "1h"}),
        )
        .await;
    assert!(
        answer["warnings"][0]
            .as_str()
            .unwrap()
            .contains("Tidy operation")
    );
    let certs = pki.list("certs/").await["data"]["keys"].clone();
    assert!(
        !certs
            .as_array()
            .unwrap()
            .contains(&json!(s(&short["serial_number"]).replace(':', "-")))
    );
    assert!(
        certs
            .as_array()
            .unwrap()
            .contains(&json!(s(&long["serial_number"]).replace(':', "-")))
    );
    assert_eq!(pki.list("certs/revoked/").await["data"]["keys"], json!([]));
    let status = pki.read("tidy-status").await["data"].clone();
    assert_eq!(status["state"], "Finished");
    assert_eq!(status["cert_store_deleted_count"], 1);
    assert_eq!(status["revoked_cert_deleted_count"], 1);
    let crl = pki.crl_text(s(&pki.read("crl/pem").await["body"]));
    assert!(crl.contains("No Revoked Certificates"), "{crl}");
}
