//! Behaviour specific to the redb backend, beyond the shared conformance suite: persistence
//! across reopen, group commit, corrupt records, file locking and release, and scans on both
//! sides of the inline-scan size.
//!
//! Where it sits: an integration test of `storage-redb`, beside `conformance.rs` (the shared
//! suite) and `durability.rs` (crash tests); it may use redb directly to tamper with a file.
//!
//! Invariant: every store lives in its own temporary directory; corruption is injected by
//! opening the closed file with redb directly, never by editing bytes blindly.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, TableDefinition};
use storage::{Error, EventKind, KeyRange, Op, Storage, StorageExt, Txn};
use storage_redb::{RedbOptions, RedbStorage};

mod support;

use support::runtime;

#[test]
fn reopen_keeps_contents_revision_tombstones_and_history() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        let store = RedbStorage::open(&path).expect("open");
        store.put(b"a", b"1").await.expect("put");
        store.put(b"b", b"2").await.expect("put");
        store.put(b"a", b"3").await.expect("put");
        let deleted = store.delete(b"b").await.expect("delete");
        store.close().await.expect("close");

        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), 4);
        assert_eq!(
            store.known_revision(),
            Some(4),
            "redb keeps its revision in memory"
        );
        let a = store.get(b"a").await.expect("get").expect("a");
        assert_eq!(
            (
                a.value.as_slice(),
                a.create_revision,
                a.mod_revision,
                a.version
            ),
            (b"3".as_slice(), 1, 3, 2)
        );
        assert_eq!(store.get(b"b").await.expect("get"), None);
        assert_eq!(
            store
                .range_revision(KeyRange::key("b"))
                .await
                .expect("range_revision"),
            deleted
        );
        let mut stream = store.watch(KeyRange::all(), 0).await.expect("watch");
        let mut kinds = Vec::new();
        for _ in 0..4 {
            let event = stream.next_event().await.expect("event").expect("event");
            kinds.push((event.revision, event.kind));
        }
        assert_eq!(
            kinds,
            [
                (1, EventKind::Put),
                (2, EventKind::Put),
                (3, EventKind::Put),
                (4, EventKind::Delete)
            ]
        );
        // Revisions continue from where they were.
        assert_eq!(store.put(b"c", b"4").await.expect("put"), 5);
        store.close().await.expect("close");
    });
}

#[test]
fn concurrent_transactions_share_durable_commits() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(RedbStorage::open(&dir.path().join("db.redb")).expect("open"));
        let mut tasks = Vec::new();
        for task in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..50 {
                    store
                        .put(format!("k/{task}/{i}").as_bytes(), b"v")
                        .await
                        .expect("put");
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let stats = store.stats();
        assert_eq!(stats.requests, 400);
        assert!(stats.commits < 400, "no group commit happened: {stats:?}");
        // Every commit is timed and sized; the sizes add up to the requests.
        assert_eq!(stats.commit_seconds.count, stats.commits);
        assert_eq!(stats.batch_sizes.count, stats.commits);
        assert_eq!(stats.batch_sizes.sum, 400.0);
        assert!(stats.batch_sizes.max > 1.0, "{stats:?}");
        assert_eq!(store.stats_source().read(), stats);
        assert_eq!(store.revision().await.expect("revision"), 400);
        store.close().await.expect("close");
    });
}

const KV: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("kv");
const HISTORY: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("history");
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// Writes raw records into the closed store's file.
fn tamper(path: &Path, write: impl FnOnce(&redb::WriteTransaction)) {
    let db = Database::open(path).expect("open raw");
    let txn = db.begin_write().expect("begin");
    write(&txn);
    txn.commit().expect("commit");
}

