//! The barrier: every value the secrets service stores is encrypted here before it reaches the
//! shared store, and decrypted here when read back.
//!
//! Encryption: AES-256-GCM (aws-lc-rs `LessSafeKey`) with a fresh random 96-bit nonce per write
//! (aws-lc-rs `SystemRandom`) and the *logical* key as additional authenticated data, so a
//! ciphertext copied to another key fails to decrypt. A stored value is
//! `term (u32 BE) | version (1) | nonce (12) | ciphertext | tag (16)`.
//!
//! Keyring: a list of terms (data keys). The newest term encrypts new writes; every older term
//! still decrypts (`sys/rotate` adds a term; `sys/key-status` reports the active one). The
//! keyring is stored at [`KEYRING_KEY`], encrypted by the root key (the key the unseal shares
//! reconstruct) in the same format with term 0 and the physical key as AAD. Rotation is a
//! compare-and-swap on the keyring's mod revision; a value with an unknown term makes the
//! barrier reload the keyring once (another node may have rotated).
//!
//! Physical layout (the shared store): [`KEYRING_KEY`] (written by `seal.rs` at init, by
//! [`Barrier::rotate`] later) and every logical key `k` at `secrets/barrier/k`. Logical keys are
//! chosen by each owner (see the crate docs): `core/mounts`, `logical/<uuid>/…`, `sys/token/…`.
//!
//! Invariants:
//! - Sealed (no keyring in memory) → every operation is [`Error::Sealed`]; nothing is read.
//! - Nothing passes to the store in clear: every value is encrypted. Logical keys (paths) are
//!   visible, as in Vault, so no owner may put a secret in a key (tokens are keyed by their
//!   SHA-256).
//! - A value that fails to decrypt (tampered, moved, truncated, unknown term) is
//!   [`Error::CorruptRecord`], never a panic.
//! - Key material is zeroized when dropped (`zeroize`; aws-lc clears its own key schedules).
//! - Read cache ([`Barrier::cache_reads`], on when this server is the store's only writer):
//!   values as stored (ciphertext) by logical key, so a repeated read decrypts and touches no
//!   store. Every write through the barrier drops its key after the store answered and moves
//!   the generation, and a read keeps what it read only if the generation did not move
//!   meanwhile, so the cache never holds a value older than the last write the barrier
//!   answered; sealing, unsealing and the serving switch around a restore empty it. Nothing
//!   else writes under [`DATA_PREFIX`] while a server runs, except a failed `sys/init`'s
//!   undo, which empties it too ([`Barrier::forget_reads`]).

use std::collections::BTreeMap;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use stdx::hash::FastMap;

use async_trait::async_trait;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine as _;
use secrets_sdk::{EngineStorage, StorageError};
use serde::{Deserialize, Serialize};
use stdx::clock::SharedClock;
use storage::{Compare, KeyRange, Op, Storage, Txn};
use zeroize::Zeroizing;

use crate::Error;

/// Where the encrypted keyring lives (physical key, outside the barrier's data prefix).
pub(crate) const KEYRING_KEY: &str = "secrets/core/keyring";

/// Physical prefix of every value stored through the barrier.
pub(crate) const DATA_PREFIX: &str = "secrets/barrier/";

/// Length of the root key and of every data key (AES-256).
pub(crate) const KEY_LEN: usize = 32;

/// The ciphertext format version byte.
const FORMAT_V1: u8 = 1;
/// `term | version | nonce`.
const HEADER_LEN: usize = 4 + 1 + NONCE_LEN;
const TAG_LEN: usize = 16;
/// The term number used for the keyring itself (sealed by the root key).
const ROOT_TERM: u32 = 0;

/// One data key of the keyring.
struct Term {
    key: LessSafeKey,
    raw: Zeroizing<Vec<u8>>,
    install_time_ms: u64,
}

/// The keyring: terms by number; the largest is active.
struct Keyring {
    terms: BTreeMap<u32, Term>,
    /// Mod revision of [`KEYRING_KEY`] this keyring was read from (for rotation's CAS).
    revision: u64,
}

impl Keyring {
    fn active(&self) -> Option<(u32, &Term)> {
        self.terms.iter().next_back().map(|(t, k)| (*t, k))
    }
}

/// What the barrier holds while unsealed.
struct Unsealed {
    /// Shared so a new keyring can be installed without the raw root key.
    root: Arc<LessSafeKey>,
    keyring: Keyring,
}

/// The stored (then encrypted) form of the keyring.
#[derive(Serialize, Deserialize)]
struct KeyringRecord {
    version: u32,
    terms: Vec<TermRecord>,
}

#[derive(Serialize, Deserialize)]
struct TermRecord {
    term: u32,
    /// Base64 of the 32 key bytes.
    key: String,
    install_time_ms: u64,
}

impl Drop for TermRecord {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key);
    }
}

/// How many values the read cache keeps; past it, it starts over.
const READ_CACHE_ENTRIES: usize = 8192;
/// Values larger than this (as stored) are read from the store each time.
const READ_CACHE_VALUE_BYTES: usize = 64 * 1024;

