//! The redb schema and every operation on it: applying a transaction inside a write
//! transaction, compaction, and the read-side queries behind `get`, `scan`, `range_revision`,
//! `snapshot` and watch history.
//!
//! Where it sits: between `codec.rs` (record encoding) and `writer.rs` / `lib.rs` (threads and
//! the `Storage` API); no threads or async here.
//!
//! Tables:
//! - `kv`: key → [`codec::encode_kv`] (value, create/mod revision, version).
//! - `meta`: `"revision"` (last committed), `"compacted"` (history holds exactly the revisions
//!   in `(compacted, revision]`), `"tombstone_floor"` (highest delete revision whose tombstone
//!   compaction pruned), `"history_bytes"` (the summed size of the `history` records, what the
//!   byte bound of compaction reads; counted once at open by stores written before it existed),
//!   `"wal_nonce"` (the nonce of the write-ahead log records written since the last durable
//!   commit, see `wal.rs`). `"revision"` and `"history_bytes"`, which every group moves, are
//!   only written by durable commits ([`WriteTables::write_meta`]): a group committed through
//!   the log leaves the table untouched unless it compacted (one redb table fewer to copy and
//!   re-root per group), its redo record carries the whole meta for recovery, and readers take
//!   the revision from `history`, whose newest record is always the newest revision
//!   ([`Reader::meta`]).
//! - `history`: revision → [`codec::encode_history`] of that transaction's events, one per
//!   writing transaction. A put that is its key's last change in the transaction is recorded
//!   without its value ([`codec::Change::PutStored`]), so history does not hold every value a
//!   second time: the value is `kv`'s while the key's mod revision is that revision, and the
//!   key's next change (a put or delete in a later revision) carries it as its `previous`
//!   value if that revision is still in history then.
//! - `tombstones`: key → revision of its deletion, for deletes still in `history`; a key in `kv`
//!   has none (every put removes its key's, so one present before the put has none to remove).
//!
//! Redo: with [`WriteTables::record_redo`], every change to `kv`, `tombstones` and `history` is
//! also appended, in order, to a redo record ([`codec::Redo`]) that [`WriteTables::take_redo`]
//! finishes with the group's first revision and final meta; [`WriteTables::replay`] applies
//! such a record on the state it was made on (meta.revision = first - 1) and reproduces the
//! state after it exactly.
//!
//! Invariants: every event of a revision in `(compacted, revision]` can be read back with its
//! value from `history` and `kv` in one read transaction (a stored put's value is `kv`'s if
//! the key's mod revision is still the event's, else the `previous` of the key's next event,
//! which history holds: it is newer); all four tables change together in one redb write
//! transaction; a transaction
//! that writes nothing leaves every table untouched; nothing here panics on what it reads.

use std::collections::{HashMap, HashSet};
use std::fmt::Display;

use redb::{ReadTransaction, ReadableTable, Table, TableDefinition, WriteTransaction};
use storage::watch::Batch;
use storage::{
    Error, Event, EventKind, KeyRange, KeyValue, Op, Revision, ScanResult, Snapshot, Txn, TxnResult,
};

use crate::codec;

pub(crate) const KV: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("kv");
pub(crate) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
pub(crate) const HISTORY: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("history");
pub(crate) const TOMBSTONES: TableDefinition<'_, &[u8], u64> = TableDefinition::new("tombstones");

const REVISION: &str = "revision";
const COMPACTED: &str = "compacted";
const TOMBSTONE_FLOOR: &str = "tombstone_floor";
const HISTORY_BYTES: &str = "history_bytes";
const WAL_NONCE: &str = "wal_nonce";

/// What a `history` record counts against the byte bound: its value and its 8-byte key.
fn history_record_bytes(record: &[u8]) -> u64 {
    record.len() as u64 + 8
}

/// How much history compaction keeps: at most `revisions` revisions (at least
/// `revisions - revisions / COMPACTION_SLACK_DIVISOR`, see [`WriteTables::compact`]) and,
/// beyond the newest one (always kept, however large), at most `bytes` bytes of history
/// records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    pub(crate) revisions: u64,
    pub(crate) bytes: u64,
}

