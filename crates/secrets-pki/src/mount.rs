//! A pki mount's shared state, as every path family's handler sees it: the typed store, the
//! clock, the lock that serialises changes to issuers, keys and CRLs, and the cache of parsed
//! issuers ready to sign (`signing.rs`).
//!
//! Where it sits: owned by the engine (`engine.rs`), which hands a `&Mount` to each family's
//! handler; handlers never see the engine.
//!
//! Invariants: every change to an issuer, a key, the issuer/key configuration or a CRL holds
//! [`Mount::issuers_lock`]; every time comes from the store's clock.

use std::sync::Arc;

use secrets_sdk::{EngineStorage, SharedClock};
use tokio::sync::Mutex;

use crate::signing::SignerCache;
use crate::store::Store;
use crate::tidy_status::TidyStatus;

/// What the handlers of one mount share.
#[derive(Debug)]
pub(crate) struct Mount {
    pub(crate) store: Store,
    pub(crate) clock: SharedClock,
    pub(crate) issuers_lock: Mutex<()>,
    pub(crate) signers: SignerCache,
    pub(crate) tidy: std::sync::Mutex<TidyStatus>,
}

impl Mount {
    pub(crate) fn new(storage: Arc<dyn EngineStorage>, clock: SharedClock) -> Mount {
        Mount {
            store: Store::new(storage),
            clock,
            issuers_lock: Mutex::new(()),
            signers: SignerCache::default(),
            tidy: std::sync::Mutex::new(TidyStatus::default()),
        }
    }

    /// Now, in Unix seconds.
    pub(crate) fn now(&self) -> i64 {
        self.clock.now_nanos().div_euclid(1_000_000_000)
    }
}
