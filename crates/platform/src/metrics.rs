//! `GET /api/v2/metrics`: the platform's Prometheus metrics. TFE has no such endpoint; this
//! one is cairn's, documented in docs/compat.md, and answers the Prometheus text format only
//! (any `format` parameter is ignored).
//!
//! Called from `routes.rs`; only a site administrator's token may read it (others get TFE's
//! 404 for admin endpoints, a request without a token 401). The registry is
//! `Config::metrics`, shared with every service by `cairn`, which also records this service's
//! requests under [`SERVICE`]. The figures: the store's (process-wide), this service's HTTP
//! requests, and the gauges below.
//!
//! Invariant: the platform keeps no in-memory counts, so its gauges come from bounded scans of
//! `store/` ranges (at most [`SCAN_LIMIT`] records each) per scrape; run statuses are the
//! fixed list of `run_state.rs`, so label cardinality is fixed.

use axum::extract::State as AxumState;
use axum::response::Response;
use http_kit::metrics::{Family, Format};
use storage::KeyRange;

use crate::auth::Caller;
use crate::run_state::RunStatus;
use crate::store::organizations::{OrganizationRecord, organizations_prefix};
use crate::store::runs::{RunRecord, runs_prefix};
use crate::store::workspaces::workspaces_prefix;
use crate::{Error, State};

/// The service name this platform's request figures are recorded under.
pub(crate) const SERVICE: &str = "platform";

/// The most records one gauge's scan reads per scrape.
pub(crate) const SCAN_LIMIT: usize = 100_000;

/// `GET /api/v2/metrics` (site administrators).
pub(crate) async fn read_metrics(
    AxumState(state): AxumState<State>,
    caller: Caller,
) -> Result<Response, Error> {
    caller.require_site_admin()?;
    let own = figures(&state).await?;
    let metrics = &state.config().metrics;
    Ok(http_kit::metrics::response(
        Format::Prometheus,
        metrics.gather(SERVICE, own),
        metrics.uptime(),
    ))
}

/// The platform's own gauges.
async fn figures(state: &State) -> Result<Vec<Family>, Error> {
    let storage = state.storage();
    let scan = |prefix: String| async move {
        let scanned = storage
            .scan(KeyRange::prefix(prefix), Some(SCAN_LIMIT))
            .await?;
        Ok::<_, Error>(scanned.kvs)
    };
    let mut organizations = 0i64;
    for kv in scan(organizations_prefix()).await? {
        let record: OrganizationRecord = crate::store::decode(&kv.key, &kv.value)?;
        organizations += i64::from(!record.deleting);
    }
    let workspaces = i64::try_from(scan(workspaces_prefix()).await?.len()).unwrap_or(i64::MAX);
    let mut runs = [0i64; RunStatus::ALL.len()];
    for kv in scan(runs_prefix()).await? {
        let record: RunRecord = crate::store::decode(&kv.key, &kv.value)?;
        if let Some(slot) = RunStatus::ALL
            .iter()
            .position(|status| *status == record.status)
        {
            runs[slot] += 1;
        }
    }
    let runs = RunStatus::ALL
        .into_iter()
        .zip(runs)
        .map(|(status, count)| (vec![("status", status.as_str().to_owned())], count))
        .collect();
    Ok(vec![
        Family::single_gauge(
            "cairn_platform_organizations",
            "Organizations.",
            organizations,
        ),
        Family::single_gauge("cairn_platform_workspaces", "Workspaces.", workspaces),
        Family::gauge("cairn_platform_runs", "Runs, by status.", runs),
    ])
}
