//! `GET /api/v2/ping`: the endpoint go-tfe calls inside `NewClient` and pytfe uses to probe.
//!
//! Clients ignore the status and read only headers: `TFP-API-Version` (added to every
//! response by `routes.rs`), `TFP-AppName` (go-tfe's `IsEnterprise()`), `X-RateLimit-Limit`
//! (go-tfe sizes its token bucket from it), `X-TFE-Version` and `X-TFE-Current-Version`.

use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, StatusCode};

use crate::State;

// Names built at compile time: a `&str` name would be parsed on every ping.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const TFP_APPNAME: HeaderName = HeaderName::from_static("tfp-appname");
const X_TFE_VERSION: HeaderName = HeaderName::from_static("x-tfe-version");
const X_TFE_CURRENT_VERSION: HeaderName = HeaderName::from_static("x-tfe-current-version");

/// `GET /api/v2/ping`: 204 with the discovery headers; `X-RateLimit-Limit` is the configured
/// per-caller limit (ping itself is never limited).
pub(crate) async fn ping(axum::extract::State(state): axum::extract::State<State>) -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (X_RATELIMIT_LIMIT, HeaderValue::from(state.api_rate_limit())),
            (
                TFP_APPNAME,
                HeaderValue::from_static("Terraform Enterprise"),
            ),
            (
                X_TFE_VERSION,
                HeaderValue::from_static(concat!("cairn-", env!("CARGO_PKG_VERSION"))),
            ),
            (
                X_TFE_CURRENT_VERSION,
                HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
            ),
        ],
    )
        .into_response()
}
