//! Conformance checks for keys, scans, transactions, revisions and `range_revision`.
//!
//! Invariant: each check starts from a fresh empty store from the backend's [`MakeStore`] and
//! asserts exact revisions where the backend's [`crate::Semantics`] has dense ones (ordering
//! otherwise), and checks through `range_revision` that a transaction that wrote nothing wrote
//! nothing, so it fails loudly if a backend writes for such a transaction.

use std::sync::Arc;

use storage::{Compare, KeyRange, Op, Storage, Txn, TxnResult};

use crate::support::{Revs, all_kvs, assert_unwritten_since, contents, delete, put, revision};
use crate::{MakeStore, StoreConfig};

async fn fresh(make: &dyn MakeStore) -> Arc<dyn Storage> {
    make.make(StoreConfig::default()).await
}

fn revs(make: &dyn MakeStore) -> Revs {
    Revs(make.semantics())
}

async fn txn(store: &dyn Storage, txn: Txn) -> TxnResult {
    match store.txn(txn.clone()).await {
        Ok(result) => result,
        Err(err) => panic!("txn {txn:?} failed: {err}"),
    }
}

fn keys(kvs: &[storage::KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

/// `get` of a key that never existed, or was deleted, is `None`, not an error.
pub async fn get_of_missing_key_returns_none(make: &dyn MakeStore) {
    let store = fresh(make).await;
    assert_eq!(store.get(b"nope").await.expect("get"), None, "empty store");
    put(&*store, "a", "1").await;
    assert_eq!(
        store.get(b"nope").await.expect("get"),
        None,
        "absent key beside a present one"
    );
    assert_eq!(
        store.get(b"a\0").await.expect("get"),
        None,
        "a key that only extends a present one"
    );
    assert_eq!(store.get(b"").await.expect("get"), None, "the empty key");
    delete(&*store, "a").await;
    assert_eq!(store.get(b"a").await.expect("get"), None, "deleted key");
}

/// `get_many` answers, for each key in the order asked (repeats and missing keys included),
/// what `get` answers for it.
pub async fn get_many_answers_each_key_as_get_does_in_order(make: &dyn MakeStore) {
    let store = fresh(make).await;
    assert_eq!(store.get_many(&[]).await.expect("get_many"), Vec::new());
    put(&*store, "a", "1").await;
    put(&*store, "c", "3").await;
    put(&*store, "a", "2").await;
    let keys: [&[u8]; 5] = [b"c", b"missing", b"a", b"", b"c"];
    let many = store.get_many(&keys).await.expect("get_many");
    assert_eq!(many.len(), keys.len());
    for (key, got) in keys.iter().zip(&many) {
        assert_eq!(got, &store.get(key).await.expect("get"), "key {key:?}");
    }
    assert_eq!(
        many[2].as_ref().map(|kv| kv.value.as_slice()),
        Some(&b"2"[..])
    );
    assert_eq!(many[1], None);
}

/// A prefix scan returns exactly the keys starting with the prefix, in ascending byte order,
/// at the store's current revision.
pub async fn scan_by_prefix_returns_only_prefixed_keys_in_order(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let mut last = 0;
    for key in [
        "reg/b",
        "reg",
        "reg/a/2",
        "rega",
        "reg/",
        "reg/a",
        "re",
        "reg/\u{ff}",
        "reh",
        "reg/a/1",
    ] {
        last = put(&*store, key, key).await;
    }
    let scan = store
        .scan(KeyRange::prefix("reg/"), None)
        .await
        .expect("scan");
    assert_eq!(
        keys(&scan.kvs),
        ["reg/", "reg/a", "reg/a/1", "reg/a/2", "reg/b", "reg/\u{ff}"]
    );
    assert!(!scan.more);
    revs(make).read(
        last,
        scan.revision,
        "a scan reports the revision it read at",
    );
    for kv in &scan.kvs {
        assert_eq!(kv.value, kv.key, "value of {kv:?}");
    }

    let all = store
        .scan(KeyRange::prefix(""), None)
        .await
        .expect("scan everything");
    assert_eq!(all.kvs.len(), 10, "the empty prefix is the whole keyspace");
    assert!(
        all.kvs.windows(2).all(|pair| pair[0].key < pair[1].key),
        "ascending order"
    );

    let none = store
        .scan(KeyRange::prefix("zzz"), None)
        .await
        .expect("scan");
    assert!(none.kvs.is_empty() && !none.more);

    // Binary keys with 0xff bytes order after everything else under their prefix.
    put(&*store, b"bin/\xff\xff", "x").await;
    put(&*store, b"bin/\x00", "y").await;
    put(&*store, b"bin0", "z").await;
    let bin = store
        .scan(KeyRange::prefix("bin/"), None)
        .await
        .expect("scan");
    let bin_keys: Vec<&[u8]> = bin.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(
        bin_keys,
        [b"bin/\x00".as_slice(), b"bin/\xff\xff".as_slice()]
    );
}

/// A range scan is `[start, end)`; an empty end is unbounded; an inverted range is empty.
pub async fn scan_by_range_is_half_open(make: &dyn MakeStore) {
    let store = fresh(make).await;
    for key in ["k1", "k2", "k3", "k4", "k5", "k6"] {
        put(&*store, key, "v").await;
    }
    let scan = |range: KeyRange| {
        let store = store.clone();
        async move { keys(&store.scan(range, None).await.expect("scan").kvs) }
    };
    assert_eq!(
        scan(KeyRange::between("k2", "k5")).await,
        ["k2", "k3", "k4"]
    );
    assert_eq!(scan(KeyRange::between("k2x", "k5")).await, ["k3", "k4"]);
    assert_eq!(scan(KeyRange::between("k4", "")).await, ["k4", "k5", "k6"]);
    assert_eq!(scan(KeyRange::between("", "k2")).await, ["k1"]);
    assert_eq!(scan(KeyRange::key("k3")).await, ["k3"]);
    assert_eq!(scan(KeyRange::key("k")).await, Vec::<String>::new());
    assert_eq!(
        scan(KeyRange::between("k3", "k3")).await,
        Vec::<String>::new()
    );
    assert_eq!(
        scan(KeyRange::between("k5", "k2")).await,
        Vec::<String>::new(),
        "inverted range"
    );
    assert_eq!(scan(KeyRange::all()).await.len(), 6);
}

/// `limit` returns the first keys of the range; `more` says whether any were cut off.
pub async fn scan_limit_cuts_off_and_reports_more(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let mut last = 0;
    for key in ["l/e", "l/a", "l/d", "l/b", "l/c", "m"] {
        last = put(&*store, key, "v").await;
    }
    let range = KeyRange::prefix("l/");
    for (limit, expected, more) in [
        (Some(0), vec![], true),
        (Some(1), vec!["l/a"], true),
        (Some(2), vec!["l/a", "l/b"], true),
        (Some(4), vec!["l/a", "l/b", "l/c", "l/d"], true),
        (Some(5), vec!["l/a", "l/b", "l/c", "l/d", "l/e"], false),
        (Some(6), vec!["l/a", "l/b", "l/c", "l/d", "l/e"], false),
        (None, vec!["l/a", "l/b", "l/c", "l/d", "l/e"], false),
    ] {
        let scan = store.scan(range.clone(), limit).await.expect("scan");
        assert_eq!(keys(&scan.kvs), expected, "limit {limit:?}");
        assert_eq!(scan.more, more, "more with limit {limit:?}");
        revs(make).read(
            last,
            scan.revision,
            &format!("revision with limit {limit:?}"),
        );
    }
    // Continuing after the last returned key pages through the rest.
    let next = store
        .scan(KeyRange::between("l/b\0", prefix_end("l/")), Some(2))
        .await
        .expect("scan");
    assert_eq!(keys(&next.kvs), ["l/c", "l/d"]);
    assert!(next.more);
}

fn prefix_end(prefix: &str) -> Vec<u8> {
    storage::prefix_end(prefix.as_bytes())
}

/// `Exists` and `Missing` pick the success or failure branch; only that branch is applied.
pub async fn txn_exists_and_missing_compares_choose_the_branch(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let put_op = |key: &str, value: &str| Op::Put {
        key: key.into(),
        value: value.into(),
    };
    let revs = revs(make);
    let r1 = put(&*store, "here", "1").await;

    let result = txn(
        &*store,
        Txn::new()
            .when(Compare::Exists(b"here".to_vec()))
            .then(put_op("s1", "x"))
            .otherwise(put_op("f1", "x")),
    )
    .await;
    assert!(result.succeeded);
    revs.next(r1, result.revision, "exists: success branch writes");
    let previous = result.revision;
    let result = txn(
        &*store,
        Txn::new()
            .when(Compare::Exists(b"gone".to_vec()))
            .then(put_op("s2", "x"))
            .otherwise(put_op("f2", "x")),
    )
    .await;
    assert!(!result.succeeded);
    revs.next(previous, result.revision, "exists: failure branch writes");
    let previous = result.revision;
    let result = txn(
        &*store,
        Txn::new()
            .when(Compare::Missing(b"gone".to_vec()))
            .then(put_op("s3", "x"))
            .otherwise(put_op("f3", "x")),
    )
    .await;
    assert!(result.succeeded);
    revs.next(previous, result.revision, "missing: success branch writes");
    let previous = result.revision;
    let result = txn(
        &*store,
        Txn::new()
            .when(Compare::Missing(b"here".to_vec()))
            .then(put_op("s4", "x"))
            .otherwise(put_op("f4", "x")),
    )
    .await;
    assert!(!result.succeeded);
    revs.next(previous, result.revision, "missing: failure branch writes");

    assert_eq!(
        keys(&all_kvs(&*store).await),
        ["f2", "f4", "here", "s1", "s3"]
    );

    // Exists sees a key written earlier; Missing sees it deleted.
    delete(&*store, "here").await;
    let result = txn(
        &*store,
        Txn::new()
            .when(Compare::Missing(b"here".to_vec()))
            .then(put_op("s5", "x")),
    )
    .await;
    assert!(result.succeeded);
}

/// `ModRevision` succeeds only against the key's current mod revision, and 0 means missing.
pub async fn txn_mod_revision_compare_is_compare_and_swap(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let cas = |expected: u64, value: &str| {
        Txn::new()
            .when(Compare::ModRevision(b"k".to_vec(), expected))
            .then(Op::Put {
                key: b"k".to_vec(),
                value: value.into(),
            })
            .otherwise(Op::Put {
                key: b"lost".to_vec(),
                value: value.into(),
            })
    };
    let revs = revs(make);
    let start = revision(&*store).await;
    // 0 matches a missing key: create-if-absent.
    let first = txn(&*store, cas(0, "v1")).await;
    assert!(first.succeeded, "create-if-absent");
    revs.next(start, first.revision, "create-if-absent");
    // 0 no longer matches once it exists.
    let again = txn(&*store, cas(0, "v-stale")).await;
    assert!(!again.succeeded, "0 against an existing key");
    revs.next(first.revision, again.revision, "the failure branch writes");
    // The current mod revision matches.
    let second = txn(&*store, cas(first.revision, "v2")).await;
    assert!(second.succeeded, "the current mod revision");
    revs.next(again.revision, second.revision, "swap");
    // A stale one does not.
    let stale = txn(&*store, cas(first.revision, "v-stale2")).await;
    assert!(!stale.succeeded, "a stale mod revision");
    revs.next(second.revision, stale.revision, "the failure branch writes");
    // A future one does not either.
    let future = txn(&*store, cas(stale.revision + 1_000_000, "v-future")).await;
    assert!(!future.succeeded);
    let kv = store.get(b"k").await.expect("get").expect("k exists");
    assert_eq!(kv.value, b"v2");
    assert_eq!(kv.mod_revision, second.revision);
    assert_eq!(
        store
            .get(b"lost")
            .await
            .expect("get")
            .expect("lost exists")
            .value,
        b"v-future"
    );

    // A non-zero revision never matches a missing key; after deletion 0 matches again.
    let missing = txn(
        &*store,
        Txn::new()
            .when(Compare::ModRevision(b"never".to_vec(), second.revision))
            .then(Op::Put {
                key: b"never".to_vec(),
                value: b"x".to_vec(),
            }),
    )
    .await;
    assert!(!missing.succeeded);
    assert_eq!(store.get(b"never").await.expect("get"), None);
    delete(&*store, "k").await;
    let recreate = txn(&*store, cas(0, "v3")).await;
    assert!(recreate.succeeded);
}

/// Several compares: the success branch runs only when all of them hold.
pub async fn txn_requires_every_compare_to_hold(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let rev_a = put(&*store, "a", "1").await;
    let both = |second: Compare| {
        Txn::new()
            .when(Compare::Exists(b"a".to_vec()))
            .when(second)
            .then(Op::Put {
                key: b"ok".to_vec(),
                value: b"1".to_vec(),
            })
    };
    assert!(
        txn(&*store, both(Compare::Missing(b"b".to_vec())))
            .await
            .succeeded
    );
    assert!(
        !txn(&*store, both(Compare::Exists(b"b".to_vec())))
            .await
            .succeeded
    );
    assert!(
        !txn(
            &*store,
            both(Compare::ModRevision(b"a".to_vec(), rev_a + 1))
        )
        .await
        .succeeded
    );
    assert!(
        txn(&*store, both(Compare::ModRevision(b"a".to_vec(), rev_a)))
            .await
            .succeeded
    );
    // No compares at all: always the success branch.
    assert!(
        txn(
            &*store,
            Txn::new().then(Op::Put {
                key: b"z".to_vec(),
                value: vec![]
            })
        )
        .await
        .succeeded
    );
}

/// Concurrent create-if-missing has exactly one winner, and compare-and-swap increments from
/// many tasks lose no update: compares see every transaction committed before them.
pub async fn concurrent_compare_and_swap_admits_exactly_one_winner(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let mut tasks = Vec::new();
    for task in 0..16u32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let lock = Txn::new()
                .when(Compare::Missing(b"lock".to_vec()))
                .then(Op::Put {
                    key: b"lock".to_vec(),
                    value: task.to_string().into_bytes(),
                });
            (task, store.txn(lock).await.expect("lock txn").succeeded)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (id, succeeded) = task.await.expect("lock task");
        if succeeded {
            winners.push(id);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let holder = store.get(b"lock").await.expect("get").expect("lock held");
    assert_eq!(holder.value, winners[0].to_string().into_bytes());
    revs(make).exact(revision(&*store).await, 1, "losers write nothing");
    assert_unwritten_since(&*store, holder.mod_revision, "losers write nothing").await;

    const TASKS: usize = 8;
    const INCREMENTS: usize = 25;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS {
                let current = store.get(b"counter").await.expect("get counter");
                let (value, mod_revision) = match &current {
                    Some(kv) => (parse(&kv.value), kv.mod_revision),
                    None => (0, 0),
                };
                let increment = Txn::new()
                    .when(Compare::ModRevision(b"counter".to_vec(), mod_revision))
                    .then(Op::Put {
                        key: b"counter".to_vec(),
                        value: (value + 1).to_string().into_bytes(),
                    });
                if store.txn(increment).await.expect("increment").succeeded {
                    done += 1;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("increment task");
    }
    let counter = store.get(b"counter").await.expect("get").expect("counter");
    assert_eq!(
        parse(&counter.value),
        (TASKS * INCREMENTS) as u64,
        "no lost update"
    );
    assert_eq!(counter.version, (TASKS * INCREMENTS) as u64);
    revs(make).exact(
        revision(&*store).await,
        1 + (TASKS * INCREMENTS) as u64,
        "failed CAS writes nothing",
    );
    assert_unwritten_since(&*store, counter.mod_revision, "failed CAS writes nothing").await;
}

fn parse(value: &[u8]) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.parse().ok())
        .expect("a decimal counter")
}

/// Revision 0 when empty; +1 per transaction that writes; unchanged by failed or no-op ones,
/// which report the revision they read at. (Without dense revisions: any start, strictly
/// increasing per writing transaction, and no-op transactions write nothing.)
pub async fn revisions_start_at_zero_and_grow_by_one_per_writing_txn(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let revs = revs(make);
    let put_op = |key: &str| Op::Put {
        key: key.into(),
        value: b"v".to_vec(),
    };
    let r0 = revision(&*store).await;
    revs.exact(r0, 0, "an empty store is at revision 0");
    let scanned = store
        .scan(KeyRange::all(), None)
        .await
        .expect("scan")
        .revision;
    revs.read(r0, scanned, "a scan of the empty store");

    let first = txn(&*store, Txn::put("a", "1")).await;
    assert!(first.succeeded);
    revs.next(r0, first.revision, "the first write");
    let r1 = first.revision;
    revs.read(
        r1,
        revision(&*store).await,
        "revision after the first write",
    );
    // Where a store knows its revision without I/O, it is the one `revision` answers.
    if let Some(known) = store.known_revision() {
        assert_eq!(
            known,
            revision(&*store).await,
            "known_revision after a write"
        );
    }

    // Failed compares with no failure ops: nothing written.
    let failed = txn(
        &*store,
        Txn::new()
            .when(Compare::Exists(b"nope".to_vec()))
            .then(put_op("x")),
    )
    .await;
    assert!(!failed.succeeded);
    revs.read(
        r1,
        failed.revision,
        "a failed transaction without failure ops",
    );
    // Deleting a missing key, deleting an empty range, an empty transaction: nothing written.
    let no_ops = [
        Txn::delete("nope"),
        Txn::new().then(Op::DeleteRange(KeyRange::prefix("none/"))),
        Txn::new().then(Op::DeleteRange(KeyRange::between("b", "a"))),
        Txn::new(),
    ];
    for no_op in no_ops {
        let result = txn(&*store, no_op.clone()).await;
        assert!(result.succeeded, "{no_op:?}");
        revs.read(r1, result.revision, &format!("{no_op:?} writes nothing"));
    }
    revs.read(
        r1,
        revision(&*store).await,
        "after transactions that wrote nothing",
    );
    assert_unwritten_since(&*store, r1, "transactions that wrote nothing").await;
    assert_eq!(store.get(b"x").await.expect("get"), None);

    // Many ops in one transaction: one revision, shared by every key it wrote.
    let many = txn(
        &*store,
        Txn::new()
            .when(Compare::Missing(b"nope".to_vec()))
            .then(put_op("b"))
            .then(put_op("c"))
            .then(Op::Delete { key: b"a".to_vec() }),
    )
    .await;
    assert!(many.succeeded);
    revs.next(r1, many.revision, "a transaction of many ops");
    let r2 = many.revision;
    for key in [b"b", b"c"] {
        assert_eq!(
            store
                .get(key)
                .await
                .expect("get")
                .expect("written")
                .mod_revision,
            r2
        );
    }
    // A failure branch that writes moves the revision too.
    let otherwise = txn(
        &*store,
        Txn::new()
            .when(Compare::Exists(b"nope".to_vec()))
            .then(put_op("q"))
            .otherwise(put_op("f")),
    )
    .await;
    assert!(!otherwise.succeeded);
    revs.next(r2, otherwise.revision, "a failure branch that writes");
    let r3 = otherwise.revision;
    assert_eq!(
        store.get(b"f").await.expect("get").expect("f").mod_revision,
        r3
    );
    assert_eq!(store.get(b"q").await.expect("get"), None);
    revs.read(r3, revision(&*store).await, "the final revision");
}

/// `create_revision` stays, `mod_revision` follows each write, `version` counts writes.
pub async fn key_metadata_tracks_create_and_mod_revision_and_version(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let r1 = put(&*store, "a", "v1").await;
    let kv = store.get(b"a").await.expect("get").expect("a");
    assert_eq!(
        (kv.key.as_slice(), kv.value.as_slice()),
        (b"a".as_slice(), b"v1".as_slice())
    );
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r1, 1)
    );

    let other = put(&*store, "b", "x").await;
    let r3 = put(&*store, "a", "v2").await;
    let r4 = put(&*store, "a", "").await;
    let kv = store.get(b"a").await.expect("get").expect("a");
    assert_eq!(kv.value, b"", "an empty value is a value");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r4, 3)
    );
    assert!(r3 < r4);

    let b = store.get(b"b").await.expect("get").expect("b");
    assert_eq!(
        (b.create_revision, b.mod_revision, b.version),
        (other, other, 1),
        "other keys unaffected"
    );

    // A scan reports the same metadata as a get.
    let scanned = store.scan(KeyRange::all(), None).await.expect("scan").kvs;
    assert_eq!(scanned, vec![kv, b]);
}

