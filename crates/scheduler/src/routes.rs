//! Every route of the scheduler, in one table.
//!
//! Unknown paths answer 404 and wrong methods 405, both in Nomad's plain-text shape.

use axum::Router;
use axum::routing::get;

use crate::{Error, State, agent};

/// Header pairs (canonical prefix, upstream alias) for DESIGN.md decision 1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-scheduler-", "x-nomad-")];

/// The scheduler's router, with its state applied.
pub fn router(state: State) -> Router {
    let routes = Router::new()
        // Unauthenticated:
        .route("/v1/agent/health", get(agent::read_health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    http_kit::header_aliases(routes, HEADER_ALIASES)
}

async fn not_found() -> Error {
    Error::NoRoute
}

async fn method_not_allowed() -> Error {
    Error::MethodNotAllowed
}
