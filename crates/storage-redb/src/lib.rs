//! The embedded, durable default backend: [`RedbStorage`], the `storage::Storage` contract on
//! one redb file.
//!
//! Where it sits: below `cairn` (which opens it from configuration and hands services an
//! `Arc<dyn Storage>`, and reads [`RedbStats`] through a [`RedbStatsSource`] for its metrics),
//! above redb. Modules: `codec` (record encoding), `tables` (schema and every redb operation),
//! `writer` (the group-commit thread), `wal` (its write-ahead log, `<path>.wal`), `stats` (what
//! the writer has done: counters, commit latency and batch sizes), and this file (the async
//! API, and the log's replay at open).
//!
//! How it works: writes go to one dedicated writer thread that applies every queued
//! transaction in one redb write transaction and makes the group durable with one synced
//! append to the write-ahead log before committing it to redb (group commit: the disk's fsync
//! rate, not the number of writers, bounds throughput; the writer's docs say why a log and
//! when it checkpoints), then publishes each transaction on a [`Hub`]. Reads open
//! redb read transactions (MVCC snapshots, never blocked by the writer) on tokio's blocking
//! pool, except point reads and scans of at most 64 keys, which run on the calling thread
//! (cheaper than the hand-off). Watches replay the `history` table, then follow the hub.
//!
//! Invariants:
//! - A transaction is durable (fsynced) when `txn` returns, and visible to readers and
//!   watchers no earlier than its commit.
//! - Revisions, the history table and tombstones follow the contract in `storage`'s docs;
//!   history keeps the last [`RedbOptions::history_retention`] revisions (down to 1/64 fewer
//!   after a compaction, which drops a chunk at a time; exactly that many below 64), fewer
//!   if they hold more than [`RedbOptions::history_bytes`] (so the file stays flat under churn
//!   of large transactions; a watch that falls behind gets `Error::Compacted` and re-reads).
//! - Nothing read from disk is trusted: a corrupt record is an [`Error::Backend`], never a
//!   panic.
//! - After [`Storage::close`] returns, the writer thread has exited, the database file is
//!   closed (once in-flight reads finish) and every call fails with [`Error::Closed`].

mod codec;
mod stats;
mod tables;
mod wal;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, mpsc};
use std::thread::JoinHandle;

use async_trait::async_trait;
use futures::future::BoxFuture;
use redb::{Database, ReadableDatabase};
use storage::watch::{History, Hub};
use storage::{
    DEFAULT_HISTORY_RETENTION, Error, Event, KeyRange, KeyValue, Result, Revision, ScanResult,
    Snapshot, Storage, Txn, TxnResult, WatchStream,
};
use tokio::sync::oneshot;

use crate::stats::Counters;
use crate::tables::{OrBackend, Reader, Retention, WriteTables};
use crate::wal::Wal;
use crate::writer::{Request, Writer};

pub use crate::stats::{BATCH_SIZE_BUCKETS, COMMIT_SECONDS_BUCKETS, Distribution, RedbStats};

/// The most keys a scan reads on the calling (runtime) thread; larger scans run on the
/// blocking pool.
const INLINE_SCAN_KEYS: usize = 64;

/// The default of [`RedbOptions::history_bytes`]: 64 MiB.
pub const DEFAULT_HISTORY_BYTES: u64 = 64 << 20;

/// How to open a [`RedbStorage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedbOptions {
    /// How many revisions of history to keep for watches (default
    /// [`DEFAULT_HISTORY_RETENTION`]); older ones are compacted as new ones commit, a chunk of
    /// 1/64 of this at a time (so down to that many fewer are kept just after).
    pub history_retention: u64,
    /// The most bytes of history records to keep (default [`DEFAULT_HISTORY_BYTES`]): the
    /// oldest revisions are compacted while history holds more, however few revisions that
    /// leaves (the newest is always kept). Bounds the file under churn of large transactions.
    pub history_bytes: u64,
    /// redb's page cache size in bytes (default 64 MiB).
    pub cache_size: usize,
}

impl Default for RedbOptions {
    fn default() -> RedbOptions {
        RedbOptions {
            history_retention: DEFAULT_HISTORY_RETENTION,
            history_bytes: DEFAULT_HISTORY_BYTES,
            cache_size: 64 << 20,
        }
    }
}

impl RedbOptions {
    pub fn with_history_retention(mut self, history_retention: u64) -> RedbOptions {
        self.history_retention = history_retention;
        self
    }

    pub fn with_history_bytes(mut self, history_bytes: u64) -> RedbOptions {
        self.history_bytes = history_bytes;
        self
    }

    pub fn with_cache_size(mut self, cache_size: usize) -> RedbOptions {
        self.cache_size = cache_size;
        self
    }
}

