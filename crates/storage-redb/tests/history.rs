//! The redb backend's watch history shares values with `kv`: a put that is its key's last
//! change in its transaction is recorded without its value, and the key's next change carries
//! that value (as the value the key held before) while the put's revision is still in history.
//! These tests pin down what that must never change: a watch replaying history gets every
//! event with its value, from any revision history holds and across reopen; compaction by
//! revisions (a chunk at a time at large retentions) and by bytes keeps its count exact; a value that cannot be found is an error,
//! never an event without its value.
//!
//! Where it sits: an integration test of `storage-redb`, beside `backend.rs`; it reads and
//! tampers with the closed file with redb directly.
//!
//! Invariant: every store lives in its own temporary directory.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use storage::{Error, EventKind, KeyRange, Op, Storage, StorageExt, Txn};
use storage_redb::{RedbOptions, RedbStorage};

mod support;

use support::runtime;

const KV: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("kv");
const HISTORY: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("history");
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

fn put(key: &str, value: &str) -> Op {
    Op::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

fn delete(key: &str) -> Op {
    Op::Delete {
        key: key.as_bytes().to_vec(),
    }
}

/// `(revision, put?, key, value)` of the first `count` events after `after`.
async fn replay(store: &RedbStorage, after: u64, count: usize) -> Vec<(u64, bool, String, String)> {
    let mut stream = store.watch(KeyRange::all(), after).await.expect("watch");
    let mut events = Vec::new();
    while events.len() < count {
        let event = stream.next_event().await.expect("event").expect("no error");
        events.push((
            event.revision,
            event.kind == EventKind::Put,
            String::from_utf8(event.key).expect("utf-8"),
            String::from_utf8(event.value).expect("utf-8"),
        ));
    }
    events
}

fn event(revision: u64, put: bool, key: &str, value: &str) -> (u64, bool, String, String) {
    (revision, put, key.to_owned(), value.to_owned())
}

#[test]
fn a_replay_gets_the_values_of_puts_written_over_or_deleted_since() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        let store = RedbStorage::open(&path).expect("open");
        store.put(b"a", b"1").await.expect("put"); // 1
        store.put(b"a", b"2").await.expect("put"); // 2: carries a=1
        store.put(b"b", b"x").await.expect("put"); // 3
        store.delete(b"b").await.expect("delete"); // 4: carries b=x
        // 5: c twice and d put, deleted and put again in one transaction; only each key's
        // last put is recorded without its value.
        store
            .txn(Txn {
                success: vec![
                    put("c", "1"),
                    put("c", "2"),
                    put("d", "1"),
                    delete("d"),
                    put("d", "3"),
                ],
                ..Txn::new()
            })
            .await
            .expect("txn");
        store.put(b"c", b"9").await.expect("put"); // 6: carries c=2
        // 7: every key deleted, carrying a=2, c=9 and d=3.
        store
            .txn(Txn::new().then(Op::DeleteRange(KeyRange::all())))
            .await
            .expect("txn");
        let expected = vec![
            event(1, true, "a", "1"),
            event(2, true, "a", "2"),
            event(3, true, "b", "x"),
            event(4, false, "b", ""),
            event(5, true, "c", "1"),
            event(5, true, "c", "2"),
            event(5, true, "d", "1"),
            event(5, false, "d", ""),
            event(5, true, "d", "3"),
            event(6, true, "c", "9"),
            event(7, false, "a", ""),
            event(7, false, "c", ""),
            event(7, false, "d", ""),
        ];
        for after in 0..7 {
            let from = expected
                .iter()
                .position(|event| event.0 > after)
                .expect("events after");
            assert_eq!(
                replay(&store, after, expected.len() - from).await,
                expected[from..],
                "from {after}"
            );
        }
        store.close().await.expect("close");

        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(
            replay(&store, 0, expected.len()).await,
            expected,
            "after reopen"
        );
        store.close().await.expect("close");
    });
}

