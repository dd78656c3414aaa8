//! Placeholder for `leases`; its engineer writes it.

use crate::{Error, State};

#[derive(Debug, Default)]
pub(crate) struct ExpirationManager {}

impl ExpirationManager {
    pub(crate) async fn load(&self, _state: &State) -> Result<(), Error> {
        Ok(())
    }

    pub(crate) fn clear(&self) {}
}

pub(crate) async fn run(_state: State, shutdown: tokio_util::sync::CancellationToken) {
    shutdown.cancelled().await;
}
