//! Encryption at rest of the credentials the platform keeps: a [`SealedStorage`] view of the
//! shared store that seals, with AES-256-GCM, the value of every key under [`SEALED_PREFIXES`]
//! (VCS OAuth tokens, the SMTP, SMS and cost-estimation settings, the URL signing key) as it
//! is written and opens it as it is read, so the records' code (`store/`) and the handlers
//! never see ciphertext and never write those records in clear.
//!
//! The key: TFE's `encryption_password` ([`crate::Config::encryption_password`]) stretched with
//! PBKDF2-HMAC-SHA256 ([`PBKDF2_ITERATIONS`] by default, the count recorded with the key) over a
//! random salt kept in the store at
//! [`key_record_key`] with a check value sealed under the key; without a password (`cairn dev`
//! on a temporary store) a random key lives only in memory and the record says so, so a later
//! start cannot read that store's credentials and says why (a later start of a store in which
//! nothing was sealed yet just makes a new key).
//!
//! Where it sits: [`crate::State::open`] calls [`open`], which derives the key, refuses a wrong
//! password, and seals any value an older release stored in clear ([`migrate`]); the state's
//! storage is then the [`SealedStorage`] over the raw store.
//!
//! Invariants:
//! - A sealed value is `MAGIC || nonce (12 random bytes, one per write) || ciphertext+tag`
//!   with the key as associated data, so a value moved to another key does not open. Stored
//!   JSON never starts with [`MAGIC`]'s zero byte, so a value is sealed or legacy clear JSON,
//!   never ambiguous; clear values are read as they are until `migrate` (at every start) or the
//!   next write seals them.
//! - The password and the derived key are never stored; only the salt, the iteration count
//!   and the check value are.
//! - Compares hold on revisions, never values, so transactions pass through unchanged apart
//!   from their puts' values.

use std::sync::Arc;

use async_trait::async_trait;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use storage::{
    Compare, Event, EventKind, KeyRange, KeyValue, Op, Revision, ScanResult, Snapshot, Storage,
    Txn, TxnResult, WatchStream,
};

use crate::Error;
use crate::store::{PREFIX, RECORD_VERSION};

/// The key families sealed at rest (exact keys or prefixes under `platform/`).
pub(crate) const SEALED_PREFIXES: &[&str] = &[
    "platform/oauth-tokens/",
    "platform/site-settings/smtp",
    "platform/site-settings/sms",
    "platform/site-settings/cost-estimation",
    "platform/url-signing-key",
];

/// The first bytes of a sealed value (format version 1).
const MAGIC: &[u8] = b"\0cairn-sealed-1\0";

/// PBKDF2-HMAC-SHA256 rounds over the password (OWASP's 2023 figure for this hash).
pub(crate) const PBKDF2_ITERATIONS: u32 = 600_000;

/// What the check value seals.
const CHECK_PLAINTEXT: &[u8] = b"cairn platform encryption check";

/// Where the salt and the check value live (not sealed: they are what opens the rest).
pub(crate) fn key_record_key() -> Vec<u8> {
    format!("{PREFIX}encryption").into_bytes()
}

/// Whether `key`'s value is sealed at rest.
pub(crate) fn is_sealed_key(key: &[u8]) -> bool {
    SEALED_PREFIXES
        .iter()
        .any(|prefix| key.starts_with(prefix.as_bytes()))
}

/// Whether `value` is in the sealed format.
pub(crate) fn is_sealed_value(value: &[u8]) -> bool {
    value.starts_with(MAGIC)
}

/// How the key was made, as the key record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Kdf {
    /// From `encryption_password`.
    Pbkdf2HmacSha256,
    /// A random key of one run, never stored (`cairn dev` without a password).
    RandomPerRun,
}

/// The stored key record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct KeyRecord {
    version: u32,
    kdf: Kdf,
    #[serde(default)]
    iterations: u32,
    /// Base64 of 16 random bytes.
    #[serde(default)]
    salt: String,
    /// Base64 of [`CHECK_PLAINTEXT`] sealed under the key, with the record's key as AAD.
    check: String,
}

/// An AES-256-GCM key and a random source.
pub(crate) struct Cipher {
    key: LessSafeKey,
    random: SystemRandom,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(..)")
    }
}

impl Cipher {
    fn new(key: &[u8; 32]) -> Result<Cipher, Error> {
        let unbound = UnboundKey::new(&AES_256_GCM, key)
            .map_err(|_| Error::Internal("cannot build the encryption key".to_owned()))?;
        Ok(Cipher {
            key: LessSafeKey::new(unbound),
            random: SystemRandom::new(),
        })
    }

