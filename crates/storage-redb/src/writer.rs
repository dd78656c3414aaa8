//! The group-commit writer: one dedicated thread that owns every redb write.
//!
//! Callers send [`Request`]s over a channel. The thread takes the first waiting request, drains
//! every other queued one (up to [`MAX_BATCH`]), applies them in arrival order inside one redb
//! write transaction (each writing request gets its own revision, and each sees the effects of
//! the earlier ones), compacts history, commits once with immediate durability (one fsync for
//! the whole group), then publishes each request's batch on the hub in revision order and
//! answers each caller.
//!
//! Invariants:
//! - Nothing of a group is visible, published or acknowledged before its commit returns.
//! - A redb error anywhere in a group fails every request of that group with
//!   [`Error::Backend`], and the group leaves no trace: the in-memory [`Meta`] only advances
//!   after a successful commit.
//! - A group in which nothing was written is aborted, not committed: no fsync.
//! - The thread exits once every sender is dropped and the queue is drained; requests queued
//!   before that are still served.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use redb::{Database, Durability};
use storage::watch::{Batch, Hub};
use storage::{Error, Revision, Snapshot, Txn, TxnResult};
use tokio::sync::oneshot;

use crate::stats::Counters;
use crate::tables::{Meta, OrBackend, WriteTables};

/// The most requests one group commit applies.
pub(crate) const MAX_BATCH: usize = 256;

pub(crate) enum Request {
    Txn {
        txn: Txn,
        reply: oneshot::Sender<Result<TxnResult, Error>>,
    },
    Restore {
        snapshot: Snapshot,
        reply: oneshot::Sender<Result<Revision, Error>>,
    },
}

/// What one request did inside a group, before the group commits: its transaction's result
/// (a restore's is the restore transaction's), or why it was refused without touching the
/// store (an invalid snapshot).
type Outcome = Result<TxnResult, Error>;

pub(crate) struct Writer {
    pub(crate) db: Arc<Database>,
    pub(crate) hub: Hub,
    pub(crate) requests: mpsc::Receiver<Request>,
    /// The last committed revision, shared with readers of `Storage::revision`.
    pub(crate) revision: Arc<AtomicU64>,
    pub(crate) meta: Meta,
    pub(crate) retention: u64,
    pub(crate) stats: Arc<Counters>,
}

impl Writer {
    /// Serves requests until every sender is gone.
    pub(crate) fn run(mut self) {
        while let Ok(first) = self.requests.recv() {
            let mut group = vec![first];
            while group.len() < MAX_BATCH {
                match self.requests.try_recv() {
                    Ok(request) => group.push(request),
                    Err(_) => break,
                }
            }
            self.commit_group(group);
        }
    }

    fn commit_group(&mut self, group: Vec<Request>) {
        let started = Instant::now();
        match self.apply_group(&group) {
            Ok((outcomes, batches, meta)) => {
                let committed = meta != self.meta;
                self.stats.record_group(
                    group.len(),
                    committed.then(|| started.elapsed().as_secs_f64()),
                );
                self.meta = meta;
                self.revision.store(meta.revision, Ordering::Release);
                for batch in batches {
                    self.hub.publish(batch);
                }
                for (request, outcome) in group.into_iter().zip(outcomes) {
                    // A caller that stopped waiting is no reason to fail the others.
                    match request {
                        Request::Txn { reply, .. } => drop(reply.send(outcome)),
                        Request::Restore { reply, .. } => {
                            drop(reply.send(outcome.map(|result| result.revision)))
                        }
                    }
                }
            }
            Err(err) => {
                let message = err.to_string();
                for request in group {
                    let err = Error::Backend(format!("group commit failed: {message}"));
                    match request {
                        Request::Txn { reply, .. } => drop(reply.send(Err(err))),
                        Request::Restore { reply, .. } => drop(reply.send(Err(err))),
                    }
                }
            }
        }
    }

    /// Applies a group in one write transaction and commits it if it wrote anything.
    fn apply_group(&self, group: &[Request]) -> Result<(Vec<Outcome>, Vec<Batch>, Meta), Error> {
        let mut txn = self.db.begin_write().or_backend()?;
        txn.set_durability(Durability::Immediate).or_backend()?;
        let mut meta = self.meta;
        let mut outcomes = Vec::with_capacity(group.len());
        let mut batches = Vec::new();
        {
            let mut tables = WriteTables::open(&txn)?;
            for request in group {
                let outcome = match request {
                    Request::Txn { txn, .. } => {
                        let (result, batch) = tables.apply(txn, &mut meta)?;
                        batches.extend(batch);
                        Ok(result)
                    }
                    Request::Restore { snapshot, .. } => {
                        let keys = tables.keys()?;
                        match storage::restore_txn(keys.iter().map(Vec::as_slice), snapshot) {
                            Ok(restore) => {
                                let (result, batch) = tables.apply(&restore, &mut meta)?;
                                batches.extend(batch);
                                Ok(result)
                            }
                            Err(err) => Err(err),
                        }
                    }
                };
                outcomes.push(outcome);
            }
            if batches.is_empty() {
                drop(tables);
                txn.abort().or_backend()?;
                return Ok((outcomes, batches, meta));
            }
            tables.compact(&mut meta, self.retention)?;
            tables.write_meta(meta)?;
        }
        txn.commit().or_backend()?;
        Ok((outcomes, batches, meta))
    }
}
