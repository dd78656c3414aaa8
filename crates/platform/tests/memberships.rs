//! API tests of organization memberships: invite, list (q, filters, paging, status counts),
//! the caller's own, show with include, delete, and invitation acceptance.

mod support;

use http::Method;
use platform::{Config, Limits};
use serde_json::{Value, json};
use support::{ROOT, TestPlatform};

fn accept_body(attributes: Value) -> Value {
    json!({"data": {"type": "organization-memberships", "attributes": attributes}})
}

async fn accept(
    platform: &TestPlatform,
    id: &str,
    token: Option<&str>,
    attributes: Value,
) -> support::Answer {
    platform
        .call(
            Method::POST,
            &format!("/api/v2/organization-memberships/{id}/actions/accept"),
            token,
            Some(accept_body(attributes)),
        )
        .await
}

#[tokio::test]
async fn invite_returns_201_with_the_new_user_included() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let answer = platform
        .invite("acme", "new@example.com", &[&owners], ROOT)
        .await
        .expect(201);
    let data = &answer.body["data"];
    assert!(data["id"].as_str().unwrap().starts_with("ou-"));
    assert_eq!(data["type"], "organization-memberships");
    assert_eq!(data["attributes"]["status"], "invited");
    assert_eq!(
        data["relationships"]["teams"]["data"],
        json!([{"id": owners, "type": "teams"}])
    );
    assert_eq!(
        data["relationships"]["organization"]["data"],
        json!({"id": "acme", "type": "organizations"})
    );
    let user_id = data["relationships"]["user"]["data"]["id"]
        .as_str()
        .unwrap();
    assert!(user_id.starts_with("user-"));
    let user = &answer.body["included"][0];
    assert_eq!(user["id"], user_id);
    assert_eq!(user["type"], "users");
    assert_eq!(user["attributes"]["username"], json!(null));
    assert_eq!(user["attributes"]["email"], "new@example.com");
    assert_eq!(user["attributes"]["is-service-account"], false);
    assert!(
        user["attributes"]["avatar-url"]
            .as_str()
            .unwrap()
            .starts_with("https://")
    );
    assert_eq!(
        user["attributes"]["two-factor"],
        json!({"enabled": false, "verified": false})
    );
    for permission in [
        "can-create-organizations",
        "can-change-email",
        "can-change-username",
        "can-manage-user-tokens",
    ] {
        assert!(
            user["attributes"]["permissions"][permission].is_boolean(),
            "{permission}"
        );
    }
    assert_eq!(user["links"]["self"], format!("/api/v2/users/{user_id}"));
    assert_eq!(
        user["relationships"]["authentication-tokens"]["links"]["related"],
        format!("/api/v2/users/{user_id}/authentication-tokens")
    );
}

#[tokio::test]
async fn invite_of_an_existing_account_reuses_it() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let other_owners = platform.owners_team("other").await;
    let answer = platform
        .invite("other", "ALICE@example.com", &[&other_owners], ROOT)
        .await
        .expect(201);
    assert_eq!(answer.body["included"][0]["id"], alice.user_id.as_str());
    assert_eq!(
        answer.body["included"][0]["attributes"]["username"],
        "alice"
    );
}

#[tokio::test]
async fn invite_validation_failures_are_422_with_pointers_and_change_nothing() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let owners = platform.owners_team("acme").await;
    let foreign = platform.owners_team("other").await;
    let uri = "/api/v2/organizations/acme/organization-memberships";
    let team = json!({"data": [{"id": owners, "type": "teams"}]});
    let cases = [
        (
            json!({"type": "organization-memberships", "attributes": {}, "relationships": {"teams": team}}),
            "/data/attributes/email",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": "bad"}, "relationships": {"teams": team}}),
            "/data/attributes/email",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": 42}, "relationships": {"teams": team}}),
            "/data/attributes/email",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": "a@b.co"}}),
            "/data/relationships/teams",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": "a@b.co"}, "relationships": {"teams": {"data": []}}}),
            "/data/relationships/teams",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": "a@b.co"}, "relationships": {"teams": {"data": [{"id": foreign, "type": "teams"}]}}}),
            "/data/relationships/teams/data/0/id",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": "a@b.co"}, "relationships": {"teams": {"data": [{"id": owners, "type": "users"}]}}}),
            "/data/relationships/teams/data/0/type",
        ),
        (
            json!({"type": "organization-memberships", "attributes": {"email": "a@b.co"}, "relationships": {"teams": {"data": {"id": owners, "type": "teams"}}}}),
            "/data/relationships/teams/data",
        ),
        (
            json!({"type": "users", "attributes": {"email": "a@b.co"}, "relationships": {"teams": team}}),
            "/data/type",
        ),
    ];
    for (data, pointer) in cases {
        let answer = platform
            .post(uri, ROOT, json!({"data": data}))
            .await
            .expect(422);
        assert_eq!(answer.error()["status"], "422");
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{data}");
    }
    let list = platform.get(uri, ROOT).await.expect(200);
    assert_eq!(list.body["meta"]["status-counts"]["total"], 1);
}

