//! The resolved callers and organization accesses of recent requests, so that a token seen
//! again costs a map lookup instead of the three to six point reads (token, owner,
//! organization, membership reference, membership, teams) that `auth.rs` otherwise makes; and
//! the epoch under which `memberships.rs` keeps its rendered plain pages valid without reading
//! the store.
//!
//! Where it sits: [`crate::State`] owns one [`AuthCache`] of `auth.rs`'s `Caller` and
//! `OrgAccess` (generic here, so this file imports nothing of `auth.rs`, which consults it in
//! `Caller::resolve` and `Caller::try_organization`); every platform write goes through
//! [`Invalidating`], the state's view of the store, which moves the cache's [`Epochs`];
//! [`follow`] runs as a local loop (`lib.rs`'s `start_tasks`) and watches the store for writes
//! made elsewhere.
//!
//! How it stays right: the cache has an epoch, a number that moves whenever something a
//! resolution (or a membership page) reads may have changed. A resolution reads the epoch
//! *before* it reads the store and is stored under that epoch; an entry is used only while the
//! epoch is still the one it was stored under. So a write that lands while a resolution is
//! reading moves the epoch past the entry before it is ever used. Epoch numbers are unique in
//! the process (one counter for every cache), so an entry of one state's epoch never matches
//! another's (two states over one store in a test, say).
//!
//! Invariants:
//! - Every transaction this server commits through [`Invalidating`] that touches a key under
//!   [`AUTH_PREFIXES`] (or cannot be inspected: a restore) moves the epoch after it commits
//!   and before its caller sees the result: a request that follows a write, on this server,
//!   never sees a caller or an access from before it (a deleted token is 401 at once).
//! - Writes by other servers sharing the store (several servers over etcd), or by another
//!   service restoring a snapshot, move the epoch when [`follow`]'s watch delivers them: such
//!   a change is seen after the watch's delay (milliseconds), as a standby sees any change.
//!   While that watch is not running (before it starts, between two watches) nothing is
//!   served from the cache.
//! - A token's expiry is checked against the clock on every use, cached or not.
//! - Unknown tokens are never cached; the cache holds at most [`MAX_ENTRIES`] entries of
//!   each kind (all are dropped when full).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use storage::{
    KeyRange, KeyValue, Op, Revision, ScanResult, Snapshot, Storage, Txn, TxnLimits, TxnResult,
    WatchStream,
};
use tokio_util::sync::CancellationToken;

/// The key families a caller's resolution or an organization access reads (see
/// `store/mod.rs` for the layout).
pub(crate) const AUTH_PREFIXES: &[&str] = &[
    "platform/tokens/",
    "platform/users/",
    "platform/teams/",
    "platform/organizations/",
    "platform/memberships/",
    "platform/membership-counts/",
    "platform/user-memberships/",
];

/// The source of every cache's epoch numbers (see the module docs).
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// The most callers (and, separately, organization accesses) kept.
pub(crate) const MAX_ENTRIES: usize = 10_000;

/// How long [`follow`] waits before watching again after its watch ended.
const REWATCH_DELAY: Duration = Duration::from_millis(200);

/// Whether a write to `key` may change a resolution.
fn invalidates(key: &[u8]) -> bool {
    AUTH_PREFIXES
        .iter()
        .any(|prefix| key.starts_with(prefix.as_bytes()))
}

/// The epoch: moved by [`Invalidating`] and [`follow`], read by every cache under it.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    epoch: AtomicU64,
    /// Whether [`follow`] is watching the store (writes by others would be missed otherwise).
    watching: AtomicBool,
}

/// Resolved callers `C` and organization accesses `A` (`auth.rs`'s `Caller` and `OrgAccess`;
/// generic so that this file needs nothing from `auth.rs`), kept under [`Epochs`].
#[derive(Debug)]
pub(crate) struct AuthCache<C, A> {
    epochs: Arc<Epochs>,
    /// By token secret.
    callers: Mutex<HashMap<String, (u64, C)>>,
    /// By token id and organization name.
    accesses: Mutex<HashMap<(String, String), (u64, A)>>,
}

/// What a resolution reads before it reads the store, and stores its result under; `None`
/// (while the watch is not running) matches nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Epoch(Option<u64>);

impl Epoch {
    /// Whether something stored under `self` is still valid at `now`.
    pub(crate) fn holds_at(self, now: Epoch) -> bool {
        self.0.is_some() && self == now
    }
}

