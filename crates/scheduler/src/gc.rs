//! The scheduler's garbage collector (Nomad's core scheduler GC): on the leader, every
//! [`GcConfig::interval`] (Nomad's `eval_gc_interval`, `job_gc_interval`, `node_gc_interval`:
//! 5 minutes each) a pass removes terminal evaluations and allocations, dead jobs and down
//! nodes older than their thresholds; `PUT /v1/system/gc` runs a forced pass at once.
//!
//! Where it sits: [`run`] is one of the loops `tasks::lead` runs while this server leads
//! (through `cluster::Runner`); a pass is a state command (`state/gc.rs` decides what goes), so
//! the writer applies it against the latest state and commits its deletions in one
//! transaction. It keeps no state of its own: ages are read from the stored records' modify
//! times, so after a restart or a change of leader the next pass picks up where the last left.
//!
//! Invariants:
//! - Time comes from [`GcConfig::clock`] (the system clock unless a test injects one).
//! - A pass that finds more than one transaction's worth is followed at once by another, until
//!   nothing eligible is left, so the handler's answer means "collected".

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::acl::Authz;
use crate::state::{Applied, Command, GcPass, GcReport, Outcome, Thresholds};

/// Where the collector reads the time (Unix nanoseconds).
#[derive(Clone)]
pub struct GcClock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl GcClock {
    /// A clock that reads `now` (tests move time forward with it).
    pub fn new(now: impl Fn() -> i64 + Send + Sync + 'static) -> GcClock {
        GcClock(Arc::new(now))
    }

    fn now(&self) -> i64 {
        (self.0)()
    }
}

impl Default for GcClock {
    fn default() -> GcClock {
        GcClock::new(crate::clock::now_nanos)
    }
}

impl fmt::Debug for GcClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GcClock")
    }
}

/// When and what the collector removes; the defaults are Nomad's.
#[derive(Debug, Clone)]
pub struct GcConfig {
    /// Between two passes (Nomad: 5 minutes for evaluations, jobs and nodes alike).
    pub interval: Duration,
    /// `eval_gc_threshold`: 1 hour.
    pub eval_threshold: Duration,
    /// `batch_eval_gc_threshold`: 24 hours.
    pub batch_eval_threshold: Duration,
    /// `job_gc_threshold`: 4 hours.
    pub job_threshold: Duration,
    /// `node_gc_threshold`: 24 hours.
    pub node_threshold: Duration,
    pub clock: GcClock,
}

impl Default for GcConfig {
    fn default() -> GcConfig {
        GcConfig {
            interval: Duration::from_secs(5 * 60),
            eval_threshold: Duration::from_secs(3600),
            batch_eval_threshold: Duration::from_secs(24 * 3600),
            job_threshold: Duration::from_secs(4 * 3600),
            node_threshold: Duration::from_secs(24 * 3600),
            clock: GcClock::default(),
        }
    }
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

impl GcConfig {
    fn pass(&self, force: bool) -> GcPass {
        GcPass {
            now: self.clock.now(),
            thresholds: Thresholds {
                eval: nanos(self.eval_threshold),
                batch_eval: nanos(self.batch_eval_threshold),
                job: nanos(self.job_threshold),
                node: nanos(self.node_threshold),
            },
            force,
        }
    }
}

/// Runs passes until nothing eligible is left; returns what they removed in total.
async fn collect(state: &crate::State, force: bool) -> Result<GcReport, Error> {
    let mut total = GcReport::default();
    loop {
        let pass = state.config().gc.pass(force);
        let report = match state.store().apply(Command::Gc(pass)).await? {
            Applied {
                outcome: Outcome::Gc(report),
                ..
            } => report,
            Applied { outcome, .. } => {
                return Err(Error::Internal(format!(
                    "garbage collection answered {outcome:?}"
                )));
            }
        };
        total.evals += report.evals;
        total.allocs += report.allocs;
        total.jobs += report.jobs;
        total.job_versions += report.job_versions;
        total.nodes += report.nodes;
        if !report.more {
            return Ok(total);
        }
    }
}

/// The collector's leader loop: a pass every interval until `term` ends.
pub(crate) async fn run(state: crate::State, term: CancellationToken) {
    let interval = state.config().gc.interval.max(Duration::from_millis(10));
    loop {
        tokio::select! {
            biased;
            () = term.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        match collect(&state, false).await {
            Ok(report) => tracing::debug!(?report, "scheduler garbage collection"),
            Err(Error::ShuttingDown) => return,
            Err(err) => tracing::warn!(error = %err, "scheduler garbage collection failed"),
        }
    }
}

/// `PUT /v1/system/gc` (management token): a forced pass, answered once it is durable.
pub(crate) async fn force(authz: Authz, State(state): State<crate::State>) -> Result<(), Error> {
    if !authz.is_management() {
        return Err(Error::PermissionDenied);
    }
    collect(&state, true).await.map(|_| ())
}
