//! API tests of workspaces: create, list, read, update and delete by organization and name and
//! by id, safe-delete, lock, unlock and force-unlock, the current-configuration-version
//! relationship, access rules and bad input.

mod fixtures;
mod support;

use fixtures::{acme_web, create_workspace, organization_token, uploaded_cv};
use http::Method;
use serde_json::json;
use support::{ROOT, TestPlatform};

fn workspace_body(attributes: serde_json::Value) -> serde_json::Value {
    json!({"data": {"type": "workspaces", "attributes": attributes}})
}

#[tokio::test]
async fn create_workspace_returns_201_with_defaults_and_relationships() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    // pytfe sends `type`, an empty `vcs-repo` and `setting-overwrites` among the attributes.
    let body = workspace_body(json!({
        "name": "web", "type": "workspaces", "vcs-repo": {}, "setting-overwrites": {},
        "auto-apply": true, "description": "the web tier", "trigger-prefixes": ["modules/"]
    }));
    let answer = platform
        .post("/api/v2/organizations/acme/workspaces", ROOT, body)
        .await
        .expect(201);
    let data = &answer.body["data"];
    assert_eq!(data["type"], "workspaces");
    assert!(data["id"].as_str().unwrap().starts_with("ws-"));
    let attributes = &data["attributes"];
    assert_eq!(attributes["name"], "web");
    assert_eq!(attributes["auto-apply"], true);
    assert_eq!(attributes["description"], "the web tier");
    assert_eq!(attributes["trigger-prefixes"], json!(["modules/"]));
    assert_eq!(attributes["execution-mode"], "remote");
    assert_eq!(attributes["terraform-version"], "latest");
    assert_eq!(attributes["locked"], false);
    assert_eq!(attributes["permissions"]["can-queue-run"], true);
    let relationships = &data["relationships"];
    assert_eq!(
        relationships["organization"]["data"],
        json!({"id": "acme", "type": "organizations"})
    );
    assert_eq!(
        relationships["current-configuration-version"]["data"],
        json!(null)
    );
    assert_eq!(relationships["locked-by"]["data"], json!(null));
    assert_eq!(
        data["links"]["self"],
        "/api/v2/organizations/acme/workspaces/web"
    );
}

