//! Issuing and signing leaf certificates under roles, every result checked by the openssl CLI:
//! key types, names and role policy, TTL capping, the issuer's expiry, output formats, chains,
//! serials, CSRs made by openssl (P-384 with SHA-256, extra extensions), sign-verbatim and the
//! per-issuer paths.

mod support;

use serde_json::{Value, json};
use support::{Pki, s};

async fn web_role(pki: &Pki, extra: Value) {
    let mut body =
        json!({"allowed_domains": "example.com", "allow_subdomains": true, "max_ttl": "72h"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    pki.ok("roles/web", body).await;
}

#[tokio::test]
async fn issued_certificates_of_every_key_type_verify_against_their_root() {
    let pki = Pki::new();
    let root = pki.root("ec", "root").await;
    let ca = s(&root["certificate"]);
    for (key_type, bits, expect) in [
        ("rsa", 2048, "rsaEncryption"),
        ("rsa", 4096, "4096 bit"),
        ("ec", 256, "prime256v1"),
        ("ec", 384, "secp384r1"),
        ("ec", 521, "secp521r1"),
        ("ed25519", 0, "ED25519"),
    ] {
        web_role(&pki, json!({"key_type": key_type, "key_bits": bits})).await;
        let data = pki
            .ok("issue/web", json!({"common_name": "www.example.com", "alt_names": "api.example.com", "ttl": "1h"}))
            .await;
        let cert = s(&data["certificate"]);
        pki.verify(ca, &[], cert, &[]).unwrap();
        assert_eq!(data["issuing_ca"], root["certificate"]);
        assert_eq!(data["ca_chain"], json!([root["certificate"]]));
        assert_eq!(data["private_key_type"], key_type);
        let text = pki.text(cert);
        assert!(text.contains(expect), "{text}");
        assert!(
            text.contains("DNS:www.example.com, DNS:api.example.com"),
            "{text}"
        );
        assert!(
            text.contains("TLS Web Server Authentication, TLS Web Client Authentication"),
            "{text}"
        );
        assert!(
            text.contains("Digital Signature, Key Encipherment, Key Agreement"),
            "{text}"
        );
        assert!(!text.contains("CA:TRUE"), "{text}");
        assert!(text.contains("Authority Key Identifier"), "{text}");
        // The private key belongs to the certificate.
        let key_path = pki.file("leaf.key", s(&data["private_key"]));
        let (ok, out, err) = support::openssl(
            &["pkey", "-in", &key_path.display().to_string(), "-pubout"],
            None,
        );
        assert!(ok, "{err}");
        let cert_path = pki.file("leaf.pem", cert);
        let (_, cert_pub, _) = support::openssl(
            &[
                "x509",
                "-in",
                &cert_path.display().to_string(),
                "-pubkey",
                "-noout",
            ],
            None,
        );
        assert_eq!(out, cert_pub);
        let expiry = data["expiration"].as_i64().unwrap();
        let not_before = data["not_before"].as_i64().unwrap();
        assert_eq!(expiry - not_before, 3600 + 30);
    }
}

#[tokio::test]
async fn any_name_outside_role_policy_refuses_the_whole_request() {
    let pki = Pki::new();
    pki.root("ec", "root").await;
    web_role(&pki, json!({"key_type": "ec"})).await;
    for (body, expected) in [
        (
            json!({"common_name": "www.evil.com"}),
            "common name www.evil.com not allowed by this role",
        ),
        (
            json!({"common_name": "www.example.com", "alt_names": "a.example.com,b.evil.com"}),
            "subject alternate name b.evil.com not allowed",
        ),
        (
            json!({"common_name": "example.com"}),
            "common name example.com not allowed",
        ),
        (
            json!({"common_name": "www.example.com", "alt_names": "me@evil.com"}),
            "email address me@evil.com not allowed",
        ),
        (
            json!({"common_name": "www.example.com", "uri_sans": "spiffe://x"}),
            "URI Subject Alternative Names are not allowed",
        ),
        (
            json!({"common_name": "www.example.com", "other_sans": "1.2.3.4;UTF8:x"}),
            "other SAN OID 1.2.3.4 not allowed",
        ),
        (
            json!({"common_name": "www.example.com", "ip_sans": "not-an-ip"}),
            "is not a valid IP address",
        ),
        (json!({}), "the common_name field is required"),
    ] {
        let message = pki.refused("issue/web", body.clone()).await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    assert_eq!(
        pki.list("certs/").await["data"]["keys"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    web_role(&pki, json!({"key_type": "ec", "allow_ip_sans": false})).await;
    assert!(
        pki.refused(
            "issue/web",
            json!({"ttl": "1h", "common_name": "www.example.com", "ip_sans": "10.0.0.1"})
        )
        .await
        .contains("IP Subject Alternative Names are not allowed in this role")
    );
    assert!(
        pki.refused("issue/nope", json!({"ttl": "1h", "common_name": "x"}))
            .await
            .contains("unknown role: nope")
    );
}

#[tokio::test]
async fn ip_uri_and_other_sans_appear_as_openssl_reads_them() {
    let pki = Pki::new();
    let root = pki.root("rsa", "root").await;
    web_role(
        &pki,
        json!({
            "key_type": "ec",
            "allowed_uri_sans": "spiffe://example.com/*",
            "allowed_other_sans": "1.3.6.1.4.1.311.20.2.3;UTF8:*@example.com",
            "allowed_ip_sans_cidr": "10.0.0.0/8",
            "organization": "Example Org",
            "ou": "Web",
        }),
    )
    .await;
    let data = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h",
                "common_name": "svc.example.com",
                "ip_sans": "10.1.2.3",
                "uri_sans": "spiffe://example.com/svc",
                "other_sans": "1.3.6.1.4.1.311.20.2.3;UTF8:svc@example.com",
                "exclude_cn_from_sans": true,
            }),
        )
        .await;
    let text = pki.text(s(&data["certificate"]));
    assert!(text.contains("IP Address:10.1.2.3"), "{text}");
    assert!(text.contains("URI:spiffe://example.com/svc"), "{text}");
    assert!(text.contains("svc@example.com"), "{text}");
    assert!(!text.contains("DNS:svc.example.com"), "{text}");
    assert!(
        text.contains("O = Example Org, OU = Web, CN = svc.example.com"),
        "{text}"
    );
    pki.verify(s(&root["certificate"]), &[], s(&data["certificate"]), &[])
        .unwrap();
    assert!(
        pki.refused(
            "issue/web",
            json!({"ttl": "1h", "common_name": "svc.example.com", "ip_sans": "192.168.0.1"})
        )
        .await
        .contains("is not allowed in this role")
    );
}

#[tokio::test]
async fn ttls_are_capped_by_the_role_with_a_warning_and_not_after_reaches_9999() {
    let pki = Pki::new();
    pki.ok(
        "root/generate/internal",
        json!({"common_name": "Forever", "key_type": "ec", "not_after": "9999-12-31T23:59:59Z"}),
    )
    .await;
    web_role(&pki, json!({"key_type": "ec", "max_ttl": "2h"})).await;
    let answer = pki
        .write(
            "issue/web",
            json!({"common_name": "a.example.com", "ttl": "10h"}),
        )
        .await;
    assert_eq!(answer["status"], 200);
    assert_eq!(
        answer["warnings"],
        json!([
            r#"TTL "10h0m0s" is longer than permitted maxTTL "2h0m0s", so maxTTL is being used"#
        ])
    );
    let data = &answer["data"];
    assert_eq!(
        data["expiration"].as_i64().unwrap() - data["not_before"].as_i64().unwrap(),
        7200 + 30
    );
    web_role(&pki, json!({"key_type": "ec", "max_ttl": "0"})).await;
    let forever = pki
        .ok(
            "issue/web",
            json!({"common_name": "a.example.com", "not_after": "9999-12-31T23:59:59Z"}),
        )
        .await;
    let text = pki.text(s(&forever["certificate"]));
    assert!(
        text.contains("Not After : Dec 31 23:59:59 9999 GMT"),
        "{text}"
    );
}

#[tokio::test]
async fn the_issuers_leaf_not_after_behavior_decides_past_its_expiry() {
    let pki = Pki::new();
    let root = pki
        .ok(
            "root/generate/internal",
            json!({"common_name": "Short", "key_type": "ec", "ttl": "2h", "issuer_name": "short"}),
        )
        .await;
    web_role(&pki, json!({"key_type": "ec"})).await;
    assert!(
        pki.refused(
            "issue/web",
            json!({"common_name": "a.example.com", "ttl": "5h"})
        )
        .await
        .contains("beyond the expiration of the CA certificate")
    );
    pki.ok(
        "issuer/short",
        json!({"issuer_name": "short", "leaf_not_after_behavior": "truncate"}),
    )
    .await;
    let truncated = pki
        .ok(
            "issue/web",
            json!({"common_name": "a.example.com", "ttl": "5h"}),
        )
        .await;
    assert_eq!(truncated["expiration"], root["expiration"]);
    pki.ok(
        "issuer/short",
        json!({"issuer_name": "short", "leaf_not_after_behavior": "permit"}),
    )
    .await;
    let permitted = pki
        .ok(
            "issue/web",
            json!({"common_name": "a.example.com", "ttl": "5h"}),
        )
        .await;
    assert!(permitted["expiration"].as_i64() > root["expiration"].as_i64());
}

#[tokio::test]
async fn formats_key_formats_and_chains_are_written_as_vault_writes_them() {
    let pki = Pki::new();
    let root = pki.root("rsa", "root").await;
    web_role(&pki, json!({"key_type": "rsa"})).await;
    let der = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com", "format": "der"}),
        )
        .await;
    assert!(!s(&der["certificate"]).contains("BEGIN"));
    let der_bytes = support::openssl(&["base64", "-d", "-A"], Some(s(&der["certificate"]))).1;
    assert!(!der_bytes.is_empty());

    let bundle = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com", "format": "pem_bundle"}),
        )
        .await;
    let text = s(&bundle["certificate"]);
    assert!(
        text.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
        "{text}"
    );
    assert_eq!(text.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(text.ends_with(s(&root["certificate"])));

    let pkcs8 = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com", "private_key_format": "pkcs8"}),
        )
        .await;
    assert!(s(&pkcs8["private_key"]).starts_with("-----BEGIN PRIVATE KEY-----"));
    let default = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    assert!(s(&default["private_key"]).starts_with("-----BEGIN RSA PRIVATE KEY-----"));

    let no_roots = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com", "remove_roots_from_chain": true}),
        )
        .await;
    assert!(no_roots.get("ca_chain").is_none(), "{no_roots}");
    assert!(
        pki.refused(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com", "format": "p12"})
        )
        .await
        .contains("\"format\"")
    );
    assert!(
        pki.refused(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com", "use_pss": true})
        )
        .await
        .contains("use_pss")
    );
}

