//! The expiration manager: every leased secret an engine hands out is recorded here, revoked
//! through its engine when it expires (or when its token is revoked, its mount disabled, or a
//! client asks), renewed on request, and rebuilt from storage after a restart or unseal.
//!
//! Keys (all through the barrier, so encrypted; the engine's internal data included):
//! - `sys/expire/id/<lease id>`: the [`LeaseEntry`] (JSON). Lease ids are
//!   `<request path>/<24-char base62>`, so a lease's key sorts under its mount and role and
//!   `revoke-prefix` is a prefix scan.
//! - `sys/expire/token/<token accessor>/<lease id>`: empty; the token → lease index that
//!   `revoke_by_token` scans.
//!
//! Timers: one in-memory deadline heap (unix milliseconds, lazily invalidated: the map `due`
//! holds each lease's current deadline and heap entries that disagree are stale) woken through
//! a `Notify`; [`run`] sleeps until the earliest deadline and revokes what is due. Deadlines
//! are read on the service's one clock (`State::now_ms`), and the loop re-checks when a test
//! moves a manual clock. A failed revocation is retried after
//! `(1<<attempt) * retry_base ± 50%` (`retry_base` is 10 s, as upstream; tests shrink it);
//! after [`MAX_REVOKE_ATTEMPTS`] failures the lease is marked irrevocable, kept in storage
//! (listable, `revoke-force` removes it) and gets no more timers.
//!
//! Invariants:
//! - The stored entry is the truth; memory holds only deadlines. `load` (after unseal, and
//!   whenever [`run`] starts on a new leader) rebuilds every timer from storage, `clear` (on
//!   seal) drops them all.
//! - An entry is deleted only after its engine's `revoke` succeeded, or on `revoke-force`, or
//!   when the mount that issued it no longer exists (nothing left to revoke through).
//! - A granted TTL never exceeds the lease's max TTL, the mount's max or the system max (768h, `mounts::SYSTEM_MAX_LEASE_TTL`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use secrets_sdk::{Data, Lease, LeaseOptions};
use serde::{Deserialize, Serialize};
use stdx::time::format_rfc3339_millis;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::mounts::{Backend, MountEntry};
use crate::tokens::TokenEntry;
use crate::{Error, State};

/// Failed revocations before a lease is marked irrevocable (upstream's `maxRevokeAttempts`).
pub(crate) const MAX_REVOKE_ATTEMPTS: u32 = 6;
/// Upstream's `revokeRetryBase`.
const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(10);
/// Revocations the timer loop runs at once.
const MAX_CONCURRENT_REVOKES: usize = 16;
/// How often the loop runs the token store's expiry pass (`tokens::tidy`).
const TOKEN_TIDY_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) const ID_PREFIX: &str = "sys/expire/id/";
const TOKEN_PREFIX: &str = "sys/expire/token/";
/// Where S4's token store keeps accessors (used by `tidy` to find leases of vanished tokens).
const TOKEN_ACCESSOR_PREFIX: &str = "sys/token/accessor/";

/// One lease as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct LeaseEntry {
    pub(crate) version: u32,
    pub(crate) lease_id: String,
    pub(crate) mount_uuid: String,
    /// With its trailing slash (`secret/`).
    pub(crate) mount_path: String,
    /// The full logical request path that issued the secret (`secret/creds/ro`).
    pub(crate) request_path: String,
    pub(crate) token_accessor: String,
    /// Unix milliseconds.
    pub(crate) issue_time: i64,
    pub(crate) expire_time: i64,
    pub(crate) last_renewal: Option<i64>,
    /// The TTL granted at issue or at the last renewal, in seconds.
    pub(crate) ttl: u64,
    /// The longest the lease may live from `issue_time`, in seconds.
    pub(crate) max_ttl: u64,
    pub(crate) renewable: bool,
    /// The engine's private data, handed back on revoke and renew.
    pub(crate) internal: Data,
    #[serde(default)]
    pub(crate) revoke_attempts: u32,
    #[serde(default)]
    pub(crate) irrevocable: bool,
    #[serde(default)]
    pub(crate) revoke_error: Option<String>,
}

impl LeaseEntry {
    /// The latest the lease may expire, whatever renewals ask for.
    fn max_expire(&self) -> i64 {
        self.issue_time
            .saturating_add(i64::try_from(self.max_ttl.saturating_mul(1000)).unwrap_or(i64::MAX))
    }

    /// Seconds left before expiry (0 once expired).
    pub(crate) fn remaining(&self, now: i64) -> u64 {
        u64::try_from((self.expire_time - now).max(0) / 1000).unwrap_or(0)
    }

    /// The `data` of `sys/leases/lookup`.
    pub(crate) fn lookup_json(&self, now: i64) -> serde_json::Value {
        serde_json::json!({
            "id": self.lease_id,
            "issue_time": format_rfc3339_millis(self.issue_time),
            "expire_time": format_rfc3339_millis(self.expire_time),
            "last_renewal": self.last_renewal.map(format_rfc3339_millis),
            "renewable": self.renewable && !self.irrevocable,
            "ttl": self.remaining(now),
        })
    }
}

#[derive(Debug, Default)]
struct Timers {
    /// Lease id → its current deadline (unix ms): the truth the heap is checked against.
    due: HashMap<String, i64>,
    heap: BinaryHeap<Reverse<(i64, String)>>,
}

/// Tracks leases and their deadlines. Cheap to share (lives in `State`).
#[derive(Debug)]
pub(crate) struct ExpirationManager {
    timers: Mutex<Timers>,
    notify: Notify,
    retry_base_ms: AtomicU64,
    /// Tests: engines standing in for a mount's own (by mount uuid), since the engine registry
    /// has no test engines.
    #[cfg(test)]
    test_engines: Mutex<HashMap<String, std::sync::Arc<dyn secrets_sdk::Engine>>>,
}

impl Default for ExpirationManager {
    fn default() -> ExpirationManager {
        ExpirationManager::with_retry_base(DEFAULT_RETRY_BASE)
    }
}

