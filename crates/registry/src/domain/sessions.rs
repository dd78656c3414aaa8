//! Sessions: create, and invalidation, which the TTL reaper, destroy and the catalog (a check
//! going critical or deregistered, a node deregistered) all go through.
//!
//! Where it sits: called by the session handlers (`session.rs`), the KV acquire
//! (`domain/kv.rs`), the catalog writes (`domain/catalog.rs`, `domain/checks.rs`) and the TTL
//! reaper (`tasks/ttl_reaper.rs`); keeps the records of `store/sessions.rs` and `store/kv.rs`
//! and the in-memory TTL timers of `domain/session_timers.rs` in step.
//!
//! Invariants:
//! - Create validates the node and every check against the catalog and commits only if none of
//!   them changed since it read them (compare-and-swap on their mod revisions), so a check that
//!   goes critical concurrently either is seen by create or invalidates the new session.
//! - Invalidation is one transaction: delete the session, apply its Behavior to every key it
//!   holds (release: clear `Session`, keep value and `LockIndex`; delete: remove the key), and
//!   put a lock-delay of `min(LockDelay, 60 s)` on each such key. An acquire of a key whose
//!   lock record invalidation read, committed between that read and its transaction, fails the
//!   transaction (see `held_keys_txn`); one of another key is caught by a follow-up pass
//!   (acquire cannot succeed once the session record is gone).

use std::time::Duration;

use stdx::duration::format_go_std;
use storage::{Compare, KeyValue, Op, Txn};

use crate::domain::MAX_ATTEMPTS;
use crate::store::catalog::{self as catalog_store, CheckStatus};
use crate::store::kv::{self as kv_store, KvRecord, LockDelayRecord};
use crate::store::sessions::{
    self, Behavior, RECORD_VERSION, ServiceCheckRef, SessionLockRecord, SessionRecord,
};
use crate::store::{decode, encode};
use crate::{Error, SERF_HEALTH_CHECK, State};

/// The default lock-delay (Consul's).
const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);

/// A lock-delay is capped at this when applied (Consul's `MaxLockDelay`).
const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// The longest session TTL (Consul's `SessionTTLMax`).
const SESSION_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

// ---------------------------------------------------------------------------------------------
// Create

/// A JSON field as Go's decoder sees it: absent, `null`, or a value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Field<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

/// What a session create asks for, as Consul's Go decoder leaves it (`session.rs` decodes the
/// body): `None` and [`Field::Absent`] where the body says nothing.
#[derive(Debug, Default)]
pub(crate) struct CreateRequest {
    pub(crate) name: Option<String>,
    pub(crate) node: Option<String>,
    pub(crate) lock_delay_ns: Option<u64>,
    pub(crate) behavior: Option<String>,
    pub(crate) ttl: Option<String>,
    pub(crate) checks: Field<Vec<String>>,
    pub(crate) node_checks: Field<Vec<String>>,
    pub(crate) service_checks: Field<Vec<ServiceCheckRef>>,
}

