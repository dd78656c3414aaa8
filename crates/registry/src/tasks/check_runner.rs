//! Health-check runner: TTL checks turn critical (Output "TTL expired") when not updated in
//! time; HTTP and TCP checks are really run by the server at their interval; services whose
//! check stays critical longer than its `DeregisterCriticalServiceAfter` are deregistered.
//!
//! Where it sits: started by `registry::start_tasks`; it keeps its own view of the checks by scanning the
//! catalog's checks and the TTL deadlines (`store/catalog.rs`) at start and then following
//! storage watches on both ranges, so checks registered or removed by any writer (agent
//! endpoints, catalog endpoints, another server sharing the store) are picked up at once, and
//! no timer is lost across a restart: TTL deadlines are stored, not kept in memory.
//!
//! Invariants:
//! - Every status it writes goes through `domain/checks.rs` (`update_check_status`,
//!   `expire_ttl_check`: compare-and-swap, then session invalidation when critical).
//! - A TTL check is expired no earlier than its stored deadline (read from `State::clock`,
//!   re-checked when a manual clock jumps) and, in real time, promptly after it.
//! - At most one probe per check is in flight; a probe's result is written only if it changes
//!   the check's status or output, so a steadily passing check writes nothing.
//! - At start (and after any restart of the loop) sessions bound to already-critical checks
//!   are invalidated, which repairs a crash between a critical write and its invalidation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use storage::{EventKind, WatchStream};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::domain::catalog::{self, Removal};
use crate::domain::checks::{self, DEFAULT_TIMEOUT, TtlUpdate};
use crate::domain::sessions;
use crate::store::catalog::{
    CheckKind, CheckRecord, CheckStatus, DeadlineRecord, checks_prefix, checks_range,
    deadlines_prefix, deadlines_range,
};
use crate::store::decode;
use crate::{Error, State};

/// How long the loop waits before starting over after a storage error.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// How often this server's own node registration is re-asserted (Consul's anti-entropy).
const ANTI_ENTROPY_INTERVAL: Duration = Duration::from_secs(60);

/// The shortest `DeregisterCriticalServiceAfter` honoured (Consul's minimum).
const MIN_DEREGISTER_AFTER_MS: u64 = 60_000;

pub(crate) async fn run(state: State, shutdown: CancellationToken) {
    let clients = match Clients::new() {
        Ok(clients) => Arc::new(clients),
        Err(err) => {
            tracing::error!(error = %err, "registry check runner: cannot build the HTTP client");
            shutdown.cancelled().await;
            return;
        }
    };
    while !shutdown.is_cancelled() {
        match run_once(&state, &shutdown, &clients).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(error = %err, "registry check runner: restarting");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RESTART_PAUSE) => {}
                }
            }
        }
    }
}

/// The HTTP clients probes use (one verifying TLS, one not for `TLSSkipVerify`).
struct Clients {
    verifying: reqwest::Client,
    insecure: reqwest::Client,
}

impl Clients {
    fn new() -> Result<Clients, reqwest::Error> {
        let builder = || {
            reqwest::Client::builder()
                .user_agent("Consul Health Check")
                .redirect(reqwest::redirect::Policy::limited(10))
        };
        Ok(Clients {
            verifying: builder().build()?,
            insecure: builder().danger_accept_invalid_certs(true).build()?,
        })
    }
}

/// What the runner knows of one check (keyed by `<node>/<check-id>`).
#[derive(Debug)]
struct Tracked {
    record: CheckRecord,
    /// When the next probe is due (HTTP/TCP checks).
    next_run: Option<Instant>,
    in_flight: bool,
    /// Bumped when the definition changes, so a stale probe result is dropped.
    generation: u64,
    /// Clock ms since when the runner has seen the check critical.
    critical_since_ms: Option<u64>,
}

struct Runner {
    checks: HashMap<String, Tracked>,
    /// TTL deadlines by `<node>/<check-id>` (Unix ms).
    deadlines: HashMap<String, u64>,
    next_generation: u64,
}

/// The result of one probe.
struct Probe {
    suffix: String,
    generation: u64,
}

fn split_suffix(suffix: &str) -> Option<(&str, &str)> {
    suffix.split_once('/')
}

