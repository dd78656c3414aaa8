//! `GET /api/v2/ping`: the endpoint go-tfe calls inside `NewClient` and pytfe uses to probe.
//!
//! Clients ignore the status and read only headers: `TFP-API-Version` (added to every
//! response by `routes.rs`), `TFP-AppName` (go-tfe's `IsEnterprise()`), `X-RateLimit-Limit`
//! (go-tfe sizes its token bucket from it), `X-TFE-Version` and `X-TFE-Current-Version`.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};

use crate::State;

/// `GET /api/v2/ping`: 204 with the discovery headers; `X-RateLimit-Limit` is the configured
/// per-caller limit (ping itself is never limited).
pub(crate) async fn ping(axum::extract::State(state): axum::extract::State<State>) -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (
                "x-ratelimit-limit",
                HeaderValue::from(state.api_rate_limit()),
            ),
            (
                "tfp-appname",
                HeaderValue::from_static("Terraform Enterprise"),
            ),
            (
                "x-tfe-version",
                HeaderValue::from_static(concat!("cairn-", env!("CARGO_PKG_VERSION"))),
            ),
            (
                "x-tfe-current-version",
                HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
            ),
        ],
    )
        .into_response()
}
