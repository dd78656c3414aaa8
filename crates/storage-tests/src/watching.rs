//! Conformance checks for watches: replay then follow, filtering, event order inside a
//! transaction, exactly-once delivery under concurrent writers and for slow watchers, and
//! compaction.
//!
//! Invariant: the expected events are always derived from what the writers were told (each
//! writer owns its keys, so the events of its acknowledged transactions are known exactly),
//! never from the store under test; a sentinel write after the events under test proves that
//! nothing extra was delivered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use storage::{Compare, Event, KeyRange, Op, Revision, Storage, Txn};
use tokio::task::JoinHandle;

use crate::support::{
    Revs, WAIT, assert_events, delete, delete_event, events_until, events_until_key,
    expect_compacted, next_event, put, put_event, revision, take_events, watch,
};
use crate::{MakeStore, SMALL_RETENTION, StoreConfig};

/// Every acknowledged writing transaction's events, by revision.
type Log = BTreeMap<Revision, Vec<Event>>;

/// The events of `log` a watch over `range` after `after` must deliver, in order.
fn expected(log: &Log, range: &KeyRange, after: Revision) -> Vec<Event> {
    log.range(after + 1..)
        .flat_map(|(_, events)| events)
        .filter(|event| range.contains(&event.key))
        .cloned()
        .collect()
}

/// Asserts the log holds `count` writing transactions, all before `last`: with dense
/// revisions exactly the revisions `1..=count`, one each, and `last` the next one.
fn assert_contiguous(log: &Log, count: usize, last: Revision, revs: Revs) {
    assert_eq!(log.len(), count, "acknowledged transactions");
    assert!(
        log.keys().all(|revision| *revision < last),
        "an acknowledged revision is not before {last}"
    );
    if revs.dense() {
        let revisions: Vec<Revision> = log.keys().copied().collect();
        let wanted: Vec<Revision> = (1..=count as Revision).collect();
        assert!(
            revisions == wanted,
            "acknowledged revisions are not exactly 1..={count} (got {} of them)",
            revisions.len()
        );
        assert_eq!(last, count as Revision + 1, "the sentinel's revision");
    }
}

/// A watch started at `after` replays every later event, in order, then delivers new ones.
pub async fn watch_from_past_revision_replays_then_follows(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    let r1 = put(&*store, "a", "1").await;
    let r2 = put(&*store, "b", "2").await;
    let r3 = delete(&*store, "a").await;
    let r4 = put(&*store, "c", "3").await;

    let mut stream = watch(&*store, KeyRange::all(), r1).await;
    let replayed = take_events(&mut stream, 3, "replay").await;
    assert_events(
        &replayed,
        &[
            put_event("b", "2", r2),
            delete_event("a", r3),
            put_event("c", "3", r4),
        ],
        "replay",
    );

    let r5 = put(&*store, "d", "4").await;
    assert_eq!(
        next_event(&mut stream, "live").await,
        put_event("d", "4", r5)
    );

    // From 0: the whole history.
    let mut stream = watch(&*store, KeyRange::all(), 0).await;
    let all = take_events(&mut stream, 5, "replay from 0").await;
    assert_eq!(
        all.iter().map(|event| event.revision).collect::<Vec<_>>(),
        [r1, r2, r3, r4, r5]
    );
    let r6 = put(&*store, "e", "5").await;
    assert_eq!(
        next_event(&mut stream, "live after full replay").await,
        put_event("e", "5", r6)
    );
}

