//! API tests of tokens: user tokens, team tokens and organization tokens, and what each kind
//! of token may do.

mod support;

use serde_json::json;
use support::{ROOT, TestPlatform};
use testkit::{Clock, ManualClock};

async fn admin_id(platform: &TestPlatform) -> String {
    let me = platform
        .get("/api/v2/account/details", ROOT)
        .await
        .expect(200);
    me.body["data"]["id"].as_str().unwrap().to_owned()
}

fn secret_of(answer: &support::Answer) -> String {
    answer.body["data"]["attributes"]["token"]
        .as_str()
        .expect("secret")
        .to_owned()
}

#[tokio::test]
async fn user_token_is_shown_once_and_works() {
    let platform = TestPlatform::new().await;
    let id = admin_id(&platform).await;
    let body =
        json!({"data": {"type": "authentication-tokens", "attributes": {"description": "ci"}}});
    let created = platform
        .post(
            &format!("/api/v2/users/{id}/authentication-tokens"),
            ROOT,
            body,
        )
        .await
        .expect(201);
    let token_id = created.body["data"]["id"].as_str().unwrap().to_owned();
    assert!(token_id.starts_with("at-"));
    assert_eq!(created.body["data"]["attributes"]["description"], "ci");
    assert_eq!(
        created.body["data"]["relationships"]["created-by"]["data"]["id"],
        id.as_str()
    );
    let secret = secret_of(&created);
    assert!(secret.contains(".atlasv1."));

    let me = platform
        .get("/api/v2/account/details", &secret)
        .await
        .expect(200);
    assert_eq!(me.body["data"]["id"], id.as_str());
    let read = platform
        .get(&format!("/api/v2/authentication-tokens/{token_id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(read.body["data"]["attributes"]["token"], json!(null));
    let list = platform
        .get(&format!("/api/v2/users/{id}/authentication-tokens"), ROOT)
        .await
        .expect(200);
    assert_eq!(list.body["meta"]["pagination"]["total-count"], 2); // the root token and this one
    assert!(
        list.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["attributes"]["token"].is_null())
    );
}

#[tokio::test]
async fn deleted_user_token_stops_working() {
    let platform = TestPlatform::new().await;
    let id = admin_id(&platform).await;
    let created = platform
        .post(
            &format!("/api/v2/users/{id}/authentication-tokens"),
            ROOT,
            json!({}),
        )
        .await
        .expect(201);
    let token_id = created.body["data"]["id"].as_str().unwrap();
    let secret = secret_of(&created);
    platform
        .delete(&format!("/api/v2/authentication-tokens/{token_id}"), ROOT)
        .await
        .expect(204);
    platform
        .get("/api/v2/account/details", &secret)
        .await
        .expect(401);
    platform
        .get(&format!("/api/v2/authentication-tokens/{token_id}"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn user_token_with_past_or_bad_expiry_is_422() {
    let platform = TestPlatform::new().await;
    let id = admin_id(&platform).await;
    for expired in ["2001-01-01T00:00:00Z", "next week", "7"] {
        let body = json!({"data": {"type": "authentication-tokens", "attributes": {"expired-at": expired}}});
        let answer = platform
            .post(
                &format!("/api/v2/users/{id}/authentication-tokens"),
                ROOT,
                body,
            )
            .await
            .expect(422);
        assert_eq!(
            answer.error()["source"]["pointer"],
            "/data/attributes/expired-at"
        );
    }
    let body = json!({"data": {"type": "authentication-tokens", "attributes": {"expired-at": "2999-01-01T00:00:00.000Z"}}});
    let answer = platform
        .post(
            &format!("/api/v2/users/{id}/authentication-tokens"),
            ROOT,
            body,
        )
        .await
        .expect(201);
    assert_eq!(
        answer.body["data"]["attributes"]["expired-at"],
        "2999-01-01T00:00:00.000Z"
    );
}

#[tokio::test]
async fn users_cannot_see_or_make_each_others_tokens() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let admin = admin_id(&platform).await;
    platform
        .get(
            &format!("/api/v2/users/{admin}/authentication-tokens"),
            &alice.token,
        )
        .await
        .expect(404);
    platform
        .post(
            &format!("/api/v2/users/{admin}/authentication-tokens"),
            &alice.token,
            json!({}),
        )
        .await
        .expect(404);
    let list = platform
        .get(
            &format!("/api/v2/users/{}/authentication-tokens", alice.user_id),
            &alice.token,
        )
        .await
        .expect(200);
    let token_id = list.body["data"][0]["id"].as_str().unwrap();
    // The site administrator may.
    platform
        .get(&format!("/api/v2/authentication-tokens/{token_id}"), ROOT)
        .await
        .expect(200);
}

#[tokio::test]
async fn team_token_acts_as_its_team_and_is_replaced_on_regenerate() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let devs = platform
        .create_team("acme", "devs", json!({"manage-workspaces": true}))
        .await;
    let uri = format!("/api/v2/teams/{devs}/authentication-token");
    let first = platform
        .post(
            &uri,
            ROOT,
            json!({"data": {"type": "authentication-token"}}),
        )
        .await
        .expect(201);
    let first_secret = secret_of(&first);
    platform
        .get("/api/v2/organizations/acme", &first_secret)
        .await
        .expect(200);
    platform
        .get("/api/v2/organizations/other", &first_secret)
        .await
        .expect(404);
    platform
        .get("/api/v2/account/details", &first_secret)
        .await
        .expect(404);

    let second = platform.post(&uri, ROOT, json!({})).await.expect(201);
    let second_secret = secret_of(&second);
    platform
        .get("/api/v2/organizations/acme", &first_secret)
        .await
        .expect(401);
    platform
        .get("/api/v2/organizations/acme", &second_secret)
        .await
        .expect(200);
    let read = platform.get(&uri, ROOT).await.expect(200);
    assert_eq!(read.body["data"]["id"], second.body["data"]["id"]);

    platform.delete(&uri, ROOT).await.expect(204);
    platform
        .get("/api/v2/organizations/acme", &second_secret)
        .await
        .expect(401);
    platform.get(&uri, ROOT).await.expect(404);
}

#[tokio::test]
async fn owners_team_token_manages_memberships_and_plain_team_token_does_not() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let owners_token = platform
        .post(
            &format!("/api/v2/teams/{owners}/authentication-token"),
            ROOT,
            json!({}),
        )
        .await
        .expect(201);
    let devs_token = platform
        .post(
            &format!("/api/v2/teams/{devs}/authentication-token"),
            ROOT,
            json!({}),
        )
        .await
        .expect(201);
    platform
        .invite("acme", "x@example.com", &[&devs], &secret_of(&owners_token))
        .await
        .expect(201);
    platform
        .invite("acme", "y@example.com", &[&devs], &secret_of(&devs_token))
        .await
        .expect(404);
}

#[tokio::test]
async fn organization_token_is_owners_only_and_manages_membership() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform
        .create_team("acme", "devs", json!({"manage-membership": true}))
        .await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let uri = "/api/v2/organizations/acme/authentication-token";
    platform.post(uri, &bob.token, json!({})).await.expect(404);

    let created = platform.post(uri, ROOT, json!({})).await.expect(201);
    let secret = secret_of(&created);
    platform
        .invite("acme", "x@example.com", &[&devs], &secret)
        .await
        .expect(201);
    let body = json!({"data": {"type": "teams", "attributes": {"name": "by-org-token"}}});
    platform
        .post("/api/v2/organizations/acme/teams", &secret, body)
        .await
        .expect(201);
    // It cannot issue organization tokens itself.
    platform.post(uri, &secret, json!({})).await.expect(404);
    platform.get(uri, &secret).await.expect(200);

    let regenerated = platform.post(uri, ROOT, json!({})).await.expect(201);
    platform
        .get("/api/v2/organizations/acme", &secret)
        .await
        .expect(401);
    platform.delete(uri, ROOT).await.expect(204);
    platform
        .get("/api/v2/organizations/acme", &secret_of(&regenerated))
        .await
        .expect(401);
    platform.delete(uri, ROOT).await.expect(404);
}