/// Deleting a key and putting it again starts it over: new `create_revision`, version 1. (In
/// one transaction, without [`crate::Semantics::recreate_within_txn`], the key continues.)
pub async fn delete_then_recreate_resets_create_revision_and_version(make: &dyn MakeStore) {
    let store = fresh(make).await;
    put(&*store, "a", "1").await;
    let second = put(&*store, "a", "2").await;
    let deleted_at = delete(&*store, "a").await;
    revs(make).next(second, deleted_at, "a delete writes");
    assert_eq!(store.get(b"a").await.expect("get"), None);
    let recreated = put(&*store, "a", "3").await;
    let kv = store.get(b"a").await.expect("get").expect("a");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (recreated, recreated, 1)
    );
    assert_eq!(kv.value, b"3");

    // Also within one transaction: delete and put again at the same revision.
    let result = txn(
        &*store,
        Txn::new()
            .then(Op::Delete { key: b"a".to_vec() })
            .then(Op::Put {
                key: b"a".to_vec(),
                value: b"4".to_vec(),
            }),
    )
    .await;
    let kv = store.get(b"a").await.expect("get").expect("a");
    assert_eq!(kv.value, b"4");
    if make.semantics().recreate_within_txn {
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version),
            (result.revision, result.revision, 1)
        );
    } else {
        assert_eq!(
            (kv.create_revision, kv.mod_revision, kv.version),
            (recreated, result.revision, 2),
            "only the final put applies: the key continues"
        );
    }
}

