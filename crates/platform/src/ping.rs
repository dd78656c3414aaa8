//! `GET /api/v2/ping`: the endpoint go-tfe calls inside `NewClient` and pytfe uses to probe.
//!
//! Clients ignore the status and read only headers: `TFP-API-Version` (added to every
//! response by `routes.rs`), `TFP-AppName` (go-tfe's `IsEnterprise()`), `X-RateLimit-Limit`
//! (go-tfe sizes its token bucket from it), `X-TFE-Version` and `X-TFE-Current-Version`.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::State;

// Names built at compile time: a `&str` name would be parsed on every ping.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const TFP_APPNAME: HeaderName = HeaderName::from_static("tfp-appname");
const X_TFE_VERSION: HeaderName = HeaderName::from_static("x-tfe-version");
const X_TFE_CURRENT_VERSION: HeaderName = HeaderName::from_static("x-tfe-current-version");

/// `GET /api/v2/ping`: 204 with the discovery headers; `X-RateLimit-Limit` is the configured
/// per-caller limit (ping itself is never limited).
pub(crate) async fn ping(axum::extract::State(state): axum::extract::State<State>) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    // Room for every header the answer leaves with (these four, `TFP-API-Version`,
    // `X-Request-Id` and `Content-Length`): a map grown from its default six slots is rehashed.
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(state.api_rate_limit()));
    headers.insert(
        TFP_APPNAME,
        HeaderValue::from_static("Terraform Enterprise"),
    );
    headers.insert(
        X_TFE_VERSION,
        HeaderValue::from_static(concat!("cairn-", env!("CARGO_PKG_VERSION"))),
    );
    headers.insert(
        X_TFE_CURRENT_VERSION,
        HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    *response.headers_mut() = headers;
    response
}