impl ExpirationManager {
    /// A manager whose revocation retries back off from `retry_base` (tests use milliseconds).
    pub(crate) fn with_retry_base(retry_base: Duration) -> ExpirationManager {
        ExpirationManager {
            timers: Mutex::new(Timers::default()),
            notify: Notify::new(),
            retry_base_ms: AtomicU64::new(
                u64::try_from(retry_base.as_millis()).unwrap_or(u64::MAX),
            ),
            #[cfg(test)]
            test_engines: Mutex::default(),
        }
    }

    #[cfg(test)]
    fn test_engine(&self, mount_uuid: &str) -> Option<std::sync::Arc<dyn secrets_sdk::Engine>> {
        self.test_engines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(mount_uuid)
            .cloned()
    }

    /// Changes the retry base of later backoffs.
    #[allow(dead_code)] // the knob tests use
    pub(crate) fn set_retry_base(&self, retry_base: Duration) {
        self.retry_base_ms.store(
            u64::try_from(retry_base.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn timers(&self) -> std::sync::MutexGuard<'_, Timers> {
        self.timers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn schedule(&self, lease_id: &str, deadline: i64) {
        {
            let mut timers = self.timers();
            timers.due.insert(lease_id.to_owned(), deadline);
            timers.heap.push(Reverse((deadline, lease_id.to_owned())));
        }
        self.notify.notify_one();
    }

    fn forget(&self, lease_id: &str) {
        self.timers().due.remove(lease_id);
    }

    /// The earliest live deadline, dropping stale heap entries on the way.
    fn next_deadline(&self) -> Option<i64> {
        let mut timers = self.timers();
        while let Some(Reverse((deadline, id))) = timers.heap.peek() {
            if timers.due.get(id) == Some(deadline) {
                return Some(*deadline);
            }
            timers.heap.pop();
        }
        None
    }

    /// Removes and returns the ids due at `now`; their timers are consumed (a retry or a
    /// renewal schedules a new one).
    fn take_due(&self, now: i64) -> Vec<String> {
        let mut timers = self.timers();
        let mut out = Vec::new();
        while let Some(Reverse((deadline, _))) = timers.heap.peek() {
            if *deadline > now {
                break;
            }
            let Some(Reverse((deadline, id))) = timers.heap.pop() else {
                break;
            };
            if timers.due.get(&id) == Some(&deadline) {
                timers.due.remove(&id);
                out.push(id);
            }
        }
        out
    }

    /// Number of leases with a live timer (for tests, diagnostics and `sys/metrics`).
    pub(crate) fn pending(&self) -> usize {
        self.timers().due.len()
    }

    /// Rebuilds every timer from storage (after unseal or restart, and when the expiry loop
    /// starts). Expired leases become due at once; irrevocable ones get no timer. Timers set
    /// meanwhile are kept, and where two disagree the earlier wins: a timer that fires early
    /// only re-reads its lease, one that fires late would keep a secret alive.
    pub(crate) async fn load(&self, state: &State) -> Result<(), Error> {
        let entries = state.barrier().scan(ID_PREFIX).await?;
        let mut loaded = Vec::with_capacity(entries.len());
        for (key, bytes) in entries {
            let entry: LeaseEntry = decode(&key, &bytes)?;
            if !entry.irrevocable {
                loaded.push((entry.lease_id, entry.expire_time));
            }
        }
        {
            let mut timers = self.timers();
            for (id, deadline) in loaded {
                let deadline = timers
                    .due
                    .get(&id)
                    .map_or(deadline, |set| deadline.min(*set));
                timers.due.insert(id.clone(), deadline);
                timers.heap.push(Reverse((deadline, id)));
            }
        }
        self.notify.notify_one();
        Ok(())
    }

    /// Sets the timer of `lease_id` from its stored entry, or drops it when the lease is gone:
    /// another server issued, renewed or revoked it (`follow.rs`, on the leader).
    pub(crate) async fn follow_stored(&self, state: &State, lease_id: &str) -> Result<(), Error> {
        match self.lookup(state, lease_id).await? {
            Some(entry) if !entry.irrevocable => self.schedule(lease_id, entry.expire_time),
            Some(_) => {}
            None => self.forget(lease_id),
        }
        Ok(())
    }

    /// Drops every timer (on seal). Storage is untouched.
    pub(crate) fn clear(&self) {
        *self.timers() = Timers::default();
        self.notify.notify_one();
    }

    /// Records a leased secret issued at `request_path` (a full logical path such as
    /// `database/creds/ro`) by `mount` for `token`; returns the lease id and the TTL granted:
    /// the requested TTL (or the mount's default, or the system's), capped by the lease's max
    /// TTL, the mount's max and the system max.
    pub(crate) async fn register(
        &self,
        state: &State,
        mount: &MountEntry,
        request_path: &str,
        token: &TokenEntry,
        lease: &LeaseOptions,
    ) -> Result<(String, Duration), Error> {
        let (default_ttl, mount_max) = mount_ttls(mount);
        let max_ttl = match lease.max_ttl {
            Some(max) if !max.is_zero() => max.min(mount_max),
            _ => mount_max,
        };
        let ttl = if lease.ttl.is_zero() {
            default_ttl
        } else {
            lease.ttl
        }
        .min(max_ttl);
        let lease_id = format!("{}/{}", request_path.trim_matches('/'), random_base62(24));
        let now = state.now_ms();
        let entry = LeaseEntry {
            version: 1,
            lease_id: lease_id.clone(),
            mount_uuid: mount.uuid.clone(),
            mount_path: mount.path.clone(),
            request_path: request_path.trim_matches('/').to_owned(),
            token_accessor: token.accessor.clone(),
            issue_time: now,
            expire_time: now.saturating_add(duration_ms(ttl)),
            last_renewal: None,
            ttl: ttl.as_secs(),
            max_ttl: max_ttl.as_secs(),
            renewable: lease.renewable,
            internal: lease.internal.clone(),
            revoke_attempts: 0,
            irrevocable: false,
            revoke_error: None,
        };
        self.store(state, &entry).await?;
        if !entry.token_accessor.is_empty() {
            state
                .barrier()
                .put(&token_index_key(&entry.token_accessor, &lease_id), b"")
                .await?;
        }
        self.schedule(&lease_id, entry.expire_time);
        Ok((lease_id, ttl))
    }

    /// The stored lease, if any.
    pub(crate) async fn lookup(
        &self,
        state: &State,
        lease_id: &str,
    ) -> Result<Option<LeaseEntry>, Error> {
        if lease_id.is_empty() {
            return Ok(None);
        }
        let key = format!("{ID_PREFIX}{lease_id}");
        match state.barrier().get(&key).await? {
            Some(bytes) => decode(&key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Immediate children of `prefix` among lease ids (`LIST sys/leases/lookup/:prefix`).
    pub(crate) async fn list(&self, state: &State, prefix: &str) -> Result<Vec<String>, Error> {
        let prefix = prefix.trim_start_matches('/');
        let prefix = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_owned()
        } else {
            format!("{prefix}/")
        };
        state.barrier().list(&format!("{ID_PREFIX}{prefix}")).await
    }

    /// Renews a lease by `increment` (default: its last TTL), through its engine; the new TTL
    /// is capped by the lease's max TTL and the mount's current max. Returns the updated entry
    /// and a warning when the TTL was capped.
    pub(crate) async fn renew(
        &self,
        state: &State,
        lease_id: &str,
        increment: Option<Duration>,
    ) -> Result<(LeaseEntry, Option<String>), Error> {
        let not_found = || Error::InvalidParameter("lease not found".to_owned());
        let mut entry = self.lookup(state, lease_id).await?.ok_or_else(not_found)?;
        let now = state.now_ms();
        if entry.irrevocable || entry.expire_time <= now {
            return Err(Error::InvalidParameter("lease expired".to_owned()));
        }
        if !entry.renewable {
            return Err(Error::InvalidParameter("lease is not renewable".to_owned()));
        }
        let Some((mount, engine)) = engine_for(state, &entry) else {
            return Err(not_found());
        };
        let requested = increment
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::from_secs(entry.ttl));
        let granted = engine
            .renew(&sdk_lease(&entry, now, Some(requested)))
            .await
            .map_err(Error::from)?;
        let (_, mount_max) = mount_ttls(&mount);
        let max_expire = entry
            .max_expire()
            .min(entry.issue_time.saturating_add(duration_ms(mount_max)));
        let wanted = now.saturating_add(duration_ms(granted));
        let expire = wanted.min(max_expire);
        let warning = (expire < wanted).then(|| {
            format!(
                "TTL of \"{}s\" exceeded the effective max_ttl of \"{}s\"; TTL value is capped accordingly",
                granted.as_secs(),
                (expire - now).max(0) / 1000
            )
        });
        entry.expire_time = expire;
        entry.last_renewal = Some(now);
        entry.ttl = u64::try_from((expire - now).max(0) / 1000).unwrap_or(0);
        self.store(state, &entry).await?;
        self.schedule(&entry.lease_id, entry.expire_time);
        Ok((entry, warning))
    }

    /// Revokes one lease now: the engine's `revoke`, then the record. An unknown lease is not
    /// an error. With `force`, an engine failure is logged and the record removed anyway.
    pub(crate) async fn revoke(
        &self,
        state: &State,
        lease_id: &str,
        force: bool,
    ) -> Result<(), Error> {
        let Some(entry) = self.lookup(state, lease_id).await? else {
            self.forget(lease_id);
            return Ok(());
        };
        match revoke_in_engine(state, &entry).await {
            Ok(()) => {}
            Err(err) if force => {
                tracing::warn!(lease_id, error = %err, "revoke-force: engine revoke failed; lease removed");
            }
            Err(err) => {
                return Err(Error::InvalidParameter(format!(
                    "failed to revoke lease {lease_id}: {err}"
                )));
            }
        }
        self.delete(state, &entry).await
    }

    /// Revokes every lease under `prefix` (a lease id is accepted too, as upstream). Without
    /// `force` the first engine failure is returned, after trying every lease.
    pub(crate) async fn revoke_prefix(
        &self,
        state: &State,
        prefix: &str,
        force: bool,
    ) -> Result<(), Error> {
        let prefix = prefix.trim_start_matches('/');
        if !prefix.is_empty()
            && !prefix.ends_with('/')
            && self.lookup(state, prefix).await?.is_some()
        {
            return self.revoke(state, prefix, force).await;
        }
        let prefix = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_owned()
        } else {
            format!("{prefix}/")
        };
        let scan_prefix = format!("{ID_PREFIX}{prefix}");
        let mut first_error = None;
        for (key, _) in state.barrier().scan(&scan_prefix).await? {
            let Some(lease_id) = key.strip_prefix(ID_PREFIX) else {
                continue;
            };
            if let Err(err) = self.revoke(state, lease_id, force).await {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Revokes every lease created with the token whose accessor is given (the token was
    /// revoked or expired). A lease whose engine refuses now is left to the timer loop, which
    /// retries it with backoff, so revoking a token never fails because of an engine.
    pub(crate) async fn revoke_by_token(
        &self,
        state: &State,
        token_accessor: &str,
    ) -> Result<(), Error> {
        if token_accessor.is_empty() {
            return Ok(());
        }
        let prefix = format!("{TOKEN_PREFIX}{token_accessor}/");
        for (key, _) in state.barrier().scan(&prefix).await? {
            let Some(lease_id) = key.strip_prefix(&prefix) else {
                continue;
            };
            match self.lookup(state, lease_id).await? {
                None => state.barrier().delete(&key).await?,
                Some(entry) => {
                    if let Err(err) = revoke_in_engine(state, &entry).await {
                        tracing::warn!(lease_id, error = %err, "revoking a token's lease failed; retrying later");
                        self.record_failure(state, entry, &err).await?;
                    } else {
                        self.delete(state, &entry).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes dangling index entries and revokes leases whose token no longer exists
    /// (`sys/leases/tidy`).
    pub(crate) async fn tidy(&self, state: &State) -> Result<(), Error> {
        let barrier = state.barrier();
        for (key, _) in barrier.scan(TOKEN_PREFIX).await? {
            let Some(rest) = key.strip_prefix(TOKEN_PREFIX) else {
                continue;
            };
            let Some((_, lease_id)) = rest.split_once('/') else {
                continue;
            };
            if self.lookup(state, lease_id).await?.is_none() {
                barrier.delete(&key).await?;
            }
        }
        for (key, bytes) in barrier.scan(ID_PREFIX).await? {
            let entry: LeaseEntry = decode(&key, &bytes)?;
            if entry.token_accessor.is_empty() {
                continue;
            }
            let accessor_key = format!("{TOKEN_ACCESSOR_PREFIX}{}", entry.token_accessor);
            if barrier.get(&accessor_key).await?.is_none()
                && let Err(err) = self.revoke(state, &entry.lease_id, false).await
            {
                tracing::warn!(lease_id = %entry.lease_id, error = %err, "tidy: revoke failed");
            }
        }
        Ok(())
    }

    /// Revokes one lease whose timer fired: re-reads it (a renewal may have moved it), calls the
    /// engine, and on failure schedules a retry or marks it irrevocable.
    async fn expire(&self, state: &State, lease_id: &str) -> Result<(), Error> {
        let Some(entry) = self.lookup(state, lease_id).await? else {
            return Ok(());
        };
        if entry.irrevocable {
            return Ok(());
        }
        let now = state.now_ms();
        if entry.expire_time > now && entry.revoke_attempts == 0 {
            self.schedule(lease_id, entry.expire_time);
            return Ok(());
        }
        match revoke_in_engine(state, &entry).await {
            Ok(()) => self.delete(state, &entry).await,
            Err(_) if state.barrier().is_sealed() => Ok(()),
            Err(err) => self.record_failure(state, entry, &err).await,
        }
    }

    /// Counts a failed revocation: a retry after backoff, or irrevocable after the last one.
    async fn record_failure(
        &self,
        state: &State,
        mut entry: LeaseEntry,
        err: &Error,
    ) -> Result<(), Error> {
        let attempt = entry.revoke_attempts;
        entry.revoke_attempts += 1;
        entry.revoke_error = Some(err.to_string());
        if entry.revoke_attempts >= MAX_REVOKE_ATTEMPTS {
            entry.irrevocable = true;
            tracing::error!(lease_id = %entry.lease_id, error = %err, "lease marked irrevocable");
            self.store(state, &entry).await?;
            self.forget(&entry.lease_id);
        } else {
            self.store(state, &entry).await?;
            let delay = self.backoff(attempt);
            self.schedule(
                &entry.lease_id,
                state.now_ms().saturating_add(duration_ms(delay)),
            );
        }
        Ok(())
    }

    /// `(1<<attempt) * retry_base`, jittered by ±50%.
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self.retry_base_ms.load(Ordering::Relaxed);
        let nominal = base.saturating_mul(1u64 << attempt.min(20));
        let jitter = rand::rng().random_range(0.5..1.5);
        Duration::from_millis((nominal as f64 * jitter) as u64)
    }

    async fn store(&self, state: &State, entry: &LeaseEntry) -> Result<(), Error> {
        let key = format!("{ID_PREFIX}{}", entry.lease_id);
        let bytes = serde_json::to_vec(entry).map_err(|err| Error::CorruptRecord {
            key: key.clone(),
            reason: err.to_string(),
        })?;
        state.barrier().put(&key, &bytes).await
    }

    async fn delete(&self, state: &State, entry: &LeaseEntry) -> Result<(), Error> {
        self.forget(&entry.lease_id);
        if !entry.token_accessor.is_empty() {
            state
                .barrier()
                .delete(&token_index_key(&entry.token_accessor, &entry.lease_id))
                .await?;
        }
        state
            .barrier()
            .delete(&format!("{ID_PREFIX}{}", entry.lease_id))
            .await
    }
}

/// The timer loop (a leader loop, started by `start_tasks`): rebuilds every lease timer and
/// the token expiry index from storage (when unsealed), then sleeps until the earliest
/// deadline, a change, or a jump of the clock, revokes what is due with bounded concurrency,
/// runs the token store's expiry pass every second (and after a jump), and stops at `term`
/// after the revocations in flight end.
pub(crate) async fn run(state: State, term: CancellationToken) {
    if state.seal().is_unsealed() {
        // A new leader may hold stale timers, or none: storage is the truth.
        if let Err(err) = rebuild(&state).await {
            tracing::warn!(error = %err, "rebuilding lease and token timers failed");
        }
    }
    let manager = state.leases();
    // The system clock never jumps: its stand-in is a `Notify` nobody fires.
    let clock_jumped = state
        .clock()
        .jumped()
        .unwrap_or_else(|| std::sync::Arc::new(Notify::new()));
    let mut in_flight: JoinSet<()> = JoinSet::new();
    let mut token_tidy = tokio::time::interval(TOKEN_TIDY_INTERVAL);
    token_tidy.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Registered before reading the clock, so a jump from now on is not missed.
        let jumped = clock_jumped.notified();
        tokio::pin!(jumped);
        jumped.as_mut().enable();
        while in_flight.try_join_next().is_some() {}
        let now = state.now_ms();
        let wait = match manager.next_deadline() {
            Some(deadline) => Duration::from_millis(u64::try_from(deadline - now).unwrap_or(0)),
            None => Duration::from_secs(3600),
        };
        if wait.is_zero() && in_flight.len() < MAX_CONCURRENT_REVOKES {
            let room = MAX_CONCURRENT_REVOKES - in_flight.len();
            let mut due = manager.take_due(now);
            let later = due.split_off(due.len().min(room));
            for id in later {
                // Over the concurrency bound: back on the heap, due now.
                manager.schedule(&id, now);
            }
            for id in due {
                let state = state.clone();
                in_flight.spawn(async move {
                    if let Err(err) = state.leases().expire(&state, &id).await {
                        tracing::warn!(lease_id = %id, error = %err, "lease expiry failed");
                    }
                });
            }
            continue;
        }
        let wait = if wait.is_zero() {
            Duration::from_millis(10)
        } else {
            wait
        };
        let tidy_tokens = tokio::select! {
            () = term.cancelled() => break,
            () = manager.notify.notified() => false,
            () = tokio::time::sleep(wait) => false,
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => false,
            _ = token_tidy.tick() => true,
            () = &mut jumped => true,
        };
        // Expired and used-up tokens: revoked with their subtrees and leases.
        if tidy_tokens
            && state.seal().is_unsealed()
            && let Err(err) = crate::tokens::tidy(&state).await
        {
            tracing::warn!(error = %err, "token expiry pass failed");
        }
    }
    while in_flight.join_next().await.is_some() {}
}

/// Every expiry timer from storage: the leases' and the tokens'.
async fn rebuild(state: &State) -> Result<(), Error> {
    state.leases().load(state).await?;
    state.tokens().load(state).await
}

/// The mount that issued a lease (found by uuid, so a tuned mount is seen as it is now) and
/// its engine, if the mount still exists.
fn engine_for(
    state: &State,
    entry: &LeaseEntry,
) -> Option<(MountEntry, std::sync::Arc<dyn secrets_sdk::Engine>)> {
    let (mount, backend) = state.mounts().by_uuid(&entry.mount_uuid)?;
    #[cfg(test)]
    if let Some(engine) = state.leases().test_engine(&entry.mount_uuid) {
        return Some((mount, engine));
    }
    match backend {
        Backend::Engine(engine) => Some((mount, engine)),
        _ => None,
    }
}

/// Calls the engine's `revoke`; a lease whose mount is gone has nothing left to revoke.
async fn revoke_in_engine(state: &State, entry: &LeaseEntry) -> Result<(), Error> {
    if state.barrier().is_sealed() {
        return Err(Error::Sealed);
    }
    let Some((_, engine)) = engine_for(state, entry) else {
        tracing::warn!(lease_id = %entry.lease_id, mount = %entry.mount_path, "lease's mount is gone; dropping the lease");
        return Ok(());
    };
    engine
        .revoke(&sdk_lease(entry, state.now_ms(), None))
        .await
        .map_err(Error::from)
}

fn sdk_lease(entry: &LeaseEntry, now: i64, increment: Option<Duration>) -> Lease {
    Lease {
        lease_id: entry.lease_id.clone(),
        path: entry
            .request_path
            .strip_prefix(&entry.mount_path)
            .unwrap_or(&entry.request_path)
            .to_owned(),
        internal: entry.internal.clone(),
        age: Duration::from_millis(u64::try_from(now - entry.issue_time).unwrap_or(0)),
        increment,
    }
}

/// The mount's (default TTL, max TTL) in force, the system's where the mount sets none.
fn mount_ttls(mount: &MountEntry) -> (Duration, Duration) {
    (mount.default_lease_ttl(), mount.max_lease_ttl())
}

fn token_index_key(accessor: &str, lease_id: &str) -> String {
    format!("{TOKEN_PREFIX}{accessor}/{lease_id}")
}

fn decode<T: serde::de::DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|err| Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    })
}

fn random_base62(len: usize) -> String {
    rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_within_half() {
        let manager = ExpirationManager::with_retry_base(Duration::from_millis(100));
        for attempt in 0..5u32 {
            let nominal = 100u64 << attempt;
            for _ in 0..20 {
                let got = manager.backoff(attempt).as_millis() as u64;
                assert!(
                    got >= nominal / 2 && got <= nominal * 3 / 2,
                    "{attempt}: {got}"
                );
            }
        }
    }

    #[test]
    fn stale_heap_entries_are_skipped() {
        let manager = ExpirationManager::default();
        manager.schedule("a/1", 100);
        manager.schedule("b/2", 50);
        manager.schedule("a/1", 300); // renewed
        assert_eq!(manager.next_deadline(), Some(50));
        assert_eq!(manager.take_due(200), vec!["b/2".to_owned()]);
        assert_eq!(manager.next_deadline(), Some(300));
        manager.forget("a/1");
        assert_eq!(manager.next_deadline(), None);
    }

    #[test]
    fn lease_ids_end_in_24_base62_chars() {
        let id = random_base62(24);
        assert_eq!(id.len(), 24);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}

#[cfg(test)]
mod manager_tests {
    //! The manager end to end over a dev-mode `State`, with a fake engine standing in for a
    //! mount's own (the registry has no leasing engine yet).

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    use async_trait::async_trait;
    use secrets_sdk::{Engine, EngineError, Request, Response};
    use stdx::clock::ManualClock;
    use storage::{MemStorage, Storage};

    use super::*;
    use crate::Config;

    #[derive(Debug, Default)]
    struct FakeEngine {
        revokes: AtomicUsize,
        fail: AtomicBool,
        revoked: Mutex<Vec<(String, Data)>>,
    }

    #[async_trait]
    impl Engine for FakeEngine {
        async fn handle(&self, _request: Request) -> Result<Option<Response>, EngineError> {
            Ok(None)
        }

        async fn revoke(&self, lease: &Lease) -> Result<(), EngineError> {
            self.revokes.fetch_add(1, Ordering::SeqCst);
            if self.fail.load(Ordering::SeqCst) {
                return Err(EngineError::Internal("remote system down".to_owned()));
            }
            self.revoked
                .lock()
                .unwrap()
                .push((lease.path.clone(), lease.internal.clone()));
            Ok(())
        }
    }

    impl FakeEngine {
        fn revokes(&self) -> usize {
            self.revokes.load(Ordering::SeqCst)
        }
    }

    struct Fixture {
        state: State,
        engine: Arc<FakeEngine>,
        mount: MountEntry,
        token: TokenEntry,
    }

    async fn open(storage: Arc<dyn Storage>, key_file: Option<std::path::PathBuf>) -> State {
        State::open(storage, dev_config(key_file)).await.unwrap()
    }

    fn dev_config(key_file: Option<std::path::PathBuf>) -> Config {
        Config {
            dev_root_token: Some("root".to_owned()),
            dev_unseal_key_file: key_file,
            ..Config::default()
        }
    }

    async fn fixture_on(state: State, mount_at: &str, default: u64, max: u64) -> Fixture {
        let mount = match state.mounts().get(mount_at) {
            Some(mount) => mount,
            None => {
                let mut entry = crate::mounts::new_entry(mount_at, "kv");
                entry.config.default_lease_ttl = Duration::from_secs(default);
                entry.config.max_lease_ttl = Duration::from_secs(max);
                state.mounts().mount(&state, entry).await.unwrap();
                state.mounts().get(mount_at).unwrap()
            }
        };
        let engine = Arc::new(FakeEngine::default());
        state
            .leases()
            .test_engines
            .lock()
            .unwrap()
            .insert(mount.uuid.clone(), engine.clone());
        let token = state
            .tokens()
            .lookup(&state, "root")
            .await
            .unwrap()
            .map(std::sync::Arc::unwrap_or_clone)
            .unwrap();
        Fixture {
            state,
            engine,
            mount,
            token,
        }
    }

    async fn fixture(default: u64, max: u64) -> Fixture {
        let state = open(Arc::new(MemStorage::new()), None).await;
        fixture_on(state, "leasing/", default, max).await
    }

    /// [`fixture`] on a manual clock.
    async fn fixture_on_clock(default: u64, max: u64) -> (Fixture, ManualClock) {
        let clock = ManualClock::at_system_time();
        let state = State::open_with_clock(
            Arc::new(MemStorage::new()),
            dev_config(None),
            Arc::new(clock.clone()),
        )
        .await
        .unwrap();
        (fixture_on(state, "leasing/", default, max).await, clock)
    }

    fn lease(ttl: Duration) -> LeaseOptions {
        let mut internal = Data::new();
        internal.insert("username".to_owned(), "v-alice".into());
        LeaseOptions {
            ttl,
            max_ttl: None,
            renewable: true,
            internal,
        }
    }

    impl Fixture {
        async fn register(&self, path: &str, options: &LeaseOptions) -> (String, Duration) {
            self.state
                .leases()
                .register(&self.state, &self.mount, path, &self.token, options)
                .await
                .unwrap()
        }

        /// Starts the service's background loops as `cairn` does; stop them with
        /// `shutdown_and_wait`.
        fn start(&self) -> cluster::Runner {
            let runner = cluster::Runner::embedded(CancellationToken::new());
            crate::start_tasks(&self.state, &runner);
            runner
        }

        async fn stored(&self, lease_id: &str) -> Option<LeaseEntry> {
            self.state
                .leases()
                .lookup(&self.state, lease_id)
                .await
                .unwrap()
        }
    }

    /// Polls `check` every 10 ms for up to 2 s.
    async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
        for _ in 0..200 {
            if check().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn register_stores_the_lease_and_caps_its_ttl() {
        let f = fixture(3600, 7200).await;
        let (id, ttl) = f.register("leasing/creds/ro", &lease(Duration::ZERO)).await;
        assert_eq!(ttl, Duration::from_secs(3600), "mount default");
        let (suffix_len, prefix) = (id.rsplit('/').next().unwrap().len(), "leasing/creds/ro/");
        assert!(id.starts_with(prefix) && suffix_len == 24, "{id}");
        let entry = f.stored(&id).await.unwrap();
        assert_eq!(entry.mount_uuid, f.mount.uuid);
        assert_eq!(entry.mount_path, "leasing/");
        assert_eq!(entry.request_path, "leasing/creds/ro");
        assert_eq!(entry.token_accessor, f.token.accessor);
        assert_eq!(entry.internal["username"], "v-alice");
        assert_eq!(entry.max_ttl, 7200);

        let (_, ttl) = f
            .register("leasing/creds/ro", &lease(Duration::from_secs(99_999)))
            .await;
        assert_eq!(ttl, Duration::from_secs(7200), "capped by the mount max");
        let mut capped = lease(Duration::from_secs(3600));
        capped.max_ttl = Some(Duration::from_secs(60));
        let (_, ttl) = f.register("leasing/creds/ro", &capped).await;
        assert_eq!(
            ttl,
            Duration::from_secs(60),
            "capped by the lease's own max"
        );
        assert_eq!(f.state.leases().pending(), 3);

        let keys = f
            .state
            .leases()
            .list(&f.state, "leasing/creds/")
            .await
            .unwrap();
        assert_eq!(keys, vec!["ro/".to_owned()]);
        assert_eq!(
            f.state
                .leases()
                .list(&f.state, "leasing/creds/ro")
                .await
                .unwrap()
                .len(),
            3
        );
    }

    #[tokio::test]
    async fn system_max_applies_without_mount_settings() {
        let f = fixture(0, 0).await;
        let (_, ttl) = f.register("leasing/x", &lease(Duration::ZERO)).await;
        assert_eq!(ttl, Duration::from_secs(768 * 3600));
    }

    #[tokio::test]
    async fn expired_leases_are_revoked_through_their_engine() {
        let f = fixture(3600, 7200).await;
        let (short, _) = f
            .register("leasing/creds/ro", &lease(Duration::from_millis(200)))
            .await;
        let (long, _) = f
            .register("leasing/creds/ro", &lease(Duration::from_secs(3600)))
            .await;
        let runner = f.start();
        eventually("the engine's revoke", async || f.engine.revokes() == 1).await;
        eventually("the record's removal", async || {
            f.stored(&short).await.is_none()
        })
        .await;
        let revoked = f.engine.revoked.lock().unwrap().clone();
        assert_eq!(revoked[0].0, "creds/ro", "path relative to the mount");
        assert_eq!(
            revoked[0].1["username"], "v-alice",
            "internal data handed back"
        );
        assert!(f.stored(&long).await.is_some());
        assert_eq!(f.state.leases().pending(), 1);
        runner.shutdown_and_wait().await;
    }

    #[tokio::test]
    async fn advancing_the_one_clock_expires_both_a_token_and_a_lease() {
        let (f, clock) = fixture_on_clock(3600, 7200).await;
        let (lease_id, _) = f
            .register("leasing/creds/ro", &lease(Duration::from_secs(3600)))
            .await;
        let (status, created) = http(
            &f.state,
            "POST",
            "/v1/auth/token/create",
            serde_json::json!({"ttl": "1h"}),
        )
        .await;
        assert_eq!(status, http::StatusCode::OK, "{created}");
        let token = created["auth"]["client_token"].as_str().unwrap().to_owned();
        let tokens = f.state.tokens();
        let runner = f.start();

        clock.advance(Duration::from_secs(3599));
        assert!(tokens.lookup(&f.state, &token).await.unwrap().is_some());
        assert!(f.stored(&lease_id).await.is_some());
        assert_eq!(f.engine.revokes(), 0);

        clock.advance(Duration::from_secs(2));
        assert!(
            tokens.lookup(&f.state, &token).await.unwrap().is_none(),
            "the token's lookup reads the same clock"
        );
        eventually("the lease's revocation", async || {
            f.stored(&lease_id).await.is_none()
        })
        .await;
        assert_eq!(f.engine.revokes(), 1);
        eventually("the token's revocation", async || {
            let hash = crate::tokens::store::hash_id(&token);
            crate::tokens::store::get(&f.state, &crate::tokens::store::id_key(&hash))
                .await
                .unwrap()
                .is_none()
        })
        .await;
        runner.shutdown_and_wait().await;
    }

    #[tokio::test]
    async fn failed_revocations_retry_with_backoff_then_become_irrevocable() {
        let f = fixture(3600, 7200).await;
        f.state.leases().set_retry_base(Duration::from_millis(5));
        f.engine.fail.store(true, Ordering::SeqCst);
        let (id, _) = f
            .register("leasing/creds/ro", &lease(Duration::from_millis(50)))
            .await;
        let runner = f.start();
        eventually("irrevocable", async || {
            f.stored(&id).await.is_some_and(|e| e.irrevocable)
        })
        .await;
        let entry = f.stored(&id).await.unwrap();
        assert_eq!(entry.revoke_attempts, MAX_REVOKE_ATTEMPTS);
        assert_eq!(f.engine.revokes(), MAX_REVOKE_ATTEMPTS as usize);
        assert!(entry.revoke_error.unwrap().contains("remote system down"));
        assert_eq!(f.state.leases().pending(), 0, "no more timers");
        let lookup = entry_lookup(&f, &id).await;
        assert_eq!(lookup["renewable"], false);

        // Plain revoke keeps failing; revoke-force removes it.
        assert!(f.state.leases().revoke(&f.state, &id, false).await.is_err());
        assert!(f.stored(&id).await.is_some());
        f.state
            .leases()
            .revoke_prefix(&f.state, "leasing/creds/", true)
            .await
            .unwrap();
        assert!(f.stored(&id).await.is_none());
        runner.shutdown_and_wait().await;
    }

    async fn entry_lookup(f: &Fixture, id: &str) -> serde_json::Value {
        f.stored(id).await.unwrap().lookup_json(f.state.now_ms())
    }

    #[tokio::test]
    async fn renew_extends_within_the_max_and_refuses_what_upstream_refuses() {
        let f = fixture(60, 600).await;
        let (id, _) = f.register("leasing/creds/ro", &lease(Duration::ZERO)).await;
        let leases = f.state.leases();
        let (entry, warning) = leases
            .renew(&f.state, &id, Some(Duration::from_secs(300)))
            .await
            .unwrap();
        assert_eq!(entry.ttl, 300);
        assert!(warning.is_none());
        assert!(entry.last_renewal.is_some());
        let (entry, warning) = leases
            .renew(&f.state, &id, Some(Duration::from_secs(10_000)))
            .await
            .unwrap();
        assert!(
            (599..=600).contains(&entry.ttl),
            "capped at the mount max: {}",
            entry.ttl
        );
        assert!(warning.unwrap().contains("capped"));
        // Without an increment: the last TTL again.
        let (entry, _) = leases.renew(&f.state, &id, None).await.unwrap();
        assert!(entry.ttl >= 599);

        let err = leases
            .renew(&f.state, "leasing/nope/x", None)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "lease not found");
        let mut fixed = lease(Duration::from_secs(60));
        fixed.renewable = false;
        let (id, _) = f.register("leasing/creds/ro", &fixed).await;
        let err = leases.renew(&f.state, &id, None).await.unwrap_err();
        assert_eq!(err.to_string(), "lease is not renewable");
        let (id, _) = f
            .register("leasing/creds/ro", &lease(Duration::from_millis(1)))
            .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let err = leases.renew(&f.state, &id, None).await.unwrap_err();
        assert_eq!(err.to_string(), "lease expired");
    }

    #[tokio::test]
    async fn revoking_by_token_revokes_only_that_tokens_leases() {
        let f = fixture(3600, 7200).await;
        let (mine, _) = f.register("leasing/a", &lease(Duration::ZERO)).await;
        let mut other = f.token.clone();
        other.accessor = "other-accessor".to_owned();
        let (theirs, _) = f
            .state
            .leases()
            .register(
                &f.state,
                &f.mount,
                "leasing/a",
                &other,
                &lease(Duration::ZERO),
            )
            .await
            .unwrap();
        f.state
            .leases()
            .revoke_by_token(&f.state, &f.token.accessor)
            .await
            .unwrap();
        assert!(f.stored(&mine).await.is_none());
        assert!(f.stored(&theirs).await.is_some());
        assert_eq!(f.engine.revokes(), 1);
        assert!(
            f.state
                .barrier()
                .scan(&format!("{TOKEN_PREFIX}{}/", f.token.accessor))
                .await
                .unwrap()
                .is_empty(),
            "index cleaned"
        );
    }

    #[tokio::test]
    async fn a_failing_engine_does_not_fail_token_revocation_but_is_retried() {
        let f = fixture(3600, 7200).await;
        f.state.leases().set_retry_base(Duration::from_millis(5));
        let (id, _) = f.register("leasing/a", &lease(Duration::ZERO)).await;
        f.engine.fail.store(true, Ordering::SeqCst);
        f.state
            .leases()
            .revoke_by_token(&f.state, &f.token.accessor)
            .await
            .unwrap();
        assert_eq!(f.stored(&id).await.unwrap().revoke_attempts, 1);
        f.engine.fail.store(false, Ordering::SeqCst);
        let runner = f.start();
        eventually("the retry", async || f.stored(&id).await.is_none()).await;
        runner.shutdown_and_wait().await;
    }

    #[tokio::test]
    async fn revoke_prefix_accepts_a_lease_id_or_a_prefix_and_stops_on_errors_unless_forced() {
        let f = fixture(3600, 7200).await;
        let (one, _) = f.register("leasing/creds/a", &lease(Duration::ZERO)).await;
        let (two, _) = f.register("leasing/creds/b", &lease(Duration::ZERO)).await;
        let (three, _) = f.register("leasing/other", &lease(Duration::ZERO)).await;
        let leases = f.state.leases();
        leases.revoke_prefix(&f.state, &one, false).await.unwrap();
        assert!(f.stored(&one).await.is_none());
        f.engine.fail.store(true, Ordering::SeqCst);
        assert!(
            leases
                .revoke_prefix(&f.state, "leasing/creds", false)
                .await
                .is_err()
        );
        assert!(f.stored(&two).await.is_some());
        leases
            .revoke_prefix(&f.state, "leasing/creds", true)
            .await
            .unwrap();
        assert!(f.stored(&two).await.is_none());
        assert!(f.stored(&three).await.is_some(), "outside the prefix");
        // `leasing/cred` is not a prefix of `leasing/creds/...` as a path.
        f.engine.fail.store(false, Ordering::SeqCst);
        leases
            .revoke_prefix(&f.state, "leasing/oth", false)
            .await
            .unwrap();
        assert!(f.stored(&three).await.is_some());
        // Unknown leases revoke quietly.
        leases
            .revoke(&f.state, "leasing/nope/x", false)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn unmounting_revokes_the_mounts_leases() {
        let f = fixture(3600, 7200).await;
        let (id, _) = f.register("leasing/creds/a", &lease(Duration::ZERO)).await;
        f.state
            .mounts()
            .unmount(&f.state, "leasing/")
            .await
            .unwrap();
        assert!(f.stored(&id).await.is_none());
        assert_eq!(f.engine.revokes(), 1);
    }

    #[tokio::test]
    async fn timers_are_dropped_on_seal_and_rebuilt_from_storage_after_a_restart() {
        let mut store = testkit::TempStore::new();
        let key_file = store.dir().join("unseal.key");
        let first = fixture_on(
            open(store.storage(), Some(key_file.clone())).await,
            "leasing/",
            3600,
            7200,
        )
        .await;
        let (soon, _) = first
            .register("leasing/creds/a", &lease(Duration::from_millis(400)))
            .await;
        let (later, _) = first
            .register("leasing/creds/a", &lease(Duration::from_secs(3600)))
            .await;
        let before = first.stored(&later).await.unwrap();
        let soon_before = first.stored(&soon).await.unwrap();
        first.state.leases().clear();
        assert_eq!(first.state.leases().pending(), 0, "seal drops every timer");
        drop(first);

        // Restart: the store reopened from disk, a new State; nothing ran in between.
        store.reopen().await;
        let second = fixture_on(
            open(store.storage(), Some(key_file)).await,
            "leasing/",
            0,
            0,
        )
        .await;
        assert_eq!(
            second.state.leases().pending(),
            2,
            "timers rebuilt at unseal"
        );
        assert_eq!(
            second.stored(&later).await.unwrap(),
            before,
            "deadline kept"
        );
        let runner = second.start();
        eventually("the expiry after restart", async || {
            second.stored(&soon).await.is_none()
        })
        .await;
        let revoked_at = second.state.now_ms();
        assert!(
            revoked_at >= soon_before.issue_time + 400,
            "not before its deadline"
        );
        assert_eq!(second.engine.revokes(), 1);
        assert!(second.stored(&later).await.is_some());
        runner.shutdown_and_wait().await;
    }

    /// One request through the router as the dev root token.
    async fn http(
        state: &State,
        method: &str,
        path: &str,
        body: serde_json::Value,
    ) -> (http::StatusCode, serde_json::Value) {
        let request = testkit::request(method, path)
            .header("X-Vault-Token", "root")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let response = testkit::call(&crate::router(state.clone()), request).await;
        let value = if response.body.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&response.body).unwrap()
        };
        (response.status, value)
    }

    #[tokio::test]
    async fn lease_endpoints_look_up_list_renew_and_revoke_a_real_lease() {
        use http::StatusCode;
        use serde_json::json;
        let f = fixture(60, 600).await;
        let (id, _) = f.register("leasing/creds/ro", &lease(Duration::ZERO)).await;

        let (status, body) = http(
            &f.state,
            "PUT",
            "/v1/sys/leases/lookup",
            json!({"lease_id": id}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let data = &body["data"];
        assert_eq!(data["id"], id.as_str());
        assert_eq!(data["renewable"], true);
        assert!((59..=60).contains(&data["ttl"].as_u64().unwrap()), "{data}");
        assert!(data["issue_time"].as_str().unwrap().ends_with('Z'));
        assert!(data["expire_time"].as_str().unwrap() > data["issue_time"].as_str().unwrap());
        assert_eq!(data["last_renewal"], serde_json::Value::Null);

        let (status, body) = http(
            &f.state,
            "LIST",
            "/v1/sys/leases/lookup/leasing/creds/",
            json!(null),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"]["keys"], json!(["ro/"]));

        let (status, body) = http(
            &f.state,
            "PUT",
            "/v1/sys/leases/renew",
            json!({"lease_id": id, "increment": "5m"}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["lease_id"], id.as_str());
        assert_eq!(body["renewable"], true);
        assert_eq!(body["lease_duration"], 300);
        assert_eq!(body["warnings"], serde_json::Value::Null);
        let (status, body) = http(
            &f.state,
            "PUT",
            &format!("/v1/sys/renew/{id}"),
            json!({"increment": 99_999}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            body["lease_duration"].as_u64().unwrap() <= 600,
            "capped: {body}"
        );
        assert_eq!(body["warnings"].as_array().map(Vec::len), Some(1), "{body}");
        let (_, body) = http(
            &f.state,
            "PUT",
            "/v1/sys/leases/lookup",
            json!({"lease_id": id}),
        )
        .await;
        assert!(body["data"]["last_renewal"].is_string(), "{body}");

        let (status, _) = http(
            &f.state,
            "PUT",
            &format!("/v1/sys/leases/revoke/{id}"),
            json!(null),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(f.engine.revokes(), 1);
        let (status, body) = http(
            &f.state,
            "PUT",
            "/v1/sys/leases/lookup",
            json!({"lease_id": id}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body, json!({"errors": ["invalid lease"]}));

        // revoke-prefix through the legacy path.
        let (other, _) = f.register("leasing/creds/rw", &lease(Duration::ZERO)).await;
        let (status, _) = http(
            &f.state,
            "PUT",
            "/v1/sys/revoke-prefix/leasing/creds",
            json!(null),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(f.stored(&other).await.is_none());
        assert_eq!(f.engine.revokes(), 2);
    }
}
