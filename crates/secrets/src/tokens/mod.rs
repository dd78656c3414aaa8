//! The token store (`auth/token/*`; Vault's `token_store.go`, docs/design.md §U4): service tokens,
//! their accessors, the parent → child tree, roles, TTLs and use counts.
//!
//! - Ids are `hvs.` + 24 base62 characters (the dev root token keeps the id it was given).
//!   Storage keys use only the SHA-256 of an id (`store.rs` lists the keys).
//! - [`TokenStore::lookup`] is what dispatch calls for every request: it answers `None` for
//!   unknown, expired and used-up tokens. An expired token found by a lookup is revoked in the
//!   background; [`tidy`] (called every second by the lease loop, `leases::run`) revokes every
//!   expired or used-up token, so their children and leases go too.
//! - Revoking a token revokes its whole subtree (unless `revoke-orphan`), every lease each
//!   revoked token created (`leases().revoke_by_token`) and what engines keep for it (its
//!   cubbyhole: `Engine::token_revoked`).
//! - Response-wrapping tokens (`create_wrapping`, used by `wrapping.rs`) are ordinary stored
//!   tokens: orphans with the one policy `response-wrapping`, one use, and their wrap TTL as
//!   both TTL and hard maximum, so they expire and are tidied like any other.
//! - Expiry is a stored deadline (`expire_time`); after a restart [`TokenStore::load`] rebuilds
//!   the in-memory expiry index from storage, so no deadline is lost.
//! - Batch tokens are not supported yet: `type=batch` is a 400.
//!
//! Invariants: a token's `expire_time` never exceeds its `max_expire` (explicit max TTL or the
//! 768h system max, measured from creation; periodic tokens have no system cap); `policies`
//! are sanitized (lower-case, sorted, deduplicated; `root` alone when present).

mod cache;
mod create;
mod handlers;
mod roles;
pub(crate) mod store;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Error, State};

pub(crate) use handlers::handle;

/// The system default and maximum token TTL: 768h (32 days), as Vault.
pub(crate) const SYSTEM_MAX_TTL: Duration = Duration::from_secs(768 * 3600);

/// How many times one use of a limited-use token retries its compare-and-swap.
const USE_ATTEMPTS: u32 = 64;

/// One token, as stored (encrypted) under `sys/token/id/<sha256 of id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TokenEntry {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) accessor: String,
    /// Sanitized: lower-case, sorted, deduplicated; `["root"]` for root tokens.
    pub(crate) policies: Vec<String>,
    pub(crate) entity_id: Option<String>,
    pub(crate) display_name: String,
    /// The path that created it: `auth/token/create`, `auth/token/root`, `auth/userpass/login/x`.
    pub(crate) path: String,
    pub(crate) meta: BTreeMap<String, String>,
    /// 0: unlimited; n > 0: n uses left; -1: used up (awaiting revocation).
    pub(crate) num_uses: i64,
    /// SHA-256 of the parent's id; `None` for orphans.
    pub(crate) parent: Option<String>,
    /// Unix milliseconds.
    pub(crate) creation_time: i64,
    /// The TTL granted at creation, in seconds (0: never expires).
    pub(crate) ttl: u64,
    /// Unix milliseconds; `None`: never expires.
    pub(crate) expire_time: Option<i64>,
    /// The hard deadline renewals cannot pass (unix milliseconds).
    pub(crate) max_expire: Option<i64>,
    pub(crate) explicit_max_ttl: u64,
    pub(crate) period: u64,
    pub(crate) renewable: bool,
    pub(crate) last_renewal: Option<i64>,
    pub(crate) role: Option<String>,
    /// `service` (batch tokens are not supported yet).
    pub(crate) token_type: String,
    /// The SHA-256 of `id`, once computed (never stored).
    #[serde(skip)]
    pub(crate) hash_memo: HashMemo,
    /// The ACL of `policies`, once built for a request (never stored; see `AclMemo`).
    #[serde(skip)]
    pub(crate) acl_memo: crate::policy::acl::AclMemo,
    /// What engines see of the token, once built for a request (never stored; see
    /// `AuthMemo`).
    #[serde(skip)]
    pub(crate) auth_memo: AuthMemo,
}

