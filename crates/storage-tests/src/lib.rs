//! The conformance suite every cairn storage backend runs.
//!
//! Where it sits: a test-only library beside `storage`. Each backend's `tests/conformance.rs`
//! runs it, either as one test per check with [`conformance_tests!`] (so a failure names the
//! behaviour) or all at once with [`run_all`].
//!
//! A backend supplies a [`MakeStore`]: any `Fn(StoreConfig) -> impl Future<Output =
//! Arc<dyn Storage>>` that creates a fresh, empty store honouring the [`StoreConfig`] (today
//! only the history retention, so the compaction checks can use a small one instead of writing
//! [`storage::DEFAULT_HISTORY_RETENTION`] revisions). Every check is its own `pub async fn`
//! named after the behaviour it pins down, creates the stores it needs, and panics with a
//! message naming what went wrong.
//!
//! Invariants: checks never sleep longer than a few milliseconds at a time, bound every wait on
//! a watch with a timeout, and only ever talk to the store through the `Storage` trait.

mod kv;
mod lifecycle;
mod snapshots;
mod support;
mod watching;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use storage::{
    KeyRange, KeyValue, Result, Revision, ScanResult, Snapshot, Storage, Txn, TxnResult,
    WatchStream,
};

pub use kv::*;
pub use lifecycle::*;
pub use snapshots::*;
pub use watching::*;

/// The history retention the compaction checks ask for: small enough to pass quickly.
pub const SMALL_RETENTION: u64 = 32;

/// How a check wants its fresh store configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// How many revisions of history the store keeps for watches; older ones are compacted.
    pub history_retention: u64,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            history_retention: storage::DEFAULT_HISTORY_RETENTION,
        }
    }
}

impl StoreConfig {
    /// The default configuration with another history retention.
    pub fn with_history_retention(history_retention: u64) -> StoreConfig {
        StoreConfig { history_retention }
    }
}

/// What a backend guarantees where the trait lets backends differ (see `storage`'s invariants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Semantics {
    /// Revisions start at 0 for an empty store and grow by exactly one per writing
    /// transaction. Without it (a store sharing a cluster-wide revision, as on etcd) the checks
    /// ask only for strictly increasing revisions, and check "nothing was written" through
    /// `range_revision` over the store's keys instead of the revision.
    pub dense_revisions: bool,
    /// A transaction that deletes a key and puts it again re-creates it (new `create_revision`,
    /// version 1, a delete event then a put event). Without it (etcd: one change per key per
    /// revision) only the final put is applied, continuing the key.
    pub recreate_within_txn: bool,
}

impl Semantics {
    /// The embedded backends (`MemStorage`, redb): everything exact.
    pub const EXACT: Semantics = Semantics {
        dense_revisions: true,
        recreate_within_txn: true,
    };
    /// A store in a shared etcd cluster.
    pub const ETCD: Semantics = Semantics {
        dense_revisions: false,
        recreate_within_txn: false,
    };
}

/// Creates a fresh, empty store for one check. Implemented for every suitable closure (whose
/// stores are [`Semantics::EXACT`]); [`with_semantics`] names other semantics.
pub trait MakeStore: Send + Sync {
    fn make(&self, config: StoreConfig) -> BoxFuture<'static, Arc<dyn Storage>>;

    /// What the stores made here guarantee.
    fn semantics(&self) -> Semantics {
        Semantics::EXACT
    }
}

/// A [`MakeStore`] whose stores have the given [`Semantics`].
#[derive(Debug)]
pub struct WithSemantics<F> {
    semantics: Semantics,
    make: F,
}

/// Wraps `make` (a closure as for [`conformance_tests!`]) with the semantics of its stores.
pub fn with_semantics<F>(semantics: Semantics, make: F) -> WithSemantics<F> {
    WithSemantics { semantics, make }
}

impl<F, Fut> MakeStore for WithSemantics<F>
where
    F: Fn(StoreConfig) -> Fut + Send + Sync,
    Fut: Future<Output = Arc<dyn Storage>> + Send + 'static,
{
    fn make(&self, config: StoreConfig) -> BoxFuture<'static, Arc<dyn Storage>> {
        Box::pin((self.make)(config))
    }

    fn semantics(&self) -> Semantics {
        self.semantics
    }
}

impl<F, Fut> MakeStore for F
where
    F: Fn(StoreConfig) -> Fut + Send + Sync,
    Fut: Future<Output = Arc<dyn Storage>> + Send + 'static,
{
    fn make(&self, config: StoreConfig) -> BoxFuture<'static, Arc<dyn Storage>> {
        Box::pin(self(config))
    }
}

/// Runs `future` to completion on a fresh multi-threaded runtime, as each generated test does.
pub fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("building a tokio runtime")
        .block_on(future)
}