/// `DeleteRange` deletes every key in its range, and only those, at one revision.
pub async fn delete_range_removes_only_keys_in_range(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let revs = revs(make);
    let mut last = 0;
    for key in ["a", "b", "b/1", "b/2", "b/3", "b0", "c"] {
        last = put(&*store, key, "v").await;
    }
    let result = txn(
        &*store,
        Txn::new().then(Op::DeleteRange(KeyRange::prefix("b/"))),
    )
    .await;
    assert!(result.succeeded);
    revs.next(last, result.revision, "a range delete writes");
    let last = result.revision;
    assert_eq!(keys(&all_kvs(&*store).await), ["a", "b", "b0", "c"]);

    let result = txn(
        &*store,
        Txn::new().then(Op::DeleteRange(KeyRange::between("a\0", "b0"))),
    )
    .await;
    revs.next(last, result.revision, "a range delete writes");
    let last = result.revision;
    assert_eq!(keys(&all_kvs(&*store).await), ["a", "b0", "c"]);

    // Nothing in range: nothing written.
    let result = txn(
        &*store,
        Txn::new().then(Op::DeleteRange(KeyRange::prefix("zz"))),
    )
    .await;
    revs.read(
        last,
        result.revision,
        "an empty range delete writes nothing",
    );
    assert_unwritten_since(&*store, last, "an empty range delete").await;

    let result = txn(&*store, Txn::new().then(Op::DeleteRange(KeyRange::all()))).await;
    revs.next(last, result.revision, "deleting everything writes");
    assert!(all_kvs(&*store).await.is_empty());
    assert_eq!(
        contents(&store.scan(KeyRange::all(), None).await.expect("scan").kvs),
        vec![]
    );
}

