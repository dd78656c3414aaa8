//! The group-commit writer: one dedicated thread that owns every redb write and the
//! write-ahead log.
//!
//! Callers send [`Request`]s over a channel. The thread takes the first waiting request, drains
//! every other queued one (up to [`MAX_BATCH`]), applies them in arrival order inside one redb
//! write transaction (each writing request gets its own revision, and each sees the effects of
//! the earlier ones), compacts history, makes the group durable once (one `fdatasync` for the
//! whole group, see below), then publishes each request's batch on the hub in revision order
//! and answers each caller.
//!
//! Making a group durable: a durable redb commit writes the B-tree pages the group touched
//! (tens of scattered pages) and syncs them, and holds the writer for all of it; appending one
//! record to a preallocated log and `fdatasync`-ing it is one sequential write (measured here:
//! a durable redb commit of a small group 0.29 ms, a logged one 0.19 ms with the non-durable
//! redb commit included; at 64 concurrent writers 47,000 transactions/s durable, 76,000 logged).
//! So a group's changes (every `kv`, `tombstones` and `history` change in order, and the final
//! meta: a redo record, `tables.rs`) are appended to the log ([`Wal`], `wal.rs`) and synced,
//! and only then committed to redb with `Durability::None`, which redb makes visible to readers
//! at once but does not sync. Every so often (the log holds [`CHECKPOINT_BYTES`], or has held
//! records for [`CHECKPOINT_INTERVAL`], at exit, and for a group holding a restore or whose
//! record does not fit in the log) the group instead commits durably into redb, storing a new
//! random log nonce in the same commit, and the log starts over at offset 0. The checkpoint is
//! also what lets redb reuse the pages non-durable commits freed from the durable state.
//!
//! Recovery (`lib.rs`, at open): redb opens at its last durable commit; the log's records
//! written with the nonce that commit stored are replayed in order while each starts at the
//! revision after the previous one (the first at redb's revision + 1), in one durable commit
//! that stores a new nonce. A torn or corrupt record ends the replay: it was never synced, so
//! never acknowledged. Records from before a checkpoint carry the old nonce (and revisions the
//! durable state already holds), so they are never applied again, and no bytes a user wrote
//! into a value can pass for a record without the nonce, which never leaves the store.
//!
//! Gathering a group: the writer does not wait for more requests than are queued when it
//! starts one: the requests that arrive while a group commits (callers whose answer came back,
//! others) are the next group. An earlier version waited, after each commit, up to half of it
//! for the callers just answered to come back, so that writers returning at once would share
//! one fsync (measured in-process: 1.4-1.9x the writes/s at 64 writers). Behind HTTP on a
//! loaded 2-core host the callers come back slowly and the writer idled instead (2026-11-28,
//! `kv-acquire-release` at 16 connections: 5,700 pairs/s with it, 7,100 without, every one of
//! five alternated rounds; session create+destroy +7 %; 64 connections and kv writes at 32:
//! no difference), so it was removed.
//!
//! Invariants:
//! - Nothing of a group is visible, published or acknowledged before its log record is synced
//!   (or its durable commit returned) and its redb commit returned.
//! - A redb or log error anywhere in a group fails every request of that group with
//!   [`Error::Backend`]; the in-memory [`Meta`] only advances after a successful commit. A
//!   group whose record was synced but whose redb commit failed has its record erased before
//!   the next group is logged (if erasing fails, every later group fails: a record after it
//!   would never be replayed). A group failed by the log's own write or sync may still be
//!   replayed by the next open if the process dies before the next group overwrites it: its
//!   outcome is unknown, as with any backend error.
//! - A group in which nothing was written is aborted, not committed: no fsync.
//! - The thread exits once every sender is dropped and the queue is drained; requests queued
//!   before that are still served, and a checkpoint empties the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use redb::{Database, Durability};
use storage::watch::{Batch, Hub};
use storage::{Error, Revision, Snapshot, Txn, TxnResult};
use tokio::sync::oneshot;

use crate::stats::Counters;
use crate::tables::{self, Meta, OrBackend, Retention, WriteTables};
use crate::wal::{self, Wal};

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

/// The longest logged groups wait for a checkpoint (a durable redb commit), whatever the size
/// of the log: redb reuses the pages a non-durable commit frees only after a durable one.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// The most bytes of log records between checkpoints: what redb writes between two durable
/// commits (about as much) is what the file may grow by before it reuses the pages freed
/// meanwhile, so this bounds the file's growth under churn; a quarter of the log leaves room
/// for a large group's record.
const CHECKPOINT_BYTES: u64 = wal::CAPACITY / 4;

/// The largest redo record buffer the writer keeps for the next group: room for the common
/// large group (a scheduler batch of 64 plans is ~1.5 MB).
const KEPT_REDO_BYTES: usize = 4 << 20;

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
    /// The write-ahead log, reset (with the nonce in redb) by the last durable commit.
    pub(crate) wal: Wal,
    /// When the last durable commit returned.
    pub(crate) checkpointed_at: Instant,
    /// Whether a group was committed through the log since then.
    pub(crate) logged_since_checkpoint: bool,
    /// The buffer the next group's redo record is written in: the last one's, so its pages
    /// are reused instead of allocated (and faulted in) again for every group.
    pub(crate) redo_buffer: Vec<u8>,
    /// Set when the log may hold a record of a group that did not commit (erasing it failed):
    /// every later group fails, since a record after it would never be replayed.
    pub(crate) broken: Option<String>,
}