fn suffix_of(key: &[u8], prefix: &str) -> Option<String> {
    key.strip_prefix(prefix.as_bytes())
        .map(|rest| String::from_utf8_lossy(rest).into_owned())
}

impl Runner {
    fn new() -> Runner {
        Runner {
            checks: HashMap::new(),
            deadlines: HashMap::new(),
            next_generation: 0,
        }
    }

    fn put_check(&mut self, suffix: String, record: CheckRecord, now_ms: u64) {
        let critical = record.status == CheckStatus::Critical;
        match self.checks.get_mut(&suffix) {
            Some(tracked) => {
                let redefined = tracked.record.kind != record.kind
                    || tracked.record.definition != record.definition;
                if redefined {
                    self.next_generation += 1;
                    tracked.generation = self.next_generation;
                    tracked.in_flight = false;
                    tracked.next_run = probe_kind(&record).then(Instant::now);
                }
                tracked.critical_since_ms = match (critical, tracked.critical_since_ms) {
                    (false, _) => None,
                    (true, Some(since)) => Some(since),
                    (true, None) => Some(now_ms),
                };
                tracked.record = record;
            }
            None => {
                self.next_generation += 1;
                let next_run = probe_kind(&record).then(Instant::now);
                self.checks.insert(
                    suffix,
                    Tracked {
                        critical_since_ms: critical.then_some(now_ms),
                        record,
                        next_run,
                        in_flight: false,
                        generation: self.next_generation,
                    },
                );
            }
        }
    }

