//! The in-memory [`Storage`]: a `BTreeMap` behind one mutex, for tests and `cairn dev
//! --in-memory`.
//!
//! Where it sits: inside the `storage` crate beside the trait, so every crate can test against a
//! real store without a backend dependency; it runs the same `storage-tests` conformance suite
//! as the durable backends.
//!
//! Invariants:
//! - Every operation takes the one `std::sync::Mutex` briefly and never across an `.await`;
//!   a transaction is applied, logged and published on the [`Hub`] under that lock, so batches
//!   reach the hub in revision order and are visible to [`History`] before they are published.
//! - The change log holds exactly the batches with revision in `(compacted, revision]`, one per
//!   writing transaction, contiguous; `compacted = revision - retention` once the store has more
//!   revisions than its retention. A watch from before `compacted` fails with
//!   [`Error::Compacted`].
//! - A tombstone (key → delete revision) exists for every deleted key whose delete is still in
//!   the log; compaction prunes tombstones together with their log entries and raises
//!   `tombstone_floor`, which then stands in for them in [`Storage::range_revision`].
//! - After [`Storage::close`] every call fails with [`Error::Closed`] and the hub is dropped,
//!   which ends every watch stream.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::watch::{Batch, History, Hub};
use crate::{
    Error, Event, EventKind, KeyRange, KeyValue, Op, Result, Revision, ScanResult, Snapshot,
    Storage, Txn, TxnResult, WatchStream,
};

/// How many revisions of history a store keeps for watches, unless configured otherwise. Every
/// backend keeps at least this many by default.
pub const DEFAULT_HISTORY_RETENTION: u64 = 10_000;

/// An in-memory store. Contents are lost when it is dropped.
pub struct MemStorage {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
}

/// A key's value and metadata, without the key.
#[derive(Clone)]
struct Stored {
    value: Vec<u8>,
    create_revision: Revision,
    mod_revision: Revision,
    version: u64,
}

impl Stored {
    fn to_key_value(&self, key: &[u8]) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
        }
    }
}

struct State {
    closed: bool,
    /// `None` once closed: dropping the last sender ends every watch stream.
    hub: Option<Hub>,
    retention: u64,
    revision: Revision,
    kvs: BTreeMap<Vec<u8>, Stored>,
    /// Key → revision of its deletion, for keys deleted since the last compaction.
    tombstones: BTreeMap<Vec<u8>, Revision>,
    /// The highest delete revision whose tombstone compaction pruned (0: none yet).
    tombstone_floor: Revision,
    /// Batches with revision in `(compacted, revision]`, ascending and contiguous.
    history: VecDeque<Arc<Batch>>,
    compacted: Revision,
}

impl Default for MemStorage {
    fn default() -> MemStorage {
        MemStorage::new()
    }
}

impl fmt::Debug for MemStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("MemStorage")
            .field("revision", &state.revision)
            .field("keys", &state.kvs.len())
            .field("compacted", &state.compacted)
            .field("closed", &state.closed)
            .finish()
    }
}

impl MemStorage {
    /// An empty store keeping [`DEFAULT_HISTORY_RETENTION`] revisions of history.
    pub fn new() -> MemStorage {
        MemStorage::with_retention(DEFAULT_HISTORY_RETENTION)
    }

