//! Runs the `storage-tests` conformance suite against [`MemStorage`]: one test per check,
//! each on a fresh store honouring the suite's history retention, plus one run of `run_all`.
//!
//! Where it sits: the `storage` crate's integration tests (`storage-tests` is its
//! dev-dependency); the durable backends run the same suite in their own `tests/`.
//!
//! Invariant: nothing here but the wiring; every behaviour lives in the suite, so the
//! in-memory store is held to exactly what the durable backends are.

use std::sync::Arc;

use storage::{MemStorage, Storage};
use storage_tests::StoreConfig;

storage_tests::conformance_tests!(|config: StoreConfig| async move {
    Arc::new(MemStorage::with_retention(config.history_retention)) as Arc<dyn Storage>
});

/// `run_all` runs the same checks in one go, as a backend without per-test wiring would.
#[test]
fn run_all_passes_on_mem_storage() {
    storage_tests::block_on(storage_tests::run_all(|config: StoreConfig| async move {
        Arc::new(MemStorage::with_retention(config.history_retention)) as Arc<dyn Storage>
    }));
}
