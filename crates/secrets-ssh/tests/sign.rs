//! The CA (`config/ca`, `public_key`) and `sign/:role`, with every certificate read back by
//! OpenSSH's `ssh-keygen -L` (which also checks the signature).

mod support;

use secrets_sdk::Operation;
use serde_json::{Value, json};
use support::{describe_certificate, fixture, keygen};

async fn user_role(f: &support::Fixture, extra: Value) {
    let mut body = json!({"key_type": "ca", "allow_user_certificates": true,
                          "allowed_users": "alice,bob", "default_user": "alice",
                          "allowed_extensions": "permit-pty,permit-port-forwarding",
                          "default_extensions": {"permit-pty": ""}});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    f.write("roles/users", body).await;
}

#[tokio::test]
async fn config_ca_answers_200_only_when_generation_was_asked_for() {
    let f = fixture();
    assert_eq!(
        f.refused("config/ca", json!({"public_key": "x"})).await,
        "only one of public_key and private_key set; both must be set to use, or both must be blank to auto-generate"
    );
    assert_eq!(
        f.refused(
            "config/ca",
            json!({"generate_signing_key": true, "private_key": "x"})
        )
        .await,
        "public_key and private_key must not be set when generate_signing_key is set to true"
    );
    assert_eq!(
        f.refused(
            "config/ca",
            json!({"generate_signing_key": false, "private_key": "x"})
        )
        .await,
        "missing public_key"
    );
    assert_eq!(
        f.refused(
            "config/ca",
            json!({"key_type": "ssh-rsa", "key_bits": 1024})
        )
        .await,
        "refusing to generate weak ssh-rsa key: 1024 bits < 2048 bits"
    );
    assert_eq!(
        f.refused("config/ca", json!({"key_type": "ssh-dss"})).await,
        "unknown ssh key pair algorithm: ssh-dss"
    );
    assert_eq!(
        f.call(Operation::Read, "config/ca", json!({}))
            .await
            .unwrap_err()
            .to_string(),
        "keys haven't been configured yet"
    );
    assert!(f.read("public_key").await.is_none());

    // Generated without the flag: 204.
    let silent = f
        .call(
            Operation::Update,
            "config/ca",
            json!({"key_type": "ed25519"}),
        )
        .await
        .unwrap();
    assert!(silent.is_none());
    let first = f.read("config/ca").await.unwrap()["public_key"].clone();
    assert!(first.as_str().unwrap().starts_with("ssh-ed25519 "));

    // Generated with the flag: 200 with the key; the CA is replaced.
    let second = f.ca("ecdsa-sha2-nistp256").await;
    assert!(second.starts_with("ecdsa-sha2-nistp256 ") && second.ends_with('\n'));
    assert_ne!(Value::String(second.clone()), first);
    let raw = f
        .call(Operation::Read, "public_key", json!({}))
        .await
        .unwrap()
        .unwrap()
        .raw
        .unwrap();
    assert_eq!(raw.status, 200);
    assert_eq!(raw.content_type, "text/plain");
    assert_eq!(String::from_utf8(raw.body).unwrap(), second);

    assert!(
        f.call(Operation::Delete, "config/ca", json!({}))
            .await
            .unwrap()
            .is_none()
    );
    assert!(f.read("public_key").await.is_none());
}

