//! The token store's memory of stored entries: each entry by the hash its storage key is
//! made of, and an index from token id to that hash, so that the request path
//! ([`super::TokenStore::lookup`], once per request) finds a cached token without computing
//! the SHA-256 of its id.
//!
//! Where it sits: inside `TokenStore`, behind its mutex; `mod.rs` decides when entries come
//! and go (reads fill, writes replace, the store's watch forgets).
//!
//! Invariants: `hash_of_id` holds exactly the ids of the entries in `by_hash`, each mapped to
//! its entry's hash; an entry's memoized hash ([`TokenEntry::hash`]) is set to the key it is
//! kept under.

use std::sync::Arc;
use stdx::hash::FastMap;

use super::TokenEntry;

#[derive(Debug, Default)]
pub(super) struct EntryCache {
    by_hash: FastMap<String, Arc<TokenEntry>>,
    hash_of_id: FastMap<String, String>,
}

impl EntryCache {
    pub(super) fn get(&self, hash: &str) -> Option<&Arc<TokenEntry>> {
        self.by_hash.get(hash)
    }

    /// The cached entry of the token with this id, found without hashing the id.
    pub(super) fn get_by_id(&self, id: &str) -> Option<&Arc<TokenEntry>> {
        let hash = self.hash_of_id.get(id)?;
        self.by_hash.get(hash)
    }

    /// Keeps `entry` as the stored entry under `hash` (the SHA-256 of its id).
    pub(super) fn insert(&mut self, hash: String, entry: TokenEntry) {
        entry.remember_hash(&hash);
        if let Some(old) = self.by_hash.remove(&hash)
            && old.id != entry.id
        {
            self.hash_of_id.remove(&old.id);
        }
        self.hash_of_id.insert(entry.id.clone(), hash.clone());
        self.by_hash.insert(hash, Arc::new(entry));
    }

    pub(super) fn remove(&mut self, hash: &str) {
        if let Some(old) = self.by_hash.remove(hash) {
            self.hash_of_id.remove(&old.id);
        }
    }

    pub(super) fn clear(&mut self) {
        self.by_hash.clear();
        self.hash_of_id.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::store::hash_id;

    fn entry(id: &str) -> TokenEntry {
        TokenEntry {
            id: id.to_owned(),
            ..TokenEntry::for_tests()
        }
    }

    #[test]
    fn an_entry_is_found_by_its_id_and_by_its_hash_until_removed() {
        let mut cache = EntryCache::default();
        let hash = hash_id("hvs.one");
        cache.insert(hash.clone(), entry("hvs.one"));
        assert_eq!(
            cache.get_by_id("hvs.one").map(|e| e.id.as_str()),
            Some("hvs.one")
        );
        assert_eq!(cache.get(&hash).map(|e| e.hash()), Some(hash.clone()));
        assert!(cache.get_by_id("hvs.two").is_none());
        cache.remove(&hash);
        assert!(cache.get_by_id("hvs.one").is_none());
        assert!(cache.get(&hash).is_none());
        assert!(cache.hash_of_id.is_empty());
    }

    #[test]
    fn replacing_and_clearing_leave_no_stale_id() {
        let mut cache = EntryCache::default();
        let hash = hash_id("hvs.one");
        cache.insert(hash.clone(), entry("hvs.one"));
        let mut renewed = entry("hvs.one");
        renewed.num_uses = 3;
        cache.insert(hash.clone(), renewed);
        assert_eq!(cache.get_by_id("hvs.one").map(|e| e.num_uses), Some(3));
        assert_eq!(cache.hash_of_id.len(), 1);
        cache.clear();
        assert!(cache.get_by_id("hvs.one").is_none());
        assert!(cache.hash_of_id.is_empty());
    }

    #[test]
    fn the_memoized_hash_is_the_sha256_of_the_id() {
        let fresh = entry("hvs.memo");
        assert_eq!(fresh.hash(), hash_id("hvs.memo"));
        let mut cache = EntryCache::default();
        cache.insert(hash_id("hvs.memo"), fresh);
        let cached = cache.get_by_id("hvs.memo").cloned();
        assert_eq!(cached.map(|e| e.hash()), Some(hash_id("hvs.memo")));
    }
}
