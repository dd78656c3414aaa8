//! The scheduler on several servers, end to end: two real `cairn server` processes (the built
//! binary, scheduler only, ACLs off) over the local etcd on 127.0.0.1:2379 under a prefix of
//! their own. A job registered through the follower is placed and reads the same on both; the
//! status endpoints agree on the leader; when the leader stops, the other server leads and
//! takes writes; when the leader is killed (SIGKILL) under registrations sent through the
//! follower, every acknowledged one is on the survivor. And large commits on the etcd at its
//! default limits (`--max-txn-ops` 128, `--max-request-bytes` 1.5 MiB): a job of count 300
//! registered through the follower is placed completely (its plan is far larger than one etcd
//! transaction, so the leader's writer commits it in parts), reads the same through the
//! follower as on the leader, and is all there after both servers are killed with SIGKILL and a
//! new one starts on the same prefix.
//!
//! Invariants: each test uses a fresh etcd prefix, so runs never see each other's keys; every
//! wait is a bounded poll; the servers are killed when the test's handles drop.

#[allow(dead_code, reason = "shared with cli.rs; this binary uses part of it")]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Cairn, free_port, http};

/// The bound of every wait (elections, placement) on a loaded machine.
const WAIT: Duration = Duration::from_secs(90);

/// The etcd that `scripts/services` runs.
const ETCD: &str = "http://127.0.0.1:2379";

/// Starts one `cairn server` running the scheduler alone on etcd under `prefix`.
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
        tokio::time::sleep(Duration::from_millis(100)).await;
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

/// The leader both servers name, once they agree on one.
async fn agreed_leader(servers: &[&Cairn]) -> String {
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

/// A raw_exec node named `name` with `cpu` MHz and `memory_mb` MB.
fn node_body(id: &str, secret: &str, name: &str, cpu: u64, memory_mb: u64) -> Value {
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
            "Cpu": {"CpuShares": cpu, "TotalCpuCores": 4},
            "Memory": {"MemoryMB": memory_mb},
            "Disk": {"DiskMB": 100000},
            "MinDynamicPort": 20000,
            "MaxDynamicPort": 32000,
        },
        "Drivers": {"raw_exec": {"Detected": true, "Healthy": true, "HealthDescription": "Healthy"}},
    }})
}

fn job(id: &str) -> Value {
    json!({"Job": {
        "ID": id,
        "Name": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["1000"]},
                "Resources": {"CPU": 100, "MemoryMB": 64},
            }],
        }],
    }})
}

/// The job's allocations the server wants running, once there is one.
async fn placed(server: &Cairn, job_id: &str) -> Vec<String> {
    poll(&format!("{job_id} placed"), || async {
        let (_, allocs) = get(server, &format!("/v1/job/{job_id}/allocations")).await;
        let ids: Vec<String> = allocs
            .as_array()?
            .iter()
            .filter(|alloc| alloc["DesiredStatus"] == "run")
            .filter_map(|alloc| alloc["ID"].as_str().map(str::to_owned))
            .collect();
        (ids.len() == 1).then_some(ids)
    })
    .await
}

/// Two servers under a fresh etcd prefix (named after `test`), once they agree on a leader.
struct Pair {
    prefix: String,
    dir: tempfile::TempDir,
    leading: Cairn,
    following: Cairn,
}

async fn pair(test: &str) -> Pair {
    let prefix = format!(
        "cairn-test-ha-scheduler-{test}-{}-{:08x}/",
        std::process::id(),
        random() as u32
    );
    let dir = tempfile::tempdir().unwrap();
    let first = server(&prefix, &dir, "a").await;
    let second = server(&prefix, &dir, "b").await;
    let leader = agreed_leader(&[&first, &second]).await;
    let (leading, following) = if leader == first.addr("scheduler") {
        (first, second)
    } else {
        assert_eq!(
            leader,
            second.addr("scheduler"),
            "the leader is one of the two"
        );
        (second, first)
    };
    Pair {
        prefix,
        dir,
        leading,
        following,
    }
}

