//! A plan whose commit fails is planned again by the worker, not dropped: the evaluation
//! finishes on the same leader (issue 18: a plan split into several transactions to fit
//! etcd's limits can fail between its parts; any failed commit used to leave its evaluation
//! pending until another leader re-queued it).
//!
//! Where it sits: a scheduler over [`FlakyStorage`], a `MemStorage` that can be told to fail
//! the next transaction writing an allocation (a plan's commit), driven through the router
//! with `support`'s in-process harness.

#[allow(
    dead_code,
    reason = "shared with api.rs and acl.rs; this binary uses part of it"
)]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use storage::{
    KeyRange, KeyValue, MemStorage, Op, Revision, ScanResult, Snapshot, Storage, Txn, TxnResult,
    WatchStream,
};
use support::Scheduler;
use tokio::time::Instant;

/// A `MemStorage` that fails the next `fail_plans` transactions writing under
/// `scheduler/allocs/`.
#[derive(Debug, Default)]
struct FlakyStorage {
    inner: MemStorage,
    fail_plans: AtomicUsize,
    failed: AtomicUsize,
}

#[async_trait::async_trait]
impl Storage for FlakyStorage {
    async fn get(&self, key: &[u8]) -> storage::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> storage::Result<ScanResult> {
        self.inner.scan(range, limit).await
    }

    async fn txn(&self, txn: Txn) -> storage::Result<TxnResult> {
        let writes_allocs = txn.success.iter().any(|op| match op {
            Op::Put { key, .. } | Op::Delete { key } => key.starts_with(b"scheduler/allocs/"),
            _ => false,
        });
        if writes_allocs
            && self
                .fail_plans
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(storage::Error::Backend("injected plan failure".to_owned()));
        }
        self.inner.txn(txn).await
    }

    async fn revision(&self) -> storage::Result<Revision> {
        self.inner.revision().await
    }

    async fn range_revision(&self, range: KeyRange) -> storage::Result<Revision> {
        self.inner.range_revision(range).await
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> storage::Result<WatchStream> {
        self.inner.watch(range, after).await
    }

    async fn snapshot(&self) -> storage::Result<Snapshot> {
        self.inner.snapshot().await
    }

    async fn restore(&self, snapshot: &Snapshot) -> storage::Result<Revision> {
        self.inner.restore(snapshot).await
    }

    async fn close(&self) -> storage::Result<()> {
        self.inner.close().await
    }
}

async fn send(s: &Scheduler, method: &str, path: &str, token: &str, body: Value) -> Value {
    let request = testkit::request(method, path)
        .header("X-Nomad-Token", token)
        .body(axum::body::Body::from(body.to_string()))
        .expect("request");
    s.handle(request).await.expect(StatusCode::OK).json()
}

#[tokio::test]
async fn a_plan_whose_commit_failed_is_planned_again_and_the_job_placed() {
    let storage = Arc::new(FlakyStorage::default());
    let s = Scheduler::open(storage.clone(), scheduler::Config::default()).await;
    let (id, secret) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    let node = json!({"Node": {
        "ID": id, "SecretID": secret, "Datacenter": "dc1", "Name": "n1", "NodePool": "default",
        "HTTPAddr": "127.0.0.1:4646", "Status": "ready",
        "Attributes": {"kernel.name": "linux", "driver.raw_exec": "1", "unique.hostname": "n1"},
        "NodeResources": {"Cpu": {"CpuShares": 8000, "TotalCpuCores": 4},
            "Memory": {"MemoryMB": 16384}, "Disk": {"DiskMB": 100000},
            "MinDynamicPort": 20000, "MaxDynamicPort": 32000},
        "Drivers": {"raw_exec": {"Detected": true, "Healthy": true}},
    }});
    send(&s, "PUT", "/v1/internal/node/register", &secret, node).await;
    // The first two plan commits fail.
    storage.fail_plans.store(2, Ordering::SeqCst);
    let job = json!({"Job": {"ID": "web", "Name": "web", "Type": "service",
        "Datacenters": ["dc1"], "TaskGroups": [{"Name": "web", "Count": 3, "Tasks": [{
            "Name": "server", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": ["1000"]},
            "Resources": {"CPU": 100, "MemoryMB": 64}}]}]}});
    let registered = send(&s, "POST", "/v1/jobs", "", job).await;
    let eval_id = registered["EvalID"].as_str().expect("EvalID").to_owned();

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let eval = send(
            &s,
            "GET",
            &format!("/v1/evaluation/{eval_id}"),
            "",
            Value::Null,
        )
        .await;
        let allocs = send(&s, "GET", "/v1/job/web/allocations", "", Value::Null).await;
        let placed = allocs.as_array().map_or(0, Vec::len);
        if eval["Status"] == "complete" && placed == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not placed after two failed commits: eval {eval}, {placed} allocations"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        storage.failed.load(Ordering::SeqCst),
        2,
        "both failures were met"
    );
}
