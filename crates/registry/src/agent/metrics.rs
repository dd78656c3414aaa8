//! `GET /v1/agent/metrics`: Consul's agent metrics. `?format=prometheus` answers the
//! Prometheus text format; anything else the go-metrics JSON summary (as Consul).
//!
//! Called from `routes.rs`; authorized as Consul does (`agent:read` on this server's node;
//! open while ACLs are off). The registry is `Config::metrics`, shared with every service by
//! `cairn`, which also records this service's requests under [`SERVICE`]. The figures: the
//! store's (process-wide), this service's HTTP requests, and the gauges below.
//!
//! Invariant: the registry keeps no in-memory catalog, so its gauges come from bounded scans
//! of `store/` ranges (at most [`SCAN_LIMIT`] records each), one per gauge per scrape; check
//! statuses are Consul's three, so label cardinality is fixed.

use axum::extract::{RawQuery, State as AxumState};
use axum::response::Response;
use http_kit::metrics::{Family, Format};
use storage::KeyRange;

use crate::acl::{Access, Authz, Resource};
use crate::agent::node::node_name;
use crate::store::catalog::{CheckRecord, CheckStatus, checks_range, nodes_range, services_range};
use crate::store::sessions::sessions_range;
use crate::{Error, State};

/// The service name this registry's request figures are recorded under.
pub(crate) const SERVICE: &str = "registry";

/// The most records one gauge's scan reads per scrape.
pub(crate) const SCAN_LIMIT: usize = 100_000;

/// `GET /v1/agent/metrics` (agent:read).
pub(crate) async fn read_metrics(
    AxumState(state): AxumState<State>,
    authz: Authz,
    RawQuery(query): RawQuery,
) -> Result<Response, Error> {
    authz.check(Resource::Agent, node_name(&state), Access::Read)?;
    // Go's `URL.Query()` drops what it cannot parse; so does this.
    let params = http_kit::query::QueryParams::parse(query.as_deref());
    let format = Format::from_query(params.get("format"));
    let own = figures(&state).await?;
    let metrics = &state.config().metrics;
    Ok(http_kit::metrics::response(
        format,
        metrics.gather(SERVICE, own),
        metrics.uptime(),
    ))
}

/// The registry's own gauges.
async fn figures(state: &State) -> Result<Vec<Family>, Error> {
    let storage = state.storage();
    let count = |range: KeyRange| async move {
        let scanned = storage.scan(range, Some(SCAN_LIMIT)).await?;
        Ok::<i64, Error>(i64::try_from(scanned.kvs.len()).unwrap_or(i64::MAX))
    };
    let nodes = count(nodes_range()).await?;
    let services = count(services_range()).await?;
    let sessions = count(sessions_range()).await?;
    let mut by_status = [0i64; 3];
    for kv in storage.scan(checks_range(), Some(SCAN_LIMIT)).await?.kvs {
        let check: CheckRecord = crate::store::decode(&kv.key, &kv.value)?;
        by_status[match check.status {
            CheckStatus::Passing => 0,
            CheckStatus::Warning => 1,
            CheckStatus::Critical => 2,
        }] += 1;
    }
    let checks = [
        CheckStatus::Passing,
        CheckStatus::Warning,
        CheckStatus::Critical,
    ]
    .into_iter()
    .zip(by_status)
    .map(|(status, count)| (vec![("status", status.as_str().to_owned())], count))
    .collect();
    Ok(vec![
        Family::single_gauge("cairn_registry_nodes", "Catalog nodes.", nodes),
        Family::single_gauge(
            "cairn_registry_services",
            "Service instances in the catalog.",
            services,
        ),
        Family::gauge(
            "cairn_registry_checks",
            "Health checks in the catalog, by status.",
            checks,
        ),
        Family::single_gauge("cairn_registry_sessions", "Live sessions.", sessions),
    ])
}
