//! API tests of the site administration settings (general, cost estimation, SAML,
//! customization, data retention): who may see them (site administrators only, 404 for
//! anyone else), defaults, validation as 422s, and that each setting takes effect at once:
//! the rate limit and its switch are enforced, organization creation follows
//! `limit-user-organization-creation`, new workspaces take `default-remote-state-access`,
//! SAML certificates rotate and are revoked.

mod support;

use std::process::Command;

use serde_json::{Value, json};
use support::{ROOT, TestPlatform};

fn settings(kind: &str, attributes: Value) -> Value {
    json!({"data": {"type": kind, "attributes": attributes}})
}

/// A self-signed certificate made by openssl, in PEM.
fn certificate(common_name: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "30", "-subj"])
        .arg(format!("/CN={common_name}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl");
    assert!(status.status.success(), "{status:?}");
    std::fs::read_to_string(cert).expect("read certificate")
}

#[tokio::test]
async fn admin_settings_are_404_for_anyone_but_a_site_administrator() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let owner = platform.member("acme", "olivia", &[&owners]).await;
    for path in [
        "general-settings",
        "cost-estimation-settings",
        "saml-settings",
        "smtp-settings",
        "sms-settings",
        "twilio-settings",
        "customization-settings",
        "data-retention-policy-settings",
        "policy-engine-versions",
        "sentinel-versions",
    ] {
        let uri = format!("/api/v2/admin/{path}");
        platform.get(&uri, &owner.token).await.expect(404);
        platform.get(&uri, ROOT).await.expect(200);
        // Refused before the body is read: a malformed body is still a 404.
        platform
            .patch(&uri, &owner.token, json!("not a document"))
            .await
            .expect_any(&[404, 405]);
    }
    platform
        .post(
            "/api/v2/admin/saml-settings/actions/revoke-old-certificate",
            &owner.token,
            json!(null),
        )
        .await
        .expect(404);
}

trait ExpectAny {
    fn expect_any(self, statuses: &[u16]) -> Self;
}

impl ExpectAny for support::Answer {
    #[track_caller]
    fn expect_any(self, statuses: &[u16]) -> Self {
        assert!(
            statuses.contains(&self.status.as_u16()),
            "status {}; body {}",
            self.status,
            self.text
        );
        self
    }
}

#[tokio::test]
async fn general_settings_have_the_spec_defaults_and_refuse_a_limit_under_30() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .get("/api/v2/admin/general-settings", ROOT)
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["type"], "general-settings");
    assert_eq!(answer.body["data"]["id"], "general");
    let attributes = &answer.body["data"]["attributes"];
    assert_eq!(attributes["limit-user-organization-creation"], true);
    assert_eq!(attributes["api-rate-limit"], 30);
    assert_eq!(
        attributes["send-passing-statuses-for-untriggered-speculative-plans"],
        false
    );
    assert_eq!(
        attributes["allow-speculative-plans-on-pull-requests-from-forks"],
        false
    );
    assert_eq!(attributes["default-remote-state-access"], true);
    let refused = platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings("general-settings", json!({"api-rate-limit": 29})),
        )
        .await
        .expect(422);
    assert_eq!(
        refused.error()["source"]["pointer"],
        "/data/attributes/api-rate-limit"
    );
    platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings("general-settings", json!({"plan-timeout": "soon"})),
        )
        .await
        .expect(422);
    let changed = platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings(
                "general-settings",
                json!({"allow-speculative-plans-on-pull-requests-from-forks": true, "plan-timeout": "90m"}),
            ),
        )
        .await
        .expect(200);
    let attributes = &changed.body["data"]["attributes"];
    assert_eq!(
        attributes["allow-speculative-plans-on-pull-requests-from-forks"],
        true
    );
    assert_eq!(attributes["plan-timeout"], "90m");
    // Omitted attributes keep their values.
    assert_eq!(attributes["default-remote-state-access"], true);
}

