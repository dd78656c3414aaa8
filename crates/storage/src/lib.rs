//! The storage contract every cairn service writes through.
//!
//! One ordered key-value store with a global revision, in the model of etcd v3: every committed
//! transaction gets the next revision, every key remembers the revision that created it and the
//! one that last modified it, and a watch replays every change after a given revision. Services
//! never see a backend: they hold an `Arc<dyn Storage>` that `cairn` builds from configuration.
//!
//! Where it sits: below every service crate and `http-kit`'s blocking queries; above the
//! backends (`storage-redb`, and [`MemStorage`] here for tests and `cairn dev --in-memory`).
//!
//! Invariants (checked for every backend by the `storage-tests` conformance suite):
//! - Every transaction that writes gets a revision greater than every earlier one; a
//!   transaction whose compares fail, or that writes nothing, writes no revision and reports
//!   the one it read at. The embedded backends are dense: revisions start at 0 for an empty
//!   store and grow by exactly one per writing transaction. A backend sharing a cluster-wide
//!   revision (etcd, where other prefixes and programs write too) is only strictly increasing,
//!   and does not start at 0; services never assume revisions are dense (the suite's
//!   `Semantics` says which a backend promises, docs/design.md argues why).
//! - A transaction changes each key at most once in effect. The embedded backends apply its ops
//!   in order (a key deleted then put again is re-created); etcd keeps one change per key per
//!   revision, so there only the final state of each key is applied and a re-put key continues.
//! - A successful transaction is atomic and, once `txn` returns, durable (for durable backends).
//! - `watch(range, after)` yields every event in `range` with revision `> after`, in revision
//!   order, each exactly once, or ends with [`Error::Compacted`] if that history is gone.
//! - This crate depends on no backend: no backend type appears in its API.

mod keys;
mod mem;
mod snapshot;
pub mod watch;

use std::fmt;

use async_trait::async_trait;

pub use keys::{KeyRange, prefix_end};
pub use mem::{DEFAULT_HISTORY_RETENTION, MemStorage, restore_txn};
pub use snapshot::Snapshot;
pub use watch::WatchStream;

/// A store revision. 0 means "before the first write".
pub type Revision = u64;

/// One stored key with its value and revision metadata.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the transaction that created this key (since its last deletion).
    pub create_revision: Revision,
    /// Revision of the transaction that last wrote this key.
    pub mod_revision: Revision,
    /// Number of writes since creation; 1 after the first put.
    pub version: u64,
}

impl fmt::Debug for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values may be ciphertext or large; show only their length.
        f.debug_struct("KeyValue")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("value_len", &self.value.len())
            .field("create_revision", &self.create_revision)
            .field("mod_revision", &self.mod_revision)
            .field("version", &self.version)
            .finish()
    }
}

/// A condition a transaction checks before it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key exists.
    Exists(Vec<u8>),
    /// The key does not exist.
    Missing(Vec<u8>),
    /// The key's mod revision equals the given one (0 matches a missing key, as in etcd).
    ModRevision(Vec<u8>, Revision),
}

impl Compare {
    pub fn key(&self) -> &[u8] {
        match self {
            Compare::Exists(key) | Compare::Missing(key) | Compare::ModRevision(key, _) => key,
        }
    }

    /// Whether the compare holds against `current`, the key's present state.
    pub fn holds(&self, current: Option<&KeyValue>) -> bool {
        self.holds_at(current.map(|kv| kv.mod_revision))
    }

    /// Whether the compare holds for a key whose mod revision is `current` (`None`: missing):
    /// every compare needs no more of the key than that.
    pub fn holds_at(&self, current: Option<Revision>) -> bool {
        match self {
            Compare::Exists(_) => current.is_some(),
            Compare::Missing(_) => current.is_none(),
            Compare::ModRevision(_, revision) => current.unwrap_or(0) == *revision,
        }
    }
}

/// A write inside a transaction.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Delete one key; deleting a missing key is a no-op.
    Delete {
        key: Vec<u8>,
    },
    /// Delete every key in the range.
    DeleteRange(KeyRange),
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Put { key, value } => f
                .debug_struct("Put")
                .field("key", &String::from_utf8_lossy(key))
                .field("value_len", &value.len())
                .finish(),
            Op::Delete { key } => f
                .debug_struct("Delete")
                .field("key", &String::from_utf8_lossy(key))
                .finish(),
            Op::DeleteRange(range) => f.debug_tuple("DeleteRange").field(range).finish(),
        }
    }
}

