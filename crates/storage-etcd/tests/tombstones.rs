//! Tombstone tidy on etcd (`src/tidy.rs`), against real etcd processes of the tests' own
//! (compaction is cluster-wide, so never the shared etcd): the tombstones of deletes that
//! compaction passed are removed, the tombstone floor takes their place, and
//! `range_revision` never goes backwards, read through the store that tidied, through a second
//! store on the same prefix (another server) while it tidies, and through a store opened
//! afterwards (a restart). Both ways of compacting: the store's own `history_retention`, and
//! etcd compacting by itself (`history_retention = 0`), where the store tidies against the
//! compaction revision etcd reports.
//!
//! Invariant: every wait is a bounded poll; each test's etcd dies with its guard.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use storage::{KeyRange, Revision, Storage, StorageExt};
use storage_etcd::{EtcdConfig, EtcdStorage};

use support::PrivateEtcd;

const PREFIX: &str = "cairn/";

/// Deletes a test makes: more than one tidy transaction's worth.
const DELETES: usize = 150;

async fn open(etcd: &PrivateEtcd, retention: Option<u64>) -> Arc<EtcdStorage> {
    let mut config = EtcdConfig::new(vec![etcd.endpoint.clone()], PREFIX);
    config.history_retention = retention;
    Arc::new(EtcdStorage::open(&config).await.expect("open the store"))
}

/// How many tombstones are in etcd, and the floor's value (0 when missing).
async fn tombstones(etcd: &PrivateEtcd) -> (usize, u64) {
    let mut client = Client::connect([&etcd.endpoint], None)
        .await
        .expect("connect");
    let tombs = client
        .get(
            format!("{PREFIX}tomb/"),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count tombstones")
        .count();
    let floor = client
        .get(format!("{PREFIX}meta/tombstone-floor"), None)
        .await
        .expect("read the floor")
        .kvs()
        .first()
        .and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
        .unwrap_or(0);
    (usize::try_from(tombs).expect("a count"), floor)
}

async fn rr(store: &EtcdStorage, range: KeyRange) -> Revision {
    store.range_revision(range).await.expect("range_revision")
}

/// Reads `range_revision` of `t/` through `store` until stopped, failing if it ever goes
/// backwards or below `at_least`; returns how many reads it made.
fn watch_monotonic(
    store: Arc<EtcdStorage>,
    at_least: Revision,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut last = at_least;
        let mut reads = 0;
        while !stop.load(Ordering::Acquire) {
            let now = rr(&store, KeyRange::prefix("t/")).await;
            assert!(now >= last, "range_revision went from {last} back to {now}");
            last = now;
            reads += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        reads
    })
}

