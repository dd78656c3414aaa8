//! API tests of users, the site administrator, and organizations: `/api/v2/account/details`,
//! `/api/v2/users/:id`, `/api/v2/organizations[/:name]` and the entitlement set.

mod support;

use std::sync::Arc;

use platform::{ADMIN_USERNAME, Config, State};
use serde_json::json;
use storage::Storage;
use support::{ROOT, TestPlatform};

#[tokio::test]
async fn dev_root_token_is_the_site_administrators_user_token() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .get("/api/v2/account/details", ROOT)
        .await
        .expect(200);
    let user = &answer.body["data"];
    assert_eq!(user["type"], "users");
    assert!(user["id"].as_str().unwrap().starts_with("user-"));
    assert_eq!(user["attributes"]["username"], ADMIN_USERNAME);
    assert_eq!(user["attributes"]["is-admin"], true);
    assert_eq!(
        user["attributes"]["two-factor"],
        json!({"enabled": false, "verified": false})
    );
    assert_eq!(
        user["relationships"]["authentication-tokens"]["links"]["related"],
        format!(
            "/api/v2/users/{}/authentication-tokens",
            user["id"].as_str().unwrap()
        )
    );
}

#[tokio::test]
async fn server_first_start_issues_a_bootstrap_token_once() {
    let storage: Arc<dyn Storage> = testkit::mem_storage();
    let first = State::open(Arc::clone(&storage), Config::default())
        .await
        .unwrap();
    let token = first
        .bootstrap_token
        .clone()
        .expect("first start issues a token");
    assert!(token.contains(".atlasv1."));
    let second = State::open(Arc::clone(&storage), Config::default())
        .await
        .unwrap();
    assert_eq!(second.bootstrap_token, None);

    let router = platform::router(second.state);
    let request = http::Request::get("/api/v2/account/details")
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let response = testkit::call(&router, request).await;
    assert_eq!(response.status, 200);
}

