//! Runs the `storage-tests` conformance suite against [`EtcdStorage`] under
//! [`Semantics::ETCD`]: one test per check, each on a fresh prefix of the shared etcd (so the
//! tests run side by side), except the compaction checks, which ask for a small retention and
//! get an etcd process of their own (compaction is cluster-wide).
//!
//! Invariant: nothing here but the wiring; every behaviour lives in the suite.

mod support;

use std::sync::Arc;

use storage::{DEFAULT_HISTORY_RETENTION, Storage};
use storage_etcd::{EtcdConfig, EtcdStorage};
use storage_tests::{Guarded, Semantics, StoreConfig};

use support::{PrefixGuard, PrivateEtcd, shared_endpoints, unique_prefix};

async fn make(config: StoreConfig) -> Arc<dyn Storage> {
    if config.history_retention == DEFAULT_HISTORY_RETENTION {
        let endpoints = shared_endpoints();
        let prefix = unique_prefix();
        let mut etcd = EtcdConfig::new(endpoints.clone(), prefix.clone());
        etcd.history_retention = None;
        let store = EtcdStorage::open(&etcd).await.expect("open the etcd store");
        Arc::new(Guarded::new(store, PrefixGuard { endpoints, prefix }))
    } else {
        let private = PrivateEtcd::start().await;
        let mut etcd = EtcdConfig::new(vec![private.endpoint.clone()], "cairn/");
        etcd.history_retention = Some(config.history_retention);
        let store = EtcdStorage::open(&etcd).await.expect("open the etcd store");
        Arc::new(Guarded::new(store, private))
    }
}

storage_tests::conformance_tests!(storage_tests::with_semantics(
    Semantics::ETCD,
    |config: StoreConfig| make(config)
));