#[tokio::test]
async fn serials_are_unique_colon_hex_and_listed_hyphenated() {
    let pki = Pki::new();
    pki.root("ec", "root").await;
    web_role(&pki, json!({"key_type": "ec"})).await;
    let mut serials = Vec::new();
    for _ in 0..5 {
        let data = pki
            .ok(
                "issue/web",
                json!({"ttl": "1h", "common_name": "a.example.com"}),
            )
            .await;
        let serial = s(&data["serial_number"]).to_owned();
        assert!(serial.split(':').all(|p| {
            p.len() == 2
                && p.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        }));
        let text = pki.text(s(&data["certificate"]));
        assert!(text.contains(&serial), "{serial}\n{text}");
        serials.push(serial);
    }
    let listed = pki.list("certs/").await["data"]["keys"].clone();
    for serial in &serials {
        let hyphen = serial.replace(':', "-");
        assert!(listed.as_array().unwrap().contains(&json!(hyphen)));
        let fetched = pki.read(&format!("cert/{hyphen}")).await;
        assert_eq!(fetched["status"], 200);
        assert_eq!(pki.read(&format!("cert/{serial}")).await["status"], 200);
    }
    serials.sort();
    serials.dedup();
    assert_eq!(serials.len(), 5);
}

#[tokio::test]
async fn openssl_csrs_are_signed_including_p384_with_sha256_and_extra_extensions() {
    let pki = Pki::new();
    let root = pki.root("ec", "root").await;
    let ca = s(&root["certificate"]).to_owned();
    web_role(&pki, json!({"key_type": "any"})).await;
    let cases: [(&[&str], &[&str], &str); 4] = [
        (
            &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
            &["-sha256"],
            "secp384r1",
        ),
        (
            &["-newkey", "rsa:2048"],
            &["-addext", "subjectKeyIdentifier=hash"],
            "rsaEncryption",
        ),
        (&["-newkey", "ed25519"], &[], "ED25519"),
        (
            &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            &[
                "-addext",
                "subjectAltName=DNS:csr.example.com,DNS:other.example.com",
                "-addext",
                "basicConstraints=CA:TRUE",
            ],
            "prime256v1",
        ),
    ];
    for (key_args, extra, expect) in cases {
        let csr = pki.csr("/CN=www.example.com", key_args, extra);
        let answer = pki
            .write("sign/web", json!({"csr": csr, "ttl": "1h"}))
            .await;
        assert_eq!(answer["status"], 200, "{expect}: {answer}");
        let data = &answer["data"];
        assert!(data.get("private_key").is_none());
        let cert = s(&data["certificate"]);
        pki.verify(&ca, &[], cert, &[]).unwrap();
        let text = pki.text(cert);
        assert!(text.contains(expect), "{text}");
        assert!(!text.contains("CA:TRUE"), "{text}");
        if extra.iter().any(|a| a.contains("basicConstraints")) {
            assert!(text.contains("DNS:csr.example.com"), "{text}");
            assert!(answer["warnings"].to_string().contains("Basic Constraints"));
        }
    }
    // A CSR whose key the role does not take.
    web_role(&pki, json!({"key_type": "rsa", "key_bits": 3072})).await;
    let ec_csr = pki.csr(
        "/CN=www.example.com",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    assert!(
        pki.refused("sign/web", json!({"ttl": "1h", "csr": ec_csr}))
            .await
            .contains("role requires keys of type rsa")
    );
    let small = pki.csr("/CN=www.example.com", &["-newkey", "rsa:2048"], &[]);
    assert!(
        pki.refused("sign/web", json!({"ttl": "1h", "csr": small}))
            .await
            .contains("minimum of a 3072-bit key")
    );
    assert!(
        pki.refused("sign/web", json!({"ttl": "1h", "csr": "junk"}))
            .await
            .contains("csr contains no data")
    );
    assert!(
        pki.refused("sign/web", json!({"ttl": "1h", }))
            .await
            .contains("\"csr\" is empty")
    );
    // A CSR for a name outside the role.
    web_role(&pki, json!({"key_type": "any"})).await;
    let evil = pki.csr(
        "/CN=www.evil.com",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    assert!(
        pki.refused("sign/web", json!({"ttl": "1h", "csr": evil}))
            .await
            .contains("not allowed by this role")
    );
}

#[tokio::test]
async fn sign_verbatim_keeps_the_csrs_subject_and_names() {
    let pki = Pki::new();
    let root = pki.root("rsa", "root").await;
    let csr = pki.csr(
        "/C=DE/O=Verbatim/CN=anything at all",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
        &[
            "-sha256",
            "-addext",
            "subjectAltName=DNS:whatever.test,IP:192.0.2.1",
        ],
    );
    let data = pki
        .ok("sign-verbatim", json!({"csr": csr, "ttl": "1h"}))
        .await;
    let text = pki.text(s(&data["certificate"]));
    assert!(
        text.contains("C = DE, O = Verbatim, CN = anything at all"),
        "{text}"
    );
    assert!(
        text.contains("DNS:whatever.test, IP Address:192.0.2.1"),
        "{text}"
    );
    pki.verify(s(&root["certificate"]), &[], s(&data["certificate"]), &[])
        .unwrap();
}

#[tokio::test]
async fn per_issuer_paths_override_the_roles_issuer() {
    let pki = Pki::new();
    let first = pki.root("ec", "first").await;
    let second = pki.root("rsa", "second").await;
    web_role(&pki, json!({"key_type": "ec", "issuer_ref": "first"})).await;
    let by_role = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    assert_eq!(by_role["issuing_ca"], first["certificate"]);
    let by_path = pki
        .ok(
            "issuer/second/issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    assert_eq!(by_path["issuing_ca"], second["certificate"]);
    pki.verify(
        s(&second["certificate"]),
        &[],
        s(&by_path["certificate"]),
        &[],
    )
    .unwrap();
    let csr = pki.csr(
        "/CN=b.example.com",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &[],
    );
    let signed = pki
        .ok(
            &format!("issuer/{}/sign/web", s(&second["issuer_id"])),
            json!({"csr": csr, "ttl": "1h"}),
        )
        .await;
    pki.verify(
        s(&second["certificate"]),
        &[],
        s(&signed["certificate"]),
        &[],
    )
    .unwrap();
    assert!(
        pki.refused(
            "issuer/missing/issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"})
        )
        .await
        .contains("could not fetch the CA certificate")
    );
    // An issuer without the issuing usage cannot issue.
    // (A POST sets every field: the name stays only when given again.)
    pki.ok(
        "issuer/second",
        json!({"issuer_name": "second", "usage": "read-only,crl-signing"}),
    )
    .await;
    assert!(
        pki.refused(
            "issuer/second/issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"})
        )
        .await
        .contains("issuing-certificates")
    );
}

