//! API tests of teams: `/api/v2/organizations/:name/teams`, `/api/v2/teams/:id`, and team
//! membership through `relationships/users` and `relationships/organization-memberships`.

mod support;

use http::Method;
use serde_json::json;
use support::{ROOT, TestPlatform};

fn users(names: &[&str]) -> serde_json::Value {
    json!({"data": names.iter().map(|n| json!({"type": "users", "id": n})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn create_team_returns_201_with_defaults() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let body = json!({"data": {"type": "teams", "attributes": {"name": "devs"}}});
    let answer = platform
        .post("/api/v2/organizations/acme/teams", ROOT, body)
        .await
        .expect(201);
    let team = &answer.body["data"];
    assert!(team["id"].as_str().unwrap().starts_with("team-"));
    assert_eq!(team["attributes"]["visibility"], "secret");
    assert_eq!(team["attributes"]["users-count"], 0);
    assert_eq!(
        team["attributes"]["organization-access"]["manage-workspaces"],
        false
    );
    assert_eq!(
        team["relationships"]["organization"]["data"],
        json!({"id": "acme", "type": "organizations"})
    );
    assert_eq!(team["relationships"]["users"]["data"], json!([]));
    let read = platform
        .get(
            &format!("/api/v2/teams/{}", team["id"].as_str().unwrap()),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(read.body, answer.body);
}

#[tokio::test]
async fn create_team_reads_organization_access() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let id = platform
        .create_team(
            "acme",
            "ops",
            json!({"manage-workspaces": true, "manage_vcs_settings": true, "unknown": true}),
        )
        .await;
    let team = platform
        .get(&format!("/api/v2/teams/{id}"), ROOT)
        .await
        .expect(200);
    let access = &team.body["data"]["attributes"]["organization-access"];
    assert_eq!(access["manage-workspaces"], true);
    assert_eq!(access["manage-vcs-settings"], true);
    assert_eq!(access["manage-membership"], false);
}

#[tokio::test]
async fn create_team_with_bad_input_is_422_and_creates_nothing() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let cases = [
        (json!({}), "/data/attributes/name"),
        (json!({"name": "has space"}), "/data/attributes/name"),
        (json!({"name": "owners"}), "/data/attributes/name"),
        (
            json!({"name": "x", "visibility": "public"}),
            "/data/attributes/visibility",
        ),
        (
            json!({"name": "x", "organization-access": {"manage-workspaces": "yes"}}),
            "/data/attributes/organization-access/manage-workspaces",
        ),
    ];
    for (attributes, pointer) in cases {
        let body = json!({"data": {"type": "teams", "attributes": attributes}});
        let answer = platform
            .post("/api/v2/organizations/acme/teams", ROOT, body)
            .await
            .expect(422);
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{attributes}");
    }
    let list = platform
        .get("/api/v2/organizations/acme/teams", ROOT)
        .await
        .expect(200);
    assert_eq!(list.body["meta"]["pagination"]["total-count"], 1);
}

#[tokio::test]
async fn list_teams_filters_by_names_and_query() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    for name in ["devs", "ops", "dev-leads"] {
        platform.create_team("acme", name, json!({})).await;
    }
    let names = |answer: &support::Answer| -> Vec<String> {
        answer.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["attributes"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = platform
        .get("/api/v2/organizations/acme/teams", ROOT)
        .await
        .expect(200);
    assert_eq!(names(&all), ["dev-leads", "devs", "ops", "owners"]);
    let some = platform
        .get(
            "/api/v2/organizations/acme/teams?filter%5Bnames%5D=ops,devs",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(names(&some), ["devs", "ops"]);
    let searched = platform
        .get("/api/v2/organizations/acme/teams?q=dev", ROOT)
        .await
        .expect(200);
    assert_eq!(names(&searched), ["dev-leads", "devs"]);
    let paged = platform
        .get(
            "/api/v2/organizations/acme/teams?page%5Bsize%5D=3&page%5Bnumber%5D=2",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(names(&paged), ["owners"]);
}

#[tokio::test]
async fn secret_team_is_hidden_from_other_members() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let body = json!({"data": {"type": "teams", "attributes": {"name": "hidden"}}});
    let hidden = platform
        .post("/api/v2/organizations/acme/teams", ROOT, body)
        .await
        .expect(201);
    let hidden = hidden.body["data"]["id"].as_str().unwrap().to_owned();
    let bob = platform.member("acme", "bob", &[&devs]).await;
    platform
        .get(&format!("/api/v2/teams/{hidden}"), &bob.token)
        .await
        .expect(404);
    platform
        .get(&format!("/api/v2/teams/{devs}"), &bob.token)
        .await
        .expect(200);
    let list = platform
        .get("/api/v2/organizations/acme/teams", &bob.token)
        .await
        .expect(200);
    assert!(
        list.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["id"] != hidden.as_str())
    );
}

#[tokio::test]
async fn update_team_changes_given_attributes() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let body = json!({"data": {"type": "teams", "attributes": {"name": "developers", "organization-access": {"manage-membership": true}}}});
    let answer = platform
        .patch(&format!("/api/v2/teams/{devs}"), ROOT, body)
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["attributes"]["name"], "developers");
    assert_eq!(
        answer.body["data"]["attributes"]["visibility"],
        "organization"
    );
    assert_eq!(
        answer.body["data"]["attributes"]["organization-access"]["manage-membership"],
        true
    );
    // The old name is free, the new one taken.
    platform.create_team("acme", "devs", json!({})).await;
    let body = json!({"data": {"type": "teams", "attributes": {"name": "developers"}}});
    platform
        .post("/api/v2/organizations/acme/teams", ROOT, body)
        .await
        .expect(422);
}

#[tokio::test]
async fn owners_team_cannot_be_renamed_restricted_or_deleted() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let rename = json!({"data": {"type": "teams", "attributes": {"name": "bosses"}}});
    platform
        .patch(&format!("/api/v2/teams/{owners}"), ROOT, rename)
        .await
        .expect(422);
    let restrict = json!({"data": {"type": "teams", "attributes": {"organization-access": {"manage-membership": false}}}});
    platform
        .patch(&format!("/api/v2/teams/{owners}"), ROOT, restrict)
        .await
        .expect(422);
    platform
        .delete(&format!("/api/v2/teams/{owners}"), ROOT)
        .await
        .expect(422);
}