async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn compaction_by_the_store_tidies_tombstones_and_range_revision_never_goes_backwards() {
    let etcd = PrivateEtcd::start().await;
    let retention = 32;
    let first = open(&etcd, Some(retention)).await;
    let second = open(&etcd, Some(retention)).await;
    // More deletes than one tidy transaction takes (125 on a default etcd), through both.
    let keys: Vec<String> = (0..DELETES).map(|i| format!("t/{i:03}")).collect();
    let mut deleted_a = 0;
    let mut deleted_c = 0;
    for (i, key) in keys.iter().enumerate() {
        let store = if i % 2 == 0 { &first } else { &second };
        store.put(key.as_bytes(), b"1").await.expect("put");
        deleted_c = store.delete(key.as_bytes()).await.expect("delete");
        if i == 0 {
            deleted_a = deleted_c;
        }
    }
    assert_eq!(rr(&second, KeyRange::prefix("t/")).await, deleted_c);
    // The first delete's own revision, or the floor of a tidy already under way (no lower).
    assert!(rr(&second, KeyRange::key("t/000")).await >= deleted_a);
    let (before, _) = tombstones(&etcd).await;
    assert!(before > 0, "the latest deletes are not compacted yet");

    // Writes elsewhere move compaction past the deletes; a second server reads all along.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = watch_monotonic(second.clone(), deleted_c, stop.clone());
    for i in 0..retention * 3 {
        first
            .put(format!("u/{}", i % 5).as_bytes(), b"x")
            .await
            .expect("put");
    }
    // The store tidies by itself once a transaction's worth has passed compaction...
    until("a batch of tombstones tidied by the store", || async {
        tombstones(&etcd).await.0 + 125 <= DELETES
    })
    .await;
    // ... and the rest go with the next batch, or now.
    first.tidy().await.expect("tidy");
    assert_eq!(tombstones(&etcd).await, (0, deleted_c));
    stop.store(true, Ordering::Release);
    let reads = reader.await.expect("the reader saw no step back");
    assert!(reads > 0);
    let (_, floor) = tombstones(&etcd).await;
    assert!(
        floor >= deleted_c,
        "floor {floor} below the last delete {deleted_c}"
    );
    let current = first.revision().await.expect("revision");
    assert!(floor <= current);

    // Every server, and one that starts now, answers at least what it answered before.
    let restarted = open(&etcd, Some(retention)).await;
    for store in [&first, &second, &restarted] {
        assert!(rr(store, KeyRange::prefix("t/")).await >= deleted_c);
        assert!(rr(store, KeyRange::key("t/000")).await >= deleted_a);
        assert_eq!(store.get(b"t/000").await.expect("get"), None);
    }
    // A delete after the tidy has its own tombstone, and range_revision names it.
    restarted.put(b"t/d", b"1").await.expect("put");
    let deleted_d = restarted.delete(b"t/d").await.expect("delete");
    assert_eq!(rr(&first, KeyRange::prefix("t/")).await, deleted_d);
    assert_eq!(tombstones(&etcd).await.0, 1);
}

#[tokio::test]
async fn with_etcds_own_compaction_the_store_tidies_against_the_revision_etcd_reports() {
    let etcd = PrivateEtcd::start().await;
    let store = open(&etcd, None).await;
    let mut last_delete = 0;
    for i in 0..10 {
        let key = format!("t/{i}");
        store.put(key.as_bytes(), b"1").await.expect("put");
        last_delete = store.delete(key.as_bytes()).await.expect("delete");
    }
    assert_eq!(tombstones(&etcd).await, (10, 0));
    assert_eq!(
        store.tidy().await.expect("tidy"),
        0,
        "nothing compacted yet"
    );
    assert_eq!(tombstones(&etcd).await.0, 10);

    // etcd compacts (as its --auto-compaction-retention would).
    let mut client = Client::connect([&etcd.endpoint], None)
        .await
        .expect("connect");
    let head = i64::try_from(store.revision().await.expect("revision")).expect("revision");
    client.compact(head, None).await.expect("compact");
    let removed = store.tidy().await.expect("tidy");
    assert_eq!(removed, 10);
    let (tombs, floor) = tombstones(&etcd).await;
    assert_eq!(tombs, 0);
    assert_eq!(floor, last_delete);
    assert_eq!(rr(&store, KeyRange::prefix("t/")).await, last_delete);
    let restarted = open(&etcd, None).await;
    assert_eq!(rr(&restarted, KeyRange::prefix("t/")).await, last_delete);

    // By itself: deletes, etcd compacts, and the store finds out within its probe interval of
    // writes.
    for i in 0..DELETES {
        let key = format!("t/later-{i}");
        store.put(key.as_bytes(), b"1").await.expect("put");
        last_delete = store.delete(key.as_bytes()).await.expect("delete");
    }
    let head = i64::try_from(store.revision().await.expect("revision")).expect("revision");
    client.compact(head, None).await.expect("compact");
    assert_eq!(tombstones(&etcd).await.0, DELETES);
    for i in 0..1000 {
        store
            .put(format!("u/{}", i % 7).as_bytes(), b"x")
            .await
            .expect("put");
    }
    until("the store tidies after its probe", || async {
        tombstones(&etcd).await.0 == 0
    })
    .await;
    assert_eq!(tombstones(&etcd).await.1, last_delete);
    assert!(rr(&restarted, KeyRange::prefix("t/")).await >= last_delete);
}