/// A token entry's memoized hash. Always equal to any other: it is derived from the id, so
/// two entries compare by their stored fields only.
#[derive(Debug, Clone, Default)]
pub(crate) struct HashMemo(std::sync::OnceLock<String>);

impl PartialEq for HashMemo {
    fn eq(&self, _: &HashMemo) -> bool {
        true
    }
}

/// A token entry's memoized [`secrets_sdk::RequestAuth`]. Like `AclMemo`, a clone is empty (a
/// copy of an entry may be changed, its policies say, and must build its own), and memos
/// compare equal (entries compare by their stored fields).
#[derive(Debug, Default)]
pub(crate) struct AuthMemo(std::sync::OnceLock<Arc<secrets_sdk::RequestAuth>>);

impl Clone for AuthMemo {
    fn clone(&self) -> AuthMemo {
        AuthMemo::default()
    }
}

impl PartialEq for AuthMemo {
    fn eq(&self, _: &AuthMemo) -> bool {
        true
    }
}

impl TokenEntry {
    /// The SHA-256 of the id, lowercase hex: the token's storage key (`store.rs`). Computed
    /// once per entry; entries served from the cache carry it already.
    pub(crate) fn hash(&self) -> String {
        self.hash_memo
            .0
            .get_or_init(|| store::hash_id(&self.id))
            .clone()
    }

    /// A service token with no policy, no TTL and no parent: tests fill in what they need.
    #[cfg(test)]
    pub(crate) fn for_tests() -> TokenEntry {
        TokenEntry {
            version: 1,
            id: String::new(),
            accessor: String::new(),
            policies: Vec::new(),
            entity_id: None,
            display_name: String::new(),
            path: "auth/token/create".to_owned(),
            meta: BTreeMap::new(),
            num_uses: 0,
            parent: None,
            creation_time: 0,
            ttl: 0,
            expire_time: None,
            max_expire: None,
            explicit_max_ttl: 0,
            period: 0,
            renewable: false,
            last_renewal: None,
            role: None,
            token_type: "service".to_owned(),
            hash_memo: HashMemo::default(),
            acl_memo: crate::policy::acl::AclMemo::default(),
            auth_memo: AuthMemo::default(),
        }
    }

    /// Records `hash` as the hash of this entry's id (the caller computed it from the id).
    fn remember_hash(&self, hash: &str) {
        let _ = self.hash_memo.0.get_or_init(|| hash.to_owned());
    }

    pub(crate) fn is_root(&self) -> bool {
        self.policies.iter().any(|p| p == "root")
    }

    /// Whether this is a response-wrapping token (its one policy is `response-wrapping`, which
    /// no other token can be given).
    pub(crate) fn is_wrapping(&self) -> bool {
        matches!(self.policies.as_slice(), [only] if only == crate::policy::names::RESPONSE_WRAPPING_POLICY)
    }

    /// Who the token is, as an engine sees it (never the id itself): built once per entry, so
    /// a cached entry hands every request the same one.
    pub(crate) fn request_auth(&self) -> Arc<secrets_sdk::RequestAuth> {
        Arc::clone(self.auth_memo.0.get_or_init(|| {
            Arc::new(secrets_sdk::RequestAuth {
                accessor: self.accessor.clone(),
                display_name: self.display_name.clone(),
                policies: self.policies.clone(),
                entity_id: self.entity_id.clone(),
                token_hash: self.hash(),
            })
        }))
    }

    pub(crate) fn is_expired(&self, now_ms: i64) -> bool {
        self.expire_time.is_some_and(|at| at <= now_ms)
    }

