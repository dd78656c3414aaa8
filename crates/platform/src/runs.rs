//! Runs (`POST /api/v2/runs`, `GET /api/v2/runs/:id`, `GET /api/v2/workspaces/:id/runs`,
//! `POST /api/v2/runs/:id/actions/{apply,discard,cancel,force-cancel}`), and queueing the run
//! an upload with `auto-queue-runs` asks for.
//!
//! Where it sits: handlers called from `routes.rs` (engineer P2's section); the state machine
//! is `run_state.rs`; records in `store/runs.rs`; `objects.rs` calls [`queue_run`] when an
//! upload completes; `workspaces.rs` calls [`promote_ops`] on unlock.
//!
//! Invariants:
//! - Every write of a run writes its workspace record in the same transaction, compared on
//!   its mod revision: the queue of one workspace (`active_run_id`, `current_run_id`,
//!   `latest_run_id`) changes one transaction at a time.
//! - A run is created only from an `uploaded` configuration version of its workspace (422
//!   otherwise, naming the relationship); a speculative version makes a plan-only run.
//! - Creating a run needs `manage-workspaces` and a user or team token; reading needs
//!   `read-workspaces`; 404 otherwise. A refused action is 409 `transition not allowed` with
//!   TFE's detail; an accepted one is 202 with no body.
//! - Terraform is never executed: see `run_state.rs` and docs/compat.md for what that means.

use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use jsonapi::{Document, Relationship, Resource};
use serde_json::{Map, Value, json};
use storage::{Compare, Op, Txn};

use crate::auth::{Caller, OrgAccess};
use crate::render::JsonApi;
use crate::request::{Body, Query};
use crate::run_state::{self, QueuedRun, RunAction, RunStatus};
use crate::store::configuration_versions::{ConfigurationVersionRecord, CvStatus, load_cv};
use crate::store::runs::{
    RunRecord, RunVariable, create_run_ops, load_active_runs, load_run, load_workspace_run_ids,
    run_key, save_run_ops,
};
use crate::store::workspaces::{WorkspaceRecord, load_workspace, workspace_key};
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION, put};
use crate::workspaces::{can_queue_runs, load_visible_workspace, workspace_resource};
use crate::{Error, State, configuration_versions, ids, users};

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

/// The options of a new run (`POST /runs` attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunOptions {
    pub(crate) message: String,
    pub(crate) source: &'static str,
    pub(crate) plan_only: bool,
    pub(crate) is_destroy: bool,
    pub(crate) refresh: bool,
    pub(crate) refresh_only: bool,
    pub(crate) auto_apply: Option<bool>,
    pub(crate) allow_empty_apply: bool,
    pub(crate) save_plan: bool,
    pub(crate) target_addrs: Vec<String>,
    pub(crate) replace_addrs: Vec<String>,
    pub(crate) variables: Vec<RunVariable>,
    pub(crate) terraform_version: Option<String>,
}

impl RunOptions {
    /// The run an upload with `auto-queue-runs` queues.
    pub(crate) fn auto_queued() -> RunOptions {
        RunOptions {
            message: "Triggered via API".to_owned(),
            source: "tfe-configuration-version",
            plan_only: false,
            is_destroy: false,
            refresh: true,
            refresh_only: false,
            auto_apply: None,
            allow_empty_apply: false,
            save_plan: false,
            target_addrs: Vec::new(),
            replace_addrs: Vec::new(),
            variables: Vec::new(),
            terraform_version: None,
        }
    }
}

