//! Session TTL timers: the in-memory deadline of every session with a TTL, how renewals move
//! it, and how it is checkpointed to storage and rebuilt from it (docs/design.md §D4: a
//! session is invalidated no earlier than its TTL after its create or last renew, and within
//! 1 s after that; Consul waits up to 2×).
//!
//! Where it sits: [`SessionTimers`] lives in `State`; `domain/sessions.rs` arms a timer at
//! create and disarms it when a session is invalidated; the renew handler (`session.rs`) calls
//! [`SessionTimers::renew`] and [`persist_deadline`]; [`load`] rebuilds every timer from storage
//! when the state opens; the reaper loop (`tasks/ttl_reaper.rs`) takes what is due and calls
//! [`checkpoint`].
//!
//! # Why deadlines live in memory, and how they survive a restart
//!
//! Renew must be cheap: the benchmark compares it with etcd's lease keep-alive, which writes
//! nothing to disk. So the authoritative deadline is in memory, and storage gets it lazily:
//!
//! - At create, the session record carries `expires_at_ms` (the create transaction writes it
//!   anyway).
//! - A renew only moves the in-memory deadline and marks the session dirty.
//! - The reaper loop checkpoints at most once per second: ONE transaction puts a
//!   `registry/session-deadlines/<id>` record for every dirty session plus a
//!   `registry/session-checkpoint` marker holding the time `T` at which the dirty set was read.
//!   Every renewal before `T` is then in storage. (The deadlines are kept out of the session
//!   record so that a checkpoint does not move the sessions' ModifyIndex or the index of session
//!   info/node/list.)
//! - When shutdown is requested, renewals switch to write-through and a final checkpoint is
//!   written with `clean: true`: after a clean shutdown every stored deadline is exact.
//! - Every write of deadline records (checkpoints and write-through renewals) is serialized by
//!   one async mutex and reads the in-memory deadlines while holding it; deadlines only move
//!   forward, so a slow writer never overwrites a later deadline with an earlier one.
//!
//! After a crash, renewals made after the last durable checkpoint are lost, so the stored
//! deadline of a session renewed in that window is too early, and by up to the client's renew
//! interval, not by one checkpoint period: "stored deadline + 1 s" alone could expire a live
//! session early. What is bounded is the crash time `C`: a renewal made more than
//! [`WRITE_THROUGH_AFTER_MS`] after the last durable checkpoint marker is written through
//! synchronously (this happens only after an idle period or when checkpoints stall), so every
//! lost renewal happened before `marker + WRITE_THROUGH_AFTER_MS`, and its deadline is at most
//! `min(now, marker + CRASH_SLACK_MS) + ttl`. [`load`] therefore sets
//!
//! ```text
//! deadline = max(stored, min(now, marker + CRASH_SLACK_MS) + ttl)   after a crash
//! deadline = stored                                                 after a clean shutdown
//! ```
//!
//! where `stored` is the later of the record's `expires_at_ms` and the deadline record, and
//! `marker` the checkpoint's time (`now` without one). That is never early, and late by at most
//! about the last checkpoint's age plus 2 s (Consul instead restarts every TTL at a leader
//! change). After a load from a clean marker, renewals write through until this process's
//! first checkpoint, since that marker no longer describes this process's renewals.
//!
//! Invariants:
//! - A session whose timer fired is never revived: renew of a session past its deadline, or
//!   whose invalidation failed and is being retried, answers "not found".
//! - No std mutex is held across `.await`; a new timer, or the first dirty session since a
//!   checkpoint, wakes the reaper ([`SessionTimers::wake`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use storage::{Op, Txn};
use tokio::sync::Notify;

use crate::store::sessions::{
    self, CheckpointRecord, DeadlineRecord, RECORD_VERSION, SessionRecord,
};
use crate::store::{decode, encode};
use crate::{Error, State};

/// Checkpoints of renewed deadlines are at least this far apart.
pub(crate) const CHECKPOINT_INTERVAL_MS: u64 = 1_000;

/// A renewal this long after the last durable checkpoint marker is written through.
pub(crate) const WRITE_THROUGH_AFTER_MS: u64 = 1_500;

/// After a crash, every lost renewal happened before `marker + CRASH_SLACK_MS`.
pub(crate) const CRASH_SLACK_MS: u64 = 2_000;

