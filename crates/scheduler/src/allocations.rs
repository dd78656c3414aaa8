//! `/v1/allocations`, `/v1/allocation/:id` (read, stop), `/v1/evaluations`,
//! `/v1/evaluation/:id`, and the client allocation endpoints `/v1/client/allocation/:id/signal`
//! and `/restart` (exec is `exec.rs`, files and logs `client_fs.rs`).
//!
//! Signal and restart are calls to the client that runs the allocation (`client_rpc.rs`):
//! the server checks the body, the allocation and the token (`alloc-lifecycle`), and the
//! client acts on its tasks and answers; its refusals keep their status (an unknown task 404,
//! an invalid signal or a task not running 400).
//!
//! Where it sits: handlers over snapshots (reads block with `blocking::block_on`); the stop
//! goes to the state writer as `Command::StopAlloc`, which writes an `alloc-stop` evaluation
//! that makes placement stop the allocation and place its replacement. The list stub
//! ([`alloc_stub`]) is shared with the job and node endpoints.
//!
//! Invariants: lists follow Nomad's order (CreateIndex then ID; ID with `prefix`), page with
//! inclusive tokens and filter before counting; single-allocation endpoints take the full ID
//! only (a short ID is simply not found, as upstream); an allocation read carries `Job` (the
//! job version it runs, from the version table), lists never do.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use http_kit::RawBody;
use serde::Serialize;
use serde_json::Value;

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::blocking::block_on;
use crate::client_rpc;
use crate::meta::{self, Indexed, Page, QueryParams};
use crate::state::{Command, Outcome, Snapshot};
use crate::structs::{
    AllocatedResources, Allocation, DesiredTransition, Evaluation, JobKey, RescheduleTracker,
    TaskState,
};

/// The dotted paths of an allocation's JSON that are Go maps (for the filter).
pub(crate) const ALLOC_MAP_FIELDS: &[&str] = &[
    "TaskStates",
    "TaskStates.*.Events.*.Details",
    "TaskResources",
    "AllocatedResources.Tasks",
    "AllocatedResources.TaskLifecycles",
    "Metrics.NodesAvailable",
    "Metrics.ClassFiltered",
    "Metrics.ConstraintFiltered",
    "Metrics.ClassExhausted",
    "Metrics.DimensionExhausted",
    "Metrics.Scores",
    "Job.Meta",
    "Job.TaskGroups.*.Meta",
    "Job.TaskGroups.*.Volumes",
    "Job.TaskGroups.*.Tasks.*.Meta",
    "Job.TaskGroups.*.Tasks.*.Env",
    "Job.TaskGroups.*.Tasks.*.Config",
];

/// The dotted paths of an evaluation's JSON that are Go maps.
const EVAL_MAP_FIELDS: &[&str] = &[
    "FailedTGAllocs",
    "FailedTGAllocs.*.NodesAvailable",
    "FailedTGAllocs.*.ClassFiltered",
    "FailedTGAllocs.*.ConstraintFiltered",
    "FailedTGAllocs.*.ClassExhausted",
    "FailedTGAllocs.*.DimensionExhausted",
    "FailedTGAllocs.*.Scores",
    "ClassEligibility",
    "QueuedAllocations",
];

/// An allocation list entry (Nomad's `AllocListStub`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AllocListStub {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "EvalID")]
    eval_id: String,
    name: String,
    namespace: String,
    #[serde(rename = "NodeID")]
    node_id: String,
    node_name: String,
    #[serde(rename = "JobID")]
    job_id: String,
    job_type: String,
    job_version: u64,
    task_group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    allocated_resources: Option<AllocatedResources>,
    desired_status: String,
    desired_description: String,
    client_status: String,
    client_description: String,
    desired_transition: DesiredTransition,
    task_states: Option<BTreeMap<String, TaskState>>,
    deployment_status: Option<Value>,
    #[serde(rename = "FollowupEvalID")]
    followup_eval_id: String,
    previous_allocation: String,
    next_allocation: String,
    reschedule_tracker: Option<RescheduleTracker>,
    preempted_allocations: Vec<String>,
    preempted_by_allocation: String,
    create_index: u64,
    modify_index: u64,
    create_time: i64,
    modify_time: i64,
}

