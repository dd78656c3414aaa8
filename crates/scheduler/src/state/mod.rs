//! The scheduler's state: immutable in-memory snapshots over durable storage, changed only
//! by one writer (Nomad's FSM, without raft).
//!
//! Flow: a handler or background loop sends a [`Command`] with [`StateStore::apply`]; the
//! writer loop ([`run_writer`]) takes every command waiting, applies them one after another to
//! a draft of the next snapshot (`draft.rs`, `fsm.rs`), commits all their storage operations in
//! ONE transaction (one fsync for the batch, like raft's batched apply), and only then
//! publishes the new snapshot and answers each caller. Readers call [`StateStore::snapshot`]
//! and never wait for the writer.
//!
//! Invariants:
//! - An acknowledged command is durable: the reply is sent after the storage commit.
//! - Readers only ever see committed state (a snapshot is published after its commit).
//! - A command that fails changes nothing (its part of the draft is rolled back before the
//!   next command of the batch runs).
//! - Each committed batch gets the next index (`scheduler/index` is written with it), so
//!   indexes are strictly increasing and every record's `ModifyIndex` says which batch wrote it.
//! - Every pending evaluation a batch writes is handed to the broker after the commit; at
//!   the start of each term of leadership, every stored pending evaluation is
//!   (`tasks::lead`).
//! - At most one writer runs at a time (it runs while this server leads): it takes the
//!   command queue when it starts and gives it back when it stops, so commands sent while no
//!   writer runs wait for the next one; before a writer starts, [`StateStore::catch_up`]
//!   reloads the snapshot if another writer committed since it was published.
//! - Once the store is closed (server shutdown) every waiting and later command fails with
//!   [`Error::ShuttingDown`].

mod draft;
mod follow;
mod fsm;
mod keys;
mod load;
mod snapshot;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use storage::{Op, Storage, Txn};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub(crate) use fsm::{Command, DeregisterJob, Outcome, RegisterJob};
pub use snapshot::TableIndexes;
pub(crate) use snapshot::{Snapshot, TRACKED_VERSIONS};

use crate::Error;
use crate::structs::Evaluation;

/// The most commands applied in one storage transaction.
const MAX_BATCH: usize = 1024;

/// The result of an applied command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Applied {
    /// The index of the batch that committed it (the current index if it changed nothing).
    pub(crate) index: u64,
    pub(crate) outcome: Outcome,
}

struct Request {
    command: Command,
    reply: oneshot::Sender<Result<Applied, Error>>,
}

/// The scheduler's state; cheap to clone.
#[derive(Clone)]
pub(crate) struct StateStore {
    inner: Arc<Inner>,
}

struct Inner {
    storage: Arc<dyn Storage>,
    current: watch::Sender<Arc<Snapshot>>,
    requests: mpsc::Sender<Request>,
    /// The command queue, while no writer holds it.
    receiver: Mutex<Option<mpsc::Receiver<Request>>>,
    /// Called with the pending evaluations of each committed batch.
    on_pending: Mutex<Option<PendingSink>>,
    /// Cancelled at server shutdown: commands fail instead of waiting for a writer.
    closed: CancellationToken,
}

type PendingSink = Box<dyn Fn(Vec<Arc<Evaluation>>) + Send + Sync>;

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("index", &self.snapshot().index)
            .finish_non_exhaustive()
    }
}

impl StateStore {
    /// Loads every table from storage. Commands are applied once [`run_writer`] runs.
    pub(crate) async fn open(storage: Arc<dyn Storage>) -> Result<StateStore, Error> {
        let snapshot = load::load(storage.as_ref()).await?;
        let (current, _) = watch::channel(Arc::new(snapshot));
        let (requests, receiver) = mpsc::channel(4096);
        Ok(StateStore {
            inner: Arc::new(Inner {
                storage,
                current,
                requests,
                receiver: Mutex::new(Some(receiver)),
                on_pending: Mutex::new(None),
                closed: CancellationToken::new(),
            }),
        })
    }