#[tokio::test]
async fn invite_of_a_current_member_is_422() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    platform
        .invite("acme", "a@example.com", &[&owners], ROOT)
        .await
        .expect(201);
    let answer = platform
        .invite("acme", "a@example.com", &[&owners], ROOT)
        .await
        .expect(422);
    assert_eq!(
        answer.error()["source"]["pointer"],
        "/data/attributes/email"
    );
}

#[tokio::test]
async fn invite_over_the_organization_limit_is_400() {
    let platform = TestPlatform::with_config(Config {
        dev_root_token: Some(ROOT.to_owned()),
        limits: Limits {
            max_organization_members: 2,
        },
        ..Config::default()
    })
    .await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    platform
        .invite("acme", "one@example.com", &[&owners], ROOT)
        .await
        .expect(201);
    let answer = platform
        .invite("acme", "two@example.com", &[&owners], ROOT)
        .await
        .expect(400);
    assert_eq!(answer.error()["status"], "400");
    assert!(answer.error()["detail"].as_str().unwrap().contains("limit"));
}

#[tokio::test]
async fn invite_into_a_missing_or_foreign_organization_is_404() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    platform
        .invite("nowhere", "a@example.com", &[&devs], ROOT)
        .await
        .expect(404);
    // A plain member may not manage memberships.
    platform
        .invite("acme", "a@example.com", &[&devs], &bob.token)
        .await
        .expect(404);
}

#[tokio::test]
async fn manage_membership_permission_allows_invites() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let leads = platform
        .create_team("acme", "leads", json!({"manage-membership": true}))
        .await;
    let lead = platform.member("acme", "lead", &[&leads]).await;
    platform
        .invite("acme", "a@example.com", &[&leads], &lead.token)
        .await
        .expect(201);
}

#[tokio::test]
async fn accept_with_the_invitation_token_activates_and_sets_the_username() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let invited = platform
        .invite("acme", "new@example.com", &[&owners], ROOT)
        .await
        .expect(201);
    let id = invited.body["data"]["id"].as_str().unwrap();
    let invitation = invited.body["meta"]["invitation"]["token"]
        .as_str()
        .unwrap();
    assert_eq!(
        invited.body["meta"]["invitation"]["accept-path"],
        format!("/api/v2/organization-memberships/{id}/actions/accept")
    );

    let accepted = accept(
        &platform,
        id,
        None,
        json!({"invitation-token": invitation, "username": "newbie"}),
    )
    .await
    .expect(200);
    assert_eq!(accepted.body["data"]["attributes"]["status"], "active");
    assert_eq!(
        accepted.body["included"][0]["attributes"]["username"],
        "newbie"
    );
    let token = accepted.body["meta"]["authentication-token"]["token"]
        .as_str()
        .unwrap();
    let me = platform
        .get("/api/v2/account/details", token)
        .await
        .expect(200);
    assert_eq!(me.body["data"]["attributes"]["username"], "newbie");
    // Now a member, and an owner.
    platform
        .get("/api/v2/organizations/acme", token)
        .await
        .expect(200);
    // The invitation token is spent.
    accept(
        &platform,
        id,
        None,
        json!({"invitation-token": invitation, "username": "again"}),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn accept_by_the_invited_users_own_token() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let other_owners = platform.owners_team("other").await;
    let invited = platform
        .invite("other", "alice@example.com", &[&other_owners], ROOT)
        .await
        .expect(201);
    let id = invited.body["data"]["id"].as_str().unwrap();
    platform
        .get("/api/v2/organizations/other", &alice.token)
        .await
        .expect(404);
    let accepted = platform
        .call(
            Method::POST,
            &format!("/api/v2/organization-memberships/{id}/actions/accept"),
            Some(&alice.token),
            None,
        )
        .await
        .expect(200);
    assert_eq!(accepted.body["data"]["attributes"]["status"], "active");
    assert!(
        accepted.body["meta"].is_null(),
        "no new token for an existing account"
    );
    platform
        .get("/api/v2/organizations/other", &alice.token)
        .await
        .expect(200);
    accept(&platform, id, Some(&alice.token), json!({}))
        .await
        .expect(409);
}

