//! Blocking queries over snapshots (Nomad's `blockingRPC`): `?index=N&wait=D` answers once the
//! query's index exceeds `N`, or when the wait (plus up to 1/16 jitter) runs out.
//!
//! Invariants: no wake-up is lost (the query runs on the snapshot it subscribed to, and any
//! newer snapshot wakes the loop); the returned index is at least 1; the server's shutdown ends
//! every wait early with the current answer.

use std::sync::Arc;

use http_kit::blocking::BlockingParams;
use rand::Rng;
use tokio::time::Instant;

use crate::state::Snapshot;
use crate::{Error, State};

/// Runs `query` (returning a value and the index it read) as a blocking query.
pub(crate) async fn block_on<T>(
    state: &State,
    params: &BlockingParams,
    mut query: impl FnMut(&Arc<Snapshot>) -> Result<(T, u64), Error>,
) -> Result<(T, u64), Error> {
    let mut updates = state.store().subscribe();
    let snapshot = updates.borrow_and_update().clone();
    let (mut value, mut index) = query(&snapshot)?;
    if !params.is_blocking() || index > params.index {
        return Ok((value, index.max(1)));
    }
    let max_jitter = u64::try_from((params.wait / 16).as_nanos()).unwrap_or(0);
    let jitter = if max_jitter == 0 {
        0
    } else {
        rand::rng().random_range(0..=max_jitter)
    };
    let deadline = Instant::now() + params.wait + std::time::Duration::from_nanos(jitter);
    let shutdown = state.shutdown_token().clone();
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => break,
            changed = updates.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
        let snapshot = updates.borrow_and_update().clone();
        (value, index) = query(&snapshot)?;
        if index > params.index {
            break;
        }
    }
    Ok((value, index.max(1)))
}