/// Defines [`run_all`], [`CHECKS`] and [`conformance_tests!`] from one list of checks, so the
/// three can never disagree. `$d` is a `$` token, for the nested macro's own variables.
macro_rules! define_checks {
    ($d:tt; $($check:ident),* $(,)?) => {
        /// The name of every check, in the order [`run_all`] runs them.
        pub const CHECKS: &[&str] = &[$(stringify!($check)),*];

        /// Runs every check in turn against stores from `make`; panics naming the first check
        /// that fails.
        pub async fn run_all<F, Fut>(make: F)
        where
            F: Fn(StoreConfig) -> Fut + Send + Sync,
            Fut: Future<Output = Arc<dyn Storage>> + Send + 'static,
        {
            let make: &dyn MakeStore = &make;
            $(
                // Names the running check on stderr, so a panic is preceded by the behaviour.
                eprintln!("storage conformance: {} ...", stringify!($check));
                $check(make).await;
                eprintln!("storage conformance: {} ok", stringify!($check));
            )*
        }

        /// Generates one `#[test]` per conformance check, named after the check, each on its
        /// own runtime and with its own stores from `$make` (an expression usable as a
        /// [`MakeStore`], typically a closure).
        #[macro_export]
        macro_rules! conformance_tests {
            ($d make:expr) => {
                $(
                    #[test]
                    fn $check() {
                        let make = $d make;
                        $d crate::block_on($d crate::$check(&make));
                    }
                )*
            };
        }
    };
}

define_checks!($;
    // keys, scans and transactions
    get_of_missing_key_returns_none,
    get_many_answers_each_key_as_get_does_in_order,
    scan_by_prefix_returns_only_prefixed_keys_in_order,
    scan_by_range_is_half_open,
    scan_limit_cuts_off_and_reports_more,
    txn_exists_and_missing_compares_choose_the_branch,
    txn_mod_revision_compare_is_compare_and_swap,
    txn_requires_every_compare_to_hold,
    concurrent_compare_and_swap_admits_exactly_one_winner,
    revisions_start_at_zero_and_grow_by_one_per_writing_txn,
    key_metadata_tracks_create_and_mod_revision_and_version,
    delete_then_recreate_resets_create_revision_and_version,
    delete_range_removes_only_keys_in_range,
    range_revision_moves_only_for_changes_in_range,
    // watches
    watch_from_past_revision_replays_then_follows,
    watch_from_current_revision_sees_only_new_events,
    watch_filters_events_by_range,
    watch_delivers_txn_events_in_op_order_at_one_revision,
    concurrent_writers_and_watchers_miss_and_duplicate_nothing,
    slow_watcher_behind_hub_buffer_gets_every_event_once,
    watch_from_compacted_revision_fails_with_compacted,
    range_revision_never_goes_backwards_across_compaction,
    // snapshots
    snapshot_is_consistent_while_writers_run,
    restore_makes_contents_equal_snapshot_as_one_new_revision,
    restore_of_empty_snapshot_deletes_everything,
    restore_rejects_unordered_snapshot,
    snapshot_bytes_round_trip_into_a_fresh_store,
    // lifecycle
    close_fails_later_calls_with_closed,
    close_ends_watch_streams,
);

/// A store that keeps `guard` alive as long as itself: for backends whose fresh store needs a
/// resource that must outlive it (a temporary directory). Delegates every call to `store`.
pub struct Guarded<S, G> {
    // Dropped before `guard`, in declaration order.
    store: S,
    guard: G,
}

impl<S, G> Guarded<S, G> {
    pub fn new(store: S, guard: G) -> Guarded<S, G> {
        Guarded { store, guard }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn guard(&self) -> &G {
        &self.guard
    }
}

impl<S: fmt::Debug, G> fmt::Debug for Guarded<S, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<S: Storage, G: Send + Sync + 'static> Storage for Guarded<S, G> {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.store.get(key).await
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> Result<ScanResult> {
        self.store.scan(range, limit).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult> {
        self.store.txn(txn).await
    }

    async fn revision(&self) -> Result<Revision> {
        self.store.revision().await
    }

    fn known_revision(&self) -> Option<Revision> {
        self.store.known_revision()
    }

    async fn range_revision(&self, range: KeyRange) -> Result<Revision> {
        self.store.range_revision(range).await
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> Result<WatchStream> {
        self.store.watch(range, after).await
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        self.store.snapshot().await
    }

    async fn restore(&self, snapshot: &Snapshot) -> Result<Revision> {
        self.store.restore(snapshot).await
    }

    async fn close(&self) -> Result<()> {
        self.store.close().await
    }
}