#[tokio::test]
async fn the_rate_limit_and_its_switch_take_effect_at_once() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let member = platform.member("acme", "rita", &[&owners]).await;
    let burst = |token: String| {
        let platform = &platform;
        async move {
            let mut limited = 0;
            for _ in 0..45 {
                let answer = platform.get("/api/v2/account/details", &token).await;
                if answer.status.as_u16() == 429 {
                    limited += 1;
                }
            }
            limited
        }
    };
    assert_eq!(
        burst(member.token.clone()).await,
        0,
        "limiting starts off in tests"
    );
    let answer = platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings(
                "general-settings",
                json!({"api-rate-limiting-enabled": true, "api-rate-limit": 30}),
            ),
        )
        .await
        .expect(200);
    assert_eq!(
        answer.body["data"]["attributes"]["api-rate-limiting-enabled"],
        true
    );
    assert!(
        burst(member.token.clone()).await > 0,
        "over 30 requests a second"
    );
    platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings(
                "general-settings",
                json!({"api-rate-limiting-enabled": false}),
            ),
        )
        .await
        .expect(200);
    assert_eq!(burst(member.token.clone()).await, 0);
    assert!(!platform.state.api_rate_limiting_enabled());
}

#[tokio::test]
async fn organization_creation_follows_limit_user_organization_creation() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let member = platform.member("acme", "uma", &[&owners]).await;
    let create = |name: &str| {
        json!({"data": {"type": "organizations", "attributes": {
            "name": name, "email": "ops@example.com"
        }}})
    };
    platform
        .post("/api/v2/organizations", &member.token, create("umas"))
        .await
        .expect(404);
    platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings(
                "general-settings",
                json!({"limit-user-organization-creation": false}),
            ),
        )
        .await
        .expect(200);
    platform
        .post("/api/v2/organizations", &member.token, create("umas"))
        .await
        .expect(201);
}

#[tokio::test]
async fn new_workspaces_take_default_remote_state_access() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let workspace =
        |name: &str| json!({"data": {"type": "workspaces", "attributes": {"name": name}}});
    let first = platform
        .post(
            "/api/v2/organizations/acme/workspaces",
            ROOT,
            workspace("one"),
        )
        .await
        .expect(201);
    assert_eq!(
        first.body["data"]["attributes"]["global-remote-state"],
        true
    );
    platform
        .patch(
            "/api/v2/admin/general-settings",
            ROOT,
            settings(
                "general-settings",
                json!({"default-remote-state-access": false}),
            ),
        )
        .await
        .expect(200);
    let second = platform
        .post(
            "/api/v2/organizations/acme/workspaces",
            ROOT,
            workspace("two"),
        )
        .await
        .expect(201);
    assert_eq!(
        second.body["data"]["attributes"]["global-remote-state"],
        false
    );
    // An explicit value still wins, and existing workspaces keep theirs.
    let third = platform
        .post(
            "/api/v2/organizations/acme/workspaces",
            ROOT,
            json!({"data": {"type": "workspaces", "attributes": {"name": "three", "global-remote-state": true}}}),
        )
        .await
        .expect(201);
    assert_eq!(
        third.body["data"]["attributes"]["global-remote-state"],
        true
    );
    let one = platform
        .get("/api/v2/organizations/acme/workspaces/one", ROOT)
        .await
        .expect(200);
    assert_eq!(one.body["data"]["attributes"]["global-remote-state"], true);
}

#[tokio::test]
async fn cost_estimation_needs_a_complete_credential_set_when_enabled() {
    let platform = TestPlatform::new().await;
    let uri = "/api/v2/admin/cost-estimation-settings";
    let read = platform.get(uri, ROOT).await.expect(200);
    assert_eq!(read.body["data"]["id"], "cost-estimation");
    assert_eq!(read.body["data"]["attributes"]["enabled"], false);
    let refused = platform
        .patch(
            uri,
            ROOT,
            settings(
                "cost-estimation-settings",
                json!({"enabled": true, "cloud-a-access-key-id": "AKIA1"}),
            ),
        )
        .await
        .expect(422);
    assert_eq!(
        refused.error()["source"]["pointer"],
        "/data/attributes/enabled"
    );
    platform
        .patch(
            uri,
            ROOT,
            settings(
                "cost-estimation-settings",
                json!({"cloud-c-credentials": "{not json"}),
            ),
        )
        .await
        .expect(422);
    // Upstream's name is an alias of the spec's.
    let enabled = platform
        .patch(
            uri,
            ROOT,
            settings(
                "cost-estimation-settings",
                json!({"enabled": true, "cloud-a-access-key-id": "AKIA1", "aws-secret-key": "s3"}),
            ),
        )
        .await
        .expect(200);
    let attributes = &enabled.body["data"]["attributes"];
    assert_eq!(attributes["enabled"], true);
    assert_eq!(attributes["cloud-a-access-key-id"], "AKIA1");
    assert_eq!(attributes["cloud-a-secret-key"], "s3");
    // Removing half the set while enabled is refused, and nothing changes.
    platform
        .patch(
            uri,
            ROOT,
            settings(
                "cost-estimation-settings",
                json!({"cloud-a-secret-key": null}),
            ),
        )
        .await
        .expect(422);
    let read = platform.get(uri, ROOT).await.expect(200);
    assert_eq!(read.body["data"]["attributes"]["cloud-a-secret-key"], "s3");
    platform
        .patch(
            uri,
            ROOT,
            settings(
                "cost-estimation-settings",
                json!({"cloud-c-credentials": "{\"type\": \"service_account\"}", "cloud-a-secret-key": null}),
            ),
        )
        .await
        .expect(200);
}

