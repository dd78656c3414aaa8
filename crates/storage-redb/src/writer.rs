//! The group-commit writer: one dedicated thread that owns every redb write.
//!
//! Callers send [`Request`]s over a channel. The thread takes the first waiting request, drains
//! every other queued one (up to [`MAX_BATCH`]), applies them in arrival order inside one redb
//! write transaction (each writing request gets its own revision, and each sees the effects of
//! the earlier ones), compacts history, commits once with immediate durability (one fsync for
//! the whole group), then publishes each request's batch on the hub in revision order and
//! answers each caller.
//!
//! Gathering a group: the callers just answered are likely to write again at once (a client
//! that acquires then releases, creates then destroys), and each sends its next request a
//! round trip after its answer. Committing as soon as the first of them is back would leave the
//! others to queue behind that commit's fsync, so groups alternate between small and large and
//! a write waits for one and a half fsyncs on average (measured: 31 of 64 concurrent writers
//! per fsync). So before committing, the writer waits for as many requests as were queued when
//! it answered plus as many as it answered, for at most [`linger`] (a fraction of the last
//! commit's duration, so a caller that does not come back costs a bounded share of a commit),
//! and stops early once no request has arrived for a quarter of that (callers that read next,
//! or whose write was refused before reaching the store, are not coming): with 64 writers
//! every group holds them all. A lone writer is never delayed: it is the one the writer waits
//! for.
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
use std::time::{Duration, Instant};

use redb::{Database, Durability};
use storage::watch::{Batch, Hub};
use storage::{Error, Revision, Snapshot, Txn, TxnResult};
use tokio::sync::oneshot;

use crate::stats::Counters;
use crate::tables::{Meta, OrBackend, Retention, WriteTables};

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

/// The longest the writer waits for the callers it just answered: [`LINGER_FRACTION`] of the
/// last commit's duration, at most this.
const MAX_LINGER: Duration = Duration::from_millis(2);

/// The share of the last commit's duration the writer may wait to gather a group: a caller
/// that does not come back delays the next commit by at most this fraction of one.
const LINGER_FRACTION: u32 = 2;

/// The writer stops waiting after a pause between arrivals of the linger divided by this.
const GAP_FRACTION: u32 = 4;

/// How long to wait for returning callers after a commit that took `last_commit`.
fn linger(last_commit: Duration) -> Duration {
    (last_commit / LINGER_FRACTION).min(MAX_LINGER)
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
    pub(crate) retention: Retention,
    pub(crate) stats: Arc<Counters>,
}

impl Writer {
    /// Serves requests until every sender is gone.
    pub(crate) fn run(mut self) {
        // Requests that were queued when the last group was answered, and how many it answered.
        let mut queued: Vec<Request> = Vec::new();
        let mut answered = 0;
        let mut last_commit = Duration::ZERO;
        loop {
            let mut group = std::mem::take(&mut queued);
            // Those queued at the answer, and the callers just answered (see the module docs).
            let target = (group.len() + answered).min(MAX_BATCH);
            if group.is_empty() {
                match self.requests.recv() {
                    Ok(first) => group.push(first),
                    Err(_) => return,
                }
            }
            self.drain(&mut group);
            let wait = linger(last_commit);
            let deadline = Instant::now() + wait;
            while group.len() < target {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                // Returning writers arrive close together; a pause of a quarter of the linger
                // means the rest are not writing again (they read, or wrote nothing).
                match self.requests.recv_timeout(left.min(wait / GAP_FRACTION)) {
                    Ok(request) => {
                        group.push(request);
                        self.drain(&mut group);
                    }
                    Err(_) => break,
                }
            }
            answered = group.len();
            last_commit = self.commit_group(group);
            self.drain(&mut queued);
        }
    }

    /// Moves every queued request into `group`, up to [`MAX_BATCH`].
    fn drain(&self, group: &mut Vec<Request>) {
        while group.len() < MAX_BATCH {
            match self.requests.try_recv() {
                Ok(request) => group.push(request),
                Err(_) => break,
            }
        }
    }

    /// Applies and commits one group and answers its callers; returns how long that took.
    fn commit_group(&mut self, group: Vec<Request>) -> Duration {
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
        started.elapsed()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linger_is_half_the_last_commit_and_at_most_two_milliseconds() {
        assert_eq!(linger(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            linger(Duration::from_micros(800)),
            Duration::from_micros(400)
        );
        assert_eq!(
            linger(Duration::from_millis(3)),
            Duration::from_micros(1500)
        );
        assert_eq!(linger(Duration::from_millis(50)), MAX_LINGER);
    }
}
