//! The scheduler's background work, started by `crate::start_tasks` through the
//! `cluster::Runner`: one leader loop ([`lead`]) runs, while this server leads, the state
//! writer (`state::run_writer`, which also applies the workers' plans), the scheduling workers
//! (`worker.rs`, fed by the broker, whose delayed evaluations wait there), the heartbeat
//! monitor (`heartbeat.rs`) and the garbage collector (`crate::gc`).
//!
//! Invariants:
//! - Each term of leadership starts from storage alone: the snapshot is caught up with what
//!   another writer committed, the broker is refilled with the stored pending evaluations
//!   (delayed ones included), and every live node gets a fresh heartbeat deadline.
//! - When a term ends, the workers and the monitor stop first and the writer last, so every
//!   command they send is answered; then [`lead`] returns. The writer and the workers run as
//!   tasks of their own (in parallel on the runtime's threads), owned by [`lead`], which
//!   joins every one of them before it returns.

pub(crate) mod heartbeat;
pub(crate) mod worker;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::State;
use crate::structs::EVAL_STATUS_PENDING;

/// One term of leadership: runs the writer, the workers, the heartbeat monitor and the
/// garbage collector until `term` is cancelled.
pub(crate) async fn lead(state: State, term: CancellationToken) {
    // Commands are taken here from now on; the follower stops publishing first.
    let _term = state.role().begin_term().await;
    match state.store().catch_up().await {
        Ok(true) => tracing::info!("scheduler state reloaded from storage"),
        Ok(false) => {}
        Err(err) => tracing::error!(error = %err, "cannot reload the scheduler state"),
    }
    let pending = state
        .store()
        .snapshot()
        .evals
        .values()
        .filter(|eval| eval.status == EVAL_STATUS_PENDING)
        .cloned()
        .collect();
    state.broker().restart(pending);

    // The writer and each worker are tasks of their own, so the writer applies a batch while
    // workers compute placements on the runtime's other threads (in one task they would share
    // one thread). Owned here: joined before the term ends, aborted if it is dropped.
    let span = tracing::Span::current();
    let writer_term = CancellationToken::new();
    let mut writer = tokio::task::JoinSet::new();
    writer.spawn(
        crate::state::run_writer(state.store().clone(), writer_term.clone())
            .instrument(span.clone()),
    );
    let mut workers = tokio::task::JoinSet::new();
    let slots = worker::placement_slots();
    for _ in 0..state.config().workers.max(1) {
        workers.spawn(
            worker::run(state.clone(), term.clone(), Arc::clone(&slots)).instrument(span.clone()),
        );
    }
    tokio::join!(
        join_all(&mut workers, "a scheduling worker"),
        heartbeat::run(state.clone(), term.clone()),
        crate::gc::run(state.clone(), term.clone())
    );
    writer_term.cancel();
    join_all(&mut writer, "the scheduler state writer").await;
}

/// Waits for every task of `set`, logging those that panicked.
async fn join_all(set: &mut tokio::task::JoinSet<()>, what: &str) {
    while let Some(joined) = set.join_next().await {
        if let Err(err) = joined {
            tracing::error!(error = %err, "{what} failed");
        }
    }
}