#[tokio::test]
async fn accept_failures() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let invited = platform
        .invite("acme", "new@example.com", &[&owners], ROOT)
        .await
        .expect(201);
    let id = invited.body["data"]["id"].as_str().unwrap();
    let invitation = invited.body["meta"]["invitation"]["token"]
        .as_str()
        .unwrap();

    accept(&platform, id, None, json!({})).await.expect(401);
    accept(
        &platform,
        id,
        None,
        json!({"invitation-token": "wrong", "username": "x"}),
    )
    .await
    .expect(404);
    accept(&platform, id, Some(&alice.token), json!({"username": "x"}))
        .await
        .expect(404);
    accept(
        &platform,
        "ou-nope",
        None,
        json!({"invitation-token": invitation, "username": "x"}),
    )
    .await
    .expect(404);
    let blank = accept(&platform, id, None, json!({"invitation-token": invitation}))
        .await
        .expect(422);
    assert_eq!(
        blank.error()["source"]["pointer"],
        "/data/attributes/username"
    );
    let bad = accept(
        &platform,
        id,
        None,
        json!({"invitation-token": invitation, "username": "a b"}),
    )
    .await
    .expect(422);
    assert_eq!(
        bad.error()["source"]["pointer"],
        "/data/attributes/username"
    );
    let taken = accept(
        &platform,
        id,
        None,
        json!({"invitation-token": invitation, "username": "ALICE"}),
    )
    .await
    .expect(422);
    assert_eq!(
        taken.error()["source"]["pointer"],
        "/data/attributes/username"
    );
    let still = platform
        .get(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(still.body["data"]["attributes"]["status"], "invited");
    accept(
        &platform,
        id,
        None,
        json!({"invitation-token": invitation, "username": "fine"}),
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn invited_user_is_not_yet_a_member() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    let other_owners = platform.owners_team("other").await;
    let invited = platform
        .invite("other", "alice@example.com", &[&other_owners], ROOT)
        .await
        .expect(201);
    let id = invited.body["data"]["id"].as_str().unwrap();
    platform
        .get(
            "/api/v2/organizations/other/organization-memberships",
            &alice.token,
        )
        .await
        .expect(404);
    // But the invitation itself is hers to see.
    platform
        .get(
            &format!("/api/v2/organization-memberships/{id}"),
            &alice.token,
        )
        .await
        .expect(200);
}

async fn seeded() -> (TestPlatform, String) {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    platform.member("acme", "alice", &[&owners]).await;
    platform.member("acme", "bob", &[&devs]).await;
    platform
        .invite("acme", "carol@example.com", &[&devs], ROOT)
        .await
        .expect(201);
    platform
        .invite("acme", "dave@corp.example", &[&devs], ROOT)
        .await
        .expect(201);
    (platform, devs)
}

fn emails(answer: &support::Answer) -> Vec<String> {
    answer.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["attributes"]["email"].as_str().unwrap().to_owned())
        .collect()
}

const LIST: &str = "/api/v2/organizations/acme/organization-memberships";

