//! The scheduler's state: immutable in-memory snapshots over durable storage, changed only
//! by one writer (Nomad's FSM, without raft).
//!
//! Flow: a handler or background loop sends a [`Command`] with [`StateStore::apply`]; the
//! writer loop ([`run_writer`]) takes every command waiting, applies them one after another to
//! a draft of the next snapshot (`draft.rs`, `fsm.rs`), commits all their storage operations in
//! one transaction (one fsync for the batch, like raft's batched apply) or, where the store
//! limits a transaction's size (etcd), in as few transactions under its limits as it takes, cut
//! between commands or between the parts of one large command (`draft.rs`), and only then
//! publishes the new snapshot and answers each caller. The loop (`writer.rs`) is pipelined one
//! deep: while batch k commits, batch k+1 is applied to a draft on top of k's, and committed
//! (or, if k's commit failed, rebuilt on the committed state) once k's commit returns.
//! Readers call [`StateStore::snapshot`] and never wait for the writer.
//!
//! Invariants:
//! - An acknowledged command is durable: the reply is sent after the storage commit.
//! - Readers only ever see committed state (a snapshot is published after its commit).
//! - A command that fails changes nothing (its part of the draft is rolled back before the
//!   next command of the batch runs).
//! - Each committed transaction gets the next index (`scheduler/index` is written with it), so
//!   indexes are strictly increasing and every record's `ModifyIndex` says which transaction
//!   wrote it; each transaction is the state after a whole sequence of (possibly smaller)
//!   commands, so followers and a restart never see anything else.
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
mod gc;
mod keys;
mod load;
mod record;
mod snapshot;
#[cfg(test)]
mod tests;
mod writer;

use std::sync::{Arc, Mutex};

use storage::Storage;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub(crate) use fsm::{Command, DeregisterJob, Outcome, RegisterJob};
pub(crate) use gc::{GcPass, GcReport, Thresholds};
pub use snapshot::TableIndexes;
pub(crate) use snapshot::{Snapshot, TRACKED_VERSIONS};
pub(crate) use writer::run_writer;

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
    /// What one storage transaction may carry (the writer splits its batches to fit).
    limits: storage::TxnLimits,
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
                limits: storage.txn_limits(),
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
        let (stored_index, stored_revision) = stored.map_or((0, 0), |kv| {
            let index = String::from_utf8_lossy(&kv.value).parse().unwrap_or(0);
            (index, kv.mod_revision)
        });
        let current = self.snapshot();
        if stored_index == current.index && stored_revision == current.index_revision {
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