/// The in-memory deadlines of every session with a TTL.
#[derive(Debug, Default)]
pub(crate) struct SessionTimers {
    inner: Mutex<Timers>,
    /// Wakes the reaper loop: a new timer, or the first dirty session since a checkpoint.
    pub(crate) wake: Notify,
    /// Serializes every write of deadline records (checkpoints and write-through renewals).
    /// Each writer reads the in-memory deadlines under it, and those only move forward, so the
    /// last write of a session's record always carries its latest deadline.
    persist: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Timers {
    /// (deadline, id), earliest first.
    queue: BTreeSet<(u64, String)>,
    sessions: HashMap<String, Timer>,
    /// Sessions whose deadline moved since the last checkpoint.
    dirty: HashSet<String>,
    /// The `at_ms` of the last checkpoint marker known durable (0: none usable).
    durable_marker_ms: u64,
    /// When the last checkpoint was taken (by this process).
    last_checkpoint_ms: u64,
    /// Shutdown was requested: renewals are persisted before they are acknowledged.
    write_through: bool,
}

#[derive(Debug, Clone, Copy)]
struct Timer {
    deadline_ms: u64,
    ttl_ms: u64,
    /// The deadline passed and invalidation is pending or being retried.
    expired: bool,
}

/// What a renew did to a session's timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// No live timer: the session expired (or is not a TTL session known here).
    Unknown,
    /// The deadline moved to `deadline_ms`; with `persist`, the caller must write it to storage
    /// ([`persist_deadline`]) before acknowledging the renew.
    Renewed { deadline_ms: u64, persist: bool },
}

impl Timers {
    fn insert(&mut self, id: &str, timer: Timer) {
        if let Some(old) = self.sessions.insert(id.to_owned(), timer) {
            self.queue.remove(&(old.deadline_ms, id.to_owned()));
        }
        self.queue.insert((timer.deadline_ms, id.to_owned()));
    }

    fn remove(&mut self, id: &str) {
        if let Some(old) = self.sessions.remove(id) {
            self.queue.remove(&(old.deadline_ms, id.to_owned()));
        }
        self.dirty.remove(id);
    }
}