#[tokio::test]
async fn read_by_name_and_by_id_and_list_show_the_same_workspace() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let by_name = platform
        .get("/api/v2/organizations/acme/workspaces/web", ROOT)
        .await
        .expect(200);
    let by_id = platform
        .get(&format!("/api/v2/workspaces/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(by_name.body, by_id.body);
    let list = platform
        .get("/api/v2/organizations/acme/workspaces", ROOT)
        .await
        .expect(200);
    assert_eq!(list.body["data"][0], by_id.body["data"]);
    assert_eq!(list.body["meta"]["pagination"]["total-count"], 1);
}

#[tokio::test]
async fn list_workspaces_sorts_by_name_pages_and_searches() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    for name in ["db", "web-prod", "api", "web-dev"] {
        create_workspace(&platform, "acme", name).await;
    }
    let names = |answer: &support::Answer| -> Vec<String> {
        answer.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ws| ws["attributes"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let page = platform
        .get(
            "/api/v2/organizations/acme/workspaces?page%5Bnumber%5D=2&page%5Bsize%5D=3",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(names(&page), ["web-prod"]);
    assert_eq!(page.body["meta"]["pagination"]["total-count"], 4);
    assert_eq!(page.body["meta"]["pagination"]["prev-page"], 1);
    let search = platform
        .get(
            "/api/v2/organizations/acme/workspaces?search[name]=WEB",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(names(&search), ["web-dev", "web-prod"]);
    let wildcard = platform
        .get(
            "/api/v2/organizations/acme/workspaces?search[wildcard-name]=*-prod",
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(names(&wildcard), ["web-prod"]);
    let past_end = platform
        .get("/api/v2/organizations/acme/workspaces?page[number]=9", ROOT)
        .await
        .expect(200);
    assert_eq!(past_end.body["data"], json!([]));
}

#[tokio::test]
async fn create_workspace_with_taken_name_is_422_ignoring_case() {
    let platform = TestPlatform::new().await;
    acme_web(&platform).await;
    let answer = platform
        .post(
            "/api/v2/organizations/acme/workspaces",
            ROOT,
            workspace_body(json!({"name": "WEB"})),
        )
        .await
        .expect(422);
    assert_eq!(answer.error()["source"]["pointer"], "/data/attributes/name");
    assert!(answer.error()["detail"].as_str().unwrap().contains("taken"));
}

#[tokio::test]
async fn create_workspace_bad_input_is_422_pointing_at_the_member() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let cases = [
        (json!({}), "/data/attributes/name"),
        (json!({"name": "has space"}), "/data/attributes/name"),
        (
            json!({"name": "ok", "auto-apply": "yes"}),
            "/data/attributes/auto-apply",
        ),
        (
            json!({"name": "ok", "trigger-prefixes": [1]}),
            "/data/attributes/trigger-prefixes",
        ),
        (
            json!({"name": "ok", "execution-mode": "agent"}),
            "/data/attributes/execution-mode",
        ),
        (
            json!({"name": "ok", "vcs-repo": {"identifier": "org/repo"}}),
            "/data/attributes/vcs-repo",
        ),
    ];
    for (attributes, pointer) in cases {
        let answer = platform
            .post(
                "/api/v2/organizations/acme/workspaces",
                ROOT,
                workspace_body(attributes.clone()),
            )
            .await
            .expect(422);
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{attributes}");
    }
    let malformed = platform
        .call(
            Method::POST,
            "/api/v2/organizations/acme/workspaces",
            Some(ROOT),
            None,
        )
        .await;
    assert_eq!(malformed.status, 422);
    let list = platform
        .get("/api/v2/organizations/acme/workspaces", ROOT)
        .await
        .expect(200);
    assert_eq!(list.body["data"], json!([]));
}

#[tokio::test]
async fn create_workspace_in_missing_organization_is_404() {
    let platform = TestPlatform::new().await;
    platform
        .post(
            "/api/v2/organizations/nope/workspaces",
            ROOT,
            workspace_body(json!({"name": "web"})),
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn update_by_name_renames_and_moves_the_name() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let answer = platform
        .patch(
            "/api/v2/organizations/acme/workspaces/web",
            ROOT,
            workspace_body(json!({"name": "frontend", "description": null, "auto-apply": true})),
        )
        .await
        .expect(200);
    assert_eq!(answer.body["data"]["id"], id.as_str());
    assert_eq!(answer.body["data"]["attributes"]["name"], "frontend");
    assert_eq!(answer.body["data"]["attributes"]["auto-apply"], true);
    platform
        .get("/api/v2/organizations/acme/workspaces/web", ROOT)
        .await
        .expect(404);
    platform
        .get("/api/v2/organizations/acme/workspaces/frontend", ROOT)
        .await
        .expect(200);
}

#[tokio::test]
async fn update_by_id_to_a_taken_name_is_422_and_changes_nothing() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    create_workspace(&platform, "acme", "db").await;
    platform
        .patch(
            &format!("/api/v2/workspaces/{id}"),
            ROOT,
            workspace_body(json!({"name": "db"})),
        )
        .await
        .expect(422);
    let web = platform
        .get(&format!("/api/v2/workspaces/{id}"), ROOT)
        .await
        .expect(200);
    assert_eq!(web.body["data"]["attributes"]["name"], "web");
}

#[tokio::test]
async fn update_with_wrong_type_is_422() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    platform
        .patch(
            &format!("/api/v2/workspaces/{id}"),
            ROOT,
            workspace_body(json!({"queue-all-runs": 3})),
        )
        .await
        .expect(422);
}

#[tokio::test]
async fn delete_by_name_and_by_id_are_204_then_404() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    platform
        .delete("/api/v2/organizations/acme/workspaces/web", ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("/api/v2/workspaces/{id}"), ROOT)
        .await
        .expect(404);
    let again = create_workspace(&platform, "acme", "web").await;
    platform
        .delete(&format!("/api/v2/workspaces/{again}"), ROOT)
        .await
        .expect(204);
    platform
        .delete(&format!("/api/v2/workspaces/{again}"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn delete_workspace_removes_its_configuration_versions() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let cv = uploaded_cv(&platform, &id).await;
    platform
        .delete(&format!("/api/v2/workspaces/{id}"), ROOT)
        .await
        .expect(204);
    platform
        .get(&format!("/api/v2/configuration-versions/{cv}"), ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn safe_delete_of_a_locked_workspace_is_409() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            ROOT,
            json!({"reason": "x"}),
        )
        .await
        .expect(200);
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/safe-delete"),
            ROOT,
            json!(null),
        )
        .await
        .expect(409);
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/unlock"),
            ROOT,
            json!(null),
        )
        .await
        .expect(200);
    platform
        .post(
            "/api/v2/organizations/acme/workspaces/web/actions/safe-delete",
            ROOT,
            json!(null),
        )
        .await
        .expect(204);
}

#[tokio::test]
async fn lock_then_unlock_reports_holder_and_reason() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let locked = platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            ROOT,
            json!({"reason": "maintenance"}),
        )
        .await
        .expect(200);
    let data = &locked.body["data"];
    assert_eq!(data["attributes"]["locked"], true);
    assert_eq!(data["attributes"]["locked-reason"], "maintenance");
    assert_eq!(data["relationships"]["locked-by"]["data"]["type"], "users");
    let unlocked = platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/unlock"),
            ROOT,
            json!(null),
        )
        .await
        .expect(200);
    assert_eq!(unlocked.body["data"]["attributes"]["locked"], false);
    assert_eq!(
        unlocked.body["data"]["relationships"]["locked-by"]["data"],
        json!(null)
    );
}

