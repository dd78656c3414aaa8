//! SMTP settings and mail against real SMTP servers on 127.0.0.1: an aiosmtpd server started
//! by the test (Debian's python3-aiosmtpd, which scripts/services installs) with an
//! authenticator and a recipient it refuses, and a listener that accepts and never answers.
//! The test message arrives (and `password` is never returned), refused credentials are 401,
//! another error reply is 500 and silence is 504, nothing being stored on failure; with SMTP
//! enabled, an invitation is mailed with its token.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use platform::Config;
use serde_json::{Value, json};
use support::{ROOT, TestPlatform};

/// The SMTP server: accepts `mailer` / `s3cret` (PLAIN or LOGIN, or no AUTH at all), refuses
/// recipients starting with `reject`, and writes each message to `<dir>/<n>.eml`, its first
/// line `X-Rcpt: <recipients>`.
const SERVER: &str = r#"
import os, sys
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, outdir = int(sys.argv[1]), sys.argv[2]

class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("reject"):
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        n = len(os.listdir(outdir))
        path = os.path.join(outdir, "%04d.tmp" % n)
        with open(path, "wb") as f:
            f.write(b"X-Rcpt: " + ",".join(envelope.rcpt_tos).encode() + b"\r\n")
            f.write(envelope.content)
        os.rename(path, os.path.join(outdir, "%04d.eml" % n))
        return "250 OK"

def check(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"mailer" \
        and auth_data.password == b"s3cret"
    # handled=False: aiosmtpd answers the refusal itself (535).
    return AuthResult(success=ok, handled=False)

controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=check,
                        auth_require_tls=False, auth_required=False)
controller.start()
print("ready", flush=True)
sys.stdin.read()
controller.stop()
"#;

/// A running aiosmtpd; killed when dropped.
struct SmtpServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl SmtpServer {
    fn start() -> SmtpServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let mut child = Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(SERVER)
            .arg(port.to_string())
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python3 (python3-aiosmtpd: run scripts/services)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the server's first line");
        assert_eq!(line.trim(), "ready", "aiosmtpd did not start");
        SmtpServer { child, port, dir }
    }

    /// The messages received so far, oldest first.
    fn messages(&self) -> Vec<String> {
        messages_in(self.dir.path())
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn messages_in(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the mail dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "eml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| std::fs::read_to_string(path).expect("read a message"))
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

async fn platform_with_timeout(timeout: Duration) -> TestPlatform {
    TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        api_rate_limiting_enabled: false,
        smtp_timeout: timeout,
        ..Config::default()
    })
    .await
}

fn smtp(attributes: Value) -> Value {
    json!({"data": {"type": "smtp-settings", "attributes": attributes}})
}

const URI: &str = "/api/v2/admin/smtp-settings";

#[tokio::test]
async fn a_test_message_arrives_with_the_given_credentials_and_the_password_is_never_returned() {
    let server = SmtpServer::start();
    let platform = platform_with_timeout(Duration::from_secs(5)).await;
    let answer = platform
        .patch(
            URI,
            ROOT,
            smtp(json!({
                "enabled": true, "host": "127.0.0.1", "port": server.port,
                "sender": "platform@acme.test", "auth": "login",
                "username": "mailer", "password": "s3cret",
                "test-email-address": "admin@acme.test"
            })),
        )
        .await
        .expect(200);
    let attributes = &answer.body["data"]["attributes"];
    assert_eq!(answer.body["data"]["id"], "smtp");
    assert_eq!(attributes["enabled"], true);
    assert_eq!(attributes["port"], server.port);
    assert_eq!(attributes["auth"], "login");
    assert_eq!(attributes["username"], "mailer");
    assert!(attributes.get("password").is_none(), "{}", answer.text);
    assert!(attributes.get("test-email-address").is_none());
    let messages = server.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].starts_with("X-Rcpt: admin@acme.test"));
    assert!(messages[0].contains("From: platform@acme.test"));
    let read = platform.get(URI, ROOT).await.expect(200);
    assert!(read.body["data"]["attributes"].get("password").is_none());
    assert!(!read.text.contains("s3cret"));

    // PLAIN works too, and without a test address nothing is sent.
    platform
        .patch(
            URI,
            ROOT,
            smtp(json!({"auth": "plain", "test-email-address": "second@acme.test"})),
        )
        .await
        .expect(200);
    platform
        .patch(URI, ROOT, smtp(json!({"sender": "ops@acme.test"})))
        .await
        .expect(200);
    assert_eq!(server.messages().len(), 2);
}

