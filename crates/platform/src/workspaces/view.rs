//! The `workspaces` resource and what builds it: the table of settable attributes with their
//! types and defaults, reading them from a request, `include`, and the access helpers every
//! workspace-scoped family uses ([`load_visible_workspace`], [`can_queue_runs`]).
//!
//! Where it sits: used by `handlers.rs` and `lock.rs` here, and by `configuration_versions.rs`
//! and `runs.rs`.
//!
//! Invariants: a setting missing from a record renders as its default; the same function
//! renders a workspace in every answer.

use jsonapi::{Document, Relationship, Resource};
use serde_json::{Map, Value, json};

use crate::auth::{Caller, OrgAccess};
use crate::request::Body;
use crate::store::Stored;
use crate::store::workspaces::{
    LockHolder, LockRecord, WorkspaceRecord, load_workspace, load_workspace_by_name,
};
use crate::{Error, State, configuration_versions, ids, organizations, runs};

/// The type of a settable attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
struct Setting {
    name: &'static str,
    kind: Kind,
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
const SETTINGS: &[Setting] = &[
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

/// Related resources `include` may name; those not rendered here are accepted and ignored.
pub(super) const INCLUDES: &[&str] = &[
    "organization",
    "current_configuration_version",
    "current_run",
    "latest_run",
    "current_configuration_version.ingress_attributes",
    "current_run.plan",
    "current_run.configuration_version",
    "current_run.configuration_version.ingress_attributes",
    "effective_tag_bindings",
    "locked_by",
    "readme",
    "outputs",
    "current-state-version",
    "project",
];

/// Whether `name` may name a workspace.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 90
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The workspace `id` and the caller's access to its organization; 404 when it does not exist
/// or the caller may not read it.
pub(crate) async fn load_visible_workspace(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(Stored<WorkspaceRecord>, OrgAccess), Error> {
    let workspace = load_workspace(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    let access = caller
        .organization(state, &workspace.record.organization)
        .await?;
    OrgAccess::check(access.can_read_workspaces())?;
    Ok((workspace, access))
}

pub(super) async fn load_named_workspace(
    state: &State,
    caller: &Caller,
    organization: &str,
    name: &str,
) -> Result<(Stored<WorkspaceRecord>, OrgAccess), Error> {
    let access = caller.organization(state, organization).await?;
    OrgAccess::check(access.can_read_workspaces())?;
    let workspace = load_workspace_by_name(state.storage(), organization, name)
        .await?
        .ok_or(Error::NotFound)?;
    Ok((workspace, access))
}

/// Whether the caller may queue plans and runs and upload configuration in this organization.
pub(crate) fn can_queue_runs(caller: &Caller, access: &OrgAccess) -> bool {
    access.can_manage_workspaces() && caller.can_create_configuration_versions()
}

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

/// The workspace document with what `include` asked for.
pub(super) async fn workspace_document(
    state: &State,
    caller: &Caller,
    access: &OrgAccess,
    workspace: &WorkspaceRecord,
    includes: &[String],
) -> Result<Document, Error> {
    let mut document = Document::one(workspace_resource(workspace, caller, access));
    add_includes(state, &mut document, caller, access, workspace, includes).await?;
    Ok(document)
}

pub(super) async fn add_includes(
    state: &State,
    document: &mut Document,
    caller: &Caller,
    access: &OrgAccess,
    workspace: &WorkspaceRecord,
    includes: &[String],
) -> Result<(), Error> {
    for include in includes {
        match include.as_str() {
            "organization" => document.include(organizations::organization_resource(
                &access.organization,
                access,
            )),
            "current_configuration_version" => {
                if let Some(id) = &workspace.current_configuration_version_id
                    && let Some(cv) =
                        crate::store::configuration_versions::load_cv(state.storage(), id).await?
                {
                    document.include(configuration_versions::cv_resource(&cv.record));
                }
            }
            "current_run" | "latest_run" => {
                let id = if include == "current_run" {
                    &workspace.current_run_id
                } else {
                    &workspace.latest_run_id
                };
                if let Some(id) = id
                    && let Some(run) = crate::store::runs::load_run(state.storage(), id).await?
                {
                    document.include(runs::run_resource(&run.record, caller, access));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads the settable attributes of `body` over `settings` (422 on a bad value).
pub(super) fn apply_settings(body: &Body, settings: &mut Map<String, Value>) -> Result<(), Error> {
    for setting in SETTINGS {
        if !body.has_attribute(setting.name)? {
            continue;
        }
        let value = match setting.kind {
            Kind::Bool => body.bool(setting.name)?.map(Value::Bool),
            Kind::String => body.string(setting.name)?.map(Value::String),
            Kind::StringList => match body.attribute(setting.name)? {
                None => None,
                Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                    Some(Value::Array(items.clone()))
                }
                Some(_) => {
                    return Err(Error::invalid_attribute(
                        setting.name,
                        format!("{} must be an array of strings", setting.name),
                    ));
                }
            },
            Kind::ExecutionMode => match body.string(setting.name)?.as_deref() {
                None => None,
                Some(mode @ ("remote" | "local")) => Some(Value::String(mode.to_owned())),
                Some("agent") => {
                    return Err(Error::invalid_attribute(
                        setting.name,
                        "execution-mode agent needs an agent pool; agent pools are not supported",
                    ));
                }
                Some(_) => {
                    return Err(Error::invalid_attribute(
                        setting.name,
                        "execution-mode must be remote or local",
                    ));
                }
            },
        };
        match value {
            // `null` restores the default (for a nullable string, it is the default).
            None => settings.remove(setting.name),
            Some(value) => settings.insert(setting.name.to_owned(), value),
        };
    }
    if let Some(repo) = body.attribute("vcs-repo")? {
        let empty = repo.as_object().is_some_and(Map::is_empty);
        if !empty {
            return Err(Error::invalid_attribute(
                "vcs-repo",
                "VCS-connected workspaces are not supported; upload configuration versions instead",
            ));
        }
    }
    Ok(())
}

pub(super) fn read_name(body: &Body) -> Result<Option<String>, Error> {
    let Some(name) = body.string("name")? else {
        return Ok(None);
    };
    if !valid_name(&name) {
        return Err(Error::invalid_attribute(
            "name",
            "name may contain only letters, numbers, - and _, at most 90 characters",
        ));
    }
    Ok(Some(name))
}
