//! Garbage collection of the scheduler's state, end to end through the API over a real redb
//! store: the leader's periodic collector on Nomad's thresholds (driven by an injected clock),
//! `PUT /v1/system/gc`, and a restarted scheduler's collector working from what is stored.
//!
//! Every test builds the same world: a fake node (client protocol), a live service job whose
//! allocation stays pending, a batch job whose allocation the node reports complete (the job is
//! then dead), and a service job that was stopped (its allocation stopped by the server). Polls
//! wait at most a few seconds; nothing sleeps long.

#[allow(dead_code, reason = "this binary uses a few of the shared helpers")]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use http::{Method, StatusCode};
use scheduler::{Config, GcClock, GcConfig};
use serde_json::{Value, json};
use storage::{Storage, StorageExt};
use support::{Reply, Scheduler};
use tokio::time::Instant;

const POLL_LIMIT: Duration = Duration::from_secs(10);
const HOUR_NANOS: i64 = 3_600_000_000_000;

/// A clock the test moves by hand.
#[derive(Clone)]
struct TestClock(Arc<AtomicI64>);

impl TestClock {
    fn new() -> TestClock {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| i64::try_from(elapsed.as_nanos()).unwrap_or(0));
        TestClock(Arc::new(AtomicI64::new(now)))
    }

    fn advance_hours(&self, hours: i64) {
        self.0.fetch_add(hours * HOUR_NANOS, Ordering::SeqCst);
    }

    fn gc_clock(&self) -> GcClock {
        let now = Arc::clone(&self.0);
        GcClock::new(move || now.load(Ordering::SeqCst))
    }
}

fn config(clock: &TestClock, interval: Duration) -> Config {
    Config {
        gc: GcConfig {
            interval,
            clock: clock.gc_clock(),
            ..GcConfig::default()
        },
        ..Config::default()
    }
}

async fn send(
    s: &Scheduler,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = testkit::request(method.as_str(), path);
    if let Some(token) = token {
        request = request.header("X-Nomad-Token", token);
    }
    let body = body.map_or_else(axum::body::Body::empty, |b| {
        axum::body::Body::from(b.to_string())
    });
    s.handle(request.body(body).expect("request")).await
}

async fn get(s: &Scheduler, path: &str) -> Reply {
    send(s, Method::GET, path, None, None).await
}

/// Polls `path` until `done` holds for its status and body (at most [`POLL_LIMIT`]).
async fn poll(s: &Scheduler, path: &str, mut done: impl FnMut(&Reply) -> bool) -> Reply {
    let deadline = Instant::now() + POLL_LIMIT;
    loop {
        let reply = get(s, path).await;
        if done(&reply) {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting on {path}: last answer {} {}",
            reply.status,
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn job(id: &str, job_type: &str) -> Value {
    json!({"Job": {
        "ID": id,
        "Name": id,
        "Type": job_type,
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/true"},
                "Resources": {"CPU": 100, "MemoryMB": 64},
            }],
        }],
    }})
}

fn array(reply: &Reply) -> Vec<Value> {
    reply.json().as_array().cloned().unwrap_or_default()
}

fn ids(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| item["ID"].as_str().map(str::to_owned))
        .collect()
}

/// What the world holds: the IDs of each job's evaluations and allocations.
#[derive(Debug)]
struct World {
    live_evals: Vec<String>,
    live_allocs: Vec<String>,
    done_evals: Vec<String>,
    done_allocs: Vec<String>,
    stopped_evals: Vec<String>,
    stopped_allocs: Vec<String>,
}

async fn job_evals(s: &Scheduler, id: &str) -> Vec<String> {
    ids(&array(&get(s, &format!("/v1/job/{id}/evaluations")).await))
}

async fn job_allocs(s: &Scheduler, id: &str) -> Vec<String> {
    ids(&array(&get(s, &format!("/v1/job/{id}/allocations")).await))
}

