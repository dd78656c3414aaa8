//! The `configuration-versions` resource.
//!
//! Where it sits: rendered by `configuration_versions.rs` and included by runs and workspaces.
//!
//! Invariant: `upload-url` is not part of it; `configuration_versions.rs` adds it to the create
//! response only, so every other representation is the same (go-tfe compares them).

use jsonapi::{Relationship, Resource};

use crate::ids;
use crate::store::configuration_versions::ConfigurationVersionRecord;

/// The `configuration-versions` resource, without `upload-url`.
pub(crate) fn cv_resource(cv: &ConfigurationVersionRecord) -> Resource {
    let id = &cv.id;
    let timestamps: serde_json::Map<String, serde_json::Value> = cv
        .status_timestamps
        .iter()
        .map(|(name, ms)| {
            (
                name.clone(),
                serde_json::Value::String(ids::format_time(*ms)),
            )
        })
        .collect();
    Resource::new("configuration-versions", id)
        .attribute("auto-queue-runs", cv.auto_queue_runs)
        .attribute("error", &cv.error)
        .attribute("error-message", &cv.error_message)
        .attribute("source", &cv.source)
        .attribute("speculative", cv.speculative)
        .attribute("provisional", cv.provisional)
        .attribute("status", cv.status.as_str())
        .attribute("status-timestamps", timestamps)
        .attribute("changed-files", Vec::<String>::new())
        .relationship(
            "ingress-attributes",
            Relationship::optional("ingress-attributes", None::<String>).related(format!(
                "/api/v2/configuration-versions/{id}/ingress-attributes"
            )),
        )
        .self_link(format!("/api/v2/configuration-versions/{id}"))
        .link(
            "download",
            format!("/api/v2/configuration-versions/{id}/download"),
        )
}