/// Once history exceeds its revision bound, compaction drops it this fraction of the bound
/// below it, so revisions are dropped a chunk at a time (whole B-tree leaves, and one list of
/// freed pages per chunk) rather than one per commit, which rebuilt the oldest leaf and stored
/// freed pages on every commit. Below 64 revisions the chunk is one revision: exact.
const COMPACTION_SLACK_DIVISOR: u64 = 64;

/// Maps any redb error into the backend-neutral one.
pub(crate) fn backend(err: impl Display) -> Error {
    Error::Backend(format!("redb: {err}"))
}

pub(crate) trait OrBackend<T> {
    fn or_backend(self) -> Result<T, Error>;
}

impl<T, E: Display> OrBackend<T> for Result<T, E> {
    fn or_backend(self) -> Result<T, Error> {
        self.map_err(backend)
    }
}

/// The `meta` table's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Meta {
    pub(crate) revision: Revision,
    pub(crate) compacted: Revision,
    pub(crate) tombstone_floor: Revision,
    /// The summed [`history_record_bytes`] of every record in `history`.
    pub(crate) history_bytes: u64,
}

impl Meta {
    fn words(self) -> [u64; codec::REDO_META] {
        [
            self.revision,
            self.compacted,
            self.tombstone_floor,
            self.history_bytes,
        ]
    }

    fn from_words(words: [u64; codec::REDO_META]) -> Meta {
        let [revision, compacted, tombstone_floor, history_bytes] = words;
        Meta {
            revision,
            compacted,
            tombstone_floor,
            history_bytes,
        }
    }

    fn check(self) -> Result<Meta, Error> {
        if self.compacted > self.revision || self.tombstone_floor > self.compacted {
            return Err(Error::Backend(format!("corrupt meta table: {self:?}")));
        }
        Ok(self)
    }
}

/// The `meta` table's words as stored, unchecked (a reader adjusts the revision first).
fn read_meta_from(table: &impl ReadableTable<&'static str, u64>) -> Result<Meta, Error> {
    let get = |name: &str| -> Result<u64, Error> {
        Ok(table
            .get(name)
            .or_backend()?
            .map_or(0, |value| value.value()))
    };
    Ok(Meta {
        revision: get(REVISION)?,
        compacted: get(COMPACTED)?,
        tombstone_floor: get(TOMBSTONE_FLOOR)?,
        history_bytes: get(HISTORY_BYTES)?,
    })
}

/// Every table, inside one write transaction: `kv` and `history` (which every writing
/// transaction changes) opened at once, `meta` and `tombstones` when first used (most groups
/// touch neither: an opened table costs a lookup in redb's table tree at open and again at
/// commit).
pub(crate) struct WriteTables<'t> {
    txn: &'t WriteTransaction,
    kv: Table<'t, &'static [u8], &'static [u8]>,
    history: Table<'t, u64, &'static [u8]>,
    meta: Option<Table<'t, &'static str, u64>>,
    tombstones: Option<Table<'t, &'static [u8], u64>>,
    /// The redo record of the changes so far, when recording.
    redo: Option<Vec<u8>>,
}