#[tokio::test]
async fn an_imported_ca_must_be_one_pair_and_answers_204() {
    let f = fixture();
    let ca = keygen("ed25519", None);
    let other = keygen("ed25519", None);
    let private = std::fs::read_to_string(&ca.private).unwrap();
    assert_eq!(
        f.refused(
            "config/ca",
            json!({"private_key": private, "public_key": other.public})
        )
        .await,
        "public_key does not match private_key"
    );
    assert!(
        f.refused(
            "config/ca",
            json!({"private_key": "junk", "public_key": ca.public})
        )
        .await
        .starts_with("Unable to parse private_key as an SSH private key: ")
    );
    let imported = f
        .call(
            Operation::Update,
            "config/ca",
            json!({"private_key": private, "public_key": ca.public, "generate_signing_key": false}),
        )
        .await
        .unwrap();
    assert!(imported.is_none(), "204");
    let stored = f.read("config/ca").await.unwrap();
    let line = stored["public_key"].as_str().unwrap();
    assert_eq!(
        line.split_whitespace().take(2).collect::<Vec<_>>(),
        ca.public.split_whitespace().take(2).collect::<Vec<_>>()
    );

    // A PKCS#1 RSA key (ssh-keygen -m PEM) signs as well.
    let rsa_dir = tempfile::tempdir().unwrap();
    let rsa_key = rsa_dir.path().join("ca");
    assert!(
        std::process::Command::new(support::require("ssh-keygen"))
            .args(["-q", "-N", "", "-t", "rsa", "-b", "2048", "-m", "PEM", "-f"])
            .arg(&rsa_key)
            .status()
            .unwrap()
            .success()
    );
    let rsa_private = std::fs::read_to_string(&rsa_key).unwrap();
    assert!(rsa_private.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    let rsa_public = std::fs::read_to_string(rsa_dir.path().join("ca.pub")).unwrap();
    f.write(
        "config/ca",
        json!({"private_key": rsa_private, "public_key": rsa_public}),
    )
    .await;
    user_role(&f, json!({})).await;
    let user = keygen("ed25519", None);
    let signed = f
        .write("sign/users", json!({"public_key": user.public}))
        .await;
    let text = describe_certificate(signed["signed_key"].as_str().unwrap());
    assert!(text.contains("(using rsa-sha2-256)"), "{text}");
}

#[tokio::test]
async fn a_user_certificate_carries_what_the_role_and_request_say() {
    let f = fixture();
    f.ca("ed25519").await;
    user_role(
        &f,
        json!({"default_critical_options": {"force-command": "/usr/bin/id"}}),
    )
    .await;
    let user = keygen("ed25519", None);
    let signed = f
        .write(
            "sign/users",
            json!({"public_key": user.public, "valid_principals": "alice,bob", "ttl": "10m",
                   "cert_type": "user", "key_id": "", "critical_options": null,
                   "extensions": {"permit-port-forwarding": ""}}),
        )
        .await;
    let serial = u64::from_str_radix(signed["serial_number"].as_str().unwrap(), 16).unwrap();
    let line = signed["signed_key"].as_str().unwrap();
    assert!(line.starts_with("ssh-ed25519-cert-v01@openssh.com ") && line.ends_with('\n'));
    let text = describe_certificate(line);
    assert!(text.contains("user certificate"), "{text}");
    assert!(text.contains(&format!("Serial: {serial}")), "{text}");
    assert!(text.contains("Key ID: \"vault-token-alice-"), "{text}");
    assert!(text.contains("alice") && text.contains("bob"), "{text}");
    assert!(text.contains("force-command /usr/bin/id"), "{text}");
    assert!(text.contains("permit-port-forwarding"), "{text}");
    assert!(
        !text.contains("permit-pty"),
        "request extensions replace the defaults: {text}"
    );
    assert!(text.contains("(using ssh-ed25519)"), "{text}");
    // Valid for 10 minutes after a 30 s back-dating.
    let valid = text
        .lines()
        .find(|l| l.contains("Valid:"))
        .unwrap()
        .to_owned();
    assert!(valid.contains("from ") && valid.contains(" to "), "{valid}");
}

#[tokio::test]
async fn key_ids_come_from_the_role_format_or_a_permitted_request() {
    let f = fixture();
    f.ca("ed25519").await;
    user_role(
        &f,
        json!({"key_id_format": "{{role_name}}/{{token_display_name}}"}),
    )
    .await;
    let user = keygen("ed25519", None);
    let signed = f
        .write("sign/users", json!({"public_key": user.public}))
        .await;
    let text = describe_certificate(signed["signed_key"].as_str().unwrap());
    assert!(text.contains("Key ID: \"users/token-alice\""), "{text}");
    assert_eq!(
        f.refused(
            "sign/users",
            json!({"public_key": user.public, "key_id": "mine"})
        )
        .await,
        "setting key_id is not allowed by role"
    );
    user_role(&f, json!({"allow_user_key_ids": true})).await;
    let signed = f
        .write(
            "sign/users",
            json!({"public_key": user.public, "key_id": "mine"}),
        )
        .await;
    let text = describe_certificate(signed["signed_key"].as_str().unwrap());
    assert!(text.contains("Key ID: \"mine\""), "{text}");
}

#[tokio::test]
async fn rsa_cas_sign_with_the_roles_algorithm() {
    let f = fixture();
    f.ca("rsa").await;
    let user = keygen("ed25519", None);
    for (signer, shown) in [
        ("", "rsa-sha2-256"),
        ("rsa-sha2-256", "rsa-sha2-256"),
        ("rsa-sha2-512", "rsa-sha2-512"),
        ("ssh-rsa", "ssh-rsa"),
    ] {
        user_role(&f, json!({"algorithm_signer": signer})).await;
        let signed = f
            .write("sign/users", json!({"public_key": user.public}))
            .await;
        let text = describe_certificate(signed["signed_key"].as_str().unwrap());
        assert!(
            text.contains(&format!("(using {shown})")),
            "{signer}: {text}"
        );
    }
}

#[tokio::test]
async fn host_certificates_need_allowed_domains() {
    let f = fixture();
    f.ca("ed25519").await;
    f.write(
        "roles/hosts",
        json!({"key_type": "ca", "allow_host_certificates": true, "allowed_domains": "example.com",
               "allow_subdomains": true}),
    )
    .await;
    let host = keygen("ed25519", None);
    let body = |names: &str| json!({"public_key": host.public, "cert_type": "host", "valid_principals": names});
    assert_eq!(
        f.refused("sign/hosts", json!({"public_key": host.public}))
            .await,
        "cert_type 'user' is not allowed by role"
    );
    assert_eq!(
        f.refused(
            "sign/hosts",
            json!({"public_key": host.public, "cert_type": "both"})
        )
        .await,
        "cert_type must be either 'user' or 'host'"
    );
    assert_eq!(
        f.refused("sign/hosts", body("example.com")).await,
        "example.com is not a valid value for valid_principals"
    );
    assert_eq!(
        f.refused("sign/hosts", body("")).await,
        "empty valid principals not allowed by role"
    );
    let signed = f.write("sign/hosts", body("web.example.com")).await;
    let text = describe_certificate(signed["signed_key"].as_str().unwrap());
    assert!(
        text.contains("host certificate") && text.contains("web.example.com"),
        "{text}"
    );
}

#[tokio::test]
async fn sign_refuses_what_vault_refuses() {
    let f = fixture();
    let user = keygen("rsa", Some(2048));
    assert_eq!(
        f.refused("sign/absent", json!({"public_key": user.public}))
            .await,
        "Unknown role: absent"
    );
    user_role(
        &f,
        json!({"max_ttl": "1h", "allowed_user_key_lengths": {"rsa": 4096}}),
    )
    .await;
    assert_eq!(
        f.refused("sign/users", json!({})).await,
        "missing public_key"
    );
    assert!(
        f.refused("sign/users", json!({"public_key": "ssh-ed25519 AAAA"}))
            .await
            .starts_with("failed to parse public_key as SSH key: ")
    );
    assert_eq!(
        f.refused("sign/users", json!({"public_key": user.public}))
            .await,
        "public_key failed to meet the key requirements: key is of an invalid size: 2048"
    );
    user_role(
        &f,
        json!({"max_ttl": "1h", "allowed_user_key_lengths": {"rsa": [2048]}}),
    )
    .await;
    assert_eq!(
        f.refused("sign/users", json!({"public_key": user.public}))
            .await,
        "keys haven't been configured yet"
    );
    f.ca("ed25519").await;
    assert_eq!(
        f.refused(
            "sign/users",
            json!({"public_key": user.public, "ttl": "2h"})
        )
        .await,
        "ttl is larger than maximum allowed 3600"
    );
    assert_eq!(
        f.refused(
            "sign/users",
            json!({"public_key": user.public, "valid_principals": "eve"})
        )
        .await,
        "eve is not a valid value for valid_principals"
    );
    assert_eq!(
        f.refused(
            "sign/users",
            json!({"public_key": user.public, "extensions": {"permit-X11-forwarding": ""}})
        )
        .await,
        "extensions [permit-X11-forwarding] are not on allowed list"
    );
    // hvac's request: every field present, empty strings and nulls; Vault falls back to the
    // default user.
    let signed = f
        .write(
            "sign/users",
            json!({"public_key": user.public, "ttl": "", "valid_principals": "", "key_id": "",
                   "cert_type": "user", "critical_options": null, "extensions": null}),
        )
        .await;
    let text = describe_certificate(signed["signed_key"].as_str().unwrap());
    assert!(
        text.contains("alice") && text.contains("permit-pty"),
        "{text}"
    );
    // No allowed users at all: nothing can be signed.
    f.write(
        "roles/none",
        json!({"key_type": "ca", "allow_user_certificates": true}),
    )
    .await;
    assert_eq!(
        f.refused(
            "sign/none",
            json!({"public_key": user.public, "valid_principals": "x"})
        )
        .await,
        "role is not configured to allow any principals"
    );
}

#[tokio::test]
async fn each_sign_uses_the_ca_configured_at_that_moment() {
    // The engine keeps the parsed CA key between signs; a replaced or deleted CA must be
    // seen by the very next sign.
    let f = fixture();
    user_role(&f, json!({})).await;
    let user = keygen("ed25519", None);
    let signed_by = |line: &str| -> ssh_key::public::KeyData {
        let certificate = ssh_key::Certificate::from_openssh(line.trim()).unwrap();
        certificate.signature_key().clone()
    };
    let public_of = |line: &str| -> ssh_key::public::KeyData {
        ssh_key::PublicKey::from_openssh(line.trim())
            .unwrap()
            .key_data()
            .clone()
    };
    let first = f.ca("ed25519").await;
    for _ in 0..2 {
        let signed = f
            .write("sign/users", json!({"public_key": user.public}))
            .await;
        assert_eq!(
            signed_by(signed["signed_key"].as_str().unwrap()),
            public_of(&first)
        );
    }
    f.call(Operation::Delete, "config/ca", Value::Null)
        .await
        .unwrap();
    assert_eq!(
        f.refused("sign/users", json!({"public_key": user.public}))
            .await,
        "keys haven't been configured yet"
    );
    let second = f.ca("rsa").await;
    assert_ne!(public_of(&first), public_of(&second));
    let signed = f
        .write("sign/users", json!({"public_key": user.public}))
        .await;
    let line = signed["signed_key"].as_str().unwrap();
    assert_eq!(signed_by(line), public_of(&second));
    describe_certificate(line);
}