#[tokio::test]
async fn a_wrong_password_is_401_and_nothing_is_stored() {
    let server = SmtpServer::start();
    let platform = platform_with_timeout(Duration::from_secs(5)).await;
    let answer = platform
        .patch(
            URI,
            ROOT,
            smtp(json!({
                "enabled": true, "host": "127.0.0.1", "port": server.port,
                "sender": "platform@acme.test", "auth": "plain",
                "username": "mailer", "password": "wrong",
                "test-email-address": "admin@acme.test"
            })),
        )
        .await
        .expect(401);
    assert_eq!(answer.error()["status"], "401");
    assert!(
        answer.error()["detail"].as_str().unwrap().contains("535"),
        "{}",
        answer.text
    );
    assert!(server.messages().is_empty());
    let read = platform.get(URI, ROOT).await.expect(200);
    assert_eq!(read.body["data"]["attributes"]["enabled"], false);
    assert!(read.body["data"]["attributes"]["host"].is_null());
}

#[tokio::test]
async fn another_error_reply_is_500_with_the_reply_as_the_spec_says() {
    let server = SmtpServer::start();
    let platform = platform_with_timeout(Duration::from_secs(5)).await;
    let answer = platform
        .patch(
            URI,
            ROOT,
            smtp(json!({
                "enabled": true, "host": "127.0.0.1", "port": server.port,
                "sender": "platform@acme.test", "auth": "none",
                "test-email-address": "rejected@acme.test"
            })),
        )
        .await
        .expect(500);
    assert!(
        answer.error()["detail"].as_str().unwrap().contains("550"),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_504_within_the_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and holds connections without a word.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let platform = platform_with_timeout(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let answer = platform
        .patch(
            URI,
            ROOT,
            smtp(json!({
                "host": "127.0.0.1", "port": port, "sender": "platform@acme.test",
                "test-email-address": "admin@acme.test"
            })),
        )
        .await
        .expect(504);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(answer.error()["status"], "504");
    silent.abort();
}

#[tokio::test]
async fn incomplete_or_invalid_settings_are_422() {
    let platform = TestPlatform::new().await;
    for (attributes, pointer) in [
        (json!({"enabled": true}), "host"),
        (
            json!({"enabled": true, "host": "127.0.0.1", "port": 25}),
            "sender",
        ),
        (json!({"port": 0}), "port"),
        (json!({"port": 70000}), "port"),
        (json!({"sender": "not an address"}), "sender"),
        (json!({"auth": "cram-md5"}), "auth"),
        (
            json!({"enabled": true, "host": "127.0.0.1", "port": 25, "sender": "a@b.test", "auth": "plain"}),
            "username",
        ),
        (
            json!({"test-email-address": "nobody"}),
            "test-email-address",
        ),
    ] {
        let answer = platform
            .patch(URI, ROOT, smtp(attributes.clone()))
            .await
            .expect(422);
        assert_eq!(
            answer.error()["source"]["pointer"],
            format!("/data/attributes/{pointer}"),
            "{attributes}"
        );
    }
}

#[tokio::test]
async fn invitations_are_mailed_when_smtp_is_enabled() {
    let server = SmtpServer::start();
    let platform = platform_with_timeout(Duration::from_secs(5)).await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    // Disabled: no mail.
    platform
        .invite("acme", "first@acme.test", &[&owners], ROOT)
        .await
        .expect(201);
    assert!(server.messages().is_empty());
    platform
        .patch(
            "/api/v2/admin/customization-settings",
            ROOT,
            json!({"data": {"type": "customization-settings", "attributes": {
                "footer": "ACME platform team", "support-email-address": "help@acme.test"
            }}}),
        )
        .await
        .expect(200);
    platform
        .patch(
            URI,
            ROOT,
            smtp(json!({
                "enabled": true, "host": "127.0.0.1", "port": server.port,
                "sender": "platform@acme.test", "auth": "login",
                "username": "mailer", "password": "s3cret"
            })),
        )
        .await
        .expect(200);
    let invited = platform
        .invite("acme", "second@acme.test", &[&owners], ROOT)
        .await
        .expect(201);
    let token = invited.body["meta"]["invitation"]["token"]
        .as_str()
        .unwrap();
    let messages = server.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    // Undo quoted-printable's soft line breaks (long lines are wrapped at 76).
    let mail = messages[0].replace("=\r\n", "").replace("=\n", "");
    let mail = &mail;
    assert!(mail.starts_with("X-Rcpt: second@acme.test"), "{mail}");
    assert!(mail.contains(token), "{mail}");
    assert!(mail.contains("ACME platform team"), "{mail}");
    assert!(mail.contains("Reply-To: help@acme.test"), "{mail}");
}