    /// The earliest clock deadline (TTL expiry or critical-service reaping), in clock ms.
    fn next_clock_deadline(&self) -> Option<u64> {
        let ttl = self.deadlines.values().copied().min();
        let reap = self
            .checks
            .values()
            .filter_map(|tracked| reap_at(&tracked.record, tracked.critical_since_ms))
            .min();
        match (ttl, reap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest probe due that is not already running.
    fn next_probe(&self) -> Option<Instant> {
        self.checks
            .values()
            .filter(|tracked| !tracked.in_flight)
            .filter_map(|tracked| tracked.next_run)
            .min()
    }
}

fn probe_kind(record: &CheckRecord) -> bool {
    matches!(record.kind, CheckKind::Http | CheckKind::Tcp)
}

/// When a service with this critical check is to be deregistered (clock ms).
fn reap_at(record: &CheckRecord, critical_since_ms: Option<u64>) -> Option<u64> {
    let after = record.definition.deregister_critical_service_after_ms;
    if after == 0 || record.service_id.is_empty() {
        return None;
    }
    critical_since_ms.map(|since| since.saturating_add(after.max(MIN_DEREGISTER_AFTER_MS)))
}

async fn run_once(
    state: &State,
    shutdown: &CancellationToken,
    clients: &Arc<Clients>,
) -> Result<(), Error> {
    let storage = state.storage();
    let mut runner = Runner::new();
    let now_ms = state.now_ms();
    let checks = storage.scan(checks_range(), None).await?;
    let deadlines = storage.scan(deadlines_range(), None).await?;
    let mut checks_watch = storage.watch(checks_range(), checks.revision).await?;
    let mut deadlines_watch = storage.watch(deadlines_range(), deadlines.revision).await?;
    let checks_prefix = checks_prefix();
    let deadlines_prefix = deadlines_prefix();
    for kv in &checks.kvs {
        if let Some(suffix) = suffix_of(&kv.key, &checks_prefix) {
            runner.put_check(suffix, decode(&kv.key, &kv.value)?, now_ms);
        }
    }
    for kv in &deadlines.kvs {
        if let Some(suffix) = suffix_of(&kv.key, &deadlines_prefix) {
            let record: DeadlineRecord = decode(&kv.key, &kv.value)?;
            runner.deadlines.insert(suffix, record.deadline_ms);
        }
    }
    // Repair a crash between a critical write and the invalidation that follows it.
    for tracked in runner.checks.values() {
        if tracked.record.status == CheckStatus::Critical {
            sessions::invalidate_sessions_for_check(
                state,
                &tracked.record.node,
                &tracked.record.check_id,
            )
            .await?;
        }
    }

    let jumped = state.clock().jumped();
    let mut probes: JoinSet<Probe> = JoinSet::new();
    let mut anti_entropy = tokio::time::interval_at(
        Instant::now() + ANTI_ENTROPY_INTERVAL,
        ANTI_ENTROPY_INTERVAL,
    );
    loop {
        // Created before the clock is read, so a jump that lands while this iteration works
        // is not missed (a `Notified` receives `notify_waiters` from its creation on).
        let jump = jumped.as_deref().map(tokio::sync::Notify::notified);
        let now_ms = state.now_ms();
        expire_due(state, &mut runner, now_ms).await;
        reap_due(state, &mut runner, now_ms).await;
        launch_due(state, clients, &mut runner, &mut probes);

        let clock_wait = runner
            .next_clock_deadline()
            .map(|deadline| Duration::from_millis(deadline.saturating_sub(now_ms)));
        let probe_at = runner.next_probe();
        let jump = async {
            match jump {
                Some(notified) => notified.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = checks_watch.next_event() => {
                apply_check_event(&mut runner, event, &checks_prefix, state.now_ms())?;
                drain(&mut runner, &mut checks_watch, &checks_prefix, state)?;
            }
            event = deadlines_watch.next_event() => {
                apply_deadline_event(&mut runner, event, &deadlines_prefix)?;
            }
            Some(done) = probes.join_next(), if !probes.is_empty() => {
                if let Ok(probe) = done
                    && let Some(tracked) = runner.checks.get_mut(&probe.suffix)
                    && tracked.generation == probe.generation
                {
                    tracked.in_flight = false;
                }
            }
            () = sleep_opt(clock_wait) => {}
            () = sleep_until_opt(probe_at) => {}
            () = jump => {}
            _ = anti_entropy.tick() => {
                if let Err(err) = catalog::register_self(state).await {
                    tracing::warn!(error = %err, "registry: re-registering this node failed");
                }
            }
        }
    }
}

async fn sleep_opt(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Applies further check events that are already waiting, so a burst is handled at once.
fn drain(
    runner: &mut Runner,
    watch: &mut WatchStream,
    prefix: &str,
    state: &State,
) -> Result<(), Error> {
    use futures::FutureExt;
    while let Some(event) = watch.next_event().now_or_never() {
        apply_check_event(runner, event, prefix, state.now_ms())?;
    }
    Ok(())
}

fn apply_check_event(
    runner: &mut Runner,
    event: Option<storage::Result<storage::Event>>,
    prefix: &str,
    now_ms: u64,
) -> Result<(), Error> {
    let event = match event {
        Some(event) => event?,
        None => return Err(Error::Storage(storage::Error::Closed)),
    };
    let Some(suffix) = suffix_of(&event.key, prefix) else {
        return Ok(());
    };
    match event.kind {
        EventKind::Put => {
            let record: CheckRecord = decode(&event.key, &event.value)?;
            runner.put_check(suffix, record, now_ms);
        }
        EventKind::Delete => {
            runner.checks.remove(&suffix);
        }
    }
    Ok(())
}

fn apply_deadline_event(
    runner: &mut Runner,
    event: Option<storage::Result<storage::Event>>,
    prefix: &str,
) -> Result<(), Error> {
    let event = match event {
        Some(event) => event?,
        None => return Err(Error::Storage(storage::Error::Closed)),
    };
    let Some(suffix) = suffix_of(&event.key, prefix) else {
        return Ok(());
    };
    match event.kind {
        EventKind::Put => {
            let record: DeadlineRecord = decode(&event.key, &event.value)?;
            runner.deadlines.insert(suffix, record.deadline_ms);
        }
        EventKind::Delete => {
            runner.deadlines.remove(&suffix);
        }
    }
    Ok(())
}

/// Expires every TTL check whose deadline has passed.
async fn expire_due(state: &State, runner: &mut Runner, now_ms: u64) {
    let due: Vec<(String, u64)> = runner
        .deadlines
        .iter()
        .filter(|(_, deadline)| **deadline <= now_ms)
        .map(|(suffix, deadline)| (suffix.clone(), *deadline))
        .collect();
    for (suffix, deadline) in due {
        // The watch confirms the deletion (or brings a newer deadline); until then this
        // deadline is not retried unless the write failed.
        runner.deadlines.remove(&suffix);
        let Some((node, check_id)) = split_suffix(&suffix) else {
            continue;
        };
        if let Err(err) = checks::expire_ttl_check(state, node, check_id, deadline).await {
            tracing::warn!(error = %err, node, check_id, "registry: expiring a TTL check failed");
            runner.deadlines.insert(
                suffix,
                now_ms.saturating_add(RESTART_PAUSE.as_millis() as u64),
            );
        }
    }
}

/// Deregisters services whose check has been critical longer than its
/// `DeregisterCriticalServiceAfter`.
async fn reap_due(state: &State, runner: &mut Runner, now_ms: u64) {
    let due: Vec<(String, String)> = runner
        .checks
        .values()
        .filter(|tracked| {
            reap_at(&tracked.record, tracked.critical_since_ms).is_some_and(|at| at <= now_ms)
        })
        .map(|tracked| {
            (
                tracked.record.node.clone(),
                tracked.record.service_id.clone(),
            )
        })
        .collect();
    for (node, service_id) in due {
        tracing::info!(
            node,
            service_id,
            "registry: deregistering a service critical too long"
        );
        match catalog::deregister(state, &node, Removal::Service(service_id.clone())).await {
            Ok(_) => {
                // Its checks go with it; forget them now so they are not reaped twice.
                runner
                    .checks
                    .retain(|_, t| !(t.record.node == node && t.record.service_id == service_id));
            }
            Err(err) => {
                tracing::warn!(error = %err, node, service_id, "registry: reaping failed");
                for tracked in runner.checks.values_mut() {
                    if tracked.record.node == node && tracked.record.service_id == service_id {
                        tracked.critical_since_ms = Some(now_ms);
                    }
                }
            }
        }
    }
}

/// Starts every HTTP/TCP probe that is due and not already running.
fn launch_due(
    state: &State,
    clients: &Arc<Clients>,
    runner: &mut Runner,
    probes: &mut JoinSet<Probe>,
) {
    let now = Instant::now();
    for (suffix, tracked) in &mut runner.checks {
        if tracked.in_flight || tracked.next_run.is_none_or(|at| at > now) {
            continue;
        }
        let interval = Duration::from_millis(tracked.record.definition.interval_ms.max(1000));
        tracked.next_run = Some(now + interval);
        tracked.in_flight = true;
        let probe = Probe {
            suffix: suffix.clone(),
            generation: tracked.generation,
        };
        let record = tracked.record.clone();
        let state = state.clone();
        let clients = Arc::clone(clients);
        probes.spawn(async move {
            let (status, output) = match record.kind {
                CheckKind::Http => probe_http(&clients, &record).await,
                _ => probe_tcp(&record).await,
            };
            if status != record.status || output != record.output {
                let result = checks::update_check_status(
                    &state,
                    &record.node,
                    &record.check_id,
                    status,
                    &output,
                    TtlUpdate::Runner,
                )
                .await;
                match result {
                    Ok(_) | Err(Error::NotFound(_)) => {}
                    Err(err) => tracing::warn!(
                        error = %err,
                        check_id = record.check_id,
                        "registry: writing a check result failed"
                    ),
                }
            }
            probe
        });
    }
}

fn probe_timeout(record: &CheckRecord) -> Duration {
    match record.definition.timeout_ms {
        0 => DEFAULT_TIMEOUT,
        ms => Duration::from_millis(ms),
    }
}

/// One HTTP check: 2xx is passing, 429 warning, anything else (or no answer) critical.
async fn probe_http(clients: &Clients, record: &CheckRecord) -> (CheckStatus, String) {
    let definition = &record.definition;
    let method_name = if definition.method.is_empty() {
        "GET"
    } else {
        definition.method.as_str()
    };
    let Ok(method) = reqwest::Method::from_bytes(method_name.as_bytes()) else {
        return (
            CheckStatus::Critical,
            format!("invalid HTTP method {method_name:?}"),
        );
    };
    let client = if definition.tls_skip_verify {
        &clients.insecure
    } else {
        &clients.verifying
    };
    let mut request = client
        .request(method, &definition.http)
        .timeout(probe_timeout(record))
        .header(reqwest::header::ACCEPT, "text/plain, text/*, */*");
    for (name, values) in &definition.header {
        for value in values {
            request = request.header(name.as_str(), value.as_str());
        }
    }
    if !definition.body.is_empty() {
        request = request.body(definition.body.clone());
    }
    let prefix = format!("HTTP {method_name} {}", definition.http);
    match request.send().await {
        Ok(response) => {
            let code = response.status();
            let status = if code.is_success() {
                CheckStatus::Passing
            } else if code == reqwest::StatusCode::TOO_MANY_REQUESTS {
                CheckStatus::Warning
            } else {
                CheckStatus::Critical
            };
            (status, format!("{prefix}: {code}"))
        }
        Err(err) => {
            let reason = if err.is_timeout() {
                format!("request timed out after {:?}", probe_timeout(record))
            } else {
                error_chain(&err)
            };
            (CheckStatus::Critical, format!("{prefix}: {reason}"))
        }
    }
}

/// An error with its sources, as one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// One TCP check: a connection that opens within the timeout is passing.
async fn probe_tcp(record: &CheckRecord) -> (CheckStatus, String) {
    let address = record.definition.tcp.as_str();
    let timeout = probe_timeout(record);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(_stream)) => (
            CheckStatus::Passing,
            format!("TCP connect {address}: Success"),
        ),
        Ok(Err(err)) => (CheckStatus::Critical, format!("dial tcp {address}: {err}")),
        Err(_) => (
            CheckStatus::Critical,
            format!("dial tcp {address}: i/o timeout after {timeout:?}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: CheckKind, status: CheckStatus) -> CheckRecord {
        CheckRecord {
            version: 1,
            node: "n1".to_owned(),
            check_id: "c1".to_owned(),
            name: "c1".to_owned(),
            status,
            notes: String::new(),
            output: String::new(),
            service_id: "web".to_owned(),
            service_name: "web".to_owned(),
            service_tags: Vec::new(),
            kind,
            definition: Default::default(),
        }
    }

    #[test]
    fn critical_since_is_kept_while_critical_and_cleared_when_not() {
        let mut runner = Runner::new();
        runner.put_check(
            "n1/c1".to_owned(),
            check(CheckKind::Ttl, CheckStatus::Critical),
            10,
        );
        runner.put_check(
            "n1/c1".to_owned(),
            check(CheckKind::Ttl, CheckStatus::Critical),
            20,
        );
        assert_eq!(runner.checks["n1/c1"].critical_since_ms, Some(10));
        runner.put_check(
            "n1/c1".to_owned(),
            check(CheckKind::Ttl, CheckStatus::Passing),
            30,
        );
        assert_eq!(runner.checks["n1/c1"].critical_since_ms, None);
    }

    #[test]
    fn reaping_waits_at_least_a_minute() {
        let mut record = check(CheckKind::Ttl, CheckStatus::Critical);
        assert_eq!(reap_at(&record, Some(0)), None);
        record.definition.deregister_critical_service_after_ms = 1_000;
        assert_eq!(reap_at(&record, Some(5)), Some(60_005));
        record.definition.deregister_critical_service_after_ms = 90_000;
        assert_eq!(reap_at(&record, Some(5)), Some(90_005));
        assert_eq!(reap_at(&record, None), None);
    }

    #[test]
    fn redefining_a_probe_reschedules_it() {
        let mut runner = Runner::new();
        let mut record = check(CheckKind::Http, CheckStatus::Critical);
        record.definition.http = "http://127.0.0.1:1/".to_owned();
        runner.put_check("n1/c1".to_owned(), record.clone(), 0);
        let first = runner.checks["n1/c1"].generation;
        runner.checks.get_mut("n1/c1").unwrap().in_flight = true;
        // A status write by the runner itself keeps the schedule.
        record.status = CheckStatus::Passing;
        runner.put_check("n1/c1".to_owned(), record.clone(), 0);
        assert_eq!(runner.checks["n1/c1"].generation, first);
        assert!(runner.checks["n1/c1"].in_flight);
        // A new definition starts over.
        record.definition.http = "http://127.0.0.1:2/".to_owned();
        runner.put_check("n1/c1".to_owned(), record, 0);
        assert_ne!(runner.checks["n1/c1"].generation, first);
        assert!(!runner.checks["n1/c1"].in_flight);
    }
}
