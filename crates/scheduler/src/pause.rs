//! Task schedule pause overrides (Nomad Enterprise's `/v1/client/allocation/:id/pause`):
//! `POST|PUT` asks a scheduled task to pause, run, or follow its schedule again; `GET` reads its
//! `ScheduleState`; the client pulls the overrides of its allocations through
//! `GET /v1/internal/node/:id/overrides` (blocking) and reports the state it applied.
//!
//! Request values map to read values as upstream's client does: `pause` → `force_pause`,
//! `run` → `force_run`, `scheduled` → `schedule_resume` (until the client follows its schedule
//! again: then `""` inside the window, `scheduled_pause` outside); any other value is 400
//! `Not a valid task schedule state`. Nomad CE answers 500 `Enterprise only`; cairn implements
//! the Enterprise behaviour (docs/compat.md).
//!
//! Invariants: an override is kept (in `services::Runtime`) until the client reports the state
//! it asked for; the latest override of a task wins.

use axum::extract::{Path, State};
use http::HeaderMap;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::meta::{self, QueryParams};
use crate::services::alloc_namespace;
use crate::structs::ScheduleOverride;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct PauseRequest {
    task: Option<String>,
    schedule_state: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct IndexAnswer {
    index: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct StateAnswer {
    schedule_state: String,
}

/// The task named in a request, checked against the allocation's task group.
fn check_task(state: &crate::State, alloc_id: &str, task: &str) -> Result<(), Error> {
    if task.is_empty() {
        return Err(Error::BadRequest("missing task name".to_owned()));
    }
    let snapshot = state.store().snapshot();
    let Some(alloc) = snapshot.alloc(alloc_id) else {
        return Err(Error::NotFound("allocation not found".to_owned()));
    };
    let known = crate::allocations::with_job(&snapshot, alloc)
        .job
        .as_ref()
        .and_then(|job| job.task_group(&alloc.task_group).cloned())
        .is_some_and(|group| group.tasks.iter().any(|t| t.name == task));
    if known {
        Ok(())
    } else {
        Err(Error::NotFound(format!("task {task:?} not found")))
    }
}

/// `POST|PUT /v1/client/allocation/:alloc_id/pause`.
pub(crate) async fn write(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    http_kit::RawBody { bytes: body, .. }: http_kit::RawBody<Error>,
) -> Result<http_kit::Json<IndexAnswer>, Error> {
    let namespace = alloc_namespace(&state, &alloc_id)?;
    if authz
        .allow_namespace(&namespace, Capability::SubmitJob)
        .is_err()
    {
        authz.allow_namespace(&namespace, Capability::PauseAllocation)?;
    }
    let request: PauseRequest = if body.is_empty() {
        PauseRequest::default()
    } else {
        serde_json::from_value(meta::json_body(&body)?)
            .map_err(|error| Error::BadRequest(format!("invalid request body: {error}")))?
    };
    let task = request.task.unwrap_or_default();
    let wanted = request.schedule_state.unwrap_or_default();
    if !matches!(wanted.as_str(), "pause" | "run" | "scheduled") {
        return Err(Error::BadRequest(
            "Not a valid task schedule state".to_owned(),
        ));
    }
    check_task(&state, &alloc_id, &task)?;
    let ((), index) = state.runtime().update(|runtime, next| {
        runtime.overrides.insert(
            (alloc_id.clone(), task.clone()),
            ScheduleOverride {
                alloc_id: alloc_id.clone(),
                task: task.clone(),
                schedule_state: wanted,
                index: next,
            },
        );
    });
    Ok(http_kit::Json(IndexAnswer { index }))
}

/// `GET /v1/client/allocation/:alloc_id/pause?task=`.
pub(crate) async fn read(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<http_kit::Json<StateAnswer>, Error> {
    let namespace = alloc_namespace(&state, &alloc_id)?;
    authz.allow_namespace(&namespace, Capability::ReadJob)?;
    let task = query.get("task").unwrap_or_default().to_owned();
    check_task(&state, &alloc_id, &task)?;
    let (schedule_state, _) = state.runtime().read(|runtime| {
        if let Some(pending) = runtime.overrides.get(&(alloc_id.clone(), task.clone())) {
            return match pending.schedule_state.as_str() {
                "pause" => "force_pause",
                "run" => "force_run",
                _ => "schedule_resume",
            }
            .to_owned();
        }
        runtime
            .reports
            .values()
            .find_map(|report| report.schedules.get(&alloc_id)?.get(&task).cloned())
            .unwrap_or_default()
    });
    Ok(http_kit::Json(StateAnswer { schedule_state }))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct OverridesAnswer {
    overrides: Vec<ScheduleOverride>,
    index: u64,
}

/// `GET /v1/internal/node/:node_id/overrides?index=&wait=` (blocking): the pending overrides
/// of the node's allocations.
pub(crate) async fn for_node(
    State(state): State<crate::State>,
    headers: HeaderMap,
    Path(node_id): Path<String>,
    query: QueryParams,
) -> Result<http_kit::Json<OverridesAnswer>, Error> {
    crate::services::authenticate(&state, &headers, &node_id)?;
    let runtime = std::sync::Arc::clone(state.runtime_arc());
    let store = state.clone();
    let (overrides, index) = http_kit::blocking::block_watch(
        runtime.subscribe(),
        &query.blocking()?,
        Some(state.shutdown_token()),
        |_| {
            let snapshot = store.store().snapshot();
            Ok::<_, Error>(runtime.read(|runtime| {
                runtime
                    .overrides
                    .values()
                    .filter(|wanted| {
                        snapshot
                            .alloc(&wanted.alloc_id)
                            .is_some_and(|alloc| alloc.node_id == node_id)
                    })
                    .cloned()
                    .collect::<Vec<_>>()
            }))
        },
    )
    .await?;
    Ok(http_kit::Json(OverridesAnswer { overrides, index }))
}