#[tokio::test]
async fn list_memberships_pages_with_status_counts() {
    let (platform, _) = seeded().await;
    let answer = platform.get(LIST, ROOT).await.expect(200);
    assert_eq!(
        emails(&answer),
        [
            "admin@cairn.localhost",
            "alice@example.com",
            "bob@example.com",
            "carol@example.com",
            "dave@corp.example"
        ]
    );
    assert_eq!(
        answer.body["meta"]["status-counts"],
        json!({"total": 5, "active": 3, "invited": 2})
    );
    let page = platform
        .get(&format!("{LIST}?page%5Bsize%5D=2&page%5Bnumber%5D=3"), ROOT)
        .await
        .expect(200);
    assert_eq!(emails(&page), ["dave@corp.example"]);
    let pagination = &page.body["meta"]["pagination"];
    assert_eq!(
        (
            pagination["total-pages"].as_u64(),
            pagination["next-page"].clone()
        ),
        (Some(3), json!(null))
    );
    let beyond = platform
        .get(&format!("{LIST}?page%5Bnumber%5D=7"), ROOT)
        .await
        .expect(200);
    assert_eq!(beyond.body["data"], json!([]));
}

#[tokio::test]
async fn list_memberships_filters_by_status() {
    let (platform, _) = seeded().await;
    let invited = platform
        .get(&format!("{LIST}?filter%5Bstatus%5D=invited"), ROOT)
        .await
        .expect(200);
    assert_eq!(emails(&invited), ["carol@example.com", "dave@corp.example"]);
    assert_eq!(
        invited.body["meta"]["status-counts"],
        json!({"total": 5, "active": 3, "invited": 2})
    );
    assert_eq!(invited.body["meta"]["pagination"]["total-count"], 2);
    let active = platform
        .get(&format!("{LIST}?filter[status]=active"), ROOT)
        .await
        .expect(200);
    assert_eq!(active.body["meta"]["pagination"]["total-count"], 3);
    let bad = platform
        .get(&format!("{LIST}?filter%5Bstatus%5D=inactive"), ROOT)
        .await
        .expect(400);
    assert_eq!(bad.error()["source"]["parameter"], "filter[status]");
}

#[tokio::test]
async fn list_memberships_pages_each_status_in_creation_order_with_counts_kept() {
    let (platform, devs) = seeded().await;
    for name in ["erin", "frank", "grace"] {
        platform
            .invite("acme", &format!("{name}@example.com"), &[&devs], ROOT)
            .await
            .expect(201);
    }
    let pages = |status: &'static str, size: usize| {
        let platform = &platform;
        async move {
            let mut all = Vec::new();
            for number in 1..=4 {
                let page = platform
                    .get(
                        &format!(
                            "{LIST}?filter%5Bstatus%5D={status}&page%5Bsize%5D={size}&page%5Bnumber%5D={number}"
                        ),
                        ROOT,
                    )
                    .await
                    .expect(200);
                all.extend(emails(&page));
            }
            all
        }
    };
    assert_eq!(
        pages("invited", 2).await,
        [
            "carol@example.com",
            "dave@corp.example",
            "erin@example.com",
            "frank@example.com",
            "grace@example.com"
        ]
    );
    assert_eq!(
        pages("active", 2).await,
        [
            "admin@cairn.localhost",
            "alice@example.com",
            "bob@example.com"
        ]
    );
    // Removing an invitation and accepting another move the counts and the status lists.
    let frank = platform
        .get(&format!("{LIST}?q=frank"), ROOT)
        .await
        .expect(200);
    let frank_id = frank.body["data"][0]["id"].as_str().unwrap().to_owned();
    platform
        .delete(
            &format!("/api/v2/organization-memberships/{frank_id}"),
            ROOT,
        )
        .await
        .expect(204);
    let erin = platform.member("acme", "erin2", &[&devs]).await;
    let answer = platform.get(LIST, ROOT).await.expect(200);
    assert_eq!(
        answer.body["meta"]["status-counts"],
        json!({"total": 8, "active": 4, "invited": 4})
    );
    assert_eq!(answer.body["meta"]["pagination"]["total-count"], 8);
    let active = pages("active", 3).await;
    assert_eq!(active.len(), 4);
    assert_eq!(active.last().map(String::as_str), Some("erin2@example.com"));
    let own = platform
        .get(
            &format!("/api/v2/organization-memberships/{}", erin.membership_id),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(own.body["data"]["attributes"]["status"], "active");
}

