//! End-to-end tests of the job scheduler in `cairn dev`: the server, its placement and the
//! in-process client running real processes with the raw_exec driver.
//!
//! Each test starts the real binary on port 0 and talks Nomad's HTTP API with the dev root
//! token. Waits poll the API (every 100 ms, bounded); no test sleeps blindly.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Cairn, http};

/// How long a scheduling outcome may take to show.
const BOUND: Duration = Duration::from_secs(30);

async fn get(cairn: &Cairn, path: &str) -> Value {
    let response = http()
        .get(cairn.url("scheduler", path))
        .header("X-Nomad-Token", cairn.token.clone().unwrap_or_default())
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "GET {path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

async fn send(cairn: &Cairn, method: reqwest::Method, path: &str, body: &Value) -> Value {
    let response = http()
        .request(method.clone(), cairn.url("scheduler", path))
        .header("X-Nomad-Token", cairn.token.clone().unwrap_or_default())
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

/// Polls `probe` until it returns `Some`, or panics with `what` after [`BOUND`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn job(id: &str, job_type: &str, command: &str, args: &[&str], extra_group: Value) -> Value {
    let mut group = json!({
        "Name": "g",
        "Count": 1,
        "Tasks": [{
            "Name": "t",
            "Driver": "raw_exec",
            "Config": {"command": command, "args": args},
            "Resources": {"CPU": 100, "MemoryMB": 32},
            "KillTimeout": 1_000_000_000i64
        }]
    });
    if let (Some(group), Some(extra)) = (group.as_object_mut(), extra_group.as_object()) {
        for (key, value) in extra {
            group.insert(key.clone(), value.clone());
        }
    }
    json!({"Job": {"ID": id, "Name": id, "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [group]}})
}

async fn allocations(cairn: &Cairn, job: &str) -> Vec<Value> {
    get(cairn, &format!("/v1/job/{job}/allocations"))
        .await
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn allocation(cairn: &Cairn, id: &str) -> Value {
    get(cairn, &format!("/v1/allocation/{id}")).await
}

#[tokio::test]
async fn a_raw_exec_service_job_reaches_running() {
    let cairn = Cairn::dev(&[]).await;
    let body = job("sleeper", "service", "/bin/sleep", &["300"], json!({}));
    let registered = send(&cairn, reqwest::Method::PUT, "/v1/jobs", &body).await;
    assert!(
        registered["EvalID"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    let alloc_id = eventually("a running allocation", || async {
        allocations(&cairn, "sleeper")
            .await
            .into_iter()
            .find(|alloc| alloc["ClientStatus"] == "running")
            .and_then(|alloc| alloc["ID"].as_str().map(str::to_owned))
    })
    .await;
    let alloc = allocation(&cairn, &alloc_id).await;
    assert_eq!(alloc["TaskStates"]["t"]["State"], "running");
    assert_eq!(alloc["Job"]["ID"], "sleeper");
    let events: Vec<&str> = alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event["Type"].as_str())
        .collect();
    assert!(events.contains(&"Started"), "{events:?}");
    eventually("job status running", || async {
        (get(&cairn, "/v1/job/sleeper").await["Status"] == "running").then_some(())
    })
    .await;
    cairn.stop().await;
}

#[tokio::test]
async fn a_failing_task_is_restarted_then_its_allocation_fails_and_is_rescheduled() {
    let cairn = Cairn::dev(&[]).await;
    let policies = json!({
        "RestartPolicy": {"Attempts": 1, "Interval": 1_800_000_000_000i64, "Delay": 200_000_000i64, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 1, "Interval": 3_600_000_000_000i64, "Delay": 5_000_000_000i64,
                             "DelayFunction": "constant", "MaxDelay": 0, "Unlimited": false}
    });
    let body = job("crasher", "service", "/bin/sh", &["-c", "exit 3"], policies);
    send(&cairn, reqwest::Method::PUT, "/v1/jobs", &body).await;
    let failed_id = eventually("a failed allocation", || async {
        allocations(&cairn, "crasher")
            .await
            .into_iter()
            .find(|alloc| alloc["ClientStatus"] == "failed")
            .and_then(|alloc| alloc["ID"].as_str().map(str::to_owned))
    })
    .await;
    let failed = allocation(&cairn, &failed_id).await;
    let state = &failed["TaskStates"]["t"];
    assert_eq!(state["Restarts"], 1, "{state}");
    assert_eq!(state["Failed"], true);
    let events = state["Events"].as_array().unwrap();
    let types: Vec<&str> = events.iter().filter_map(|e| e["Type"].as_str()).collect();
    assert!(types.contains(&"Restarting"), "{types:?}");
    assert!(types.contains(&"Not Restarting"), "{types:?}");
    assert!(
        events
            .iter()
            .any(|e| e["Type"] == "Terminated" && e["ExitCode"] == 3),
        "{events:?}"
    );
    let replacement = eventually("a rescheduled allocation", || async {
        allocations(&cairn, "crasher")
            .await
            .into_iter()
            .find(|alloc| alloc["ID"] != failed_id.as_str())
    })
    .await;
    let replacement = allocation(&cairn, replacement["ID"].as_str().unwrap()).await;
    assert_eq!(replacement["PreviousAllocation"], failed_id.as_str());
    let tracker = replacement["RescheduleTracker"]["Events"]
        .as_array()
        .unwrap();
    assert_eq!(tracker.len(), 1);
    assert_eq!(tracker[0]["PrevAllocID"], failed_id.as_str());
    eventually("the failed allocation links to its replacement", || async {
        let failed = allocation(&cairn, &failed_id).await;
        (failed["NextAllocation"] == replacement["ID"]).then_some(())
    })
    .await;
    cairn.stop().await;
}

#[tokio::test]
async fn stopping_an_allocation_places_a_replacement() {
    let cairn = Cairn::dev(&[]).await;
    let body = job("stoppable", "service", "/bin/sleep", &["300"], json!({}));
    send(&cairn, reqwest::Method::PUT, "/v1/jobs", &body).await;
    let first = eventually("a running allocation", || async {
        allocations(&cairn, "stoppable")
            .await
            .into_iter()
            .find(|alloc| alloc["ClientStatus"] == "running")
            .and_then(|alloc| alloc["ID"].as_str().map(str::to_owned))
    })
    .await;
    let stopped = send(
        &cairn,
        reqwest::Method::POST,
        &format!("/v1/allocation/{first}/stop"),
        &json!({}),
    )
    .await;
    assert!(stopped["EvalID"].as_str().is_some_and(|id| !id.is_empty()));
    let replacement = eventually("a running replacement", || async {
        allocations(&cairn, "stoppable")
            .await
            .into_iter()
            .find(|alloc| alloc["ID"] != first.as_str() && alloc["ClientStatus"] == "running")
    })
    .await;
    let replacement = allocation(&cairn, replacement["ID"].as_str().unwrap()).await;
    assert_eq!(replacement["PreviousAllocation"], first.as_str());
    eventually("the stopped allocation completes", || async {
        let old = allocation(&cairn, &first).await;
        (old["DesiredStatus"] == "stop" && old["ClientStatus"] == "complete").then_some(old)
    })
    .await;
    cairn.stop().await;
}

#[tokio::test]
async fn a_batch_job_completes_and_is_dead() {
    let cairn = Cairn::dev(&[]).await;
    let body = job(
        "oneshot",
        "batch",
        "/bin/sh",
        &["-c", "echo done"],
        json!({}),
    );
    send(&cairn, reqwest::Method::PUT, "/v1/jobs", &body).await;
    let alloc = eventually("a complete allocation", || async {
        allocations(&cairn, "oneshot")
            .await
            .into_iter()
            .find(|alloc| alloc["ClientStatus"] == "complete")
    })
    .await;
    let alloc = allocation(&cairn, alloc["ID"].as_str().unwrap()).await;
    assert_eq!(alloc["TaskStates"]["t"]["State"], "dead");
    assert_eq!(alloc["TaskStates"]["t"]["Failed"], false);
    eventually("job status dead", || async {
        (get(&cairn, "/v1/job/oneshot").await["Status"] == "dead").then_some(())
    })
    .await;
    assert_eq!(
        allocations(&cairn, "oneshot").await.len(),
        1,
        "a finished batch alloc is not replaced"
    );
    cairn.stop().await;
}

#[tokio::test]
async fn a_separate_agent_runs_jobs_and_reattaches_to_its_tasks_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cairn.hcl");
    std::fs::write(
        &config,
        r#"
data_dir = "data"
secrets { enabled = false }
registry { enabled = false }
platform { enabled = false }
scheduler {
  address = "127.0.0.1:0"
  acl { enabled = false }
}
"#,
    )
    .unwrap();
    let server = Cairn::start(&["server", "--config", config.to_str().unwrap()]).await;
    let agent_dir = dir.path().join("agent");
    let agent_args = [
        "agent",
        "--servers",
        &server.addr("scheduler"),
        "--data-dir",
        agent_dir.to_str().unwrap(),
        "--node-name",
        "worker-1",
    ];
    let agent = Cairn::start(&agent_args).await;
    let body = job("remote", "service", "/bin/sleep", &["300"], json!({}));
    send(&server, reqwest::Method::PUT, "/v1/jobs", &body).await;
    let alloc_id = eventually("a running allocation on the agent's node", || async {
        allocations(&server, "remote")
            .await
            .into_iter()
            .find(|alloc| alloc["ClientStatus"] == "running" && alloc["NodeName"] == "worker-1")
            .and_then(|alloc| alloc["ID"].as_str().map(str::to_owned))
    })
    .await;
    let started = allocation(&server, &alloc_id).await["TaskStates"]["t"]["StartedAt"].clone();

    // The agent stops; its task keeps running, and the restarted agent adopts it.
    agent.stop().await;
    let agent = Cairn::start(&agent_args).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alloc = allocation(&server, &alloc_id).await;
    assert_eq!(alloc["ClientStatus"], "running");
    assert_eq!(alloc["TaskStates"]["t"]["Restarts"], 0);
    assert_eq!(
        alloc["TaskStates"]["t"]["StartedAt"], started,
        "the same process, not a new start"
    );

    // Stopping the job stops the adopted task.
    let response = http()
        .delete(server.url("scheduler", "/v1/job/remote"))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    eventually("the adopted task is stopped", || async {
        let alloc = allocation(&server, &alloc_id).await;
        (alloc["ClientStatus"] == "complete" && alloc["TaskStates"]["t"]["State"] == "dead")
            .then_some(())
    })
    .await;
    agent.stop().await;
    server.stop().await;
}
