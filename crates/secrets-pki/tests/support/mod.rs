//! Shared fixtures for the pki engine's tests: an engine over memory storage and a manual
//! clock standing at the system time (so the real openssl CLI judges its certificates), a
//! call helper that turns outcomes into data, and openssl wrappers (verify, x509 -text, crl,
//! key and CSR generation) working in a temporary directory.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use secrets_sdk::testing::MemEngineStorage;
use secrets_sdk::{Engine, EngineConfig, EngineError, Lease, Operation, Request};
use serde_json::{Value, json};
use stdx::clock::ManualClock;

thread_local! {
    static CAPTURED: std::cell::RefCell<Option<EngineConfig>> = const { std::cell::RefCell::new(None) };
}

/// A factory that keeps the configuration it is given and builds the real engine.
fn capture(config: EngineConfig) -> Result<Arc<dyn Engine>, EngineError> {
    CAPTURED.with(|slot| *slot.borrow_mut() = Some(config.clone()));
    secrets_pki::factory(config)
}

/// One pki mount under test.
pub(crate) struct Pki {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) storage: Arc<MemEngineStorage>,
    pub(crate) clock: ManualClock,
    pub(crate) dir: tempfile::TempDir,
}

/// An answer: `status` 200 with `data`, `warnings`, `secret`; a raw answer with `status`,
/// `content_type`, `body`; 204/404-worthy `none`; or an error `status` with `error`.
pub(crate) type Answer = Value;