#[tokio::test]
async fn team_changes_show_in_the_membership_list() {
    let (platform, devs) = seeded().await;
    let ops = platform.create_team("acme", "ops", json!({})).await;
    let teams_of = |answer: &support::Answer| -> Vec<String> {
        answer.body["data"][0]["relationships"]["teams"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|team| team["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let bob_list = format!("{LIST}?q=bob");
    let users = json!({"data": [{"type": "users", "id": "bob"}]});
    platform
        .post(
            &format!("/api/v2/teams/{ops}/relationships/users"),
            ROOT,
            users.clone(),
        )
        .await
        .expect(204);
    let mut both = vec![devs.clone(), ops.clone()];
    both.sort();
    assert_eq!(
        teams_of(&platform.get(&bob_list, ROOT).await.expect(200)),
        both
    );
    platform
        .delete(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(204);
    assert_eq!(
        teams_of(&platform.get(&bob_list, ROOT).await.expect(200)),
        [ops.as_str()]
    );
    platform
        .call(
            Method::DELETE,
            &format!("/api/v2/teams/{ops}/relationships/users"),
            Some(ROOT),
            Some(users),
        )
        .await
        .expect(204);
    assert!(teams_of(&platform.get(&bob_list, ROOT).await.expect(200)).is_empty());
}

#[tokio::test]
async fn list_memberships_filters_by_email_list() {
    let (platform, _) = seeded().await;
    let answer = platform
        .get(
            &format!("{LIST}?filter%5Bemail%5D=bob@example.com,DAVE@corp.example,nobody@x.io"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(emails(&answer), ["bob@example.com", "dave@corp.example"]);
    assert_eq!(
        answer.body["meta"]["status-counts"],
        json!({"total": 2, "active": 1, "invited": 1})
    );
}

#[tokio::test]
async fn list_memberships_searches_username_and_email_with_q() {
    let (platform, _) = seeded().await;
    let by_username = platform
        .get(&format!("{LIST}?q=ALI"), ROOT)
        .await
        .expect(200);
    assert_eq!(emails(&by_username), ["alice@example.com"]);
    let by_email = platform
        .get(&format!("{LIST}?q=corp"), ROOT)
        .await
        .expect(200);
    assert_eq!(emails(&by_email), ["dave@corp.example"]);
    assert_eq!(
        by_email.body["meta"]["status-counts"],
        json!({"total": 1, "active": 0, "invited": 1})
    );
}

#[tokio::test]
async fn list_memberships_includes_users_and_teams() {
    let (platform, devs) = seeded().await;
    let answer = platform
        .get(&format!("{LIST}?q=bob&include=user,teams"), ROOT)
        .await
        .expect(200);
    let included = answer.body["included"].as_array().unwrap();
    assert!(
        included
            .iter()
            .any(|r| r["type"] == "users" && r["attributes"]["username"] == "bob")
    );
    assert!(
        included
            .iter()
            .any(|r| r["type"] == "teams" && r["id"] == devs.as_str())
    );
    platform
        .get(&format!("{LIST}?include=secrets"), ROOT)
        .await
        .expect(400);
}

#[tokio::test]
async fn list_memberships_by_a_member_works_and_by_an_outsider_is_404() {
    let (platform, _) = seeded().await;
    platform.create_org("other").await;
    let other_owners = platform.owners_team("other").await;
    let outsider = platform.member("other", "eve", &[&other_owners]).await;
    platform.get(LIST, &outsider.token).await.expect(404);
    platform
        .get(
            "/api/v2/organizations/nowhere/organization-memberships",
            ROOT,
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn own_memberships_lists_every_organization_of_the_caller() {
    let (platform, _) = seeded().await;
    platform.create_org("other").await;
    let answer = platform
        .get("/api/v2/organization-memberships", ROOT)
        .await
        .expect(200);
    let organizations: Vec<&str> = answer.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["relationships"]["organization"]["data"]["id"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(organizations, ["acme", "other"]);
    assert!(answer.body.get("meta").is_none());
}

#[tokio::test]
async fn show_membership_with_include_user_and_teams() {
    let (platform, devs) = seeded().await;
    let list = platform
        .get(&format!("{LIST}?q=carol"), ROOT)
        .await
        .expect(200);
    let id = list.body["data"][0]["id"].as_str().unwrap();
    let plain = platform
        .get(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(plain.body["data"], list.body["data"][0]);
    assert!(plain.body.get("included").is_none());
    let full = platform
        .get(
            &format!("/api/v2/organization-memberships/{id}?include=user,teams"),
            ROOT,
        )
        .await
        .expect(200);
    let included = full.body["included"].as_array().unwrap();
    assert_eq!(included.len(), 2);
    assert_eq!(included[0]["attributes"]["username"], json!(null));
    assert_eq!(included[1]["id"], devs.as_str());
    platform
        .get("/api/v2/organization-memberships/ou-nope", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn delete_membership_removes_the_user_from_the_organization_and_its_teams() {
    let (platform, devs) = seeded().await;
    let list = platform
        .get(&format!("{LIST}?q=bob"), ROOT)
        .await
        .expect(200);
    let id = list.body["data"][0]["id"].as_str().unwrap();
    platform
        .delete(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(404);
    let team = platform
        .get(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(200);
    assert_eq!(team.body["data"]["attributes"]["users-count"], 2); // carol and dave, invited
    let counts = platform.get(LIST, ROOT).await.expect(200);
    assert_eq!(counts.body["meta"]["status-counts"]["total"], 4);
    platform
        .delete(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn delete_of_an_invitation_removes_a_user_who_never_accepted() {
    let (platform, devs) = seeded().await;
    let list = platform
        .get(&format!("{LIST}?q=carol"), ROOT)
        .await
        .expect(200);
    let id = list.body["data"][0]["id"].as_str().unwrap();
    let user_id = list.body["data"][0]["relationships"]["user"]["data"]["id"]
        .as_str()
        .unwrap();
    platform
        .delete(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("/api/v2/users/{user_id}"), ROOT)
        .await
        .expect(404);
    // The email can be invited afresh.
    platform
        .invite("acme", "carol@example.com", &[&devs], ROOT)
        .await
        .expect(201);
}

#[tokio::test]
async fn removing_oneself_from_an_owned_organization_is_403() {
    let (platform, _) = seeded().await;
    let list = platform
        .get(&format!("{LIST}?q=alice"), ROOT)
        .await
        .expect(200);
    let id = list.body["data"][0]["id"].as_str().unwrap();
    let alice_token = {
        // Alice's first token came with her acceptance; make another through the admin.
        let user_id = list.body["data"][0]["relationships"]["user"]["data"]["id"]
            .as_str()
            .unwrap();
        let created = platform
            .post(
                &format!("/api/v2/users/{user_id}/authentication-tokens"),
                ROOT,
                json!({}),
            )
            .await
            .expect(201);
        created.body["data"]["attributes"]["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let answer = platform
        .delete(
            &format!("/api/v2/organization-memberships/{id}"),
            &alice_token,
        )
        .await
        .expect(403);
    assert_eq!(answer.error()["status"], "403");
    platform
        .get(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(200);
}

#[tokio::test]
async fn a_member_may_leave_an_organization_they_do_not_own() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    platform
        .delete(
            &format!("/api/v2/organization-memberships/{}", bob.membership_id),
            &bob.token,
        )
        .await
        .expect(204);
    platform
        .get("/api/v2/organizations/acme", &bob.token)
        .await
        .expect(404);
}

#[tokio::test]
async fn a_plain_member_cannot_remove_others() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let carol = platform.member("acme", "carol", &[&devs]).await;
    platform
        .delete(
            &format!("/api/v2/organization-memberships/{}", carol.membership_id),
            &bob.token,
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn removing_the_last_owner_is_403() {
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
    let own = platform
        .get("/api/v2/organization-memberships", ROOT)
        .await
        .expect(200);
    let id = own.body["data"][0]["id"].as_str().unwrap();
    platform
        .delete(&format!("/api/v2/organization-memberships/{id}"), secret)
        .await
        .expect(403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_invitations_into_one_organization_all_succeed() {
    // Every invitation changes the organization's member counts; many at once must queue
    // behind each other, not answer 409 (TFE's clients do not retry a conflict). On the
    // embedded store, whose durable commits hold each round of contenders for a while.
    let store = testkit::TempStore::new();
    let blobs = tempfile::tempdir().unwrap();
    let mut config = TestPlatform::test_config();
    config.blob_dir = blobs.path().to_path_buf();
    let platform = TestPlatform::over(
        store.storage(),
        config,
        std::sync::Arc::new(stdx::clock::SystemClock),
    )
    .await
    .unwrap();
    let platform = std::sync::Arc::new(platform);
    platform.create_org("busy").await;
    let owners = platform.owners_team("busy").await;
    let invites: Vec<_> = (0..160)
        .map(|i| {
            let platform = platform.clone();
            let owners = owners.clone();
            tokio::spawn(async move {
                platform
                    .invite("busy", &format!("user{i}@example.com"), &[&owners], ROOT)
                    .await
            })
        })
        .collect();
    for invite in invites {
        let answer = invite.await.unwrap();
        assert_eq!(answer.status.as_u16(), 201, "{}", answer.text);
    }
    let page = platform
        .get(
            "/api/v2/organizations/busy/organization-memberships?page%5Bsize%5D=100",
            ROOT,
        )
        .await
        .expect(200);
    // The 160 invitations and the owner who created the organization.
    assert_eq!(
        page.body["meta"]["pagination"]["total-count"], 161,
        "{}",
        page.text
    );
}

#[tokio::test]
async fn the_plain_page_shows_every_change_made_after_it_was_read() {
    let (platform, devs) = seeded().await;
    let ops = platform.create_team("acme", "ops", json!({})).await;
    // Read twice between changes: the second read may be answered from the page cache, and
    // must still be the first's answer; the read after a change must show it.
    let page = || async {
        let first = platform.get(LIST, ROOT).await.expect(200);
        let again = platform.get(LIST, ROOT).await.expect(200);
        assert_eq!(first.bytes, again.bytes);
        first.body
    };
    let teams_of = |body: &Value, email: &str| -> Vec<String> {
        let member = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["attributes"]["email"] == email)
            .unwrap_or_else(|| panic!("{email} not listed"));
        member["relationships"]["teams"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|team| team["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let counts = |body: &Value| body["meta"]["status-counts"].clone();
    let before = page().await;
    assert_eq!(teams_of(&before, "bob@example.com"), [devs.as_str()]);
    assert_eq!(
        counts(&before),
        json!({"total": 5, "active": 3, "invited": 2})
    );

    // A team joined and left, and a team deleted, show in the members' relationships.
    let users = json!({"data": [{"type": "users", "id": "bob"}]});
    platform
        .post(
            &format!("/api/v2/teams/{ops}/relationships/users"),
            ROOT,
            users.clone(),
        )
        .await
        .expect(204);
    let mut both = vec![devs.clone(), ops.clone()];
    both.sort();
    assert_eq!(teams_of(&page().await, "bob@example.com"), both);
    platform
        .delete(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(204);
    let after_delete = page().await;
    assert_eq!(teams_of(&after_delete, "bob@example.com"), [ops.as_str()]);
    assert!(teams_of(&after_delete, "carol@example.com").is_empty());
    platform
        .call(
            Method::DELETE,
            &format!("/api/v2/teams/{ops}/relationships/users"),
            Some(ROOT),
            Some(users),
        )
        .await
        .expect(204);
    assert!(teams_of(&page().await, "bob@example.com").is_empty());

    // An invitation, its acceptance and a removal show in the list and its counts.
    let invited = platform
        .invite("acme", "eve@example.com", &[&ops], ROOT)
        .await
        .expect(201);
    let listed = page().await;
    assert_eq!(
        counts(&listed),
        json!({"total": 6, "active": 3, "invited": 3})
    );
    assert_eq!(teams_of(&listed, "eve@example.com"), [ops.as_str()]);
    let id = invited.body["data"]["id"].as_str().unwrap();
    let token = invited.body["meta"]["invitation"]["token"]
        .as_str()
        .unwrap();
    accept(
        &platform,
        id,
        None,
        json!({"invitation-token": token, "username": "eve"}),
    )
    .await
    .expect(200);
    assert_eq!(
        counts(&page().await),
        json!({"total": 6, "active": 4, "invited": 2})
    );
    platform
        .delete(&format!("/api/v2/organization-memberships/{id}"), ROOT)
        .await
        .expect(204);
    let last = page().await;
    assert_eq!(
        counts(&last),
        json!({"total": 5, "active": 3, "invited": 2})
    );
    assert!(
        !last["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["attributes"]["email"] == "eve@example.com")
    );
}
