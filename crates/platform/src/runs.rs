//! Runs (`POST /api/v2/runs`, `GET /api/v2/runs/:id`, `GET /api/v2/workspaces/:id/runs`,
//! `POST /api/v2/runs/:id/actions/{apply,discard,cancel,force-cancel}`).
//!
//! Where it sits: handlers called from `routes.rs`; a new run and the run that starts when
//! one ends go through the workspace's queue (`run_queue.rs`), whose transitions are the pure
//! `run_state.rs`; records in `store/runs.rs`; rendered by `views/runs.rs`.
//!
//! Invariants:
//! - Every write of a run writes its workspace record in the same transaction, compared on
//!   its mod revision: the queue of one workspace (`active_run_id`, `current_run_id`,
//!   `latest_run_id`) changes one transaction at a time.
//! - Lists are newest first, in creation order (`store/runs.rs`), never by timestamp alone.
//!   Without a filter a page reads the workspace's run index and the page's runs only; a
//!   filter (status, source, operation) reads every run of the workspace.
//! - A run is created only from an `uploaded` configuration version of its workspace (422
//!   otherwise, naming the relationship); a speculative version makes a plan-only run.
//! - Creating a run needs `manage-workspaces` and a user or team token; reading needs
//!   `read-workspaces`; 404 otherwise. A refused action is 409 `transition not allowed` with
//!   TFE's detail; an accepted one is 202 with no body.
//! - Terraform is never executed: see `run_state.rs` and docs/compat.md for what that means.

use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use jsonapi::Document;
use serde_json::Value;
use storage::{Compare, Txn};

use crate::auth::{Caller, OrgAccess, can_queue_runs, load_visible_workspace};
use crate::render::JsonApi;
use crate::request::{Body, Query};
use crate::run_queue::{RunOptions, enter, promote_ops, queue_run};
use crate::run_state::{self, RunAction};
use crate::store::configuration_versions::{CvStatus, load_cv};
use crate::store::runs::{
    RunRecord, RunVariable, load_run, load_workspace_run_ids, run_key, save_run_ops,
};
use crate::store::workspaces::{load_workspace, workspace_key};
use crate::store::{MAX_ATTEMPTS, put};
use crate::views::configuration_versions::cv_resource;
use crate::views::runs::run_resource;
use crate::views::users::user_resource;
use crate::views::workspaces::workspace_resource;
use crate::{Error, State};

/// `include` names of a run; those not rendered are accepted and ignored.
const INCLUDES: &[&str] = &[
    "workspace",
    "configuration_version",
    "created_by",
    "plan",
    "apply",
    "cost_estimate",
    "task_stages",
    "configuration_version.ingress_attributes",
];
const INCLUDE_ALIASES: &[(&str, &str)] = &[
    ("configuration-version", "configuration_version"),
    ("created-by", "created_by"),
    ("cost-estimate", "cost_estimate"),
    ("task-stages", "task_stages"),
    (
        "configuration-version.ingress_attributes",
        "configuration_version.ingress_attributes",
    ),
];

