//! Workspace CRUD handlers: list (search, wildcard, paging), create, read, update (rename
//! included), delete and safe-delete, by organization and name and by id; reading the name
//! and the settable attributes of a request, and the `include`s of an answer.
//!
//! Where it sits: called from `routes.rs`; renders through `views/workspaces.rs`, whose
//! `SETTINGS` table requests are read against; writes through `store/workspaces.rs` with
//! compare-and-swap on the record (and `Missing` on a new name).
//!
//! Invariants: a delete removes the workspace's configuration versions and runs in the same
//! transaction and their archives right after; safe-delete refuses a locked workspace.

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use jsonapi::Document;
use serde_json::{Map, Value};
use storage::Txn;

use crate::auth::{Caller, OrgAccess, load_visible_workspace};
use crate::render::{JsonApi, no_content};
use crate::request::{Body, Query};
use crate::store::Stored;
use crate::store::workspaces::{
    WorkspaceRecord, create_workspace_ops, delete_workspace_ops, load_workspace,
    load_workspace_by_name, load_workspace_ids, update_workspace_ops,
};
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION, commit};
use crate::views::configuration_versions::cv_resource;
use crate::views::organizations::organization_resource;
use crate::views::runs::run_resource;
use crate::views::workspaces::{Kind, SETTINGS, workspace_resource};
use crate::{Error, State, configuration_versions, ids};

/// `GET /api/v2/organizations/:name/workspaces`: by name, paged; `search[name]` matches a
/// substring, `search[wildcard-name]` a `*`-pattern, both ignoring case.
pub(crate) async fn list_workspaces(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let access = caller.organization(&state, &organization).await?;
    OrgAccess::check(access.can_read_workspaces())?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let includes = query.includes(INCLUDES, &[])?;
    let search = query
        .get("search[name]")
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase);
    let wildcard = query
        .get("search[wildcard-name]")
        .filter(|s| !s.is_empty())
        .map(str::to_lowercase);
    let matching: Vec<String> = load_workspace_ids(state.storage(), &organization)
        .await?
        .into_iter()
        .filter(|(name, _)| {
            search
                .as_ref()
                .is_none_or(|search| name.contains(search.as_str()))
        })
        .filter(|(name, _)| {
            wildcard
                .as_ref()
                .is_none_or(|pattern| stdx::glob::matches(pattern, name))
        })
        .map(|(_, id)| id)
        .collect();
    let mut workspaces = Vec::new();
    for id in &matching[page.range(matching.len())] {
        if let Some(workspace) = load_workspace(state.storage(), id).await? {
            workspaces.push(workspace.record);
        }
    }
    let path = format!("/api/v2/organizations/{organization}/workspaces");
    let resources = workspaces
        .iter()
        .map(|workspace| workspace_resource(workspace, &caller, &access))
        .collect();
    let total = matching.len() as u64;
    let mut document = Document::many(resources).with_meta("pagination", page.meta(total));
    document.links = page.links(&path, query.pairs(), total);
    for workspace in &workspaces {
        add_includes(
            &state,
            &mut document,
            &caller,
            &access,
            workspace,
            &includes,
        )
        .await?;
    }
    Ok(JsonApi::ok(document))
}