#[tokio::test]
async fn dev_start_over_a_kept_store_accepts_a_new_root_token() {
    let storage: Arc<dyn Storage> = testkit::mem_storage();
    for root in ["first-root", "second-root"] {
        let config = Config {
            dev_root_token: Some(root.to_owned()),
            ..Config::default()
        };
        let opened = State::open(Arc::clone(&storage), config).await.unwrap();
        assert_eq!(opened.bootstrap_token, None);
    }
    let opened = State::open(Arc::clone(&storage), Config::default())
        .await
        .unwrap();
    let router = platform::router(opened.state);
    for root in ["first-root", "second-root"] {
        let request = http::Request::get("/api/v2/account/details")
            .header("authorization", format!("Bearer {root}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let response = testkit::call(&router, request).await;
        assert_eq!(response.status, 200, "{root}");
    }
}

#[tokio::test]
async fn read_user_by_id_returns_the_same_representation() {
    let platform = TestPlatform::new().await;
    let me = platform
        .get("/api/v2/account/details", ROOT)
        .await
        .expect(200);
    let id = me.body["data"]["id"].as_str().unwrap();
    let user = platform
        .get(&format!("/api/v2/users/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(user.body, me.body);
    platform
        .get("/api/v2/users/user-nope", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn create_organization_returns_201_with_the_organization() {
    let platform = TestPlatform::new().await;
    let body = platform.create_org("acme").await;
    let data = &body["data"];
    assert_eq!(data["id"], "acme");
    assert_eq!(data["type"], "organizations");
    assert_eq!(data["attributes"]["name"], "acme");
    assert_eq!(data["attributes"]["email"], "ops@acme.example.com");
    assert!(
        data["attributes"]["external-id"]
            .as_str()
            .unwrap()
            .starts_with("org-")
    );
    assert_eq!(data["attributes"]["permissions"]["can-destroy"], true);
    assert_eq!(data["links"]["self"], "/api/v2/organizations/acme");
}

#[tokio::test]
async fn create_organization_makes_the_creator_an_owner() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let team = platform
        .get(&format!("/api/v2/teams/{owners}?include=users"), ROOT)
        .await
        .expect(200);
    assert_eq!(team.body["data"]["attributes"]["name"], "owners");
    assert_eq!(team.body["data"]["attributes"]["users-count"], 1);
    assert_eq!(
        team.body["included"][0]["attributes"]["username"],
        ADMIN_USERNAME
    );
    assert_eq!(
        team.body["data"]["attributes"]["organization-access"]["manage-membership"],
        true
    );
    let own = platform
        .get("/api/v2/organization-memberships", ROOT)
        .await
        .expect(200);
    assert_eq!(own.body["data"][0]["attributes"]["status"], "active");
    assert_eq!(
        own.body["data"][0]["relationships"]["teams"]["data"][0]["id"],
        owners.as_str()
    );
}

#[tokio::test]
async fn create_organization_with_a_taken_name_is_422() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let body = json!({"data": {"type": "organizations", "attributes": {"name": "acme", "email": "x@y.co"}}});
    let answer = platform
        .post("/api/v2/organizations", ROOT, body)
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data/attributes/name");
}

#[tokio::test]
async fn create_organization_with_a_bad_name_or_email_is_422() {
    let platform = TestPlatform::new().await;
    let cases = [
        (
            json!({"name": "a b", "email": "x@y.co"}),
            "/data/attributes/name",
        ),
        (json!({"email": "x@y.co"}), "/data/attributes/name"),
        (
            json!({"name": "ok", "email": "not-an-email"}),
            "/data/attributes/email",
        ),
        (json!({"name": "ok"}), "/data/attributes/email"),
        (
            json!({"name": "ok", "email": "x@y.co", "default-execution-mode": "sometimes"}),
            "/data/attributes/default-execution-mode",
        ),
        (
            json!({"name": "ok", "email": "x@y.co", "cost-estimation-enabled": "yes"}),
            "/data/attributes/cost-estimation-enabled",
        ),
    ];
    for (attributes, pointer) in cases {
        let body = json!({"data": {"type": "organizations", "attributes": attributes}});
        let answer = platform
            .post("/api/v2/organizations", ROOT, body)
            .await
            .expect(422);
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{attributes}");
    }
    platform
        .get("/api/v2/organizations/ok", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn non_admin_cannot_create_organizations() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let body = json!({"data": {"type": "organizations", "attributes": {"name": "mine", "email": "a@b.co"}}});
    platform
        .post("/api/v2/organizations", &alice.token, body)
        .await
        .expect(404);
}

#[tokio::test]
async fn list_organizations_shows_only_the_callers() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let mine = platform
        .get("/api/v2/organizations", &alice.token)
        .await
        .expect(200);
    let names: Vec<&str> = mine.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["acme"]);
    let all = platform
        .get("/api/v2/organizations", ROOT)
        .await
        .expect(200);
    assert_eq!(all.body["meta"]["pagination"]["total-count"], 2);
}

#[tokio::test]
async fn read_organization_of_another_is_404() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    platform
        .get("/api/v2/organizations/other", &alice.token)
        .await
        .expect(404);
    platform
        .get("/api/v2/organizations/acme", &alice.token)
        .await
        .expect(200);
}

#[tokio::test]
async fn update_organization_changes_given_attributes_only() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let body = json!({"data": {"type": "organizations", "attributes": {"email": "new@acme.co", "session-timeout": 60}}});
    let answer = platform
        .patch("/api/v2/organizations/acme", ROOT, body)
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["attributes"]["email"], "new@acme.co");
    assert_eq!(answer.body["data"]["attributes"]["session-timeout"], 60);
    assert_eq!(
        answer.body["data"]["attributes"]["collaborator-auth-policy"],
        "password"
    );
    let read = platform
        .get("/api/v2/organizations/acme", ROOT)
        .await
        .expect(200);
    assert_eq!(read.body, answer.body);
}

#[tokio::test]
async fn update_organization_rename_is_422() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let body = json!({"data": {"type": "organizations", "attributes": {"name": "acme2"}}});
    platform
        .patch("/api/v2/organizations/acme", ROOT, body)
        .await
        .expect(422);
}