impl Pki {
    pub(crate) fn new() -> Pki {
        // The SDK builds the mount's configuration (whatever fields it has); the test swaps in
        // its own storage and a manual clock at the system time.
        let (_, storage) = secrets_sdk::testing::engine_with_mem_storage(capture, "pki/").unwrap();
        let mut config = CAPTURED.with(|slot| slot.borrow_mut().take()).unwrap();
        let clock = ManualClock::at_system_time();
        config.clock = Arc::new(clock.clone());
        config.storage = storage.clone();
        let engine = secrets_pki::factory(config).unwrap();
        Pki {
            engine,
            storage,
            clock,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) async fn call(&self, operation: Operation, path: &str, body: Value) -> Answer {
        let data = body.as_object().cloned().unwrap_or_default();
        let outcome = self
            .engine
            .handle(Request::new(operation, path).with_data(data))
            .await;
        match outcome {
            Ok(None) => json!({"status": "none"}),
            Ok(Some(response)) => match response.raw {
                Some(raw) => json!({
                    "status": raw.status,
                    "content_type": raw.content_type,
                    "body": String::from_utf8_lossy(&raw.body),
                    "bytes": raw.body.len(),
                }),
                None => json!({
                    "status": 200,
                    "data": response.data.map_or(Value::Null, Value::Object),
                    "warnings": response.warnings,
                    "secret": response.secret.map(|s| json!({"ttl": s.ttl.as_secs(), "internal": s.internal})),
                }),
            },
            Err(err) => {
                let status = match err {
                    EngineError::BadRequest(_) => 400,
                    EngineError::UnsupportedPath => 404,
                    EngineError::UnsupportedOperation => 405,
                    _ => 500,
                };
                json!({"status": status, "error": err.to_string()})
            }
        }
    }

    pub(crate) async fn write(&self, path: &str, body: Value) -> Answer {
        self.call(Operation::Update, path, body).await
    }

    pub(crate) async fn read(&self, path: &str) -> Answer {
        self.call(Operation::Read, path, json!({})).await
    }

    pub(crate) async fn list(&self, path: &str) -> Answer {
        self.call(Operation::List, path, json!({})).await
    }

    pub(crate) async fn delete(&self, path: &str) -> Answer {
        self.call(Operation::Delete, path, json!({})).await
    }

    /// A write that must succeed; returns its data.
    pub(crate) async fn ok(&self, path: &str, body: Value) -> Value {
        let answer = self.write(path, body).await;
        assert_eq!(answer["status"], 200, "{path}: {answer}");
        answer["data"].clone()
    }

    /// A write that must fail with 400; returns the message.
    pub(crate) async fn refused(&self, path: &str, body: Value) -> String {
        let answer = self.write(path, body).await;
        assert_eq!(answer["status"], 400, "{path}: {answer}");
        answer["error"].as_str().unwrap().to_owned()
    }

    /// Revokes the lease a certificate was issued with, as the core does at expiry.
    pub(crate) async fn revoke_lease(&self, internal: Value) {
        self.engine
            .revoke(&Lease {
                lease_id: "pki/issue/x/abc".to_owned(),
                path: "issue/x".to_owned(),
                internal: internal.as_object().cloned().unwrap_or_default(),
                age: std::time::Duration::ZERO,
                increment: None,
            })
            .await
            .unwrap();
    }

    /// A root CA of `key_type`, named `name`; returns the generate answer's data.
    pub(crate) async fn root(&self, key_type: &str, name: &str) -> Value {
        self.ok(
            "root/generate/internal",
            json!({"common_name": format!("{name} Root"), "key_type": key_type, "issuer_name": name, "ttl": "8760h"}),
        )
        .await
    }

    /// Writes `text` to a file in the test's directory; returns its path.
    pub(crate) fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `openssl verify` of `leaf` against the `root` PEM, with `untrusted` intermediates and
    /// optional CRLs (`-crl_check`); `Ok(stdout)` or `Err(output)`.
    pub(crate) fn verify(
        &self,
        root: &str,
        untrusted: &[&str],
        leaf: &str,
        crls: &[&str],
    ) -> Result<String, String> {
        let root_path = self.file("verify-root.pem", root);
        let leaf_path = self.file("verify-leaf.pem", leaf);
        let mut args: Vec<String> = vec![
            "verify".into(),
            "-CAfile".into(),
            root_path.display().to_string(),
        ];
        if !untrusted.is_empty() {
            let path = self.file("verify-untrusted.pem", &untrusted.join("\n"));
            args.push("-untrusted".into());
            args.push(path.display().to_string());
        }
        if !crls.is_empty() {
            let path = self.file("verify-crls.pem", &crls.join("\n"));
            args.push("-crl_check".into());
            args.push("-CRLfile".into());
            args.push(path.display().to_string());
        }
        args.push(leaf_path.display().to_string());
        let (ok, out, err) = openssl(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
        if ok && out.contains(": OK") {
            Ok(out)
        } else {
            Err(format!("{out}{err}"))
        }
    }

    /// `openssl x509 -text -noout` of a PEM certificate.
    pub(crate) fn text(&self, cert: &str) -> String {
        let path = self.file("text.pem", cert);
        let (ok, out, err) = openssl(
            &[
                "x509",
                "-text",
                "-noout",
                "-in",
                &path.display().to_string(),
            ],
            None,
        );
        assert!(ok, "{err}");
        out
    }

    /// `openssl crl -text -noout` of a PEM CRL.
    pub(crate) fn crl_text(&self, crl: &str) -> String {
        let path = self.file("crl.pem", crl);
        let (ok, out, err) = openssl(
            &["crl", "-text", "-noout", "-in", &path.display().to_string()],
            None,
        );
        assert!(ok, "{err}");
        out
    }

    /// A key and CSR made by `openssl req`: `key_args` such as `["-newkey", "ec",
    /// "-pkeyopt", "ec_paramgen_curve:P-384"]`, plus extra arguments (`-sha256`,
    /// `-addext ...`). Returns the CSR PEM.
    pub(crate) fn csr(&self, subject: &str, key_args: &[&str], extra: &[&str]) -> String {
        let key = self.path("csr.key");
        let csr = self.path("csr.pem");
        let mut args = vec!["req", "-new", "-nodes", "-subj", subject];
        args.extend_from_slice(key_args);
        let key_s = key.display().to_string();
        let csr_s = csr.display().to_string();
        args.extend_from_slice(&["-keyout", &key_s, "-out", &csr_s]);
        args.extend_from_slice(extra);
        let (ok, _, err) = openssl(&args, None);
        assert!(ok, "openssl req: {err}");
        std::fs::read_to_string(csr).unwrap()
    }
}

/// Runs the openssl CLI; returns (success, stdout, stderr).
pub(crate) fn openssl(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl on PATH");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A JSON string field as `&str`.
pub(crate) fn s(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"))
}