    /// The latest committed snapshot.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.current.borrow().clone()
    }

    /// A receiver that sees every new snapshot (blocking queries wait on it).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.current.subscribe()
    }

    /// Applies one command and waits until it is durable (or the store is closed).
    pub(crate) async fn apply(&self, command: Command) -> Result<Applied, Error> {
        let closed = &self.inner.closed;
        let (reply, answer) = oneshot::channel();
        let request = Request { command, reply };
        tokio::select! {
            biased;
            () = closed.cancelled() => return Err(Error::ShuttingDown),
            sent = self.inner.requests.send(request) => sent.map_err(|_| Error::ShuttingDown)?,
        }
        tokio::select! {
            biased;
            () = closed.cancelled() => Err(Error::ShuttingDown),
            answer = answer => answer.map_err(|_| Error::ShuttingDown)?,
        }
    }

    /// Fails every waiting and later command with [`Error::ShuttingDown`] (server shutdown).
    pub(crate) fn close(&self) {
        self.inner.closed.cancel();
    }

    /// Reloads the snapshot from storage if another writer committed since it was published
    /// (the stored index moved); `true` if it did. Called before a writer starts.
    pub(crate) async fn catch_up(&self) -> Result<bool, Error> {
        let stored = self.inner.storage.get(keys::INDEX.as_bytes()).await?;
        let stored_index = stored.map_or(0, |kv| {
            String::from_utf8_lossy(&kv.value).parse().unwrap_or(0)
        });
        if stored_index == self.snapshot().index {
            return Ok(false);
        }
        let snapshot = load::load(self.inner.storage.as_ref()).await?;
        self.inner.current.send_replace(Arc::new(snapshot));
        Ok(true)
    }

    /// Sets who hears about pending evaluations after each commit (the broker).
    pub(crate) fn set_pending_sink(&self, sink: PendingSink) {
        if let Ok(mut slot) = self.inner.on_pending.lock() {
            *slot = Some(sink);
        }
    }
}

/// The writer loop: applies commands in batches until `term` is cancelled, then fails the
/// commands still waiting and gives the queue back for the next writer.
pub(crate) async fn run_writer(store: StateStore, term: CancellationToken) {
    let mut queue = Queue::take(&store);
    let Some(receiver) = queue.as_mut().and_then(|queue| queue.receiver.as_mut()) else {
        tracing::error!("a second scheduler state writer was started; only one may run");
        return;
    };
    loop {
        let first = tokio::select! {
            biased;
            () = term.cancelled() => break,
            request = receiver.recv() => match request {
                Some(request) => request,
                None => break,
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        commit_batch(&store, batch).await;
    }
    // This server no longer writes: whoever waits should retry (on the next leader).
    while let Ok(Request { reply, .. }) = receiver.try_recv() {
        let _ = reply.send(Err(Error::ShuttingDown));
    }
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

async fn commit_batch(store: &StateStore, batch: Vec<Request>) {
    let base = store.snapshot();
    let mut draft = draft::Draft::new((*base).clone());
    draft.snap.index = base.index + 1;
    let now = crate::clock::now_nanos();
    let mut replies = Vec::with_capacity(batch.len());
    for Request { command, reply } in batch {
        let checkpoint = draft.checkpoint();
        match fsm::apply(&mut draft, command, now) {
            Ok(outcome) => replies.push((reply, Ok(outcome))),
            Err(err) => {
                draft.rollback(checkpoint);
                replies.push((reply, Err(err)));
            }
        }
    }
    if draft.ops.is_empty() {
        for (reply, result) in replies {
            let _ = reply.send(result.map(|outcome| Applied {
                index: base.index,
                outcome,
            }));
        }
        return;
    }
    if draft.capacity_changed
        && let Err(err) = fsm::unblock_evals(&mut draft, now)
    {
        tracing::error!(error = %err, "cannot unblock evaluations");
    }
    let index = draft.index();
    let commands = replies.len();
    let ops = draft.ops.len();
    let started = std::time::Instant::now();
    let mut txn = Txn::new();
    for op in std::mem::take(&mut draft.ops) {
        txn = txn.then(op);
    }
    txn = txn.then(Op::Put {
        key: keys::INDEX.as_bytes().to_vec(),
        value: index.to_string().into_bytes(),
    });
    if let Err(err) = store.inner.storage.txn(txn).await {
        tracing::error!(error = %err, "cannot commit scheduler state");
        for (reply, _) in replies {
            let _ = reply.send(Err(Error::Internal(format!("storage: {err}"))));
        }
        return;
    }
    tracing::debug!(
        index,
        commands,
        ops,
        commit_ms = started.elapsed().as_secs_f64() * 1000.0,
        "scheduler state committed"
    );
    let pending = std::mem::take(&mut draft.pending_evals);
    store.inner.current.send_replace(Arc::new(draft.snap));
    if !pending.is_empty()
        && let Ok(sink) = store.inner.on_pending.lock()
        && let Some(sink) = sink.as_ref()
    {
        sink(pending);
    }
    for (reply, result) in replies {
        let _ = reply.send(result.map(|outcome| Applied { index, outcome }));
    }
}