/// `POST /api/v2/organizations/:name/workspaces`: 201; 422 for a bad or taken name or a bad
/// attribute; 404 without `manage-workspaces`.
pub(crate) async fn create_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["workspaces"])?;
    let access = caller.organization(&state, &organization).await?;
    OrgAccess::check(access.can_manage_workspaces())?;
    let name =
        read_name(&body)?.ok_or_else(|| Error::invalid_attribute("name", "name can't be blank"))?;
    let mut settings = Map::new();
    // The general setting `default-remote-state-access` (admin/general.rs), as stored now, is
    // the new workspace's `global-remote-state` unless the request says otherwise.
    let (general, _) = crate::store::site_settings::load_setting::<
        crate::store::site_settings::GeneralSettings,
    >(state.storage())
    .await?;
    settings.insert(
        "global-remote-state".to_owned(),
        Value::Bool(general.default_remote_state_access),
    );
    let default_mode = access.organization.default_execution_mode.as_str();
    if default_mode == "local" {
        settings.insert(
            "execution-mode".to_owned(),
            Value::String("local".to_owned()),
        );
    }
    apply_settings(&body, &mut settings)?;
    let now = state.now_ms();
    let workspace = WorkspaceRecord {
        version: RECORD_VERSION,
        id: ids::new_id("ws"),
        organization: organization.clone(),
        name,
        settings: settings.into_iter().collect(),
        lock: None,
        current_configuration_version_id: None,
        current_run_id: None,
        latest_run_id: None,
        active_run_id: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    let (compares, ops) = create_workspace_ops(&workspace)?;
    let txn = Txn {
        compares,
        success: ops,
        failure: Vec::new(),
    };
    if !commit(state.storage(), txn).await? {
        return Err(Error::invalid_attribute(
            "name",
            "name has already been taken",
        ));
    }
    Ok(JsonApi::created(Document::one(workspace_resource(
        &workspace, &caller, &access,
    ))))
}

/// `GET /api/v2/organizations/:name/workspaces/:workspace`.
pub(crate) async fn read_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((organization, name)): Path<(String, String)>,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, &[])?;
    let (workspace, access) = load_named_workspace(&state, &caller, &organization, &name).await?;
    Ok(JsonApi::ok(
        workspace_document(&state, &caller, &access, &workspace.record, &includes).await?,
    ))
}

/// `GET /api/v2/workspaces/:id`.
pub(crate) async fn read_workspace_by_id(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, &[])?;
    let (workspace, access) = load_visible_workspace(&state, &caller, &id).await?;
    Ok(JsonApi::ok(
        workspace_document(&state, &caller, &access, &workspace.record, &includes).await?,
    ))
}

/// `PATCH /api/v2/organizations/:name/workspaces/:workspace`.
pub(crate) async fn update_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((organization, name)): Path<(String, String)>,
    body: Body,
) -> Result<JsonApi, Error> {
    let (workspace, access) = load_named_workspace(&state, &caller, &organization, &name).await?;
    update(&state, &caller, &access, workspace.record.id, &body).await
}

/// `PATCH /api/v2/workspaces/:id`.
pub(crate) async fn update_workspace_by_id(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    let (_, access) = load_visible_workspace(&state, &caller, &id).await?;
    update(&state, &caller, &access, id, &body).await
}