impl<'t> WriteTables<'t> {
    /// Opens (creating if needed) `kv` and `history`; the others open when first used.
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<WriteTables<'t>, Error> {
        Ok(WriteTables {
            txn,
            kv: txn.open_table(KV).or_backend()?,
            history: txn.open_table(HISTORY).or_backend()?,
            meta: None,
            tombstones: None,
            redo: None,
        })
    }

    /// Opens (creating if needed) every table, so that readers find all four (at store open).
    pub(crate) fn create_all(&mut self) -> Result<(), Error> {
        self.meta()?;
        self.tombstones()?;
        Ok(())
    }

    fn meta(&mut self) -> Result<&mut Table<'t, &'static str, u64>, Error> {
        let table = match self.meta.take() {
            Some(table) => table,
            None => self.txn.open_table(META).or_backend()?,
        };
        Ok(self.meta.insert(table))
    }

    fn tombstones(&mut self) -> Result<&mut Table<'t, &'static [u8], u64>, Error> {
        let table = match self.tombstones.take() {
            Some(table) => table,
            None => self.txn.open_table(TOMBSTONES).or_backend()?,
        };
        Ok(self.tombstones.insert(table))
    }

    /// From now on, also records every change in a redo record, written in `buffer` (whose
    /// capacity is reused: a record can be megabytes).
    pub(crate) fn record_redo(&mut self, buffer: Vec<u8>) {
        self.redo = Some(codec::redo_start(buffer));
    }

    /// The redo record of every change since [`WriteTables::record_redo`], for a group whose
    /// first revision is `first` and which ends at `meta`; `None` if not recording.
    pub(crate) fn take_redo(&mut self, first: Revision, meta: Meta) -> Option<Vec<u8>> {
        let mut redo = self.redo.take()?;
        codec::redo_finish(&mut redo, first, meta.words());
        Some(redo)
    }

    fn log(&mut self, change: codec::Redo<'_>) {
        if let Some(redo) = self.redo.as_mut() {
            codec::encode_redo(redo, change);
        }
    }

    fn kv_insert(&mut self, key: &[u8], record: &[u8]) -> Result<(), Error> {
        self.kv.insert(key, record).or_backend()?;
        self.log(codec::Redo::KvPut(key, record));
        Ok(())
    }

    /// Whether there was a key to remove.
    fn kv_remove(&mut self, key: &[u8]) -> Result<bool, Error> {
        let removed = self.kv.remove(key).or_backend()?.is_some();
        if removed {
            self.log(codec::Redo::KvDelete(key));
        }
        Ok(removed)
    }

    fn tombstone_insert(&mut self, key: &[u8], revision: Revision) -> Result<(), Error> {
        self.tombstones()?.insert(key, revision).or_backend()?;
        self.log(codec::Redo::TombstonePut(key, revision));
        Ok(())
    }

    fn tombstone_remove(&mut self, key: &[u8]) -> Result<(), Error> {
        if self.tombstones()?.remove(key).or_backend()?.is_some() {
            self.log(codec::Redo::TombstoneDelete(key));
        }
        Ok(())
    }

    fn history_insert(&mut self, revision: Revision, record: &[u8]) -> Result<(), Error> {
        self.history.insert(revision, record).or_backend()?;
        self.log(codec::Redo::HistoryPut(revision, record));
        Ok(())
    }

    fn history_remove(&mut self, revision: Revision) -> Result<(), Error> {
        if self.history.remove(revision).or_backend()?.is_some() {
            self.log(codec::Redo::HistoryDelete(revision));
        }
        Ok(())
    }

    /// Removes `revisions`, every history record from the first of them to the last (the
    /// oldest ones, as compaction drops them), in one pass: redb then rebuilds each leaf once
    /// for all its removals, where a `remove` per revision rebuilt (and, at the tree's left
    /// edge, merged) a leaf every time.
    fn history_remove_all(&mut self, revisions: &[Revision]) -> Result<(), Error> {
        let (Some(&first), Some(&last)) = (revisions.first(), revisions.last()) else {
            return Ok(());
        };
        self.history
            .retain_in(first..=last, |_, _| false)
            .or_backend()?;
        for &revision in revisions {
            self.log(codec::Redo::HistoryDelete(revision));
        }
        Ok(())
    }

    /// Applies a redo record made on the state at `meta.revision = first - 1` and advances
    /// `meta` (and the table) to the record's; returns false, changing nothing, for a record
    /// made on any other state (stale, or after a gap).
    pub(crate) fn replay(&mut self, record: &[u8], meta: &mut Meta) -> Result<bool, Error> {
        let (first, words, changes) = codec::decode_redo(record)?;
        let after = Meta::from_words(words).check()?;
        if first != meta.revision + 1 || after.revision < first {
            return Ok(false);
        }
        for change in changes {
            match change {
                codec::Redo::KvPut(key, record) => self.kv_insert(key, record)?,
                codec::Redo::KvDelete(key) => {
                    self.kv_remove(key)?;
                }
                codec::Redo::TombstonePut(key, revision) => self.tombstone_insert(key, revision)?,
                codec::Redo::TombstoneDelete(key) => self.tombstone_remove(key)?,
                codec::Redo::HistoryPut(revision, record) => {
                    self.history_insert(revision, record)?
                }
                codec::Redo::HistoryDelete(revision) => self.history_remove(revision)?,
            }
        }
        *meta = after;
        self.write_meta(after)?;
        Ok(true)
    }

    /// The nonce of the write-ahead log records that follow the last durable commit (0 if
    /// none was ever stored).
    pub(crate) fn read_wal_nonce(&mut self) -> Result<u64, Error> {
        Ok(self
            .meta()?
            .get(WAL_NONCE)
            .or_backend()?
            .map_or(0, |value| value.value()))
    }

    /// Stores the nonce of the log records that will follow this (durable) commit.
    pub(crate) fn write_wal_nonce(&mut self, nonce: u64) -> Result<(), Error> {
        self.meta()?.insert(WAL_NONCE, nonce).or_backend()?;
        Ok(())
    }

    /// The table's meta: the last durable commit's, at open.
    pub(crate) fn read_meta(&mut self) -> Result<Meta, Error> {
        read_meta_from(self.meta()?)?.check()
    }

    /// For a store written before `meta` counted history bytes: counts them (one pass over
    /// `history`) into `meta` and the table. Returns whether it had to.
    pub(crate) fn count_history_bytes_if_missing(
        &mut self,
        meta: &mut Meta,
    ) -> Result<bool, Error> {
        if self.meta()?.get(HISTORY_BYTES).or_backend()?.is_some() {
            return Ok(false);
        }
        let mut bytes = 0;
        for entry in self.history.iter().or_backend()? {
            let (_, record) = entry.or_backend()?;
            bytes += history_record_bytes(record.value());
        }
        meta.history_bytes = bytes;
        self.write_meta(*meta)?;
        Ok(true)
    }

    /// For a group committed through the log: writes the compaction fields of `meta` that
    /// differ from `before` (what the table holds: every commit writes them when they change),
    /// and not `revision` and `history_bytes` (module docs), so a group that did not compact
    /// leaves the table untouched.
    pub(crate) fn write_compaction_changes(
        &mut self,
        before: Meta,
        meta: Meta,
    ) -> Result<(), Error> {
        let fields = [
            (COMPACTED, before.compacted, meta.compacted),
            (
                TOMBSTONE_FLOOR,
                before.tombstone_floor,
                meta.tombstone_floor,
            ),
        ];
        for (name, old, new) in fields {
            if old != new {
                self.meta()?.insert(name, new).or_backend()?;
            }
        }
        Ok(())
    }

    pub(crate) fn write_meta(&mut self, meta: Meta) -> Result<(), Error> {
        let table = self.meta()?;
        table.insert(REVISION, meta.revision).or_backend()?;
        table.insert(COMPACTED, meta.compacted).or_backend()?;
        table
            .insert(TOMBSTONE_FLOOR, meta.tombstone_floor)
            .or_backend()?;
        table
            .insert(HISTORY_BYTES, meta.history_bytes)
            .or_backend()?;
        Ok(())
    }

    /// The mod revision of `key`, `None` if it is missing (what a compare reads, without
    /// copying the value).
    fn mod_revision(&self, key: &[u8]) -> Result<Option<Revision>, Error> {
        match self.kv.get(key).or_backend()? {
            Some(record) => Ok(Some(codec::decode_mod_revision(key, record.value())?)),
            None => Ok(None),
        }
    }

    /// Every key, in order: what a restore diffs against.
    pub(crate) fn keys(&self) -> Result<Vec<Vec<u8>>, Error> {
        let mut keys = Vec::new();
        for entry in self.kv.iter().or_backend()? {
            let (key, _) = entry.or_backend()?;
            keys.push(key.value().to_vec());
        }
        Ok(keys)
    }

    /// Applies `txn` on top of `meta.revision` (which sees every earlier transaction of this
    /// write transaction). If it wrote anything, logs it, advances `meta.revision` and returns
    /// its batch (whose events take the transaction's keys and values, not copies).
    pub(crate) fn apply(
        &mut self,
        txn: Txn,
        meta: &mut Meta,
    ) -> Result<(TxnResult, Option<Batch>), Error> {
        // A transaction guarded by the revision of the key its first op puts (most are) reads
        // that key once: what the put needs is kept from the compare's read.
        let guarded_put = matches!(
            (txn.compares.first(), txn.success.first()),
            (Some(compare), Some(Op::Put { key, .. })) if compare.key() == key.as_slice()
        );
        let mut prior = None;
        let mut succeeded = true;
        for (i, compare) in txn.compares.iter().enumerate() {
            let current = if i == 0 && guarded_put {
                let read = self.prior(compare.key(), meta)?;
                let current = read.as_ref().map(|prior| prior.mod_revision);
                prior = Some(read);
                current
            } else {
                self.mod_revision(compare.key())?
            };
            if !compare.holds_at(current) {
                succeeded = false;
                break;
            }
        }
        let ops = if succeeded {
            txn.success
        } else {
            prior = None;
            txn.failure
        };
        let revision = meta.revision + 1;
        let mut events = Vec::new();
        // Per event, the value its key held before, when history needs it (see `previous`).
        let mut previous = Vec::new();
        for op in ops {
            match op {
                Op::Put { key, value } => {
                    // Only the first op can take the compare's read: nothing has changed since.
                    let prior = match prior.take() {
                        Some(prior) => prior,
                        None => self.prior(&key, meta)?,
                    };
                    self.put(key, value, prior, meta, &mut events, &mut previous)?
                }
                Op::Delete { key } => self.delete(&key, meta, &mut events, &mut previous)?,
                Op::DeleteRange(range) => {
                    if range.is_empty() {
                        continue;
                    }
                    let mut keys = Vec::new();
                    for entry in self.kv.range::<&[u8]>(range.bounds()).or_backend()? {
                        let (key, _) = entry.or_backend()?;
                        keys.push(key.value().to_vec());
                    }
                    for key in keys {
                        self.delete(&key, meta, &mut events, &mut previous)?;
                    }
                }
            }
        }
        if events.is_empty() {
            return Ok((
                TxnResult {
                    succeeded,
                    revision: meta.revision,
                },
                None,
            ));
        }
        let record = codec::encode_history(&events, &stored_puts(&events), &previous);
        self.history_insert(revision, &record)?;
        meta.history_bytes += history_record_bytes(&record);
        meta.revision = revision;
        Ok((
            TxnResult {
                succeeded,
                revision,
            },
            Some(Batch { revision, events }),
        ))
    }

    /// What a put of `key` in the transaction at `meta.revision + 1` needs of the record it
    /// replaces (`None`: the key is missing).
    fn prior(&self, key: &[u8], meta: &Meta) -> Result<Option<Prior>, Error> {
        match self.kv.get(key).or_backend()? {
            Some(old) => {
                let old = codec::read_kv(key, old.value())?;
                Ok(Some(Prior {
                    create_revision: old.create_revision,
                    mod_revision: old.mod_revision,
                    version: old.version,
                    previous: previous_value(&old, meta),
                }))
            }
            None => Ok(None),
        }
    }

    /// Puts `key`, whose record is `prior` ([`WriteTables::prior`]), in the transaction at
    /// `meta.revision + 1`.
    fn put(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
        prior: Option<Prior>,
        meta: &Meta,
        events: &mut Vec<Event>,
        previous: &mut Vec<Option<Vec<u8>>>,
    ) -> Result<(), Error> {
        let revision = meta.revision + 1;
        let (create_revision, version, before, existed) = match prior {
            Some(old) => (old.create_revision, old.version + 1, old.previous, true),
            None => (revision, 1, None, false),
        };
        previous.push(before);
        match self.redo.as_mut() {
            // The record is encoded once, in the redo record, and stored from there.
            Some(redo) => {
                let at = codec::encode_redo_kv_put(
                    redo,
                    &key,
                    &value,
                    create_revision,
                    revision,
                    version,
                );
                self.kv.insert(key.as_slice(), &redo[at..]).or_backend()?;
            }
            None => {
                let record = codec::encode_kv(&value, create_revision, revision, version);
                self.kv_insert(&key, &record)?;
            }
        }
        if !existed {
            // A key in `kv` has no tombstone (its delete wrote one, every put since removed
            // it): only a key put back after a delete can have one.
            self.tombstone_remove(&key)?;
        }
        events.push(Event {
            kind: EventKind::Put,
            key,
            value,
            revision,
        });
        Ok(())
    }

    /// Deletes `key` in the transaction at `meta.revision + 1`.
    fn delete(
        &mut self,
        key: &[u8],
        meta: &Meta,
        events: &mut Vec<Event>,
        previous: &mut Vec<Option<Vec<u8>>>,
    ) -> Result<(), Error> {
        let revision = meta.revision + 1;
        // A record that no longer decodes is deleted all the same (its value is lost to history
        // either way: reading its event fails as corrupt).
        let before = self.kv.remove(key).or_backend()?.map(|old| {
            codec::read_kv(key, old.value())
                .ok()
                .and_then(|old| previous_value(&old, meta))
        });
        if let Some(before) = before {
            self.log(codec::Redo::KvDelete(key));
            previous.push(before);
            self.tombstone_insert(key, revision)?;
            events.push(Event {
                kind: EventKind::Delete,
                key: key.to_vec(),
                value: Vec::new(),
                revision,
            });
        }
        Ok(())
    }

    /// Once history holds more than `retention.revisions` revisions or `retention.bytes`
    /// bytes, drops the oldest while it holds more than `retention.revisions` less the slack
    /// ([`COMPACTION_SLACK_DIVISOR`]) or more than `retention.bytes` bytes (the newest revision
    /// is kept for the byte bound), with the tombstones those entries created, raising
    /// `meta.compacted` and `meta.tombstone_floor` and lowering `meta.history_bytes`.
    pub(crate) fn compact(&mut self, meta: &mut Meta, retention: Retention) -> Result<(), Error> {
        let floor = meta.revision.saturating_sub(retention.revisions);
        if floor <= meta.compacted && meta.history_bytes <= retention.bytes {
            return Ok(());
        }
        // Due: drop a chunk, down to the bound less the slack.
        let slack = retention.revisions / COMPACTION_SLACK_DIVISOR;
        let floor = floor.saturating_add(slack).min(meta.revision);
        let mut dropped = Vec::new();
        let mut deletes = Vec::new();
        let mut bytes = meta.history_bytes;
        for entry in self
            .history
            .range::<u64>(meta.compacted + 1..=meta.revision)
            .or_backend()?
        {
            let (revision, record) = entry.or_backend()?;
            let revision = revision.value();
            if revision > floor && (bytes <= retention.bytes || revision == meta.revision) {
                break;
            }
            dropped.push(revision);
            bytes = bytes.saturating_sub(history_record_bytes(record.value()));
            // A record that no longer decodes is being discarded anyway; its tombstones stay
            // (harmless: they only make range_revision conservative).
            if let Ok(events) = codec::read_history(revision, record.value()) {
                deletes.extend(
                    events
                        .into_iter()
                        .filter(|event| event.change == codec::Change::Delete)
                        .map(|event| (revision, event.key.to_vec())),
                );
            }
        }
        for (revision, key) in deletes {
            let current = self
                .tombstones()?
                .get(key.as_slice())
                .or_backend()?
                .map(|value| value.value());
            if current == Some(revision) {
                self.tombstone_remove(&key)?;
                meta.tombstone_floor = meta.tombstone_floor.max(revision);
            }
        }
        let newest_dropped = dropped.last().copied();
        self.history_remove_all(&dropped)?;
        meta.history_bytes = bytes;
        meta.compacted = meta.compacted.max(floor).max(newest_dropped.unwrap_or(0));
        Ok(())
    }
}