#[test]
fn corrupt_records_are_backend_errors_and_fail_only_their_group() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        let store = RedbStorage::open(&path).expect("open");
        store.put(b"bad", b"1").await.expect("put");
        store.put(b"good", b"2").await.expect("put");
        store.close().await.expect("close");
        tamper(&path, |txn| {
            txn.open_table(KV)
                .expect("kv")
                .insert(b"bad".as_slice(), b"\x01garbage".as_slice())
                .expect("insert");
            txn.open_table(HISTORY)
                .expect("history")
                .insert(1, b"\x01\xff\xff".as_slice())
                .expect("insert");
        });

        let store = Arc::new(RedbStorage::open(&path).expect("reopen"));
        assert!(matches!(store.get(b"bad").await, Err(Error::Backend(_))));
        assert_eq!(
            store.get(b"good").await.expect("get").expect("good").value,
            b"2"
        );
        assert!(matches!(
            store.scan(KeyRange::all(), None).await,
            Err(Error::Backend(_))
        ));
        assert!(matches!(store.snapshot().await, Err(Error::Backend(_))));
        assert!(matches!(
            store.range_revision(KeyRange::all()).await,
            Err(Error::Backend(_))
        ));
        let mut stream = store.watch(KeyRange::all(), 0).await.expect("watch");
        assert!(matches!(
            stream.next_event().await,
            Some(Err(Error::Backend(_)))
        ));
        // History after the corrupt record is still readable.
        let mut stream = store.watch(KeyRange::all(), 1).await.expect("watch");
        assert_eq!(
            stream
                .next_event()
                .await
                .expect("event")
                .expect("event")
                .key,
            b"good"
        );

        // Writing over the corrupt key fails, and so does everything committed in its group,
        // without a trace; other groups succeed.
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let key = if i == 8 {
                    b"bad".to_vec()
                } else {
                    format!("new/{i}").into_bytes()
                };
                let result = store
                    .txn(Txn::new().then(Op::Put {
                        key: key.clone(),
                        value: b"x".to_vec(),
                    }))
                    .await;
                (key, result)
            }));
        }
        let mut failed = 0;
        for task in tasks {
            let (key, result) = task.await.expect("task");
            let present = store.get(&key).await;
            match result {
                Ok(_) => assert_eq!(present.expect("get").expect("written").value, b"x"),
                Err(Error::Backend(_)) => {
                    failed += 1;
                    if key != b"bad" {
                        assert_eq!(
                            present.expect("get"),
                            None,
                            "a failed group left {key:?} behind"
                        );
                    }
                }
                Err(err) => panic!("unexpected error {err}"),
            }
        }
        assert!(failed >= 1, "the write over the corrupt record succeeded");
        let revision = store.revision().await.expect("revision");
        assert_eq!(revision, 2 + 16 - failed, "failed groups took no revision");
        store.close().await.expect("close");
    });
}

/// The `meta` table's words as a raw read of `path` sees them (the store may be open).
fn raw_meta(path: &Path, name: &str) -> Option<u64> {
    let db = Database::open(path).ok()?;
    let txn = redb::ReadableDatabase::begin_read(&db).ok()?;
    let meta = txn.open_table(META).ok()?;
    meta.get(name).ok()?.map(|value| value.value())
}

/// Puts keys `k0`.. one group each, then checks that a scan and a snapshot both read the
/// last put's revision and every key; that revision.
async fn put_keys_and_read_them_back(store: &RedbStorage, count: u8) -> u64 {
    let mut last = 0;
    for i in 0..count {
        last = store.put(&[b'k', i], b"v").await.expect("put");
    }
    let scanned = store.scan(KeyRange::prefix("k"), None).await.expect("scan");
    assert_eq!(
        (scanned.revision, scanned.kvs.len()),
        (last, usize::from(count))
    );
    assert_eq!(store.snapshot().await.expect("snapshot").revision, last);
    last
}

#[test]
fn logged_groups_leave_the_revision_to_durable_commits_and_reads_still_see_the_newest() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        let store = RedbStorage::open(&path).expect("open");
        // Reads take the revision from history: the table was not written by these groups.
        let last = put_keys_and_read_them_back(&store, 5).await;
        let mut stream = store.watch(KeyRange::all(), last - 1).await.expect("watch");
        let event = stream.next_event().await.expect("event").expect("event");
        assert_eq!(event.revision, last);
        drop(stream);
        store.close().await.expect("close");
        // The exit checkpoint wrote the whole meta.
        assert_eq!(raw_meta(&path, "revision"), Some(last));
        assert!(raw_meta(&path, "history_bytes").is_some_and(|bytes| bytes > 0));
    });
}

