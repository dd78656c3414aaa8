//! Every route of the platform, in one table.
//!
//! Unknown paths answer a JSON:API 404 and wrong methods a JSON:API 405; every response gets
//! `TFP-API-Version`.

use axum::Router;
use axum::routing::get;
use http::HeaderValue;
use http::header::HeaderName;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::{API_VERSION, Error, State, ping};

/// The platform's router, with its state applied.
pub fn router(state: State) -> Router {
    Router::new()
        // Unauthenticated:
        .route("/api/v2/ping", get(ping::ping))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("tfp-api-version"),
            HeaderValue::from_static(API_VERSION),
        ))
}

async fn not_found() -> Error {
    Error::NotFound
}

async fn method_not_allowed() -> Error {
    Error::MethodNotAllowed
}
