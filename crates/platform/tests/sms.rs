//! SMS settings and verification against a Twilio-compatible provider stub on 127.0.0.1 (a
//! small HTTP server in the test that checks basic auth like Twilio and records each form):
//! the verification reaches it with the right path and form fields, a refusal is a 400 with
//! the provider's message, disabled SMS or a missing number is a 400, `base-url` defaults to
//! Twilio's and is returned, `auth-token` never is; upstream's `twilio-settings` path works.

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use serde_json::{Value, json};
use support::{ROOT, TestPlatform};
use testkit::TestServer;

/// What the stub received: (account sid in the path, the form fields).
type Received = Arc<Mutex<Vec<(String, Vec<(String, String)>)>>>;

async fn messages(
    State(received): State<Received>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{account}:token-1"))
    );
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            json!({"code": 20003, "message": "Authenticate", "status": 401}).to_string(),
        );
    }
    let form: Vec<(String, String)> = serde_urlencoded::from_str(&body).expect("a form body");
    received.lock().unwrap().push((account, form));
    (
        StatusCode::CREATED,
        json!({"sid": "SM0001", "status": "queued"}).to_string(),
    )
}

async fn provider() -> (TestServer, Received) {
    let received: Received = Arc::default();
    let router = Router::new()
        .route(
            "/2010-04-01/Accounts/{account}/Messages.json",
            post(messages),
        )
        .with_state(received.clone());
    (TestServer::start(router).await, received)
}

fn sms(kind: &str, attributes: Value) -> Value {
    json!({"data": {"type": kind, "attributes": attributes}})
}

fn verify(number: Option<&str>) -> Value {
    match number {
        Some(number) => {
            json!({"data": {"type": "sms-settings", "attributes": {"test-number": number}}})
        }
        None => json!({"data": {"type": "sms-settings", "attributes": {}}}),
    }
}

#[tokio::test]
async fn defaults_show_the_twilio_base_url_and_verify_is_400_while_disabled() {
    let platform = TestPlatform::new().await;
    let read = platform
        .get("/api/v2/admin/sms-settings", ROOT)
        .await
        .expect(200);
    assert_eq!(read.body["data"]["type"], "sms-settings");
    assert_eq!(read.body["data"]["id"], "sms");
    assert_eq!(read.body["data"]["attributes"]["enabled"], false);
    assert_eq!(
        read.body["data"]["attributes"]["base-url"],
        "https://api.twilio.com"
    );
    let refused = platform
        .post(
            "/api/v2/admin/sms-settings/verify",
            ROOT,
            verify(Some("+15550001")),
        )
        .await
        .expect(400);
    assert_eq!(refused.error()["status"], "400");
    let incomplete = platform
        .patch(
            "/api/v2/admin/sms-settings",
            ROOT,
            sms(
                "sms-settings",
                json!({"enabled": true, "account-sid": "AC1"}),
            ),
        )
        .await
        .expect(422);
    assert_eq!(
        incomplete.error()["source"]["pointer"],
        "/data/attributes/auth-token"
    );
    platform
        .patch(
            "/api/v2/admin/sms-settings",
            ROOT,
            sms("sms-settings", json!({"base-url": "ftp://example.com"})),
        )
        .await
        .expect(422);
}

#[tokio::test]
async fn verify_sends_a_real_request_with_the_twilio_form_fields() {
    let (server, received) = provider().await;
    let platform = TestPlatform::new().await;
    let base = server.url("");
    let answer = platform
        .patch(
            "/api/v2/admin/sms-settings",
            ROOT,
            sms(
                "sms-settings",
                json!({"enabled": true, "account-sid": "AC123", "auth-token": "token-1",
                       "from-number": "+15550100", "base-url": base}),
            ),
        )
        .await
        .expect(200);
    let attributes = &answer.body["data"]["attributes"];
    assert_eq!(attributes["base-url"], base.trim_end_matches('/'));
    assert_eq!(attributes["account-sid"], "AC123");
    assert!(attributes.get("auth-token").is_none(), "{}", answer.text);
    assert!(!answer.text.contains("token-1"));

    platform
        .post("/api/v2/admin/sms-settings/verify", ROOT, verify(None))
        .await
        .expect(400);
    let verified = platform
        .post(
            "/api/v2/admin/sms-settings/verify",
            ROOT,
            verify(Some("+15550199")),
        )
        .await
        .expect(200);
    assert!(verified.text.is_empty(), "{}", verified.text);
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    let (account, form) = &received[0];
    assert_eq!(account, "AC123");
    let field = |name: &str| {
        form.iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    assert_eq!(field("To").as_deref(), Some("+15550199"));
    assert_eq!(field("From").as_deref(), Some("+15550100"));
    assert!(field("Body").is_some_and(|body| !body.is_empty()));
}

#[tokio::test]
async fn a_provider_refusal_is_400_and_the_twilio_path_speaks_twilio_settings() {
    let (server, received) = provider().await;
    let platform = TestPlatform::new().await;
    let answer = platform
        .patch(
            "/api/v2/admin/twilio-settings",
            ROOT,
            sms(
                "twilio-settings",
                json!({"enabled": true, "account-sid": "AC9", "auth-token": "wrong",
                       "from-number": "+15550100", "base-url": server.url("")}),
            ),
        )
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["type"], "twilio-settings");
    assert_eq!(answer.body["data"]["id"], "twilio");
    // go-tfe verifies with PATCH.
    let refused = platform
        .patch(
            "/api/v2/admin/twilio-settings/verify",
            ROOT,
            json!({"data": {"type": "twilio-settings", "attributes": {"test-number": "+15550199"}}}),
        )
        .await
        .expect(400);
    assert!(
        refused.error()["detail"]
            .as_str()
            .unwrap()
            .contains("Authenticate"),
        "{}",
        refused.text
    );
    assert!(received.lock().unwrap().is_empty());
    platform
        .patch(
            "/api/v2/admin/twilio-settings",
            ROOT,
            sms("twilio-settings", json!({"auth-token": "token-1"})),
        )
        .await
        .expect(200);
    platform
        .post(
            "/api/v2/admin/twilio-settings/verify",
            ROOT,
            verify(Some("+15550199")),
        )
        .await
        .expect(200);
    assert_eq!(received.lock().unwrap().len(), 1);
    let shown = platform
        .get("/api/v2/admin/sms-settings", ROOT)
        .await
        .expect(200);
    assert_eq!(shown.body["data"]["attributes"]["account-sid"], "AC9");
}

#[tokio::test]
async fn an_unreachable_provider_is_502() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let platform = TestPlatform::new().await;
    platform
        .patch(
            "/api/v2/admin/sms-settings",
            ROOT,
            sms(
                "sms-settings",
                json!({"enabled": true, "account-sid": "AC1", "auth-token": "t",
                       "from-number": "+15550100", "base-url": format!("http://127.0.0.1:{port}")}),
            ),
        )
        .await
        .expect(200);
    platform
        .post(
            "/api/v2/admin/sms-settings/verify",
            ROOT,
            verify(Some("+15550199")),
        )
        .await
        .expect(502);
}