    /// Whole seconds left (0 for tokens that never expire).
    pub(crate) fn ttl_left(&self, now_ms: i64) -> u64 {
        self.expire_time
            .map(|at| {
                u64::try_from((at - now_ms).max(0))
                    .unwrap_or(0)
                    .div_ceil(1000)
            })
            .unwrap_or(0)
    }

    /// Whether the lookup path should treat the token as gone.
    fn is_dead(&self, now_ms: i64) -> bool {
        self.num_uses < 0 || self.is_expired(now_ms)
    }
}

/// The expiry index: (deadline ms, token hash) in deadline order, and hash → deadline for
/// removal.
type Expiries = (BTreeSet<(i64, String)>, HashMap<String, i64>);

/// In-memory side of the token store: a cache of entries and the expiry index. Both are
/// derived from storage and rebuilt by [`TokenStore::load`].
#[derive(Debug, Default)]
pub(crate) struct TokenStore {
    cache: Mutex<cache::EntryCache>,
    expiries: Mutex<Expiries>,
    /// Serialises read-modify-write of stored entries (use counts, renewals, revocations).
    write_lock: tokio::sync::Mutex<()>,
    /// Bumped (under the cache's lock) by every [`TokenStore::forget`]: a read that started
    /// before a change another server made does not cache what it read.
    generation: std::sync::atomic::AtomicU64,
}

impl TokenStore {
    /// Rebuilds the expiry index from storage (after unseal or restart, and when the expiry
    /// loop starts).
    pub(crate) async fn load(&self, state: &State) -> Result<(), Error> {
        self.clear();
        for (key, bytes) in store::scan(state, store::ID_PREFIX).await? {
            let entry: TokenEntry = store::decode(&key, &bytes)?;
            self.index(&entry);
        }
        Ok(())
    }

