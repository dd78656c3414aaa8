//! API tests of runs: the run an upload with `auto-queue-runs` queues, `POST /runs`,
//! `GET /runs/:id`, `GET /workspaces/:id/runs`, the apply, discard, cancel and force-cancel
//! actions, the workspace queue (one run holds the workspace; a lock holds new runs back),
//! and bad input.

mod fixtures;
mod support;

use fixtures::{
    acme_web, config_archive, create_run, new_cv, organization_token, read_run, upload, uploaded_cv,
};
use serde_json::json;
use support::{ROOT, TestPlatform};

fn status(run: &serde_json::Value) -> &str {
    run["data"]["attributes"]["status"].as_str().unwrap()
}

async fn act(platform: &TestPlatform, run: &str, action: &str) -> support::Answer {
    platform
        .post(
            &format!("/api/v2/runs/{run}/actions/{action}"),
            ROOT,
            json!({"comment": "from a test"}),
        )
        .await
}

async fn run_ids(platform: &TestPlatform, workspace: &str) -> Vec<String> {
    let list = platform
        .get(&format!("/api/v2/workspaces/{workspace}/runs"), ROOT)
        .await
        .expect(200);
    list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn upload_with_auto_queue_runs_queues_a_run() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (cv, url) = new_cv(&platform, &ws, json!({})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    let runs = platform
        .get(&format!("/api/v2/workspaces/{ws}/runs"), ROOT)
        .await
        .expect(200);
    let run = &runs.body["data"][0];
    assert_eq!(runs.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(run["attributes"]["status"], "plan_queued");
    assert_eq!(run["attributes"]["source"], "tfe-configuration-version");
    assert_eq!(
        run["relationships"]["configuration-version"]["data"]["id"],
        cv.as_str()
    );
    assert_eq!(run["relationships"]["workspace"]["data"]["id"], ws.as_str());
    assert!(run["attributes"]["status-timestamps"]["plan-queued-at"].is_string());
    let workspace = platform
        .get(&format!("/api/v2/workspaces/{ws}"), ROOT)
        .await
        .expect(200);
    let relationships = &workspace.body["data"]["relationships"];
    assert_eq!(relationships["current-run"]["data"]["id"], run["id"]);
    assert_eq!(relationships["latest-run"]["data"]["id"], run["id"]);
}

#[tokio::test]
async fn upload_without_auto_queue_runs_queues_nothing() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    assert!(run_ids(&platform, &ws).await.is_empty());
}

#[tokio::test]
async fn create_run_uses_the_current_version_and_answers_201() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let cv = uploaded_cv(&platform, &ws).await;
    let created = create_run(
        &platform,
        &ws,
        json!({"message": "hello", "is-destroy": true}),
    )
    .await
    .expect(201);
    let data = &created.body["data"];
    assert!(data["id"].as_str().unwrap().starts_with("run-"));
    assert_eq!(data["attributes"]["message"], "hello");
    assert_eq!(data["attributes"]["is-destroy"], true);
    assert_eq!(data["attributes"]["source"], "tfe-api");
    assert_eq!(data["attributes"]["actions"]["is-cancelable"], true);
    assert_eq!(data["attributes"]["actions"]["is-confirmable"], false);
    assert_eq!(
        data["relationships"]["configuration-version"]["data"]["id"],
        cv.as_str()
    );
    let read = read_run(&platform, data["id"].as_str().unwrap()).await;
    assert_eq!(read["data"], *data);
}

