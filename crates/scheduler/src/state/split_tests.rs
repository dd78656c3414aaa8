//! Tests of the writer over a store that bounds a transaction's size (as etcd does): batches
//! are cut between commands, a command too large for one transaction is committed in parts,
//! every transaction is within the limits and is a state smaller commands could have left, a
//! follower applying each transaction and a reload both end equal to the leader, and a failure
//! between the parts leaves only whole parts.
//!
//! Where it sits: a child of `state::tests` (its fixtures: `job`, `node`, `alloc`, `register`,
//! `plan_for`). [`Limited`] is a `MemStorage` that refuses a transaction its limits do not
//! allow, as etcd would, and can fail the n-th transaction from now.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use storage::{KeyRange, Storage, TxnLimits};

use super::*;

/// A `MemStorage` with etcd-like limits.
#[derive(Debug)]
struct Limited {
    inner: MemStorage,
    limits: TxnLimits,
    /// Transactions accepted, and refused for their size.
    accepted: AtomicUsize,
    refused: AtomicUsize,
    /// Fails the transaction that finds this at 1 (counting down; 0: none).
    fail_in: AtomicUsize,
}

impl Limited {
    fn new(max_ops: usize, max_bytes: usize) -> Arc<Limited> {
        Arc::new(Limited {
            inner: MemStorage::new(),
            limits: TxnLimits {
                max_ops,
                max_bytes,
                key_overhead: 8,
            },
            accepted: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            fail_in: AtomicUsize::new(0),
        })
    }
}

type Fut<'a, T> = futures::future::BoxFuture<'a, storage::Result<T>>;

impl Storage for Limited {
    fn get<'a, 'b, 'c>(&'a self, key: &'b [u8]) -> Fut<'c, Option<storage::KeyValue>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.inner.get(key)
    }

    fn scan<'a, 'c>(&'a self, range: KeyRange, limit: Option<usize>) -> Fut<'c, storage::ScanResult>
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
            if !self.limits.fits(&txn) {
                self.refused.fetch_add(1, Ordering::SeqCst);
                return Err(storage::Error::Backend(
                    "the transaction is larger than the store allows".to_owned(),
                ));
            }
            let failing = self
                .fail_in
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok_and(|n| n == 1);
            if failing {
                return Err(storage::Error::Backend("injected failure".to_owned()));
            }
            self.accepted.fetch_add(1, Ordering::SeqCst);
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

    fn range_revision<'a, 'c>(&'a self, range: KeyRange) -> Fut<'c, storage::Revision>
    where
        'a: 'c,
        Self: 'c,
    {
        self.inner.range_revision(range)
    }

    fn watch<'a, 'c>(
        &'a self,
        range: KeyRange,
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

    fn txn_limits(&self) -> TxnLimits {
        self.limits
    }
}

async fn writer_over(storage: Arc<Limited>) -> (StateStore, cluster::Runner) {
    let store = StateStore::open(storage).await.expect("open");
    let runner = cluster::Runner::embedded(CancellationToken::new());
    let writer = store.clone();
    runner.leader_loop("state writer", move |term| run_writer(writer.clone(), term));
    (store, runner)
}

/// Every transaction under `scheduler/` after `after`, as (revision, events), in order.
async fn transactions(
    storage: &Limited,
    after: storage::Revision,
) -> Vec<(storage::Revision, Vec<storage::Event>)> {
    let last = storage.revision().await.expect("revision");
    let mut stream = storage
        .watch(KeyRange::prefix("scheduler/"), after)
        .await
        .expect("watch");
    let mut grouped: BTreeMap<storage::Revision, Vec<storage::Event>> = BTreeMap::new();
    // Each of the writer's transactions ends with its write of the index.
    let complete = |grouped: &BTreeMap<storage::Revision, Vec<storage::Event>>| {
        grouped.get(&last).is_some_and(|events| {
            events
                .last()
                .is_some_and(|event| event.key == keys::INDEX.as_bytes())
        })
    };
    while !complete(&grouped) {
        let event = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
            .await
            .expect("the history replays")
            .expect("the stream goes on")
            .expect("an event");
        grouped.entry(event.revision).or_default().push(event);
    }
    grouped.into_iter().collect()
}

/// What a reader compares: every table and secondary index.
fn assert_same(left: &Snapshot, right: &Snapshot, what: &str) {
    assert_eq!(left.index, right.index, "{what}: index");
    assert_eq!(left.jobs, right.jobs, "{what}: jobs");
    assert_eq!(left.allocs, right.allocs, "{what}: allocs");
    assert_eq!(left.allocs_by_node, right.allocs_by_node, "{what}: by node");
    assert_eq!(left.allocs_by_job, right.allocs_by_job, "{what}: by job");
    // A node whose allocations all ended may keep a zero entry in the writer's view.
    let used = |snap: &Snapshot| {
        snap.node_usage
            .iter()
            .filter(|(_, usage)| **usage != crate::structs::Comparable::default())
            .map(|(node, usage)| (node.clone(), *usage))
            .collect::<Vec<_>>()
    };
    assert_eq!(used(left), used(right), "{what}: usage");
    assert_eq!(left.nodes, right.nodes, "{what}: nodes");
    assert_eq!(left.evals, right.evals, "{what}: evals");
    assert_eq!(left.blocked_evals, right.blocked_evals, "{what}: blocked");
}

async fn setup(storage: &Arc<Limited>, store: &StateStore, nodes: usize) -> Arc<Job> {
    for n in 0..nodes {
        store
            .apply(Command::UpsertNode(Box::new(node(
                &format!("n{n}"),
                100_000,
            ))))
            .await
            .expect("node");
    }
    store.apply(register(job("web", 40))).await.expect("job");
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0);
    store
        .snapshot()
        .job("default", "web")
        .cloned()
        .expect("job")
}

fn allocs(job: &Job, nodes: usize, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|i| alloc(&format!("a{i:03}"), &format!("n{}", i % nodes), job, 100))
        .collect()
}