/// Values as stored, by logical key (see the module docs).
#[derive(Debug, Default)]
struct ReadCache {
    enabled: bool,
    /// Moved by every write through the barrier and every emptying.
    generation: u64,
    entries: FastMap<String, (Arc<[u8]>, storage::Revision)>,
}

/// The barrier. Cheap to share (`Arc<Barrier>` in `State`).
pub(crate) struct Barrier {
    storage: Arc<dyn Storage>,
    reads: Mutex<ReadCache>,
    unsealed: RwLock<Option<Arc<Unsealed>>>,
    /// Set once `State::post_unseal` has finished (see [`Barrier::is_sealed`]).
    serving: AtomicBool,
    random: SystemRandom,
    /// The service's clock (install times of keyring terms).
    clock: SharedClock,
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("sealed", &self.is_sealed())
            .finish_non_exhaustive()
    }
}

/// The active term of the keyring, as `sys/key-status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyStatus {
    pub(crate) term: u32,
    /// Unix milliseconds.
    pub(crate) install_time_ms: u64,
}

impl Barrier {
    pub(crate) fn new(storage: Arc<dyn Storage>, clock: SharedClock) -> Barrier {
        Barrier {
            storage,
            reads: Mutex::new(ReadCache::default()),
            unsealed: RwLock::new(None),
            serving: AtomicBool::new(false),
            random: SystemRandom::new(),
            clock,
        }
    }

