//! A kv version 2 mount's shared state, as every path family's handler sees it: the mount's
//! store, the clock, and the striped per-key locks.
//!
//! Where it sits: owned by the engine (`engine.rs`), which routes each request to a family's
//! handler with a `&Mount`; the handlers never see the engine, so the families depend on this
//! leaf and the engine on them, never the other way round.
//!
//! Invariant: every read-modify-write of a key holds that key's lock (one of [`LOCK_STRIPES`]
//! striped locks, as upstream's `locksutil`); reads hold it shared.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use secrets_sdk::{EngineStorage, SharedClock};
use tokio::sync::RwLock;

use crate::v2::store::Store;

/// How many locks the keys of one mount share.
pub(super) const LOCK_STRIPES: usize = 64;

/// What the handlers of one mount share.
#[derive(Debug)]
pub(super) struct Mount {
    pub(super) store: Store,
    pub(super) clock: SharedClock,
    locks: Vec<RwLock<()>>,
}

impl Mount {
    pub(super) fn new(storage: Arc<dyn EngineStorage>, clock: SharedClock) -> Mount {
        Mount {
            store: Store::new(storage),
            clock,
            locks: (0..LOCK_STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }

    /// Now, in Unix nanoseconds.
    pub(super) fn now(&self) -> i64 {
        self.clock.now_nanos()
    }

    /// The lock guarding `key`'s metadata and versions.
    pub(super) fn lock(&self, key: &str) -> &RwLock<()> {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        let stripe = usize::try_from(hasher.finish() % LOCK_STRIPES as u64).unwrap_or(0);
        &self.locks[stripe]
    }
}
