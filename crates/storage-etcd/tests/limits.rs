//! The transaction limits [`EtcdStorage`] reports ([`Storage::txn_limits`]) against a real
//! etcd running etcd's default `--max-txn-ops` (128) and `--max-request-bytes` (1.5 MiB): the
//! shared etcd of `scripts/services` on 127.0.0.1:2379, under a fresh prefix.
//!
//! What holds: a transaction that [`storage::TxnLimits::fits`] accepts is accepted by etcd,
//! at the edge of both limits and with the worst case of nested deletes; one just past etcd's
//! limits fails with an error naming the flag. So a caller splitting its writes by the reported
//! limits (the scheduler's state writer) never sends etcd a transaction it refuses.
//!
//! Invariant: every test uses its own prefix, removed when the store drops.

mod support;

use std::sync::Arc;

use storage::{Op, Storage, StorageExt, Txn, TxnLimits};
use storage_etcd::{DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS, EtcdConfig, EtcdStorage};
use storage_tests::Guarded;

use support::{PrefixGuard, shared_endpoints, unique_prefix};

async fn store() -> (Arc<dyn Storage>, TxnLimits) {
    let endpoints = shared_endpoints();
    let prefix = unique_prefix();
    let mut config = EtcdConfig::new(endpoints.clone(), prefix.clone());
    config.history_retention = None;
    assert_eq!(config.max_txn_ops, DEFAULT_MAX_TXN_OPS);
    assert_eq!(config.max_request_bytes, DEFAULT_MAX_REQUEST_BYTES);
    let store = EtcdStorage::open(&config)
        .await
        .expect("open the etcd store");
    let limits = store.txn_limits();
    assert_eq!(limits, config.txn_limits());
    (
        Arc::new(Guarded::new(store, PrefixGuard { endpoints, prefix })),
        limits,
    )
}

fn put(key: String, value: Vec<u8>) -> Op {
    Op::Put {
        key: key.into_bytes(),
        value,
    }
}

#[tokio::test]
async fn the_most_operations_the_limits_allow_commit_even_when_every_one_is_a_nested_delete() {
    let (store, limits) = store().await;
    assert_eq!(limits.max_ops, DEFAULT_MAX_TXN_OPS - 2);
    // Keys to delete, written in transactions the limits allow.
    let keys: Vec<String> = (0..limits.max_ops)
        .map(|i| format!("scheduler/allocs/{i:020}/{}", uuid::Uuid::new_v4()))
        .collect();
    let mut fill = Txn::new();
    for key in &keys {
        fill = fill.then(put(key.clone(), b"x".to_vec()));
    }
    assert!(limits.fits(&fill));
    assert!(store.txn(fill).await.expect("max_ops puts").succeeded);
    // Every one a delete (a nested etcd transaction), with a compare as the scheduler's fence.
    let mut deletes = Txn::new().when(storage::Compare::Exists(keys[0].clone().into_bytes()));
    for key in &keys {
        deletes = deletes.then(Op::Delete {
            key: key.clone().into_bytes(),
        });
    }
    assert!(limits.fits(&deletes));
    let result = store.txn(deletes).await.expect("max_ops nested deletes");
    assert!(result.succeeded);
    assert!(store.get(keys[7].as_bytes()).await.expect("get").is_none());
    // Why two are kept: etcd gives a nested transaction only what its parent level leaves
    // (`--max-txn-ops` minus the parent's operations), and a delete nests two. One more
    // delete than the limits allow is refused.
    let mut fill = Txn::new();
    let more: Vec<String> = (0..=limits.max_ops).map(|i| format!("more/{i}")).collect();
    for key in &more[..limits.max_ops] {
        fill = fill.then(put(key.clone(), b"x".to_vec()));
    }
    store.txn(fill).await.expect("puts");
    store
        .txn(Txn::put(more[limits.max_ops].clone(), b"x".to_vec()))
        .await
        .expect("put");
    let mut deletes = Txn::new();
    for key in &more {
        deletes = deletes.then(Op::Delete {
            key: key.clone().into_bytes(),
        });
    }
    assert!(!limits.fits(&deletes));
    let err = store
        .txn(deletes)
        .await
        .expect_err("a nested delete past the budget");
    assert!(err.to_string().contains("--max-txn-ops"), "{err}");
    assert!(store.get(more[0].as_bytes()).await.expect("get").is_some());
    // Past etcd's own limit: refused, with the flag named.
    let mut over = Txn::new();
    for i in 0..=DEFAULT_MAX_TXN_OPS {
        over = over.then(put(format!("over/{i}"), Vec::new()));
    }
    assert!(!limits.fits(&over));
    let err = store.txn(over).await.expect_err("more than --max-txn-ops");
    assert!(err.to_string().contains("--max-txn-ops"), "{err}");
    assert!(
        store
            .scan_prefix(b"over/")
            .await
            .expect("scan")
            .kvs
            .is_empty()
    );
}

#[tokio::test]
async fn a_transaction_as_large_as_the_limits_allow_commits_and_one_past_etcds_limit_is_refused() {
    let (store, limits) = store().await;
    // Ten puts filling the byte budget exactly, with the fence compare.
    let fence = storage::Compare::ModRevision(b"scheduler/index".to_vec(), 0);
    let key = |i: usize| format!("scheduler/allocs/{i:020}/{}", uuid::Uuid::new_v4());
    let mut txn = Txn::new().when(fence.clone());
    for i in 0..10 {
        txn = txn.then(put(key(i), Vec::new()));
    }
    let spare = limits.max_bytes - limits.txn_bytes(&txn);
    let share = spare / 10;
    let mut txn = Txn::new().when(fence.clone());
    for i in 0..10 {
        let extra = if i == 0 { spare - share * 9 } else { share };
        txn = txn.then(put(key(i), vec![b'v'; extra]));
    }
    assert_eq!(limits.txn_bytes(&txn), limits.max_bytes);
    assert!(limits.fits(&txn));
    let result = store
        .txn(txn)
        .await
        .expect("a transaction at the byte limit");
    assert!(result.succeeded);
    // One value larger than etcd's whole request limit.
    let over = Txn::put("big", vec![b'v'; DEFAULT_MAX_REQUEST_BYTES + 1]);
    assert!(!limits.fits(&over));
    let err = store.txn(over).await.expect_err("past --max-request-bytes");
    assert!(err.to_string().contains("--max-request-bytes"), "{err}");
    // Nothing of the refused transaction was written.
    assert!(store.get(b"big").await.expect("get").is_none());
}
