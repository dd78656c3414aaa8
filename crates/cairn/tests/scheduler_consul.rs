//! End to end in `cairn dev`: a job's services with provider `consul` are registered by the
//! in-process scheduler client in the session registry of the same process (Consul's agent
//! API), with their HTTP checks run by the registry, and removed when the job stops.
//!
//! The real binary on port 0; every wait polls with a bound.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Cairn, http};

const BOUND: Duration = Duration::from_secs(30);

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

async fn catalog(cairn: &Cairn, name: &str) -> Vec<Value> {
    let response = http()
        .get(cairn.url("registry", &format!("/v1/catalog/service/{name}")))
        .header("X-Consul-Token", cairn.token.clone().unwrap_or_default())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json::<Vec<Value>>().await.unwrap()
}

#[tokio::test]
async fn a_consul_service_is_registered_in_the_registry_while_its_task_runs() {
    let cairn = Cairn::dev(&[]).await;
    let job = json!({"Job": {
        "ID": "web", "Name": "web", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Networks": [{"DynamicPorts": [{"Label": "http", "To": -1}]}],
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["300"]},
                "Resources": {"CPU": 100, "MemoryMB": 32},
                "KillTimeout": 1_000_000_000i64,
                "Services": [{
                    "Name": "web-api", "PortLabel": "http", "Provider": "consul",
                    "Tags": ["v1"],
                    "Checks": [
                        {"Name": "alive", "Type": "tcp", "Interval": 1_000_000_000i64,
                         "Timeout": 1_000_000_000i64},
                        {"Name": "script-ok", "Type": "script", "Command": "/bin/sh",
                         "Args": ["-c", "echo fine"], "Interval": 1_000_000_000i64,
                         "Timeout": 5_000_000_000i64},
                    ],
                }],
            }],
        }],
    }});
    let response = http()
        .put(cairn.url("scheduler", "/v1/jobs"))
        .header("X-Nomad-Token", cairn.token.clone().unwrap_or_default())
        .json(&job)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());

    let entry = eventually("the service in the registry's catalog", || async {
        catalog(&cairn, "web-api").await.into_iter().next()
    })
    .await;
    assert_eq!(entry["ServiceTags"], json!(["v1"]));
    let port = entry["ServicePort"].as_i64().unwrap();
    assert!((20_000..=32_000).contains(&port), "{entry}");
    assert!(
        entry["ServiceID"]
            .as_str()
            .unwrap()
            .starts_with("_nomad-task-"),
        "{entry}"
    );
    // The script check is a TTL check the client keeps passing; the TCP check is the
    // registry's own.
    eventually("the script check passing in the registry", || async {
        let response = http()
            .get(cairn.url("registry", "/v1/health/checks/web-api"))
            .send()
            .await
            .unwrap();
        let checks: Vec<Value> = response.json().await.unwrap();
        let names: Vec<&str> = checks.iter().filter_map(|c| c["Name"].as_str()).collect();
        assert!(names.contains(&"alive"), "{checks:?}");
        checks
            .iter()
            .any(|c| c["Name"] == "script-ok" && c["Status"] == "passing")
            .then_some(())
    })
    .await;
    // The port the registry shows is the one the scheduler assigned.
    let allocs: Vec<Value> = http()
        .get(cairn.url("scheduler", "/v1/job/web/allocations"))
        .header("X-Nomad-Token", cairn.token.clone().unwrap_or_default())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let alloc_id = allocs[0]["ID"].as_str().unwrap().to_owned();
    let alloc: Value = http()
        .get(cairn.url("scheduler", &format!("/v1/allocation/{alloc_id}")))
        .header("X-Nomad-Token", cairn.token.clone().unwrap_or_default())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        alloc["AllocatedResources"]["Shared"]["Ports"][0]["Value"],
        port
    );

    let response = http()
        .delete(cairn.url("scheduler", "/v1/job/web"))
        .header("X-Nomad-Token", cairn.token.clone().unwrap_or_default())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    eventually("the service gone from the catalog", || async {
        catalog(&cairn, "web-api").await.is_empty().then_some(())
    })
    .await;
    cairn.stop().await;
}
