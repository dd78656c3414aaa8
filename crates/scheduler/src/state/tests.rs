//! Tests of the state writer: batching, rollback of a failed command, the plan applier's fit
//! re-check, version retention, and reloading from storage.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use storage::MemStorage;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::structs::*;

fn job(id: &str, count: i64) -> Job {
    Job {
        region: "global".to_owned(),
        namespace: DEFAULT_NAMESPACE.to_owned(),
        id: id.to_owned(),
        name: id.to_owned(),
        job_type: JOB_TYPE_SERVICE.to_owned(),
        priority: 50,
        datacenters: vec!["*".to_owned()],
        node_pool: DEFAULT_NODE_POOL.to_owned(),
        task_groups: vec![TaskGroup {
            name: "web".to_owned(),
            count,
            tasks: vec![Task {
                name: "server".to_owned(),
                driver: "raw_exec".to_owned(),
                resources: Resources {
                    cpu: 600,
                    memory_mb: 100,
                    ..Resources::default()
                },
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

fn node(id: &str, cpu: i64) -> Node {
    Node {
        id: id.to_owned(),
        secret_id: format!("secret-{id}"),
        name: id.to_owned(),
        datacenter: "dc1".to_owned(),
        status: NODE_STATUS_READY.to_owned(),
        node_resources: NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: cpu,
                ..NodeCpuResources::default()
            },
            memory: NodeMemoryResources { memory_mb: 4096 },
            disk: NodeDiskResources { disk_mb: 10_000 },
            ..NodeResources::default()
        },
        ..Node::default()
    }
}

fn alloc(id: &str, node_id: &str, job: &Job, cpu: i64) -> Allocation {
    let mut tasks = BTreeMap::new();
    tasks.insert(
        "server".to_owned(),
        AllocatedTaskResources {
            cpu: AllocatedCpuResources {
                cpu_shares: cpu,
                ..AllocatedCpuResources::default()
            },
            ..AllocatedTaskResources::default()
        },
    );
    Allocation {
        id: id.to_owned(),
        namespace: job.namespace.clone(),
        node_id: node_id.to_owned(),
        job_id: job.id.clone(),
        task_group: "web".to_owned(),
        desired_status: ALLOC_DESIRED_RUN.to_owned(),
        client_status: ALLOC_CLIENT_PENDING.to_owned(),
        allocated_resources: AllocatedResources {
            tasks,
            ..AllocatedResources::default()
        },
        ..Allocation::default()
    }
}

struct Harness {
    storage: Arc<MemStorage>,
    store: StateStore,
    pending: Arc<Mutex<Vec<String>>>,
    shutdown: CancellationToken,
    /// Runs the writer (its loops stop when it is dropped).
    _runner: cluster::Runner,
}

async fn harness_over(storage: Arc<MemStorage>) -> Harness {
    let store = StateStore::open(storage.clone()).await.expect("open");
    let pending = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&pending);
    store.set_pending_sink(Box::new(move |evals| {
        if let Ok(mut seen) = sink.lock() {
            seen.extend(evals.iter().map(|eval| eval.id.clone()));
        }
    }));
    let shutdown = CancellationToken::new();
    let runner = cluster::Runner::embedded(shutdown.clone());
    let writer = store.clone();
    runner.leader_loop("state writer", move |term| run_writer(writer.clone(), term));
    Harness {
        storage,
        store,
        pending,
        shutdown,
        _runner: runner,
    }
}

async fn harness() -> Harness {
    harness_over(Arc::new(MemStorage::new())).await
}

fn register(job: Job) -> Command {
    Command::RegisterJob(Box::new(RegisterJob {
        job,
        submission: None,
        enforce_index: None,
        preserve_counts: false,
        eval_priority: None,
    }))
}

#[tokio::test]
async fn a_registered_job_is_published_with_a_pending_evaluation_handed_to_the_broker() {
    let h = harness().await;
    let applied = h
        .store
        .apply(register(job("web", 1)))
        .await
        .expect("register");
    let Outcome::Job {
        eval_id,
        job_modify_index,
        ..
    } = applied.outcome
    else {
        panic!("unexpected outcome {:?}", applied.outcome);
    };
    let snap = h.store.snapshot();
    assert_eq!(snap.index, applied.index);
    let stored = snap.job("default", "web").expect("job");
    assert_eq!(stored.version, 0);
    assert_eq!(stored.job_modify_index, job_modify_index);
    assert_eq!(
        snap.eval(&eval_id).map(|e| e.status.as_str()),
        Some("pending")
    );
    assert_eq!(
        h.pending.lock().map(|p| p.clone()).unwrap_or_default(),
        vec![eval_id]
    );
    h.shutdown.cancel();
}

#[tokio::test]
async fn a_failed_command_in_a_batch_changes_nothing_while_the_others_commit() {
    let h = harness().await;
    h.store.apply(register(job("a", 1))).await.expect("first");
    let conflicting = Command::RegisterJob(Box::new(RegisterJob {
        job: job("a", 5),
        submission: None,
        enforce_index: Some(0),
        preserve_counts: false,
        eval_priority: None,
    }));
    let (bad, good) = tokio::join!(
        h.store.apply(conflicting),
        h.store.apply(register(job("b", 1)))
    );
    assert!(matches!(bad, Err(crate::Error::Conflict(_))), "{bad:?}");
    good.expect("the other command commits");
    let snap = h.store.snapshot();
    assert_eq!(
        snap.job("default", "a").map(|j| j.task_groups[0].count),
        Some(1)
    );
    assert!(snap.job("default", "b").is_some());
    h.shutdown.cancel();
}

#[tokio::test]
async fn reregistering_an_unchanged_job_keeps_its_version_and_changes_bump_it() {
    let h = harness().await;
    h.store.apply(register(job("web", 1))).await.expect("v0");
    h.store.apply(register(job("web", 1))).await.expect("same");
    assert_eq!(
        h.store.snapshot().job("default", "web").map(|j| j.version),
        Some(0)
    );
    h.store.apply(register(job("web", 2))).await.expect("v1");
    assert_eq!(
        h.store.snapshot().job("default", "web").map(|j| j.version),
        Some(1)
    );
    h.shutdown.cancel();
}

#[tokio::test]
async fn only_the_latest_six_versions_are_kept() {
    let h = harness().await;
    for count in 1..=8 {
        h.store
            .apply(register(job("web", count)))
            .await
            .expect("register");
    }
    let snap = h.store.snapshot();
    let versions: Vec<u64> = snap
        .job_versions_of(&JobKey::new("default", "web"))
        .iter()
        .map(|j| j.version)
        .collect();
    assert_eq!(versions, vec![7, 6, 5, 4, 3, 2]);
    h.shutdown.cancel();
}

fn plan_for(job: &Job, eval_id: &str, allocs: Vec<Allocation>) -> Command {
    let mut node_allocation: BTreeMap<String, Vec<Arc<Allocation>>> = BTreeMap::new();
    for alloc in allocs {
        node_allocation
            .entry(alloc.node_id.clone())
            .or_default()
            .push(Arc::new(alloc));
    }
    Command::ApplyPlan(Box::new(Plan {
        eval: Evaluation {
            id: eval_id.to_owned(),
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            status: EVAL_STATUS_COMPLETE.to_owned(),
            ..Evaluation::default()
        },
        job_modify_index: job.job_modify_index,
        node_allocation,
        ..Plan::default()
    }))
}

#[test]
fn the_plan_applier_stores_the_plans_allocation_itself_and_a_reapplication_sets_the_same_fields() {
    let job = job("web", 1);
    let mut base = Snapshot::default();
    base.nodes
        .insert("n1".to_owned(), Arc::new(node("n1", 1000)));
    let fresh = |base: &Snapshot| {
        let mut draft = draft::Draft::new(base.clone(), storage::TxnLimits::UNBOUNDED);
        draft.snap.index = 7;
        draft
    };
    let mut command = plan_for(&job, "e1", vec![alloc("a1", "n1", &job, 600)]);
    let mut draft = fresh(&base);
    fsm::apply(&mut draft, &mut command, 100).expect("apply");
    let fsm::Command::ApplyPlan(plan) = &command else {
        unreachable!()
    };
    let stored = Arc::clone(draft.snap.alloc("a1").expect("stored"));
    assert!(
        Arc::ptr_eq(&plan.node_allocation["n1"][0], &stored),
        "the state holds the plan's allocation, not a copy"
    );
    let fields = |alloc: &Allocation| {
        (
            alloc.create_index,
            alloc.modify_index,
            alloc.alloc_modify_index,
            alloc.create_time,
            alloc.modify_time,
        )
    };
    assert_eq!(fields(&stored), (7, 7, 7, 100, 100));

    // Applied again on the same base (the writer's rebuild), later: the same allocation, its
    // first creation time kept.
    let mut again = fresh(&base);
    fsm::apply(&mut again, &mut command, 200).expect("apply again");
    let restored = again.snap.alloc("a1").expect("stored again");
    assert_eq!(fields(restored), (7, 7, 7, 100, 200));
    assert_eq!(
        Allocation {
            modify_time: 100,
            ..(**restored).clone()
        },
        *stored
    );
    assert_eq!(again.snap.node_used("n1"), draft.snap.node_used("n1"));
}

#[tokio::test]
async fn the_plan_applier_refuses_a_node_that_no_longer_fits() {
    let h = harness().await;
    h.store
        .apply(Command::UpsertNode(Box::new(node("n1", 1000))))
        .await
        .expect("node");
    h.store.apply(register(job("web", 2))).await.expect("job");
    let job = h
        .store
        .snapshot()
        .job("default", "web")
        .cloned()
        .expect("job");
    let first = h
        .store
        .apply(plan_for(&job, "e1", vec![alloc("a1", "n1", &job, 600)]))
        .await
        .expect("plan 1");
    let Outcome::Plan(result) = first.outcome else {
        panic!("not a plan result");
    };
    assert_eq!(result.committed_nodes, vec!["n1".to_owned()]);
    let second = h
        .store
        .apply(plan_for(&job, "e2", vec![alloc("a2", "n1", &job, 600)]))
        .await
        .expect("plan 2");
    let Outcome::Plan(result) = second.outcome else {
        panic!("not a plan result");
    };
    assert_eq!(result.refused_nodes, vec!["n1".to_owned()]);
    let snap = h.store.snapshot();
    assert!(snap.alloc("a2").is_none());
    assert_eq!(snap.node_used("n1").cpu, 600);
    h.shutdown.cancel();
}

#[tokio::test]
async fn the_plan_applier_refuses_a_port_another_plan_took_on_the_node() {
    let h = harness().await;
    h.store
        .apply(Command::UpsertNode(Box::new(node("n1", 10_000))))
        .await
        .expect("node");
    h.store.apply(register(job("web", 2))).await.expect("job");
    let job = h
        .store
        .snapshot()
        .job("default", "web")
        .cloned()
        .expect("job");
    let with_port = |id: &str, port: i64| {
        let mut alloc = alloc(id, "n1", &job, 100);
        alloc.allocated_resources.shared.ports = vec![
            serde_json::json!({"Label": "http", "Value": port, "To": 0, "HostIP": "127.0.0.1"}),
        ];
        alloc
    };
    let outcome = |applied: super::Applied| match applied.outcome {
        Outcome::Plan(result) => result,
        _ => panic!("not a plan result"),
    };
    let first = h
        .store
        .apply(plan_for(&job, "e1", vec![with_port("a1", 24_000)]))
        .await
        .expect("plan 1");
    assert_eq!(outcome(first).committed_nodes, vec!["n1".to_owned()]);
    // Planned from the same snapshot by another worker: the same port is refused.
    let second = h
        .store
        .apply(plan_for(&job, "e2", vec![with_port("a2", 24_000)]))
        .await
        .expect("plan 2");
    assert_eq!(outcome(second).refused_nodes, vec!["n1".to_owned()]);
    let third = h
        .store
        .apply(plan_for(&job, "e3", vec![with_port("a3", 24_001)]))
        .await
        .expect("plan 3");
    assert_eq!(outcome(third).committed_nodes, vec!["n1".to_owned()]);
    h.shutdown.cancel();
}

#[tokio::test]
async fn a_terminal_allocation_frees_its_node_and_unblocks_blocked_evaluations() {
    let h = harness().await;
    h.store
        .apply(Command::UpsertNode(Box::new(node("n1", 1000))))
        .await
        .expect("node");
    h.store.apply(register(job("web", 1))).await.expect("job");
    let job = h
        .store
        .snapshot()
        .job("default", "web")
        .cloned()
        .expect("job");
    h.store
        .apply(plan_for(&job, "e1", vec![alloc("a1", "n1", &job, 600)]))
        .await
        .expect("plan");
    let blocked = Evaluation {
        id: "blocked".to_owned(),
        namespace: "default".to_owned(),
        job_id: "other".to_owned(),
        status: EVAL_STATUS_BLOCKED.to_owned(),
        ..Evaluation::default()
    };
    h.store
        .apply(Command::UpsertEvals(vec![blocked]))
        .await
        .expect("blocked eval");
    let update = AllocClientUpdate {
        id: "a1".to_owned(),
        node_id: "n1".to_owned(),
        client_status: ALLOC_CLIENT_COMPLETE.to_owned(),
        ..AllocClientUpdate::default()
    };
    h.store
        .apply(Command::ClientAllocUpdates(vec![update]))
        .await
        .expect("client update");
    let snap = h.store.snapshot();
    assert_eq!(snap.node_used("n1").cpu, 0);
    assert_eq!(
        snap.eval("blocked").map(|e| e.status.as_str()),
        Some("pending")
    );
    h.shutdown.cancel();
}

#[tokio::test]
async fn a_reloaded_store_sees_exactly_what_was_published() {
    let h = harness().await;
    h.store
        .apply(Command::UpsertNode(Box::new(node("n1", 1000))))
        .await
        .expect("node");
    h.store.apply(register(job("web", 1))).await.expect("job");
    let job = h
        .store
        .snapshot()
        .job("default", "web")
        .cloned()
        .expect("job");
    h.store
        .apply(plan_for(&job, "e1", vec![alloc("a1", "n1", &job, 600)]))
        .await
        .expect("plan");
    h.shutdown.cancel();
    let before = h.store.snapshot();
    let reloaded = StateStore::open(h.storage.clone()).await.expect("reopen");
    let after = reloaded.snapshot();
    assert_eq!(after.index, before.index);
    assert_eq!(after.tables, before.tables);
    assert_eq!(after.jobs, before.jobs);
    assert_eq!(after.job_versions, before.job_versions);
    assert_eq!(after.allocs, before.allocs);
    assert_eq!(after.allocs_by_node, before.allocs_by_node);
    assert_eq!(after.node_usage, before.node_usage);
    assert_eq!(after.nodes, before.nodes);
    assert_eq!(after.evals, before.evals);
    assert_eq!(after.blocked_evals, before.blocked_evals);
    assert_eq!(after.evals_by_job, before.evals_by_job);
}

#[tokio::test]
async fn a_new_writer_catches_up_with_what_another_writer_committed() {
    let h = harness().await;
    let follower = StateStore::open(h.storage.clone()).await.expect("open");
    assert!(!follower.catch_up().await.expect("catch up"), "nothing new");
    h.store.apply(register(job("web", 1))).await.expect("job");
    assert!(follower.snapshot().job("default", "web").is_none());
    assert!(follower.catch_up().await.expect("catch up"));
    assert_eq!(follower.snapshot().index, h.store.snapshot().index);
    assert!(follower.snapshot().job("default", "web").is_some());
    assert!(!follower.catch_up().await.expect("catch up"), "caught up");
    h.shutdown.cancel();
}

#[tokio::test]
async fn commands_wait_while_not_leading_and_fail_once_the_store_is_closed() {
    let store = StateStore::open(Arc::new(MemStorage::new()))
        .await
        .expect("open");
    let leadership = Arc::new(cluster::ManualLeadership::new(true));
    let runner = cluster::Runner::new(leadership.clone(), CancellationToken::new());
    let writer = store.clone();
    runner.leader_loop("state writer", move |term| run_writer(writer.clone(), term));
    store
        .apply(register(job("a", 1)))
        .await
        .expect("while leading");

    leadership.set(false);
    // The writer has stopped once it gave the queue back.
    let writer_stopped = || store.inner.receiver.lock().is_ok_and(|slot| slot.is_some());
    for _ in 0..500 {
        if writer_stopped() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(writer_stopped(), "the writer stops when leadership is lost");
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("b", 1))).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "no writer runs: the command waits");
    leadership.set(true);
    let applied = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the next writer applies it")
        .expect("joined");
    assert!(applied.is_ok(), "{applied:?}");
    assert!(store.snapshot().job("default", "b").is_some());

    store.close();
    assert!(matches!(
        store.apply(register(job("c", 1))).await,
        Err(Error::ShuttingDown)
    ));
    runner.shutdown_and_wait().await;
}

/// MemStorage whose transactions can be held at the door and made to fail, to see what the
/// pipelined writer does while a commit is in flight and when it fails.
#[derive(Debug, Default)]
struct GatedStorage {
    inner: MemStorage,
    /// While set, a transaction waits (after saying so on `entered`) until it is cleared.
    hold: tokio::sync::watch::Sender<bool>,
    entered: tokio::sync::Notify,
    /// The next transaction fails.
    fail_next: std::sync::atomic::AtomicBool,
}

type Fut<'a, T> = futures::future::BoxFuture<'a, storage::Result<T>>;

impl storage::Storage for GatedStorage {
    fn get<'a, 'b, 'c>(&'a self, key: &'b [u8]) -> Fut<'c, Option<storage::KeyValue>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.inner.get(key)
    }

    fn scan<'a, 'c>(
        &'a self,
        range: storage::KeyRange,
        limit: Option<usize>,
    ) -> Fut<'c, storage::ScanResult>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.scan(range, limit)
    }

    fn txn<'a, 'c>(&'a self, txn: storage::Txn) -> Fut<'c, storage::TxnResult>
    where
        'a: 'c,
        Self: 'c,
    {
        Box::pin(async move {
            let mut hold = self.hold.subscribe();
            if *hold.borrow_and_update() {
                self.entered.notify_one();
                let _ = hold.wait_for(|held| !*held).await;
            }
            if self
                .fail_next
                .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                return Err(storage::Error::Backend("injected failure".to_owned()));
            }
            self.inner.txn(txn).await
        })
    }

    fn revision<'a, 'c>(&'a self) -> Fut<'c, storage::Revision>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.revision()
    }

    fn range_revision<'a, 'c>(&'a self, range: storage::KeyRange) -> Fut<'c, storage::Revision>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.range_revision(range)
    }

    fn watch<'a, 'c>(
        &'a self,
        range: storage::KeyRange,
        after: storage::Revision,
    ) -> Fut<'c, storage::WatchStream>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.watch(range, after)
    }

    fn snapshot<'a, 'c>(&'a self) -> Fut<'c, storage::Snapshot>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.snapshot()
    }

    fn restore<'a, 'b, 'c>(&'a self, snapshot: &'b storage::Snapshot) -> Fut<'c, storage::Revision>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.inner.restore(snapshot)
    }

    fn close<'a, 'c>(&'a self) -> Fut<'c, ()>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.close()
    }
}