/// Which optional parts a list entry carries (`?resources=`, `?task_states=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StubFields {
    pub(crate) resources: bool,
    pub(crate) task_states: bool,
}

impl Default for StubFields {
    fn default() -> StubFields {
        StubFields {
            resources: false,
            task_states: true,
        }
    }
}

impl StubFields {
    pub(crate) fn from_query(query: &QueryParams) -> Result<StubFields, Error> {
        Ok(StubFields {
            resources: query.flag("resources", false)?,
            task_states: query.flag("task_states", true)?,
        })
    }
}

/// The list entry of `alloc`.
pub(crate) fn alloc_stub(alloc: &Allocation, fields: StubFields) -> AllocListStub {
    AllocListStub {
        id: alloc.id.clone(),
        eval_id: alloc.eval_id.clone(),
        name: alloc.name.clone(),
        namespace: alloc.namespace.clone(),
        node_id: alloc.node_id.clone(),
        node_name: alloc.node_name.clone(),
        job_id: alloc.job_id.clone(),
        job_type: alloc.job_type.clone(),
        job_version: alloc.job_version,
        task_group: alloc.task_group.clone(),
        allocated_resources: fields.resources.then(|| alloc.allocated_resources.clone()),
        desired_status: alloc.desired_status.clone(),
        desired_description: alloc.desired_description.clone(),
        client_status: alloc.client_status.clone(),
        client_description: alloc.client_description.clone(),
        desired_transition: alloc.desired_transition.clone(),
        task_states: fields.task_states.then(|| alloc.task_states.clone()),
        deployment_status: alloc.deployment_status.clone(),
        followup_eval_id: alloc.followup_eval_id.clone(),
        previous_allocation: alloc.previous_allocation.clone(),
        next_allocation: alloc.next_allocation.clone(),
        reschedule_tracker: alloc.reschedule_tracker.clone(),
        preempted_allocations: alloc.preempted_allocations.clone(),
        preempted_by_allocation: alloc.preempted_by_allocation.clone(),
        create_index: alloc.create_index,
        modify_index: alloc.modify_index,
        create_time: alloc.create_time,
        modify_time: alloc.modify_time,
    }
}

/// An allocation with `Job` filled in (the version it runs; `null` when that version is no
/// longer retained).
pub(crate) fn with_job(snapshot: &Snapshot, alloc: &Allocation) -> Allocation {
    let mut out = alloc.clone();
    out.job = snapshot
        .job_version(
            &JobKey::new(&alloc.namespace, &alloc.job_id),
            alloc.job_version,
        )
        .map(|job| Box::new((**job).clone()));
    out
}

/// An allocation's JSON for the filter: the full object, with `Job` only when the expression
/// could look at it (serializing every job version per allocation is the costly part).
fn alloc_filter_value(snapshot: &Snapshot, alloc: &Allocation, needs_job: bool) -> Value {
    let rendered;
    let alloc = if needs_job {
        rendered = with_job(snapshot, alloc);
        &rendered
    } else {
        alloc
    };
    serde_json::to_value(alloc).unwrap_or(Value::Null)
}

/// Whether a filter expression may read `Job` (any selector starting with it).
pub(crate) fn filter_mentions_job(raw: Option<&str>) -> bool {
    raw.is_some_and(|raw| raw.contains("Job.") || raw.contains("Job[") || raw.contains("/Job"))
}

/// What `GET /v1/allocations` lists, from one snapshot.
pub(crate) struct AllocListQuery<'a> {
    pub(crate) namespace: &'a str,
    /// Lowercase, validated.
    pub(crate) prefix: String,
    pub(crate) paging: meta::Paging,
    pub(crate) filter: Option<crate::filter::Filter>,
    pub(crate) filter_needs_job: bool,
    pub(crate) fields: StubFields,
}