#[tokio::test]
async fn second_run_waits_pending_until_the_first_ends() {
    // The clock stands still: both runs are created in one millisecond, and still list in
    // creation order.
    let platform = TestPlatform::with_clock(&testkit::ManualClock::at_system_time()).await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let first = create_run(&platform, &ws, json!({})).await.expect(201);
    let second = create_run(&platform, &ws, json!({})).await.expect(201);
    let (first, second) = (
        first.body["data"]["id"].as_str().unwrap().to_owned(),
        second.body["data"]["id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(status(&read_run(&platform, &second).await), "pending");
    act(&platform, &first, "cancel").await.expect(202);
    let canceled = read_run(&platform, &first).await;
    assert_eq!(status(&canceled), "canceled");
    assert!(canceled["data"]["attributes"]["canceled-at"].is_string());
    assert_eq!(status(&read_run(&platform, &second).await), "plan_queued");
    assert_eq!(run_ids(&platform, &ws).await, [second, first]);
}

#[tokio::test]
async fn speculative_runs_never_wait() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    create_run(&platform, &ws, json!({})).await.expect(201);
    let plan = create_run(&platform, &ws, json!({"plan-only": true}))
        .await
        .expect(201);
    assert_eq!(plan.body["data"]["attributes"]["status"], "plan_queued");
    assert_eq!(plan.body["data"]["attributes"]["plan-only"], true);
}

#[tokio::test]
async fn speculative_version_makes_plan_only_runs_and_is_not_current() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (cv, url) = new_cv(&platform, &ws, json!({"speculative": true})).await;
    upload(&platform, &url, config_archive()).await.expect(200);
    let runs = platform
        .get(&format!("/api/v2/workspaces/{ws}/runs"), ROOT)
        .await
        .expect(200);
    assert_eq!(runs.body["data"][0]["attributes"]["plan-only"], true);
    let workspace = platform
        .get(&format!("/api/v2/workspaces/{ws}"), ROOT)
        .await
        .expect(200);
    assert_ne!(
        workspace.body["data"]["relationships"]["current-configuration-version"]["data"]["id"],
        cv.as_str()
    );
}

#[tokio::test]
async fn provisional_version_does_not_become_current() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let (cv, url) = new_cv(
        &platform,
        &ws,
        json!({"provisional": true, "auto-queue-runs": false}),
    )
    .await;
    upload(&platform, &url, config_archive()).await.expect(200);
    let workspace = platform
        .get(&format!("/api/v2/workspaces/{ws}"), ROOT)
        .await
        .expect(200);
    let current = &workspace.body["data"]["relationships"]["current-configuration-version"]["data"];
    assert_eq!(*current, json!(null), "{cv}");
}

#[tokio::test]
async fn locked_workspace_holds_new_runs_pending_until_unlocked() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    platform
        .post(
            &format!("/api/v2/workspaces/{ws}/actions/lock"),
            ROOT,
            json!({"reason": "freeze"}),
        )
        .await
        .expect(200);
    let run = create_run(&platform, &ws, json!({})).await.expect(201);
    let run = run.body["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(status(&read_run(&platform, &run).await), "pending");
    platform
        .post(
            &format!("/api/v2/workspaces/{ws}/actions/unlock"),
            ROOT,
            json!(null),
        )
        .await
        .expect(200);
    assert_eq!(status(&read_run(&platform, &run).await), "plan_queued");
}

#[tokio::test]
async fn discard_ends_a_pending_run_and_is_409_for_a_queued_one() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let queued = create_run(&platform, &ws, json!({})).await.expect(201);
    let pending = create_run(&platform, &ws, json!({})).await.expect(201);
    let queued = queued.body["data"]["id"].as_str().unwrap();
    let pending = pending.body["data"]["id"].as_str().unwrap();
    let answer = act(&platform, queued, "discard").await.expect(409);
    assert_eq!(answer.error()["title"], "transition not allowed");
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("discard not allowed")
    );
    act(&platform, pending, "discard").await.expect(202);
    let discarded = read_run(&platform, pending).await;
    assert_eq!(status(&discarded), "discarded");
    assert!(discarded["data"]["attributes"]["status-timestamps"]["discarded-at"].is_string());
    // The queued run still holds the workspace.
    assert_eq!(status(&read_run(&platform, queued).await), "plan_queued");
}

#[tokio::test]
async fn apply_and_force_cancel_are_409_without_a_plan() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let run = create_run(&platform, &ws, json!({})).await.expect(201);
    let run = run.body["data"]["id"].as_str().unwrap();
    let apply = act(&platform, run, "apply").await.expect(409);
    assert!(
        apply.error()["detail"]
            .as_str()
            .unwrap()
            .contains("apply not allowed")
    );
    act(&platform, run, "force-cancel").await.expect(409);
    act(&platform, run, "cancel").await.expect(202);
    // A final run accepts nothing.
    for action in ["cancel", "discard", "apply"] {
        act(&platform, run, action).await.expect(409);
    }
}

