//! `sys/metrics` (`GET /v1/sys/metrics`): Vault's telemetry endpoint. Without `format` the
//! answer is go-metrics' JSON summary (Vault's default), with `format=prometheus` the
//! Prometheus text format; any other format is 400 `metric response format "<f>" unknown` in
//! plain text, as Vault answers.
//!
//! Reached through `dispatch.rs`, so Vault's rules hold: unsealed only, a token with `read` on
//! `sys/metrics` (403 otherwise). The registry is `Config::metrics`, shared with every service
//! by `cairn`, which also records this service's requests under [`SERVICE`]. Answers are raw
//! (no Vault envelope), as Vault's are.
//!
//! Invariant: `sealed` and `leases` are read from memory (the barrier's state, the expiration
//! manager's timers: leases with a pending expiry); `tokens` is one listing of the token ids'
//! keys under the barrier (nothing decrypted), since no in-memory count of tokens exists.

use http_kit::metrics::{Family, Format};
use secrets_sdk::{Operation, RawResponse, Request, Response, fields};

use crate::request::RequestContext;
use crate::tokens::store::{ID_PREFIX, list};
use crate::{Error, State};

/// The service name this store's request figures are recorded under.
pub(crate) const SERVICE: &str = "secrets";

/// Serves `sys/metrics`.
pub(crate) async fn handle(
    state: &State,
    _ctx: &RequestContext,
    req: Request,
) -> Result<Option<Response>, Error> {
    let path = req.path.strip_prefix("sys/").unwrap_or(&req.path);
    if path.trim_end_matches('/') != "metrics" {
        return Err(Error::UnsupportedPath);
    }
    if req.operation != Operation::Read {
        return Err(Error::UnsupportedOperation);
    }
    let format = match fields::string(&req.data, "format")?
        .unwrap_or_default()
        .as_str()
    {
        "" => Format::Json,
        "prometheus" => Format::Prometheus,
        unknown => {
            return Ok(Some(raw(
                400,
                "text/plain",
                format!("metric response format \"{unknown}\" unknown"),
            )));
        }
    };
    let own = figures(state).await?;
    let metrics = &state.config().metrics;
    let body = http_kit::metrics::render(
        format,
        metrics.gather(SERVICE, own),
        metrics.uptime(),
        state.now_ms() / 1000,
    );
    Ok(Some(raw(200, format.content_type(), body)))
}

/// The secrets store's own gauges.
async fn figures(state: &State) -> Result<Vec<Family>, Error> {
    let sealed = i64::from(state.barrier().is_sealed());
    let leases = i64::try_from(state.leases().pending()).unwrap_or(i64::MAX);
    let tokens = i64::try_from(list(state, ID_PREFIX).await?.len()).unwrap_or(i64::MAX);
    Ok(vec![
        Family::single_gauge(
            "cairn_secrets_sealed",
            "Whether the store is sealed (1) or not (0).",
            sealed,
        ),
        Family::single_gauge(
            "cairn_secrets_leases",
            "Leases with a pending expiry.",
            leases,
        ),
        Family::single_gauge("cairn_secrets_tokens", "Stored tokens.", tokens),
    ])
}

fn raw(status: u16, content_type: &str, body: String) -> Response {
    Response {
        raw: Some(RawResponse {
            status,
            content_type: content_type.to_owned(),
            body: body.into_bytes(),
        }),
        ..Response::default()
    }
}
