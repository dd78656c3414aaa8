//! The state writer loop: batches commands, applies them to a draft and commits each batch in
//! one storage transaction, pipelined one deep (Nomad's FSM apply over raft's batched log).
//!
//! Where it sits: [`run_writer`] runs while this server leads (`tasks::lead`); commands reach
//! it through `StateStore::apply`'s queue. While batch k's transaction commits (the storage
//! writer thread fsyncs it), every command that arrives is applied at once to batch k+1's draft,
//! built on batch k's uncommitted snapshot, so the CPU work of k+1 overlaps k's disk wait.
//! Batch k+1 is committed as soon as k's commit has returned, after waiting at most [`LINGER`]
//! for the commands of the callers k just answered (closed loops of callers, such as the
//! scheduling workers and clients waiting for their answer, would otherwise split into a batch
//! of stragglers and a batch of the rest, paying a commit for each).
//!
//! Invariants:
//! - At most one transaction is in flight, and batches commit in the order they were applied.
//! - Nothing uncommitted is visible: batch k's snapshot is published, its pending evaluations
//!   handed to the broker and its callers answered only after its commit returned; batch k+1's
//!   callers (including those whose command failed or changed nothing, since their answer was
//!   computed on k's draft) only after k's and then k+1's commits returned.
//! - A failed commit fails exactly the commands of its batch; the draft of the next batch,
//!   applied on top of the failed one, is thrown away and rebuilt from its commands on the
//!   last committed snapshot before it commits.
//! - A command that fails changes nothing (its part of the draft is rolled back before the
//!   next command of the batch runs). Without transaction limits commands are applied without
//!   a checkpoint (see `Draft::apply_command`: a checkpoint makes every later change copy its
//!   path of the persistent maps again); when one fails, the batch's draft is rebuilt from
//!   its base with every command so far, each with a checkpoint.
//! - When the term ends, the commit in flight is finished and answered before the loop
//!   returns; commands applied to the next draft but not committed, and those still queued,
//!   are failed with [`Error::ShuttingDown`].
//! - Fenced: each transaction requires `scheduler/index` unchanged since the last committed
//!   snapshot (`Snapshot::index_revision`), so with several servers a writer never commits on
//!   top of a state another writer changed (a former leader's commit still in flight); such a
//!   batch fails, the state is reloaded, and the next batch applies on top of what is stored.

use std::sync::{Arc, Mutex};

use storage::{Compare, Op, Revision, Txn};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Applied, MAX_BATCH, Request, Snapshot, StateStore, draft, fsm, keys};
use crate::Error;
use crate::state::Outcome;
use crate::structs::Evaluation;

type Reply = oneshot::Sender<Result<Applied, Error>>;

/// How long, at most, the next batch waits for the callers just answered (see [`linger`]).
const LINGER: std::time::Duration = std::time::Duration::from_millis(1);

/// A batch applied to a draft, not yet committed (its commands kept to rebuild it).
struct Applying {
    /// The state the batch applies to (to rebuild the draft from).
    base: Snapshot,
    requests: Vec<Request>,
    draft: draft::Draft,
    results: Vec<Result<Outcome, Error>>,
    /// For each command, the segment (transaction) its last change is in.
    ends: Vec<usize>,
}

/// A batch whose transactions are committing.
struct Committing {
    commit: JoinHandle<Commit>,
    batch: Committed,
}

/// What a batch's commit task did: the revision of each transaction that committed, in order,
/// and why the next one did not (`None`: all committed).
type Commit = (Vec<Revision>, Option<String>);

/// One transaction of a batch: what is published and handed to the broker once it commits.
struct Step {
    snap: Snapshot,
    pending: Vec<Arc<Evaluation>>,
}

/// What is published and answered once a batch's commit returns.
struct Committed {
    /// One per transaction, in commit order.
    steps: Vec<Step>,
    /// Each caller's answer, with the step its command ends in.
    replies: Vec<(Reply, Result<Outcome, Error>, usize)>,
    ops: usize,
    started: std::time::Instant,
}

impl Committed {
    /// The state once every transaction committed.
    fn tip(&self) -> &Snapshot {
        &self.steps[self.steps.len() - 1].snap
    }
}