async fn build_world(s: &Scheduler) -> World {
    let node_id = uuid::Uuid::new_v4().to_string();
    let secret = uuid::Uuid::new_v4().to_string();
    let node = json!({"Node": {
        "ID": node_id, "SecretID": secret, "Datacenter": "dc1", "Name": "n1",
        "NodePool": "default", "Status": "ready",
        "Attributes": {"kernel.name": "linux", "driver.raw_exec": "1", "unique.hostname": "n1"},
        "NodeResources": {"Cpu": {"CpuShares": 8000}, "Memory": {"MemoryMB": 16384}, "Disk": {"DiskMB": 100000}},
        "Drivers": {"raw_exec": {"Detected": true, "Healthy": true}},
    }});
    send(
        s,
        Method::PUT,
        "/v1/internal/node/register",
        Some(&secret),
        Some(node),
    )
    .await
    .expect(StatusCode::OK);
    for (id, job_type) in [
        ("live", "service"),
        ("done", "batch"),
        ("stopped", "service"),
    ] {
        send(s, Method::PUT, "/v1/jobs", None, Some(job(id, job_type)))
            .await
            .expect(StatusCode::OK);
        poll(s, &format!("/v1/job/{id}/allocations"), |reply| {
            array(reply).len() == 1
        })
        .await;
    }
    // The batch job's allocation completes on its node.
    let done_alloc = job_allocs(s, "done").await.remove(0);
    let update = json!({"Allocs": [{
        "ID": done_alloc, "NodeID": node_id, "ClientStatus": "complete",
        "TaskStates": {"t": {"State": "dead", "Failed": false}},
    }]});
    send(
        s,
        Method::PUT,
        "/v1/internal/allocations",
        Some(&secret),
        Some(update),
    )
    .await
    .expect(StatusCode::OK);
    send(s, Method::DELETE, "/v1/job/stopped", None, None)
        .await
        .expect(StatusCode::OK);
    poll(s, "/v1/job/stopped/allocations", |reply| {
        array(reply)
            .iter()
            .all(|alloc| alloc["DesiredStatus"] == "stop")
    })
    .await;
    poll(s, "/v1/job/stopped/evaluations", |reply| {
        array(reply).iter().all(|eval| eval["Status"] == "complete")
    })
    .await;
    poll(s, "/v1/job/done", |reply| reply.json()["Status"] == "dead").await;
    World {
        live_evals: job_evals(s, "live").await,
        live_allocs: job_allocs(s, "live").await,
        done_evals: job_evals(s, "done").await,
        done_allocs: job_allocs(s, "done").await,
        stopped_evals: job_evals(s, "stopped").await,
        stopped_allocs: job_allocs(s, "stopped").await,
    }
}

/// The IDs of the records stored under `prefix` (`scheduler/allocs/` or `scheduler/evals/`).
async fn stored_ids(storage: &Arc<dyn Storage>, prefix: &str) -> Vec<String> {
    storage
        .scan_prefix(prefix.as_bytes())
        .await
        .expect("scan")
        .kvs
        .iter()
        .filter_map(|kv| {
            let value: Value = serde_json::from_slice(&kv.value).ok()?;
            value["ID"].as_str().map(str::to_owned)
        })
        .collect()
}

fn none_of(found: &[String], gone: &[String]) -> bool {
    gone.iter().all(|id| !found.contains(id))
}

fn all_of(found: &[String], kept: &[String]) -> bool {
    kept.iter().all(|id| found.contains(id))
}

/// The live job's records are all there, in the API and in the store.
async fn assert_live_kept(s: &Scheduler, storage: &Arc<dyn Storage>, world: &World) {
    assert_eq!(job_evals(s, "live").await, world.live_evals);
    assert_eq!(job_allocs(s, "live").await, world.live_allocs);
    get(s, "/v1/job/live").await.expect(StatusCode::OK);
    assert!(all_of(
        &stored_ids(storage, "scheduler/evals/").await,
        &world.live_evals
    ));
    assert!(all_of(
        &stored_ids(storage, "scheduler/allocs/").await,
        &world.live_allocs
    ));
}