async fn gated_writer() -> (Arc<GatedStorage>, StateStore, cluster::Runner) {
    let storage = Arc::new(GatedStorage::default());
    let store = StateStore::open(storage.clone()).await.expect("open");
    let runner = cluster::Runner::embedded(CancellationToken::new());
    let writer = store.clone();
    runner.leader_loop("state writer", move |term| run_writer(writer.clone(), term));
    (storage, store, runner)
}

#[tokio::test]
async fn the_next_batch_is_applied_while_one_commits_and_published_only_after_both_commits() {
    let (storage, store, runner) = gated_writer().await;
    let index = store.snapshot().index;
    storage.hold.send_replace(true);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("web", 1))).await })
    };
    storage.entered.notified().await;
    // Batch k is committing: batch k+1 (a new version of the same job) is applied on its draft.
    let second = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("web", 2))).await })
    };
    for _ in 0..20 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        store.snapshot().index,
        index,
        "nothing uncommitted is visible"
    );
    assert!(store.snapshot().job("default", "web").is_none());
    assert!(!first.is_finished() && !second.is_finished());
    storage.hold.send_replace(false);
    let first = first.await.expect("joined").expect("first committed");
    let second = second.await.expect("joined").expect("second committed");
    assert_eq!(first.index, index + 1);
    assert_eq!(second.index, index + 2);
    let snap = store.snapshot();
    assert_eq!(snap.index, index + 2);
    assert_eq!(snap.job("default", "web").map(|job| job.version), Some(1));
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_failed_commit_fails_only_its_batch_and_the_next_is_rebuilt_on_committed_state() {
    let (storage, store, runner) = gated_writer().await;
    let index = store.snapshot().index;
    storage.hold.send_replace(true);
    storage
        .fail_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("web", 1))).await })
    };
    storage.entered.notified().await;
    let second = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("web", 2))).await })
    };
    for _ in 0..20 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    storage.hold.send_replace(false);
    let first = first.await.expect("joined");
    assert!(matches!(first, Err(Error::Internal(_))), "{first:?}");
    let second = second.await.expect("joined").expect("second committed");
    assert_eq!(
        second.index,
        index + 1,
        "the failed batch's index is reused"
    );
    let snap = store.snapshot();
    assert_eq!(snap.index, index + 1);
    let web = snap.job("default", "web").cloned().expect("job");
    assert_eq!(
        (web.version, web.create_index, web.task_groups[0].count),
        (0, index + 1, 2),
        "the second registration created the job: the first never happened"
    );
    assert_eq!(
        snap.evals.len(),
        1,
        "only the second registration's evaluation"
    );
    // What is stored is what is published.
    let reloaded = StateStore::open(storage.clone()).await.expect("reopen");
    assert_eq!(reloaded.snapshot().index, snap.index);
    assert_eq!(reloaded.snapshot().jobs, snap.jobs);
    assert_eq!(reloaded.snapshot().evals, snap.evals);
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn commands_arriving_while_a_batch_commits_go_together_into_the_next_commit() {
    let (storage, store, runner) = gated_writer().await;
    let index = store.snapshot().index;
    storage.hold.send_replace(true);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("first", 1))).await })
    };
    storage.entered.notified().await;
    let waiting: Vec<_> = (0..5)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.apply(register(job(&format!("job-{i}"), 1))).await })
        })
        .collect();
    // Every command is queued or applied before the held commit returns.
    for _ in 0..20 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    storage.hold.send_replace(false);
    assert_eq!(
        first.await.expect("joined").expect("first").index,
        index + 1
    );
    for handle in waiting {
        let applied = handle.await.expect("joined").expect("committed");
        assert_eq!(applied.index, index + 2, "one commit for all five");
    }
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_command_failing_after_a_change_in_a_batch_changes_nothing_while_the_others_commit() {
    let (storage, store, runner) = gated_writer().await;
    store
        .apply(Command::UpsertNode(Box::new(node("n1", 1000))))
        .await
        .expect("node");
    store.apply(register(job("web", 1))).await.expect("job");
    let web = store
        .snapshot()
        .job("default", "web")
        .cloned()
        .expect("job");
    store
        .apply(plan_for(&web, "e1", vec![alloc("a1", "n1", &web, 100)]))
        .await
        .expect("plan");
    let index = store.snapshot().index;
    storage.hold.send_replace(true);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("first", 1))).await })
    };
    storage.entered.notified().await;
    // One batch: a registration, a client report whose first update changes the allocation
    // and whose second fails (not its node), another registration.
    let update = |node_id: &str| AllocClientUpdate {
        id: "a1".to_owned(),
        node_id: node_id.to_owned(),
        client_status: ALLOC_CLIENT_RUNNING.to_owned(),
        ..AllocClientUpdate::default()
    };
    let before = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("before", 1))).await })
    };
    tokio::task::yield_now().await;
    let failing = {
        let store = store.clone();
        let updates = vec![update("n1"), update("elsewhere")];
        tokio::spawn(async move { store.apply(Command::ClientAllocUpdates(updates)).await })
    };
    tokio::task::yield_now().await;
    let after = {
        let store = store.clone();
        tokio::spawn(async move { store.apply(register(job("after", 1))).await })
    };
    for _ in 0..20 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    storage.hold.send_replace(false);
    first.await.expect("joined").expect("first");
    let failing = failing.await.expect("joined");
    assert!(matches!(failing, Err(Error::BadRequest(_))), "{failing:?}");
    for handle in [before, after] {
        let applied = handle.await.expect("joined").expect("committed");
        assert_eq!(applied.index, index + 2, "one commit for the batch");
    }
    let snap = store.snapshot();
    assert_eq!(
        snap.alloc("a1").map(|alloc| alloc.client_status.clone()),
        Some(ALLOC_CLIENT_PENDING.to_owned()),
        "the failed report changed nothing"
    );
    assert!(snap.job("default", "before").is_some() && snap.job("default", "after").is_some());
    let reloaded = StateStore::open(storage.clone()).await.expect("reopen");
    assert_eq!(reloaded.snapshot().allocs, snap.allocs);
    assert_eq!(reloaded.snapshot().jobs, snap.jobs);
    assert_eq!(reloaded.snapshot().evals, snap.evals);
    runner.shutdown_and_wait().await;
}