#[tokio::test]
async fn saml_validates_certificates_and_urls_rotates_and_revokes() {
    let platform = TestPlatform::new().await;
    let uri = "/api/v2/admin/saml-settings";
    let read = platform.get(uri, ROOT).await.expect(200);
    let attributes = &read.body["data"]["attributes"];
    assert_eq!(read.body["data"]["id"], "saml");
    assert_eq!(attributes["attr-username"], "Username");
    assert_eq!(attributes["attr-groups"], "MemberOf");
    assert_eq!(attributes["attr-site-admin"], "SiteAdmin");
    assert_eq!(attributes["site-admin-role"], "site-admins");
    assert_eq!(attributes["sso-api-token-session-timeout"], 1_209_600);
    assert!(
        attributes["acs-consumer-url"]
            .as_str()
            .unwrap()
            .ends_with("/users/saml/auth")
    );
    assert!(attributes["old-idp-cert"].is_null());

    let bad_pem = platform
        .patch(
            uri,
            ROOT,
            settings(
                "saml-settings",
                json!({"idp-cert": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"}),
            ),
        )
        .await
        .expect(422);
    assert_eq!(
        bad_pem.error()["source"]["pointer"],
        "/data/attributes/idp-cert"
    );
    platform
        .patch(
            uri,
            ROOT,
            settings(
                "saml-settings",
                json!({"sso-endpoint-url": "http://idp.example.com/sso"}),
            ),
        )
        .await
        .expect(422);
    let incomplete = platform
        .patch(
            uri,
            ROOT,
            settings("saml-settings", json!({"enabled": true})),
        )
        .await
        .expect(422);
    assert_eq!(
        incomplete.error()["source"]["pointer"],
        "/data/attributes/idp-cert"
    );

    let first = certificate("idp-one");
    let second = certificate("idp-two");
    let enabled = platform
        .patch(
            uri,
            ROOT,
            settings(
                "saml-settings",
                json!({
                    "enabled": true,
                    "idp-cert": first,
                    "sso-endpoint-url": "https://idp.example.com/sso",
                    "slo-endpoint-url": "https://idp.example.com/slo",
                    "attr-username": "login"
                }),
            ),
        )
        .await
        .expect(200);
    let attributes = &enabled.body["data"]["attributes"];
    assert_eq!(attributes["enabled"], true);
    assert_eq!(
        attributes["idp-cert"].as_str().unwrap().trim(),
        first.trim()
    );
    assert!(attributes["old-idp-cert"].is_null());
    assert_eq!(attributes["attr-username"], "login");

    let rotated = platform
        .patch(
            uri,
            ROOT,
            settings("saml-settings", json!({"idp-cert": second})),
        )
        .await
        .expect(200);
    let attributes = &rotated.body["data"]["attributes"];
    assert_eq!(
        attributes["idp-cert"].as_str().unwrap().trim(),
        second.trim()
    );
    assert_eq!(
        attributes["old-idp-cert"].as_str().unwrap().trim(),
        first.trim()
    );

    let revoked = platform
        .post(
            "/api/v2/admin/saml-settings/actions/revoke-old-certificate",
            ROOT,
            json!(null),
        )
        .await
        .expect(200);
    assert!(revoked.body["data"]["attributes"]["old-idp-cert"].is_null());
    assert_eq!(
        revoked.body["data"]["attributes"]["idp-cert"]
            .as_str()
            .unwrap()
            .trim(),
        second.trim()
    );
}

#[tokio::test]
async fn customization_keeps_its_texts_and_restores_defaults_with_null() {
    let platform = TestPlatform::new().await;
    let uri = "/api/v2/admin/customization-settings";
    let default_support = platform.get(uri, ROOT).await.expect(200).body["data"]["attributes"]
        ["support-email-address"]
        .clone();
    assert!(default_support.as_str().unwrap().contains('@'));
    platform
        .patch(
            uri,
            ROOT,
            settings(
                "customization-settings",
                json!({"support-email-address": "nope"}),
            ),
        )
        .await
        .expect(422);
    let changed = platform
        .patch(
            uri,
            ROOT,
            settings(
                "customization-settings",
                json!({"support-email-address": "help@acme.test", "footer": "<p>ACME</p>", "login-help": "Ask IT"}),
            ),
        )
        .await
        .expect(200);
    let attributes = &changed.body["data"]["attributes"];
    assert_eq!(attributes["support-email-address"], "help@acme.test");
    assert_eq!(attributes["footer"], "<p>ACME</p>");
    assert_eq!(attributes["error"], "");
    let reset = platform
        .patch(
            uri,
            ROOT,
            settings(
                "customization-settings",
                json!({"support-email-address": null}),
            ),
        )
        .await
        .expect(200);
    assert_eq!(
        reset.body["data"]["attributes"]["support-email-address"],
        default_support
    );
    assert_eq!(reset.body["data"]["attributes"]["login-help"], "Ask IT");
}

#[tokio::test]
async fn data_retention_policy_is_shown_set_updated_and_removed() {
    let platform = TestPlatform::new().await;
    let uri = "/api/v2/admin/data-retention-policy-settings";
    let none = platform.get(uri, ROOT).await.expect(200);
    assert!(none.body["data"].is_null(), "{}", none.text);
    let policy = |days: Value| {
        json!({"data": {"type": "data-retention-policy-delete-olders",
                        "attributes": {"delete-older-than-n-days": days}}})
    };
    platform.post(uri, ROOT, policy(json!(0))).await.expect(422);
    platform
        .post(uri, ROOT, policy(json!("ten")))
        .await
        .expect(422);
    platform
        .post(
            uri,
            ROOT,
            json!({"data": {"type": "data-retention-policy-dont-deletes", "attributes": {}}}),
        )
        .await
        .expect(422);
    let created = platform
        .post(uri, ROOT, policy(json!(30)))
        .await
        .expect(201);
    let data = &created.body["data"];
    assert_eq!(data["type"], "data-retention-policy-delete-olders");
    assert!(data["id"].as_str().unwrap().starts_with("drp-"));
    assert_eq!(data["attributes"]["delete-older-than-n-days"], 30);
    assert!(data["relationships"]["target"]["data"].is_null());
    let updated = platform
        .post(
            uri,
            ROOT,
            json!({"data": {"type": "data-retention-policy-delete-olders",
                            "attributes": {"deleteOlderThanNDays": 7}}}),
        )
        .await
        .expect(200);
    assert_eq!(updated.body["data"]["id"], data["id"]);
    assert_eq!(
        updated.body["data"]["attributes"]["delete-older-than-n-days"],
        7
    );
    let shown = platform.get(uri, ROOT).await.expect(200);
    assert_eq!(
        shown.body["data"]["attributes"]["delete-older-than-n-days"],
        7
    );
    platform.delete(uri, ROOT).await.expect(204);
    platform.delete(uri, ROOT).await.expect(204);
    assert!(platform.get(uri, ROOT).await.expect(200).body["data"].is_null());
}

#[tokio::test]
async fn a_browser_gets_the_error_page_with_the_customization_and_api_clients_json() {
    let platform = TestPlatform::new().await;
    platform
        .patch(
            "/api/v2/admin/customization-settings",
            ROOT,
            settings(
                "customization-settings",
                json!({"error": "<p>Ask the platform team in #infra.</p>", "footer": "ACME Corp",
                       "support-email-address": "help@acme.test"}),
            ),
        )
        .await
        .expect(200);
    let browser = |uri: &str| {
        http::Request::builder()
            .uri(uri)
            .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let page = platform
        .send(browser("/app/acme/workspaces"))
        .await
        .expect(404);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    assert!(
        page.text
            .contains("<p>Ask the platform team in #infra.</p>"),
        "{}",
        page.text
    );
    assert!(
        page.text.contains("<footer>ACME Corp</footer>"),
        "{}",
        page.text
    );
    assert!(page.text.contains("mailto:help@acme.test"), "{}", page.text);
    // Under /api/ and for API clients: the JSON:API 404, whatever the customization.
    let api = platform.send(browser("/api/v2/nowhere")).await.expect(404);
    assert_eq!(api.error()["status"], "404");
    let client = platform.get("/app/acme/workspaces", ROOT).await.expect(404);
    assert_eq!(client.error()["status"], "404");
}