impl Epochs {
    /// The current epoch; one that matches nothing while the watch is not running.
    pub(crate) fn epoch(&self) -> Epoch {
        if self.watching.load(Ordering::Acquire) {
            Epoch(Some(self.epoch.load(Ordering::Acquire)))
        } else {
            Epoch(None)
        }
    }

    /// Whether entries are served and stored (the watch runs).
    pub(crate) fn serves(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// Forgets everything cached: something it was read from may have changed.
    pub(crate) fn invalidate(&self) {
        let next = NEXT_EPOCH.fetch_add(1, Ordering::AcqRel);
        self.epoch.fetch_max(next, Ordering::AcqRel);
    }

    fn set_watching(&self, watching: bool) {
        self.watching.store(watching, Ordering::Release);
        self.invalidate();
    }
}

impl<C: Clone, A: Clone> AuthCache<C, A> {
    pub(crate) fn new(epochs: Arc<Epochs>) -> AuthCache<C, A> {
        AuthCache {
            epochs,
            callers: Mutex::default(),
            accesses: Mutex::default(),
        }
    }

    /// The epoch everything here is kept under.
    pub(crate) fn epochs(&self) -> &Arc<Epochs> {
        &self.epochs
    }

    /// [`Epochs::epoch`].
    pub(crate) fn epoch(&self) -> Epoch {
        self.epochs.epoch()
    }

    pub(crate) fn caller(&self, secret: &str, epoch: Epoch) -> Option<C> {
        let Epoch(Some(epoch)) = epoch else {
            return None;
        };
        let callers = self.callers.lock().unwrap_or_else(PoisonError::into_inner);
        match callers.get(secret) {
            Some((at, caller)) if *at == epoch => Some(caller.clone()),
            _ => None,
        }
    }

    pub(crate) fn put_caller(&self, secret: &str, epoch: Epoch, caller: &C) {
        let Epoch(Some(epoch)) = epoch else {
            return;
        };
        let mut callers = self.callers.lock().unwrap_or_else(PoisonError::into_inner);
        if callers.len() >= MAX_ENTRIES && !callers.contains_key(secret) {
            callers.clear();
        }
        callers.insert(secret.to_owned(), (epoch, caller.clone()));
    }

    pub(crate) fn access(&self, token_id: &str, organization: &str, epoch: Epoch) -> Option<A> {
        let Epoch(Some(epoch)) = epoch else {
            return None;
        };
        let accesses = self.accesses.lock().unwrap_or_else(PoisonError::into_inner);
        // A borrowed lookup of a tuple key needs an owned tuple; the names are short.
        match accesses.get(&(token_id.to_owned(), organization.to_owned())) {
            Some((at, access)) if *at == epoch => Some(access.clone()),
            _ => None,
        }
    }

    pub(crate) fn put_access(&self, token_id: &str, organization: &str, epoch: Epoch, access: &A) {
        let Epoch(Some(epoch)) = epoch else {
            return;
        };
        let mut accesses = self.accesses.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (token_id.to_owned(), organization.to_owned());
        if accesses.len() >= MAX_ENTRIES && !accesses.contains_key(&key) {
            accesses.clear();
        }
        accesses.insert(key, (epoch, access.clone()));
    }
}

/// The platform's view of the store: every call passes through; a transaction that touches
/// [`AUTH_PREFIXES`], and any restore, invalidates the cache once it returns.
#[derive(Debug)]
pub(crate) struct Invalidating {
    inner: Arc<dyn Storage>,
    epochs: Arc<Epochs>,
}

impl Invalidating {
    pub(crate) fn new(inner: Arc<dyn Storage>, epochs: Arc<Epochs>) -> Invalidating {
        Invalidating { inner, epochs }
    }
}

fn touches_auth(ops: &[Op]) -> bool {
    ops.iter().any(|op| match op {
        Op::Put { key, .. } | Op::Delete { key } => invalidates(key),
        Op::DeleteRange(range) => AUTH_PREFIXES
            .iter()
            .any(|prefix| overlaps(range, &KeyRange::prefix(prefix))),
    })
}

fn overlaps(a: &KeyRange, b: &KeyRange) -> bool {
    let before = |end: &[u8], start: &[u8]| !end.is_empty() && end <= start;
    !a.is_empty() && !b.is_empty() && !before(&a.end, &b.start) && !before(&b.end, &a.start)
}

#[async_trait]
impl Storage for Invalidating {
    async fn get(&self, key: &[u8]) -> storage::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> storage::Result<ScanResult> {
        self.inner.scan(range, limit).await
    }

