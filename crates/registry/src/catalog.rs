//! `/v1/catalog/*` endpoints, and the registration of this server's own node.

use axum::Router;

use crate::{Error, State};

pub(crate) fn routes() -> Router<State> {
    Router::new()
}

/// Registers this server's node with a passing `serfHealth` check (idempotent).
pub(crate) async fn register_self(_state: &State) -> Result<(), Error> {
    Ok(())
}
