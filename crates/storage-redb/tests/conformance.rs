//! Runs the `storage-tests` conformance suite against [`RedbStorage`]: one test per check, each
//! store in its own temporary directory, removed when the store is dropped.
//!
//! Invariant: nothing here but the wiring; the suite's history retention is passed through
//! [`RedbOptions::history_retention`].

use std::sync::Arc;

use storage::Storage;
use storage_redb::{RedbOptions, RedbStorage};
use storage_tests::{Guarded, StoreConfig};

fn make(config: StoreConfig) -> Arc<dyn Storage> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = RedbOptions::default().with_history_retention(config.history_retention);
    let store =
        RedbStorage::open_with(&dir.path().join("cairn.redb"), options).expect("open redb store");
    Arc::new(Guarded::new(store, dir))
}

storage_tests::conformance_tests!(|config: StoreConfig| async move { make(config) });