async fn update(
    state: &State,
    caller: &Caller,
    access: &OrgAccess,
    id: String,
    body: &Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["workspaces"])?;
    OrgAccess::check(access.can_manage_workspaces())?;
    let name = read_name(body)?;
    for _ in 0..MAX_ATTEMPTS {
        let before = load_workspace(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        let mut after = before.record.clone();
        if let Some(name) = &name {
            after.name.clone_from(name);
        }
        let mut settings: Map<String, Value> = after.settings.into_iter().collect();
        apply_settings(body, &mut settings)?;
        after.settings = settings.into_iter().collect();
        after.updated_at_ms = state.now_ms();
        let (compares, ops) = update_workspace_ops(&before, &after)?;
        let txn = Txn {
            compares,
            success: ops,
            failure: Vec::new(),
        };
        if commit(state.storage(), txn).await? {
            return Ok(JsonApi::ok(Document::one(workspace_resource(
                &after, caller, access,
            ))));
        }
        if name
            .as_ref()
            .is_some_and(|name| !name.eq_ignore_ascii_case(&before.record.name))
        {
            let taken =
                load_workspace_by_name(state.storage(), &after.organization, &after.name).await?;
            if taken.is_some_and(|other| other.record.id != id) {
                return Err(Error::invalid_attribute(
                    "name",
                    "name has already been taken",
                ));
            }
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/organizations/:name/workspaces/:workspace`: 204.
pub(crate) async fn delete_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((organization, name)): Path<(String, String)>,
) -> Result<Response, Error> {
    let (workspace, access) = load_named_workspace(&state, &caller, &organization, &name).await?;
    delete(&state, &access, workspace.record.id, false).await
}

/// `DELETE /api/v2/workspaces/:id`: 204.
pub(crate) async fn delete_workspace_by_id(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    let (_, access) = load_visible_workspace(&state, &caller, &id).await?;
    delete(&state, &access, id, false).await
}

/// `POST /api/v2/organizations/:name/workspaces/:workspace/actions/safe-delete`: 204, or 409
/// while the workspace is locked (it never manages resources here, so nothing else blocks).
pub(crate) async fn safe_delete_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path((organization, name)): Path<(String, String)>,
) -> Result<Response, Error> {
    let (workspace, access) = load_named_workspace(&state, &caller, &organization, &name).await?;
    delete(&state, &access, workspace.record.id, true).await
}

/// `POST /api/v2/workspaces/:id/actions/safe-delete`.
pub(crate) async fn safe_delete_workspace_by_id(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    let (_, access) = load_visible_workspace(&state, &caller, &id).await?;
    delete(&state, &access, id, true).await
}

async fn delete(
    state: &State,
    access: &OrgAccess,
    id: String,
    safe: bool,
) -> Result<Response, Error> {
    OrgAccess::check(access.can_manage_workspaces())?;
    for _ in 0..MAX_ATTEMPTS {
        let workspace = load_workspace(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        if safe && workspace.record.lock.is_some() {
            return Err(Error::Conflict(
                "Workspace is locked and cannot be safely deleted.".to_owned(),
            ));
        }
        let cv_ids =
            crate::store::configuration_versions::load_workspace_cv_ids(state.storage(), &id)
                .await?;
        let mut txn = Txn::new().when(storage::Compare::ModRevision(
            crate::store::workspaces::workspace_key(&id),
            workspace.revision,
        ));
        txn.success = delete_workspace_ops(state.storage(), &workspace.record).await?;
        if commit(state.storage(), txn).await? {
            for cv_id in cv_ids {
                configuration_versions::discard_blobs(state, &cv_id).await;
            }
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}

/// Related resources `include` may name; those not rendered here are accepted and ignored.
const INCLUDES: &[&str] = &[
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
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 90
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

async fn load_named_workspace(
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

/// The workspace document with what `include` asked for.
async fn workspace_document(
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

async fn add_includes(
    state: &State,
    document: &mut Document,
    caller: &Caller,
    access: &OrgAccess,
    workspace: &WorkspaceRecord,
    includes: &[String],
) -> Result<(), Error> {
    for include in includes {
        match include.as_str() {
            "organization" => document.include(organization_resource(&access.organization, access)),
            "current_configuration_version" => {
                if let Some(id) = &workspace.current_configuration_version_id
                    && let Some(cv) =
                        crate::store::configuration_versions::load_cv(state.storage(), id).await?
                {
                    document.include(cv_resource(&cv.record));
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
                    document.include(run_resource(&run.record, caller, access));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads the settable attributes of `body` over `settings` (422 on a bad value).
fn apply_settings(body: &Body, settings: &mut Map<String, Value>) -> Result<(), Error> {
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

fn read_name(body: &Body) -> Result<Option<String>, Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_search_matches_prefix_suffix_and_middle() {
        // `search[wildcard-name]`: `*` matches any run of characters (stdx::glob).
        let wildcard_match = stdx::glob::matches;
        assert!(wildcard_match("prod-*", "prod-web"));
        assert!(wildcard_match("*-web", "prod-web"));
        assert!(wildcard_match("*od*we*", "prod-web"));
        assert!(wildcard_match("prod", "prod"));
        assert!(!wildcard_match("prod", "prod-web"));
        assert!(!wildcard_match("a*a", "a"));
        assert!(!wildcard_match("*x*", "prod"));
    }

    #[test]
    fn valid_name_allows_letters_digits_dash_underscore() {
        assert!(valid_name("web_prod-1"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(&"x".repeat(91)));
    }
}
