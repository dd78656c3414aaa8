//! Intermediate CAs end to end, checked by openssl: a CSR from `intermediate/generate`, signed
//! by the root with path length and name constraints, brought back with `set-signed`, then
//! issuing leaves that verify through the chain; imports of certificates and bundles;
//! sign-self-issued.

mod support;

use serde_json::json;
use support::{Pki, s};

#[tokio::test]
async fn an_intermediate_signed_by_the_root_issues_leaves_that_verify_through_the_chain() {
    let root_mount = Pki::new();
    let root = root_mount
        .ok("root/generate/internal", json!({"common_name": "Root CA", "key_type": "rsa", "max_path_length": 2, "ttl": "87600h"}))
        .await;
    let int_mount = Pki::new();
    let generated = int_mount
        .ok(
            "intermediate/generate/internal",
            json!({"common_name": "Intermediate CA", "key_type": "ec", "key_bits": 384}),
        )
        .await;
    let csr = s(&generated["csr"]);
    assert!(csr.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
    assert!(generated["key_id"].as_str().is_some());
    let signed = root_mount
        .ok(
            "root/sign-intermediate",
            json!({"csr": csr, "common_name": "Intermediate CA", "ttl": "43800h", "permitted_dns_domains": "example.com,.example.org", "organization": "Example"}),
        )
        .await;
    let int_cert = s(&signed["certificate"]).to_owned();
    assert_eq!(signed["ca_chain"], json!([int_cert, root["certificate"]]));
    let text = root_mount.text(&int_cert);
    assert!(text.contains("CA:TRUE, pathlen:1"), "{text}");
    assert!(text.contains("X509v3 Name Constraints: critical"), "{text}");
    assert!(text.contains("DNS:example.com"), "{text}");
    assert!(text.contains("DNS:.example.org"), "{text}");
    assert!(text.contains("secp384r1"), "{text}");
    root_mount
        .verify(s(&root["certificate"]), &[], &int_cert, &[])
        .unwrap();

    let bundle = format!("{int_cert}\n{}", s(&root["certificate"]));
    let imported = int_mount
        .ok("intermediate/set-signed", json!({"certificate": bundle}))
        .await;
    let ids = imported["imported_issuers"].as_array().unwrap().clone();
    assert_eq!(ids.len(), 2);
    assert_eq!(imported["mapping"][s(&ids[0])], generated["key_id"]);
    assert_eq!(imported["mapping"][s(&ids[1])], "");
    let chain = int_mount.read("ca_chain").await;
    assert_eq!(
        s(&chain["body"]),
        format!("{int_cert}\n{}", s(&root["certificate"]))
    );

    int_mount
        .ok(
            "roles/web",
            json!({"allowed_domains": "example.com", "allow_subdomains": true, "key_type": "ec"}),
        )
        .await;
    let leaf = int_mount
        .ok(
            "issue/web",
            json!({"common_name": "www.example.com", "ttl": "1h"}),
        )
        .await;
    assert_eq!(leaf["ca_chain"], json!([int_cert, root["certificate"]]));
    root_mount
        .verify(
            s(&root["certificate"]),
            &[&int_cert],
            s(&leaf["certificate"]),
            &[],
        )
        .unwrap();
    let no_roots = int_mount
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "www.example.com", "remove_roots_from_chain": true}),
        )
        .await;
    assert_eq!(no_roots["ca_chain"], json!([int_cert]));
    let bundle = int_mount
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "www.example.com", "format": "pem_bundle"}),
        )
        .await;
    assert_eq!(
        s(&bundle["certificate"])
            .matches("BEGIN CERTIFICATE")
            .count(),
        3
    );

    // A leaf outside the name constraints fails openssl's verification.
    int_mount
        .ok(
            "roles/any",
            json!({"allow_any_name": true, "key_type": "ec"}),
        )
        .await;
    let outside = int_mount
        .ok(
            "issue/any",
            json!({"ttl": "1h", "common_name": "www.evil.com"}),
        )
        .await;
    let err = root_mount
        .verify(
            s(&root["certificate"]),
            &[&int_cert],
            s(&outside["certificate"]),
            &[],
        )
        .unwrap_err();
    assert!(err.contains("permitted subtree violation"), "{err}");
}