/// `if compares { success } else { failure }`, applied atomically at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    pub fn when(mut self, compare: Compare) -> Txn {
        self.compares.push(compare);
        self
    }

    pub fn then(mut self, op: Op) -> Txn {
        self.success.push(op);
        self
    }

    pub fn otherwise(mut self, op: Op) -> Txn {
        self.failure.push(op);
        self
    }

    /// A transaction that unconditionally puts one key.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Txn {
        Txn::new().then(Op::Put {
            key: key.into(),
            value: value.into(),
        })
    }

    /// A transaction that unconditionally deletes one key.
    pub fn delete(key: impl Into<Vec<u8>>) -> Txn {
        Txn::new().then(Op::Delete { key: key.into() })
    }
}

/// What a transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnResult {
    /// Whether every compare held (so `success` ran rather than `failure`).
    pub succeeded: bool,
    /// The store revision after the transaction: the new revision if it wrote anything,
    /// otherwise the revision it read at.
    pub revision: Revision,
}

/// How much one transaction may carry on a backend (etcd's request limits); a larger one fails
/// with [`Error::Backend`]. The embedded backends have none ([`TxnLimits::UNBOUNDED`]).
///
/// Callers that may write large transactions (the scheduler's state writer) ask
/// [`Storage::txn_limits`] and split their writes with [`TxnLimits::fits`]. The byte count is an
/// upper bound of what the backend sends, computed here from each operation's key and value
/// and the backend's per-key overhead: a delete counts its key three times (a backend may
/// check, delete and tombstone it). A `DeleteRange` counts as one operation and its keys are
/// not counted: a caller deleting ranges must leave room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// Most operations in one branch (and most compares) of one transaction.
    pub max_ops: usize,
    /// Most bytes of one transaction, as [`TxnLimits::op_bytes`] and
    /// [`TxnLimits::compare_bytes`] count them.
    pub max_bytes: usize,
    /// Bytes the backend adds to every key it sends (its prefix, its framing).
    pub key_overhead: usize,
}

impl TxnLimits {
    /// No limit at all.
    pub const UNBOUNDED: TxnLimits = TxnLimits {
        max_ops: usize::MAX,
        max_bytes: usize::MAX,
        key_overhead: 0,
    };

    /// Framing counted for each operation and compare, beyond its key and value.
    const OP_FRAMING: usize = 16;

    /// Whether this is [`TxnLimits::UNBOUNDED`] (or as large).
    pub fn is_unbounded(&self) -> bool {
        self.max_ops == usize::MAX && self.max_bytes == usize::MAX
    }

    /// An upper bound of the bytes `op` adds to a transaction.
    pub fn op_bytes(&self, op: &Op) -> usize {
        let key = |key: &[u8]| key.len().saturating_add(self.key_overhead);
        let bytes = match op {
            Op::Put { key: k, value } => key(k).saturating_add(value.len()),
            Op::Delete { key: k } => key(k).saturating_mul(3),
            Op::DeleteRange(range) => key(&range.start).saturating_add(key(&range.end)),
        };
        bytes.saturating_add(Self::OP_FRAMING)
    }

    /// An upper bound of the bytes `compare` adds to a transaction.
    pub fn compare_bytes(&self, compare: &Compare) -> usize {
        compare
            .key()
            .len()
            .saturating_add(self.key_overhead)
            .saturating_add(Self::OP_FRAMING)
    }

    /// The bytes of a whole transaction, as counted against [`TxnLimits::max_bytes`].
    pub fn txn_bytes(&self, txn: &Txn) -> usize {
        let compares = txn.compares.iter().map(|c| self.compare_bytes(c));
        let ops = txn
            .success
            .iter()
            .chain(&txn.failure)
            .map(|op| self.op_bytes(op));
        compares.chain(ops).fold(0, usize::saturating_add)
    }

    /// Whether `txn` is within these limits.
    pub fn fits(&self, txn: &Txn) -> bool {
        let ops = txn
            .compares
            .len()
            .max(txn.success.len())
            .max(txn.failure.len());
        ops <= self.max_ops && self.txn_bytes(txn) <= self.max_bytes
    }
}

/// The answer to a scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanResult {
    /// Keys in ascending byte order.
    pub kvs: Vec<KeyValue>,
    /// The store revision the scan read at.
    pub revision: Revision,
    /// Whether more keys in the range were cut off by the limit.
    pub more: bool,
}