/// Reads a store's [`RedbStats`] without holding the store open (for a metrics source that
/// may outlive it); from [`RedbStorage::stats_source`].
#[derive(Debug, Clone)]
pub struct RedbStatsSource {
    stats: Arc<Counters>,
}

impl RedbStatsSource {
    pub fn read(&self) -> RedbStats {
        self.stats.snapshot()
    }
}

/// A durable store in one redb file.
pub struct RedbStorage {
    inner: Arc<Inner>,
}

/// The database handle, shared with watch streams (through [`History`]).
struct Shared {
    closed: AtomicBool,
    /// `None` once closed.
    db: RwLock<Option<Arc<Database>>>,
}

struct Inner {
    path: PathBuf,
    shared: Arc<Shared>,
    /// `None` once closed; dropping it stops the writer.
    requests: Mutex<Option<mpsc::Sender<Request>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// `None` once closed; with the writer's clone gone, every watch stream ends.
    hub: Mutex<Option<Hub>>,
    revision: Arc<AtomicU64>,
    stats: Arc<Counters>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for RedbStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStorage")
            .field("path", &self.inner.path)
            .field("revision", &self.inner.revision.load(Ordering::Acquire))
            .field("closed", &self.inner.shared.closed.load(Ordering::Acquire))
            .finish()
    }
}

impl RedbStorage {
    /// Opens (creating if missing) the store in the redb file at `path`, with default options.
    pub fn open(path: &Path) -> Result<RedbStorage> {
        RedbStorage::open_with(path, RedbOptions::default())
    }

    /// Opens (creating if missing) the store in the redb file at `path`, with its write-ahead
    /// log at `path` + `.wal` (created and preallocated if missing). Blocks while redb opens
    /// the file and the log is replayed: crash recovery after an unclean shutdown.
    pub fn open_with(path: &Path, options: RedbOptions) -> Result<RedbStorage> {
        let db = Database::builder()
            .set_cache_size(options.cache_size)
            .create(path)
            .map_err(|err| Error::Backend(format!("redb: opening {}: {err}", path.display())))?;
        let mut wal = Wal::open(wal::path_for(path))?;
        let meta = {
            // One durable commit: what the log holds past redb's last durable commit (replayed
            // in order while each record follows the previous one), and a new log nonce.
            let txn = db.begin_write().or_backend()?;
            let mut tables = WriteTables::open(&txn)?;
            tables.create_all()?;
            let mut meta = tables.read_meta()?;
            tables.count_history_bytes_if_missing(&mut meta)?;
            for record in wal.read(tables.read_wal_nonce()?)? {
                if !tables.replay(&record, &mut meta)? {
                    break;
                }
            }
            let nonce = writer::new_nonce();
            tables.write_wal_nonce(nonce)?;
            drop(tables);
            txn.commit().or_backend()?;
            wal.reset(nonce);
            meta
        };
        let db = Arc::new(db);
        let hub = Hub::new();
        let revision = Arc::new(AtomicU64::new(meta.revision));
        let (sender, receiver) = mpsc::channel();
        let stats = Arc::new(Counters::default());
        let writer = Writer {
            db: db.clone(),
            hub: hub.clone(),
            requests: receiver,
            revision: revision.clone(),
            meta,
            retention: Retention {
                revisions: options.history_retention,
                bytes: options.history_bytes,
            },
            stats: stats.clone(),
            wal,
            checkpointed_at: std::time::Instant::now(),
            logged_since_checkpoint: false,
            redo_buffer: Vec::new(),
            broken: None,
        };
        let handle = std::thread::Builder::new()
            .name("storage-redb-writer".to_owned())
            .spawn(move || writer.run())
            .map_err(|err| Error::Backend(format!("starting the writer thread: {err}")))?;
        Ok(RedbStorage {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                shared: Arc::new(Shared {
                    closed: AtomicBool::new(false),
                    db: RwLock::new(Some(db)),
                }),
                requests: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(handle)),
                hub: Mutex::new(Some(hub)),
                revision,
                stats,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// What the writer has done since open: with concurrent writers, fewer commits than
    /// requests is group commit at work.
    pub fn stats(&self) -> RedbStats {
        self.inner.stats.snapshot()
    }

    /// A reader of [`RedbStorage::stats`] that does not keep the store open.
    pub fn stats_source(&self) -> RedbStatsSource {
        RedbStatsSource {
            stats: Arc::clone(&self.inner.stats),
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.shared.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Sends a request to the writer and waits for its answer.
    async fn submit<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<T>>) -> Request,
    ) -> Result<T> {
        self.check_open()?;
        let (reply, answer) = oneshot::channel();
        {
            let requests = lock(&self.inner.requests);
            let Some(requests) = requests.as_ref() else {
                return Err(Error::Closed);
            };
            if requests.send(request(reply)).is_err() {
                return Err(self.writer_gone());
            }
        }
        answer.await.map_err(|_| self.writer_gone())?
    }

    fn writer_gone(&self) -> Error {
        match self.check_open() {
            Err(closed) => closed,
            Ok(()) => Error::Backend("the redb writer thread stopped".to_owned()),
        }
    }
}

impl Shared {
    fn db(&self) -> Result<Arc<Database>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(Error::Closed)
    }

    /// Runs a point `query` in a fresh read transaction on the calling thread. A point read
    /// touches a handful of B-tree pages, almost always in redb's cache, so it costs less than
    /// the hand-off to the blocking pool (two thread switches) that `read` pays; range reads,
    /// which can be large, keep using `read`.
    fn read_inline<T>(&self, query: impl FnOnce(&Reader) -> Result<T>) -> Result<T> {
        let db = self.db()?;
        let reader = Reader::new(db.begin_read().or_backend()?);
        query(&reader)
    }

    /// Runs `query` in a fresh read transaction on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        query: impl FnOnce(&Reader) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.db()?;
        tokio::task::spawn_blocking(move || {
            let reader = Reader::new(db.begin_read().or_backend()?);
            query(&reader)
        })
        .await
        .map_err(|err| Error::Backend(format!("read task failed: {err}")))?
    }
}