#[path = "split_tests.rs"]
mod split;

#[tokio::test]
async fn a_collection_larger_than_one_pass_goes_in_bounded_passes_until_nothing_is_left() {
    let h = harness().await;
    // Each stopped job leaves two versions and two complete evaluations: five records.
    let jobs = gc::MAX_REMOVALS / 2;
    for i in 0..jobs {
        let id = format!("done-{i:04}");
        h.store.apply(register(job(&id, 0))).await.expect("job");
        h.store
            .apply(Command::DeregisterJob(DeregisterJob {
                namespace: DEFAULT_NAMESPACE.to_owned(),
                job_id: id,
                purge: false,
                eval_priority: None,
            }))
            .await
            .expect("stopped");
    }
    let evals: Vec<Evaluation> = h
        .store
        .snapshot()
        .evals
        .values()
        .map(|eval| Evaluation {
            status: EVAL_STATUS_COMPLETE.to_owned(),
            ..(**eval).clone()
        })
        .collect();
    h.store
        .apply(Command::UpsertEvals(evals))
        .await
        .expect("evaluations complete");
    let pass = GcPass::everything_now();
    let mut passes = Vec::new();
    loop {
        let applied = h.store.apply(Command::Gc(pass)).await.expect("collected");
        let Outcome::Gc(report) = applied.outcome else {
            panic!("not a gc report");
        };
        passes.push(report);
        if !report.more {
            break;
        }
    }
    assert!(passes.len() >= 3, "{passes:?}");
    for report in &passes {
        // A pass stops at the first job after it is full: at most one job's records over.
        let total = report.evals + report.allocs + report.jobs + report.job_versions;
        assert!(total < gc::MAX_REMOVALS + 5, "{report:?}");
    }
    let removed: usize = passes.iter().map(|report| report.jobs).sum();
    assert_eq!(removed, jobs);
    let snap = h.store.snapshot();
    assert!(snap.jobs.is_empty() && snap.job_versions.is_empty() && snap.evals.is_empty());
    assert!(snap.evals_by_job.is_empty());
    h.shutdown.cancel();
    let reloaded = StateStore::open(h.storage.clone()).await.expect("reopen");
    assert!(reloaded.snapshot().jobs.is_empty() && reloaded.snapshot().evals.is_empty());
}
