//! The KV store's writes: plain and check-and-set puts, lock acquire and release, deletes.
//!
//! Where it sits: called by the `/v1/kv` handlers (`kv.rs`) once they have parsed and
//! authorized a request; keeps the entries and lock-delays of `store/kv.rs` and the sessions'
//! lock records of `store/sessions.rs` in step.
//!
//! Acquire and release follow Consul exactly (docs/design.md §U8): a live lock-delay on the key makes
//! acquire answer `false` before anything else; an unknown session is a 400
//! `invalid session "<id>"` (Consul: 500); the holder re-acquiring keeps `LockIndex`; another
//! holder gets `false`; a free key gets `LockIndex + 1`, a new one 1. Release by a non-holder is
//! `false` and does not look the session up. Plain PUTs keep the entry's `Session` and
//! `LockIndex` (locks are advisory); neither release nor DELETE sets a lock-delay.
//!
//! Invariants: every write is one transaction guarded by the key's mod revision (and for acquire
//! the session's), retried on a lost race up to [`MAX_ATTEMPTS`] times, under the key's lock on
//! this server (`State::lock_kv_key`), so only writers on other servers can make it lose. An
//! acquire writes the session's lock record in the same transaction unless the entry's
//! `lock_record` already names the session (its record exists: `store/kv.rs`); release leaves
//! the lock record in place (a stale one, which invalidation ignores), so a holder that
//! releases and acquires again writes one record per request. Deleting an entry deletes the
//! lock record its `lock_record` (or, in an older entry, its `Session`) names.

use storage::{Compare, KeyValue, Op, Txn};

use crate::domain::MAX_ATTEMPTS;
use crate::domain::sessions::{lock_record_op, parse_session_id};
use crate::store::decode;
use crate::store::kv::{self as kv_store, EntryRecord, KvLockState, LockDelayRecord};
use crate::store::sessions;
use crate::{Error, State};

/// What a PUT writes.
#[derive(Debug)]
pub(crate) struct Put<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) key: &'a str,
    pub(crate) flags: u64,
    /// The value's bytes as sent (stored base64-encoded; empty is Consul's `null`).
    pub(crate) value: &'a [u8],
}

impl Put<'_> {
    /// The stored entry this PUT writes, with these lock fields.
    fn record(&self, session: Option<&str>, lock_index: u64, lock_record: Option<&str>) -> Vec<u8> {
        EntryRecord {
            flags: self.flags,
            value: self.value,
            session,
            lock_index,
            lock_record,
        }
        .encode()
    }
}

/// Reads the lock fields of the entry at `kv_key` (every write replaces the rest), with its mod
/// revision (0 when missing).
async fn load_entry(state: &State, kv_key: &[u8]) -> Result<(Option<KvLockState>, u64), Error> {
    entry_lock_state(state.storage().get(kv_key).await?)
}

/// The lock fields and mod revision (0 when missing) of an entry as read.
fn entry_lock_state(entry: Option<KeyValue>) -> Result<(Option<KvLockState>, u64), Error> {
    match entry {
        Some(kv) => Ok((
            Some(KvLockState::read(&kv.key, &kv.value)?),
            kv.mod_revision,
        )),
        None => Ok((None, 0)),
    }
}

/// A plain or check-and-set PUT (`cas`: the mod revision the entry must still have, 0 for
/// none): keeps the entry's session and lock index. `false` when the check failed.
pub(crate) async fn put(state: &State, request: &Put<'_>, cas: Option<u64>) -> Result<bool, Error> {
    let kv_key = kv_store::kv_key(request.namespace, request.key);
    let _key_lock = state.lock_kv_key(request.namespace, request.key).await;
    for _ in 0..MAX_ATTEMPTS {
        let (existing, revision) = load_entry(state, &kv_key).await?;
        if cas.is_some_and(|cas| cas != revision) {
            return Ok(false);
        }
        let (session, lock_index, lock_record) = existing.map_or((None, 0, None), |e| {
            (e.session, e.lock_index, e.lock_record)
        });
        let value = request.record(session.as_deref(), lock_index, lock_record.as_deref());
        let txn = Txn::new()
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .then(Op::Put {
                key: kv_key.clone(),
                value,
            });
        if state.storage().txn(txn).await?.succeeded {
            return Ok(true);
        }
        if cas.is_some() {
            return Ok(false);
        }
    }
    Err(Error::Contention)
}