/// What a put needs of the `kv` record it replaces.
struct Prior {
    create_revision: Revision,
    mod_revision: Revision,
    version: u64,
    /// [`previous_value`] of the record.
    previous: Option<Vec<u8>>,
}

/// The meta fields a read uses ([`Reader::meta`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadMeta {
    pub(crate) revision: Revision,
    pub(crate) compacted: Revision,
    pub(crate) tombstone_floor: Revision,
}

/// Read-side queries, each inside one read transaction (so each sees one revision).
pub(crate) struct Reader {
    txn: ReadTransaction,
}

impl Reader {
    pub(crate) fn new(txn: ReadTransaction) -> Reader {
        Reader { txn }
    }

    /// What a read needs of this state's meta: the table's compaction fields, and its
    /// revision or the newest `history` record's if that is newer (a group committed through
    /// the log does not write `revision`; history always keeps the newest revision, and
    /// `compacted` covers a history compacted to nothing). Not `history_bytes`, which only
    /// the writer keeps current.
    pub(crate) fn meta(&self) -> Result<ReadMeta, Error> {
        let mut meta = read_meta_from(&self.txn.open_table(META).or_backend()?)?;
        let history = self.txn.open_table(HISTORY).or_backend()?;
        if let Some((newest, _)) = history.last().or_backend()? {
            meta.revision = meta.revision.max(newest.value());
        }
        meta.revision = meta.revision.max(meta.compacted);
        let Meta {
            revision,
            compacted,
            tombstone_floor,
            history_bytes: _,
        } = meta.check()?;
        Ok(ReadMeta {
            revision,
            compacted,
            tombstone_floor,
        })
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, Error> {
        let kv = self.txn.open_table(KV).or_backend()?;
        match kv.get(key).or_backend()? {
            Some(record) => Ok(Some(codec::decode_kv(key, record.value())?)),
            None => Ok(None),
        }
    }

    /// Each of `keys`, in order, from one opening of `kv`.
    pub(crate) fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<KeyValue>>, Error> {
        let kv = self.txn.open_table(KV).or_backend()?;
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(match kv.get(*key).or_backend()? {
                Some(record) => Some(codec::decode_kv(key, record.value())?),
                None => None,
            });
        }
        Ok(values)
    }

