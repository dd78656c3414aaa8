//! Every route of the secrets service, in one table.
//!
//! Grep a URL here to find its handler's file. Unknown paths and methods fall back to Vault's
//! shapes: 404 `no handler for route` and 405 `unsupported operation`.

use axum::Router;
use axum::routing::get;

use crate::{Error, State, sys};

/// Header pairs (canonical prefix, upstream alias) for DESIGN.md decision 1.
const HEADER_ALIASES: &[(&str, &str)] = &[("x-secrets-", "x-vault-")];

/// The secrets service's router, with its state applied.
pub fn router(state: State) -> Router {
    let routes = Router::new()
        // Unauthenticated:
        .route("/v1/sys/health", get(sys::health::read_health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    http_kit::header_aliases(routes, HEADER_ALIASES)
}

async fn not_found(uri: axum::http::Uri) -> Error {
    let path = uri.path().strip_prefix("/v1/").unwrap_or(uri.path());
    Error::NoHandler(path.to_owned())
}

async fn method_not_allowed() -> Error {
    Error::UnsupportedOperation
}
