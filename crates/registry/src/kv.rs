//! `/v1/kv/*` endpoints.

use axum::Router;

use crate::State;

pub(crate) fn routes() -> Router<State> {
    Router::new()
}