/// A watch started at the current revision replays nothing and sees only later events.
pub async fn watch_from_current_revision_sees_only_new_events(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    put(&*store, "a", "1").await;
    let current = put(&*store, "b", "2").await;
    let mut stream = watch(&*store, KeyRange::all(), current).await;
    let r3 = put(&*store, "c", "3").await;
    let r4 = delete(&*store, "a").await;
    assert_eq!(
        next_event(&mut stream, "first new event").await,
        put_event("c", "3", r3)
    );
    assert_eq!(
        next_event(&mut stream, "second new event").await,
        delete_event("a", r4)
    );

    // A watch from a revision the store has not reached yet starts after it.
    let ahead = revision(&*store).await + 2;
    let mut stream = watch(&*store, KeyRange::all(), ahead).await;
    let r5 = put(&*store, "x", "maybe").await;
    let r6 = put(&*store, "y", "maybe").await;
    let r7 = put(&*store, "z", "seen").await;
    Revs(make.semantics()).exact(r7, ahead + 1, "the third write after the start");
    assert!(r7 > ahead, "three writes pass a start two revisions ahead");
    put(&*store, "~sentinel", "").await;
    let want: Vec<Event> = [
        put_event("x", "maybe", r5),
        put_event("y", "maybe", r6),
        put_event("z", "seen", r7),
    ]
    .into_iter()
    .filter(|event| event.revision > ahead)
    .collect();
    let got = events_until_key(&mut stream, "events after a future start", b"~sentinel").await;
    assert_events(&got, &want, "events after a future start");
}

/// A watch delivers only events for keys in its range, whatever the range's shape.
pub async fn watch_filters_events_by_range(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    let mut prefix = watch(&*store, KeyRange::prefix("x/"), 0).await;
    let mut between = watch(&*store, KeyRange::between("m", "n"), 0).await;
    let mut one_key = watch(&*store, KeyRange::key("x/a"), 0).await;

    let r1 = put(&*store, "x/a", "1").await;
    put(&*store, "x", "outside").await;
    put(&*store, "y/a", "outside").await;
    let r4 = put(&*store, "m1", "1").await;
    let r5 = put(&*store, "x/b", "2").await;
    put(&*store, "n", "outside").await;
    let r7 = delete(&*store, "x/a").await;
    let r8 = store
        .txn(Txn::new().then(Op::DeleteRange(KeyRange::prefix("m"))))
        .await
        .expect("delete range")
        .revision;
    let r9 = put(&*store, "x/a", "end").await;
    let r10 = put(&*store, "m~", "end").await;

    let got = events_until(&mut prefix, "prefix watch", |event| event.value == b"end").await;
    assert_events(
        &got,
        &[
            put_event("x/a", "1", r1),
            put_event("x/b", "2", r5),
            delete_event("x/a", r7),
        ],
        "prefix watch",
    );
    let got = events_until(&mut between, "range watch", |event| event.value == b"end").await;
    assert_events(
        &got,
        &[put_event("m1", "1", r4), delete_event("m1", r8)],
        "range watch",
    );
    let got = events_until(&mut one_key, "key watch", |event| event.value == b"end").await;
    assert_events(
        &got,
        &[put_event("x/a", "1", r1), delete_event("x/a", r7)],
        "key watch",
    );
    Revs(make.semantics()).next(r9, r10, "consecutive writes");
}

/// One transaction's events share its revision and come in op order; a `DeleteRange` expands
/// to one delete per key in key order; no-op deletes produce nothing.
pub async fn watch_delivers_txn_events_in_op_order_at_one_revision(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    for key in ["k/1", "k/2", "k/3"] {
        put(&*store, key, "old").await;
    }
    let before = revision(&*store).await;
    let mut stream = watch(&*store, KeyRange::all(), before).await;
    let txn = Txn::new()
        .then(Op::Put {
            key: b"z".to_vec(),
            value: b"1".to_vec(),
        })
        .then(Op::DeleteRange(KeyRange::prefix("k/")))
        .then(Op::Put {
            key: b"a".to_vec(),
            value: b"2".to_vec(),
        })
        .then(Op::Delete {
            key: b"missing".to_vec(),
        })
        .then(Op::Put {
            key: b"k/2".to_vec(),
            value: b"3".to_vec(),
        });
    let rev = store.txn(txn).await.expect("txn").revision;
    Revs(make.semantics()).next(before, rev, "one transaction");
    put(&*store, "sentinel", "").await;
    let got = events_until_key(&mut stream, "txn events", b"sentinel").await;
    let recreated = store.get(b"k/2").await.expect("get").expect("k/2");
    if make.semantics().recreate_within_txn {
        assert_events(
            &got,
            &[
                put_event("z", "1", rev),
                delete_event("k/1", rev),
                delete_event("k/2", rev),
                delete_event("k/3", rev),
                put_event("a", "2", rev),
                put_event("k/2", "3", rev),
            ],
            "one transaction's events",
        );
        assert_eq!((recreated.create_revision, recreated.version), (rev, 1));
    } else {
        // One change per key: k/2 is only put (continuing), in the order of its last op.
        assert_events(
            &got,
            &[
                put_event("z", "1", rev),
                delete_event("k/1", rev),
                delete_event("k/3", rev),
                put_event("a", "2", rev),
                put_event("k/2", "3", rev),
            ],
            "one transaction's events",
        );
        assert_eq!((recreated.mod_revision, recreated.version), (rev, 2));
    }
}

