//! `GET /api/v2/ping`: the endpoint go-tfe calls inside `NewClient` and pytfe uses to probe.
//!
//! Clients ignore the status and read only headers: `TFP-API-Version` (added to every
//! response by `routes.rs`), `TFP-AppName` (go-tfe's `IsEnterprise()`), `X-RateLimit-Limit`
//! (go-tfe sizes its token bucket from it), `X-TFE-Version` and `X-TFE-Current-Version`.

use axum::response::{IntoResponse, Response};
use http::StatusCode;

/// The rate limit advertised to clients, per second.
const RATE_LIMIT: &str = "30";

/// `GET /api/v2/ping`: 204 with the discovery headers.
pub(crate) async fn ping() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            ("tfp-appname", "Terraform Enterprise"),
            ("x-ratelimit-limit", RATE_LIMIT),
            (
                "x-tfe-version",
                concat!("cairn-", env!("CARGO_PKG_VERSION")),
            ),
            ("x-tfe-current-version", env!("CARGO_PKG_VERSION")),
        ],
    )
        .into_response()
}
