//! The `workspaces` resource, and [`SETTINGS`]: the attributes a client may set, with their
//! types and TFE's defaults (which `workspaces/` reads requests against).
//!
//! Where it sits: rendered by `workspaces/` and included by runs (`include=workspace`).
//!
//! Invariants: a setting missing from a record renders as its default; the same function
//! renders a workspace in every answer; `permissions` are what the caller's access allows.

use jsonapi::{Relationship, Resource};
use serde_json::{Value, json};

use crate::auth::{Caller, OrgAccess, can_queue_runs};
use crate::ids;
use crate::store::workspaces::{LockHolder, LockRecord, WorkspaceRecord};

/// The type of a settable attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    /// A string or `null`.
    String,
    StringList,
    /// `remote` or `local` (agent pools do not exist here).
    ExecutionMode,
}

/// The default of a settable attribute.
#[derive(Debug, Clone, Copy)]
enum DefaultValue {
    Bool(bool),
    Str(&'static str),
    Null,
    EmptyList,
}

/// One settable workspace attribute.
#[derive(Debug)]
pub(crate) struct Setting {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    default: DefaultValue,
}

const fn setting(name: &'static str, kind: Kind, default: DefaultValue) -> Setting {
    Setting {
        name,
        kind,
        default,
    }
}

/// Every attribute a client may set, with TFE's defaults.
pub(crate) const SETTINGS: &[Setting] = &[
    setting("allow-destroy-plan", Kind::Bool, DefaultValue::Bool(true)),
    setting("assessments-enabled", Kind::Bool, DefaultValue::Bool(false)),
    setting("auto-apply", Kind::Bool, DefaultValue::Bool(false)),
    setting(
        "auto-apply-run-trigger",
        Kind::Bool,
        DefaultValue::Bool(false),
    ),
    setting("description", Kind::String, DefaultValue::Null),
    setting(
        "execution-mode",
        Kind::ExecutionMode,
        DefaultValue::Str("remote"),
    ),
    setting(
        "file-triggers-enabled",
        Kind::Bool,
        DefaultValue::Bool(true),
    ),
    setting("global-remote-state", Kind::Bool, DefaultValue::Bool(false)),
    // cairn's own: the policy-engine version the workspace uses (policy_versions.rs counts
    // them as the version's `usage`).
    setting("policy-engine-version", Kind::String, DefaultValue::Null),
    setting("queue-all-runs", Kind::Bool, DefaultValue::Bool(false)),
    setting("source-name", Kind::String, DefaultValue::Null),
    setting("source-url", Kind::String, DefaultValue::Null),
    setting("speculative-enabled", Kind::Bool, DefaultValue::Bool(true)),
    setting(
        "structured-run-output-enabled",
        Kind::Bool,
        DefaultValue::Bool(true),
    ),
    setting(
        "terraform-version",
        Kind::String,
        DefaultValue::Str("latest"),
    ),
    setting(
        "trigger-patterns",
        Kind::StringList,
        DefaultValue::EmptyList,
    ),
    setting(
        "trigger-prefixes",
        Kind::StringList,
        DefaultValue::EmptyList,
    ),
    setting("working-directory", Kind::String, DefaultValue::Str("")),
];

/// The `workspaces` resource.
pub(crate) fn workspace_resource(
    workspace: &WorkspaceRecord,
    caller: &Caller,
    access: &OrgAccess,
) -> Resource {
    let id = &workspace.id;
    let manage = access.can_manage_workspaces();
    let queue = can_queue_runs(caller, access);
    let mut resource = Resource::new("workspaces", id).attribute("name", &workspace.name);
    for setting in SETTINGS {
        let value = workspace
            .settings
            .get(setting.name)
            .cloned()
            .unwrap_or_else(|| default_value(setting.default));
        resource = resource.attribute(setting.name, value);
    }
    let execution_mode = workspace
        .settings
        .get("execution-mode")
        .and_then(Value::as_str)
        .unwrap_or("remote");
    let lock = workspace.lock.as_ref();
    resource
        .attribute("operations", execution_mode != "local")
        .attribute("environment", "default")
        .attribute("source", "tfe-api")
        .attribute("locked", lock.is_some())
        .attribute(
            "locked-reason",
            lock.map_or("", |lock| lock.reason.as_str()),
        )
        .attribute("created-at", ids::format_time(workspace.created_at_ms))
        .attribute("updated-at", ids::format_time(workspace.updated_at_ms))
        .attribute(
            "latest-change-at",
            ids::format_time(workspace.updated_at_ms),
        )
        .attribute("resource-count", 0)
        .attribute("vcs-repo", Value::Null)
        .attribute("vcs-repo-identifier", Value::Null)
        .attribute("tag-names", Vec::<String>::new())
        .attribute(
            "setting-overwrites",
            json!({"execution-mode": false, "agent-pool": false}),
        )
        .attribute("actions", json!({"is-destroyable": manage}))
        .attribute(
            "permissions",
            json!({
                "can-update": manage, "can-destroy": manage, "can-force-delete": manage,
                "can-queue-run": queue, "can-queue-apply": queue, "can-queue-destroy": queue,
                "can-read-settings": true, "can-update-variable": manage,
                "can-lock": manage, "can-unlock": manage, "can-force-unlock": manage,
                "can-manage-run-tasks": manage, "can-read-state-versions": true,
            }),
        )
        .relationship(
            "organization",
            Relationship::one("organizations", &workspace.organization),
        )
        .relationship(
            "current-configuration-version",
            Relationship::optional(
                "configuration-versions",
                workspace.current_configuration_version_id.as_deref(),
            )
            .related(format!(
                "/api/v2/workspaces/{id}/current-configuration-version"
            )),
        )
        .relationship(
            "current-run",
            Relationship::optional("runs", workspace.current_run_id.as_deref()),
        )
        .relationship(
            "latest-run",
            Relationship::optional("runs", workspace.latest_run_id.as_deref()),
        )
        .relationship("locked-by", locked_by(lock))
        .relationship(
            "configuration-versions",
            Relationship::links_only()
                .related(format!("/api/v2/workspaces/{id}/configuration-versions")),
        )
        .relationship(
            "runs",
            Relationship::links_only().related(format!("/api/v2/workspaces/{id}/runs")),
        )
        .self_link(format!(
            "/api/v2/organizations/{}/workspaces/{}",
            workspace.organization, workspace.name
        ))
}

fn locked_by(lock: Option<&LockRecord>) -> Relationship {
    match lock.map(|lock| &lock.holder) {
        Some(LockHolder::User { id, .. }) => Relationship::one("users", id),
        Some(LockHolder::Team { id, .. }) => Relationship::one("teams", id),
        Some(LockHolder::Organization { .. }) | None => {
            Relationship::optional("users", None::<String>)
        }
    }
}

fn default_value(default: DefaultValue) -> Value {
    match default {
        DefaultValue::Bool(value) => Value::Bool(value),
        DefaultValue::Str(value) => Value::String(value.to_owned()),
        DefaultValue::Null => Value::Null,
        DefaultValue::EmptyList => Value::Array(Vec::new()),
    }
}