    /// An empty store keeping the last `retention` revisions of history for watches; older
    /// ones are compacted. Small values are for tests of compaction.
    pub fn with_retention(retention: u64) -> MemStorage {
        let state = State {
            closed: false,
            hub: Some(Hub::new()),
            retention,
            revision: 0,
            kvs: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            tombstone_floor: 0,
            history: VecDeque::new(),
            compacted: 0,
        };
        MemStorage {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
            }),
        }
    }

    /// The open state, or [`Error::Closed`].
    fn open(&self) -> Result<MutexGuard<'_, State>> {
        let state = self.shared.lock();
        if state.closed {
            return Err(Error::Closed);
        }
        Ok(state)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied transaction visible to
        // callers that matter more than availability here; keep serving.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn get(&self, key: &[u8]) -> Option<KeyValue> {
        self.kvs.get(key).map(|stored| stored.to_key_value(key))
    }

    /// Applies `txn` at the next revision; logs and publishes it if it wrote anything.
    fn apply(&mut self, txn: &Txn) -> TxnResult {
        let succeeded = txn
            .compares
            .iter()
            .all(|compare| compare.holds(self.get(compare.key()).as_ref()));
        let ops = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let revision = self.revision + 1;
        let mut events = Vec::new();
        for op in ops {
            match op {
                Op::Put { key, value } => self.put(key, value, revision, &mut events),
                Op::Delete { key } => self.delete(key, revision, &mut events),
                Op::DeleteRange(range) => {
                    if range.is_empty() {
                        continue;
                    }
                    let keys: Vec<Vec<u8>> = self
                        .kvs
                        .range::<[u8], _>(range.bounds())
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in keys {
                        self.delete(&key, revision, &mut events);
                    }
                }
            }
        }
        if events.is_empty() {
            return TxnResult {
                succeeded,
                revision: self.revision,
            };
        }
        self.commit(Batch { revision, events });
        TxnResult {
            succeeded,
            revision,
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], revision: Revision, events: &mut Vec<Event>) {
        let stored = match self.kvs.get(key) {
            Some(old) => Stored {
                value: value.to_vec(),
                create_revision: old.create_revision,
                mod_revision: revision,
                version: old.version + 1,
            },
            None => Stored {
                value: value.to_vec(),
                create_revision: revision,
                mod_revision: revision,
                version: 1,
            },
        };
        self.kvs.insert(key.to_vec(), stored);
        self.tombstones.remove(key);
        events.push(Event {
            kind: EventKind::Put,
            key: key.to_vec(),
            value: value.to_vec(),
            revision,
        });
    }

    fn delete(&mut self, key: &[u8], revision: Revision, events: &mut Vec<Event>) {
        if self.kvs.remove(key).is_some() {
            self.tombstones.insert(key.to_vec(), revision);
            events.push(Event {
                kind: EventKind::Delete,
                key: key.to_vec(),
                value: Vec::new(),
                revision,
            });
        }
    }

    /// Records a writing transaction: new revision, log entry, compaction, publication.
    fn commit(&mut self, batch: Batch) {
        debug_assert_eq!(batch.revision, self.revision + 1);
        self.revision = batch.revision;
        self.history.push_back(Arc::new(batch.clone()));
        self.compact();
        if let Some(hub) = &self.hub {
            hub.publish(batch);
        }
    }

    /// Drops log entries older than the retention, and the tombstones they created.
    fn compact(&mut self) {
        let floor = self.revision.saturating_sub(self.retention);
        while let Some(front) = self.history.front() {
            if front.revision > floor {
                break;
            }
            let Some(front) = self.history.pop_front() else {
                break;
            };
            for event in front
                .events
                .iter()
                .filter(|event| event.kind == EventKind::Delete)
            {
                if self.tombstones.get(&event.key) == Some(&front.revision) {
                    self.tombstones.remove(&event.key);
                    self.tombstone_floor = self.tombstone_floor.max(front.revision);
                }
            }
        }
        self.compacted = self.compacted.max(floor);
    }

    fn read_history(&self, range: &KeyRange, after: Revision) -> Result<(Vec<Event>, Revision)> {
        if self.closed {
            return Err(Error::Closed);
        }
        if after < self.compacted {
            return Err(Error::Compacted {
                requested: after,
                compacted: self.compacted,
            });
        }
        let start = self
            .history
            .partition_point(|batch| batch.revision <= after);
        let events = self
            .history
            .range(start..)
            .flat_map(|batch| batch.events.iter())
            .filter(|event| range.contains(&event.key))
            .cloned()
            .collect();
        Ok((events, self.revision))
    }
}

impl History for Shared {
    fn read_history(
        &self,
        range: &KeyRange,
        after: Revision,
    ) -> BoxFuture<'_, Result<(Vec<Event>, Revision)>> {
        let result = self.lock().read_history(range, after);
        futures::future::ready(result).boxed()
    }
}

