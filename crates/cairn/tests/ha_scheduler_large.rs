//! Large scheduler commits on an etcd at its default limits (`--max-txn-ops` 128,
//! `--max-request-bytes` 1.5 MiB: the etcd `scripts/services` runs on 127.0.0.1:2379), end to
//! end: two real `cairn server` processes (scheduler only, ACLs off) under a fresh prefix; a
//! job of count 300, registered through the follower, is placed completely (its plan is far
//! larger than one etcd transaction, so the leader's writer commits it in parts), reads the same
//! through the follower as on the leader, and is all there after both servers are killed with
//! SIGKILL and a new one starts on the same prefix.
//!
//! Invariants: a fresh etcd prefix per run; every wait is a bounded poll; every server dies
//! with its handle.

#[allow(
    dead_code,
    reason = "shared with other test binaries; this one uses part of it"
)]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Cairn, free_port, http};

/// The bound of every wait (elections, placement) on a loaded machine.
const WAIT: Duration = Duration::from_secs(90);

/// The etcd that `scripts/services` runs, with etcd's default limits.
const ETCD: &str = "http://127.0.0.1:2379";

/// The job's size: its plan writes this many allocations.
const COUNT: usize = 300;

async fn server(prefix: &str, dir: &tempfile::TempDir, name: &str) -> Cairn {
    let data_dir = dir.path().join(name);
    std::fs::create_dir_all(&data_dir).unwrap();
    let config = dir.path().join(format!("{name}.hcl"));
    std::fs::write(
        &config,
        format!(
            r#"
data_dir = "{data_dir}"
scheduler {{
  address = "127.0.0.1:{port}"
  acl {{ enabled = false }}
}}
storage "etcd" {{
  endpoints = ["{ETCD}"]
  prefix    = "{prefix}"
}}
"#,
            data_dir = data_dir.display(),
            port = free_port(),
        ),
    )
    .unwrap();
    Cairn::start(&["server", "--config", config.to_str().unwrap()]).await
}

async fn poll<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn get(server: &Cairn, path: &str) -> (u16, Value) {
    match http().get(server.url("scheduler", path)).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

async fn send(
    server: &Cairn,
    method: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = http()
        .request(method, server.url("scheduler", path))
        .header("X-Nomad-Token", token)
        .json(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

async fn leader_of(servers: &[&Cairn]) -> String {
    poll("the servers agree on a leader", || async {
        let mut seen = Vec::new();
        for server in servers {
            let (_, leader) = get(server, "/v1/status/leader").await;
            seen.push(leader.as_str().unwrap_or_default().to_owned());
        }
        (!seen[0].is_empty() && seen.iter().all(|leader| *leader == seen[0]))
            .then(|| seen[0].clone())
    })
    .await
}

fn node_body(id: &str, secret: &str, name: &str) -> Value {
    json!({"Node": {
        "ID": id,
        "SecretID": secret,
        "Datacenter": "dc1",
        "Name": name,
        "NodePool": "default",
        "HTTPAddr": "127.0.0.1:4646",
        "Status": "ready",
        "Attributes": {
            "kernel.name": "linux",
            "nomad.version": "1.10.0",
            "driver.raw_exec": "1",
            "unique.hostname": name,
        },
        "NodeResources": {
            "Cpu": {"CpuShares": 64000, "TotalCpuCores": 32},
            "Memory": {"MemoryMB": 65536},
            "Disk": {"DiskMB": 1000000},
            "MinDynamicPort": 20000,
            "MaxDynamicPort": 32000,
        },
        "Drivers": {"raw_exec": {"Detected": true, "Healthy": true, "HealthDescription": "Healthy"}},
    }})
}

fn big_job() -> Value {
    json!({"Job": {
        "ID": "big",
        "Name": "big",
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": COUNT,
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["1000"]},
                "Resources": {"CPU": 100, "MemoryMB": 64},
            }],
        }],
    }})
}

/// The IDs of the job's allocations the server wants running, sorted, once there are
/// [`COUNT`] of them.
async fn all_placed(server: &Cairn, what: &str) -> Vec<String> {
    poll(&format!("{COUNT} allocations placed ({what})"), || async {
        let (_, allocs) = get(server, "/v1/job/big/allocations").await;
        let mut ids: Vec<String> = allocs
            .as_array()?
            .iter()
            .filter(|alloc| alloc["DesiredStatus"] == "run")
            .filter_map(|alloc| alloc["ID"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        (ids.len() == COUNT).then_some(ids)
    })
    .await
}

/// The job's evaluation statuses, sorted.
async fn eval_statuses(server: &Cairn) -> Vec<String> {
    let (status, evals) = get(server, "/v1/job/big/evaluations").await;
    assert_eq!(status, 200, "{evals}");
    let mut statuses: Vec<String> = evals
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|eval| eval["Status"].as_str().map(str::to_owned))
        .collect();
    statuses.sort();
    statuses
}

fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[tokio::test]
async fn a_count_300_job_on_a_default_etcd_is_placed_whole_reads_the_same_on_the_follower_and_survives_a_restart()
 {
    let prefix = format!(
        "cairn-test-ha-scheduler-large-{}-{:08x}/",
        std::process::id(),
        random() as u32
    );
    let dir = tempfile::tempdir().unwrap();
    let first = server(&prefix, &dir, "a").await;
    let second = server(&prefix, &dir, "b").await;
    let leader = leader_of(&[&first, &second]).await;
    let (leading, following) = if leader == first.addr("scheduler") {
        (&first, &second)
    } else {
        (&second, &first)
    };

    for n in 0..3 {
        let id = format!(
            "00000000-0000-4000-8000-{:012x}",
            random() & 0xffff_ffff_ffff
        );
        let secret = format!(
            "00000000-0000-4000-8000-{:012x}",
            random() & 0xffff_ffff_ffff
        );
        let (status, body) = send(
            following,
            "PUT",
            "/v1/internal/node/register",
            &secret,
            &node_body(&id, &secret, &format!("large-{n}")),
        )
        .await;
        assert_eq!(status, 200, "node register through the follower: {body}");
    }
    let (status, body) = send(following, "POST", "/v1/jobs", "", &big_job()).await;
    assert_eq!(status, 200, "job register through the follower: {body}");

    let on_leader = all_placed(leading, "leader").await;
    let on_follower = all_placed(following, "follower").await;
    assert_eq!(
        on_follower, on_leader,
        "the follower reads what the leader wrote"
    );
    let statuses = poll("the evaluation completes", || async {
        let statuses = eval_statuses(following).await;
        statuses
            .iter()
            .any(|status| status == "complete")
            .then_some(statuses)
    })
    .await;
    assert!(
        !statuses
            .iter()
            .any(|status| status == "pending" || status == "failed"),
        "{statuses:?}"
    );
    let (_, summary) = get(following, "/v1/job/big/summary").await;
    eprintln!("summary through the follower: {}", summary["Summary"]);

    // Both die without a word; a new server on the same prefix reads everything back.
    assert!(!first.signal_and_wait("KILL").await.success());
    assert!(!second.signal_and_wait("KILL").await.success());
    let third = server(&prefix, &dir, "c").await;
    leader_of(&[&third]).await;
    let restarted = all_placed(&third, "after the restart").await;
    assert_eq!(restarted, on_leader);
    assert_eq!(eval_statuses(&third).await, statuses);
    third.stop().await;
}