impl SessionTimers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Timers> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that
        // matters more than stopping every timer would; keep going.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts (or restarts) the timer of session `id`.
    pub(crate) fn arm(&self, id: &str, ttl_ms: u64, deadline_ms: u64) {
        self.lock().insert(
            id,
            Timer {
                deadline_ms,
                ttl_ms,
                expired: false,
            },
        );
        self.wake.notify_one();
    }

    /// Forgets the timer of session `id` (destroyed or invalidated).
    pub(crate) fn disarm(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Moves the deadline of session `id` to `now_ms + ttl`.
    pub(crate) fn renew(&self, id: &str, now_ms: u64) -> Renewal {
        let mut timers = self.lock();
        let Some(timer) = timers.sessions.get(id).copied() else {
            return Renewal::Unknown;
        };
        if timer.expired || timer.deadline_ms <= now_ms {
            return Renewal::Unknown;
        }
        let deadline_ms = now_ms.saturating_add(timer.ttl_ms);
        timers.insert(
            id,
            Timer {
                deadline_ms,
                ..timer
            },
        );
        let first_dirty = timers.dirty.is_empty();
        timers.dirty.insert(id.to_owned());
        let persist = timers.write_through
            || now_ms.saturating_sub(timers.durable_marker_ms) > WRITE_THROUGH_AFTER_MS;
        drop(timers);
        if first_dirty {
            self.wake.notify_one();
        }
        Renewal::Renewed {
            deadline_ms,
            persist,
        }
    }

    /// Moves the deadline of a live timer of session `id` forward to `deadline_ms` (a renew
    /// another server wrote through); never earlier, and never for an unknown or expired one.
    pub(crate) fn extend(&self, id: &str, deadline_ms: u64) {
        let mut timers = self.lock();
        let Some(timer) = timers.sessions.get(id).copied() else {
            return;
        };
        if timer.expired || timer.deadline_ms >= deadline_ms {
            return;
        }
        timers.insert(
            id,
            Timer {
                deadline_ms,
                ..timer
            },
        );
        drop(timers);
        self.wake.notify_one();
    }

    /// The current deadline of a live timer.
    pub(crate) fn deadline(&self, id: &str) -> Option<u64> {
        self.lock()
            .sessions
            .get(id)
            .filter(|timer| !timer.expired)
            .map(|timer| timer.deadline_ms)
    }

    /// The number of armed timers (for tests and diagnostics).
    #[allow(dead_code, reason = "used by unit tests")]
    pub(crate) fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Marks every session whose deadline (or retry time) is at or before `now_ms` as expired
    /// and returns them; each is then disarmed by its invalidation or rescheduled by
    /// [`SessionTimers::retry_later`].
    pub(crate) fn take_due(&self, now_ms: u64) -> Vec<String> {
        let mut timers = self.lock();
        let due: Vec<String> = timers
            .queue
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .map(|(_, id)| id.clone())
            .collect();
        for id in &due {
            if let Some(timer) = timers.sessions.get_mut(id) {
                timer.expired = true;
            }
            timers.dirty.remove(id);
        }
        due
    }

    /// Schedules another attempt at invalidating an expired session; it stays dead for renew.
    pub(crate) fn retry_later(&self, id: &str, at_ms: u64) {
        let mut timers = self.lock();
        if let Some(timer) = timers.sessions.get(id).copied() {
            timers.insert(
                id,
                Timer {
                    deadline_ms: at_ms,
                    expired: true,
                    ..timer
                },
            );
        }
    }

    /// When the loop must next run: the earliest deadline, or the next checkpoint if some
    /// deadline moved.
    pub(crate) fn next_wake_ms(&self) -> Option<u64> {
        let timers = self.lock();
        let earliest = timers.queue.first().map(|(deadline, _)| *deadline);
        let checkpoint = (!timers.dirty.is_empty()).then(|| {
            timers
                .last_checkpoint_ms
                .saturating_add(CHECKPOINT_INTERVAL_MS)
        });
        match (earliest, checkpoint) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The dirty deadlines to checkpoint at `now_ms`, if a checkpoint is due.
    pub(crate) fn take_checkpoint(&self, now_ms: u64, force: bool) -> Option<Vec<(String, u64)>> {
        let mut timers = self.lock();
        if timers.dirty.is_empty()
            || (!force
                && now_ms
                    < timers
                        .last_checkpoint_ms
                        .saturating_add(CHECKPOINT_INTERVAL_MS))
        {
            return None;
        }
        timers.last_checkpoint_ms = now_ms;
        let dirty = std::mem::take(&mut timers.dirty);
        Some(
            dirty
                .into_iter()
                .filter_map(|id| {
                    let timer = timers.sessions.get(&id)?;
                    Some((id, timer.deadline_ms))
                })
                .collect(),
        )
    }

    /// A checkpoint failed: its sessions are dirty again.
    pub(crate) fn checkpoint_failed(&self, ids: impl IntoIterator<Item = String>) {
        let mut timers = self.lock();
        for id in ids {
            if timers.sessions.contains_key(&id) {
                timers.dirty.insert(id);
            }
        }
    }

    pub(crate) fn checkpoint_durable(&self, at_ms: u64) {
        let mut timers = self.lock();
        timers.durable_marker_ms = timers.durable_marker_ms.max(at_ms);
    }

    pub(crate) fn set_write_through(&self) {
        self.lock().write_through = true;
    }
}

/// Loads every stored session's deadline at start (see the module docs for the formula).
pub(crate) async fn load(state: &State) -> Result<(), Error> {
    let storage = state.storage();
    let now_ms = state.now_ms();
    let marker = match storage.get(&sessions::checkpoint_key()).await? {
        Some(kv) => Some(decode::<CheckpointRecord>(&kv.key, &kv.value)?),
        None => None,
    };
    let mut checkpointed: HashMap<String, u64> = HashMap::new();
    for kv in storage.scan(sessions::deadlines_range(), None).await?.kvs {
        let record: DeadlineRecord = decode(&kv.key, &kv.value)?;
        if let Some(id) = sessions::parse_deadline_key(&kv.key) {
            checkpointed.insert(id.to_owned(), record.expires_at_ms);
        }
    }
    let clean = marker.as_ref().is_some_and(|m| m.clean);
    let crash_bound_ms = match &marker {
        Some(marker) => now_ms.min(marker.at_ms.saturating_add(CRASH_SLACK_MS)),
        None => now_ms,
    };
    let timers = state.session_timers();
    for kv in storage.scan(sessions::sessions_range(), None).await?.kvs {
        let record: SessionRecord = decode(&kv.key, &kv.value)?;
        let checkpoint = checkpointed.remove(&record.id);
        if record.ttl_ms == 0 {
            continue;
        }
        let stored = record
            .expires_at_ms
            .into_iter()
            .chain(checkpoint)
            .max()
            .unwrap_or(crash_bound_ms.saturating_add(record.ttl_ms));
        let deadline_ms = if clean {
            stored
        } else {
            stored.max(crash_bound_ms.saturating_add(record.ttl_ms))
        };
        timers.arm(&record.id, record.ttl_ms, deadline_ms);
    }
    {
        let mut inner = timers.lock();
        inner.durable_marker_ms = match &marker {
            Some(marker) if !marker.clean => marker.at_ms,
            _ => 0,
        };
        inner.last_checkpoint_ms = 0;
    }
    // Deadline records of sessions that no longer exist (a checkpoint raced an invalidation).
    if !checkpointed.is_empty() {
        let mut txn = Txn::new();
        for id in checkpointed.keys() {
            txn = txn.then(Op::Delete {
                key: sessions::deadline_key(id),
            });
        }
        storage.txn(txn).await?;
    }
    Ok(())
}

/// Writes the deadlines of the dirty sessions and the checkpoint marker in one transaction, if
/// a checkpoint is due (`clean`: the final one, written even with nothing dirty).
pub(crate) async fn checkpoint(state: &State, now_ms: u64, clean: bool) {
    let timers = state.session_timers();
    let _serialized = timers.persist.lock().await;
    let dirty = match timers.take_checkpoint(now_ms, clean) {
        Some(dirty) => dirty,
        None if clean => Vec::new(),
        None => return,
    };
    match write_checkpoint(state, now_ms, &dirty, clean).await {
        Ok(()) => timers.checkpoint_durable(now_ms),
        Err(err) => {
            tracing::warn!(message = "Session TTL checkpoint failed.", error = %err);
            timers.checkpoint_failed(dirty.into_iter().map(|(id, _)| id));
        }
    }
}

async fn write_checkpoint(
    state: &State,
    at_ms: u64,
    dirty: &[(String, u64)],
    clean: bool,
) -> Result<(), Error> {
    let mut txn = Txn::new();
    for (id, expires_at_ms) in dirty {
        let key = sessions::deadline_key(id);
        let value = encode(
            &key,
            &DeadlineRecord {
                version: RECORD_VERSION,
                expires_at_ms: *expires_at_ms,
            },
        )?;
        txn = txn.then(Op::Put { key, value });
    }
    let key = sessions::checkpoint_key();
    let value = encode(
        &key,
        &CheckpointRecord {
            version: RECORD_VERSION,
            at_ms,
            clean,
        },
    )?;
    state
        .storage()
        .txn(txn.then(Op::Put { key, value }))
        .await?;
    Ok(())
}

/// Persists session `id`'s current deadline now (a write-through renew), unless its timer or
/// its record is gone.
pub(crate) async fn persist_deadline(state: &State, id: &str) -> Result<(), Error> {
    let timers = state.session_timers();
    let _serialized = timers.persist.lock().await;
    let Some(expires_at_ms) = timers.deadline(id) else {
        return Ok(());
    };
    let key = sessions::deadline_key(id);
    let value = encode(
        &key,
        &DeadlineRecord {
            version: RECORD_VERSION,
            expires_at_ms,
        },
    )?;
    let txn = Txn::new()
        .when(storage::Compare::Exists(sessions::session_key(id)))
        .then(Op::Put { key, value });
    state.storage().txn(txn).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_moves_the_deadline_and_marks_dirty() {
        let timers = SessionTimers::default();
        timers.arm("a", 10_000, 11_000);
        timers.checkpoint_durable(1_000);
        assert_eq!(
            timers.renew("a", 2_000),
            Renewal::Renewed {
                deadline_ms: 12_000,
                persist: false
            }
        );
        assert_eq!(timers.next_wake_ms(), Some(CHECKPOINT_INTERVAL_MS));
        let dirty = timers.take_checkpoint(2_000, false).unwrap();
        assert_eq!(dirty, vec![("a".to_owned(), 12_000)]);
        assert_eq!(timers.next_wake_ms(), Some(12_000));
    }

    #[test]
    fn renew_long_after_the_last_checkpoint_writes_through() {
        let timers = SessionTimers::default();
        timers.arm("a", 10_000, 20_000);
        timers.checkpoint_durable(1_000);
        assert!(matches!(
            timers.renew("a", 1_000 + WRITE_THROUGH_AFTER_MS + 1),
            Renewal::Renewed { persist: true, .. }
        ));
    }

    #[test]
    fn expired_timers_are_not_renewed() {
        let timers = SessionTimers::default();
        timers.arm("a", 10_000, 10_000);
        assert_eq!(timers.renew("a", 10_000), Renewal::Unknown);
        assert_eq!(timers.take_due(10_000), vec!["a".to_owned()]);
        timers.retry_later("a", 10_200);
        assert_eq!(timers.renew("a", 10_100), Renewal::Unknown);
        assert!(timers.take_due(10_100).is_empty());
        assert_eq!(timers.take_due(10_300), vec!["a".to_owned()]);
        timers.disarm("a");
        assert_eq!(timers.len(), 0);
    }

    #[test]
    fn take_due_returns_only_passed_deadlines() {
        let timers = SessionTimers::default();
        timers.arm("a", 1_000, 5_000);
        timers.arm("b", 1_000, 6_000);
        assert!(timers.take_due(4_999).is_empty());
        assert_eq!(timers.take_due(5_000), vec!["a".to_owned()]);
        assert_eq!(timers.next_wake_ms(), Some(5_000));
    }
}