/// The writer loop: applies commands in batches until `term` is cancelled, then finishes the
/// commit in flight, fails the commands still waiting and gives the queue back for the next
/// writer.
pub(crate) async fn run_writer(store: StateStore, term: CancellationToken) {
    let mut queue = Queue::take(&store);
    let Some(receiver) = queue.as_mut().and_then(|queue| queue.receiver.as_mut()) else {
        tracing::error!("a second scheduler state writer was started; only one may run");
        return;
    };
    let mut in_flight: Option<Committing> = None;
    // Applied on top of the batch in flight; committed as soon as that one has.
    let mut next: Option<Applying> = None;
    loop {
        let Some(committing) = in_flight.as_mut() else {
            let mut applying = match next.take() {
                Some(applying) => applying,
                None => {
                    let first = tokio::select! {
                        biased;
                        () = term.cancelled() => break,
                        request = receiver.recv() => match request {
                            Some(request) => request,
                            None => break,
                        },
                    };
                    let mut applying = Applying::on(&store, (*store.snapshot()).clone());
                    applying.apply(first);
                    applying
                }
            };
            applying.take_waiting(receiver);
            in_flight = start(&store, applying);
            continue;
        };
        let room = next
            .as_ref()
            .is_none_or(|applying| applying.requests.len() < MAX_BATCH);
        tokio::select! {
            biased;
            result = &mut committing.commit => {
                let Some(Committing { batch, .. }) = in_flight.take() else {
                    continue;
                };
                let answered = batch.replies.len();
                if !finish(&store, batch, flatten(result)) {
                    recover(&store).await;
                    // Applied on top of a batch that never became durable: start again
                    // from what is.
                    next = next
                        .take()
                        .map(|applying| applying.rebuild(&store, (*store.snapshot()).clone()));
                }
                linger(&store, receiver, &mut next, answered).await;
            }
            () = term.cancelled() => break,
            request = receiver.recv(), if room => {
                let Some(request) = request else {
                    break;
                };
                let tip = committing.batch.tip();
                let applying = next.get_or_insert_with(|| Applying::on(&store, tip.clone()));
                applying.apply(request);
                applying.take_waiting(receiver);
            }
        }
    }
    if let Some(Committing { commit, batch }) = in_flight.take() {
        finish(&store, batch, flatten(commit.await));
    }
    // This server no longer writes: whoever waits should retry (on the next leader).
    for request in next
        .take()
        .map(|applying| applying.requests)
        .unwrap_or_default()
    {
        let _ = request.reply.send(Err(Error::ShuttingDown));
    }
    while let Ok(Request { reply, .. }) = receiver.try_recv() {
        let _ = reply.send(Err(Error::ShuttingDown));
    }
}