impl Writer {
    /// Serves requests until every sender is gone.
    pub(crate) fn run(mut self) {
        loop {
            let mut group = match self.requests.recv() {
                Ok(first) => vec![first],
                Err(_) => {
                    // Nothing is lost without it (the log replays at the next open); it only
                    // spares that open the replay.
                    let _ = self.checkpoint();
                    return;
                }
            };
            self.drain(&mut group);
            self.commit_group(group);
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

    /// Applies and commits one group and answers its callers.
    fn commit_group(&mut self, mut group: Vec<Request>) {
        let started = Instant::now();
        match self.apply_group(&mut group) {
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

    /// Applies a group in one write transaction and, if it wrote anything, makes it durable:
    /// through the log (one appended record, `fdatasync`, then a non-durable redb commit), or
    /// as a checkpoint (a durable redb commit that stores a new log nonce, then the log starts
    /// over) when the group holds a restore, its record does not fit in the log, or a
    /// checkpoint is due.
    /// Each transaction is taken out of its request (its keys and values move into the
    /// published events); the requests keep their replies.
    fn apply_group(
        &mut self,
        group: &mut [Request],
    ) -> Result<(Vec<Outcome>, Vec<Batch>, Meta), Error> {
        if let Some(why) = &self.broken {
            return Err(Error::Backend(format!("the store must be reopened: {why}")));
        }
        let mut txn = self.db.begin_write().or_backend()?;
        let restore = group
            .iter()
            .any(|request| matches!(request, Request::Restore { .. }));
        let mut meta = self.meta;
        let mut outcomes = Vec::with_capacity(group.len());
        let mut batches = Vec::new();
        let checkpoint;
        let redo;
        {
            let mut tables = WriteTables::open(&txn)?;
            if !restore {
                tables.record_redo(std::mem::take(&mut self.redo_buffer));
            }
            for request in group {
                let outcome = match request {
                    Request::Txn { txn, .. } => {
                        let (result, batch) = tables.apply(std::mem::take(txn), &mut meta)?;
                        batches.extend(batch);
                        Ok(result)
                    }
                    Request::Restore { snapshot, .. } => {
                        let keys = tables.keys()?;
                        match storage::restore_txn(keys.iter().map(Vec::as_slice), snapshot) {
                            Ok(restore) => {
                                let (result, batch) = tables.apply(restore, &mut meta)?;
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
            redo = tables.take_redo(self.meta.revision + 1, meta);
            checkpoint = match &redo {
                Some(record) if self.wal.fits(record.len()) && !self.checkpoint_due() => {
                    // The table holds `self.meta`'s compaction fields (`tables.rs`).
                    tables.write_compaction_changes(self.meta, meta)?;
                    None
                }
                _ => {
                    let nonce = new_nonce();
                    tables.write_meta(meta)?;
                    tables.write_wal_nonce(nonce)?;
                    Some(nonce)
                }
            };
        }
        match (checkpoint, redo) {
            (None, Some(record)) => {
                // Everything that can fail before the commit comes before the append: a synced
                // record must either be committed or erased.
                txn.set_durability(Durability::None).or_backend()?;
                let at = self.wal.append(&record)?;
                if let Err(err) = txn.commit() {
                    // Not committed: the record must not be replayed.
                    if let Err(erase) = self.wal.erase(at) {
                        self.broken = Some(erase.to_string());
                    }
                    return Err(tables::backend(err));
                }
                self.logged_since_checkpoint = true;
                self.keep_redo_buffer(record);
            }
            (checkpoint, record) => {
                txn.set_durability(Durability::Immediate).or_backend()?;
                txn.commit().or_backend()?;
                if let Some(nonce) = checkpoint {
                    self.wal.reset(nonce);
                }
                self.checkpointed_at = Instant::now();
                self.logged_since_checkpoint = false;
                if let Some(record) = record {
                    self.keep_redo_buffer(record);
                }
            }
        }
        Ok((outcomes, batches, meta))
    }

    /// Keeps a written redo record's buffer for the next group's record, unless it grew beyond
    /// [`KEPT_REDO_BYTES`] (a rare large group, such as a garbage collection, should not keep
    /// its megabytes resident).
    fn keep_redo_buffer(&mut self, record: Vec<u8>) {
        if record.capacity() <= KEPT_REDO_BYTES {
            self.redo_buffer = record;
        }
    }

    /// Whether the next group should commit durably: the log holds more than
    /// [`CHECKPOINT_BYTES`], or it has held records for [`CHECKPOINT_INTERVAL`].
    fn checkpoint_due(&self) -> bool {
        self.wal.position() > CHECKPOINT_BYTES
            || (self.logged_since_checkpoint
                && self.checkpointed_at.elapsed() >= CHECKPOINT_INTERVAL)
    }

    /// Makes every logged group durable in redb and starts the log over (at exit, so the next
    /// open has nothing to replay).
    fn checkpoint(&mut self) -> Result<(), Error> {
        if !self.logged_since_checkpoint {
            return Ok(());
        }
        let txn = self.db.begin_write().or_backend()?;
        let nonce = new_nonce();
        {
            let mut tables = WriteTables::open(&txn)?;
            // Logged groups did not write the revision and history bytes (`tables.rs`).
            tables.write_meta(self.meta)?;
            tables.write_wal_nonce(nonce)?;
        }
        txn.commit().or_backend()?;
        self.wal.reset(nonce);
        self.checkpointed_at = Instant::now();
        self.logged_since_checkpoint = false;
        Ok(())
    }
}

/// A fresh log nonce (see `wal.rs`): random, so no byte written under an earlier one can pass
/// for a record.
pub(crate) fn new_nonce() -> u64 {
    rand::random()
}