#[tokio::test]
async fn delete_team_is_204_and_then_404() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    platform
        .delete(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(404);
    platform
        .delete(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn plain_member_cannot_manage_teams() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let body = json!({"data": {"type": "teams", "attributes": {"name": "mine"}}});
    platform
        .post("/api/v2/organizations/acme/teams", &bob.token, body)
        .await
        .expect(404);
    platform
        .delete(&format!("/api/v2/teams/{devs}"), &bob.token)
        .await
        .expect(404);
}

#[tokio::test]
async fn add_and_remove_team_users_by_username() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let ops = platform.create_team("acme", "ops", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let uri = format!("/api/v2/teams/{ops}/relationships/users");
    platform.post(&uri, ROOT, users(&["bob"])).await.expect(204);
    let team = platform
        .get(
            &format!("/api/v2/teams/{ops}?include=users,organization-memberships"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(
        team.body["data"]["relationships"]["users"]["data"][0]["id"],
        bob.user_id.as_str()
    );
    assert_eq!(
        team.body["data"]["relationships"]["organization-memberships"]["data"][0]["id"],
        bob.membership_id.as_str()
    );
    assert_eq!(team.body["included"].as_array().unwrap().len(), 2);
    platform
        .call(Method::DELETE, &uri, Some(ROOT), Some(users(&["bob"])))
        .await
        .expect(204);
    let team = platform
        .get(&format!("/api/v2/teams/{ops}"), ROOT)
        .await
        .expect(200);
    assert_eq!(team.body["data"]["attributes"]["users-count"], 0);
}

#[tokio::test]
async fn add_team_users_by_membership_id() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let ops = platform.create_team("acme", "ops", json!({})).await;
    let bob = platform.member("acme", "bob", &[&devs]).await;
    let body = json!({"data": [{"type": "organization-memberships", "id": bob.membership_id}]});
    platform
        .post(
            &format!("/api/v2/teams/{ops}/relationships/organization-memberships"),
            ROOT,
            body,
        )
        .await
        .expect(204);
    let team = platform
        .get(&format!("/api/v2/teams/{ops}"), ROOT)
        .await
        .expect(200);
    assert_eq!(team.body["data"]["attributes"]["users-count"], 1);
}

#[tokio::test]
async fn add_team_user_who_is_not_a_member_is_422_and_changes_nothing() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    platform.create_org("other").await;
    let other_owners = platform.owners_team("other").await;
    platform.member("other", "carol", &[&other_owners]).await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let uri = format!("/api/v2/teams/{devs}/relationships/users");
    let answer = platform
        .post(&uri, ROOT, users(&["admin", "carol"]))
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data/1/id");
    let answer = platform
        .post(
            &uri,
            ROOT,
            json!({"data": {"type": "users", "id": "carol"}}),
        )
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data");
    let team = platform
        .get(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(200);
    assert_eq!(team.body["data"]["attributes"]["users-count"], 0);
}

#[tokio::test]
async fn removing_the_last_owner_from_the_owners_team_is_422() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let owners = platform.owners_team("acme").await;
    let uri = format!("/api/v2/teams/{owners}/relationships/users");
    platform
        .call(Method::DELETE, &uri, Some(ROOT), Some(users(&["admin"])))
        .await
        .expect(422);
}

#[tokio::test]
async fn manage_membership_permission_allows_changing_team_members() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let leads = platform
        .create_team("acme", "leads", json!({"manage-membership": true}))
        .await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let lead = platform.member("acme", "lead", &[&leads]).await;
    platform.member("acme", "bob", &[&devs]).await;
    let uri = format!("/api/v2/teams/{leads}/relationships/users");
    platform
        .post(&uri, &lead.token, users(&["bob"]))
        .await
        .expect(204);
    let bob_uri = format!("/api/v2/teams/{devs}/relationships/users");
    let bob = platform.member("acme", "plain", &[&devs]).await;
    platform
        .post(&bob_uri, &bob.token, users(&["lead"]))
        .await
        .expect(404);
}

