//! Every route of the registry, in one table.
//!
//! Unknown paths answer 404 and wrong methods 405, both in Consul's plain-text shape.

use axum::Router;
use axum::routing::get;

use crate::{Error, State, status};

/// Header pairs (canonical prefix, upstream alias) for DESIGN.md decision 1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-registry-", "x-consul-")];

/// The registry's router, with its state applied.
pub fn router(state: State) -> Router {
    let routes = Router::new()
        // Unauthenticated:
        .route("/v1/status/leader", get(status::read_leader))
        .route("/v1/status/peers", get(status::list_peers))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    http_kit::header_aliases(routes, HEADER_ALIASES)
}

async fn not_found(uri: axum::http::Uri) -> Error {
    Error::NoRoute(uri.path().to_owned())
}

async fn method_not_allowed(method: axum::http::Method) -> Error {
    Error::MethodNotAllowed(method.to_string())
}