/// A change to one key, as a watch delivers it.
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub key: Vec<u8>,
    /// The new value for a put; empty for a delete.
    pub value: Vec<u8>,
    /// The revision of the transaction that made the change.
    pub revision: Revision,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("kind", &self.kind)
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("value_len", &self.value.len())
            .field("revision", &self.revision)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// Storage errors. Backends map their own failures into these; no backend type leaks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A watch asked for history that compaction already removed.
    #[error("revision {requested} has been compacted; the oldest available is {compacted}")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    /// A snapshot could not be decoded.
    #[error("invalid snapshot: {0}")]
    InvalidSnapshot(String),
    /// The store was closed.
    #[error("storage is closed")]
    Closed,
    /// The backend failed (I/O, corruption). The message is for operators, not clients.
    #[error("storage backend error: {0}")]
    Backend(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An ordered key-value store with a global revision. Dyn-compatible: services hold
/// `Arc<dyn Storage>`.
#[async_trait]
pub trait Storage: Send + Sync + fmt::Debug + 'static {
    /// The current value of one key.
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>>;

    /// The current values of `keys`, in their order. The default asks [`Storage::get`] for
    /// each in turn; the embedded store reads them in one read transaction, which costs less
    /// than as many `get`s (for a request that checks several records before one write).
    /// Callers must not assume one revision: other backends and wrappers read in turn.
    async fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<KeyValue>>> {
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(self.get(key).await?);
        }
        Ok(values)
    }

    /// Keys in `range` in ascending order, at most `limit` of them (`None`: all).
    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> Result<ScanResult>;

    /// Applies a transaction atomically; durable when it returns.
    async fn txn(&self, txn: Txn) -> Result<TxnResult>;

    /// The revision of the last committed transaction.
    async fn revision(&self) -> Result<Revision>;

    /// [`Storage::revision`] when this store knows it without I/O (the embedded stores keep
    /// it in memory); `None` otherwise, or when the store is closed: then ask `revision`.
    /// What a response header that names the store's revision reads on every request.
    fn known_revision(&self) -> Option<Revision> {
        None
    }

    /// The revision of the last change (put or delete) to any key in `range`, or 0 if the range
    /// never changed. Deletions are remembered until compaction; after that the compaction
    /// revision stands in for them, so the answer never goes backwards for a range.
    async fn range_revision(&self, range: KeyRange) -> Result<Revision>;

    /// Every event in `range` with revision `> after`, then live events as they commit.
    async fn watch(&self, range: KeyRange, after: Revision) -> Result<WatchStream>;

    /// A consistent copy of every key at one revision.
    async fn snapshot(&self) -> Result<Snapshot>;

    /// Makes the store's contents equal to `snapshot`'s, atomically, as one new revision (so
    /// revisions never go backwards and watchers see the change as events).
    async fn restore(&self, snapshot: &Snapshot) -> Result<Revision>;

    /// Flushes and closes the store; later calls fail with [`Error::Closed`].
    async fn close(&self) -> Result<()>;

    /// How much one transaction may carry here; unbounded unless the backend says otherwise.
    fn txn_limits(&self) -> TxnLimits {
        TxnLimits::UNBOUNDED
    }
}

/// Convenience methods for services; implemented for every `Storage`.
#[async_trait]
pub trait StorageExt: Storage {
    /// Unconditionally puts one key and returns the new revision.
    async fn put(&self, key: &[u8], value: &[u8]) -> Result<Revision> {
        Ok(self.txn(Txn::put(key, value)).await?.revision)
    }

    /// Unconditionally deletes one key and returns the store revision afterwards.
    async fn delete(&self, key: &[u8]) -> Result<Revision> {
        Ok(self.txn(Txn::delete(key)).await?.revision)
    }

    /// All keys under `prefix`.
    async fn scan_prefix(&self, prefix: &[u8]) -> Result<ScanResult> {
        self.scan(KeyRange::prefix(prefix), None).await
    }
}

impl<S: Storage + ?Sized> StorageExt for S {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_limits_count_operations_per_branch_and_bytes_with_the_key_overhead() {
        let limits = TxnLimits {
            max_ops: 2,
            max_bytes: 200,
            key_overhead: 10,
        };
        let put = Op::Put {
            key: b"key".to_vec(),
            value: vec![0; 50],
        };
        assert_eq!(limits.op_bytes(&put), 3 + 10 + 50 + 16);
        let delete = Op::Delete {
            key: b"key".to_vec(),
        };
        assert_eq!(limits.op_bytes(&delete), 3 * (3 + 10) + 16);
        let two = Txn::new().then(put.clone()).then(delete.clone());
        assert!(limits.fits(&two));
        assert!(!limits.fits(&two.clone().then(delete.clone())), "three ops");
        let big = Txn::new().then(Op::Put {
            key: b"k".to_vec(),
            value: vec![0; 200],
        });
        assert!(!limits.fits(&big), "too many bytes");
        assert!(TxnLimits::UNBOUNDED.fits(&two.then(delete)));
        assert!(TxnLimits::UNBOUNDED.is_unbounded() && !limits.is_unbounded());
    }
}