#[tokio::test]
async fn update_organization_by_a_plain_member_is_404() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let body = json!({"data": {"type": "organizations", "attributes": {"email": "bob@acme.co"}}});
    platform
        .patch("/api/v2/organizations/acme", &bob.token, body)
        .await
        .expect(404);
}

#[tokio::test]
async fn delete_organization_removes_it_with_its_teams_memberships_and_tokens() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let org_token = platform
        .post(
            "/api/v2/organizations/acme/authentication-token",
            ROOT,
            json!({}),
        )
        .await
        .expect(201);
    let org_secret = org_token.body["data"]["attributes"]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    platform
        .delete("/api/v2/organizations/acme", ROOT)
        .await
        .expect(204);
    platform
        .get("/api/v2/organizations/acme", ROOT)
        .await
        .expect(404);
    platform
        .get(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(404);
    platform
        .get(
            &format!("/api/v2/organization-memberships/{}", bob.membership_id),
            ROOT,
        )
        .await
        .expect(404);
    platform
        .get("/api/v2/account/details", &org_secret)
        .await
        .expect(401);
    // Bob's account survives (he accepted), without memberships.
    let own = platform
        .get("/api/v2/organization-memberships", &bob.token)
        .await
        .expect(200);
    assert_eq!(own.body["data"], json!([]));
    // The name is free again.
    platform.create_org("acme").await;
}

#[tokio::test]
async fn delete_organization_by_the_organization_token_is_404() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let token = platform
        .post(
            "/api/v2/organizations/acme/authentication-token",
            ROOT,
            json!({}),
        )
        .await
        .expect(201);
    let secret = token.body["data"]["attributes"]["token"].as_str().unwrap();
    platform
        .delete("/api/v2/organizations/acme", secret)
        .await
        .expect(404);
    platform
        .get("/api/v2/organizations/acme", ROOT)
        .await
        .expect(200);
}

#[tokio::test]
async fn entitlement_set_is_readable_by_members() {
    let platform = TestPlatform::new().await;
    let created = platform.create_org("acme").await;
    let answer = platform
        .get("/api/v2/organizations/acme/entitlement-set", ROOT)
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["type"], "entitlement-sets");
    assert_eq!(
        answer.body["data"]["id"],
        created["data"]["attributes"]["external-id"]
    );
    assert_eq!(answer.body["data"]["attributes"]["operations"], true);
}

#[tokio::test]
async fn update_account_changes_username_and_email_everywhere() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let body = json!({"data": {"type": "users", "attributes": {"username": "alice2", "email": "alice2@example.com"}}});
    let answer = platform
        .patch("/api/v2/account/update", &alice.token, body)
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["attributes"]["username"], "alice2");
    assert_eq!(
        answer.body["data"]["attributes"]["email"],
        "alice2@example.com"
    );
    let found = platform
        .get(
            "/api/v2/organizations/acme/organization-memberships?q=alice2",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(
        found.body["data"][0]["attributes"]["email"],
        "alice2@example.com"
    );
    // The old email is free, the new one taken.
    platform
        .invite("acme", "alice@example.com", &[&owners], ROOT)
        .await
        .expect(201);
    platform
        .invite("acme", "alice2@example.com", &[&owners], ROOT)
        .await
        .expect(422);
}

#[tokio::test]
async fn update_account_with_a_taken_or_bad_username_is_422() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    for (attributes, pointer) in [
        (json!({"username": "ADMIN"}), "/data/attributes/username"),
        (json!({"username": "a b"}), "/data/attributes/username"),
        (
            json!({"email": "admin@cairn.localhost"}),
            "/data/attributes/email",
        ),
        (json!({"email": "nope"}), "/data/attributes/email"),
    ] {
        let body = json!({"data": {"type": "users", "attributes": attributes}});
        let answer = platform
            .patch("/api/v2/account/update", &alice.token, body)
            .await
            .expect(422);
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{attributes}");
    }
    let me = platform
        .get("/api/v2/account/details", &alice.token)
        .await
        .expect(200);
    assert_eq!(me.body["data"]["attributes"]["username"], "alice");
}