/// `meta`'s compacted revision and history byte count in a closed store's file, and the bytes
/// its history holds as the backend counts them (each record plus its 8-byte key).
/// A put guarded by its own key's revision reads the key once, in the compare: what it keeps
/// of the record it replaces (create revision, version, the value handed on to history) is as
/// for any put, across a delete and after reopening.
#[test]
fn puts_guarded_by_their_own_key_keep_revisions_versions_and_history() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        let store = RedbStorage::open(&path).expect("open");
        let guarded = |mod_revision: u64, value: &str| {
            Txn::new()
                .when(storage::Compare::ModRevision(b"k".to_vec(), mod_revision))
                .when(storage::Compare::Missing(b"other".to_vec()))
                .then(put("k", value))
                .then(put("side", value))
        };
        let first = store.txn(guarded(0, "1")).await.expect("txn"); // 1
        assert!(first.succeeded);
        let second = store.txn(guarded(1, "2")).await.expect("txn"); // 2: carries k=1
        assert!(second.succeeded);
        let stale = store.txn(guarded(1, "stale")).await.expect("txn");
        assert!(!stale.succeeded, "a stale revision writes nothing");
        store.delete(b"k").await.expect("delete"); // 3: carries k=2
        assert_eq!(
            store.range_revision(KeyRange::key("k")).await.expect("rev"),
            3
        );
        let back = store.txn(guarded(0, "4")).await.expect("txn"); // 4
        assert!(back.succeeded);
        let third = store.txn(guarded(4, "5")).await.expect("txn"); // 5: carries k=4
        assert!(third.succeeded);
        let k = store.get(b"k").await.expect("get").expect("k");
        assert_eq!(
            (
                k.value.as_slice(),
                k.create_revision,
                k.mod_revision,
                k.version
            ),
            (&b"5"[..], 4, 5, 2)
        );
        let side = store.get(b"side").await.expect("get").expect("side");
        assert_eq!((side.create_revision, side.version), (1, 4));
        store.delete(b"side").await.expect("delete"); // 6
        assert_eq!(
            store.range_revision(KeyRange::key("k")).await.expect("rev"),
            5
        );
        let expected = vec![
            event(1, true, "k", "1"),
            event(1, true, "side", "1"),
            event(2, true, "k", "2"),
            event(2, true, "side", "2"),
            event(3, false, "k", ""),
            event(4, true, "k", "4"),
            event(4, true, "side", "4"),
            event(5, true, "k", "5"),
            event(5, true, "side", "5"),
            event(6, false, "side", ""),
        ];
        assert_eq!(replay(&store, 0, expected.len()).await, expected);
        store.close().await.expect("close");
        // The same after reopening (the log replayed).
        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(replay(&store, 0, expected.len()).await, expected);
        let k = store.get(b"k").await.expect("get").expect("k");
        assert_eq!((k.create_revision, k.mod_revision, k.version), (4, 5, 2));
        store.close().await.expect("close");
    });
}

fn inspect(path: &Path) -> (u64, u64, u64) {
    let db = Database::open(path).expect("open raw");
    let txn = db.begin_read().expect("read");
    let meta = txn.open_table(META).expect("meta");
    let compacted = meta
        .get("compacted")
        .expect("get")
        .expect("compacted")
        .value();
    let counted = meta
        .get("history_bytes")
        .expect("get")
        .expect("bytes")
        .value();
    let mut held = 0;
    for entry in txn
        .open_table(HISTORY)
        .expect("history")
        .iter()
        .expect("iter")
    {
        let (_, record) = entry.expect("entry");
        held += record.value().len() as u64 + 8;
    }
    (compacted, counted, held)
}

