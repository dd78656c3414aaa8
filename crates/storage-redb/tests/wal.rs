//! The write-ahead log across crashes: a child process writes some transactions one by one
//! (each its own group, so each its own log record) and then aborts without closing the
//! store (no checkpoint, no destructors: the log holds every one of them); the parent reopens
//! the store and checks what the replay did: every write back, a torn last record dropped, and
//! the records left in the log from before a checkpoint never applied again.
//!
//! Where it sits: an integration test of `storage-redb`, beside `durability.rs` (SIGKILL at
//! random moments under concurrent writers). The child is this test binary re-executed with
//! [`CHILD_ENV`] set and asked to run only [`child_writes_then_aborts`] (which does nothing
//! when run normally).
//!
//! Invariant: the log format is read here only to find record boundaries (`magic u32,
//! body_len u32, crc32 u32, nonce u64, body`, as `src/wal.rs` writes them); a change there
//! must change [`record_ends`].

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;

use storage::{EventKind, KeyRange, Storage, StorageExt};
use storage_redb::RedbStorage;

/// Set (to the database path) in the child's environment.
const CHILD_ENV: &str = "CAIRN_REDB_WAL_CHILD_DB";
/// What the child writes: `key=value` puts and `-key` deletes, separated by commas.
const OPS_ENV: &str = "CAIRN_REDB_WAL_CHILD_OPS";
const CHILD_TEST: &str = "child_writes_then_aborts";
const MAGIC: u32 = 0x4c41_5743;
const HEADER: usize = 20;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The child: applies [`OPS_ENV`] one transaction at a time, each acknowledged before the
/// next, then aborts the process.
#[test]
fn child_writes_then_aborts() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let ops = std::env::var(OPS_ENV).expect("ops");
    runtime().block_on(async move {
        let store = RedbStorage::open(Path::new(&path)).expect("child open");
        for op in ops.split(',') {
            match op.strip_prefix('-') {
                Some(key) => store.delete(key.as_bytes()).await.expect("delete"),
                None => {
                    let (key, value) = op.split_once('=').expect("key=value");
                    store
                        .put(key.as_bytes(), value.as_bytes())
                        .await
                        .expect("put")
                }
            };
        }
        std::process::abort();
    });
}

/// Runs the child on `path` with `ops` and waits for it to abort.
fn crash_after(path: &Path, ops: &str) {
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, path)
        .env(OPS_ENV, ops)
        .output()
        .expect("run child");
    assert!(
        !output.status.success(),
        "the child was to abort: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("panicked"),
        "the child failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn wal_path(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push(".wal");
    PathBuf::from(path)
}

/// Where each record of the log's first run of records ends.
fn record_ends(log: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while let Some(header) = log.get(at..at + HEADER) {
        let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
        if word(0) != MAGIC {
            break;
        }
        at += HEADER + word(4) as usize;
        ends.push(at);
    }
    ends
}

async fn value(store: &RedbStorage, key: &str) -> Option<String> {
    store
        .get(key.as_bytes())
        .await
        .expect("get")
        .map(|kv| String::from_utf8(kv.value).expect("utf-8"))
}

/// Every event from revision 0, as `(revision, put?, key, value)`.
async fn history(store: &RedbStorage) -> Vec<(u64, bool, String, String)> {
    let revision = store.revision().await.expect("revision");
    let mut stream = store.watch(KeyRange::all(), 0).await.expect("watch");
    let mut events = Vec::new();
    while events.last().is_none_or(|(rev, _, _, _)| *rev < revision) {
        let event = futures::StreamExt::next(&mut stream)
            .await
            .expect("event")
            .expect("no error");
        events.push((
            event.revision,
            event.kind == EventKind::Put,
            String::from_utf8(event.key).expect("utf-8"),
            String::from_utf8(event.value).expect("utf-8"),
        ));
    }
    events
}