/// One page of allocations (pure over the snapshot; `allowed` says which namespaces the caller
/// may read).
pub(crate) fn list_allocs(
    snapshot: &Snapshot,
    query: &AllocListQuery<'_>,
    allowed: &dyn Fn(&str) -> bool,
) -> Result<Page<AllocListStub>, Error> {
    let in_namespace = |alloc: &Allocation| {
        (query.namespace == "*" || alloc.namespace == query.namespace) && allowed(&alloc.namespace)
    };
    let keep = |alloc: &&Arc<Allocation>| -> Result<bool, Error> {
        if !in_namespace(alloc) {
            return Ok(false);
        }
        meta::passes(
            query.filter.as_ref(),
            || alloc_filter_value(snapshot, alloc, query.filter_needs_job),
            ALLOC_MAP_FIELDS,
        )
    };
    let stub = |alloc: &Arc<Allocation>| alloc_stub(alloc, query.fields);
    if query.prefix.is_empty() {
        let mut ordered: Vec<&Arc<Allocation>> = snapshot.allocs.values().collect();
        ordered.sort_by(|a, b| {
            a.create_index
                .cmp(&b.create_index)
                .then_with(|| a.id.cmp(&b.id))
        });
        if query.paging.reverse {
            ordered.reverse();
        }
        meta::paginate(
            ordered,
            &query.paging,
            |alloc, target| meta::create_index_token(alloc.create_index, &alloc.id, target),
            keep,
            stub,
        )
    } else {
        let matching = snapshot
            .allocs
            .range(query.prefix.clone()..)
            .take_while(|(id, _)| id.starts_with(&query.prefix))
            .map(|(_, alloc)| alloc);
        let ordered: Vec<&Arc<Allocation>> = if query.paging.reverse {
            matching.collect::<Vec<_>>().into_iter().rev().collect()
        } else {
            matching.collect()
        };
        meta::paginate(
            ordered,
            &query.paging,
            |alloc, target| meta::id_token(&alloc.id, target),
            keep,
            stub,
        )
    }
}

/// `GET /v1/allocations`.
pub(crate) async fn list(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Indexed<Vec<AllocListStub>>, Error> {
    let namespace = query.namespace();
    if namespace != "*" {
        authz.allow_namespace(namespace, Capability::ReadJob)?;
    }
    let list_query = AllocListQuery {
        namespace,
        prefix: meta::uuid_prefix(query.prefix(), "alloc")?,
        paging: query.paging()?,
        filter: query.filter()?,
        filter_needs_job: filter_mentions_job(query.get("filter")),
        fields: StubFields::from_query(&query)?,
    };
    let allowed = |ns: &str| authz.allows_namespace(ns, Capability::ReadJob);
    let ((items, next_token), index) = block_on(&state, &query.blocking()?, |snapshot| {
        let page = list_allocs(snapshot, &list_query, &allowed)?;
        Ok(((page.items, page.next_token), snapshot.tables.allocs))
    })
    .await?;
    Ok(Indexed::new(index, items).next_token(next_token))
}

/// `GET /v1/allocation/:alloc_id`.
pub(crate) async fn read(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Allocation>, Error> {
    let (alloc, index) = block_on(&state, &query.blocking()?, |snapshot| {
        Ok(match snapshot.alloc(&alloc_id) {
            Some(alloc) => (Some(with_job(snapshot, alloc)), alloc.modify_index),
            None => (None, snapshot.tables.allocs),
        })
    })
    .await?;
    let alloc = alloc.ok_or_else(|| Error::NotFound("alloc not found".to_owned()))?;
    authz.allow_namespace(&alloc.namespace, Capability::ReadJob)?;
    Ok(Indexed::new(index, alloc))
}

/// `POST|PUT /v1/allocation/:alloc_id/stop` answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AllocStopResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    index: u64,
}

/// `POST|PUT /v1/allocation/:alloc_id/stop`.
pub(crate) async fn stop(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<AllocStopResponse>, Error> {
    let no_shutdown_delay = match query.get("no_shutdown_delay") {
        None | Some("") => false,
        Some(raw) => stdx::strconv::parse_bool(raw).ok_or_else(|| {
            Error::BadRequest(format!(
                "no_shutdown_delay value is not a boolean: strconv.ParseBool: parsing {raw:?}: invalid syntax"
            ))
        })?,
    };
    let namespace = state
        .store()
        .snapshot()
        .alloc(&alloc_id)
        .map(|alloc| alloc.namespace.clone())
        .ok_or_else(|| Error::NotFound("alloc not found".to_owned()))?;
    authz.allow_namespace(&namespace, Capability::AllocLifecycle)?;
    let applied = state
        .store()
        .apply(Command::StopAlloc {
            alloc_id,
            no_shutdown_delay,
        })
        .await?;
    let eval_id = match applied.outcome {
        Outcome::AllocStop { eval_id } => eval_id,
        _ => String::new(),
    };
    Ok(meta::written(
        applied.index,
        AllocStopResponse {
            eval_id,
            index: applied.index,
        },
    ))
}

/// The string field `name` of a client endpoint's body (`null` and absent read as empty).
fn body_str(body: &Value, name: &str) -> Result<String, Error> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(value)) => Ok(value.clone()),
        Some(other) => Err(Error::BadRequest(format!(
            "failed to parse JSON input: {name} must be a string, not {other}"
        ))),
    }
}