#[tokio::test]
async fn no_store_skips_the_store_and_generate_lease_attaches_a_lease() {
    let pki = Pki::new();
    pki.root("ec", "root").await;
    web_role(&pki, json!({"key_type": "ec", "no_store": true})).await;
    let data = pki
        .ok(
            "issue/web",
            json!({"ttl": "1h", "common_name": "a.example.com"}),
        )
        .await;
    let serial = s(&data["serial_number"]).replace(':', "-");
    assert_eq!(pki.read(&format!("cert/{serial}")).await["status"], "none");
    let role = pki.write("roles/leased", json!({"allowed_domains": "example.com", "allow_subdomains": true, "key_type": "ec", "generate_lease": true})).await;
    assert!(role["warnings"].to_string().contains("generate_lease"));
    let answer = pki
        .write(
            "issue/leased",
            json!({"common_name": "a.example.com", "ttl": "1h"}),
        )
        .await;
    let secret = &answer["secret"];
    assert!(secret["ttl"].as_u64().unwrap() > 3500);
    assert_eq!(
        secret["internal"]["serial_number"],
        answer["data"]["serial_number"]
    );
    pki.revoke_lease(secret["internal"].clone()).await;
    let serial = s(&answer["data"]["serial_number"]).replace(':', "-");
    let fetched = pki.read(&format!("cert/{serial}")).await;
    assert!(
        fetched["data"]["revocation_time"].as_i64().unwrap() > 0,
        "{fetched}"
    );
}