#[tokio::test]
async fn terminal_state_older_than_nomads_thresholds_is_collected_and_live_state_kept() {
    let store = testkit::TempStore::new();
    let storage = store.storage();
    let clock = TestClock::new();
    let s = Scheduler::open(storage.clone(), config(&clock, Duration::from_millis(20))).await;
    let world = build_world(&s).await;
    assert!(!world.stopped_evals.is_empty() && !world.done_evals.is_empty());

    // Younger than every threshold: passes run, nothing goes.
    let index = s.state.table_indexes();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.state.table_indexes(), index, "nothing was collected");
    assert_eq!(job_evals(&s, "stopped").await, world.stopped_evals);

    // Two hours on: past eval_gc_threshold (1 h), not job_gc_threshold (4 h) nor
    // batch_eval_gc_threshold (24 h). The stopped job's evaluations and allocations go.
    clock.advance_hours(2);
    poll(&s, "/v1/job/stopped/evaluations", |reply| {
        array(reply).is_empty()
    })
    .await;
    poll(&s, "/v1/job/stopped/allocations", |reply| {
        array(reply).is_empty()
    })
    .await;
    for id in &world.stopped_allocs {
        get(&s, &format!("/v1/allocation/{id}"))
            .await
            .expect(StatusCode::NOT_FOUND);
    }
    get(&s, "/v1/job/stopped").await.expect(StatusCode::OK);
    assert_eq!(
        job_evals(&s, "done").await,
        world.done_evals,
        "batch evaluations wait 24 h"
    );
    assert_eq!(job_allocs(&s, "done").await, world.done_allocs);
    assert_live_kept(&s, &storage, &world).await;
    assert!(none_of(
        &stored_ids(&storage, "scheduler/evals/").await,
        &world.stopped_evals
    ));
    assert!(none_of(
        &stored_ids(&storage, "scheduler/allocs/").await,
        &world.stopped_allocs
    ));

    // Five hours on: past job_gc_threshold. The stopped job and the dead batch job go, with
    // everything of theirs.
    clock.advance_hours(3);
    poll(&s, "/v1/job/stopped", |reply| {
        reply.status == StatusCode::NOT_FOUND
    })
    .await;
    poll(&s, "/v1/job/done", |reply| {
        reply.status == StatusCode::NOT_FOUND
    })
    .await;
    assert!(job_allocs(&s, "done").await.is_empty());
    assert_live_kept(&s, &storage, &world).await;
    let evals = stored_ids(&storage, "scheduler/evals/").await;
    let allocs = stored_ids(&storage, "scheduler/allocs/").await;
    assert!(none_of(&evals, &world.done_evals) && none_of(&allocs, &world.done_allocs));
    assert_eq!(
        evals.len(),
        world.live_evals.len(),
        "only the live job's evaluations stay"
    );
    assert_eq!(allocs.len(), world.live_allocs.len());
    let jobs: Vec<String> = storage
        .scan_prefix(b"scheduler/jobs/")
        .await
        .expect("scan")
        .kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect();
    assert!(
        jobs.iter().all(|key| key.contains("\0live\0")),
        "only the live job's versions stay: {jobs:?}"
    );
}

#[tokio::test]
async fn system_gc_removes_everything_eligible_at_once_and_keeps_live_state() {
    let store = testkit::TempStore::new();
    let storage = store.storage();
    let clock = TestClock::new();
    // The periodic collector never fires during this test.
    let s = Scheduler::open(storage.clone(), config(&clock, Duration::from_secs(3600))).await;
    let world = build_world(&s).await;

    send(&s, Method::PUT, "/v1/system/gc", None, None)
        .await
        .expect(StatusCode::OK);
    // Answered once collected: no polling.
    get(&s, "/v1/job/stopped")
        .await
        .expect(StatusCode::NOT_FOUND);
    get(&s, "/v1/job/done").await.expect(StatusCode::NOT_FOUND);
    for id in world.stopped_allocs.iter().chain(&world.done_allocs) {
        get(&s, &format!("/v1/allocation/{id}"))
            .await
            .expect(StatusCode::NOT_FOUND);
    }
    for id in world.stopped_evals.iter().chain(&world.done_evals) {
        get(&s, &format!("/v1/evaluation/{id}"))
            .await
            .expect(StatusCode::NOT_FOUND);
    }
    assert_live_kept(&s, &storage, &world).await;
    let evals = stored_ids(&storage, "scheduler/evals/").await;
    assert_eq!(evals.len(), world.live_evals.len(), "{evals:?}");

    // Nothing more is eligible: a second forced pass changes nothing.
    let index = s.state.table_indexes();
    send(&s, Method::PUT, "/v1/system/gc", None, None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(s.state.table_indexes(), index);
}

#[tokio::test]
async fn system_gc_needs_a_management_token() {
    let store = testkit::TempStore::new();
    let config = Config {
        acl_enabled: true,
        dev_root_token: Some("root-token".to_owned()),
        ..Config::default()
    };
    let s = Scheduler::open(store.storage(), config).await;
    send(&s, Method::PUT, "/v1/system/gc", None, None)
        .await
        .expect(StatusCode::FORBIDDEN);
    send(&s, Method::PUT, "/v1/system/gc", Some("root-token"), None)
        .await
        .expect(StatusCode::OK);
    send(&s, Method::GET, "/v1/system/gc", Some("root-token"), None)
        .await
        .expect(StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn the_collector_picks_up_from_storage_after_a_restart() {
    let store = testkit::TempStore::new();
    let storage = store.storage();
    let clock = TestClock::new();
    let world = {
        let s = Scheduler::open(storage.clone(), config(&clock, Duration::from_secs(3600))).await;
        build_world(&s).await
        // Dropped: its loops stop; nothing of its collector survives but what is stored.
    };
    clock.advance_hours(5);
    let s = Scheduler::open(storage.clone(), config(&clock, Duration::from_millis(20))).await;
    poll(&s, "/v1/job/stopped", |reply| {
        reply.status == StatusCode::NOT_FOUND
    })
    .await;
    poll(&s, "/v1/job/done", |reply| {
        reply.status == StatusCode::NOT_FOUND
    })
    .await;
    assert_live_kept(&s, &storage, &world).await;
}