#[tokio::test]
async fn lock_of_a_locked_workspace_is_409_already_locked() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let path = format!("/api/v2/workspaces/{id}/actions/lock");
    platform.post(&path, ROOT, json!({})).await.expect(200);
    let answer = platform.post(&path, ROOT, json!({})).await.expect(409);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("already locked")
    );
}

#[tokio::test]
async fn unlock_of_an_unlocked_workspace_is_409() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    for action in ["unlock", "force-unlock"] {
        let answer = platform
            .post(
                &format!("/api/v2/workspaces/{id}/actions/{action}"),
                ROOT,
                json!(null),
            )
            .await
            .expect(409);
        assert!(
            answer.error()["detail"]
                .as_str()
                .unwrap()
                .contains("not locked"),
            "{action}"
        );
    }
}

#[tokio::test]
async fn unlock_by_someone_else_is_409_naming_the_holder_and_force_unlock_works() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let owners = platform.owners_team("acme").await;
    let alice = platform.member("acme", "alice", &[&owners]).await;
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            &alice.token,
            json!({"reason": "mine"}),
        )
        .await
        .expect(200);
    let answer = platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/unlock"),
            ROOT,
            json!(null),
        )
        .await
        .expect(409);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("is locked by User alice"),
        "{}",
        answer.text
    );
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/force-unlock"),
            ROOT,
            json!(null),
        )
        .await
        .expect(200);
}

#[tokio::test]
async fn lock_with_non_string_reason_is_422() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            ROOT,
            json!({"reason": 5}),
        )
        .await
        .expect(422);
}

#[tokio::test]
async fn member_without_workspace_access_sees_404() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let team = platform.create_team("acme", "readers", json!({})).await;
    let bob = platform.member("acme", "bob", &[&team]).await;
    platform
        .get(&format!("/api/v2/workspaces/{id}"), &bob.token)
        .await
        .expect(404);
    platform
        .get("/api/v2/organizations/acme/workspaces", &bob.token)
        .await
        .expect(404);
}

