//! The `runs` resource.
//!
//! Where it sits: rendered by `runs.rs` and included by configuration versions
//! (`include=run`) and workspaces (`include=current_run,latest_run`).
//!
//! Invariants: `actions` come from the run state machine (`run_state.rs`); `permissions` are
//! what [`can_queue_runs`] allows the caller.

use jsonapi::{Relationship, Resource};
use serde_json::{Map, Value, json};

use crate::auth::{Caller, OrgAccess, can_queue_runs};
use crate::store::runs::RunRecord;
use crate::{ids, run_state};

/// The `runs` resource.
pub(crate) fn run_resource(run: &RunRecord, caller: &Caller, access: &OrgAccess) -> Resource {
    let id = &run.id;
    let queue = can_queue_runs(caller, access);
    let timestamps: Map<String, Value> = run
        .status_timestamps
        .iter()
        .map(|(name, ms)| (name.clone(), Value::String(ids::format_time(*ms))))
        .collect();
    let canceled_at = run
        .status_timestamps
        .get("canceled-at")
        .map(|ms| ids::format_time(*ms));
    Resource::new("runs", id)
        .attribute("actions", run_state::actions(run.status))
        .attribute("allow-config-generation", false)
        .attribute("allow-empty-apply", run.allow_empty_apply)
        .attribute("auto-apply", run.auto_apply)
        .attribute("canceled-at", canceled_at)
        .attribute("created-at", ids::format_time(run.created_at_ms))
        .attribute("has-changes", false)
        .attribute("is-destroy", run.is_destroy)
        .attribute("message", &run.message)
        .attribute("plan-only", run.plan_only)
        .attribute(
            "permissions",
            json!({
                "can-apply": queue, "can-cancel": queue, "can-discard": queue,
                "can-force-cancel": queue, "can-force-execute": queue,
            }),
        )
        .attribute("position-in-queue", 0)
        .attribute("refresh", run.refresh)
        .attribute("refresh-only", run.refresh_only)
        .attribute("replace-addrs", &run.replace_addrs)
        .attribute("save-plan", run.save_plan)
        .attribute("source", &run.source)
        .attribute("status", run.status.as_str())
        .attribute("status-timestamps", timestamps)
        .attribute("target-addrs", &run.target_addrs)
        .attribute(
            "terraform-version",
            run.terraform_version.as_deref().unwrap_or("latest"),
        )
        .attribute("trigger-reason", "manual")
        .attribute("variables", &run.variables)
        .relationship(
            "workspace",
            Relationship::one("workspaces", &run.workspace_id),
        )
        .relationship(
            "configuration-version",
            Relationship::one("configuration-versions", &run.configuration_version_id).related(
                format!(
                    "/api/v2/configuration-versions/{}",
                    run.configuration_version_id
                ),
            ),
        )
        .relationship(
            "created-by",
            Relationship::optional("users", run.created_by.as_deref()),
        )
        .relationship("plan", Relationship::optional("plans", None::<String>))
        .relationship("apply", Relationship::optional("applies", None::<String>))
        .self_link(format!("/api/v2/runs/{id}"))
}