    /// Now, as keyring terms record it (Unix milliseconds).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now_ms()).unwrap_or(0)
    }

    /// Whether requests must be refused with 503: true until the keys are loaded *and* the
    /// seal has marked the store ready ([`Barrier::set_serving`], after `post_unseal`), and
    /// again as soon as sealing starts. The barrier's own operations need only the keys, so
    /// `post_unseal` and `pre_seal` can use storage while clients are still refused.
    pub(crate) fn is_sealed(&self) -> bool {
        !self.serving.load(Ordering::Acquire) || self.read_state().is_none()
    }

    /// Marks the store ready for requests (after `post_unseal`) or not (before `pre_seal`).
    /// Either way the read cache starts over: a restore replaces the store between the two.
    pub(crate) fn set_serving(&self, serving: bool) {
        self.forget_reads();
        self.serving.store(serving, Ordering::Release);
    }

    /// Keeps values read from here on in memory (as stored, encrypted): only for a server that
    /// is the store's only writer (no elected leadership), where every change passes through
    /// this barrier. `State::open` turns it on.
    pub(crate) fn cache_reads(&self) {
        self.lock_reads().enabled = true;
    }

    /// Empties the read cache.
    pub(crate) fn forget_reads(&self) {
        let mut reads = self.lock_reads();
        reads.entries.clear();
        reads.generation += 1;
    }

    fn lock_reads(&self) -> std::sync::MutexGuard<'_, ReadCache> {
        self.reads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached stored value of `key`, if any.
    fn cached(&self, key: &str) -> Option<(Arc<[u8]>, storage::Revision)> {
        let reads = self.lock_reads();
        if !reads.enabled {
            return None;
        }
        reads.entries.get(key).cloned()
    }

    /// The generation a read starts at (`None`: nothing is cached).
    fn read_generation(&self) -> Option<u64> {
        let reads = self.lock_reads();
        reads.enabled.then_some(reads.generation)
    }

    /// Keeps what a read found, unless a write (or an emptying) happened since it started.
    fn remember(&self, key: &str, started: Option<u64>, kv: &storage::KeyValue) {
        let Some(started) = started else {
            return;
        };
        if kv.value.len() > READ_CACHE_VALUE_BYTES {
            return;
        }
        let mut reads = self.lock_reads();
        if reads.generation != started {
            return;
        }
        if reads.entries.len() >= READ_CACHE_ENTRIES {
            reads.entries.clear();
        }
        reads.entries.insert(
            key.to_owned(),
            (Arc::from(kv.value.as_slice()), kv.mod_revision),
        );
    }

    /// After a write to `key` (answered or failed): its cached value is gone, and reads that
    /// began before keep nothing.
    fn written(&self, key: &str) {
        let mut reads = self.lock_reads();
        reads.entries.remove(key);
        reads.generation += 1;
    }

    fn read_state(&self) -> Option<Arc<Unsealed>> {
        self.unsealed
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_state(&self, state: Option<Arc<Unsealed>>) {
        *self
            .unsealed
            .write()
            .unwrap_or_else(PoisonError::into_inner) = state;
    }

    fn current(&self) -> Result<Arc<Unsealed>, Error> {
        self.read_state().ok_or(Error::Sealed)
    }

    // ---- seal / unseal -------------------------------------------------------------------

    /// A fresh 256-bit random key (root key or data key).
    pub(crate) fn random_key(&self) -> Result<Zeroizing<Vec<u8>>, Error> {
        let mut key = Zeroizing::new(vec![0_u8; KEY_LEN]);
        self.random
            .fill(&mut key)
            .map_err(|_| Error::Crypto("random key generation failed".to_owned()))?;
        Ok(key)
    }

    /// The encrypted record of a new keyring (one term, fresh random key) sealed by
    /// `root_key`; `seal.rs` stores it at [`KEYRING_KEY`] in the init transaction.
    pub(crate) fn fresh_keyring(&self, root_key: &[u8]) -> Result<Vec<u8>, Error> {
        let root = aead_key(root_key)?;
        let data_key = self.random_key()?;
        let record = KeyringRecord {
            version: 1,
            terms: vec![TermRecord {
                term: 1,
                key: b64(&data_key),
                install_time_ms: self.now_ms(),
            }],
        };
        self.seal_keyring(&root, &record)
    }

    /// Opens the barrier with `root_key`. `Ok(false)` when the key does not decrypt the
    /// keyring (a wrong key); `Err` when there is no keyring or it is unreadable.
    pub(crate) async fn unseal(&self, root_key: &[u8]) -> Result<bool, Error> {
        if root_key.len() != KEY_LEN {
            return Ok(false);
        }
        let root = aead_key(root_key)?;
        let Some(kv) = self.storage.get(KEYRING_KEY.as_bytes()).await? else {
            return Err(Error::InitState("Vault is not initialized".to_owned()));
        };
        let Ok(plain) = open(&root, ROOT_TERM, KEYRING_KEY, &kv.value) else {
            return Ok(false);
        };
        let keyring = parse_keyring(&plain, kv.mod_revision)?;
        self.set_state(Some(Arc::new(Unsealed {
            root: Arc::new(root),
            keyring,
        })));
        Ok(true)
    }

    /// The shared store under the barrier, for the one owner that works on values as stored
    /// (snapshots, `snapshots/`: they copy ciphertext, never plaintext).
    pub(crate) fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Whether the root key in memory opens `sealed`, a keyring as stored at [`KEYRING_KEY`]
    /// (a snapshot's). [`Error::Sealed`] while sealed.
    pub(crate) fn root_opens_keyring(&self, sealed: &[u8]) -> Result<bool, Error> {
        let state = self.current()?;
        Ok(open(&state.root, ROOT_TERM, KEYRING_KEY, sealed).is_ok())
    }

    /// Re-reads the keyring from storage with the root key in memory: after a snapshot
    /// restore replaced it with one this root key opens.
    pub(crate) async fn reload_keyring_from_storage(&self) -> Result<(), Error> {
        let state = self.current()?;
        self.reload_keyring(&state).await.map(|_| ())
    }

    /// Forgets every key: the barrier is sealed until the next unseal.
    pub(crate) fn seal(&self) {
        self.set_serving(false);
        self.set_state(None);
        self.forget_reads();
    }

    // ---- keyring -------------------------------------------------------------------------

    /// `sys/key-status`: the active term and when it was installed.
    pub(crate) fn key_status(&self) -> Result<KeyStatus, Error> {
        let state = self.current()?;
        let (term, key) = state.keyring.active().ok_or_else(empty_keyring)?;
        Ok(KeyStatus {
            term,
            install_time_ms: key.install_time_ms,
        })
    }

    /// `sys/rotate`: adds a term with a fresh key, used for every write from now on. Old terms
    /// keep decrypting. Safe against concurrent rotations (compare-and-swap on the keyring).
    pub(crate) async fn rotate(&self) -> Result<KeyStatus, Error> {
        for _ in 0..8 {
            let state = self.current()?;
            let mut record = KeyringRecord {
                version: 1,
                terms: state
                    .keyring
                    .terms
                    .iter()
                    .map(|(term, key)| TermRecord {
                        term: *term,
                        key: b64(&key.raw),
                        install_time_ms: key.install_time_ms,
                    })
                    .collect(),
            };
            let next = state.keyring.active().map_or(1, |(t, _)| t + 1);
            let install_time_ms = self.now_ms();
            let data_key = self.random_key()?;
            record.terms.push(TermRecord {
                term: next,
                key: b64(&data_key),
                install_time_ms,
            });
            let sealed = self.seal_keyring(&state.root, &record)?;
            let txn = Txn::new()
                .when(Compare::ModRevision(
                    KEYRING_KEY.as_bytes().to_vec(),
                    state.keyring.revision,
                ))
                .then(Op::Put {
                    key: KEYRING_KEY.as_bytes().to_vec(),
                    value: sealed,
                });
            let result = self.storage.txn(txn).await?;
            if result.succeeded {
                let plain = Zeroizing::new(serde_json::to_vec(&record).map_err(json_err)?);
                let keyring = parse_keyring(&plain, result.revision)?;
                self.replace_keyring(&state, keyring);
                return Ok(KeyStatus {
                    term: next,
                    install_time_ms,
                });
            }
            // Someone else rotated: pick up their keyring and try again.
            self.reload_keyring(&state).await?;
        }
        Err(Error::Crypto(
            "keyring rotation kept conflicting with other writers".to_owned(),
        ))
    }

    /// Installs `keyring` if the barrier is still unsealed with the same root key.
    fn replace_keyring(&self, seen: &Arc<Unsealed>, keyring: Keyring) {
        let mut guard = self
            .unsealed
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = guard.as_ref()
            && Arc::ptr_eq(current, seen)
        {
            let root = current.root.clone();
            *guard = Some(Arc::new(Unsealed { root, keyring }));
        }
    }

    /// Re-reads the keyring from storage (another node rotated) and installs it.
    async fn reload_keyring(&self, seen: &Arc<Unsealed>) -> Result<Arc<Unsealed>, Error> {
        let kv = self
            .storage
            .get(KEYRING_KEY.as_bytes())
            .await?
            .ok_or_else(|| corrupt(KEYRING_KEY, "keyring vanished"))?;
        let plain = open(&seen.root, ROOT_TERM, KEYRING_KEY, &kv.value)
            .map_err(|reason| corrupt(KEYRING_KEY, reason))?;
        let keyring = parse_keyring(&plain, kv.mod_revision)?;
        self.replace_keyring(seen, keyring);
        self.current()
    }

    fn seal_keyring(&self, root: &LessSafeKey, record: &KeyringRecord) -> Result<Vec<u8>, Error> {
        let plain = Zeroizing::new(serde_json::to_vec(record).map_err(json_err)?);
        self.encrypt(root, ROOT_TERM, KEYRING_KEY, &plain)
    }

    // ---- data ----------------------------------------------------------------------------

    fn encrypt(
        &self,
        key: &LessSafeKey,
        term: u32,
        aad: &str,
        plain: &[u8],
    ) -> Result<Vec<u8>, Error> {
        let mut nonce = [0_u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| Error::Crypto("nonce generation failed".to_owned()))?;
        let mut out = Vec::with_capacity(HEADER_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(&term.to_be_bytes());
        out.push(FORMAT_V1);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut out[HEADER_LEN..],
            )
            .map_err(|_| Error::Crypto("encryption failed".to_owned()))?;
        out.extend_from_slice(tag.as_ref());
        Ok(out)
    }

    async fn decrypt(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, Error> {
        let state = self.current()?;
        let term = stored_term(value).ok_or_else(|| corrupt(key, "value too short"))?;
        let state = if state.keyring.terms.contains_key(&term) {
            state
        } else {
            // Another node may have rotated since we loaded the keyring.
            self.reload_keyring(&state).await?
        };
        let data_key = state
            .keyring
            .terms
            .get(&term)
            .ok_or_else(|| corrupt(key, format!("unknown key term {term}")))?;
        let mut plain =
            open(&data_key.key, term, key, value).map_err(|reason| corrupt(key, reason))?;
        Ok(std::mem::take(&mut *plain))
    }

    /// The value at logical `key`, decrypted.
    pub(crate) async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        self.get_revisioned(key)
            .await
            .map(|found| found.map(|(plain, _)| plain))
    }

    /// The value at logical `key`, decrypted, with the store's mod revision of that key (for
    /// [`Barrier::put_if_unchanged`]).
    pub(crate) async fn get_revisioned(
        &self,
        key: &str,
    ) -> Result<Option<(Vec<u8>, storage::Revision)>, Error> {
        self.current()?;
        if let Some((stored, revision)) = self.cached(key) {
            let plain = self.decrypt(key, &stored).await?;
            return Ok(Some((plain, revision)));
        }
        let started = self.read_generation();
        match self.storage.get(physical(key).as_bytes()).await? {
            None => Ok(None),
            Some(kv) => {
                let plain = self.decrypt(key, &kv.value).await?;
                self.remember(key, started, &kv);
                Ok(Some((plain, kv.mod_revision)))
            }
        }
    }

    /// Compare-and-swap: encrypts `value` and stores it at logical `key` only if the key's mod
    /// revision is still `revision` (as read by [`Barrier::get_revisioned`]). `false` when
    /// another writer (maybe another server) changed the key since.
    pub(crate) async fn put_if_unchanged(
        &self,
        key: &str,
        value: &[u8],
        revision: storage::Revision,
    ) -> Result<bool, Error> {
        let sealed = self.seal_value(key, value)?;
        let physical_key = physical(key).into_bytes();
        let txn = Txn::new()
            .when(Compare::ModRevision(physical_key.clone(), revision))
            .then(Op::Put {
                key: physical_key,
                value: sealed,
            });
        let result = self.storage.txn(txn).await;
        self.written(key);
        Ok(result?.succeeded)
    }

    /// Encrypts `value` with the active term and stores it at logical `key`.
    pub(crate) async fn put(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        let sealed = self.seal_value(key, value)?;
        let result = self
            .storage
            .txn(Txn::put(physical(key).into_bytes(), sealed))
            .await;
        self.written(key);
        result?;
        Ok(())
    }

    /// The stored (encrypted) form of `value` for logical `key`, with the active term.
    fn seal_value(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, Error> {
        let state = self.current()?;
        let (term, data_key) = state.keyring.active().ok_or_else(empty_keyring)?;
        self.encrypt(&data_key.key, term, key, value)
    }

    /// Deletes logical `key` (a missing key is fine).
    pub(crate) async fn delete(&self, key: &str) -> Result<(), Error> {
        self.current()?;
        let result = self
            .storage
            .txn(Txn::delete(physical(key).into_bytes()))
            .await;
        self.written(key);
        result?;
        Ok(())
    }

    /// Immediate children of logical `prefix`: `a`, `b/` (for keys under `prefix` + `b/`),
    /// sorted, relative to `prefix`.
    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<String>, Error> {
        self.current()?;
        let scanned = self
            .storage
            .scan(KeyRange::prefix(physical(prefix).into_bytes()), None)
            .await?;
        let keys: Vec<String> = scanned
            .kvs
            .iter()
            .filter_map(|kv| std::str::from_utf8(&kv.key).ok())
            .filter_map(|k| k.strip_prefix(DATA_PREFIX))
            .map(str::to_owned)
            .collect();
        Ok(secrets_sdk::storage::children(
            prefix,
            keys.iter().map(String::as_str),
        ))
    }

    /// Every logical key under `prefix` with its decrypted value, in key order. Keys are full
    /// logical keys (they start with `prefix`).
    pub(crate) async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Error> {
        self.current()?;
        let scanned = self
            .storage
            .scan(KeyRange::prefix(physical(prefix).into_bytes()), None)
            .await?;
        let mut out = Vec::with_capacity(scanned.kvs.len());
        for kv in scanned.kvs {
            let physical_key = String::from_utf8_lossy(&kv.key);
            let Some(key) = physical_key.strip_prefix(DATA_PREFIX) else {
                continue;
            };
            let value = self.decrypt(key, &kv.value).await?;
            out.push((key.to_owned(), value));
        }
        Ok(out)
    }

    /// An engine's storage: logical keys under `prefix` (e.g. `logical/<uuid>/`), seen
    /// relative to it.
    pub(crate) fn view(self: &Arc<Self>, prefix: impl Into<String>) -> Arc<dyn EngineStorage> {
        Arc::new(BarrierView {
            barrier: self.clone(),
            prefix: prefix.into(),
        })
    }
}

/// The physical key of logical `key`.
fn physical(key: &str) -> String {
    // `concat` rather than `format!`: this is on every request's path, and it sizes the
    // string once without the formatting machinery.
    [DATA_PREFIX, key].concat()
}

/// A prefix-scoped view of the barrier, as an engine sees it.
#[derive(Debug)]
struct BarrierView {
    barrier: Arc<Barrier>,
    prefix: String,
}

impl BarrierView {
    fn key(&self, key: &str) -> String {
        [self.prefix.as_str(), key].concat()
    }
}

fn storage_error(err: Error) -> StorageError {
    match err {
        Error::Sealed => StorageError::Sealed,
        other => StorageError::Backend(other.to_string()),
    }
}

#[async_trait]
impl EngineStorage for BarrierView {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.barrier
            .get(&self.key(key))
            .await
            .map_err(storage_error)
    }

    async fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        self.barrier
            .put(&self.key(key), value)
            .await
            .map_err(storage_error)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.barrier
            .delete(&self.key(key))
            .await
            .map_err(storage_error)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.barrier
            .list(&self.key(prefix))
            .await
            .map_err(storage_error)
    }
}