    async fn txn(&self, txn: Txn) -> storage::Result<TxnResult> {
        let touches = touches_auth(&txn.success) || touches_auth(&txn.failure);
        let result = self.inner.txn(txn).await;
        // Also after an error: a backend may fail after committing (a lost answer).
        if touches {
            self.epochs.invalidate();
        }
        result
    }

    async fn revision(&self) -> storage::Result<Revision> {
        self.inner.revision().await
    }

    fn known_revision(&self) -> Option<Revision> {
        self.inner.known_revision()
    }

    async fn range_revision(&self, range: KeyRange) -> storage::Result<Revision> {
        self.inner.range_revision(range).await
    }

    async fn watch(&self, range: KeyRange, after: Revision) -> storage::Result<WatchStream> {
        self.inner.watch(range, after).await
    }

    async fn snapshot(&self) -> storage::Result<Snapshot> {
        self.inner.snapshot().await
    }

    async fn restore(&self, snapshot: &Snapshot) -> storage::Result<Revision> {
        let result = self.inner.restore(snapshot).await;
        self.epochs.invalidate();
        result
    }

    async fn close(&self) -> storage::Result<()> {
        self.inner.close().await
    }

    fn txn_limits(&self) -> TxnLimits {
        self.inner.txn_limits()
    }
}

/// Watches the store for writes under [`AUTH_PREFIXES`] made by anyone (other servers, a
/// restore through another service) and invalidates the cache on each, until `shutdown`.
/// The cache serves only while a watch runs.
pub(crate) async fn follow(
    storage: Arc<dyn Storage>,
    epochs: Arc<Epochs>,
    shutdown: CancellationToken,
) {
    let range = KeyRange::prefix(crate::store::PREFIX);
    loop {
        let watch = match storage.revision().await {
            Ok(revision) => storage.watch(range.clone(), revision).await,
            Err(err) => Err(err),
        };
        match watch {
            Ok(mut events) => {
                // Anything written before the watch began was already covered by the epoch
                // moving when `watching` turned on.
                epochs.set_watching(true);
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => {
                            epochs.set_watching(false);
                            return;
                        }
                        event = events.next() => match event {
                            Some(Ok(event)) => {
                                if invalidates(&event.key) {
                                    epochs.invalidate();
                                }
                            }
                            Some(Err(err)) => {
                                tracing::debug!(error = %err, "the auth cache's watch ended; watching again");
                                break;
                            }
                            None => break,
                        },
                    }
                }
                epochs.set_watching(false);
            }
            Err(err) => {
                tracing::debug!(error = %err, "the auth cache cannot watch the store; retrying");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(REWATCH_DELAY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_families_a_resolution_reads_invalidate() {
        assert!(invalidates(b"platform/tokens/abc"));
        assert!(invalidates(b"platform/users/user-1"));
        assert!(invalidates(b"platform/teams/team-1"));
        assert!(invalidates(b"platform/organizations/acme"));
        assert!(invalidates(b"platform/memberships/acme/0000000000000001"));
        assert!(invalidates(b"platform/user-memberships/user-1/acme"));
        assert!(!invalidates(b"platform/team-members/team-1/user-1"));
        assert!(!invalidates(b"platform/organization-tokens/acme"));
        assert!(!invalidates(b"platform/runs/run-1"));
        assert!(!invalidates(b"secrets/x"));
    }

    #[test]
    fn a_range_delete_over_an_auth_family_invalidates() {
        let ops = [Op::DeleteRange(KeyRange::prefix("platform/"))];
        assert!(touches_auth(&ops));
        let ops = [Op::DeleteRange(KeyRange::prefix("platform/runs/"))];
        assert!(!touches_auth(&ops));
        let ops = [Op::DeleteRange(KeyRange::between(
            "platform/team-members/",
            "platform/teams/zzz",
        ))];
        assert!(touches_auth(&ops));
    }

    #[test]
    fn nothing_is_served_while_the_watch_is_not_running() {
        let cache = Epochs::default();
        assert_eq!(cache.epoch(), Epoch(None));
        cache.set_watching(true);
        assert!(cache.epoch().0.is_some());
        cache.set_watching(false);
        assert_eq!(cache.epoch(), Epoch(None));
    }
}
