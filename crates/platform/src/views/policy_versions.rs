//! The `policy-engine-versions` resource, also rendered as upstream's `sentinel-versions`
//! (same attributes, another type) at `/api/v2/admin/sentinel-versions`.
//!
//! Where it sits: rendered by `policy_versions.rs` from `store/policy_versions.rs` records
//! and the usage count the handler computed.
//!
//! Invariants: one function renders every answer (create, read, list); `deprecated-reason`
//! is null unless `deprecated` is true; `archs` lists the one linux/amd64 build the `url` and
//! `sha` describe (go-tfe and pytfe read it).

use jsonapi::Resource;
use serde_json::json;

use crate::ids;
use crate::store::policy_versions::PolicyEngineVersionRecord;

/// `policy-engine-versions` or `sentinel-versions`.
pub(crate) fn version_resource(
    kind: &str,
    record: &PolicyEngineVersionRecord,
    usage: usize,
) -> Resource {
    Resource::new(kind, &record.id)
        .attribute("version", &record.engine_version)
        .attribute("url", &record.url)
        .attribute("sha", &record.sha)
        .attribute("deprecated", record.deprecated)
        .attribute(
            "deprecated-reason",
            if record.deprecated {
                record.deprecated_reason.as_deref()
            } else {
                None
            },
        )
        .attribute("official", record.official)
        .attribute("enabled", record.enabled)
        .attribute("beta", record.beta)
        .attribute("usage", usage)
        .attribute("created-at", ids::format_time(record.created_at_ms))
        .attribute(
            "archs",
            json!([{"url": record.url, "sha": record.sha, "os": "linux", "arch": "amd64"}]),
        )
}