/// After batch k was answered, waits (at most [`LINGER`], and only while fewer commands are
/// applied than k answered) for its callers' next commands, so they join the batch committed
/// next instead of waiting for another commit after a batch of stragglers.
async fn linger(
    store: &StateStore,
    receiver: &mut mpsc::Receiver<Request>,
    next: &mut Option<Applying>,
    answered: usize,
) {
    if answered < 2 {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    while next.as_ref().map_or(0, |applying| applying.requests.len()) < answered.min(MAX_BATCH) {
        let Ok(Some(request)) = tokio::time::timeout_at(deadline, receiver.recv()).await else {
            return;
        };
        let applying = next.get_or_insert_with(|| Applying::on(store, (*store.snapshot()).clone()));
        applying.apply(request);
        applying.take_waiting(receiver);
    }
}

/// After a failed commit: if another writer committed meanwhile (the fence held), reload
/// what it wrote, so the next batch applies on top of it.
async fn recover(store: &StateStore) {
    match store.catch_up().await {
        Ok(true) => tracing::warn!("another writer committed scheduler state; reloaded it"),
        Ok(false) => {}
        Err(err) => tracing::error!(error = %err, "cannot reload the scheduler state"),
    }
}

fn flatten(joined: Result<Commit, tokio::task::JoinError>) -> Commit {
    // A commit task that died may have committed some transactions: the caller's recovery
    // reloads the state if the stored index moved.
    joined.unwrap_or_else(|err| (Vec::new(), Some(format!("the commit task failed: {err}"))))
}

impl Applying {
    /// An empty batch on top of `tip` (it writes index `tip.index + 1`, and one more per
    /// further transaction it needs).
    fn on(store: &StateStore, tip: Snapshot) -> Applying {
        let index = tip.index + 1;
        let mut draft = draft::Draft::new(tip.clone(), store.inner.limits);
        draft.snap.index = index;
        Applying {
            base: tip,
            requests: Vec::new(),
            draft,
            results: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// Applies one more command (rolled back if it fails: when it failed on a draft applied
    /// without checkpoints, the draft is rebuilt from the batch's commands, carefully).
    fn apply(&mut self, mut request: Request) {
        let now = crate::clock::now_nanos();
        let command = &mut request.command;
        let result = self
            .draft
            .apply_command(|draft| fsm::apply(draft, command, now));
        self.results.push(result);
        self.ends.push(self.draft.cuts.len());
        self.requests.push(request);
        if self.draft.tainted() {
            self.replay_carefully();
        }
    }

    /// Rebuilds the draft from `base` with every command of the batch, each applied with a
    /// checkpoint (so the one that failed changes nothing); later commands go without again.
    fn replay_carefully(&mut self) {
        let mut draft = draft::Draft::new(self.base.clone(), self.draft.limits());
        draft.snap.index = self.base.index + 1;
        draft.set_careful(true);
        self.results.clear();
        self.ends.clear();
        for request in &mut self.requests {
            let now = crate::clock::now_nanos();
            let command = &mut request.command;
            self.results
                .push(draft.apply_command(|draft| fsm::apply(draft, command, now)));
            self.ends.push(draft.cuts.len());
        }
        draft.set_careful(false);
        self.draft = draft;
    }

    /// Applies every command already waiting, up to [`MAX_BATCH`] in the batch.
    fn take_waiting(&mut self, receiver: &mut mpsc::Receiver<Request>) {
        while self.requests.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(request) => self.apply(request),
                Err(_) => break,
            }
        }
    }

    /// The same commands applied again on top of `tip`.
    fn rebuild(self, store: &StateStore, tip: Snapshot) -> Applying {
        let mut fresh = Applying::on(store, tip);
        for request in self.requests {
            fresh.apply(request);
        }
        fresh
    }
}

/// Starts committing an applied batch (no commit is in flight): one transaction per segment,
/// in order, each fenced on the index the previous one wrote. A batch that changed nothing is
/// answered at once, with the last committed index.
fn start(store: &StateStore, applying: Applying) -> Option<Committing> {
    let Applying {
        base: _,
        requests,
        mut draft,
        results,
        ends,
    } = applying;
    if draft.capacity_changed && !draft.ops.is_empty() {
        let now = crate::clock::now_nanos();
        // With a checkpoint: nothing rebuilds the draft after this.
        draft.set_careful(true);
        if let Err(err) = draft.apply_command(|draft| fsm::unblock_evals(draft, now)) {
            tracing::error!(error = %err, "cannot unblock evaluations");
        }
    }
    if draft.ops.is_empty() {
        let index = store.snapshot().index;
        for (request, result) in requests.into_iter().zip(results) {
            let _ = request
                .reply
                .send(result.map(|outcome| Applied { index, outcome }));
        }
        return None;
    }
    // A last segment left empty (nothing after a cut changed anything) is not committed: its
    // commands end with the segment before it.
    let open_empty = draft.open_is_empty();
    let last = if open_empty {
        draft.cuts.len() - 1
    } else {
        draft.cuts.len()
    };
    let replies: Vec<(Reply, Result<Outcome, Error>, usize)> = requests
        .into_iter()
        .zip(results)
        .zip(ends)
        .map(|((request, result), end)| (request.reply, result, end.min(last)))
        .collect();
    let ops = std::mem::take(&mut draft.ops);
    let pending = std::mem::take(&mut draft.pending_evals);
    let (total_ops, total_pending) = (ops.len(), pending.len());
    let mut bounds: Vec<(usize, usize, Snapshot)> = std::mem::take(&mut draft.cuts)
        .into_iter()
        .map(|cut| (cut.ops_end, cut.pending_end, cut.snap))
        .collect();
    if open_empty {
        if let Some(last) = bounds.last_mut() {
            last.1 = total_pending;
        }
    } else {
        bounds.push((total_ops, total_pending, draft.snap));
    }
    let (mut ops, mut pending) = (ops.into_iter(), pending.into_iter());
    let (mut ops_taken, mut pending_taken) = (0, 0);
    let mut transactions = Vec::with_capacity(bounds.len());
    let mut steps = Vec::with_capacity(bounds.len());
    for (ops_end, pending_end, snap) in bounds {
        let segment: Vec<Op> = ops.by_ref().take(ops_end - ops_taken).collect();
        let evals: Vec<Arc<Evaluation>> =
            pending.by_ref().take(pending_end - pending_taken).collect();
        (ops_taken, pending_taken) = (ops_end, pending_end);
        transactions.push((snap.index, segment));
        steps.push(Step {
            snap,
            pending: evals,
        });
    }
    let storage = Arc::clone(&store.inner.storage);
    let fence = store.snapshot().index_revision;
    let started = std::time::Instant::now();
    let commit = tokio::spawn(commit(storage, fence, transactions));
    Some(Committing {
        commit,
        batch: Committed {
            steps,
            replies,
            ops: total_ops,
            started,
        },
    })
}

/// Commits a batch's transactions in order. The fence: each applies only if `scheduler/index`
/// is still as this writer left it (`fence` for the first: the last committed batch's; then the
/// revision the previous transaction wrote), so nobody else (a previous leader's commit still
/// in flight, say) wrote in between.
async fn commit(
    storage: Arc<dyn storage::Storage>,
    mut fence: Revision,
    transactions: Vec<(u64, Vec<Op>)>,
) -> Commit {
    let mut revisions = Vec::with_capacity(transactions.len());
    for (index, ops) in transactions {
        let mut txn = Txn::new().when(Compare::ModRevision(keys::INDEX.as_bytes().to_vec(), fence));
        txn.success = ops;
        txn = txn.then(Op::Put {
            key: keys::INDEX.as_bytes().to_vec(),
            value: index.to_string().into_bytes(),
        });
        match storage.txn(txn).await {
            Ok(result) if result.succeeded => {
                fence = result.revision;
                revisions.push(result.revision);
            }
            Ok(_) => {
                let why = "another writer committed scheduler state since this one's last commit";
                return (revisions, Some(why.to_owned()));
            }
            Err(err) => return (revisions, Some(err.to_string())),
        }
    }
    (revisions, None)
}

/// Publishes and answers a batch whose commit returned: the state as of its last committed
/// transaction is published, the pending evaluations of every committed one handed to the
/// broker, and the commands that ended in a committed one answered; the rest fail. Returns
/// whether every transaction committed.
fn finish(store: &StateStore, batch: Committed, (revisions, failure): Commit) -> bool {
    let Committed {
        steps,
        replies,
        ops,
        started,
    } = batch;
    let transactions = steps.len();
    let committed = revisions.len().min(transactions);
    let mut pending = Vec::new();
    let mut indexes = Vec::with_capacity(committed);
    let mut published = None;
    for (step, revision) in steps.into_iter().zip(&revisions) {
        indexes.push(step.snap.index);
        pending.extend(step.pending);
        let mut snap = step.snap;
        snap.index_revision = *revision;
        published = Some(snap);
    }
    if let Some(err) = &failure {
        tracing::error!(
            error = %err,
            committed,
            transactions,
            "cannot commit scheduler state"
        );
    }
    if let Some(snap) = published {
        tracing::debug!(
            index = snap.index,
            commands = replies.len(),
            ops,
            transactions,
            commit_ms = started.elapsed().as_secs_f64() * 1000.0,
            "scheduler state committed"
        );
        store.inner.current.send_replace(Arc::new(snap));
    }
    if !pending.is_empty()
        && let Ok(sink) = store.inner.on_pending.lock()
        && let Some(sink) = sink.as_ref()
    {
        sink(pending);
    }
    for (reply, result, step) in replies {
        let answer = match indexes.get(step) {
            Some(index) => result.map(|outcome| Applied {
                index: *index,
                outcome,
            }),
            None => Err(Error::Internal(format!(
                "storage: {}",
                failure.as_deref().unwrap_or("not committed")
            ))),
        };
        let _ = reply.send(answer);
    }
    failure.is_none()
}

/// The command queue, held by the running writer and given back when it stops (even if it
/// panics), so only one writer runs at a time and the next one finds the queue.
struct Queue<'a> {
    slot: &'a Mutex<Option<mpsc::Receiver<Request>>>,
    receiver: Option<mpsc::Receiver<Request>>,
}

impl<'a> Queue<'a> {
    fn take(store: &'a StateStore) -> Option<Queue<'a>> {
        let slot = &store.inner.receiver;
        let receiver = slot.lock().ok()?.take()?;
        Some(Queue {
            slot,
            receiver: Some(receiver),
        })
    }
}

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.slot.lock() {
            *slot = self.receiver.take();
        }
    }
}