    pub(crate) fn scan(&self, range: &KeyRange, limit: Option<usize>) -> Result<ScanResult, Error> {
        let mut result = ScanResult {
            kvs: Vec::new(),
            revision: self.meta()?.revision,
            more: false,
        };
        if range.is_empty() {
            return Ok(result);
        }
        let limit = limit.unwrap_or(usize::MAX);
        let kv = self.txn.open_table(KV).or_backend()?;
        for entry in kv.range::<&[u8]>(range.bounds()).or_backend()? {
            if result.kvs.len() == limit {
                result.more = true;
                break;
            }
            let (key, record) = entry.or_backend()?;
            result
                .kvs
                .push(codec::decode_kv(key.value(), record.value())?);
        }
        Ok(result)
    }

    pub(crate) fn range_revision(&self, range: &KeyRange) -> Result<Revision, Error> {
        let meta = self.meta()?;
        if range.is_empty() {
            return Ok(0);
        }
        let mut latest = meta.tombstone_floor;
        let kv = self.txn.open_table(KV).or_backend()?;
        for entry in kv.range::<&[u8]>(range.bounds()).or_backend()? {
            let (key, record) = entry.or_backend()?;
            latest = latest.max(codec::decode_mod_revision(key.value(), record.value())?);
        }
        let tombstones = self.txn.open_table(TOMBSTONES).or_backend()?;
        for entry in tombstones.range::<&[u8]>(range.bounds()).or_backend()? {
            let (_, revision) = entry.or_backend()?;
            latest = latest.max(revision.value());
        }
        Ok(latest)
    }