/// The body of a client endpoint: a JSON object, or nothing.
fn client_body(bytes: &[u8]) -> Result<Value, Error> {
    match meta::json_body(bytes)? {
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        object @ Value::Object(_) => Ok(object),
        _ => Err(Error::BadRequest(
            "failed to parse JSON input: the body must be a JSON object".to_owned(),
        )),
    }
}

/// `POST|PUT /v1/client/allocation/:alloc_id/signal` `{"Signal", "Task"}` (no task: every
/// task).
pub(crate) async fn signal(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Response, Error> {
    let body = client_body(&bytes)?;
    let signal = body_str(&body, "Signal")?;
    let task = body_str(&body, "Task")?;
    if signal.trim().is_empty() {
        return Err(Error::BadRequest(
            "invalid signal: a signal is required".to_owned(),
        ));
    }
    let alloc = client_rpc::client_alloc(&state, &alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::AllocLifecycle)?;
    let params = serde_json::json!({ "Signal": signal, "Task": task });
    client_rpc::forward(&state, &alloc, "signal", params).await
}

/// `POST|PUT /v1/client/allocation/:alloc_id/restart` `{"TaskName", "AllTasks"}` (neither:
/// the running tasks).
pub(crate) async fn restart(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Response, Error> {
    let body = client_body(&bytes)?;
    let task = body_str(&body, "TaskName")?;
    let all = match body.get("AllTasks") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(all)) => *all,
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "failed to parse JSON input: AllTasks must be a boolean, not {other}"
            )));
        }
    };
    if all && !task.is_empty() {
        return Err(Error::BadRequest(
            "task name cannot be set when restarting all tasks".to_owned(),
        ));
    }
    let alloc = client_rpc::client_alloc(&state, &alloc_id)?;
    authz.allow_namespace(&alloc.namespace, Capability::AllocLifecycle)?;
    let params = serde_json::json!({ "TaskName": task, "AllTasks": all });
    client_rpc::forward(&state, &alloc, "restart", params).await
}

/// What `GET /v1/evaluations` lists.
struct EvalListQuery<'a> {
    namespace: &'a str,
    prefix: String,
    job: Option<&'a str>,
    status: Option<&'a str>,
    paging: meta::Paging,
    filter: Option<crate::filter::Filter>,
}

fn list_evals(
    snapshot: &Snapshot,
    query: &EvalListQuery<'_>,
    allowed: &dyn Fn(&str) -> bool,
) -> Result<Page<Evaluation>, Error> {
    let keep = |eval: &&Arc<Evaluation>| -> Result<bool, Error> {
        if !((query.namespace == "*" || eval.namespace == query.namespace)
            && allowed(&eval.namespace))
        {
            return Ok(false);
        }
        if query.job.is_some_and(|job| eval.job_id != job)
            || query.status.is_some_and(|s| eval.status != s)
        {
            return Ok(false);
        }
        meta::passes(
            query.filter.as_ref(),
            || serde_json::to_value(&***eval).unwrap_or(Value::Null),
            EVAL_MAP_FIELDS,
        )
    };
    let mut ordered: Vec<&Arc<Evaluation>> = snapshot
        .evals
        .values()
        .filter(|eval| eval.id.starts_with(&query.prefix))
        .collect();
    let by_id = !query.prefix.is_empty();
    if !by_id {
        ordered.sort_by(|a, b| {
            a.create_index
                .cmp(&b.create_index)
                .then_with(|| a.id.cmp(&b.id))
        });
    }
    if query.paging.reverse {
        ordered.reverse();
    }
    meta::paginate(
        ordered,
        &query.paging,
        |eval, target| {
            if by_id {
                meta::id_token(&eval.id, target)
            } else {
                meta::create_index_token(eval.create_index, &eval.id, target)
            }
        },
        keep,
        |eval| (**eval).clone(),
    )
}