    /// Forgets everything in memory (when sealing).
    pub(crate) fn clear(&self) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let mut expiries = self.expiries.lock().unwrap_or_else(PoisonError::into_inner);
        expiries.0.clear();
        expiries.1.clear();
    }

    /// Drops `hash` from the cache: its stored entry changed, maybe on another server (the
    /// store's watch, `follow.rs`).
    pub(crate) fn forget(&self, hash: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(hash);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Drops every cached entry (the watch lost its place: anything may have changed).
    pub(crate) fn forget_all(&self) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.clear();
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Indexes the expiry of the stored entry `hash`, or drops it when the token is gone:
    /// another server created, renewed or revoked it (`follow.rs`, on the leader).
    pub(crate) async fn follow_stored(&self, state: &State, hash: &str) -> Result<(), Error> {
        match store::get_json::<TokenEntry>(state, &store::id_key(hash)).await? {
            Some(entry) => self.index(&entry),
            None => self.unindex(hash),
        }
        Ok(())
    }

    fn index(&self, entry: &TokenEntry) {
        let deadline = if entry.num_uses < 0 {
            Some(i64::MIN)
        } else {
            entry.expire_time
        };
        let hash = entry.hash();
        let mut guard = self.expiries.lock().unwrap_or_else(PoisonError::into_inner);
        let (by_time, by_hash) = &mut *guard;
        if let Some(old) = by_hash.remove(&hash) {
            by_time.remove(&(old, hash.clone()));
        }
        if let Some(at) = deadline {
            by_time.insert((at, hash.clone()));
            by_hash.insert(hash, at);
        }
    }

    fn unindex(&self, hash: &str) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(hash);
        let mut guard = self.expiries.lock().unwrap_or_else(PoisonError::into_inner);
        let (by_time, by_hash) = &mut *guard;
        if let Some(old) = by_hash.remove(hash) {
            by_time.remove(&(old, hash.to_owned()));
        }
    }

    /// Hashes of tokens whose deadline has passed.
    fn due(&self, now_ms: i64) -> Vec<String> {
        let guard = self.expiries.lock().unwrap_or_else(PoisonError::into_inner);
        guard
            .0
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .map(|(_, hash)| hash.clone())
            .collect()
    }

    /// Reads a stored entry by hash, live or not.
    async fn read(&self, state: &State, hash: &str) -> Result<Option<TokenEntry>, Error> {
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(hash)
            .map(|entry| TokenEntry::clone(entry));
        if let Some(entry) = cached {
            return Ok(Some(entry));
        }
        let generation = self.generation.load(std::sync::atomic::Ordering::Acquire);
        let entry: Option<TokenEntry> = store::get_json(state, &store::id_key(hash)).await?;
        if let Some(entry) = &entry {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            // Another server's change seen since the read began: the read may be stale.
            if self.generation.load(std::sync::atomic::Ordering::Acquire) == generation {
                cache.insert(hash.to_owned(), entry.clone());
            }
        }
        Ok(entry)
    }

    /// Writes an entry and its indexes (accessor, parent link) and refreshes memory.
    async fn write(&self, state: &State, entry: &TokenEntry) -> Result<(), Error> {
        let hash = entry.hash();
        store::put_json(state, &store::id_key(&hash), entry).await?;
        store::put_json(
            state,
            &store::accessor_key(&entry.accessor),
            &json!({ "hash": hash }),
        )
        .await?;
        if let Some(parent) = &entry.parent {
            store::put(state, &store::parent_key(parent, &hash), b"").await?;
        }
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(hash, entry.clone());
        self.index(entry);
        Ok(())
    }

    /// The live token with this id: `None` when unknown, expired or used up.
    pub(crate) async fn lookup(
        &self,
        state: &State,
        token_id: &str,
    ) -> Result<Option<Arc<TokenEntry>>, Error> {
        if token_id.is_empty() {
            return Ok(None);
        }
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_by_id(token_id)
            .cloned();
        let entry = match cached {
            Some(entry) => entry,
            None => match self.read(state, &store::hash_id(token_id)).await? {
                Some(entry) => Arc::new(entry),
                None => return Ok(None),
            },
        };
        if entry.id != token_id {
            return Ok(None);
        }
        let now = state.now_ms();
        if entry.is_dead(now) {
            // Dead is as good as absent here; `tidy`, run every second by the lease loop,
            // revokes it with its children and leases (no detached task per request).
            return Ok(None);
        }
        Ok(Some(entry))
    }

    /// The live token with this accessor.
    pub(crate) async fn lookup_accessor(
        &self,
        state: &State,
        accessor: &str,
    ) -> Result<Option<TokenEntry>, Error> {
        if accessor.is_empty() || accessor.contains('/') {
            return Ok(None);
        }
        let Some(index) = store::get_json::<Value>(state, &store::accessor_key(accessor)).await?
        else {
            return Ok(None);
        };
        let Some(hash) = index.get("hash").and_then(Value::as_str) else {
            return Ok(None);
        };
        match self.read(state, hash).await? {
            Some(entry) if !entry.is_dead(state.now_ms()) => Ok(Some(entry)),
            _ => Ok(None),
        }
    }

    /// Counts one use of a limited-use token. The last use marks it used up: later lookups
    /// answer `None` and [`tidy`] revokes it (after the current request finished).
    ///
    /// The decrement is a compare-and-swap on the stored entry, retried on conflict, so a
    /// token with `num_uses = n` is used exactly `n` times however many requests, on however
    /// many servers, use it at once; a use that finds it used up is refused.
    pub(crate) async fn use_token(&self, state: &State, token: &TokenEntry) -> Result<(), Error> {
        if token.num_uses == 0 {
            return Ok(());
        }
        // Serialises this server's own uses (no conflict among them); other servers' uses
        // are caught by the compare-and-swap.
        let _guard = self.write_lock.lock().await;
        let hash = token.hash();
        let key = store::id_key(&hash);
        for attempt in 0..USE_ATTEMPTS {
            let Some((bytes, revision)) = store::get_revisioned(state, &key).await? else {
                return Err(Error::PermissionDenied);
            };
            let mut entry: TokenEntry = store::decode(&key, &bytes)?;
            if entry.id != token.id || entry.num_uses < 0 || entry.is_expired(state.now_ms()) {
                return Err(Error::PermissionDenied);
            }
            if entry.num_uses == 0 {
                return Ok(());
            }
            entry.num_uses = if entry.num_uses == 1 {
                -1
            } else {
                entry.num_uses - 1
            };
            if store::put_if(state, &key, &store::encode(&key, &entry)?, revision).await? {
                self.cache
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(hash, entry.clone());
                self.index(&entry);
                return Ok(());
            }
            // Another server used (or changed) it since the read: read again. A short,
            // growing pause spreads out servers contending for one token.
            let pause = Duration::from_millis(1 + u64::from(attempt % 8) * 2);
            tokio::time::sleep(pause).await;
        }
        Err(Error::Conflict(
            "the token's use count kept changing under this request; retry the request".to_owned(),
        ))
    }

    /// Creates the root token: `id` when given (dev mode's `--root-token`), else a random id.
    pub(crate) async fn create_root(
        &self,
        state: &State,
        id: Option<String>,
    ) -> Result<TokenEntry, Error> {
        let id = id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(store::new_token_id);
        let _guard = self.write_lock.lock().await;
        let hash = store::hash_id(&id);
        if let Some(existing) = store::get_json::<TokenEntry>(state, &store::id_key(&hash)).await?
            && existing.id == id
            && existing.num_uses >= 0
        {
            // Dev restart with the same root token: keep the stored one.
            return Ok(existing);
        }
        let entry = TokenEntry {
            version: 1,
            id,
            accessor: store::new_accessor(),
            policies: vec!["root".to_owned()],
            entity_id: None,
            display_name: "root".to_owned(),
            path: "auth/token/root".to_owned(),
            meta: BTreeMap::new(),
            num_uses: 0,
            parent: None,
            creation_time: state.now_ms(),
            ttl: 0,
            expire_time: None,
            max_expire: None,
            explicit_max_ttl: 0,
            period: 0,
            renewable: false,
            last_renewal: None,
            role: None,
            token_type: "service".to_owned(),
            hash_memo: HashMemo::default(),
            acl_memo: crate::policy::acl::AclMemo::default(),
            auth_memo: AuthMemo::default(),
        };
        self.write(state, &entry).await?;
        Ok(entry)
    }

    /// Stores a fully built new entry (creation paths in `create.rs`).
    async fn insert_new(&self, state: &State, entry: &TokenEntry) -> Result<(), Error> {
        let _guard = self.write_lock.lock().await;
        if store::get(state, &store::id_key(&entry.hash()))
            .await?
            .is_some()
        {
            return Err(Error::InvalidParameter(
                "cannot create a token with a duplicate ID".to_owned(),
            ));
        }
        self.write(state, entry).await
    }

    /// Revokes the token with this hash and its whole subtree, children first, with every
    /// lease each of them created. Missing tokens are fine (idempotent).
    pub(crate) async fn revoke_tree(&self, state: &State, hash: &str) -> Result<(), Error> {
        // Depth-first, iteratively: collect the subtree, then revoke leaves first.
        let mut order = Vec::new();
        let mut stack = vec![hash.to_owned()];
        while let Some(current) = stack.pop() {
            let children =
                store::list(state, &format!("{}{current}/", store::PARENT_PREFIX)).await?;
            for child in children {
                let child = child.trim_end_matches('/').to_owned();
                if !child.is_empty() && !order.contains(&child) && child != current {
                    stack.push(child);
                }
            }
            order.push(current);
        }
        for hash in order.iter().rev() {
            self.revoke_one(state, hash, false).await?;
        }
        Ok(())
    }

    /// Revokes one token; with `orphan_children` its children become orphans, otherwise they
    /// are expected to be revoked already (by [`Self::revoke_tree`]).
    pub(crate) async fn revoke_one(
        &self,
        state: &State,
        hash: &str,
        orphan_children: bool,
    ) -> Result<(), Error> {
        let entry = store::get_json::<TokenEntry>(state, &store::id_key(hash)).await?;
        if let Some(entry) = &entry {
            store::revoke_leases(state, &entry.accessor).await?;
        }
        store::drop_engine_data(state, hash).await?;
        let _guard = self.write_lock.lock().await;
        let children_prefix = format!("{}{hash}/", store::PARENT_PREFIX);
        for child in store::list(state, &children_prefix).await? {
            let child = child.trim_end_matches('/');
            if orphan_children
                && let Some(mut child_entry) =
                    store::get_json::<TokenEntry>(state, &store::id_key(child)).await?
            {
                child_entry.parent = None;
                store::put_json(state, &store::id_key(child), &child_entry).await?;
                self.cache
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(child.to_owned(), child_entry);
            }
            store::delete(state, &format!("{children_prefix}{child}")).await?;
        }
        if let Some(entry) = entry {
            store::delete(state, &store::accessor_key(&entry.accessor)).await?;
            if let Some(parent) = &entry.parent {
                store::delete(state, &store::parent_key(parent, hash)).await?;
            }
        }
        store::delete(state, &store::id_key(hash)).await?;
        self.unindex(hash);
        Ok(())
    }
}