/// Adds what `include` asked for.
async fn add_includes(
    state: &State,
    document: &mut Document,
    caller: &Caller,
    access: &OrgAccess,
    run: &RunRecord,
    includes: &[String],
) -> Result<(), Error> {
    for include in includes {
        match include.as_str() {
            "workspace" => {
                if let Some(workspace) = load_workspace(state.storage(), &run.workspace_id).await? {
                    document.include(workspace_resource(&workspace.record, caller, access));
                }
            }
            "configuration_version" | "configuration_version.ingress_attributes" => {
                if let Some(cv) = load_cv(state.storage(), &run.configuration_version_id).await? {
                    document.include(cv_resource(&cv.record));
                }
            }
            "created_by" => {
                if let Some(user_id) = &run.created_by
                    && let Some(user) =
                        crate::store::users::load_user(state.storage(), user_id).await?
                {
                    document.include(user_resource(&user.record));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads the options of `POST /runs` (422 pointing at a wrongly typed attribute).
fn read_options(body: &Body) -> Result<RunOptions, Error> {
    let strings = |name: &str| -> Result<Vec<String>, Error> {
        match body.attribute(name)? {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| {
                    Error::invalid_attribute(name, format!("{name} must be an array of strings"))
                }),
            Some(_) => Err(Error::invalid_attribute(
                name,
                format!("{name} must be an array of strings"),
            )),
        }
    };
    let variables = match body.attribute("variables")? {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let field = |name: &str| item.get(name).and_then(Value::as_str).map(str::to_owned);
                Some(RunVariable {
                    key: field("key")?,
                    value: field("value")?,
                })
            })
            .collect::<Option<Vec<RunVariable>>>()
            .ok_or_else(|| {
                Error::invalid_attribute("variables", "each variable needs a string key and value")
            })?,
        Some(_) => {
            return Err(Error::invalid_attribute(
                "variables",
                "variables must be an array",
            ));
        }
    };
    let plan_only = body.bool("plan-only")?.unwrap_or(false);
    let terraform_version = body.string("terraform-version")?;
    if terraform_version.is_some() && !plan_only {
        return Err(Error::invalid_attribute(
            "terraform-version",
            "terraform-version can only be set for plan-only runs",
        ));
    }
    Ok(RunOptions {
        message: body
            .string("message")?
            .unwrap_or_else(|| "Queued manually via the Terraform Enterprise API".to_owned()),
        source: "tfe-api",
        plan_only,
        is_destroy: body.bool("is-destroy")?.unwrap_or(false),
        refresh: body.bool("refresh")?.unwrap_or(true),
        refresh_only: body.bool("refresh-only")?.unwrap_or(false),
        auto_apply: body.bool("auto-apply")?,
        allow_empty_apply: body.bool("allow-empty-apply")?.unwrap_or(false),
        save_plan: body.bool("save-plan")?.unwrap_or(false),
        target_addrs: strings("target-addrs")?,
        replace_addrs: strings("replace-addrs")?,
        variables,
        terraform_version,
    })
}

/// `POST /api/v2/runs`: 201 with the run (`plan_queued`, or `pending` behind another run or
/// a lock); 422 without a workspace, or without an uploaded configuration version of it; 404
/// when the workspace is not visible or the caller may not queue runs.
pub(crate) async fn create_run(
    AxumState(state): AxumState<State>,
    caller: Caller,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["runs"])?;
    let workspace_ref = body.relationship_id("workspace")?.ok_or_else(|| {
        Error::invalid("/data/relationships/workspace", "a run needs a workspace")
    })?;
    let options = read_options(&body)?;
    let (_, access) = load_visible_workspace(&state, &caller, &workspace_ref.id).await?;
    OrgAccess::check(can_queue_runs(&caller, &access))?;
    let cv_ref = body.relationship_id("configuration-version")?;
    let cv_pointer = "/data/relationships/configuration-version";
    for _ in 0..MAX_ATTEMPTS {
        let workspace = load_workspace(state.storage(), &workspace_ref.id)
            .await?
            .ok_or(Error::NotFound)?;
        let cv_id = match &cv_ref {
            Some(cv) => cv.id.clone(),
            None => workspace
                .record
                .current_configuration_version_id
                .clone()
                .ok_or_else(|| {
                    Error::invalid(
                        cv_pointer,
                        "the workspace has no uploaded configuration version; upload one first",
                    )
                })?,
        };
        let cv = load_cv(state.storage(), &cv_id)
            .await?
            .filter(|cv| cv.record.workspace_id == workspace.record.id)
            .ok_or_else(|| {
                Error::invalid(
                    cv_pointer,
                    "no such configuration version in this workspace",
                )
            })?;
        if cv.record.status != CvStatus::Uploaded {
            return Err(Error::invalid(
                cv_pointer,
                format!(
                    "the configuration version is {}; runs need an uploaded one",
                    cv.record.status.as_str()
                ),
            ));
        }
        let mut after = workspace.record.clone();
        let created_by = caller.user().map(|user| user.id.clone());
        let (run, ops) = queue_run(
            &mut after,
            &cv.record,
            options.clone(),
            created_by,
            state.now_ms(),
        )?;
        after.updated_at_ms = run.created_at_ms;
        let mut txn = Txn::new()
            .when(Compare::ModRevision(
                workspace_key(&after.id),
                workspace.revision,
            ))
            .when(Compare::ModRevision(
                crate::store::configuration_versions::cv_key(&cv_id),
                cv.revision,
            ))
            .then(put(workspace_key(&after.id), &after)?);
        txn.success.extend(ops);
        if crate::store::commit(state.storage(), txn).await? {
            return Ok(JsonApi::created(Document::one(run_resource(
                &run, &caller, &access,
            ))));
        }
    }
    Err(Error::Contention)
}

/// The run `id` and the caller's access; 404 when missing or not readable.
async fn load_visible_run(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<(RunRecord, OrgAccess), Error> {
    let run = load_run(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    let (_, access) = load_visible_workspace(state, caller, &run.record.workspace_id).await?;
    Ok((run.record, access))
}

/// `GET /api/v2/runs/:id`.
pub(crate) async fn read_run(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let includes = query.includes(INCLUDES, INCLUDE_ALIASES)?;
    let (run, access) = load_visible_run(&state, &caller, &id).await?;
    let mut document = Document::one(run_resource(&run, &caller, &access));
    add_includes(&state, &mut document, &caller, &access, &run, &includes).await?;
    Ok(JsonApi::ok(document))
}

/// `GET /api/v2/workspaces/:id/runs`: newest first, paged; `filter[status]` (comma list),
/// `filter[source]` and `filter[operation]` (`plan_only`, `plan_and_apply`, `destroy`).
pub(crate) async fn list_runs(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(workspace_id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let (_, access) = load_visible_workspace(&state, &caller, &workspace_id).await?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let includes = query.includes(INCLUDES, INCLUDE_ALIASES)?;
    let statuses: Option<Vec<&str>> = query
        .filter("status")
        .map(|raw| raw.split(',').map(str::trim).collect());
    let sources: Option<Vec<&str>> = query
        .filter("source")
        .map(|raw| raw.split(',').map(str::trim).collect());
    let operations: Option<Vec<&str>> = query
        .filter("operation")
        .map(|raw| raw.split(',').map(str::trim).collect());
    let filtered = statuses.is_some() || sources.is_some() || operations.is_some();
    // Newest first: the index in creation order, reversed (ids only; no run is decoded here).
    let mut ids = load_workspace_run_ids(state.storage(), &workspace_id).await?;
    ids.reverse();
    let (total, page_runs) = if filtered {
        // A filter reads each run (status, source and operation live in the record).
        let mut runs = Vec::new();
        for id in &ids {
            let Some(run) = load_run(state.storage(), id).await? else {
                continue;
            };
            let run = run.record;
            let keep = statuses
                .as_ref()
                .is_none_or(|s| s.contains(&run.status.as_str()))
                && sources
                    .as_ref()
                    .is_none_or(|s| s.contains(&run.source.as_str()))
                && operations
                    .as_ref()
                    .is_none_or(|o| o.contains(&operation_of(&run)));
            if keep {
                runs.push(run);
            }
        }
        let range = page.range(runs.len());
        (runs.len(), runs.drain(range).collect::<Vec<_>>())
    } else {
        // No filter: only the page's runs are read.
        let mut runs = Vec::new();
        for id in &ids[page.range(ids.len())] {
            if let Some(run) = load_run(state.storage(), id).await? {
                runs.push(run.record);
            }
        }
        (ids.len(), runs)
    };
    let total = total as u64;
    let page_runs = &page_runs;
    let mut document = Document::many(
        page_runs
            .iter()
            .map(|run| run_resource(run, &caller, &access))
            .collect(),
    )
    .with_meta("pagination", page.meta(total));
    document.links = page.links(
        &format!("/api/v2/workspaces/{workspace_id}/runs"),
        query.pairs(),
        total,
    );
    for run in page_runs {
        add_includes(&state, &mut document, &caller, &access, run, &includes).await?;
    }
    Ok(JsonApi::ok(document))
}

/// A run's `filter[operation]` name.
fn operation_of(run: &RunRecord) -> &'static str {
    if run.is_destroy {
        "destroy"
    } else if run.plan_only {
        "plan_only"
    } else if run.refresh_only {
        "refresh_only"
    } else {
        "plan_and_apply"
    }
}

/// `POST /api/v2/runs/:id/actions/apply`: 202; 409 unless the run waits for confirmation.
pub(crate) async fn apply_run(
    state: AxumState<State>,
    caller: Caller,
    id: Path<String>,
) -> Result<Response, Error> {
    act(state, caller, id, RunAction::Apply).await
}

/// `POST /api/v2/runs/:id/actions/discard`: 202; 409 unless pending or awaiting confirmation.
pub(crate) async fn discard_run(
    state: AxumState<State>,
    caller: Caller,
    id: Path<String>,
) -> Result<Response, Error> {
    act(state, caller, id, RunAction::Discard).await
}

/// `POST /api/v2/runs/:id/actions/cancel`: 202; 409 unless queued, planning or applying.
pub(crate) async fn cancel_run(
    state: AxumState<State>,
    caller: Caller,
    id: Path<String>,
) -> Result<Response, Error> {
    act(state, caller, id, RunAction::Cancel).await
}

/// `POST /api/v2/runs/:id/actions/force-cancel`: always 409 here (a cancel completes at once).
pub(crate) async fn force_cancel_run(
    state: AxumState<State>,
    caller: Caller,
    id: Path<String>,
) -> Result<Response, Error> {
    act(state, caller, id, RunAction::ForceCancel).await
}

async fn act(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    action: RunAction,
) -> Result<Response, Error> {
    let (_, access) = load_visible_run(&state, &caller, &id).await?;
    OrgAccess::check(can_queue_runs(&caller, &access))?;
    for _ in 0..MAX_ATTEMPTS {
        let run = load_run(state.storage(), &id)
            .await?
            .ok_or(Error::NotFound)?;
        let workspace = load_workspace(state.storage(), &run.record.workspace_id)
            .await?
            .ok_or(Error::NotFound)?;
        let next = run_state::transition(run.record.status, action)
            .map_err(|refused| Error::TransitionNotAllowed(refused.detail.to_owned()))?;
        let now = state.now_ms();
        let mut changed = run.record.clone();
        enter(&mut changed, next, now);
        let mut after = workspace.record.clone();
        if next.is_final() && after.active_run_id.as_deref() == Some(id.as_str()) {
            after.active_run_id = None;
        }
        let promoted = promote_ops(&state, &mut after, Some(&changed)).await?;
        after.updated_at_ms = now;
        let mut txn = Txn::new()
            .when(Compare::ModRevision(run_key(&id), run.revision))
            .when(Compare::ModRevision(
                workspace_key(&after.id),
                workspace.revision,
            ))
            .then(put(workspace_key(&after.id), &after)?);
        txn.success.extend(save_run_ops(&changed)?);
        txn.success.extend(promoted);
        if crate::store::commit(state.storage(), txn).await? {
            return Ok(StatusCode::ACCEPTED.into_response());
        }
    }
    Err(Error::Contention)
}