    pub(crate) fn snapshot(&self) -> Result<Snapshot, Error> {
        let revision = self.meta()?.revision;
        let kv = self.txn.open_table(KV).or_backend()?;
        let mut entries = Vec::new();
        for entry in kv.iter().or_backend()? {
            let (key, record) = entry.or_backend()?;
            entries.push(codec::decode_kv(key.value(), record.value())?);
        }
        Ok(Snapshot { revision, entries })
    }

    /// Every logged event in `range` after `after`, and the revision read at.
    pub(crate) fn history(
        &self,
        range: &KeyRange,
        after: Revision,
    ) -> Result<(Vec<Event>, Revision), Error> {
        let meta = self.meta()?;
        if after < meta.compacted {
            return Err(Error::Compacted {
                requested: after,
                compacted: meta.compacted,
            });
        }
        let mut events = Vec::new();
        if after >= meta.revision {
            return Ok((events, meta.revision));
        }
        let history = self.txn.open_table(HISTORY).or_backend()?;
        // The stored puts read so far whose key has not changed since: key → event index.
        let mut stored: HashMap<Vec<u8>, usize> = HashMap::new();
        for entry in history
            .range::<u64>(after + 1..=meta.revision)
            .or_backend()?
        {
            let (revision, record) = entry.or_backend()?;
            let revision = revision.value();
            for logged in codec::read_history(revision, record.value())? {
                if !range.contains(logged.key) {
                    continue;
                }
                if let Some(index) = stored.remove(logged.key) {
                    let Some(value) = logged.previous else {
                        return Err(missing_value(&events[index]));
                    };
                    events[index].value = value.to_vec();
                }
                let (kind, value) = match logged.change {
                    codec::Change::Put(value) => (EventKind::Put, value.to_vec()),
                    codec::Change::Delete => (EventKind::Delete, Vec::new()),
                    codec::Change::PutStored => {
                        stored.insert(logged.key.to_vec(), events.len());
                        (EventKind::Put, Vec::new())
                    }
                };
                events.push(Event {
                    kind,
                    key: logged.key.to_vec(),
                    value,
                    revision,
                });
            }
        }
        // The keys of the puts still waiting have not changed since: their value is kv's.
        if !stored.is_empty() {
            let kv = self.txn.open_table(KV).or_backend()?;
            for (key, index) in stored {
                let event = &mut events[index];
                let record = kv.get(key.as_slice()).or_backend()?;
                let record = match &record {
                    Some(record) => Some(codec::read_kv(&key, record.value())?),
                    None => None,
                };
                match record {
                    Some(record) if record.mod_revision == event.revision => {
                        event.value = record.value.to_vec();
                    }
                    _ => return Err(missing_value(event)),
                }
            }
        }
        Ok((events, meta.revision))
    }
}