/// Revokes every token whose deadline passed or whose uses ran out, with its subtree and
/// leases. Returns how many deadlines were handled. Called every second by the lease loop
/// (`leases::run`), and at once when a manual clock is moved.
pub(crate) async fn tidy(state: &State) -> Result<usize, Error> {
    let tokens = state.tokens();
    let now = state.now_ms();
    let due = tokens.due(now);
    let count = due.len();
    for hash in due {
        // Renewed since it was indexed? `write` re-indexed it; re-check from storage.
        match store::get_json::<TokenEntry>(state, &store::id_key(&hash)).await? {
            Some(entry) if !entry.is_dead(now) => tokens.index(&entry),
            _ => tokens.revoke_tree(state, &hash).await?,
        }
    }
    Ok(count)
}

/// The envelope's `auth` object for a token (create, renew, login) at `now_ms`.
pub(crate) fn auth_json(entry: &TokenEntry, now_ms: i64) -> Value {
    let metadata = if entry.meta.is_empty() {
        Value::Null
    } else {
        json!(entry.meta)
    };
    json!({
        "client_token": entry.id,
        "accessor": entry.accessor,
        "policies": entry.policies,
        "token_policies": entry.policies,
        "metadata": metadata,
        "lease_duration": entry.ttl_left(now_ms),
        "renewable": entry.renewable && entry.expire_time.is_some(),
        "entity_id": entry.entity_id.clone().unwrap_or_default(),
        "token_type": entry.token_type,
        "orphan": entry.parent.is_none(),
        "mfa_requirement": Value::Null,
        "num_uses": entry.num_uses.max(0),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use secrets_sdk::Data;
    use serde_json::json;
    use stdx::clock::ManualClock;
    use storage::{MemStorage, Storage};

    use super::create::CreateKind;
    use super::*;
    use crate::Config;

    #[test]
    fn request_auth_is_built_once_per_entry_and_a_changed_copy_builds_its_own() {
        let mut entry = TokenEntry::for_tests();
        entry.id = "s.one".to_owned();
        entry.policies = vec!["default".to_owned()];
        let first = entry.request_auth();
        assert!(Arc::ptr_eq(&first, &entry.request_auth()));
        assert_eq!(first.policies, ["default"]);
        assert_eq!(first.token_hash, entry.hash());

        let mut copy = entry.clone();
        copy.policies = vec!["default".to_owned(), "ops".to_owned()];
        copy.display_name = "token-ops".to_owned();
        let changed = copy.request_auth();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.policies, ["default", "ops"]);
        assert_eq!(changed.display_name, "token-ops");
        // Memos never make two entries differ: they compare by their stored fields.
        assert_eq!(entry, entry.clone());
    }

    /// A dev-mode state on a manual clock.
    async fn dev() -> (State, Arc<dyn Storage>, ManualClock) {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let config = Config {
            dev_root_token: Some("unit-root".to_owned()),
            ..Config::default()
        };
        let clock = ManualClock::at_system_time();
        let state = State::open_with_clock(storage.clone(), config, Arc::new(clock.clone()))
            .await
            .unwrap();
        (state, storage, clock)
    }

    fn data(value: Value) -> Data {
        value.as_object().cloned().unwrap_or_default()
    }

    #[tokio::test]
    async fn expiry_follows_the_injected_clock_and_tidy_revokes_the_subtree() {
        let (state, _, clock) = dev().await;
        let tokens = state.tokens();
        let root = tokens.lookup(&state, "unit-root").await.unwrap().unwrap();
        let (parent, _) = tokens
            .create_token(
                &state,
                &root,
                true,
                &data(json!({"ttl": "1h"})),
                CreateKind::Normal,
            )
            .await
            .unwrap();
        let (child, _) = tokens
            .create_token(
                &state,
                &parent,
                false,
                &data(json!({"ttl": "10h"})),
                CreateKind::Normal,
            )
            .await
            .unwrap();
        clock.advance(Duration::from_secs(3599));
        assert!(tokens.lookup(&state, &parent.id).await.unwrap().is_some());
        assert_eq!(tidy(&state).await.unwrap(), 0);
        clock.advance(Duration::from_secs(2));
        assert_eq!(tidy(&state).await.unwrap(), 1);
        assert!(tokens.lookup(&state, &parent.id).await.unwrap().is_none());
        assert!(tokens.lookup(&state, &child.id).await.unwrap().is_none());
        assert!(
            tokens
                .lookup_accessor(&state, &child.accessor)
                .await
                .unwrap()
                .is_none()
        );
        let left = store::list(
            &state,
            &format!("{}{}/", store::PARENT_PREFIX, parent.hash()),
        )
        .await
        .unwrap();
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn storage_keys_carry_only_the_hash_of_a_token_id() {
        let (state, storage, _) = dev().await;
        let tokens = state.tokens();
        let root = tokens.lookup(&state, "unit-root").await.unwrap().unwrap();
        let (token, _) = tokens
            .create_token(&state, &root, true, &Data::new(), CreateKind::Normal)
            .await
            .unwrap();
        let all = storage
            .scan(storage::KeyRange::prefix(b""), None)
            .await
            .unwrap();
        for kv in all.kvs {
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            assert!(
                !key.contains(&token.id) && !key.contains("unit-root"),
                "{key}"
            );
            let value = String::from_utf8_lossy(&kv.value).into_owned();
            assert!(!value.contains(&token.id), "{key} holds the id in clear");
        }
        assert!(
            store::get(&state, &store::id_key(&store::hash_id(&token.id)))
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn periodic_tokens_have_no_system_cap_and_expire_after_their_period() {
        let (state, _, clock) = dev().await;
        let tokens = state.tokens();
        let root = tokens.lookup(&state, "unit-root").await.unwrap().unwrap();
        let (periodic, _) = tokens
            .create_token(
                &state,
                &root,
                true,
                &data(json!({"period": 60})),
                CreateKind::Normal,
            )
            .await
            .unwrap();
        assert_eq!(periodic.ttl, 60);
        assert_eq!(periodic.max_expire, None);
        clock.advance(Duration::from_secs(50));
        assert!(tokens.lookup(&state, &periodic.id).await.unwrap().is_some());
        clock.advance(Duration::from_secs(20));
        assert!(tokens.lookup(&state, &periodic.id).await.unwrap().is_none());
    }
}