    fn from_password(password: &str, salt: &[u8], iterations: u32) -> Result<Cipher, Error> {
        let rounds = std::num::NonZeroU32::new(iterations)
            .ok_or_else(|| Error::Encryption("the key record has no iteration count".into()))?;
        let mut key = [0u8; 32];
        aws_lc_rs::pbkdf2::derive(
            aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
            rounds,
            salt,
            password.as_bytes(),
            &mut key,
        );
        Cipher::new(&key)
    }

    fn random() -> Result<Cipher, Error> {
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| Error::Internal("no randomness for the encryption key".to_owned()))?;
        Cipher::new(&key)
    }

    /// `plaintext` sealed for `key` (the associated data).
    pub(crate) fn seal(&self, key: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, storage::Error> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| storage::Error::Backend("no randomness for a nonce".to_owned()))?;
        let mut sealed = Vec::with_capacity(MAGIC.len() + NONCE_LEN + plaintext.len() + 16);
        sealed.extend_from_slice(MAGIC);
        sealed.extend_from_slice(&nonce);
        let mut body = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key),
                &mut body,
            )
            .map_err(|_| storage::Error::Backend("sealing a record failed".to_owned()))?;
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// The plaintext of `value` stored at `key`: opened when sealed, as is when in clear (a
    /// record from before encryption).
    pub(crate) fn open(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, storage::Error> {
        let Some(rest) = value.strip_prefix(MAGIC) else {
            return Ok(value);
        };
        let failed = || {
            storage::Error::Backend(format!(
                "cannot decrypt the record at {}",
                String::from_utf8_lossy(key)
            ))
        };
        if rest.len() < NONCE_LEN {
            return Err(failed());
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| failed())?;
        let mut body = body.to_vec();
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(key), &mut body)
            .map_err(|_| failed())?
            .len();
        body.truncate(plain_len);
        Ok(body)
    }
}

/// The store as the platform sees it: values under [`SEALED_PREFIXES`] sealed on the way in
/// and opened on the way out; everything else passes through.
#[derive(Debug)]
pub(crate) struct SealedStorage {
    inner: Arc<dyn Storage>,
    cipher: Arc<Cipher>,
}

impl SealedStorage {
    pub(crate) fn new(inner: Arc<dyn Storage>, cipher: Cipher) -> SealedStorage {
        SealedStorage {
            inner,
            cipher: Arc::new(cipher),
        }
    }

    fn open_kv(&self, mut kv: KeyValue) -> storage::Result<KeyValue> {
        if is_sealed_key(&kv.key) {
            kv.value = self.cipher.open(&kv.key, std::mem::take(&mut kv.value))?;
        }
        Ok(kv)
    }

    fn seal_ops(&self, ops: Vec<Op>) -> storage::Result<Vec<Op>> {
        ops.into_iter()
            .map(|op| match op {
                Op::Put { key, value } if is_sealed_key(&key) => {
                    let value = self.cipher.seal(&key, &value)?;
                    Ok(Op::Put { key, value })
                }
                other => Ok(other),
            })
            .collect()
    }
}

#[async_trait]
impl Storage for SealedStorage {
    async fn get(&self, key: &[u8]) -> storage::Result<Option<KeyValue>> {
        self.inner
            .get(key)
            .await?
            .map(|kv| self.open_kv(kv))
            .transpose()
    }

    async fn scan(&self, range: KeyRange, limit: Option<usize>) -> storage::Result<ScanResult> {
        let mut scan = self.inner.scan(range, limit).await?;
        scan.kvs = std::mem::take(&mut scan.kvs)
            .into_iter()
            .map(|kv| self.open_kv(kv))
            .collect::<storage::Result<_>>()?;
        Ok(scan)
    }

    async fn txn(&self, txn: Txn) -> storage::Result<TxnResult> {
        let sealed = Txn {
            compares: txn.compares,
            success: self.seal_ops(txn.success)?,
            failure: self.seal_ops(txn.failure)?,
        };
        self.inner.txn(sealed).await
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
        let cipher = Arc::clone(&self.cipher);
        let events = self.inner.watch(range, after).await?;
        Ok(WatchStream::from_stream(events.map(move |event| {
            let mut event: Event = event?;
            if event.kind == EventKind::Put && is_sealed_key(&event.key) {
                event.value = cipher.open(&event.key, std::mem::take(&mut event.value))?;
            }
            Ok(event)
        })))
    }

    /// The raw store's snapshot: sealed values stay sealed in it.
    async fn snapshot(&self) -> storage::Result<Snapshot> {
        self.inner.snapshot().await
    }

    async fn restore(&self, snapshot: &Snapshot) -> storage::Result<Revision> {
        self.inner.restore(snapshot).await
    }

    async fn close(&self) -> storage::Result<()> {
        self.inner.close().await
    }
}