#[tokio::test]
async fn team_token_management_by_members_follows_allow_member_token_management() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let uri = format!("/api/v2/teams/{devs}/authentication-token");
    platform.post(&uri, &bob.token, json!({})).await.expect(201);
    let body =
        json!({"data": {"type": "teams", "attributes": {"allow-member-token-management": false}}});
    platform
        .patch(&format!("/api/v2/teams/{devs}"), ROOT, body)
        .await
        .expect(200);
    platform.post(&uri, &bob.token, json!({})).await.expect(404);
}

#[tokio::test]
async fn expired_user_token_is_401() {
    let clock = ManualClock::at_system_time();
    let platform = TestPlatform::with_clock(&clock).await;
    let id = admin_id(&platform).await;
    // Expires one to two seconds from now (whole seconds); the clock then moves past it.
    let expires = clock.now_ms().div_euclid(1000) + 2;
    let at = stdx::time::format_rfc3339_secs(expires);
    let body = json!({"data": {"type": "authentication-tokens", "attributes": {"expired-at": at}}});
    let created = platform
        .post(
            &format!("/api/v2/users/{id}/authentication-tokens"),
            ROOT,
            body,
        )
        .await
        .expect(201);
    let secret = secret_of(&created);
    platform
        .get("/api/v2/account/details", &secret)
        .await
        .expect(200);
    clock.advance(std::time::Duration::from_secs(3));
    platform
        .get("/api/v2/account/details", &secret)
        .await
        .expect(401);
}
