//! Scheduling workers (Nomad's `worker.go`): take an evaluation from the broker, run the pure
//! placement over the latest snapshot, and hand the plan to the state writer's plan applier.
//!
//! Invariants:
//! - An evaluation is acked only after its plan was committed or given up on, so its job is
//!   never planned twice at once.
//! - A plan refused in part (a node filled up meanwhile) is recomputed from a fresh snapshot, at
//!   most [`MAX_PLAN_ATTEMPTS`] times; then the evaluation is marked failed, as Nomad does.
//! - A plan whose commit failed (the store refused it, or failed between the parts of a plan
//!   split to fit etcd's limits, leaving the parts before committed) is recomputed the same way
//!   after a short pause, from a snapshot that holds what did commit, so the evaluation is
//!   finished here rather than left pending until another leader re-queues it. A term that
//!   ends stops the retries (the next leader re-queues the evaluation).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::State;
use crate::placement::{self, PlacementContext};
use crate::state::{Applied, Command, Outcome};
use crate::structs::{EVAL_STATUS_FAILED, EVAL_STATUS_PENDING, Evaluation};

/// Plans computed for one evaluation before it is marked failed.
const MAX_PLAN_ATTEMPTS: usize = 5;

/// The pause after a failed plan commit, times the attempt's number.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Takes evaluations from the broker until `term` ends; an evaluation taken is always
/// finished (and acked) first.
pub(crate) async fn run(state: State, term: CancellationToken, slots: Arc<Semaphore>) {
    let broker = state.broker().clone();
    while let Some(eval) = broker.dequeue(&term).await {
        process(&state, &eval, &term, &slots).await;
        broker.ack(&eval);
    }
}

/// How many workers may compute a placement at once: one runtime thread fewer than the
/// runtime has (at least one), so CPU-bound placements never hold every thread while the
/// state writer, whose batches every worker waits on, and the HTTP handlers wait to run.
pub(crate) fn placement_slots() -> Arc<Semaphore> {
    let threads = tokio::runtime::Handle::try_current()
        .map(|handle| handle.metrics().num_workers())
        .unwrap_or(1);
    Arc::new(Semaphore::new(threads.saturating_sub(1).max(1)))
}

async fn process(
    state: &State,
    queued: &Arc<Evaluation>,
    term: &CancellationToken,
    slots: &Semaphore,
) {
    let store = state.store();
    for attempt in 1..=MAX_PLAN_ATTEMPTS {
        let snapshot = store.snapshot();
        // The stored evaluation is the truth: it may have been processed already.
        let Some(eval) = snapshot.eval(&queued.id) else {
            return;
        };
        if eval.status != EVAL_STATUS_PENDING {
            return;
        }
        let ctx = PlacementContext {
            now: crate::clock::now_nanos(),
            seed: rand::random(),
            stopwatch: monotonic_nanos,
        };
        let plan = {
            let Ok(_slot) = slots.acquire().await else {
                return;
            };
            placement::compute(&snapshot, eval, &ctx)
        };
        match store.apply(Command::ApplyPlan(Box::new(plan))).await {
            Ok(Applied {
                outcome: Outcome::Plan(result),
                ..
            }) if result.refused_nodes.is_empty() => return,
            Ok(_) => continue,
            Err(err) => {
                tracing::warn!(eval = %queued.id, attempt, error = %err, "cannot apply a plan; planning again");
                let pause = RETRY_PAUSE * u32::try_from(attempt).unwrap_or(u32::MAX);
                tokio::select! {
                    () = term.cancelled() => return,
                    () = tokio::time::sleep(pause) => continue,
                }
            }
        }
    }
    let Some(eval) = store.snapshot().eval(&queued.id).cloned() else {
        return;
    };
    let mut failed = (*eval).clone();
    failed.status = EVAL_STATUS_FAILED.to_owned();
    failed.status_description = format!("maximum attempts reached ({MAX_PLAN_ATTEMPTS})");
    if let Err(err) = store.apply(Command::UpsertEvals(vec![failed])).await {
        tracing::warn!(eval = %queued.id, error = %err, "cannot mark an evaluation failed");
    }
}

/// Nanoseconds on a monotonic clock (since its first reading): what placement times each
/// node selection with (`AllocMetric.AllocationTime`).
fn monotonic_nanos() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let elapsed = START.get_or_init(Instant::now).elapsed();
    i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX)
}