/// Acquires the key's lock for `session` with this write (Consul's rules in the module docs).
pub(crate) async fn acquire(
    state: &State,
    request: &Put<'_>,
    session: &str,
) -> Result<bool, Error> {
    let storage = state.storage();
    let kv_key = kv_store::kv_key(request.namespace, request.key);
    let delay_key = kv_store::lock_delay_key(request.namespace, request.key);
    let id = parse_session_id(session);
    let session_key = id.as_deref().map(sessions::session_key);
    let invalid = || Error::Invalid(format!("invalid session {session:?}"));
    let _key_lock = state.lock_kv_key(request.namespace, request.key).await;
    for _ in 0..MAX_ATTEMPTS {
        // The three records acquire checks, in one read: the key's lock-delay, its entry and
        // the session (only a well-formed id is looked up).
        let mut keys: Vec<&[u8]> = vec![&delay_key, &kv_key];
        keys.extend(session_key.as_deref());
        let mut read = storage.get_many(&keys).await?.into_iter();
        let (delay, entry) = (read.next().flatten(), read.next().flatten());
        let session_kv = read.next().flatten();
        // 1. A live lock-delay refuses before anything else.
        let mut txn = Txn::new();
        if let Some(delay) = delay {
            let record: LockDelayRecord = decode(&delay.key, &delay.value)?;
            if record.until_ms > state.now_ms() {
                tracing::debug!(message = "Rejecting lock of key due to lock-delay.", key = %request.key);
                return Ok(false);
            }
            // Expired: clean it up with this write.
            txn = txn
                .when(Compare::ModRevision(delay_key.clone(), delay.mod_revision))
                .then(Op::Delete {
                    key: delay_key.clone(),
                });
        }
        // 2. The session must exist (its record is not decoded: the transaction checks it is
        // still the same).
        let (Some(id), Some(session_key), Some(session_kv)) = (&id, &session_key, session_kv)
        else {
            return Err(invalid());
        };
        // 3. The key's holder decides.
        let (existing, revision) = entry_lock_state(entry)?;
        let (lock_index, recorded) = match existing {
            None => (1, false),
            Some(entry) => {
                let recorded = entry.lock_record.as_deref() == Some(id.as_str());
                match entry.session {
                    Some(holder) if &holder == id => (entry.lock_index, recorded),
                    Some(_) => return Ok(false),
                    None => (entry.lock_index + 1, recorded),
                }
            }
        };
        let value = request.record(Some(id.as_str()), lock_index, Some(id.as_str()));
        txn = txn
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .when(Compare::ModRevision(
                session_key.clone(),
                session_kv.mod_revision,
            ))
            .then(Op::Put {
                key: kv_key.clone(),
                value,
            });
        if !recorded {
            // The session's record of this key, unless this entry (whose mod revision the
            // transaction checks) says it exists already.
            txn = txn.then(lock_record_op(id, request.namespace, request.key)?);
        }
        if storage.txn(txn).await?.succeeded {
            return Ok(true);
        }
    }
    Err(Error::Contention)
}

/// Releases the key's lock held by `session` with this write; `false` if it does not hold it.
pub(crate) async fn release(
    state: &State,
    request: &Put<'_>,
    session: &str,
) -> Result<bool, Error> {
    let kv_key = kv_store::kv_key(request.namespace, request.key);
    let id = parse_session_id(session).unwrap_or_else(|| session.to_owned());
    let _key_lock = state.lock_kv_key(request.namespace, request.key).await;
    for _ in 0..MAX_ATTEMPTS {
        let (existing, revision) = load_entry(state, &kv_key).await?;
        let Some(entry) = existing else {
            return Ok(false);
        };
        if entry.session.as_deref() != Some(id.as_str()) {
            return Ok(false);
        }
        // The lock record stays: the entry's `lock_record` still names it (module docs).
        let value = request.record(None, entry.lock_index, entry.lock_record.as_deref());
        let txn = Txn::new()
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .then(Op::Put {
                key: kv_key.clone(),
                value,
            });
        if state.storage().txn(txn).await?.succeeded {
            return Ok(true);
        }
    }
    Err(Error::Contention)
}

/// Deletes every entry of `namespace` under `prefix`. Lock records of deleted keys go stale;
/// invalidation ignores those.
pub(crate) async fn delete_tree(state: &State, namespace: &str, prefix: &str) -> Result<(), Error> {
    let txn = Txn::new().then(Op::DeleteRange(kv_store::kv_range(namespace, prefix)));
    state.storage().txn(txn).await?;
    Ok(())
}

/// Deletes one entry (`cas`: the mod revision it must still have); a missing entry is deleted
/// already. `false` when the check failed.
pub(crate) async fn delete(
    state: &State,
    namespace: &str,
    key: &str,
    cas: Option<u64>,
) -> Result<bool, Error> {
    let kv_key = kv_store::kv_key(namespace, key);
    let _key_lock = state.lock_kv_key(namespace, key).await;
    for _ in 0..MAX_ATTEMPTS {
        let (existing, revision) = load_entry(state, &kv_key).await?;
        let Some(entry) = existing else {
            // Consul: deleting a missing key succeeds, with or without cas.
            return Ok(true);
        };
        if cas.is_some_and(|cas| cas != revision) {
            return Ok(false);
        }
        let mut txn = Txn::new()
            .when(Compare::ModRevision(kv_key.clone(), revision))
            .then(Op::Delete {
                key: kv_key.clone(),
            });
        if let Some(recorded) = entry.lock_record.as_ref().or(entry.session.as_ref()) {
            txn = txn.then(Op::Delete {
                key: sessions::session_lock_key(recorded, namespace, key),
            });
        }
        if state.storage().txn(txn).await?.succeeded {
            return Ok(true);
        }
        if cas.is_some() {
            return Ok(false);
        }
    }
    Err(Error::Contention)
}