/// The cipher of the store at `raw` for `password` (see the module doc), creating the key
/// record on a store's first start; a wrong password, or a store whose key was random, is an
/// [`Error::Encryption`] saying what to do.
pub(crate) async fn open(
    raw: &dyn Storage,
    password: Option<&str>,
    iterations: u32,
) -> Result<Cipher, Error> {
    let record_key = key_record_key();
    for _ in 0..2 {
        let compare = match raw.get(&record_key).await? {
            None => Compare::Missing(record_key.clone()),
            Some(kv) => {
                let record: KeyRecord = crate::store::decode(&kv.key, &kv.value)?;
                // A random key of an earlier run that sealed nothing is replaced: no
                // credential is lost with it.
                if record.kdf == Kdf::RandomPerRun && !holds_sealed_values(raw).await? {
                    Compare::ModRevision(record_key.clone(), kv.mod_revision)
                } else {
                    return unlock(&record, password, &record_key);
                }
            }
        };
        let (cipher, record) = match password {
            Some(password) => {
                let mut salt = [0u8; 16];
                SystemRandom::new()
                    .fill(&mut salt)
                    .map_err(|_| Error::Internal("no randomness for a salt".to_owned()))?;
                let iterations = iterations.max(1);
                let cipher = Cipher::from_password(password, &salt, iterations)?;
                let record = KeyRecord {
                    version: RECORD_VERSION,
                    kdf: Kdf::Pbkdf2HmacSha256,
                    iterations,
                    salt: STANDARD.encode(salt),
                    check: STANDARD.encode(cipher.seal(&record_key, CHECK_PLAINTEXT)?),
                };
                (cipher, record)
            }
            None => {
                let cipher = Cipher::random()?;
                let record = KeyRecord {
                    version: RECORD_VERSION,
                    kdf: Kdf::RandomPerRun,
                    iterations: 0,
                    salt: String::new(),
                    check: STANDARD.encode(cipher.seal(&record_key, CHECK_PLAINTEXT)?),
                };
                (cipher, record)
            }
        };
        let txn = Txn::new()
            .when(compare)
            .then(crate::store::put(record_key.clone(), &record)?);
        if raw.txn(txn).await?.succeeded {
            return Ok(cipher);
        }
    }
    Err(Error::Contention)
}

