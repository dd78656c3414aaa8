//! Conformance checks for closing a store: every later call fails with `Error::Closed`, and
//! open watch streams end instead of hanging.
//!
//! Invariant: a stream counts as ended when it yields `None` or `Err(Closed)`; events that were
//! committed before the close may still be delivered first.

use storage::{Error, KeyRange, Snapshot, Txn, WatchStream};
use tokio::time::timeout;

use crate::support::{WAIT, next_event, put, watch};
use crate::{MakeStore, StoreConfig};

fn assert_closed<T: std::fmt::Debug>(result: storage::Result<T>, call: &str) {
    match result {
        Err(Error::Closed) => {}
        other => panic!("{call} after close: expected Err(Closed), got {other:?}"),
    }
}

/// Drains `stream` until it ends; panics if it yields another error or does not end in time.
async fn assert_ends(stream: &mut WatchStream, what: &str) {
    loop {
        match timeout(WAIT, stream.next_event()).await {
            Ok(None) | Ok(Some(Err(Error::Closed))) => return,
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(err))) => panic!("{what}: ended with {err} instead of closing"),
            Err(_) => panic!("{what}: still open {WAIT:?} after close"),
        }
    }
}

/// After `close`, every operation fails with `Error::Closed`; closing again is harmless.
pub async fn close_fails_later_calls_with_closed(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    put(&*store, "a", "1").await;
    let snapshot = store.snapshot().await.expect("snapshot");
    store.close().await.expect("close");

    assert_closed(store.get(b"a").await, "get");
    assert_closed(store.scan(KeyRange::all(), None).await, "scan");
    assert_closed(store.txn(Txn::put("b", "2")).await, "txn");
    assert_closed(store.txn(Txn::new()).await, "empty txn");
    assert_closed(store.revision().await, "revision");
    assert_eq!(
        store.known_revision(),
        None,
        "a closed store knows no revision"
    );
    assert_closed(
        store.range_revision(KeyRange::all()).await,
        "range_revision",
    );
    assert_closed(store.watch(KeyRange::all(), 0).await, "watch");
    assert_closed(store.snapshot().await, "snapshot");
    assert_closed(store.restore(&snapshot).await, "restore");
    assert_closed(
        store.restore(&Snapshot::default()).await,
        "restore of an empty snapshot",
    );
    match store.close().await {
        Ok(()) | Err(Error::Closed) => {}
        Err(err) => panic!("second close: {err}"),
    }
}

/// Watch streams open at close time end: one waiting for live events, one mid-replay, and one
/// never polled.
pub async fn close_ends_watch_streams(make: &dyn MakeStore) {
    let store = make.make(StoreConfig::default()).await;
    put(&*store, "a", "1").await;
    put(&*store, "b", "2").await;

    let mut live = watch(&*store, KeyRange::all(), 2).await;
    let waiting = tokio::spawn(async move {
        assert_ends(&mut live, "watch waiting for live events").await;
    });
    let mut replaying = watch(&*store, KeyRange::all(), 0).await;
    next_event(&mut replaying, "first replayed event").await;
    let mut unpolled = watch(&*store, KeyRange::prefix("a"), 0).await;
    // Let the waiting watcher reach its wait.
    tokio::task::yield_now().await;

    store.close().await.expect("close");
    timeout(WAIT, waiting)
        .await
        .expect("waiting watcher ended")
        .expect("waiting watcher task");
    assert_ends(&mut replaying, "watch in the middle of its replay").await;
    assert_ends(&mut unpolled, "watch never polled").await;
}