/// Starts a watch now and drains it on a task until the `sentinel` key's event.
async fn spawn_watcher(
    store: &Arc<dyn Storage>,
    range: KeyRange,
    after: Revision,
    sentinel: &'static [u8],
) -> JoinHandle<Vec<Event>> {
    let mut stream = watch(&**store, range, after).await;
    tokio::spawn(async move { events_until_key(&mut stream, "concurrent watcher", sentinel).await })
}

/// Runs `writers` tasks of `txns` transactions each: writer `w`'s transaction `i` puts
/// `{prefix}{w}/{i}`, deletes its key from the previous transaction every third time, and
/// bumps the writer's counter `n/{w}` with a compare-and-swap on its mod revision (which always
/// holds: only that writer writes it). Returns every acknowledged transaction's events.
async fn run_writers(
    store: &Arc<dyn Storage>,
    prefix: &'static str,
    writers: usize,
    txns: usize,
) -> Log {
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let counter = format!("n/{prefix}{writer}").into_bytes();
            let mut counter_revision = 0;
            let mut acked = Vec::with_capacity(txns);
            for i in 0..txns {
                let key = format!("{prefix}{writer}/{i:04}").into_bytes();
                let value = format!("{writer}.{i}").into_bytes();
                let mut txn = Txn::new()
                    .when(Compare::ModRevision(counter.clone(), counter_revision))
                    .then(Op::Put {
                        key: key.clone(),
                        value: value.clone(),
                    });
                let previous =
                    (i % 3 == 2).then(|| format!("{prefix}{writer}/{:04}", i - 1).into_bytes());
                if let Some(previous) = &previous {
                    txn = txn.then(Op::Delete {
                        key: previous.clone(),
                    });
                }
                txn = txn.then(Op::Put {
                    key: counter.clone(),
                    value: i.to_string().into_bytes(),
                });
                let result = store.txn(txn).await.expect("writer txn");
                assert!(
                    result.succeeded,
                    "writer {writer}'s counter was changed by someone else"
                );
                let rev = result.revision;
                counter_revision = rev;
                let mut events = vec![put_event(key, value, rev)];
                if let Some(previous) = previous {
                    events.push(delete_event(previous, rev));
                }
                events.push(put_event(counter.clone(), i.to_string(), rev));
                acked.push((rev, events));
            }
            acked
        }));
    }
    let mut log = Log::new();
    for task in tasks {
        for (rev, events) in task.await.expect("writer task") {
            assert!(
                log.insert(rev, events).is_none(),
                "revision {rev} acknowledged twice"
            );
        }
    }
    log
}