impl History for Shared {
    fn read_history(
        &self,
        range: &KeyRange,
        after: Revision,
    ) -> BoxFuture<'_, Result<(Vec<Event>, Revision)>> {
        let range = range.clone();
        Box::pin(self.read(move |reader| reader.history(&range, after)))
    }
}

#[async_trait]
impl Storage for RedbStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.inner.shared.read_inline(|reader| reader.get(key))
    }

    async fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<KeyValue>>> {
        self.inner
            .shared
            .read_inline(|reader| reader.get_many(keys))
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> Result<ScanResult> {
        // Most scans on request paths are small (a session's locks, a node's checks): read up
        // to INLINE_SCAN_KEYS + 1 keys on the calling thread, which costs less than the
        // blocking pool's two thread switches. A range that holds more is read again, whole,
        // on the blocking pool, so a large scan never occupies a runtime worker for long.
        let inline_limit = limit.map_or(INLINE_SCAN_KEYS, |l| l.min(INLINE_SCAN_KEYS));
        let first = self
            .inner
            .shared
            .read_inline(|reader| reader.scan(&range, Some(inline_limit)))?;
        if !first.more || limit == Some(inline_limit) {
            return Ok(first);
        }
        self.inner
            .shared
            .read(move |reader| reader.scan(&range, limit))
            .await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult> {
        self.submit(|reply| Request::Txn { txn, reply }).await
    }

    async fn revision(&self) -> Result<Revision> {
        self.check_open()?;
        Ok(self.inner.revision.load(Ordering::Acquire))
    }

    fn known_revision(&self) -> Option<Revision> {
        self.check_open().ok()?;
        Some(self.inner.revision.load(Ordering::Acquire))
    }

    async fn range_revision(&self, range: KeyRange) -> Result<Revision> {
        self.inner
            .shared
            .read(move |reader| reader.range_revision(&range))
            .await
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> Result<WatchStream> {
        self.check_open()?;
        let hub = lock(&self.inner.hub).clone().ok_or(Error::Closed)?;
        let history: Arc<dyn History> = self.inner.shared.clone();
        Ok(hub.watch(history, range, after))
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        self.inner.shared.read(|reader| reader.snapshot()).await
    }

    async fn restore(&self, snapshot: &Snapshot) -> Result<Revision> {
        // Refuse a malformed snapshot before it reaches the writer.
        storage::restore_txn(std::iter::empty(), snapshot)?;
        let snapshot = snapshot.clone();
        self.submit(|reply| Request::Restore { snapshot, reply })
            .await
    }

    async fn close(&self) -> Result<()> {
        if self.inner.shared.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Dropping the sender lets the writer finish what is queued and exit.
        drop(lock(&self.inner.requests).take());
        drop(lock(&self.inner.hub).take());
        let writer = lock(&self.inner.writer).take();
        if let Some(writer) = writer {
            tokio::task::spawn_blocking(move || writer.join())
                .await
                .map_err(|err| Error::Backend(format!("joining the writer thread: {err}")))?
                .map_err(|_| Error::Backend("the redb writer thread panicked".to_owned()))?;
        }
        let db = self
            .inner
            .shared
            .db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // The writer's handle is gone; if no read is in flight this is the last one.
        if let Some(db) = db.and_then(|db| Arc::try_unwrap(db).ok()) {
            db.close().or_backend()?;
        }
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without `close`: stop the writer (it exits once its queue is empty), end watches, and
        // release this handle on the database.
        self.shared.closed.store(true, Ordering::Release);
        drop(lock(&self.requests).take());
        drop(lock(&self.hub).take());
        drop(
            self.shared
                .db
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }
}
