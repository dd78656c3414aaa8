//! `GET /v1/metrics` (also served at Consul's `/v1/agent/metrics`): Nomad's metrics endpoint.
//! `?format=prometheus` answers the Prometheus text format; anything else the go-metrics JSON
//! summary (as Nomad, whose `nomad operator metrics` and python-nomad's
//! `metrics.get_metrics()` read it).
//!
//! Called from `routes.rs` (unauthenticated: Nomad requires no ACL for agent metrics); the
//! registry is `Config::metrics`, shared with every service by `cairn`, which also records
//! this service's requests under [`SERVICE`]. The figures: the store's (process-wide), this
//! service's HTTP requests, and the gauges below.
//!
//! Invariant: the gauges are counted over the in-memory snapshot (jobs, allocations,
//! evaluations, nodes), never by reading the store; their status labels are Nomad's known
//! values plus `other`, so their number is bounded.

use axum::extract::{RawQuery, State};
use axum::response::Response;
use http_kit::metrics::{Family, Format, Labels};

use crate::state::Snapshot;

/// The service name this scheduler's request figures are recorded under.
pub(crate) const SERVICE: &str = "scheduler";

const JOB_STATUSES: &[&str] = &["pending", "running", "dead"];
const ALLOC_CLIENT_STATUSES: &[&str] = &[
    "pending", "running", "complete", "failed", "lost", "unknown",
];
const EVAL_STATUSES: &[&str] = &["blocked", "pending", "complete", "failed", "canceled"];
const NODE_STATUSES: &[&str] = &["initializing", "ready", "down", "disconnected"];

/// `GET /v1/metrics`.
pub(crate) async fn read_metrics(
    State(state): State<crate::State>,
    RawQuery(query): RawQuery,
) -> Response {
    // Go's `URL.Query()` drops what it cannot parse; so does this.
    let params = http_kit::query::QueryParams::parse(query.as_deref());
    let format = Format::from_query(params.get("format"));
    let metrics = &state.config().metrics;
    let families = metrics.gather(SERVICE, figures(&state.store().snapshot()));
    http_kit::metrics::response(format, families, metrics.uptime())
}

/// The scheduler's own gauges over one snapshot.
fn figures(snapshot: &Snapshot) -> Vec<Family> {
    vec![
        Family::gauge(
            "cairn_scheduler_jobs",
            "Jobs, by status.",
            by_status("status", JOB_STATUSES, job_statuses(snapshot).into_iter()),
        ),
        Family::gauge(
            "cairn_scheduler_allocations",
            "Allocations, by client status.",
            by_status(
                "client_status",
                ALLOC_CLIENT_STATUSES,
                snapshot
                    .allocs
                    .values()
                    .map(|alloc| alloc.client_status.as_str()),
            ),
        ),
        Family::gauge(
            "cairn_scheduler_evaluations",
            "Evaluations, by status.",
            by_status(
                "status",
                EVAL_STATUSES,
                snapshot.evals.values().map(|eval| eval.status.as_str()),
            ),
        ),
        Family::gauge(
            "cairn_scheduler_nodes",
            "Client nodes, by status.",
            by_status(
                "status",
                NODE_STATUSES,
                snapshot.nodes.values().map(|node| node.status.as_str()),
            ),
        ),
    ]
}

/// Every job's status as the API computes it (Nomad's `getJobStatus`): one pass over the
/// evaluations, then each job's allocations.
fn job_statuses(snapshot: &Snapshot) -> Vec<&'static str> {
    let facts = crate::jobs::eval_facts(snapshot, None);
    snapshot
        .jobs
        .iter()
        .map(|(key, job)| crate::jobs::job_status(job, snapshot.allocs_of_job(key), facts.get(key)))
        .collect()
}

/// One sample per known status (zero included), then `other` if anything else was seen.
fn by_status<'a>(
    label: &'static str,
    known: &[&'static str],
    statuses: impl Iterator<Item = &'a str>,
) -> Vec<(Labels, i64)> {
    let mut counts = vec![0i64; known.len() + 1];
    for status in statuses {
        let slot = known
            .iter()
            .position(|name| *name == status)
            .unwrap_or(known.len());
        counts[slot] += 1;
    }
    let other = counts[known.len()];
    let mut samples: Vec<(Labels, i64)> = known
        .iter()
        .zip(&counts)
        .map(|(name, count)| (vec![(label, (*name).to_owned())], *count))
        .collect();
    if other > 0 {
        samples.push((vec![(label, "other".to_owned())], other));
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_counted_with_zeros_and_unknown_ones_as_other() {
        let samples = by_status("status", &["a", "b"], ["b", "x", "b", "y"].into_iter());
        let rendered: Vec<(String, i64)> = samples
            .into_iter()
            .map(|(labels, count)| (labels[0].1.clone(), count))
            .collect();
        assert_eq!(
            rendered,
            [
                ("a".to_owned(), 0),
                ("b".to_owned(), 2),
                ("other".to_owned(), 2)
            ]
        );
    }
}