// ---- helpers -------------------------------------------------------------------------------

fn aead_key(raw: &[u8]) -> Result<LessSafeKey, Error> {
    UnboundKey::new(&AES_256_GCM, raw)
        .map(LessSafeKey::new)
        .map_err(|_| Error::Crypto("invalid AES-256 key".to_owned()))
}

fn stored_term(value: &[u8]) -> Option<u32> {
    let head: [u8; 4] = value.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(head))
}

/// Decrypts one stored value; the error is the reason, for [`Error::CorruptRecord`].
fn open(
    key: &LessSafeKey,
    expected_term: u32,
    aad: &str,
    value: &[u8],
) -> Result<Zeroizing<Vec<u8>>, String> {
    if value.len() < HEADER_LEN + TAG_LEN {
        return Err("value too short".to_owned());
    }
    if stored_term(value) != Some(expected_term) {
        return Err("key term mismatch".to_owned());
    }
    if value[4] != FORMAT_V1 {
        return Err(format!("unknown ciphertext version {}", value[4]));
    }
    let nonce = Nonce::try_assume_unique_for_key(&value[5..HEADER_LEN])
        .map_err(|_| "bad nonce".to_owned())?;
    let mut body = Zeroizing::new(value[HEADER_LEN..].to_vec());
    let plain_len = key
        .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut body)
        .map_err(|_| "decryption failed (wrong key, tampered or moved value)".to_owned())?
        .len();
    body.truncate(plain_len);
    Ok(body)
}