#[tokio::test]
async fn path_lengths_derive_from_the_signer_and_zero_stops_further_cas() {
    let pki = Pki::new();
    pki.ok("root/generate/internal", json!({"common_name": "Root", "key_type": "ec", "max_path_length": 1, "issuer_name": "root"}))
        .await;
    let csr = pki.csr(
        "/CN=Sub",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    let answer = pki
        .write(
            "root/sign-intermediate",
            json!({"csr": csr, "common_name": "Sub"}),
        )
        .await;
    assert!(
        answer["warnings"]
            .to_string()
            .contains("Max path length of the signed certificate is zero")
    );
    let sub = s(&answer["data"]["certificate"]).to_owned();
    assert!(pki.text(&sub).contains("CA:TRUE, pathlen:0"));
    // Import the sub CA with its key and try to sign another CA with it.
    let key = std::fs::read_to_string(pki.path("csr.key")).unwrap();
    let imported = pki
        .ok(
            "issuers/import/bundle",
            json!({"pem_bundle": format!("{key}\n{sub}")}),
        )
        .await;
    let sub_id = s(&imported["imported_issuers"][0]).to_owned();
    assert_eq!(imported["imported_keys"].as_array().unwrap().len(), 1);
    let csr2 = pki.csr(
        "/CN=Sub2",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    assert!(
        pki.refused(
            &format!("issuer/{sub_id}/sign-intermediate"),
            json!({"csr": csr2, "common_name": "Sub2"})
        )
        .await
        .contains("max path length of zero")
    );
    // An explicit -1 on the root path is unlimited.
    let csr3 = pki.csr(
        "/CN=Sub3",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    let unlimited = pki
        .ok(
            "issuer/root/sign-intermediate",
            json!({"csr": csr3, "common_name": "Sub3", "max_path_length": -1}),
        )
        .await;
    let text = pki.text(s(&unlimited["certificate"]));
    assert!(
        text.contains("CA:TRUE") && !text.contains("pathlen"),
        "{text}"
    );
}

#[tokio::test]
async fn use_csr_values_keeps_the_csrs_subject_and_extensions() {
    let pki = Pki::new();
    let root = pki.root("rsa", "root").await;
    let csr = pki.csr(
        "/C=NL/O=From CSR/CN=CSR Intermediate",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
        &[
            "-sha256",
            "-addext",
            "subjectAltName=DNS:ca.example.net",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ],
    );
    let data = pki
        .ok(
            "root/sign-intermediate",
            json!({"csr": csr, "common_name": "ignored", "use_csr_values": true}),
        )
        .await;
    let text = pki.text(s(&data["certificate"]));
    assert!(
        text.contains("C = NL, O = From CSR, CN = CSR Intermediate"),
        "{text}"
    );
    assert!(text.contains("DNS:ca.example.net"), "{text}");
    assert!(text.contains("CA:TRUE"), "{text}");
    pki.verify(s(&root["certificate"]), &[], s(&data["certificate"]), &[])
        .unwrap();
}

#[tokio::test]
async fn sign_self_issued_resigns_the_certificate_as_it_is() {
    let pki = Pki::new();
    let root = pki.root("rsa", "root").await;
    let other = Pki::new();
    let foreign = other.root("ec", "foreign").await;
    let data = pki
        .ok(
            "root/sign-self-issued",
            json!({"certificate": foreign["certificate"]}),
        )
        .await;
    let resigned = s(&data["certificate"]);
    assert_eq!(data["issuing_ca"], root["certificate"]);
    let text = pki.text(resigned);
    assert!(text.contains("Issuer: CN = root Root"), "{text}");
    assert!(text.contains("Subject: CN = foreign Root"), "{text}");
    assert!(text.contains(s(&foreign["serial_number"])), "{text}");
    pki.verify(s(&root["certificate"]), &[], resigned, &[])
        .unwrap();
    assert!(
        pki.refused("issuer/root/sign-self-issued", json!({"certificate": foreign["certificate"], "require_matching_certificate_algorithms": true}))
            .await
            .contains("does not match")
    );
    pki.ok(
        "roles/web",
        json!({"allow_any_name": true, "key_type": "ec"}),
    )
    .await;
    let leaf = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "leaf.example"}),
        )
        .await;
    assert!(
        pki.refused(
            "root/sign-self-issued",
            json!({"certificate": leaf["certificate"]})
        )
        .await
        .contains("not a CA certificate")
    );
    let intermediate_csr = pki.csr(
        "/CN=Int",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    let int = pki
        .ok("root/sign-intermediate", json!({"csr": intermediate_csr}))
        .await;
    assert!(
        pki.refused(
            "root/sign-self-issued",
            json!({"certificate": int["certificate"]})
        )
        .await
        .contains("not self-issued")
    );
}

#[tokio::test]
async fn imports_skip_known_issuers_and_refuse_keys_on_certificate_paths() {
    let source = Pki::new();
    let root = source
        .ok(
            "root/generate/exported",
            json!({"common_name": "Imported", "key_type": "ec"}),
        )
        .await;
    let target = Pki::new();
    let certificate_only = target
        .ok(
            "issuers/import/cert",
            json!({"pem_bundle": root["certificate"]}),
        )
        .await;
    let id = s(&certificate_only["imported_issuers"][0]).to_owned();
    assert_eq!(certificate_only["mapping"][&id], "");
    assert!(
        target.refused("issuers/import/cert", json!({"pem_bundle": format!("{}\n{}", s(&root["private_key"]), s(&root["certificate"]))}))
            .await
            .contains("private keys found in the PEM bundle")
    );
    let bundle = target
        .ok("config/ca", json!({"pem_bundle": format!("{}\n{}", s(&root["private_key"]), s(&root["certificate"]))}))
        .await;
    assert_eq!(bundle["existing_issuers"], json!([id]));
    assert_eq!(bundle["mapping"][&id], bundle["imported_keys"][0]);
    // The imported CA issues.
    target
        .ok(
            "roles/web",
            json!({"allow_any_name": true, "key_type": "ed25519"}),
        )
        .await;
    let leaf = target
        .ok("issue/web", json!({"ttl": "1h", "common_name": "x.test"}))
        .await;
    target
        .verify(s(&root["certificate"]), &[], s(&leaf["certificate"]), &[])
        .unwrap();
    assert!(
        target
            .refused("issuers/import/bundle", json!({}))
            .await
            .contains("were empty")
    );
    let leaf_only = target
        .refused(
            "issuers/import/cert",
            json!({"pem_bundle": leaf["certificate"]}),
        )
        .await;
    assert!(
        leaf_only.contains("Refusing to import non-CA certificate"),
        "{leaf_only}"
    );
}