/// Eight writers, five watchers started before and during the writes at past, present and
/// filtered positions: each watcher gets exactly its share of the acknowledged history, in
/// order, with no event missed or repeated.
pub async fn concurrent_writers_and_watchers_miss_and_duplicate_nothing(make: &dyn MakeStore) {
    const WRITERS: usize = 8;
    const TXNS: usize = 200;
    const PRELOAD: u64 = 20;
    const SENTINEL: &[u8] = b"c/3/~sentinel";
    let store = make.make(StoreConfig::default()).await;
    let mut log = Log::new();
    for i in 0..PRELOAD {
        let key = format!("pre/{i:02}");
        let rev = put(&*store, &key, "v").await;
        log.insert(rev, vec![put_event(key, "v", rev)]);
    }
    let revs = Revs(make.semantics());
    revs.exact(revision(&*store).await, PRELOAD, "after the preload");

    let mut watchers = vec![
        (
            "all from 0",
            KeyRange::all(),
            0,
            spawn_watcher(&store, KeyRange::all(), 0, SENTINEL).await,
        ),
        (
            "c/3/ from 0",
            KeyRange::prefix("c/3/"),
            0,
            spawn_watcher(&store, KeyRange::prefix("c/3/"), 0, SENTINEL).await,
        ),
        (
            "all from a past revision",
            KeyRange::all(),
            PRELOAD / 2,
            spawn_watcher(&store, KeyRange::all(), PRELOAD / 2, SENTINEL).await,
        ),
    ];
    let writers = {
        let store = store.clone();
        tokio::spawn(async move { run_writers(&store, "c/", WRITERS, TXNS).await })
    };
    // Join in mid-stream: once a few hundred transactions have committed, start one watcher at
    // the current revision and one well in the past.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mid = loop {
        let current = revision(&*store).await;
        if current >= PRELOAD + 400 || writers.is_finished() {
            break current;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "writers made no progress"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    watchers.push((
        "all from the current revision mid-run",
        KeyRange::all(),
        mid,
        spawn_watcher(&store, KeyRange::all(), mid, SENTINEL).await,
    ));
    // The revision of the 300th acknowledged transaction before `mid` is not known to this
    // task; with sparse revisions `mid - 300` is still a valid (if older) start.
    let past = mid.saturating_sub(300);
    watchers.push((
        "all from a past revision mid-run",
        KeyRange::all(),
        past,
        spawn_watcher(&store, KeyRange::all(), past, SENTINEL).await,
    ));

    log.extend(writers.await.expect("writers"));
    let last = put(&*store, SENTINEL, "").await;
    assert_contiguous(&log, PRELOAD as usize + WRITERS * TXNS, last, revs);

    for (name, range, after, task) in watchers {
        let got = tokio::time::timeout(WAIT * 2, task)
            .await
            .unwrap_or_else(|_| panic!("{name}: timed out"))
            .expect("watcher task");
        assert_events(&got, &expected(&log, &range, after), name);
    }
}

/// A watcher that does not read while more batches than the hub buffers (1024) commit still
/// gets every event exactly once, whether it lagged mid-stream or before its first read.
pub async fn slow_watcher_behind_hub_buffer_gets_every_event_once(make: &dyn MakeStore) {
    const WRITERS: usize = 8;
    const TXNS: usize = 170; // 1360 batches: well past the hub's 1024.
    const SENTINEL: &[u8] = b"~sentinel";
    let store = make.make(StoreConfig::default()).await;
    let first = put(&*store, "s/first", "1").await;
    let mut log = Log::new();
    log.insert(first, vec![put_event("s/first", "1", first)]);

    let mut reading = watch(&*store, KeyRange::all(), 0).await;
    assert_eq!(
        next_event(&mut reading, "first event").await,
        put_event("s/first", "1", first)
    );
    let mut unread = watch(&*store, KeyRange::all(), 0).await;
    let mut filtered = watch(&*store, KeyRange::prefix("s/5/"), first).await;

    log.extend(run_writers(&store, "s/", WRITERS, TXNS).await);
    let last = put(&*store, SENTINEL, "").await;
    assert_contiguous(&log, 1 + WRITERS * TXNS, last, Revs(make.semantics()));

    let got = events_until_key(&mut reading, "watcher that lagged mid-stream", SENTINEL).await;
    assert_events(
        &got,
        &expected(&log, &KeyRange::all(), first),
        "watcher that lagged mid-stream",
    );
    let got = events_until_key(
        &mut unread,
        "watcher that lagged before its first read",
        SENTINEL,
    )
    .await;
    assert_events(
        &got,
        &expected(&log, &KeyRange::all(), 0),
        "watcher that lagged before its first read",
    );
    // The filtered watch never sees the sentinel; a final write in its range closes it.
    let end = put(&*store, "s/5/~end", "").await;
    log.insert(end, vec![]);
    let got = events_until_key(&mut filtered, "filtered watcher that lagged", b"s/5/~end").await;
    assert_events(
        &got,
        &expected(&log, &KeyRange::prefix("s/5/"), first),
        "filtered watcher that lagged",
    );
}

/// With a small retention, a watch from before the retained history fails with `Compacted`
/// naming the oldest available revision; from there, and within the retention, it replays.
pub async fn watch_from_compacted_revision_fails_with_compacted(make: &dyn MakeStore) {
    let retention = SMALL_RETENTION;
    let store = make
        .make(StoreConfig::with_history_retention(retention))
        .await;
    let total = retention * 3;
    let revs = Revs(make.semantics());
    let mut log = Log::new();
    // The revision of each write, in order: `1..=total` with dense revisions.
    let mut written = Vec::new();
    let mut previous = revision(&*store).await;
    for i in 0..total {
        let rev = if i % 7 == 6 {
            // Delete the key the previous iteration put, so the delete writes.
            let key = format!("k/{}", (i - 1) % 10);
            let rev = delete(&*store, &key).await;
            log.insert(rev, vec![delete_event(key, rev)]);
            rev
        } else {
            let key = format!("k/{}", i % 10);
            let rev = put(&*store, &key, i.to_string()).await;
            log.insert(rev, vec![put_event(key, i.to_string(), rev)]);
            rev
        };
        revs.next(previous, rev, "a write");
        previous = rev;
        written.push(rev);
    }
    // The revision of the `n`th write (1-based).
    let nth = |n: u64| written[usize::try_from(n - 1).expect("a small index")];

    let compacted = expect_compacted(&*store, 1).await;
    assert!(
        compacted > 1,
        "revision 1 is compacted, so the oldest available is later (got {compacted})"
    );
    assert!(
        compacted <= nth(total - retention),
        "at least {retention} revisions are kept (oldest available {compacted})"
    );
    assert_eq!(expect_compacted(&*store, 0).await, compacted);

    // From the oldest available revision, and from the edge of the retention: full replay,
    // then live events. (Replay first: writing more would compact further.)
    let mut streams = Vec::new();
    for after in [compacted, nth(total - retention), nth(total - 1)] {
        let mut stream = watch(&*store, KeyRange::all(), after).await;
        let want = expected(&log, &KeyRange::all(), after);
        let got = take_events(&mut stream, want.len(), "replay of retained history").await;
        assert_events(&got, &want, "replay of retained history");
        streams.push(stream);
    }
    let next = put(&*store, "live", "").await;
    for stream in &mut streams {
        assert_eq!(
            next_event(stream, "live after replay").await,
            put_event("live", "", next)
        );
    }
    // Compaction keeps moving as writes continue.
    let later = expect_compacted(&*store, compacted.saturating_sub(1)).await;
    assert!(later >= compacted);
}

/// Once compaction has dropped a delete, `range_revision` for its range still does not go
/// below what it reported before.
pub async fn range_revision_never_goes_backwards_across_compaction(make: &dyn MakeStore) {
    let retention = SMALL_RETENTION;
    let store = make
        .make(StoreConfig::with_history_retention(retention))
        .await;
    let rr = |range: KeyRange| {
        let store = store.clone();
        async move { store.range_revision(range).await.expect("range_revision") }
    };
    put(&*store, "t/a", "1").await;
    put(&*store, "t/b", "1").await;
    let deleted = delete(&*store, "t/a").await;
    assert_eq!(rr(KeyRange::prefix("t/")).await, deleted);
    assert_eq!(rr(KeyRange::key("t/a")).await, deleted);

    let mut last_seen = deleted;
    for i in 0..retention * 3 {
        put(&*store, format!("u/{}", i % 5), "x").await;
        let now = rr(KeyRange::prefix("t/")).await;
        assert!(
            now >= last_seen,
            "range_revision went from {last_seen} back to {now}"
        );
        last_seen = now;
    }
    let current = revision(&*store).await;
    expect_compacted(&*store, 1).await;
    let after = rr(KeyRange::prefix("t/")).await;
    assert!(
        (deleted..=current).contains(&after),
        "range_revision {after} after compaction"
    );
    assert!(rr(KeyRange::key("t/a")).await >= deleted);

    let put_again = put(&*store, "t/c", "1").await;
    assert_eq!(rr(KeyRange::prefix("t/")).await, put_again);
    let deleted_again = delete(&*store, "t/c").await;
    assert_eq!(rr(KeyRange::prefix("t/")).await, deleted_again);
}
