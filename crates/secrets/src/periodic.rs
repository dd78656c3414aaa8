//! The periodic loop: calls `Engine::periodic` on every mounted engine about once a second
//! (Vault's `PeriodicFunc`), so engines do their background work (the database engine's static
//! role rotations, interrupted rotations rolled forward) without tasks of their own.
//!
//! Where it sits: a leader loop registered by `start_tasks` (docs/design.md §B); it runs only
//! while this server leads and the store is unsealed.
//!
//! Invariants: one engine's error or slowness never stops the loop or another mount's call
//! (each mount's call runs in its own task; errors are logged); the loop keeps nothing of its
//! own, each engine rebuilds what it needs from its storage; every task ends before the loop
//! returns at `term`.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::State;

/// How often every engine's `periodic` is called.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);

/// The loop (a leader loop): every [`PERIOD`], the engines' `periodic` calls, all at once;
/// a call still running at the next tick is waited for, never doubled.
pub(crate) async fn run(state: State, term: CancellationToken) {
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = term.cancelled() => break,
            _ = ticks.tick() => {}
        }
        if !state.seal().is_unsealed() {
            continue;
        }
        let mut calls = JoinSet::new();
        for (path, engine) in state.mounts().engines() {
            calls.spawn(async move {
                if let Err(err) = engine.periodic().await {
                    tracing::warn!(mount = %path, error = %err, "periodic engine work failed");
                }
            });
        }
        // Each call is bounded by the engine (its database operations time out), so the loop
        // waits for them all, even at `term`: nothing outlives the loop.
        while calls.join_next().await.is_some() {}
    }
}