/// `GET /v1/evaluations` (`prefix`, `job`, `status`, `filter`, paging, `namespace`).
pub(crate) async fn list_evaluations(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Indexed<Vec<Evaluation>>, Error> {
    let namespace = query.namespace();
    if namespace != "*" {
        authz.allow_namespace(namespace, Capability::ReadJob)?;
    }
    let list_query = EvalListQuery {
        namespace,
        prefix: meta::uuid_prefix(query.prefix(), "eval")?,
        job: query.get("job").filter(|job| !job.is_empty()),
        status: query.get("status").filter(|status| !status.is_empty()),
        paging: query.paging()?,
        filter: query.filter()?,
    };
    let allowed = |ns: &str| authz.allows_namespace(ns, Capability::ReadJob);
    let ((items, next_token), index) = block_on(&state, &query.blocking()?, |snapshot| {
        let page = list_evals(snapshot, &list_query, &allowed)?;
        Ok(((page.items, page.next_token), snapshot.tables.evals))
    })
    .await?;
    Ok(Indexed::new(index, items).next_token(next_token))
}

/// `GET /v1/evaluation/:eval_id`.
pub(crate) async fn read_evaluation(
    authz: Authz,
    State(state): State<crate::State>,
    Path(eval_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Evaluation>, Error> {
    let (eval, index) = block_on(&state, &query.blocking()?, |snapshot| {
        Ok(match snapshot.eval(&eval_id) {
            Some(eval) => (Some((**eval).clone()), eval.modify_index),
            None => (None, snapshot.tables.evals),
        })
    })
    .await?;
    let eval = eval.ok_or_else(|| Error::NotFound("eval not found".to_owned()))?;
    authz.allow_namespace(&eval.namespace, Capability::ReadJob)?;
    Ok(Indexed::new(index, eval))
}

/// Orders allocations as the job and node endpoints return them: CreateIndex, then ID.
pub(crate) fn by_create_index(a: &Arc<Allocation>, b: &Arc<Allocation>) -> Ordering {
    a.create_index
        .cmp(&b.create_index)
        .then_with(|| a.id.cmp(&b.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: &str, namespace: &str, create_index: u64) -> Allocation {
        Allocation {
            id: id.to_owned(),
            namespace: namespace.to_owned(),
            job_id: "web".to_owned(),
            create_index,
            modify_index: create_index,
            ..Allocation::default()
        }
    }

    fn snapshot(allocs: &[Allocation]) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for alloc in allocs {
            snapshot
                .allocs
                .insert(alloc.id.clone(), Arc::new(alloc.clone()));
        }
        snapshot
    }

    fn query<'a>(
        namespace: &'a str,
        prefix: &str,
        per_page: usize,
        next_token: Option<&str>,
    ) -> AllocListQuery<'a> {
        AllocListQuery {
            namespace,
            prefix: prefix.to_owned(),
            paging: meta::Paging {
                per_page,
                next_token: next_token.map(str::to_owned),
                reverse: false,
            },
            filter: None,
            filter_needs_job: false,
            fields: StubFields::default(),
        }
    }

    fn ids(page: &Page<AllocListStub>) -> Vec<String> {
        page.items.iter().map(|stub| stub.id.clone()).collect()
    }

    #[test]
    fn allocs_list_in_create_index_order_with_inclusive_tokens() {
        let snap = snapshot(&[
            alloc("cc", "default", 2),
            alloc("aa", "default", 10),
            alloc("bb", "default", 3),
        ]);
        let all = |_: &str| true;
        let first = list_allocs(&snap, &query("default", "", 2, None), &all)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&first), vec!["cc", "bb"]);
        assert_eq!(first.next_token.as_deref(), Some("10.aa"));
        let second = list_allocs(&snap, &query("default", "", 2, Some("10.aa")), &all)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&second), vec!["aa"]);
        assert_eq!(second.next_token, None);
    }

    #[test]
    fn allocs_created_in_the_same_millisecond_list_in_creation_order() {
        // Same CreateTime, IDs sorting against creation: the CreateIndex decides.
        let mut first = alloc("bb", "default", 7);
        let mut second = alloc("aa", "default", 8);
        first.create_time = 1_700_000_000_000_000_000;
        second.create_time = first.create_time;
        let snap = snapshot(&[second, first]);
        let all = |_: &str| true;
        let page = list_allocs(&snap, &query("default", "", 0, None), &all)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&page), vec!["bb", "aa"]);
        let mut reversed = query("default", "", 0, None);
        reversed.paging.reverse = true;
        let page = list_allocs(&snap, &reversed, &all).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&page), vec!["aa", "bb"]);
    }

    #[test]
    fn evals_created_in_the_same_millisecond_list_in_creation_order() {
        let eval = |id: &str, create_index: u64| Evaluation {
            id: id.to_owned(),
            namespace: "default".to_owned(),
            job_id: "web".to_owned(),
            create_index,
            modify_index: create_index,
            create_time: 1_700_000_000_000_000_000,
            ..Evaluation::default()
        };
        let mut snap = Snapshot::default();
        for eval in [eval("bb", 7), eval("aa", 8), eval("cc", 8)] {
            snap.evals.insert(eval.id.clone(), Arc::new(eval));
        }
        let query = EvalListQuery {
            namespace: "default",
            prefix: String::new(),
            job: None,
            status: None,
            paging: meta::Paging {
                per_page: 0,
                next_token: None,
                reverse: false,
            },
            filter: None,
        };
        let page = list_evals(&snap, &query, &|_: &str| true).unwrap_or_else(|err| panic!("{err}"));
        let listed: Vec<&str> = page.items.iter().map(|eval| eval.id.as_str()).collect();
        // One batch (one CreateIndex) lists by ID, as upstream's (CreateIndex, ID) index.
        assert_eq!(listed, vec!["bb", "aa", "cc"]);
    }

    #[test]
    fn allocs_with_prefix_list_in_id_order_and_namespace_is_respected() {
        let snap = snapshot(&[
            alloc("ab02", "default", 1),
            alloc("ab01", "default", 5),
            alloc("ab03", "other", 2),
            alloc("cd", "default", 3),
        ]);
        let all = |_: &str| true;
        let page = list_allocs(&snap, &query("default", "ab", 0, None), &all)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&page), vec!["ab01", "ab02"]);
        let every = list_allocs(&snap, &query("*", "ab", 0, None), &all)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&every), vec!["ab01", "ab02", "ab03"]);
        let only_default = |ns: &str| ns == "default";
        let filtered = list_allocs(&snap, &query("*", "", 0, None), &only_default)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ids(&filtered), vec!["ab02", "cd", "ab01"]);
    }

    #[test]
    fn stub_fields_control_resources_and_task_states() {
        let alloc = alloc("aa", "default", 1);
        let lean = serde_json::to_value(alloc_stub(
            &alloc,
            StubFields {
                resources: false,
                task_states: false,
            },
        ))
        .unwrap_or_default();
        assert!(lean.get("AllocatedResources").is_none());
        assert_eq!(lean["TaskStates"], Value::Null);
        let full = serde_json::to_value(alloc_stub(
            &alloc,
            StubFields {
                resources: true,
                task_states: true,
            },
        ))
        .unwrap_or_default();
        assert!(full.get("AllocatedResources").is_some());
        assert!(full["TaskStates"].is_object());
    }

    #[test]
    fn filter_mentions_job_detects_job_selectors() {
        assert!(filter_mentions_job(Some("Job.Meta.team == \"x\"")));
        assert!(!filter_mentions_job(Some("JobID == \"web\"")));
        assert!(!filter_mentions_job(None));
    }
}
