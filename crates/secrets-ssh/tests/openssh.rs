//! The engine against a real OpenSSH server started by each test on 127.0.0.1: certificates
//! from `sign` log in (and a principal the certificate lacks, a forced command, are enforced by
//! sshd), and dynamic keys are installed on the server, usable, uninstalled on revocation, and
//! refused when the server's host key changes from the pinned one.

mod support;

use secrets_sdk::Operation;
use serde_json::json;
use support::{KeyPair, Sshd, SshdConfig, TEST_USER, fixture, keygen, private_file};

fn certificate_file(user: &KeyPair, signed_key: &str) -> std::path::PathBuf {
    let path = user.dir.path().join("id-cert.pub");
    std::fs::write(&path, signed_key).unwrap();
    path
}

#[tokio::test]
async fn signed_certificates_log_in_and_sshd_enforces_principals_and_forced_commands() {
    let f = fixture();
    for key_type in ["ed25519", "rsa"] {
        let ca = f.ca(key_type).await;
        let sshd = Sshd::start(SshdConfig {
            user_ca: Some(&ca),
            root_keys: None,
            port: None,
        });
        f.write(
            "roles/login",
            json!({"key_type": "ca", "allow_user_certificates": true,
                   "allowed_users": format!("{TEST_USER},someone-else"),
                   "default_user": TEST_USER, "allowed_critical_options": "force-command",
                   "algorithm_signer": "rsa-sha2-512",
                   "default_extensions": {"permit-pty": ""}}),
        )
        .await;
        let user = keygen("ed25519", None);

        let signed = f
            .write("sign/login", json!({"public_key": user.public}))
            .await;
        let cert = certificate_file(&user, signed["signed_key"].as_str().unwrap());
        let out = sshd
            .login(TEST_USER, &user.private, Some(&cert), "echo hello")
            .unwrap_or_else(|err| panic!("{key_type} CA: {err}\n{}", sshd.log()));
        assert_eq!(out.trim(), "hello");

        let signed = f
            .write(
                "sign/login",
                json!({"public_key": user.public, "valid_principals": "someone-else"}),
            )
            .await;
        let cert = certificate_file(&user, signed["signed_key"].as_str().unwrap());
        assert!(
            sshd.login(TEST_USER, &user.private, Some(&cert), "echo hello")
                .is_err()
        );
        assert!(
            sshd.log().contains("not a listed principal"),
            "{}",
            sshd.log()
        );

        let signed = f
            .write(
                "sign/login",
                json!({"public_key": user.public,
                       "critical_options": {"force-command": "echo forced"}}),
            )
            .await;
        let cert = certificate_file(&user, signed["signed_key"].as_str().unwrap());
        let out = sshd
            .login(TEST_USER, &user.private, Some(&cert), "echo hello")
            .unwrap_or_else(|err| panic!("{err}\n{}", sshd.log()));
        assert_eq!(out.trim(), "forced");
    }
}

fn authorized_keys() -> String {
    std::fs::read_to_string(format!("/home/{TEST_USER}/.ssh/authorized_keys")).unwrap_or_default()
}

#[tokio::test]
async fn dynamic_keys_are_installed_used_uninstalled_and_pinned_to_the_host_key() {
    let f = fixture();
    let admin = keygen("ed25519", None);
    let sshd = Sshd::start(SshdConfig {
        user_ca: None,
        root_keys: Some(&admin.public),
        port: None,
    });
    f.write(
        "keys/admin",
        json!({"key": std::fs::read_to_string(&admin.private).unwrap()}),
    )
    .await;
    f.write(
        "roles/dyn",
        json!({"key_type": "dynamic", "key": "admin", "admin_user": "root",
               "default_user": TEST_USER, "cidr_list": "127.0.0.0/8", "port": sshd.port,
               "key_bits": 2048, "key_option_specs": "command=\"echo via-option\",no-pty"}),
    )
    .await;

    let response = f
        .call(Operation::Update, "creds/dyn", json!({"ip": "127.0.0.1"}))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", sshd.log()))
        .unwrap();
    let secret = response.secret.as_ref().expect("a dynamic key is leased");
    assert!(secret.renewable);
    let out = response.data.clone().unwrap();
    assert_eq!(out["key_type"], "dynamic");
    assert_eq!(out["username"], TEST_USER);
    assert_eq!(out["port"], sshd.port);
    let pem = out["key"].as_str().unwrap();
    assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    let installed_line = secret.internal["dynamic_public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(installed_line.starts_with("command=\"echo via-option\",no-pty ssh-rsa "));
    assert!(authorized_keys().lines().any(|line| line == installed_line));

    // The engine pinned the server's host key on first contact.
    let pins: Vec<String> = f
        .storage
        .keys()
        .into_iter()
        .filter(|key| key.starts_with("host_keys/"))
        .collect();
    assert_eq!(pins, [format!("host_keys/127.0.0.1/{}", sshd.port)]);

    let key_dir = tempfile::tempdir().unwrap();
    let key_file = private_file(key_dir.path(), "dynamic", pem);
    let login = sshd
        .login(TEST_USER, &key_file, None, "echo hello")
        .unwrap_or_else(|err| panic!("{err}\n{}", sshd.log()));
    assert_eq!(login.trim(), "via-option", "the key option specs apply");

    f.revoke("creds/dyn", &response)
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", sshd.log()));
    assert!(!authorized_keys().contains(&installed_line));
    assert!(
        sshd.login(TEST_USER, &key_file, None, "echo hello")
            .is_err()
    );

    // The same address with another host key: refused before anything runs.
    let port = sshd.port;
    drop(sshd);
    let impostor = Sshd::start(SshdConfig {
        user_ca: None,
        root_keys: Some(&admin.public),
        port: Some(port),
    });
    let refused = f.refused("creds/dyn", json!({"ip": "127.0.0.1"})).await;
    assert_eq!(
        refused,
        format!(
            "refusing to connect to 127.0.0.1:{port}: its host key does not match the key pinned on first use"
        )
    );
    assert!(
        !impostor.log().contains("Accepted publickey"),
        "{}",
        impostor.log()
    );
}

#[tokio::test]
async fn an_unreachable_host_is_a_server_error_and_installs_nothing() {
    let f = fixture();
    let admin = keygen("ed25519", None);
    f.write(
        "keys/admin",
        json!({"key": std::fs::read_to_string(&admin.private).unwrap()}),
    )
    .await;
    let port = support::free_port();
    f.write(
        "roles/dyn",
        json!({"key_type": "dynamic", "key": "admin", "admin_user": "root",
               "default_user": TEST_USER, "cidr_list": "127.0.0.0/8", "port": port}),
    )
    .await;
    let err = f
        .call(Operation::Update, "creds/dyn", json!({"ip": "127.0.0.1"}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, secrets_sdk::EngineError::Internal(_)),
        "{err:?}"
    );
    assert!(
        f.storage
            .keys()
            .iter()
            .all(|key| !key.starts_with("host_keys/"))
    );
}