impl CreateRequest {
    /// Applies Consul's defaults, its Checks/NodeChecks fixup and its validation.
    pub(crate) fn into_record(
        self,
        state: &State,
        namespace: String,
    ) -> Result<SessionRecord, Error> {
        let config = state.config();
        let node = self.node.unwrap_or_else(|| config.node_name.clone());
        if node.is_empty() {
            return Err(Error::Invalid("Must provide Node".to_owned()));
        }
        let behavior_text = self.behavior.unwrap_or_default();
        let behavior = Behavior::parse(&behavior_text)
            .ok_or_else(|| Error::Invalid(format!("Invalid Behavior setting '{behavior_text}'")))?;
        let ttl = self.ttl.unwrap_or_default();
        let ttl_ms = if ttl.is_empty() {
            0
        } else {
            let parsed = stdx::duration::parse_go(&ttl).map_err(|err| {
                Error::Invalid(format!("Session TTL '{ttl}' invalid: {}", err.go_message()))
            })?;
            if !parsed.is_zero() && (parsed < config.session_ttl_min || parsed > SESSION_TTL_MAX) {
                return Err(Error::Invalid(format!(
                    "Invalid Session TTL '{}', must be between [{}={}]",
                    parsed.as_nanos(),
                    format_go_std(config.session_ttl_min),
                    format_go_std(SESSION_TTL_MAX)
                )));
            }
            // Whole milliseconds, rounded up (never early).
            u64::try_from(parsed.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
        };

        // Defaults before decoding are Checks = NodeChecks = [serfHealth]; a `null` sets nil.
        let default_checks = || vec![SERF_HEALTH_CHECK.to_owned()];
        let mut checks = match self.checks {
            Field::Absent => Some(default_checks()),
            Field::Null => None,
            Field::Value(list) => Some(list),
        };
        let mut node_checks = match self.node_checks {
            Field::Absent => Some(default_checks()),
            Field::Null => None,
            Field::Value(list) => Some(list),
        };
        // Consul's fixupEmptySessionChecks.
        if checks.as_ref().is_none_or(Vec::is_empty) {
            node_checks = Some(Vec::new());
        } else if checks.as_deref() == Some(&[SERF_HEALTH_CHECK.to_owned()][..])
            || node_checks.as_ref().is_none_or(Vec::is_empty)
        {
            // Checks equal to the default defer to NodeChecks; an empty NodeChecks drops the
            // Checks too (Consul drops them even when they were given).
            checks = None;
        }
        let service_checks = match self.service_checks {
            Field::Value(list) => list,
            Field::Absent | Field::Null => Vec::new(),
        };
        Ok(SessionRecord {
            version: RECORD_VERSION,
            id: String::new(),
            namespace,
            name: self.name.unwrap_or_default(),
            node,
            lock_delay_ns: self
                .lock_delay_ns
                .unwrap_or(DEFAULT_LOCK_DELAY.as_nanos() as u64),
            behavior,
            ttl,
            ttl_ms,
            checks: checks.filter(|list| !list.is_empty()),
            node_checks: node_checks.unwrap_or_default(),
            service_checks,
            expires_at_ms: None,
        })
    }
}

/// Validates the session's node and checks against the catalog and stores it; returns its id.
pub(crate) async fn create(state: &State, record: &mut SessionRecord) -> Result<String, Error> {
    let storage = state.storage();
    let check_ids: Vec<String> = record.check_ids().into_iter().map(str::to_owned).collect();
    for _ in 0..MAX_ATTEMPTS {
        // A fresh id per attempt: an id collision (Missing fails) retries with another, as
        // Consul does.
        let id = uuid::Uuid::new_v4().hyphenated().to_string();
        record.id.clone_from(&id);
        let key = sessions::session_key(&id);
        let node = catalog_store::load_node(storage, &record.node)
            .await?
            .ok_or_else(|| Error::Invalid("Missing node registration".to_owned()))?;
        let mut txn = Txn::new()
            .when(Compare::Missing(key.clone()))
            .when(Compare::ModRevision(
                catalog_store::node_key(&record.node),
                node.modify_index,
            ));
        for check_id in &check_ids {
            let check = catalog_store::load_check(storage, &record.node, check_id)
                .await?
                .ok_or_else(|| {
                    Error::Invalid(format!("Missing check '{check_id}' registration"))
                })?;
            if check.record.status == CheckStatus::Critical {
                return Err(Error::Invalid(format!(
                    "Check '{check_id}' is in critical state"
                )));
            }
            txn = txn.when(Compare::ModRevision(
                catalog_store::check_key(&record.node, check_id),
                check.modify_index,
            ));
        }
        let now_ms = state.now_ms();
        record.expires_at_ms = (record.ttl_ms > 0).then(|| now_ms.saturating_add(record.ttl_ms));
        let value = encode(&key, &*record)?;
        txn = txn.then(Op::Put {
            key: key.clone(),
            value,
        });
        // Armed before the commit so that a renew right after the create finds it.
        if let Some(deadline_ms) = record.expires_at_ms {
            state.session_timers().arm(&id, record.ttl_ms, deadline_ms);
        }
        let result = storage.txn(txn).await;
        match result {
            Ok(result) if result.succeeded => return Ok(id),
            Ok(_) => state.session_timers().disarm(&id),
            Err(err) => {
                state.session_timers().disarm(&id);
                return Err(err.into());
            }
        }
    }
    Err(Error::Contention)
}

// ---------------------------------------------------------------------------------------------
// Reads

/// The session `id` (already normalized), with its storage entry.
pub(crate) async fn load_session(
    state: &State,
    id: &str,
) -> Result<Option<(SessionRecord, KeyValue)>, Error> {
    match state.storage().get(&sessions::session_key(id)).await? {
        Some(kv) => Ok(Some((decode(&kv.key, &kv.value)?, kv))),
        None => Ok(None),
    }
}

/// A session id in its canonical form (lowercase, hyphenated), or `None` if `raw` is not one.
pub(crate) fn parse_session_id(raw: &str) -> Option<String> {
    if raw.len() != 36 {
        return None;
    }
    uuid::Uuid::try_parse(raw)
        .ok()
        .map(|uuid| uuid.hyphenated().to_string())
}

// ---------------------------------------------------------------------------------------------
// Invalidation

/// Invalidates session `id` (a lowercase UUID): deletes it, applies its Behavior to every key it
/// holds and puts a lock-delay on them, in one transaction (see the module docs). Invalidating
/// a session that does not exist is not an error.
pub(crate) async fn invalidate_session(state: &State, id: &str) -> Result<(), Error> {
    invalidate_session_read(state, id, None).await
}

/// [`invalidate_session`] for a caller that has just read the session (`loaded`, from
/// [`load_session`]): the first attempt uses that read instead of reading it again; a lost
/// race reads afresh, as always.
pub(crate) async fn invalidate_session_read(
    state: &State,
    id: &str,
    mut loaded: Option<(SessionRecord, KeyValue)>,
) -> Result<(), Error> {
    let storage = state.storage();
    let session_key = sessions::session_key(id);
    for _ in 0..MAX_ATTEMPTS {
        let current = match loaded.take() {
            Some(read) => Some(read),
            None => load_session(state, id).await?,
        };
        let Some((record, kv)) = current else {
            state.session_timers().disarm(id);
            // A previous invalidation may have left keys acquired in its race window.
            return release_leftovers(state, id, Behavior::Release, 0).await;
        };
        let now_ms = state.now_ms();
        let delay_ms = lock_delay_ms(record.lock_delay_ns);
        let mut txn = Txn::new()
            .when(Compare::ModRevision(session_key.clone(), kv.mod_revision))
            .then(Op::Delete {
                key: session_key.clone(),
            })
            .then(Op::Delete {
                key: sessions::deadline_key(id),
            });
        txn = held_keys_txn(state, id, record.behavior, now_ms, delay_ms, txn).await?;
        if storage.txn(txn).await?.succeeded {
            state.session_timers().disarm(id);
            tracing::debug!(message = "Session invalidated.", session = %id);
            return release_leftovers(state, id, record.behavior, delay_ms).await;
        }
    }
    Err(Error::Contention)
}

/// Invalidates every session bound to check `check_id` of `node` (the check went critical or
/// was deregistered).
pub(crate) async fn invalidate_sessions_for_check(
    state: &State,
    node: &str,
    check_id: &str,
) -> Result<(), Error> {
    for id in sessions_where(state, |record| {
        record.node == node && record.check_ids().contains(&check_id)
    })
    .await?
    {
        invalidate_session(state, &id).await?;
    }
    Ok(())
}

/// Invalidates every session of `node` (the node was deregistered).
pub(crate) async fn invalidate_sessions_for_node(state: &State, node: &str) -> Result<(), Error> {
    for id in sessions_where(state, |record| record.node == node).await? {
        invalidate_session(state, &id).await?;
    }
    Ok(())
}

async fn sessions_where(
    state: &State,
    keep: impl Fn(&SessionRecord) -> bool,
) -> Result<Vec<String>, Error> {
    let scanned = state
        .storage()
        .scan(sessions::sessions_range(), None)
        .await?;
    let mut ids = Vec::new();
    for kv in scanned.kvs {
        let record: SessionRecord = decode(&kv.key, &kv.value)?;
        if keep(&record) {
            ids.push(record.id);
        }
    }
    Ok(ids)
}

/// `min(lock_delay, 60 s)` in whole milliseconds, rounded up.
fn lock_delay_ms(lock_delay_ns: u64) -> u64 {
    let capped = lock_delay_ns.min(MAX_LOCK_DELAY.as_nanos() as u64);
    capped.div_ceil(1_000_000)
}

/// Adds to `txn` what invalidating session `id` does to the keys its lock records name: the
/// Behavior, the lock-delay, and the removal of the lock records. Every lock record is compared
/// on its mod revision, and so is every KV entry that names the session (as holder or as
/// `lock_record`), so a concurrent acquire by the session retries the caller: an acquire of a
/// key whose entry names the session writes that entry, any other acquire writes the lock
/// record. An entry that names neither is not compared: another session's acquire or a
/// plain write there changes nothing this transaction does.
async fn held_keys_txn(
    state: &State,
    id: &str,
    behavior: Behavior,
    now_ms: u64,
    delay_ms: u64,
    mut txn: Txn,
) -> Result<Txn, Error> {
    let storage = state.storage();
    let locks = storage
        .scan(sessions::session_locks_range(id), None)
        .await?;
    for lock in locks.kvs {
        txn = txn.then(Op::Delete {
            key: lock.key.clone(),
        });
        let Some((namespace, key)) = sessions::parse_session_lock_key(id, &lock.key) else {
            continue;
        };
        txn = txn.when(Compare::ModRevision(lock.key.clone(), lock.mod_revision));
        let kv_key = kv_store::kv_key(&namespace, &key);
        let Some(entry) = storage.get(&kv_key).await? else {
            continue;
        };
        let mut record: KvRecord = decode(&entry.key, &entry.value)?;
        let holds = record.session.as_deref() == Some(id);
        if holds || record.lock_record.as_deref() == Some(id) {
            txn = txn.when(Compare::ModRevision(kv_key.clone(), entry.mod_revision));
        }
        if !holds {
            // Stale lock record: the key was released (release keeps the record), deleted or
            // re-locked since; its deletion above is all it needs.
            continue;
        }
        match behavior {
            Behavior::Release => {
                record.session = None;
                record.lock_record = None;
                let value = encode(&kv_key, &record)?;
                txn = txn.then(Op::Put { key: kv_key, value });
            }
            Behavior::Delete => txn = txn.then(Op::Delete { key: kv_key }),
        }
        if delay_ms > 0 {
            let delay_key = kv_store::lock_delay_key(&namespace, &key);
            let value = encode(
                &delay_key,
                &LockDelayRecord {
                    version: kv_store::RECORD_VERSION,
                    until_ms: now_ms.saturating_add(delay_ms),
                },
            )?;
            txn = txn.then(Op::Put {
                key: delay_key,
                value,
            });
        }
    }
    Ok(txn)
}

/// After the session record is gone no acquire can succeed, so lock records still present were
/// written by acquires that raced the invalidation: apply the Behavior to them too.
async fn release_leftovers(
    state: &State,
    id: &str,
    behavior: Behavior,
    delay_ms: u64,
) -> Result<(), Error> {
    let storage = state.storage();
    for _ in 0..MAX_ATTEMPTS {
        let remaining = storage
            .scan(sessions::session_locks_range(id), Some(1))
            .await?;
        if remaining.kvs.is_empty() {
            return Ok(());
        }
        let now_ms = state.now_ms();
        let txn = held_keys_txn(state, id, behavior, now_ms, delay_ms, Txn::new()).await?;
        storage.txn(txn).await?;
    }
    Err(Error::Contention)
}

/// The lock record put when session `id` acquires `key`.
pub(crate) fn lock_record_op(id: &str, namespace: &str, key: &str) -> Result<Op, Error> {
    let lock_key = sessions::session_lock_key(id, namespace, key);
    let value = encode(
        &lock_key,
        &SessionLockRecord {
            version: RECORD_VERSION,
        },
    )?;
    Ok(Op::Put {
        key: lock_key,
        value,
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use storage::{MemStorage, Storage};

    use super::*;
    use crate::{Clock, Config, ManualClock};

    async fn test_state() -> (State, Arc<MemStorage>, ManualClock) {
        let storage = Arc::new(MemStorage::new());
        let clock = ManualClock::new(1_000_000);
        let mut config = Config::new(SocketAddr::from(([127, 0, 0, 1], 8500)));
        config.node_name = "n1".to_owned();
        let state = State::open(
            Arc::clone(&storage) as Arc<dyn Storage>,
            config,
            Arc::new(clock.clone()),
        )
        .await
        .unwrap();
        (state, storage, clock)
    }

    /// Writes what a successful acquire by `id` of `key` writes.
    async fn fake_acquire(storage: &MemStorage, id: &str, key: &str) {
        let kv_key = kv_store::kv_key("default", key);
        let record = KvRecord {
            version: kv_store::RECORD_VERSION,
            flags: 0,
            value: None,
            session: Some(id.to_owned()),
            lock_index: 1,
            lock_record: Some(id.to_owned()),
        };
        let txn = Txn::new()
            .then(Op::Put {
                value: encode(&kv_key, &record).unwrap(),
                key: kv_key,
            })
            .then(lock_record_op(id, "default", key).unwrap());
        storage.txn(txn).await.unwrap();
    }

    async fn kv_session(storage: &MemStorage, key: &str) -> Option<Option<String>> {
        let kv = storage
            .get(&kv_store::kv_key("default", key))
            .await
            .unwrap()?;
        Some(decode::<KvRecord>(&kv.key, &kv.value).unwrap().session)
    }

    /// An acquire that commits after invalidation read the session's lock records but before
    /// its transaction leaves a lock record behind; the follow-up pass (and any later
    /// invalidation of the gone session) applies the Behavior to it.
    #[tokio::test]
    async fn invalidation_handles_keys_acquired_in_its_race_window() {
        let (state, storage, clock) = test_state().await;
        let id = "0f0e0d0c-0b0a-4908-8706-050403020100";
        // The race outcome: the session record is gone, its acquire committed anyway.
        fake_acquire(&storage, id, "late").await;
        release_leftovers(&state, id, Behavior::Delete, 5_000)
            .await
            .unwrap();
        assert_eq!(kv_session(&storage, "late").await, None, "deleted");
        let delay = storage
            .get(&kv_store::lock_delay_key("default", "late"))
            .await
            .unwrap()
            .unwrap();
        let delay: LockDelayRecord = decode(&delay.key, &delay.value).unwrap();
        assert_eq!(
            i64::try_from(delay.until_ms).unwrap(),
            clock.now_ms() + 5_000
        );
        assert!(
            storage
                .scan(sessions::session_locks_range(id), None)
                .await
                .unwrap()
                .kvs
                .is_empty()
        );

        // Invalidating a session that is already gone still releases what it holds.
        fake_acquire(&storage, id, "later").await;
        invalidate_session(&state, id).await.unwrap();
        assert_eq!(kv_session(&storage, "later").await, Some(None), "released");
    }

    /// A stale lock record (the key was re-locked by another session) is dropped without
    /// touching the key.
    #[tokio::test]
    async fn invalidation_ignores_stale_lock_records() {
        let (state, storage, _clock) = test_state().await;
        let id = "0f0e0d0c-0b0a-4908-8706-050403020100";
        let other = "1f0e0d0c-0b0a-4908-8706-050403020100";
        fake_acquire(&storage, id, "k").await;
        fake_acquire(&storage, other, "k").await;
        invalidate_session(&state, id).await.unwrap();
        assert_eq!(
            kv_session(&storage, "k").await,
            Some(Some(other.to_owned()))
        );
    }

    /// Stores a session record for `id` (no TTL, no checks), as create would.
    async fn put_session(storage: &MemStorage, id: &str) {
        let key = sessions::session_key(id);
        let record = SessionRecord {
            version: RECORD_VERSION,
            id: id.to_owned(),
            namespace: "default".to_owned(),
            name: String::new(),
            node: "n1".to_owned(),
            lock_delay_ns: 0,
            behavior: Behavior::Release,
            ttl: String::new(),
            ttl_ms: 0,
            checks: None,
            node_checks: Vec::new(),
            service_checks: Vec::new(),
            expires_at_ms: None,
        };
        let value = encode(&key, &record).unwrap();
        storage.txn(Txn::put(key, value)).await.unwrap();
    }

    /// A session that released a key and acquires it again writes only the KV entry (its lock
    /// record stays from the first acquire); an invalidation that read the session's lock
    /// records before that acquire must not commit over it.
    #[tokio::test]
    async fn invalidation_read_before_a_reacquire_after_release_does_not_commit() {
        use crate::domain::kv::{Put, acquire, release};
        let (state, storage, _clock) = test_state().await;
        let id = "0f0e0d0c-0b0a-4908-8706-050403020100";
        put_session(&storage, id).await;
        let put = Put {
            namespace: "default",
            key: "k",
            flags: 0,
            value: b"",
        };
        assert!(acquire(&state, &put, id).await.unwrap());
        assert!(release(&state, &put, id).await.unwrap());
        let read = held_keys_txn(&state, id, Behavior::Release, state.now_ms(), 0, Txn::new())
            .await
            .unwrap();
        assert!(acquire(&state, &put, id).await.unwrap());
        assert!(!storage.txn(read).await.unwrap().succeeded);

        invalidate_session(&state, id).await.unwrap();
        assert_eq!(kv_session(&storage, "k").await, Some(None), "released");
    }

    #[test]
    fn go_duration_strings_match_go() {
        let cases = [
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(24 * 3600), "24h0m0s"),
            (Duration::from_secs(180), "3m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(20), "20ns"),
            (Duration::ZERO, "0s"),
        ];
        for (duration, expected) in cases {
            assert_eq!(format_go_std(duration), expected);
        }
    }

    #[test]
    fn go_duration_errors_match_go() {
        let message = |input: &str| stdx::duration::parse_go(input).unwrap_err().go_message();
        assert_eq!(message("10"), r#"time: missing unit in duration "10""#);
        assert_eq!(message("5x"), r#"time: unknown unit "x" in duration "5x""#);
        assert_eq!(message("soon"), r#"time: invalid duration "soon""#);
    }

    #[test]
    fn session_ids_must_be_hyphenated_uuids() {
        assert_eq!(
            parse_session_id("ADF4238A-882B-9DDC-4A9D-5B6758E4159E").as_deref(),
            Some("adf4238a-882b-9ddc-4a9d-5b6758e4159e")
        );
        assert_eq!(parse_session_id(&"1".repeat(36)), None);
        assert_eq!(parse_session_id("adf4238a882b9ddc4a9d5b6758e4159e"), None);
        assert_eq!(parse_session_id("x"), None);
    }

    #[test]
    fn lock_delay_is_capped_at_a_minute() {
        assert_eq!(lock_delay_ms(15_000_000_000), 15_000);
        assert_eq!(lock_delay_ms(600_000_000_000), 60_000);
        assert_eq!(lock_delay_ms(1), 1);
        assert_eq!(lock_delay_ms(0), 0);
    }
}