#[test]
fn with_history_compacted_to_nothing_reads_still_see_the_newest_revision() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        // A retention of 0: every group compacts its own history away.
        let options = RedbOptions::default().with_history_retention(0);
        let store = RedbStorage::open_with(&path, options).expect("open");
        let last = put_keys_and_read_them_back(&store, 4).await;
        store.close().await.expect("close");
        let store = RedbStorage::open_with(&path, options).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), last);
        assert_eq!(store.put(b"after", b"v").await.expect("put"), last + 1);
        store.close().await.expect("close");
    });
}

#[test]
fn corrupt_meta_fails_open_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    drop(RedbStorage::open(&path).expect("create"));
    // Wait for the dropped store's writer to release the file.
    reopen_with_retry(&path).close_blocking();
    tamper(&path, |txn| {
        let mut meta = txn.open_table(META).expect("meta");
        meta.insert("revision", 1).expect("insert");
        meta.insert("compacted", 5).expect("insert");
    });
    match RedbStorage::open(&path) {
        Err(Error::Backend(message)) => assert!(message.contains("meta"), "{message}"),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[test]
fn second_open_of_an_open_file_fails_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    let first = RedbStorage::open(&path).expect("open");
    assert!(matches!(RedbStorage::open(&path), Err(Error::Backend(_))));
    first.close_blocking();
    RedbStorage::open(&path)
        .expect("open after close")
        .close_blocking();
}

#[test]
fn dropping_without_close_releases_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    let store = RedbStorage::open_with(&path, RedbOptions::default()).expect("open");
    runtime().block_on(async {
        store.put(b"k", b"v").await.expect("put");
    });
    drop(store);
    let store = reopen_with_retry(&path);
    runtime().block_on(async {
        assert_eq!(store.get(b"k").await.expect("get").expect("k").value, b"v");
    });
    store.close_blocking();
}

/// Opens `path`, retrying briefly while a dropped store's writer thread lets go of it.
fn reopen_with_retry(path: &Path) -> RedbStorage {
    for _ in 0..100 {
        match RedbStorage::open(path) {
            Ok(store) => return store,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    RedbStorage::open(path).expect("reopen")
}

trait CloseBlocking {
    fn close_blocking(self);
}

impl CloseBlocking for RedbStorage {
    fn close_blocking(self) {
        runtime().block_on(self.close()).expect("close");
    }
}

#[test]
fn scans_small_and_large_return_every_key_in_order_with_their_limit() {
    // Scans of up to 64 keys run on the calling thread and larger ones on the blocking pool:
    // both sides of that line answer the same, with `more` set only when the limit cut keys.
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RedbStorage::open(&dir.path().join("db.redb")).expect("open");
        let ops = (0..200)
            .map(|i| Op::Put {
                key: format!("k/{i:03}").into_bytes(),
                value: b"v".to_vec(),
            })
            .collect::<Vec<_>>();
        let mut txn = Txn::new();
        for op in ops {
            txn = txn.then(op);
        }
        store.txn(txn).await.expect("txn");
        let keys = |n: usize| -> Vec<Vec<u8>> {
            (0..n).map(|i| format!("k/{i:03}").into_bytes()).collect()
        };
        for (limit, expected, more) in [
            (None, 200, false),
            (Some(10), 10, true),
            (Some(64), 64, true),
            (Some(65), 65, true),
            (Some(199), 199, true),
            (Some(200), 200, false),
            (Some(1000), 200, false),
        ] {
            let scanned = store
                .scan(KeyRange::prefix("k/"), limit)
                .await
                .expect("scan");
            let got: Vec<Vec<u8>> = scanned.kvs.into_iter().map(|kv| kv.key).collect();
            assert_eq!(got, keys(expected), "limit {limit:?}");
            assert_eq!(scanned.more, more, "limit {limit:?}");
            assert_eq!(scanned.revision, 1, "limit {limit:?}");
        }
        let few = store
            .scan(KeyRange::prefix("k/00"), None)
            .await
            .expect("scan");
        assert_eq!(few.kvs.len(), 10);
        assert!(!few.more);
    });
}
