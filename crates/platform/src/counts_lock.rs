//! One lock per organization around changes to its membership counts, so that concurrent
//! invitations, acceptances and removals in one organization queue behind each other on this
//! server instead of racing on the counts record's compare-and-swap (which answered 409 once a
//! request lost [`crate::store::MAX_ATTEMPTS`] rounds: 160 invitations at once did).
//!
//! Where it sits: held by `memberships.rs` and `invitations.rs` from the read of the counts
//! (`store::memberships::count_change`) until the transaction that writes them returned.
//!
//! Invariants: a lock is held only around that read and the commit (never across mail or any
//! other slow call); the compare-and-swap stays, so servers sharing the store stay correct
//! (this lock only removes the contention between requests of one server); entries are
//! removed when no request holds or waits for them, so the map holds only busy organizations.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// The per-organization locks.
#[derive(Debug, Default)]
pub(crate) struct CountsLocks {
    by_organization: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held while one request changes an organization's counts.
pub(crate) struct CountsGuard<'a> {
    locks: &'a CountsLocks,
    organization: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl CountsLocks {
    /// Waits for `organization`'s lock.
    pub(crate) async fn lock(&self, organization: &str) -> CountsGuard<'_> {
        let lock = self
            .map()
            .entry(organization.to_owned())
            .or_default()
            .clone();
        CountsGuard {
            locks: self,
            organization: organization.to_owned(),
            guard: Some(lock.lock_owned().await),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.by_organization
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CountsGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map();
        // Only the map holds it: nobody holds or waits for this organization's lock.
        if map
            .get(&self.organization)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.organization);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_organization_at_a_time_and_idle_entries_go() {
        let locks = Arc::new(CountsLocks::default());
        let first = locks.lock("acme").await;
        // Another organization is not held up.
        drop(locks.lock("other").await);
        let waiting = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _second = locks.lock("acme").await;
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the second waits for the first");
        drop(first);
        waiting.await.unwrap();
        assert!(locks.map().is_empty(), "{:?}", locks.map().keys());
    }
}
