//! Keyed async locks: callers that read a record and write it back with a compare-and-swap
//! queue per key on one server, instead of racing and retrying (a hot key under many
//! connections otherwise exhausts any retry budget).
//!
//! Invariants: a lock only removes contention between callers of one process; callers keep
//! their compare-and-swap, so processes sharing a store stay correct. An entry lives only while
//! someone holds or waits for it, so the map holds only busy keys.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// The map of busy keys; the key is shared with its guard (one allocation per lock taken).
type LockMap = HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>;

/// One async lock per key, created on first use.
#[derive(Debug, Default)]
pub struct KeyedLocks {
    by_key: Mutex<LockMap>,
}

/// Held while one caller works on its key; dropping it lets the next waiter in.
#[derive(Debug)]
pub struct KeyedGuard<'a> {
    locks: &'a KeyedLocks,
    key: Arc<str>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyedLocks {
    /// Waits for `key`'s lock.
    pub async fn lock(&self, key: &str) -> KeyedGuard<'_> {
        let key: Arc<str> = Arc::from(key);
        let lock = self.map().entry(Arc::clone(&key)).or_default().clone();
        KeyedGuard {
            locks: self,
            key,
            guard: Some(lock.lock_owned().await),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, LockMap> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for KeyedGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map();
        // Only the map holds it: nobody holds or waits for this key's lock.
        if let Entry::Occupied(entry) = map.entry(Arc::clone(&self.key))
            && Arc::strong_count(entry.get()) == 1
        {
            entry.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_caller_per_key_at_a_time_and_idle_entries_go() {
        let locks = Arc::new(KeyedLocks::default());
        let first = locks.lock("acme").await;
        // Another key is not held up.
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