/// The transaction that makes a store's contents equal `snapshot`'s, for backends implementing
/// [`Storage::restore`]: given the store's current keys in ascending order, every snapshot key is
/// put and every other key deleted, in key order. Fails with [`Error::InvalidSnapshot`] when the
/// snapshot's entries are not in strictly ascending key order.
pub fn restore_txn<'a>(
    current: impl Iterator<Item = &'a [u8]>,
    snapshot: &Snapshot,
) -> Result<Txn> {
    check_snapshot_order(snapshot)?;
    let mut ops = Vec::new();
    let mut current = current.peekable();
    for kv in &snapshot.entries {
        while let Some(key) = current.next_if(|key| *key < kv.key.as_slice()) {
            ops.push(Op::Delete { key: key.to_vec() });
        }
        current.next_if(|key| *key == kv.key.as_slice());
        ops.push(Op::Put {
            key: kv.key.clone(),
            value: kv.value.clone(),
        });
    }
    ops.extend(current.map(|key| Op::Delete { key: key.to_vec() }));
    Ok(Txn {
        compares: Vec::new(),
        success: ops,
        failure: Vec::new(),
    })
}

/// Rejects snapshots whose entries are not in strictly ascending key order.
fn check_snapshot_order(snapshot: &Snapshot) -> Result<()> {
    if snapshot
        .entries
        .windows(2)
        .any(|pair| pair[0].key >= pair[1].key)
    {
        return Err(Error::InvalidSnapshot(
            "entries out of order or duplicated".to_owned(),
        ));
    }
    Ok(())
}

#[async_trait]
impl Storage for MemStorage {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        Ok(self.open()?.get(key))
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> Result<ScanResult> {
        let state = self.open()?;
        let mut result = ScanResult {
            kvs: Vec::new(),
            revision: state.revision,
            more: false,
        };
        if range.is_empty() {
            return Ok(result);
        }
        let limit = limit.unwrap_or(usize::MAX);
        for (key, stored) in state.kvs.range::<[u8], _>(range.bounds()) {
            if result.kvs.len() == limit {
                result.more = true;
                break;
            }
            result.kvs.push(stored.to_key_value(key));
        }
        Ok(result)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult> {
        Ok(self.open()?.apply(&txn))
    }

    async fn revision(&self) -> Result<Revision> {
        Ok(self.open()?.revision)
    }

    fn known_revision(&self) -> Option<Revision> {
        Some(self.open().ok()?.revision)
    }

    async fn range_revision(&self, range: KeyRange) -> Result<Revision> {
        let state = self.open()?;
        if range.is_empty() {
            return Ok(0);
        }
        let live = state
            .kvs
            .range::<[u8], _>(range.bounds())
            .map(|(_, stored)| stored.mod_revision)
            .max();
        let deleted = state
            .tombstones
            .range::<[u8], _>(range.bounds())
            .map(|(_, revision)| *revision)
            .max();
        Ok(live
            .unwrap_or(0)
            .max(deleted.unwrap_or(0))
            .max(state.tombstone_floor))
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> Result<WatchStream> {
        let state = self.open()?;
        let hub = state.hub.as_ref().ok_or(Error::Closed)?;
        let history: Arc<dyn History> = self.shared.clone();
        Ok(hub.watch(history, range, after))
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let state = self.open()?;
        let entries = state
            .kvs
            .iter()
            .map(|(key, stored)| stored.to_key_value(key))
            .collect();
        Ok(Snapshot {
            revision: state.revision,
            entries,
        })
    }

    async fn restore(&self, snapshot: &Snapshot) -> Result<Revision> {
        let mut state = self.open()?;
        let txn = restore_txn(state.kvs.keys().map(Vec::as_slice), snapshot)?;
        Ok(state.apply(&txn).revision)
    }

    async fn close(&self) -> Result<()> {
        let mut state = self.shared.lock();
        state.closed = true;
        state.hub = None;
        state.kvs = BTreeMap::new();
        state.tombstones = BTreeMap::new();
        state.history = VecDeque::new();
        Ok(())
    }
}