/// The value `old` (a key's record before the transaction at `meta.revision + 1` writes over it
/// or deletes it) must hand on to history: its put was recorded without the value if its
/// revision is still in history and an earlier one than this transaction's (a key's earlier
/// puts within one transaction keep their values).
fn previous_value(old: &codec::KvRecord<'_>, meta: &Meta) -> Option<Vec<u8>> {
    (old.mod_revision > meta.compacted && old.mod_revision <= meta.revision)
        .then(|| old.value.to_vec())
}

/// Which of a transaction's events are puts recorded without their value: each key's last
/// event, if it is a put (its value is then the key's `kv` record's at this revision).
fn stored_puts(events: &[Event]) -> Vec<bool> {
    let mut stored = vec![false; events.len()];
    if let [only] = events {
        stored[0] = only.kind == EventKind::Put;
        return stored;
    }
    let mut seen = HashSet::with_capacity(events.len());
    for (i, event) in events.iter().enumerate().rev() {
        if seen.insert(event.key.as_slice()) {
            stored[i] = event.kind == EventKind::Put;
        }
    }
    stored
}

fn missing_value(event: &Event) -> Error {
    Error::Backend(format!(
        "corrupt history record for revision {}: the value of {:?} is missing",
        event.revision,
        String::from_utf8_lossy(&event.key)
    ))
}