#[tokio::test]
async fn reader_can_read_but_not_change_or_lock() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let team = platform
        .create_team("acme", "readers", json!({"read-workspaces": true}))
        .await;
    let carol = platform.member("acme", "carol", &[&team]).await;
    let read = platform
        .get(&format!("/api/v2/workspaces/{id}"), &carol.token)
        .await
        .expect(200);
    assert_eq!(
        read.body["data"]["attributes"]["permissions"]["can-update"],
        false
    );
    platform
        .patch(
            &format!("/api/v2/workspaces/{id}"),
            &carol.token,
            workspace_body(json!({"auto-apply": true})),
        )
        .await
        .expect(404);
    platform
        .post(
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            &carol.token,
            json!({}),
        )
        .await
        .expect(404);
    platform
        .delete(&format!("/api/v2/workspaces/{id}"), &carol.token)
        .await
        .expect(404);
}

#[tokio::test]
async fn organization_token_manages_workspaces() {
    let platform = TestPlatform::new().await;
    platform.create_org("acme").await;
    let token = organization_token(&platform, "acme").await;
    let answer = platform
        .post(
            "/api/v2/organizations/acme/workspaces",
            &token,
            workspace_body(json!({"name": "infra"})),
        )
        .await
        .expect(201);
    assert_eq!(
        answer.body["data"]["attributes"]["permissions"]["can-queue-run"],
        false
    );
}

#[tokio::test]
async fn current_configuration_version_follows_the_latest_upload() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    platform
        .get(
            &format!("/api/v2/workspaces/{id}/current-configuration-version"),
            ROOT,
        )
        .await
        .expect(404);
    let cv = uploaded_cv(&platform, &id).await;
    let workspace = platform
        .get(&format!("/api/v2/workspaces/{id}"), ROOT)
        .await
        .expect(200);
    let relationship = &workspace.body["data"]["relationships"]["current-configuration-version"];
    assert_eq!(
        relationship["data"],
        json!({"id": cv, "type": "configuration-versions"})
    );
    let current = platform
        .get(
            &format!("/api/v2/workspaces/{id}/current-configuration-version"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(current.body["data"]["id"], cv.as_str());
    let included = platform
        .get(
            &format!("/api/v2/workspaces/{id}?include=current_configuration_version"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(included.body["included"][0]["id"], cv.as_str());
}

#[tokio::test]
async fn unknown_include_is_400() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    let answer = platform
        .get(&format!("/api/v2/workspaces/{id}?include=secrets"), ROOT)
        .await
        .expect(400);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("include")
    );
}

#[tokio::test]
async fn deleting_the_organization_removes_its_workspaces() {
    let platform = TestPlatform::new().await;
    let id = acme_web(&platform).await;
    platform
        .delete("/api/v2/organizations/acme", ROOT)
        .await
        .expect(204);
    platform.create_org("acme").await;
    platform
        .get(&format!("/api/v2/workspaces/{id}"), ROOT)
        .await
        .expect(404);
    create_workspace(&platform, "acme", "web").await;
}

#[tokio::test]
async fn workspace_list_page_reads_only_the_workspaces_on_the_page() {
    let (platform, storage) = TestPlatform::counting().await;
    platform.create_org("acme").await;
    for n in 0..30 {
        create_workspace(&platform, "acme", &format!("ws-{n:02}")).await;
    }
    storage.reset();
    let page = platform
        .get(
            "/api/v2/organizations/acme/workspaces?page%5Bnumber%5D=3&page%5Bsize%5D=5",
            ROOT,
        )
        .await
        .expect(200);
    let names: Vec<&str> = page.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ws| ws["attributes"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ws-10", "ws-11", "ws-12", "ws-13", "ws-14"]);
    assert_eq!(page.body["meta"]["pagination"]["total-count"], 30);
    assert_eq!(storage.reads_under("platform/workspaces/"), 5);
}