/// A new run of `cv` in `workspace`: its record and the ops that create it. Updates the
/// workspace's queue fields in place; the caller writes the workspace in the same
/// transaction, compared on the revision it read.
pub(crate) fn queue_run(
    workspace: &mut WorkspaceRecord,
    cv: &ConfigurationVersionRecord,
    options: RunOptions,
    created_by: Option<String>,
) -> Result<(RunRecord, Vec<Op>), Error> {
    let now = ids::now_ms();
    let plan_only = options.plan_only || cv.speculative;
    let status = run_state::initial_status(
        plan_only,
        workspace.lock.is_some(),
        workspace.active_run_id.is_some(),
    );
    let auto_apply = options.auto_apply.unwrap_or_else(|| {
        workspace
            .settings
            .get("auto-apply")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    });
    let mut run = RunRecord {
        version: RECORD_VERSION,
        id: ids::new_id("run"),
        workspace_id: workspace.id.clone(),
        organization: workspace.organization.clone(),
        configuration_version_id: cv.id.clone(),
        status,
        status_timestamps: Default::default(),
        message: options.message,
        source: options.source.to_owned(),
        plan_only,
        is_destroy: options.is_destroy,
        refresh: options.refresh,
        refresh_only: options.refresh_only,
        auto_apply,
        allow_empty_apply: options.allow_empty_apply,
        save_plan: options.save_plan,
        target_addrs: options.target_addrs,
        replace_addrs: options.replace_addrs,
        variables: options.variables,
        terraform_version: options.terraform_version,
        created_by,
        created_at_ms: now,
    };
    enter(&mut run, status, now);
    workspace.latest_run_id = Some(run.id.clone());
    if status != RunStatus::Pending && !plan_only {
        workspace.active_run_id = Some(run.id.clone());
        workspace.current_run_id = Some(run.id.clone());
    }
    Ok((run.clone(), create_run_ops(&run)?))
}

/// Records that `run` entered `status` at `now`.
fn enter(run: &mut RunRecord, status: RunStatus, now: u64) {
    run.status = status;
    if let Some(key) = status.timestamp_key() {
        run.status_timestamps.insert(key, now);
    }
    if status == RunStatus::PlanQueued {
        run.status_timestamps
            .insert("plan-queueable-at".to_owned(), now);
    }
}

/// When nothing holds `workspace` and it is unlocked, starts its oldest pending run: the ops
/// that write that run, with the workspace's queue fields updated in place. `changed` is a
/// run of this workspace written in the same transaction (its new status counts).
pub(crate) async fn promote_ops(
    state: &State,
    workspace: &mut WorkspaceRecord,
    changed: Option<&RunRecord>,
) -> Result<Vec<Op>, Error> {
    if workspace.lock.is_some() || workspace.active_run_id.is_some() {
        return Ok(Vec::new());
    }
    let mut active = load_active_runs(state.storage(), &workspace.id).await?;
    if let Some(changed) = changed {
        for run in &mut active {
            if run.id == changed.id {
                run.clone_from(changed);
            }
        }
    }
    let queue: Vec<QueuedRun> = active
        .iter()
        .map(|run| QueuedRun {
            status: run.status,
            speculative: run.plan_only,
        })
        .collect();
    let Some(index) = run_state::next_to_start(&queue, false) else {
        return Ok(Vec::new());
    };
    let mut run = active.swap_remove(index);
    enter(&mut run, RunStatus::PlanQueued, ids::now_ms());
    workspace.active_run_id = Some(run.id.clone());
    workspace.current_run_id = Some(run.id.clone());
    save_run_ops(&run)
}

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
                    document.include(configuration_versions::cv_resource(&cv.record));
                }
            }
            "created_by" => {
                if let Some(user_id) = &run.created_by
                    && let Some(user) =
                        crate::store::users::load_user(state.storage(), user_id).await?
                {
                    document.include(users::user_resource(&user.record));
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
        let (run, ops) = queue_run(&mut after, &cv.record, options.clone(), created_by)?;
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
    let mut runs = Vec::new();
    for id in load_workspace_run_ids(state.storage(), &workspace_id)
        .await?
        .iter()
        .rev()
    {
        let Some(run) = load_run(state.storage(), id).await? else {
            continue;
        };
        let run = run.record;
        let operation = if run.is_destroy {
            "destroy"
        } else if run.plan_only {
            "plan_only"
        } else if run.refresh_only {
            "refresh_only"
        } else {
            "plan_and_apply"
        };
        let keep = statuses
            .as_ref()
            .is_none_or(|s| s.contains(&run.status.as_str()))
            && sources
                .as_ref()
                .is_none_or(|s| s.contains(&run.source.as_str()))
            && operations.as_ref().is_none_or(|o| o.contains(&operation));
        if keep {
            runs.push(run);
        }
    }
    let total = runs.len() as u64;
    let page_runs = &runs[page.range(runs.len())];
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
        let now = ids::now_ms();
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