#[tokio::test]
async fn a_job_registered_through_the_follower_is_placed_reads_the_same_on_both_and_the_survivor_takes_writes_after_the_leader_stops()
 {
    let Pair {
        leading: leading_server,
        following: following_server,
        ..
    } = pair("stop").await;
    let (leading, following) = (&leading_server, &following_server);
    let (_, peers) = get(following, "/v1/status/peers").await;
    let mut peers: Vec<String> = serde_json::from_value(peers).unwrap_or_default();
    peers.sort();
    let mut expected = vec![leading.addr("scheduler"), following.addr("scheduler")];
    expected.sort();
    assert_eq!(peers, expected);

    // A node and a job, both through the follower.
    let node_id = uuid();
    let secret = uuid();
    let (status, body) = send(
        following,
        "PUT",
        "/v1/internal/node/register",
        &secret,
        &node_body(&node_id, &secret, "ha-node", 8000, 16384),
    )
    .await;
    assert_eq!(status, 200, "node register through the follower: {body}");
    let (status, body) = send(following, "POST", "/v1/jobs", "", &job("web")).await;
    assert_eq!(status, 200, "job register through the follower: {body}");
    let (status, read) = get(following, "/v1/job/web").await;
    assert_eq!(status, 200, "read back on the follower at once: {read}");

    let on_follower = placed(following, "web").await;
    let on_leader = placed(leading, "web").await;
    assert_eq!(on_follower, on_leader);
    let (status, alloc) = get(following, &format!("/v1/allocation/{}", on_follower[0])).await;
    assert_eq!(status, 200, "{alloc}");
    assert_eq!(alloc["NodeID"], node_id.as_str());

    // The leader stops: the other server leads and takes writes.
    let survivor_addr = following.addr("scheduler");
    leading_server.stop().await;
    let leader = agreed_leader(&[following]).await;
    assert_eq!(leader, survivor_addr);
    // The node keeps heartbeating through the survivor, as its agent would.
    let heartbeat = format!("/v1/internal/node/{node_id}/heartbeat");
    let (status, body) = send(following, "PUT", &heartbeat, &secret, &json!({})).await;
    assert_eq!(status, 200, "heartbeat on the new leader: {body}");
    let (status, body) = send(following, "POST", "/v1/jobs", "", &job("after")).await;
    assert_eq!(status, 200, "register on the new leader: {body}");
    placed(following, "after").await;
    let (_, node) = get(following, &format!("/v1/node/{node_id}")).await;
    assert_eq!(node["Status"], "ready");
    following_server.stop().await;
}

/// 64 random bits (the standard library's per-process random hash keys).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A random UUID-shaped ID.
fn uuid() -> String {
    let (high, low) = (random(), random());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xfff,
        low >> 52,
        low & 0xffff_ffff_ffff
    )
}

#[tokio::test]
async fn every_registration_acknowledged_through_the_follower_survives_a_sigkill_of_the_leader() {
    let Pair {
        leading, following, ..
    } = pair("kill").await;

    // Registrations through the follower, one after another, while the leader is killed.
    let url = following.url("scheduler", "/v1/jobs");
    let writer = tokio::spawn(async move {
        let mut acknowledged = Vec::new();
        let mut refused = 0;
        for i in 0..60 {
            let id = format!("w-{i}");
            let answer = http()
                .post(&url)
                .json(&job(&id))
                .timeout(Duration::from_secs(30))
                .send()
                .await;
            match answer {
                Ok(response) if response.status().as_u16() == 200 => acknowledged.push(id),
                _ => refused += 1,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (acknowledged, refused)
    });
    poll("some registrations acknowledged", || async {
        let (_, jobs) = get(&following, "/v1/jobs").await;
        (jobs.as_array()?.len() >= 10).then_some(())
    })
    .await;
    let status = leading.signal_and_wait("KILL").await;
    assert!(!status.success(), "killed");
    let (acknowledged, refused) = writer.await.unwrap();
    eprintln!(
        "{} registrations acknowledged, {refused} refused across the leader's SIGKILL",
        acknowledged.len()
    );
    let survivor = following.addr("scheduler");
    assert_eq!(agreed_leader(&[&following]).await, survivor);
    assert!(
        acknowledged.iter().any(|id| id == "w-59"),
        "the survivor took the last writes: {acknowledged:?}"
    );
    for id in &acknowledged {
        let (status, read) = get(&following, &format!("/v1/job/{id}")).await;
        assert_eq!(status, 200, "acknowledged {id} is lost: {read}");
    }
    following.stop().await;
}

/// The large job's size: its plan writes this many allocations.
const COUNT: usize = 300;

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

#[tokio::test]
async fn a_count_300_job_on_a_default_etcd_is_placed_whole_reads_the_same_on_the_follower_and_survives_a_restart()
 {
    let Pair {
        prefix,
        dir,
        leading: leading_server,
        following: following_server,
    } = pair("large").await;
    let (leading, following) = (&leading_server, &following_server);

    for n in 0..3 {
        let (id, secret) = (uuid(), uuid());
        let (status, body) = send(
            following,
            "PUT",
            "/v1/internal/node/register",
            &secret,
            &node_body(&id, &secret, &format!("large-{n}"), 64000, 65536),
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
    assert!(!leading_server.signal_and_wait("KILL").await.success());
    assert!(!following_server.signal_and_wait("KILL").await.success());
    let third = server(&prefix, &dir, "c").await;
    agreed_leader(&[&third]).await;
    let restarted = all_placed(&third, "after the restart").await;
    assert_eq!(restarted, on_leader);
    assert_eq!(eval_statuses(&third).await, statuses);
    third.stop().await;
}