#[tokio::test]
async fn team_list_page_reads_only_the_teams_on_the_page() {
    let (platform, storage) = TestPlatform::counting().await;
    platform.create_org("acme").await;
    for n in 0..24 {
        platform
            .create_team("acme", &format!("team-{n:02}"), json!({}))
            .await;
    }
    // 25 teams with the owners team, which sorts first.
    storage.reset();
    let page = platform
        .get(
            "/api/v2/organizations/acme/teams?page%5Bnumber%5D=2&page%5Bsize%5D=5",
            ROOT,
        )
        .await
        .expect(200);
    let names: Vec<&str> = page.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|team| team["attributes"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["team-04", "team-05", "team-06", "team-07", "team-08"]
    );
    assert_eq!(page.body["meta"]["pagination"]["total-count"], 25);
    assert_eq!(storage.reads_under("platform/teams/"), 5);
    // A name filter and q page the index the same way.
    storage.reset();
    let found = platform
        .get("/api/v2/organizations/acme/teams?q=TEAM-1", ROOT)
        .await
        .expect(200);
    assert_eq!(found.body["meta"]["pagination"]["total-count"], 10);
    assert_eq!(storage.reads_under("platform/teams/"), 10);
}

#[tokio::test]
async fn team_view_lists_members_memberships_from_the_member_index() {
    let (platform, storage) = TestPlatform::counting().await;
    platform.create_org("acme").await;
    let devs = platform.create_team("acme", "devs", json!({})).await;
    let mut invited = Vec::new();
    for n in 0..12 {
        let answer = platform
            .invite("acme", &format!("dev{n}@example.com"), &[&devs], ROOT)
            .await
            .expect(201);
        invited.push(answer.body["data"]["id"].as_str().unwrap().to_owned());
    }
    storage.reset();
    let team = platform
        .get(&format!("/api/v2/teams/{devs}"), ROOT)
        .await
        .expect(200);
    let mut listed: Vec<String> =
        team.body["data"]["relationships"]["organization-memberships"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect();
    listed.sort();
    invited.sort();
    assert_eq!(listed, invited);
    assert_eq!(team.body["data"]["attributes"]["users-count"], 12);
    // One scan of the member index, no lookup per member (the one read is the caller's own
    // membership, for access).
    assert_eq!(storage.reads_under("platform/user-memberships/"), 1);
    assert_eq!(storage.reads_under("platform/membership-ids/"), 0);
}