fn parse_keyring(plain: &[u8], revision: u64) -> Result<Keyring, Error> {
    let record: KeyringRecord =
        serde_json::from_slice(plain).map_err(|err| corrupt(KEYRING_KEY, err.to_string()))?;
    let mut terms = BTreeMap::new();
    for term in &record.terms {
        let raw = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(&term.key)
                .map_err(|err| corrupt(KEYRING_KEY, err.to_string()))?,
        );
        if raw.len() != KEY_LEN || term.term == ROOT_TERM {
            return Err(corrupt(KEYRING_KEY, "bad key in keyring"));
        }
        let key = aead_key(&raw)?;
        terms.insert(
            term.term,
            Term {
                key,
                raw,
                install_time_ms: term.install_time_ms,
            },
        );
    }
    if terms.is_empty() {
        return Err(empty_keyring());
    }
    Ok(Keyring { terms, revision })
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn corrupt(key: &str, reason: impl Into<String>) -> Error {
    Error::CorruptRecord {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn empty_keyring() -> Error {
    corrupt(KEYRING_KEY, "keyring has no terms")
}

fn json_err(err: serde_json::Error) -> Error {
    corrupt(KEYRING_KEY, err.to_string())
}

#[cfg(test)]
mod tests {
    use storage::{MemStorage, StorageExt};

    use super::*;

    fn barrier_over(storage: Arc<dyn Storage>) -> Barrier {
        Barrier::new(storage, Arc::new(stdx::clock::SystemClock))
    }

    /// A barrier over `storage`, initialised (keyring stored) and unsealed; returns the root key.
    async fn open_barrier(storage: &Arc<dyn Storage>) -> (Arc<Barrier>, Zeroizing<Vec<u8>>) {
        let barrier = Arc::new(barrier_over(storage.clone()));
        let root = barrier.random_key().unwrap();
        let keyring = barrier.fresh_keyring(&root).unwrap();
        storage.put(KEYRING_KEY.as_bytes(), &keyring).await.unwrap();
        assert!(barrier.unseal(&root).await.unwrap());
        barrier.set_serving(true);
        (barrier, root)
    }

    fn mem() -> Arc<dyn Storage> {
        Arc::new(MemStorage::new())
    }

    #[tokio::test]
    async fn values_round_trip_encrypted_under_the_barrier_prefix() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.put("core/mounts", b"mount table").await.unwrap();
        assert_eq!(
            barrier.get("core/mounts").await.unwrap().as_deref(),
            Some(&b"mount table"[..])
        );
        assert_eq!(barrier.get("core/missing").await.unwrap(), None);
        let raw = storage
            .get(b"secrets/barrier/core/mounts")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(raw.value.len(), HEADER_LEN + b"mount table".len() + TAG_LEN);
        assert!(!raw.value.windows(5).any(|w| w == b"mount"));
        assert_eq!(stored_term(&raw.value), Some(1));
        barrier.delete("core/mounts").await.unwrap();
        assert_eq!(barrier.get("core/mounts").await.unwrap(), None);
    }

    /// Puts `value` at logical `key` behind the barrier's back, as another writer would.
    async fn write_around(storage: &Arc<dyn Storage>, barrier: &Barrier, key: &str, value: &[u8]) {
        let sealed = barrier.seal_value(key, value).unwrap();
        storage
            .txn(Txn::put(physical(key).into_bytes(), sealed))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn cached_reads_come_from_memory_and_every_write_through_the_barrier_replaces_them() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.cache_reads();
        barrier.put("logical/kv/a", b"one").await.unwrap();
        assert_eq!(
            barrier.get("logical/kv/a").await.unwrap().as_deref(),
            Some(&b"one"[..])
        );
        // Served from memory: a change made around the barrier is not seen...
        write_around(&storage, &barrier, "logical/kv/a", b"around").await;
        assert_eq!(
            barrier.get("logical/kv/a").await.unwrap().as_deref(),
            Some(&b"one"[..])
        );
        // ...until the cache is emptied (what sealing and a restore's serving switch do).
        barrier.forget_reads();
        assert_eq!(
            barrier.get("logical/kv/a").await.unwrap().as_deref(),
            Some(&b"around"[..])
        );
        // Writes through the barrier are seen at once, with their revisions.
        barrier.put("logical/kv/a", b"two").await.unwrap();
        let (value, revision) = barrier
            .get_revisioned("logical/kv/a")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(value, b"two");
        assert!(
            barrier
                .put_if_unchanged("logical/kv/a", b"three", revision)
                .await
                .unwrap()
        );
        assert_eq!(
            barrier.get("logical/kv/a").await.unwrap().as_deref(),
            Some(&b"three"[..])
        );
        assert!(
            !barrier
                .put_if_unchanged("logical/kv/a", b"stale", revision)
                .await
                .unwrap()
        );
        assert_eq!(
            barrier.get("logical/kv/a").await.unwrap().as_deref(),
            Some(&b"three"[..])
        );
        barrier.delete("logical/kv/a").await.unwrap();
        assert_eq!(barrier.get("logical/kv/a").await.unwrap(), None);
        // Sealing empties it: after unsealing, the store is read again.
        barrier.put("logical/kv/b", b"kept").await.unwrap();
        barrier.get("logical/kv/b").await.unwrap();
        write_around(&storage, &barrier, "logical/kv/b", b"new").await;
        barrier.seal();
        assert!(barrier.lock_reads().entries.is_empty());
    }

    #[tokio::test]
    async fn a_read_that_began_before_a_write_keeps_nothing() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.cache_reads();
        barrier.put("k", b"old").await.unwrap();
        // A read takes its generation, the store answers it the old value, a write lands and
        // is answered, then the read would keep what it read: it must not.
        let started = barrier.read_generation();
        let old = storage
            .get(physical("k").as_bytes())
            .await
            .unwrap()
            .unwrap();
        barrier.put("k", b"new").await.unwrap();
        barrier.remember("k", started, &old);
        assert!(barrier.cached("k").is_none());
        assert_eq!(
            barrier.get("k").await.unwrap().as_deref(),
            Some(&b"new"[..])
        );
        assert!(barrier.cached("k").is_some());
    }

    #[tokio::test]
    async fn without_cache_reads_every_read_goes_to_the_store() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.put("k", b"one").await.unwrap();
        barrier.get("k").await.unwrap();
        write_around(&storage, &barrier, "k", b"two").await;
        assert_eq!(
            barrier.get("k").await.unwrap().as_deref(),
            Some(&b"two"[..])
        );
        assert!(barrier.cached("k").is_none());
    }

    #[tokio::test]
    async fn same_plaintext_encrypts_differently_each_time() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.put("a", b"same").await.unwrap();
        let first = storage.get(b"secrets/barrier/a").await.unwrap().unwrap();
        barrier.put("a", b"same").await.unwrap();
        let second = storage.get(b"secrets/barrier/a").await.unwrap().unwrap();
        assert_ne!(first.value, second.value);
    }

    #[tokio::test]
    async fn sealed_barrier_refuses_everything() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.put("k", b"v").await.unwrap();
        barrier.seal();
        assert!(barrier.is_sealed());
        assert!(matches!(barrier.get("k").await, Err(Error::Sealed)));
        assert!(matches!(barrier.put("k", b"v").await, Err(Error::Sealed)));
        assert!(matches!(barrier.delete("k").await, Err(Error::Sealed)));
        assert!(matches!(barrier.list("").await, Err(Error::Sealed)));
        assert!(matches!(barrier.scan("").await, Err(Error::Sealed)));
        assert!(matches!(barrier.key_status(), Err(Error::Sealed)));
        assert!(matches!(barrier.rotate().await, Err(Error::Sealed)));
        let view = barrier.view("logical/x/");
        assert_eq!(view.get("k").await, Err(StorageError::Sealed));
    }

    #[tokio::test]
    async fn a_value_moved_to_another_key_or_tampered_is_a_corrupt_record() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        barrier.put("sys/token/id/a", b"token a").await.unwrap();
        let raw = storage
            .get(b"secrets/barrier/sys/token/id/a")
            .await
            .unwrap()
            .unwrap()
            .value;
        storage
            .put(b"secrets/barrier/sys/token/id/b", &raw)
            .await
            .unwrap();
        assert!(matches!(
            barrier.get("sys/token/id/b").await,
            Err(Error::CorruptRecord { .. })
        ));
        let mut flipped = raw.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        storage
            .put(b"secrets/barrier/sys/token/id/a", &flipped)
            .await
            .unwrap();
        assert!(matches!(
            barrier.get("sys/token/id/a").await,
            Err(Error::CorruptRecord { .. })
        ));
        for garbage in [
            &b""[..],
            b"\x00",
            b"\x00\x00\x00\x01\x01short",
            &raw[..HEADER_LEN],
        ] {
            storage.put(b"secrets/barrier/junk", garbage).await.unwrap();
            assert!(matches!(
                barrier.get("junk").await,
                Err(Error::CorruptRecord { .. })
            ));
        }
        let mut unknown_term = raw;
        unknown_term[..4].copy_from_slice(&77_u32.to_be_bytes());
        storage
            .put(b"secrets/barrier/junk", &unknown_term)
            .await
            .unwrap();
        assert!(matches!(
            barrier.get("junk").await,
            Err(Error::CorruptRecord { .. })
        ));
    }

    #[tokio::test]
    async fn list_returns_sorted_immediate_children_and_scan_every_key() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        for key in ["p/b", "p/a", "p/dir/x", "p/dir/y", "q/other"] {
            barrier.put(key, key.as_bytes()).await.unwrap();
        }
        assert_eq!(barrier.list("p/").await.unwrap(), ["a", "b", "dir/"]);
        assert_eq!(barrier.list("").await.unwrap(), ["p/", "q/"]);
        assert!(barrier.list("none/").await.unwrap().is_empty());
        let scanned = barrier.scan("p/dir/").await.unwrap();
        assert_eq!(
            scanned,
            vec![
                ("p/dir/x".to_owned(), b"p/dir/x".to_vec()),
                ("p/dir/y".to_owned(), b"p/dir/y".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn views_are_scoped_to_their_prefix() {
        let storage = mem();
        let (barrier, _) = open_barrier(&storage).await;
        let one = barrier.view("logical/one/");
        let two = barrier.view("logical/two/");
        one.put("config", b"1").await.unwrap();
        one.put("roles/r", b"r").await.unwrap();
        assert_eq!(one.get("config").await.unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(two.get("config").await.unwrap(), None);
        assert_eq!(one.list("").await.unwrap(), ["config", "roles/"]);
        assert_eq!(
            barrier.get("logical/one/roles/r").await.unwrap().as_deref(),
            Some(&b"r"[..])
        );
        one.delete("config").await.unwrap();
        assert_eq!(one.get("config").await.unwrap(), None);
    }

    #[tokio::test]
    async fn rotation_adds_a_term_and_old_values_still_decrypt_after_reopen() {
        let storage = mem();
        let (barrier, root) = open_barrier(&storage).await;
        assert_eq!(barrier.key_status().unwrap().term, 1);
        barrier.put("old", b"written with term 1").await.unwrap();
        let status = barrier.rotate().await.unwrap();
        assert_eq!(status.term, 2);
        assert_eq!(barrier.key_status().unwrap().term, 2);
        barrier.put("new", b"written with term 2").await.unwrap();
        let raw = storage.get(b"secrets/barrier/new").await.unwrap().unwrap();
        assert_eq!(stored_term(&raw.value), Some(2));
        assert_eq!(
            barrier.get("old").await.unwrap().as_deref(),
            Some(&b"written with term 1"[..])
        );

        // A second barrier (another node, or a restart) over the same store.
        let other = barrier_over(storage.clone());
        assert!(other.unseal(&root).await.unwrap());
        assert_eq!(other.key_status().unwrap().term, 2);
        assert_eq!(
            other.get("old").await.unwrap().as_deref(),
            Some(&b"written with term 1"[..])
        );
        // The first node rotates again; the other learns term 3 on first use.
        barrier.rotate().await.unwrap();
        barrier.put("newer", b"term 3").await.unwrap();
        assert_eq!(
            other.get("newer").await.unwrap().as_deref(),
            Some(&b"term 3"[..])
        );
        // And a rotation from a node with a stale keyring retries on top of the latest.
        let stale = barrier_over(storage.clone());
        assert!(stale.unseal(&root).await.unwrap());
        barrier.rotate().await.unwrap();
        assert_eq!(stale.rotate().await.unwrap().term, 5);
    }

    #[tokio::test]
    async fn a_wrong_root_key_does_not_unseal() {
        let storage = mem();
        let (barrier, root) = open_barrier(&storage).await;
        barrier.seal();
        let mut wrong = root.to_vec();
        wrong[0] ^= 0xff;
        assert!(!barrier.unseal(&wrong).await.unwrap());
        assert!(!barrier.unseal(&root[..16]).await.unwrap());
        assert!(barrier.is_sealed());
        assert!(barrier.unseal(&root).await.unwrap());
        assert!(barrier.is_sealed(), "keys loaded, not serving yet");
        assert_eq!(barrier.get("nothing").await.unwrap(), None);
        barrier.set_serving(true);
        assert!(!barrier.is_sealed());
        let uninitialized = barrier_over(mem());
        assert!(matches!(
            uninitialized.unseal(&root).await,
            Err(Error::InitState(_))
        ));
    }

    #[tokio::test]
    async fn barrier_values_never_reach_a_redb_file_in_clear() {
        let dir = tempfile::tempdir().unwrap();
        let secret_values: Vec<String> = (0..50)
            .map(|i| format!("very-secret-value-{i}-{}", uuid::Uuid::new_v4()))
            .collect();
        let root;
        {
            let storage: Arc<dyn Storage> =
                Arc::new(storage_redb::RedbStorage::open(&dir.path().join("data.redb")).unwrap());
            let (barrier, root_key) = open_barrier(&storage).await;
            root = root_key;
            for (i, value) in secret_values.iter().enumerate() {
                barrier
                    .put(&format!("logical/kv/item{i}"), value.as_bytes())
                    .await
                    .unwrap();
                if i == 25 {
                    barrier.rotate().await.unwrap();
                }
            }
            storage.close().await.unwrap();
        }
        let mut needles: Vec<Vec<u8>> = secret_values
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect();
        needles.push(root.to_vec());
        needles.push(b64(&root).into_bytes());
        let mut files = 0;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            files += 1;
            for needle in &needles {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                    "a secret value reached the disk in clear"
                );
            }
        }
        assert!(files >= 1);
        // And the data is really there: reopen and read it back.
        let storage: Arc<dyn Storage> =
            Arc::new(storage_redb::RedbStorage::open(&dir.path().join("data.redb")).unwrap());
        let barrier = barrier_over(storage.clone());
        assert!(barrier.unseal(&root).await.unwrap());
        assert_eq!(
            barrier.get("logical/kv/item0").await.unwrap(),
            Some(secret_values[0].as_bytes().to_vec())
        );
        assert_eq!(
            barrier.get("logical/kv/item49").await.unwrap(),
            Some(secret_values[49].as_bytes().to_vec())
        );
        storage.close().await.unwrap();
    }
}
