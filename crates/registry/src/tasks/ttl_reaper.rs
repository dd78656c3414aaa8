//! The session TTL reaper: invalidates sessions whose TTL ran out and checkpoints renewed
//! deadlines (the timers, their persistence and the guarantees are `domain/session_timers.rs`).
//!
//! Where it sits: started by `registry::start_tasks` as a leader loop; reads the timers in
//! `State` (rebuilt from storage by `State::open`), invalidates through `domain/sessions.rs`.
//! When its term ends it leaves renewals writing through, which stays correct if it is started
//! again.
//!
//! Invariants:
//! - A session whose timer fired is never revived: renew of a session past its deadline, or
//!   whose invalidation failed and is being retried, answers "not found".
//! - The loop re-arms on new timers, on the clock jumping (tests' `ManualClock`), on the
//!   earliest deadline and on shutdown; on shutdown renewals switch to write-through and a final
//!   clean checkpoint is written.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::State;
use crate::domain::session_timers::checkpoint;
use crate::domain::sessions;

/// How soon a failed invalidation is retried.
const RETRY_INVALIDATE_MS: u64 = 200;

/// How many sessions are invalidated concurrently (their transactions share group commits).
const INVALIDATE_CONCURRENCY: usize = 64;

/// Invalidates sessions as their deadlines pass and checkpoints renewed deadlines, until
/// `shutdown` (the end of this server's term as leader); then writes a final checkpoint.
pub(crate) async fn run(state: State, shutdown: CancellationToken) {
    let timers = state.session_timers();
    let jumped = state.clock().jumped();
    loop {
        // Arm both wake-ups before reading the clock, so that no advance or new timer between
        // the read and the wait is missed.
        let woken = timers.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // (A `Notified` receives `notify_waiters` from its creation on, polled or not.)
        let jump = jumped.as_deref().map(Notify::notified);
        let jump = async move {
            match jump {
                Some(notified) => notified.await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(jump);

        let now_ms = state.now_ms();
        let due = timers.take_due(now_ms);
        if !due.is_empty() {
            expire(&state, due).await;
            continue;
        }
        checkpoint(&state, now_ms, false).await;
        let sleep = match timers.next_wake_ms() {
            Some(at_ms) => Duration::from_millis(at_ms.saturating_sub(now_ms)),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = &mut woken => {}
            () = &mut jump => {}
            () = tokio::time::sleep(sleep) => {}
        }
    }
    // Renewals from now on are persisted before they are acknowledged; then the final
    // checkpoint makes every stored deadline exact.
    timers.set_write_through();
    checkpoint(&state, state.now_ms(), true).await;
}

/// Invalidates the sessions whose TTL ran out; a failure is retried shortly.
async fn expire(state: &State, ids: Vec<String>) {
    futures::stream::iter(ids)
        .for_each_concurrent(INVALIDATE_CONCURRENCY, |id| async move {
            tracing::debug!(message = "Session TTL expired.", session = %id);
            if let Err(err) = sessions::invalidate_session(state, &id).await {
                tracing::warn!(
                    message = "Invalidating an expired session failed; retrying.",
                    session = %id,
                    error = %err,
                );
                let at_ms = state.now_ms().saturating_add(RETRY_INVALIDATE_MS);
                state.session_timers().retry_later(&id, at_ms);
            }
        })
        .await;
}