#[tokio::test]
async fn actions_on_a_missing_run_are_404() {
    let platform = TestPlatform::new().await;
    act(&platform, "run-doesnotexist00000", "cancel")
        .await
        .expect(404);
    platform
        .get("/api/v2/runs/run-none", ROOT)
        .await
        .expect(404);
}

#[tokio::test]
async fn actions_accept_no_body() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let run = create_run(&platform, &ws, json!({})).await.expect(201);
    let run = run.body["data"]["id"].as_str().unwrap();
    platform
        .call(
            http::Method::POST,
            &format!("/api/v2/runs/{run}/actions/cancel"),
            Some(ROOT),
            None,
        )
        .await
        .expect(202);
}

#[tokio::test]
async fn create_run_without_workspace_is_422() {
    let platform = TestPlatform::new().await;
    let answer = platform
        .post(
            "/api/v2/runs",
            ROOT,
            json!({"data": {"type": "runs", "attributes": {}}}),
        )
        .await
        .expect(422);
    assert_eq!(
        answer.error()["source"]["pointer"],
        "/data/relationships/workspace"
    );
}

#[tokio::test]
async fn create_run_without_uploaded_version_is_422() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let answer = create_run(&platform, &ws, json!({})).await.expect(422);
    assert_eq!(
        answer.error()["source"]["pointer"],
        "/data/relationships/configuration-version"
    );
    let (pending, _) = new_cv(&platform, &ws, json!({})).await;
    let body = json!({"data": {"type": "runs", "relationships": {
        "workspace": {"data": {"type": "workspaces", "id": ws}},
        "configuration-version": {"data": {"type": "configuration-versions", "id": pending}}
    }}});
    let answer = platform.post("/api/v2/runs", ROOT, body).await.expect(422);
    assert!(
        answer.error()["detail"]
            .as_str()
            .unwrap()
            .contains("pending")
    );
    assert!(run_ids(&platform, &ws).await.is_empty());
}

#[tokio::test]
async fn create_run_with_bad_attributes_is_422() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let cases = [
        (json!({"is-destroy": "yes"}), "/data/attributes/is-destroy"),
        (
            json!({"target-addrs": "a.b"}),
            "/data/attributes/target-addrs",
        ),
        (
            json!({"variables": [{"key": "a"}]}),
            "/data/attributes/variables",
        ),
        (
            json!({"terraform-version": "1.9.0"}),
            "/data/attributes/terraform-version",
        ),
    ];
    for (attributes, pointer) in cases {
        let answer = create_run(&platform, &ws, attributes.clone())
            .await
            .expect(422);
        assert_eq!(answer.error()["source"]["pointer"], pointer, "{attributes}");
    }
    assert!(run_ids(&platform, &ws).await.is_empty());
}

#[tokio::test]
async fn create_run_with_pytfe_extras_in_attributes_is_accepted() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    // pytfe dumps its whole options model, relations included, into the attributes.
    let attributes = json!({"type": "runs", "workspace": {"id": ws}, "message": "m",
        "variables": [{"key": "region", "value": "\"eu\""}], "plan-only": true, "terraform-version": "1.9.0"});
    let created = create_run(&platform, &ws, attributes).await.expect(201);
    assert_eq!(
        created.body["data"]["attributes"]["variables"],
        json!([{"key": "region", "value": "\"eu\""}])
    );
    assert_eq!(
        created.body["data"]["attributes"]["terraform-version"],
        "1.9.0"
    );
}

#[tokio::test]
async fn organization_token_cannot_create_runs() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let token = organization_token(&platform, "acme").await;
    let body = json!({"data": {"type": "runs", "relationships": {
        "workspace": {"data": {"type": "workspaces", "id": ws}}
    }}});
    platform
        .post("/api/v2/runs", &token, body)
        .await
        .expect(404);
    platform
        .get(&format!("/api/v2/workspaces/{ws}/runs"), &token)
        .await
        .expect(200);
}

