//! Conformance checks for snapshots and restore: consistency under concurrent writers, restore
//! as one new revision with events, the byte encoding round trip into a fresh store, and
//! rejection of malformed snapshots.
//!
//! Invariant: a snapshot is judged against the [`Model`] rebuilt from the store's full event
//! history up to the snapshot's revision, metadata included; restore is judged on contents
//! (keys and values), since restored keys are rewritten at the restore revision.

use std::time::Duration;

use storage::{Error, EventKind, KeyRange, KeyValue, Snapshot, Txn};

use crate::support::{
    Model, Revs, all_kvs, assert_events, assert_kvs, assert_unwritten_since, contents, delete,
    events_until_key, put, revision, watch,
};
use crate::{MakeStore, StoreConfig};

/// Snapshots taken while writers run each equal the store at their revision, exactly: every
/// key, value and metadata, and no half of any transaction.
pub async fn snapshot_is_consistent_while_writers_run(make: &dyn MakeStore) {
    const WRITERS: usize = 4;
    const TXNS: usize = 100;
    let store = make.make(StoreConfig::default()).await;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..TXNS {
                // `a` and `b` always change together; temporary keys come and go.
                let value = i.to_string().into_bytes();
                let mut txn = Txn::new()
                    .then(storage::Op::Put {
                        key: format!("p/{writer}/a").into_bytes(),
                        value: value.clone(),
                    })
                    .then(storage::Op::Put {
                        key: format!("p/{writer}/t/{i:03}").into_bytes(),
                        value: value.clone(),
                    })
                    .then(storage::Op::Put {
                        key: format!("p/{writer}/b").into_bytes(),
                        value,
                    });
                if i % 2 == 1 {
                    txn = txn.then(storage::Op::Delete {
                        key: format!("p/{writer}/t/{:03}", i - 1).into_bytes(),
                    });
                }
                store.txn(txn).await.expect("writer txn");
            }
        }));
    }
    let mut snapshots = Vec::new();
    while !tasks.iter().all(|task| task.is_finished()) {
        snapshots.push(store.snapshot().await.expect("snapshot while writing"));
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for task in tasks {
        task.await.expect("writer task");
    }
    snapshots.push(store.snapshot().await.expect("snapshot after writing"));

    let sentinel = put(&*store, "~sentinel", "").await;
    let mut stream = watch(&*store, KeyRange::all(), 0).await;
    let history = events_until_key(&mut stream, "full history", b"~sentinel").await;
    let revs = Revs(make.semantics());
    let newest = history.last().map_or(0, |event| event.revision);
    assert!(newest < sentinel, "the history ends before the sentinel");
    revs.exact(
        newest,
        sentinel - 1,
        "the history ends just before the sentinel",
    );

    for (index, snapshot) in snapshots.iter().enumerate() {
        let mut model = Model::default();
        for event in history
            .iter()
            .filter(|event| event.revision <= snapshot.revision)
        {
            model.apply(event);
        }
        assert_kvs(
            &snapshot.entries,
            &model.kvs(),
            &format!("snapshot {index} at revision {}", snapshot.revision),
        );
        for writer in 0..WRITERS {
            let value = |name: &str| {
                let key = format!("p/{writer}/{name}").into_bytes();
                snapshot
                    .entries
                    .iter()
                    .find(|kv| kv.key == key)
                    .map(|kv| kv.value.clone())
            };
            assert_eq!(
                value("a"),
                value("b"),
                "snapshot {index} splits a transaction of writer {writer}"
            );
        }
    }
    let last = snapshots.last().expect("at least one snapshot");
    assert!(
        (newest..sentinel).contains(&last.revision),
        "the final snapshot is at or after the last write"
    );
    revs.exact(last.revision, sentinel - 1, "the final snapshot's revision");
    assert_kvs(
        &last.entries,
        &all_kvs(&*store).await[..last.entries.len()],
        "final snapshot against a scan",
    );
}

/// Restore makes the contents equal the snapshot's in one new revision, and watchers see the
/// change as put and delete events at that revision that turn the old contents into the new.
pub async fn restore_makes_contents_equal_snapshot_as_one_new_revision(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    let revs = Revs(make.semantics());
    put(&*store, "a", "1").await;
    put(&*store, "b", "2").await;
    put(&*store, "c", "3").await;
    let r4 = put(&*store, "b", "22").await;
    let snapshot = store.snapshot().await.expect("snapshot");
    revs.read(r4, snapshot.revision, "the snapshot's revision");
    assert_eq!(
        contents(&snapshot.entries),
        pairs(&[("a", "1"), ("b", "22"), ("c", "3")])
    );

    delete(&*store, "a").await;
    put(&*store, "c", "33").await;
    let before_rev = put(&*store, "d", "4").await;
    let before = all_kvs(&*store).await;
    let mut stream = watch(&*store, KeyRange::all(), before_rev).await;

    let restored = store.restore(&snapshot).await.expect("restore");
    revs.next(
        before_rev,
        restored,
        "restore is one new revision, never an old one",
    );
    revs.read(
        restored,
        revision(&*store).await,
        "revision after the restore",
    );
    let after = all_kvs(&*store).await;
    assert_eq!(
        contents(&after),
        contents(&snapshot.entries),
        "contents equal the snapshot's"
    );
    for kv in &after {
        assert!(kv.mod_revision <= restored, "{kv:?}");
        let old = before.iter().find(|old| old.key == kv.key);
        if old.map(|old| &old.value) != Some(&kv.value) {
            assert_eq!(
                kv.mod_revision, restored,
                "changed key {kv:?} is written at the restore revision"
            );
        }
        if old.is_none() {
            assert_eq!(
                (kv.create_revision, kv.version),
                (restored, 1),
                "re-created key {kv:?}"
            );
        }
    }

    let sentinel = put(&*store, "~sentinel", "").await;
    revs.next(restored, sentinel, "the write after the restore");
    let events = events_until_key(&mut stream, "restore events", b"~sentinel").await;
    assert!(
        events.iter().all(|event| event.revision == restored),
        "restore events share its revision: {events:?}"
    );
    let mut model = Model::from_kvs(&before);
    for event in &events {
        model.apply(event);
    }
    assert_eq!(
        contents(&model.kvs()),
        contents(&snapshot.entries),
        "the events describe the restore"
    );
    for key in [b"a".as_slice(), b"c", b"d"] {
        assert!(
            events.iter().any(|event| event.key == key),
            "no event for changed key {:?}",
            String::from_utf8_lossy(key)
        );
    }
    assert!(
        events
            .iter()
            .any(|event| event.key == b"d" && event.kind == EventKind::Delete)
    );

    // Restoring again keeps the contents and still never moves the revision backwards.
    let again = store.restore(&snapshot).await.expect("second restore");
    assert!(again >= sentinel);
    assert_eq!(
        contents(&all_kvs(&*store).await),
        contents(&snapshot.entries)
    );
}

