//! The automated snapshot loop: takes each schedule's snapshot when it is due, writes it to
//! the schedule's target, prunes the target to `retain`, and records the status.
//!
//! Where it sits: a leader loop registered by `start_tasks` (docs/design.md §B), so one
//! server of a cluster takes the snapshots; it does nothing while the store is sealed.
//!
//! Due time: one interval after the last snapshot's start as the stored status records it,
//! or after the schedule was written when it never ran. Both are in storage, so a restart or
//! a new leader keeps the cadence instead of starting over. A failed attempt counts as an
//! attempt: the error goes to the status and the next try is one interval later.
//!
//! Time comes from the service's clock; the loop looks every second and whenever a manual
//! clock jumps, so tests move time without sleeping.
//!
//! Invariants: schedules run one after another, never two snapshots of one schedule at once;
//! the loop keeps nothing in memory between ticks.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config::{self, AutoConfig, Status};
use super::targets;
use crate::{Error, State};

/// How often the loop looks for due schedules.
const TICK: Duration = Duration::from_secs(1);

/// The loop (a leader loop).
pub(crate) async fn run(state: State, term: CancellationToken) {
    let jumped = state.clock().jumped();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = term.cancelled() => break,
            _ = ticks.tick() => {}
            () = async {
                match &jumped {
                    Some(notify) => notify.notified().await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        if state.barrier().is_sealed() {
            continue;
        }
        if let Err(err) = run_due(&state, &term).await {
            tracing::warn!(error = %err, "automated snapshots: reading the schedules failed");
        }
    }
}

/// Runs every schedule that is due now.
async fn run_due(state: &State, term: &CancellationToken) -> Result<(), Error> {
    for name in config::names(state).await? {
        if term.is_cancelled() || state.barrier().is_sealed() {
            break;
        }
        let Some(schedule) = config::load(state, &name).await? else {
            continue;
        };
        let status = config::load_status(state, &name).await?.unwrap_or_default();
        if state.clock().now_nanos() < due_ns(&schedule, &status) {
            continue;
        }
        run_once(state, &schedule, status).await?;
    }
    Ok(())
}

/// When `schedule`'s next snapshot is due (Unix nanoseconds).
pub(crate) fn due_ns(schedule: &AutoConfig, status: &Status) -> i64 {
    let from = if status.last_start_ns > 0 {
        status.last_start_ns
    } else {
        schedule.written_ns
    };
    let interval = i64::try_from(schedule.interval_secs)
        .unwrap_or(i64::MAX / 1_000_000_000)
        .saturating_mul(1_000_000_000);
    from.saturating_add(interval)
}

/// Takes and writes one snapshot for `schedule`, then records the outcome.
async fn run_once(state: &State, schedule: &AutoConfig, mut status: Status) -> Result<(), Error> {
    let start = state.clock().now_nanos();
    let target = targets::open(schedule);
    status.current_start_ns = start;
    status.current_url = target.as_ref().map_or_else(
        |_| String::new(),
        |t| t.url(&t.key(&schedule.file_prefix, start)),
    );
    config::save_status(state, &schedule.name, &status).await?;

    let outcome = match target {
        Err(err) => Err(err),
        Ok(target) => write(state, schedule, &target, start).await,
    };
    status.last_start_ns = start;
    status.last_end_ns = state.clock().now_nanos();
    status.current_start_ns = 0;
    status.current_url.clear();
    match outcome {
        Ok(url) => {
            status.last_url = url;
            status.last_error.clear();
        }
        Err(err) => {
            tracing::warn!(schedule = %schedule.name, error = %err, "automated snapshot failed");
            status.last_error = err;
        }
    }
    config::save_status(state, &schedule.name, &status).await
}

async fn write(
    state: &State,
    schedule: &AutoConfig,
    target: &targets::Target,
    start: i64,
) -> Result<String, String> {
    let bytes = super::take(state)
        .await
        .map_err(|err| format!("taking the snapshot failed: {err}"))?;
    let url = target.write(&schedule.file_prefix, start, bytes).await?;
    target.prune(&schedule.file_prefix, schedule.retain).await?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::snapshots::config::StorageType;

    #[test]
    fn next_run_is_one_interval_after_the_last_start_or_the_write() {
        let schedule = AutoConfig {
            version: 1,
            name: "n".to_owned(),
            storage_type: StorageType::Local,
            upstream_names: false,
            interval_secs: 60,
            retain: 1,
            path_prefix: "/tmp".to_owned(),
            file_prefix: "p".to_owned(),
            local_max_space: 1,
            settings: BTreeMap::new(),
            written_ns: 1_000,
        };
        let never = Status::default();
        assert_eq!(due_ns(&schedule, &never), 60_000_001_000);
        let ran = Status {
            last_start_ns: 5_000_000_000,
            ..Status::default()
        };
        assert_eq!(due_ns(&schedule, &ran), 65_000_000_000);
    }
}