#[tokio::test]
async fn a_plan_too_large_for_one_transaction_commits_in_parts_that_followers_and_a_reload_agree_on()
 {
    let storage = Limited::new(12, 1 << 30);
    let (store, runner) = writer_over(storage.clone()).await;
    let job = setup(&storage, &store, 2).await;
    let before = store.snapshot();
    let revision_before = storage.revision().await.expect("revision");
    let accepted_before = storage.accepted.load(Ordering::SeqCst);

    let applied = store
        .apply(plan_for(&job, "e1", allocs(&job, 2, 40)))
        .await
        .expect("the plan commits");
    let Outcome::Plan(result) = &applied.outcome else {
        panic!("not a plan result: {:?}", applied.outcome);
    };
    assert!(result.refused_nodes.is_empty(), "{result:?}");
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0, "none too large");
    let parts = storage.accepted.load(Ordering::SeqCst) - accepted_before;
    // 40 allocations and the evaluation, at most 11 writes per transaction.
    assert!(parts >= 4, "{parts} transactions");
    let snap = store.snapshot();
    assert_eq!(snap.allocs.len(), 40);
    assert_eq!(applied.index, snap.index);
    assert_eq!(snap.index, before.index + parts as u64, "one index each");
    assert_eq!(
        snap.eval("e1").map(|eval| eval.status.as_str()),
        Some(EVAL_STATUS_COMPLETE)
    );

    // A follower applies each transaction as it comes: every one is a whole state.
    let history = transactions(&storage, revision_before).await;
    assert_eq!(history.len(), parts);
    let mut follower = (*before).clone();
    let mut placed = 0;
    for (i, (_, events)) in history.iter().enumerate() {
        follow::apply_batch(&mut follower, events);
        assert_eq!(follower.index, before.index + i as u64 + 1);
        assert!(follower.allocs.len() > placed, "each part places more");
        placed = follower.allocs.len();
        for alloc in follower.allocs.values() {
            assert!(alloc.modify_index <= follower.index);
        }
        let last = i + 1 == history.len();
        assert_eq!(
            follower.eval("e1").is_some(),
            last,
            "the evaluation is written with the last part only"
        );
    }
    assert_same(&follower, &snap, "follower");
    assert_eq!(follower.tables, snap.tables, "follower: table indexes");
    let reloaded = StateStore::open(storage.clone()).await.expect("reload");
    assert_same(&reloaded.snapshot(), &snap, "reload");
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn commands_of_one_batch_are_cut_between_commands_each_whole_in_one_transaction() {
    let storage = Limited::new(12, 1 << 30);
    let (store, runner) = writer_over(storage.clone()).await;
    let revision_before = storage.revision().await.expect("revision");
    let registrations = (0..30).map(|i| {
        let store = store.clone();
        async move { store.apply(register(job(&format!("job-{i:02}"), 1))).await }
    });
    let answers = futures::future::join_all(registrations).await;
    for answer in &answers {
        answer.as_ref().expect("registered");
    }
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0, "none too large");
    let snap = store.snapshot();
    assert_eq!(snap.jobs.len(), 30);
    let history = transactions(&storage, revision_before).await;
    // Two writes per registration (job, evaluation) and the index: at most five per
    // transaction, so at least six transactions.
    assert!(history.len() >= 6, "{} transactions", history.len());
    let mut follower = Snapshot::default();
    for (_, events) in &history {
        follow::apply_batch(&mut follower, events);
        // Every job is there with its evaluation: no registration was cut in two.
        for key in follower.jobs.keys() {
            assert_eq!(follower.evals_of_job(key).count(), 1, "{key:?}");
        }
        assert_eq!(follower.evals.len(), follower.jobs.len());
    }
    assert_same(&follower, &snap, "follower");
    assert_eq!(follower.tables, snap.tables, "follower: table indexes");
    let indexes: std::collections::BTreeSet<u64> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().ok().map(|applied| applied.index))
        .collect();
    assert!(indexes.len() >= 6, "answered with each transaction's index");
    assert_eq!(indexes.last(), Some(&snap.index));
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_change_larger_than_any_transaction_fails_alone_and_changes_nothing() {
    let storage = Limited::new(128, 4096);
    let (store, runner) = writer_over(storage.clone()).await;
    let mut huge = job("huge", 1);
    huge.meta.insert("blob".to_owned(), "x".repeat(8192));
    let (big, small) = tokio::join!(
        store.apply(register(huge)),
        store.apply(register(job("small", 1)))
    );
    let Err(Error::BadRequest(message)) = &big else {
        panic!("refused as too large: {big:?}");
    };
    assert!(
        message.contains("larger than one storage transaction"),
        "{message}"
    );
    small.expect("the other command commits");
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0);
    let snap = store.snapshot();
    assert!(snap.job("default", "huge").is_none());
    assert!(snap.job("default", "small").is_some());
    assert_eq!(snap.evals.len(), 1);
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_failure_between_the_parts_of_a_plan_keeps_the_parts_committed_and_writing_goes_on() {
    let storage = Limited::new(12, 1 << 30);
    let (store, runner) = writer_over(storage.clone()).await;
    let job = setup(&storage, &store, 2).await;
    let before = store.snapshot().index;
    // The plan's second transaction fails.
    storage.fail_in.store(2, Ordering::SeqCst);
    let failed = store.apply(plan_for(&job, "e1", allocs(&job, 2, 40))).await;
    assert!(matches!(failed, Err(Error::Internal(_))), "{failed:?}");
    let snap = store.snapshot();
    assert_eq!(snap.index, before + 1, "the first part is committed");
    let first_part = snap.allocs.len();
    assert!(first_part > 0 && first_part < 40, "{first_part} placed");
    assert!(snap.eval("e1").is_none(), "the plan is not complete");
    let reloaded = StateStore::open(storage.clone()).await.expect("reload");
    assert_same(&reloaded.snapshot(), &snap, "reload after the failure");

    // The writer goes on from the committed part: the plan again (as its worker re-plans)
    // places the rest.
    let applied = store
        .apply(plan_for(&job, "e1", allocs(&job, 2, 40)))
        .await
        .expect("the plan again");
    let Outcome::Plan(result) = &applied.outcome else {
        panic!("not a plan result");
    };
    assert!(result.refused_nodes.is_empty());
    let snap = store.snapshot();
    assert_eq!(snap.allocs.len(), 40);
    assert_eq!(snap.node_used("n0").cpu, 2000);
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0);
    let reloaded = StateStore::open(storage.clone()).await.expect("reload");
    assert_same(&reloaded.snapshot(), &snap, "reload at the end");
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_client_report_and_a_collection_too_large_for_one_transaction_commit_in_parts() {
    let storage = Limited::new(12, 1 << 30);
    let (store, runner) = writer_over(storage.clone()).await;
    let job = setup(&storage, &store, 1).await;
    store
        .apply(plan_for(&job, "e1", allocs(&job, 1, 40)))
        .await
        .expect("placed");
    // The client reports every allocation complete at once.
    let updates: Vec<AllocClientUpdate> = (0..40)
        .map(|i| AllocClientUpdate {
            id: format!("a{i:03}"),
            node_id: "n0".to_owned(),
            client_status: ALLOC_CLIENT_COMPLETE.to_owned(),
            ..AllocClientUpdate::default()
        })
        .collect();
    store
        .apply(Command::ClientAllocUpdates(updates))
        .await
        .expect("the report commits");
    let snap = store.snapshot();
    assert!(snap.allocs.values().all(|alloc| alloc.terminal()));
    assert_eq!(snap.node_used("n0").cpu, 0);
    // Stop the job, then collect everything of it at once.
    store
        .apply(Command::DeregisterJob(DeregisterJob {
            namespace: "default".to_owned(),
            job_id: "web".to_owned(),
            purge: false,
            eval_priority: None,
        }))
        .await
        .expect("stopped");
    let mut evals: Vec<Evaluation> = store
        .snapshot()
        .evals
        .values()
        .map(|eval| (**eval).clone())
        .collect();
    for eval in &mut evals {
        eval.status = EVAL_STATUS_COMPLETE.to_owned();
    }
    store
        .apply(Command::UpsertEvals(evals))
        .await
        .expect("evaluations complete");
    let applied = store
        .apply(Command::Gc(GcPass::everything_now()))
        .await
        .expect("collected");
    let Outcome::Gc(report) = applied.outcome else {
        panic!("not a gc report");
    };
    assert_eq!((report.jobs, report.allocs), (1, 40), "{report:?}");
    let snap = store.snapshot();
    assert!(snap.allocs.is_empty() && snap.jobs.is_empty() && snap.evals.is_empty());
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0, "none too large");
    let reloaded = StateStore::open(storage.clone()).await.expect("reload");
    assert_same(&reloaded.snapshot(), &snap, "reload");
    runner.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_node_going_down_with_many_jobs_writes_their_evaluations_before_the_node() {
    let storage = Limited::new(12, 1 << 30);
    let (store, runner) = writer_over(storage.clone()).await;
    store
        .apply(Command::UpsertNode(Box::new(node("n0", 100_000))))
        .await
        .expect("node");
    for i in 0..30 {
        let id = format!("job-{i:02}");
        store.apply(register(job(&id, 1))).await.expect("job");
        let job = store.snapshot().job("default", &id).cloned().expect("job");
        store
            .apply(plan_for(
                &job,
                &format!("e-{i}"),
                vec![alloc(&format!("a-{i}"), "n0", &job, 100)],
            ))
            .await
            .expect("placed");
    }
    let revision_before = storage.revision().await.expect("revision");
    store
        .apply(Command::SetNodeStatus {
            node_id: "n0".to_owned(),
            status: NODE_STATUS_DOWN.to_owned(),
        })
        .await
        .expect("down");
    assert_eq!(storage.refused.load(Ordering::SeqCst), 0, "none too large");
    let history = transactions(&storage, revision_before).await;
    assert!(history.len() >= 3, "{} transactions", history.len());
    for (i, (_, events)) in history.iter().enumerate() {
        let node_written = events
            .iter()
            .any(|event| event.key.starts_with(keys::NODES.as_bytes()));
        assert_eq!(
            node_written,
            i + 1 == history.len(),
            "the node is written in the last part only"
        );
    }
    let snap = store.snapshot();
    assert_eq!(
        snap.nodes.get("n0").map(|node| node.status.as_str()),
        Some(NODE_STATUS_DOWN)
    );
    let node_evals = snap
        .evals
        .values()
        .filter(|eval| eval.triggered_by == TRIGGER_NODE_UPDATE)
        .count();
    assert_eq!(node_evals, 30, "one per job on the node");
    runner.shutdown_and_wait().await;
}