/// Whether any value under [`SEALED_PREFIXES`] is sealed.
async fn holds_sealed_values(raw: &dyn Storage) -> Result<bool, Error> {
    for prefix in SEALED_PREFIXES {
        let scan = raw.scan(KeyRange::prefix(*prefix), None).await?;
        if scan.kvs.iter().any(|kv| is_sealed_value(&kv.value)) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn unlock(record: &KeyRecord, password: Option<&str>, record_key: &[u8]) -> Result<Cipher, Error> {
    let cipher = match (record.kdf, password) {
        (Kdf::RandomPerRun, _) => {
            return Err(Error::Encryption(
                "this store's platform credentials were encrypted under a random key of an \
                 earlier `cairn dev` run (no encryption password was set) and cannot be read; \
                 start with a fresh data directory"
                    .to_owned(),
            ));
        }
        (Kdf::Pbkdf2HmacSha256, None) => {
            return Err(Error::Encryption(
                "this store's platform credentials are encrypted: set the platform's \
                 encryption password (`platform { encryption_password = \"...\" }` or \
                 CAIRN_PLATFORM_ENCRYPTION_PASSWORD)"
                    .to_owned(),
            ));
        }
        (Kdf::Pbkdf2HmacSha256, Some(password)) => {
            let salt = STANDARD
                .decode(&record.salt)
                .map_err(|err| Error::CorruptRecord {
                    key: String::from_utf8_lossy(record_key).into_owned(),
                    reason: err.to_string(),
                })?;
            Cipher::from_password(password, &salt, record.iterations)?
        }
    };
    let check = STANDARD
        .decode(&record.check)
        .map_err(|err| Error::CorruptRecord {
            key: String::from_utf8_lossy(record_key).into_owned(),
            reason: err.to_string(),
        })?;
    match cipher.open(record_key, check) {
        Ok(plain) if plain == CHECK_PLAINTEXT => Ok(cipher),
        _ => Err(Error::Encryption(
            "the platform's encryption password is not the one this store was written with"
                .to_owned(),
        )),
    }
}

/// Seals every value under [`SEALED_PREFIXES`] still stored in clear (written before
/// encryption); each rewrite compares the revision it read, so a concurrent write (sealed
/// already) wins. Returns how many records it sealed.
pub(crate) async fn migrate(raw: &dyn Storage, sealed: &SealedStorage) -> Result<usize, Error> {
    let mut count = 0;
    for prefix in SEALED_PREFIXES {
        let scan = raw.scan(KeyRange::prefix(*prefix), None).await?;
        for kv in scan.kvs {
            if is_sealed_value(&kv.value) {
                continue;
            }
            let txn = Txn::new()
                .when(Compare::ModRevision(kv.key.clone(), kv.mod_revision))
                .then(Op::Put {
                    key: kv.key,
                    value: kv.value,
                });
            if sealed.txn(txn).await?.succeeded {
                count += 1;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use storage::{MemStorage, StorageExt};

    use super::*;

    #[test]
    fn a_sealed_value_opens_only_at_its_key_and_under_its_key() {
        let cipher = Cipher::random().unwrap();
        let sealed = cipher.seal(b"platform/a", b"secret").unwrap();
        assert!(is_sealed_value(&sealed));
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(
            cipher.open(b"platform/a", sealed.clone()).unwrap(),
            b"secret"
        );
        assert!(cipher.open(b"platform/b", sealed.clone()).is_err());
        assert!(
            Cipher::random()
                .unwrap()
                .open(b"platform/a", sealed)
                .is_err()
        );
        // Two seals of one value differ (a nonce per write).
        assert_ne!(
            cipher.seal(b"k", b"v").unwrap(),
            cipher.seal(b"k", b"v").unwrap()
        );
        // A legacy clear value reads as is.
        assert_eq!(
            cipher.open(b"k", b"{\"a\":1}".to_vec()).unwrap(),
            b"{\"a\":1}"
        );
    }

    #[tokio::test]
    async fn only_the_sealed_families_are_sealed_and_clear_records_migrate() {
        let raw: Arc<dyn Storage> = Arc::new(MemStorage::new());
        raw.put(b"platform/site-settings/smtp", b"{\"password\":\"old\"}")
            .await
            .unwrap();
        let cipher = open(raw.as_ref(), None, PBKDF2_ITERATIONS).await.unwrap();
        let view = SealedStorage::new(Arc::clone(&raw), cipher);
        assert_eq!(
            view.get(b"platform/site-settings/smtp")
                .await
                .unwrap()
                .unwrap()
                .value,
            b"{\"password\":\"old\"}"
        );
        assert_eq!(migrate(raw.as_ref(), &view).await.unwrap(), 1);
        assert_eq!(migrate(raw.as_ref(), &view).await.unwrap(), 0);
        view.put(b"platform/oauth-tokens/ot-1", b"{\"token\":\"tok\"}")
            .await
            .unwrap();
        view.put(b"platform/users/u-1", b"{\"name\":\"u\"}")
            .await
            .unwrap();
        let raw_smtp = raw
            .get(b"platform/site-settings/smtp")
            .await
            .unwrap()
            .unwrap();
        assert!(is_sealed_value(&raw_smtp.value));
        let raw_token = raw
            .get(b"platform/oauth-tokens/ot-1")
            .await
            .unwrap()
            .unwrap();
        assert!(is_sealed_value(&raw_token.value));
        let raw_user = raw.get(b"platform/users/u-1").await.unwrap().unwrap();
        assert_eq!(raw_user.value, b"{\"name\":\"u\"}");
        let scanned = view.scan_prefix(b"platform/").await.unwrap();
        assert!(scanned.kvs.iter().all(|kv| !is_sealed_value(&kv.value)));
    }

    #[tokio::test]
    async fn a_random_key_store_refuses_a_later_start_once_it_sealed_something() {
        let raw: Arc<dyn Storage> = Arc::new(MemStorage::new());
        // Nothing sealed yet: a later start replaces the lost key.
        open(raw.as_ref(), None, PBKDF2_ITERATIONS).await.unwrap();
        let cipher = open(raw.as_ref(), None, PBKDF2_ITERATIONS).await.unwrap();
        let view = SealedStorage::new(Arc::clone(&raw), cipher);
        view.put(b"platform/url-signing-key", b"{}").await.unwrap();
        let err = open(raw.as_ref(), None, PBKDF2_ITERATIONS)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("random key"), "{err}");
    }

    #[tokio::test]
    async fn the_iteration_count_of_the_first_start_is_recorded_and_used_by_later_ones() {
        let raw: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let first = open(raw.as_ref(), Some("dev-random-password"), 1)
            .await
            .unwrap();
        let stored = raw.get(&key_record_key()).await.unwrap().unwrap();
        let record: KeyRecord = crate::store::decode(&stored.key, &stored.value).unwrap();
        assert_eq!(record.iterations, 1);
        let view = SealedStorage::new(Arc::clone(&raw), first);
        view.put(b"platform/url-signing-key", b"{\"k\":1}")
            .await
            .unwrap();
        // A later start with the default count still opens it: the record's count is used.
        let again = open(raw.as_ref(), Some("dev-random-password"), PBKDF2_ITERATIONS)
            .await
            .unwrap();
        let view = SealedStorage::new(Arc::clone(&raw), again);
        let read = view
            .get(b"platform/url-signing-key")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.value, b"{\"k\":1}");
        assert!(open(raw.as_ref(), Some("wrong"), 1).await.is_err());
    }
}
