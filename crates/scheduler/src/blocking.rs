//! Blocking queries over snapshots (Nomad's `blockingRPC`): `?index=N&wait=D` answers once the
//! query's index exceeds `N`, or when the wait (plus up to 1/16 jitter) runs out.
//!
//! Where it sits: the scheduler's reads run on the snapshots the state writer publishes; the
//! long poll itself is `http_kit::blocking::block_watch`, shared with every blocking query.
//!
//! Invariants: no wake-up is lost (the query runs on the snapshot it subscribed to, and any
//! newer snapshot wakes the loop); the returned index is at least 1; the server's shutdown ends
//! every wait early with the current answer.

use std::sync::Arc;

use http_kit::query::BlockingParams;

use crate::state::Snapshot;
use crate::{Error, State};

/// Runs `query` (returning a value and the index it read) as a blocking query.
pub(crate) async fn block_on<T>(
    state: &State,
    params: &BlockingParams,
    query: impl FnMut(&Arc<Snapshot>) -> Result<(T, u64), Error>,
) -> Result<(T, u64), Error> {
    http_kit::blocking::block_watch(
        state.store().subscribe(),
        params,
        Some(state.shutdown_token()),
        query,
    )
    .await
}