#[test]
fn a_replay_from_the_oldest_kept_revision_gets_every_value_after_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    runtime().block_on(async {
        let options = RedbOptions::default().with_history_retention(4);
        let store = RedbStorage::open_with(&path, options).expect("open");
        // Revisions 1..=20 each write k over the previous one; 21 deletes it.
        for i in 1..=20 {
            store
                .put(b"k", format!("value {i}").as_bytes())
                .await
                .expect("put");
        }
        store.delete(b"k").await.expect("delete");
        // History holds revisions 18..=21 only, each with its value.
        assert_eq!(
            replay(&store, 17, 4).await,
            vec![
                event(18, true, "k", "value 18"),
                event(19, true, "k", "value 19"),
                event(20, true, "k", "value 20"),
                event(21, false, "k", ""),
            ]
        );
        store.close().await.expect("close");
    });
    let (compacted, counted, held) = inspect(&path);
    assert_eq!(compacted, 17);
    assert_eq!(counted, held, "meta counts exactly what history holds");
}

#[test]
fn compaction_drops_history_a_chunk_at_a_time_at_large_retentions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    // 128 revisions of retention: compaction drops history to 128 - 128 / 64 = 126 revisions.
    let options = RedbOptions::default().with_history_retention(128);
    let write = |count: u64| {
        runtime().block_on(async {
            let store = RedbStorage::open_with(&path, options).expect("open");
            for _ in 0..count {
                store.put(b"k", b"v").await.expect("put");
            }
            store.close().await.expect("close");
        })
    };
    // (revisions written so far, how many of them now, the compacted revision then)
    for (total, count, compacted) in [(128, 128, 0), (129, 1, 3), (131, 2, 3), (132, 1, 6)] {
        write(count);
        let (got, counted, held) = inspect(&path);
        assert_eq!(got, compacted, "after {total} revisions");
        assert_eq!(counted, held, "meta counts exactly what history holds");
    }
}

#[test]
fn the_byte_bound_counts_the_values_handed_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    let value = "v".repeat(10_000);
    runtime().block_on(async {
        // Each revision's record carries the 10 KB value its put wrote over: 50 KB of history
        // holds about five.
        let options = RedbOptions::default().with_history_bytes(50_000);
        let store = RedbStorage::open_with(&path, options).expect("open");
        for _ in 0..40 {
            store.put(b"big", value.as_bytes()).await.expect("put");
        }
        let compacted = match store.watch(KeyRange::all(), 0).await {
            Ok(mut stream) => match stream.next_event().await {
                Some(Err(Error::Compacted { compacted, .. })) => compacted,
                other => panic!("a watch from 0: {other:?}"),
            },
            Err(err) => panic!("watch: {err}"),
        };
        assert!((34..40).contains(&compacted), "compacted to {compacted}");
        let events = replay(&store, compacted, (40 - compacted) as usize).await;
        assert!(events.iter().all(|event| event.3 == value));
        store.close().await.expect("close");
    });
    let (_, counted, held) = inspect(&path);
    assert_eq!(counted, held, "meta counts exactly what history holds");
    assert!(counted <= 50_000, "history holds {counted} bytes");
}

#[test]
fn a_stored_put_whose_value_is_gone_is_a_backend_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("open");
        store.put(b"a", b"1").await.expect("put");
        store.put(b"b", b"2").await.expect("put");
        store.close().await.expect("close");
    });
    // Remove a's record behind the store's back: its put's value is nowhere now.
    {
        let db = Database::open(&path).expect("open raw");
        let txn = db.begin_write().expect("begin");
        txn.open_table(KV)
            .expect("kv")
            .remove(b"a".as_slice())
            .expect("remove");
        txn.commit().expect("commit");
    }
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("reopen");
        let mut stream = store.watch(KeyRange::all(), 0).await.expect("watch");
        match stream.next_event().await {
            Some(Err(Error::Backend(message))) => {
                assert!(message.contains("missing"), "{message}")
            }
            other => panic!("expected a backend error, got {other:?}"),
        }
        // History that does not need it still reads.
        assert_eq!(replay(&store, 1, 1).await, vec![event(2, true, "b", "2")]);
        store.close().await.expect("close");
    });
}
