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
//!   command they send is answered; then [`lead`] returns.

pub(crate) mod heartbeat;
pub(crate) mod worker;

use tokio_util::sync::CancellationToken;

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

    let writer_term = CancellationToken::new();
    let writer = crate::state::run_writer(state.store().clone(), writer_term.clone());
    let workers = futures::future::join_all(
        (0..state.config().workers.max(1)).map(|_| worker::run(state.clone(), term.clone())),
    );
    let others = async {
        tokio::join!(
            workers,
            heartbeat::run(state.clone(), term.clone()),
            crate::gc::run(state.clone(), term.clone())
        );
        writer_term.cancel();
    };
    tokio::join!(writer, others);
}