fn pairs(entries: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    entries
        .iter()
        .map(|(key, value)| (key.as_bytes().to_vec(), value.as_bytes().to_vec()))
        .collect()
}

/// Restoring an empty snapshot deletes every key, as one revision of delete events.
pub async fn restore_of_empty_snapshot_deletes_everything(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    let revs = Revs(make.semantics());
    let start = revision(&*store).await;
    let onto_empty = store
        .restore(&Snapshot::default())
        .await
        .expect("restore onto empty");
    revs.read(start, onto_empty, "nothing to write");
    assert_unwritten_since(&*store, 0, "an empty restore onto an empty store").await;
    let mut last = 0;
    for key in ["x", "y/1", "y/2"] {
        last = put(&*store, key, "v").await;
    }
    let mut stream = watch(&*store, KeyRange::all(), last).await;
    let restored = store
        .restore(&Snapshot {
            revision: 99,
            entries: Vec::new(),
        })
        .await
        .expect("restore");
    revs.next(last, restored, "the restore");
    assert!(all_kvs(&*store).await.is_empty());
    put(&*store, "~sentinel", "").await;
    let events = events_until_key(&mut stream, "restore events", b"~sentinel").await;
    assert_events(
        &events,
        &[
            crate::support::delete_event("x", restored),
            crate::support::delete_event("y/1", restored),
            crate::support::delete_event("y/2", restored),
        ],
        "empty restore",
    );
    assert_eq!(
        store
            .range_revision(KeyRange::prefix("y/"))
            .await
            .expect("range_revision"),
        restored
    );
}

/// A snapshot whose entries are out of order or duplicated is rejected and changes nothing.
pub async fn restore_rejects_unordered_snapshot(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    let kept = put(&*store, "keep", "1").await;
    let kv = |key: &str| KeyValue {
        key: key.into(),
        value: b"v".to_vec(),
        create_revision: 1,
        mod_revision: 1,
        version: 1,
    };
    for entries in [vec![kv("b"), kv("a")], vec![kv("a"), kv("a")]] {
        match store
            .restore(&Snapshot {
                revision: 1,
                entries,
            })
            .await
        {
            Err(Error::InvalidSnapshot(_)) => {}
            other => panic!("expected InvalidSnapshot, got {other:?}"),
        }
    }
    Revs(make.semantics()).read(kept, revision(&*store).await, "nothing written");
    assert_unwritten_since(&*store, kept, "a rejected restore").await;
    assert_eq!(contents(&all_kvs(&*store).await), pairs(&[("keep", "1")]));
}

/// A snapshot survives `to_bytes`/`from_bytes` unchanged, restores into a fresh store of the
/// same backend, and corrupted bytes are rejected.
pub async fn snapshot_bytes_round_trip_into_a_fresh_store(make: &dyn MakeStore) {
    let source = make.make(StoreConfig::default()).await;
    put(&*source, b"\x00zero", "binary key").await;
    put(&*source, "empty", "").await;
    put(&*source, "gone", "x").await;
    put(&*source, "big", vec![7u8; 100_000]).await;
    put(&*source, b"\xff\xfe", b"\x00\x01\x02").await;
    put(&*source, "empty", "now set").await;
    let last = delete(&*source, "gone").await;
    let snapshot = source.snapshot().await.expect("snapshot");
    let revs = Revs(make.semantics());
    revs.read(last, snapshot.revision, "the snapshot's revision");
    assert_eq!(snapshot.entries.len(), 4);

    let bytes = snapshot.to_bytes();
    let decoded = Snapshot::from_bytes(&bytes).expect("decode");
    assert_eq!(decoded, snapshot);
    let mut corrupt = bytes.clone();
    corrupt[bytes.len() / 2] ^= 1;
    assert!(matches!(
        Snapshot::from_bytes(&corrupt),
        Err(Error::InvalidSnapshot(_))
    ));

    let target = make.make(StoreConfig::default()).await;
    let stale = put(&*target, "stale", "x").await;
    let restored = target
        .restore(&decoded)
        .await
        .expect("restore into a fresh store");
    revs.next(stale, restored, "the restore");
    assert_eq!(
        contents(&all_kvs(&*target).await),
        contents(&snapshot.entries)
    );
    let copy = target.snapshot().await.expect("snapshot of the copy");
    revs.read(restored, copy.revision, "the copy's snapshot");
    assert_eq!(contents(&copy.entries), contents(&snapshot.entries));
    assert_eq!(
        target.get(b"big").await.expect("get").expect("big").value,
        vec![7u8; 100_000]
    );
}