/// `range_revision` is the revision of the last put or delete in the range: writes elsewhere do
/// not move it, deletes do, and it never goes backwards.
pub async fn range_revision_moves_only_for_changes_in_range(make: &dyn MakeStore) {
    let store = fresh(make).await;
    let rr = |range: KeyRange| {
        let store = store.clone();
        async move { store.range_revision(range).await.expect("range_revision") }
    };
    let x = || KeyRange::prefix("x/");
    let y = || KeyRange::prefix("y/");
    assert_eq!(rr(KeyRange::all()).await, 0, "empty store");

    let r1 = put(&*store, "x/a", "1").await;
    assert_eq!(rr(x()).await, r1);
    assert_eq!(rr(y()).await, 0, "a put elsewhere does not move it");

    let r2 = put(&*store, "y/a", "1").await;
    assert_eq!(rr(x()).await, r1);
    assert_eq!(rr(y()).await, r2);
    assert_eq!(rr(KeyRange::all()).await, r2);

    let r3 = put(&*store, "x/b", "1").await;
    assert_eq!(rr(x()).await, r3);
    let r4 = delete(&*store, "x/b").await;
    assert_eq!(
        rr(x()).await,
        r4,
        "a delete moves it although the newest remaining key is older"
    );
    revs(make).read(
        r4,
        delete(&*store, "x/zz").await,
        "deleting a missing key writes nothing",
    );
    assert_eq!(rr(x()).await, r4);

    let r5 = delete(&*store, "x/a").await;
    assert_eq!(
        rr(x()).await,
        r5,
        "a range emptied by deletes remembers them"
    );
    assert_eq!(rr(KeyRange::key("x/a")).await, r5);
    assert_eq!(rr(KeyRange::key("x/b")).await, r4);
    assert_eq!(rr(KeyRange::key("x/never")).await, 0);
    assert_eq!(rr(y()).await, r2);

    let r6 = put(&*store, "x/a", "2").await;
    assert_eq!(rr(KeyRange::key("x/a")).await, r6);
    assert_eq!(rr(KeyRange::key("x/b")).await, r4);
    let r7 = txn(&*store, Txn::new().then(Op::DeleteRange(x())))
        .await
        .revision;
    assert_eq!(rr(x()).await, r7);
    assert_eq!(rr(y()).await, r2);
}