#[tokio::test]
async fn list_runs_filters_by_status_and_operation_and_pages() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    create_run(&platform, &ws, json!({})).await.expect(201);
    create_run(&platform, &ws, json!({})).await.expect(201);
    create_run(&platform, &ws, json!({"plan-only": true}))
        .await
        .expect(201);
    let count = |answer: &support::Answer| answer.body["data"].as_array().unwrap().len();
    let pending = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/runs?filter%5Bstatus%5D=pending"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(count(&pending), 1);
    let queued = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/runs?filter[status]=plan_queued,pending"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(count(&queued), 3);
    let plans = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/runs?filter[operation]=plan_only"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(count(&plans), 1);
    // pytfe sends every option, empty ones as empty strings.
    let pytfe = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/runs?page[number]=1&page[size]=2&search[user]=&filter[status]=&include="),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(count(&pytfe), 2);
    assert_eq!(pytfe.body["meta"]["pagination"]["total-count"], 3);
}

#[tokio::test]
async fn read_run_with_includes() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    let cv = uploaded_cv(&platform, &ws).await;
    let run = create_run(&platform, &ws, json!({})).await.expect(201);
    let run = run.body["data"]["id"].as_str().unwrap();
    let answer = platform
        .get(
            &format!("/api/v2/runs/{run}?include=workspace,configuration-version,created-by,plan"),
            ROOT,
        )
        .await
        .expect(200);
    let kinds: Vec<(&str, &str)> = answer.body["included"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["type"].as_str().unwrap(), r["id"].as_str().unwrap()))
        .collect();
    assert!(kinds.contains(&("workspaces", ws.as_str())), "{kinds:?}");
    assert!(
        kinds.contains(&("configuration-versions", cv.as_str())),
        "{kinds:?}"
    );
    assert!(kinds.iter().any(|(kind, _)| *kind == "users"), "{kinds:?}");
    platform
        .get(&format!("/api/v2/runs/{run}?include=bogus"), ROOT)
        .await
        .expect(400);
}

#[tokio::test]
async fn member_without_access_cannot_see_runs() {
    let platform = TestPlatform::new().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let run = create_run(&platform, &ws, json!({})).await.expect(201);
    let run = run.body["data"]["id"].as_str().unwrap();
    let team = platform.create_team("acme", "nobody", json!({})).await;
    let dan = platform.member("acme", "dan", &[&team]).await;
    platform
        .get(&format!("/api/v2/runs/{run}"), &dan.token)
        .await
        .expect(404);
    platform
        .get(&format!("/api/v2/workspaces/{ws}/runs"), &dan.token)
        .await
        .expect(404);
    platform
        .post(
            &format!("/api/v2/runs/{run}/actions/cancel"),
            &dan.token,
            json!(null),
        )
        .await
        .expect(404);
}

#[tokio::test]
async fn run_list_page_reads_only_the_runs_on_the_page() {
    let (platform, storage) = TestPlatform::counting().await;
    let ws = acme_web(&platform).await;
    uploaded_cv(&platform, &ws).await;
    let mut created = Vec::new();
    for n in 0..30 {
        let run = create_run(&platform, &ws, json!({"message": format!("run {n}")}))
            .await
            .expect(201);
        created.push(run.body["data"]["id"].as_str().unwrap().to_owned());
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    for (number, expected) in [(1, &newest_first[0..5]), (2, &newest_first[5..10])] {
        storage.reset();
        let page = platform
            .get(
                &format!("/api/v2/workspaces/{ws}/runs?page%5Bnumber%5D={number}&page%5Bsize%5D=5"),
                ROOT,
            )
            .await
            .expect(200);
        let ids: Vec<&str> = page.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|run| run["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, expected);
        assert_eq!(page.body["meta"]["pagination"]["total-count"], 30);
        // The page's five runs, not the workspace's thirty.
        assert_eq!(storage.reads_under("platform/runs/"), 5);
    }
    // A filter still sees every run.
    let queued = platform
        .get(
            &format!("/api/v2/workspaces/{ws}/runs?filter%5Bstatus%5D=pending&page%5Bsize%5D=5"),
            ROOT,
        )
        .await
        .expect(200);
    assert_eq!(queued.body["meta"]["pagination"]["total-count"], 29);
}