#[test]
fn acknowledged_writes_in_the_log_are_replayed_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    crash_after(&path, "a=1,b=2,a=3,-b,c=4");
    let log = std::fs::read(wal_path(&path)).expect("log");
    assert_eq!(
        record_ends(&log).len(),
        5,
        "one record per acknowledged group"
    );
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), 5);
        assert_eq!(value(&store, "a").await.as_deref(), Some("3"));
        assert_eq!(value(&store, "b").await, None);
        assert_eq!(value(&store, "c").await.as_deref(), Some("4"));
        let a = store.get(b"a").await.expect("get").expect("a");
        assert_eq!((a.create_revision, a.mod_revision, a.version), (1, 3, 2));
        assert_eq!(
            history(&store).await,
            // Every value, also those of the puts written over (a) or deleted (b) since: the
            // replay restored what history keeps of them.
            vec![
                (1, true, "a".to_owned(), "1".to_owned()),
                (2, true, "b".to_owned(), "2".to_owned()),
                (3, true, "a".to_owned(), "3".to_owned()),
                (4, false, "b".to_owned(), String::new()),
                (5, true, "c".to_owned(), "4".to_owned()),
            ]
        );
        assert_eq!(
            store
                .range_revision(KeyRange::key("b"))
                .await
                .expect("range_revision"),
            4
        );
        // The replay was made durable and the store goes on.
        store.put(b"d", b"5").await.expect("put");
        store.close().await.expect("close");
    });
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), 6);
        assert_eq!(value(&store, "d").await.as_deref(), Some("5"));
        store.close().await.expect("close");
    });
}

#[test]
fn a_torn_last_record_ends_the_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    crash_after(&path, "a=1,b=2,c=3");
    let log_path = wal_path(&path);
    let mut log = std::fs::read(&log_path).expect("log");
    let ends = record_ends(&log);
    assert_eq!(ends.len(), 3);
    // The last record's final byte never reached the disk.
    log[ends[2] - 1] ^= 0xff;
    std::fs::write(&log_path, &log).expect("write log");
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), 2);
        assert_eq!(value(&store, "b").await.as_deref(), Some("2"));
        assert_eq!(value(&store, "c").await, None);
        // Revision 3 is given again, to the next write, and survives the next crash.
        store.put(b"d", b"4").await.expect("put");
        assert_eq!(store.revision().await.expect("revision"), 3);
        store.close().await.expect("close");
    });
    crash_after(&path, "e=5");
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), 4);
        assert_eq!(value(&store, "d").await.as_deref(), Some("4"));
        assert_eq!(value(&store, "e").await.as_deref(), Some("5"));
        assert_eq!(value(&store, "c").await, None);
        store.close().await.expect("close");
    });
}

#[test]
fn records_left_from_before_a_checkpoint_are_not_applied_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db.redb");
    crash_after(&path, "a=1,b=1,c=1,d=1");
    let old = std::fs::read(wal_path(&path)).expect("log");
    let old_ends = record_ends(&old);
    assert_eq!(old_ends.len(), 4);
    // The reopen replays four records and checkpoints; the next run writes one record over the
    // first, and the last two (revisions 3 and 4, right after the revision 2 the first record
    // will not reach) stay in the file from before.
    crash_after(&path, "-a");
    let log = std::fs::read(wal_path(&path)).expect("log");
    assert!(record_ends(&log)[0] <= old_ends[1]);
    assert_eq!(
        log[old_ends[1]..old_ends[3]],
        old[old_ends[1]..old_ends[3]],
        "the old records are still in the file"
    );
    runtime().block_on(async {
        let store = RedbStorage::open(&path).expect("reopen");
        assert_eq!(store.revision().await.expect("revision"), 5);
        assert_eq!(value(&store, "a").await, None);
        let b = store.get(b"b").await.expect("get").expect("b");
        assert_eq!((b.mod_revision, b.version), (2, 1));
        let events = history(&store).await;
        assert_eq!(events.len(), 5, "{events:?}");
        assert_eq!(events[4], (5, false, "a".to_owned(), String::new()));
        store.close().await.expect("close");
    });
}
