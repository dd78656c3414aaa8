//! `/v1/jobs` and `/v1/job/:job_id/*`: register (with validation), list, parse, read,
//! deregister, submissions, versions and diffs, allocations, evaluations and summaries.
//!
//! Where it sits: handlers are thin: reads run on a snapshot inside `blocking::block_on`
//! and render through `render.rs` (status, summary, stubs, computed on every read); register
//! reads the body straight into its request type (the `Value` detour only for bodies that do
//! not decode, so error texts stay), turns the job into a canonical `structs::Job`
//! (`jobspec::canonicalize_for_register`, the server-side defaults, strict deserialization),
//! validates it (`validate.rs`) and sends `Command::RegisterJob` to the state writer.
//!
//! Invariants:
//! - A rejected register changes nothing: every check (JSON, fields, validation, ACL,
//!   namespace) runs before the command is sent, and the writer rolls back a failed command.
//! - Client errors are 4xx with Nomad's plain-text wording; an `EnforceIndex` conflict is a
//!   400 (upstream answers 500; python-nomad and the Go API treat it as a client error).
//! - The job namespace is `?namespace=`, else the body's `Namespace`, else the job's, else
//!   `default`, as upstream decides it.

mod render;
mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use http_kit::RawBody;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::allocations::{AllocListStub, StubFields, alloc_stub};
use crate::blocking::block_on;
use crate::diff::JobDiff;
use crate::meta::{self, Indexed, QueryParams};
use crate::state::{Command, DeregisterJob, Outcome, RegisterJob, Snapshot};
use crate::structs::{
    DEFAULT_NAMESPACE, DEFAULT_NODE_POOL, Evaluation, Job, JobKey, JobSubmission, JobSummary,
};

use render::{JOB_MAP_FIELDS, job_read_index, job_stub, job_summary, job_with_status};
pub(crate) use render::{JobListStub, eval_facts, job_status};

/// Submitted sources larger than this are dropped with a warning (Nomad's
/// `job_max_source_size`, 1 MB).
const MAX_SOURCE_SIZE: usize = 1024 * 1024;

/// The answer to a register or deregister (Nomad's `JobRegisterResponse` /
/// `JobDeregisterResponse`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct JobWriteResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    job_modify_index: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<String>,
    index: u64,
    last_contact: u64,
    known_leader: bool,
    next_token: String,
}

fn write_response(
    index: u64,
    outcome: Outcome,
    warnings: Option<String>,
) -> Indexed<JobWriteResponse> {
    let (eval_id, eval_create_index, job_modify_index, outcome_warnings) = match outcome {
        Outcome::Job {
            eval_id,
            eval_create_index,
            job_modify_index,
            warnings,
        } => (eval_id, eval_create_index, job_modify_index, warnings),
        _ => (String::new(), 0, 0, String::new()),
    };
    let warnings = warnings.map(|extra| {
        [outcome_warnings.as_str(), extra.as_str()]
            .iter()
            .filter(|text| !text.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    });
    meta::written(
        index,
        JobWriteResponse {
            eval_id,
            eval_create_index,
            job_modify_index,
            warnings,
            index,
            last_contact: 0,
            known_leader: true,
            next_token: String::new(),
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Register

/// The register body (Nomad's `api.JobRegisterRequest`); the job stays JSON until it is
/// canonicalized.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RegisterRequest {
    job: Option<Value>,
    submission: Option<Value>,
    enforce_index: Option<bool>,
    job_modify_index: Option<u64>,
    eval_priority: Option<i64>,
    policy_override: Option<bool>,
    preserve_counts: Option<bool>,
    preserve_resources: Option<bool>,
    region: Option<String>,
    namespace: Option<String>,
}

/// `POST|PUT /v1/jobs`.
pub(crate) async fn register(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Indexed<JobWriteResponse>, Error> {
    register_job(&authz, &state, &query, None, &bytes).await
}

/// `POST|PUT /v1/job/:job_id`.
pub(crate) async fn register_at(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Indexed<JobWriteResponse>, Error> {
    register_job(&authz, &state, &query, Some(&job_id), &bytes).await
}

async fn register_job(
    authz: &Authz,
    state: &crate::State,
    query: &QueryParams,
    path_id: Option<&str>,
    bytes: &[u8],
) -> Result<Indexed<JobWriteResponse>, Error> {
    let request = register_request(bytes)?;
    let Some(mut job_value) = request.job.filter(|job| !job.is_null()) else {
        return Err(Error::BadRequest("Job must be specified".to_owned()));
    };
    if !job_value.is_object() {
        return Err(Error::BadRequest(
            "failed to parse JSON input: Job must be a JSON object".to_owned(),
        ));
    }
    let job_id = match job_value.get("ID") {
        Some(Value::String(id)) => id.clone(),
        None | Some(Value::Null) => {
            return Err(Error::BadRequest("Job ID hasn't been provided".to_owned()));
        }
        Some(_) => {
            return Err(Error::BadRequest(
                "failed to parse JSON input: Job.ID must be a string".to_owned(),
            ));
        }
    };
    if path_id.is_some_and(|path_id| path_id != job_id) {
        return Err(Error::BadRequest("Job ID does not match name".to_owned()));
    }
    let eval_priority = request.eval_priority.unwrap_or(0);
    if let Some(message) = validate::eval_priority_error(eval_priority) {
        return Err(Error::BadRequest(message));
    }
    let namespace = register_namespace(query, request.namespace.as_deref(), &job_value);
    authz.allow_namespace(&namespace, Capability::SubmitJob)?;
    if request.policy_override == Some(true) {
        authz.allow_namespace(&namespace, Capability::PolicyOverride)?;
    }
    let region = register_region(
        query,
        request.region.as_deref(),
        &job_value,
        &state.config().region,
    );
    let job = canonical_job(&mut job_value, &namespace, &region)?;
    let errors = validate::validate(&job);
    if !errors.is_empty() {
        return Err(Error::BadRequest(crate::error::multierror(&errors)));
    }
    if !crate::namespaces::exists(state, &namespace).await? {
        return Err(Error::BadRequest(format!(
            "namespace {namespace:?} not found"
        )));
    }
    let (submission, warning) = submission_record(request.submission)?;
    let _ = request.preserve_resources;
    let command = Command::RegisterJob(Box::new(RegisterJob {
        job,
        submission,
        enforce_index: (request.enforce_index == Some(true))
            .then(|| request.job_modify_index.unwrap_or(0)),
        preserve_counts: request.preserve_counts == Some(true),
        eval_priority: (eval_priority != 0).then_some(eval_priority),
    }));
    let applied = state
        .store()
        .apply(command)
        .await
        .map_err(conflict_is_bad_request)?;
    Ok(write_response(
        applied.index,
        applied.outcome,
        Some(warning),
    ))
}

/// The register body. A well-formed body is deserialized straight from the bytes; anything
/// else (empty, `null`, malformed, duplicate or mistyped members) takes the `Value` detour,
/// which decides the outcome and the error text. Both feed the same visitor the same data, so
/// a body the direct path accepts gives the request the detour would.
fn register_request(bytes: &[u8]) -> Result<RegisterRequest, Error> {
    if let Ok(request) = serde_json::from_slice::<RegisterRequest>(bytes) {
        return Ok(request);
    }
    match meta::json_body(bytes)? {
        Value::Null => Ok(RegisterRequest::default()),
        body => serde_json::from_value(body)
            .map_err(|err| Error::BadRequest(format!("failed to parse JSON input: {err}"))),
    }
}

/// Upstream answers an `EnforceIndex` mismatch with a 500; it is the caller's mistake, so 400.
fn conflict_is_bad_request(err: Error) -> Error {
    match err {
        Error::Conflict(message) => Error::BadRequest(message),
        other => other,
    }
}

/// Nomad's `namespaceForJob`: the query parameter, the body's `Namespace`, the job's, then
/// `default`.
fn register_namespace(query: &QueryParams, body: Option<&str>, job: &Value) -> String {
    query
        .get("namespace")
        .filter(|ns| !ns.is_empty())
        .or(body.filter(|ns| !ns.is_empty()))
        .or(job
            .get("Namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty()))
        .unwrap_or(DEFAULT_NAMESPACE)
        .to_owned()
}

/// Nomad's `regionForJob` (without multiregion): the query parameter, the body's `Region`,
/// the job's, then the server's; `global` means the server's region.
fn register_region(query: &QueryParams, body: Option<&str>, job: &Value, server: &str) -> String {
    let region = query
        .get("region")
        .filter(|r| !r.is_empty())
        .or(body.filter(|r| !r.is_empty()))
        .or(job
            .get("Region")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty()));
    match region {
        None | Some("global") => server.to_owned(),
        Some(region) => region.to_owned(),
    }
}

/// Canonicalizes the submitted job (every default filled), applies the server-side defaults
/// Nomad sets at register, and deserializes it strictly (an unknown field is a 400).
///
/// `canonicalize_for_register` leaves out the job-level zero-valued defaults the typed `Job`
/// takes anyway (and the namespace, region and pool set here), so the `Job` is the one the
/// full `canonicalize` gives. It inserts no `null` into the null-free input, so no second
/// `strip_nulls` is needed. The test `register_canonicalization_matches_the_full_pass`
/// holds both to that.
fn canonical_job(job_value: &mut Value, namespace: &str, region: &str) -> Result<Job, Error> {
    strip_nulls(job_value);
    crate::jobspec::canonicalize_for_register(job_value);
    server_defaults(job_value, namespace, region);
    serde_json::from_value(job_value.take())
        .map_err(|err| Error::BadRequest(format!("failed to decode job: {err}")))
}

/// The server-side defaults Nomad sets at register: the request's namespace and region, `*`
/// for no datacenters, the default pool, and the ID as the name.
fn server_defaults(job_value: &mut Value, namespace: &str, region: &str) {
    if let Some(object) = job_value.as_object_mut() {
        object.insert("Namespace".to_owned(), Value::from(namespace));
        object.insert("Region".to_owned(), Value::from(region));
        let no_datacenters = object
            .get("Datacenters")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if no_datacenters {
            object.insert("Datacenters".to_owned(), Value::from(vec!["*"]));
        }
        let no_pool = object
            .get("NodePool")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if no_pool {
            object.insert("NodePool".to_owned(), Value::from(DEFAULT_NODE_POOL));
        }
        let no_name = object
            .get("Name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if no_name && let Some(id) = object.get("ID").cloned() {
            object.insert("Name".to_owned(), id);
        }
    }
}

/// Removes `null` members of every object, so an explicit `null` reads as "unset" (Go decodes
/// `null` into a zero value; serde would reject it for lists and numbers).
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(object) => {
            object.retain(|_, member| !member.is_null());
            for member in object.values_mut() {
                strip_nulls(member);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The submission record to keep, and the warning when it is too large to keep.
fn submission_record(raw: Option<Value>) -> Result<(Option<JobSubmission>, String), Error> {
    let Some(mut raw) = raw.filter(|raw| !raw.is_null()) else {
        return Ok((None, String::new()));
    };
    strip_nulls(&mut raw);
    let mut submission: JobSubmission = serde_json::from_value(raw)
        .map_err(|err| Error::BadRequest(format!("failed to decode job submission: {err}")))?;
    if submission.format.is_empty() {
        submission.format = "hcl2".to_owned();
    }
    let size = submission.source.len()
        + submission.variables.len()
        + submission
            .variable_flags
            .iter()
            .map(|(key, value)| key.len() + value.len())
            .sum::<usize>();
    if size > MAX_SOURCE_SIZE {
        return Ok((
            None,
            format!(
                "job source size of {size} exceeds maximum of {MAX_SOURCE_SIZE} and will be discarded"
            ),
        ));
    }
    Ok((Some(submission), String::new()))
}

// ---------------------------------------------------------------------------------------------
// List and read

/// One page of the job list from one snapshot.
fn list_jobs<'a>(
    snapshot: &'a Snapshot,
    namespace: &str,
    prefix: &str,
    paging: &meta::Paging,
    filter: Option<&crate::filter::Filter>,
    with_meta: bool,
    allowed: &dyn Fn(&str) -> bool,
) -> Result<meta::Page<JobListStub>, Error> {
    let facts = eval_facts(snapshot, None);
    let candidates = snapshot.jobs.iter().filter(|(_, job)| {
        (namespace == "*" || job.namespace == namespace) && job.id.starts_with(prefix)
    });
    // Each job with its status, computed once; the job is not copied (only a filter, which
    // reads the job as the API shows it, gets a copy with the status set).
    let with_status = |(key, job): (&'a JobKey, &'a Arc<Job>)| {
        let status = job_status(job, snapshot.allocs_of_job(key), facts.get(key));
        (key, &**job, status)
    };
    let ordered: Vec<(&JobKey, &Job, &str)> = if paging.reverse {
        candidates.rev().map(with_status).collect()
    } else {
        candidates.map(with_status).collect()
    };
    meta::paginate(
        ordered,
        paging,
        |(_, job, _), target| meta::namespace_id_token(&job.namespace, &job.id, target),
        |(_, job, status)| {
            if !allowed(&job.namespace) {
                return Ok(false);
            }
            meta::passes(
                filter,
                || {
                    let mut shown = (*job).clone();
                    (*status).clone_into(&mut shown.status);
                    serde_json::to_value(&shown).unwrap_or(Value::Null)
                },
                JOB_MAP_FIELDS,
            )
        },
        |(key, job, status)| {
            let summary = job_summary(snapshot, job, facts.get(key));
            job_stub(job, status, summary, with_meta)
        },
    )
}

/// `GET /v1/jobs` (`prefix`, `namespace` including `*`, `meta`, `filter`, paging, `reverse`).
pub(crate) async fn list(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Indexed<Vec<JobListStub>>, Error> {
    let namespace = query.namespace();
    if namespace != "*" {
        authz.allow_namespace(namespace, Capability::ListJobs)?;
    }
    let prefix = query.prefix();
    let paging = query.paging()?;
    let filter = query.filter()?;
    let with_meta = query.flag("meta", false)?;
    let allowed = |ns: &str| authz.allows_namespace(ns, Capability::ListJobs);
    let ((items, next_token), index) = block_on(&state, &query.blocking()?, |snapshot| {
        let page = list_jobs(
            snapshot,
            namespace,
            prefix,
            &paging,
            filter.as_ref(),
            with_meta,
            &allowed,
        )?;
        let tables = snapshot.tables;
        Ok((
            (page.items, page.next_token),
            tables.jobs.max(tables.allocs).max(tables.evals),
        ))
    })
    .await?;
    Ok(Indexed::new(index, items).next_token(next_token))
}

fn job_not_found() -> Error {
    Error::NotFound("job not found".to_owned())
}

/// `GET /v1/job/:job_id`.
pub(crate) async fn read(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Job>, Error> {
    let namespace = query.namespace();
    authz.allow_namespace(namespace, Capability::ReadJob)?;
    let key = JobKey::new(namespace, &job_id);
    let (job, index) = block_on(&state, &query.blocking()?, |snapshot| {
        Ok(match snapshot.jobs.get(&key) {
            Some(job) => {
                let facts = eval_facts(snapshot, Some(&key));
                let facts = facts.get(&key);
                (
                    Some(job_with_status(snapshot, job, facts)),
                    job_read_index(snapshot, job, facts),
                )
            }
            None => (None, snapshot.tables.jobs),
        })
    })
    .await?;
    Ok(Indexed::new(index, job.ok_or_else(job_not_found)?))
}

/// `DELETE /v1/job/:job_id` (`purge`, `eval_priority`; `global` and `no_shutdown_delay` are
/// accepted).
pub(crate) async fn deregister(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<JobWriteResponse>, Error> {
    let namespace = query.namespace().to_owned();
    let purge = query.flag("purge", false)?;
    query.flag("global", false)?;
    query.flag("no_shutdown_delay", false)?;
    let eval_priority = match query.get("eval_priority") {
        None | Some("") => 0,
        Some(raw) => raw.parse::<i64>().map_err(|_| {
            Error::BadRequest(format!(
                "Failed to parse value of \"eval_priority\" ({raw}) as a int: strconv.Atoi: parsing {raw:?}: invalid syntax"
            ))
        })?,
    };
    if eval_priority > 0
        && let Some(message) = validate::eval_priority_error(eval_priority)
    {
        return Err(Error::BadRequest(message));
    }
    authz.allow_namespace(&namespace, Capability::SubmitJob)?;
    let command = Command::DeregisterJob(DeregisterJob {
        namespace,
        job_id,
        purge,
        eval_priority: (eval_priority > 0).then_some(eval_priority),
    });
    match state.store().apply(command).await {
        Ok(applied) => Ok(write_response(applied.index, applied.outcome, None)),
        // Upstream answers a deregister of an unknown job with an empty success.
        Err(Error::NotFound(_)) => Ok(write_response(
            state.store().snapshot().index,
            Outcome::Done,
            None,
        )),
        Err(err) => Err(err),
    }
}

/// `GET /v1/job/:job_id/submission?version=N`.
pub(crate) async fn submission(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<JobSubmission>, Error> {
    let version = query
        .get("version")
        .and_then(|raw| raw.parse::<u64>().ok())
        .ok_or_else(|| {
            Error::BadRequest("Unable to parse job submission version parameter".to_owned())
        })?;
    let namespace = query.namespace();
    authz.allow_namespace(namespace, Capability::ReadJob)?;
    let key = JobKey::new(namespace, &job_id);
    let (found, index) = block_on(&state, &query.blocking()?, |snapshot| {
        Ok((
            snapshot
                .submissions
                .get(&(key.clone(), version))
                .map(|s| (**s).clone()),
            snapshot.tables.jobs,
        ))
    })
    .await?;
    let mut found = found.ok_or_else(|| Error::NotFound("job source not found".to_owned()))?;
    for value in found.variable_flags.values_mut() {
        *value = query_unescape(value);
    }
    Ok(Indexed::new(index, found))
}

/// Go's `url.QueryUnescape`, keeping the input when it is not valid escaping.
fn query_unescape(raw: &str) -> String {
    let pair = format!("v={}", raw.replace('&', "%26").replace('=', "%3D"));
    serde_urlencoded::from_str::<Vec<(String, String)>>(&pair)
        .ok()
        .and_then(|mut pairs| pairs.pop())
        .map_or_else(|| raw.to_owned(), |(_, value)| value)
}

/// `GET /v1/job/:job_id/versions` answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct JobVersionsResponse {
    versions: Vec<Job>,
    diffs: Option<Vec<JobDiff>>,
    index: u64,
    last_contact: u64,
    known_leader: bool,
    next_token: String,
}

/// The structured diffs between versions (newest first): each version against the one before
/// it, or every version against `compare` when given.
fn version_diffs(versions: &[Job], compare: Option<u64>) -> Result<Option<Vec<JobDiff>>, Error> {
    let values: Vec<Value> = versions
        .iter()
        .map(|job| serde_json::to_value(job).unwrap_or(Value::Null))
        .collect();
    let mut diffs = Vec::new();
    match compare {
        Some(wanted) => {
            let position = versions
                .iter()
                .position(|job| job.version == wanted)
                .ok_or_else(|| Error::BadRequest(format!("version {wanted} not found")))?;
            for new in &values {
                diffs.push(crate::diff::job_diff(&values[position], new, true));
            }
        }
        None => {
            for pair in values.windows(2) {
                diffs.push(crate::diff::job_diff(&pair[1], &pair[0], true));
            }
        }
    }
    Ok((!diffs.is_empty()).then_some(diffs))
}

/// `GET /v1/job/:job_id/versions` (`diffs`, `diff_version`).
pub(crate) async fn versions(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<JobVersionsResponse>, Error> {
    let diffs = query.flag("diffs", false)?;
    let compare = match query.get("diff_version") {
        None | Some("") => None,
        Some(raw) => Some(raw.parse::<u64>().map_err(|_| {
            Error::BadRequest(format!(
                "Failed to parse value of \"diff_version\" ({raw}) as a uint64: strconv.ParseUint: parsing {raw:?}: invalid syntax"
            ))
        })?),
    };
    let namespace = query.namespace();
    authz.allow_namespace(namespace, Capability::ReadJob)?;
    let key = JobKey::new(namespace, &job_id);
    let (versions, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let stored = snapshot.job_versions_of(&key);
        let index = stored
            .iter()
            .map(|job| job.modify_index)
            .max()
            .unwrap_or(snapshot.tables.jobs);
        let facts = eval_facts(snapshot, Some(&key));
        let versions: Vec<Job> = stored
            .iter()
            .map(|job| job_with_status(snapshot, job, facts.get(&key)))
            .collect();
        Ok((versions, index))
    })
    .await?;
    if versions.is_empty() {
        return Err(Error::NotFound("job versions not found".to_owned()));
    }
    let diffs = if diffs {
        version_diffs(&versions, compare)?
    } else {
        None
    };
    Ok(Indexed::new(
        index,
        JobVersionsResponse {
            versions,
            diffs,
            index,
            last_contact: 0,
            known_leader: true,
            next_token: String::new(),
        },
    ))
}

/// `GET /v1/job/:job_id/allocations` (`all`: also allocations of an earlier job with the
/// same ID).
pub(crate) async fn allocations(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<AllocListStub>>, Error> {
    let all = meta::lenient_bool(query.get("all"));
    let fields = StubFields::from_query(&query)?;
    let namespace = query.namespace();
    authz.allow_namespace(namespace, Capability::ReadJob)?;
    let key = JobKey::new(namespace, &job_id);
    let (stubs, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let current = snapshot.jobs.get(&key);
        let mut index = 0;
        let stubs: Vec<AllocListStub> = snapshot
            .allocs_of_job(&key)
            .filter(|alloc| {
                all || current.is_none_or(|job| render::current_registration(job, alloc))
            })
            .map(|alloc| {
                index = index.max(alloc.modify_index);
                alloc_stub(alloc, fields)
            })
            .collect();
        Ok((
            stubs,
            if index == 0 {
                snapshot.tables.allocs
            } else {
                index
            },
        ))
    })
    .await?;
    Ok(Indexed::new(index, stubs))
}

/// `GET /v1/job/:job_id/evaluations`.
pub(crate) async fn evaluations(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Evaluation>>, Error> {
    let namespace = query.namespace();
    authz.allow_namespace(namespace, Capability::ReadJob)?;
    let (evals, index) = block_on(&state, &query.blocking()?, |snapshot| {
        let mut evals: Vec<Evaluation> = snapshot
            .evals_of_job(&JobKey::new(namespace, &job_id))
            .map(|eval| (**eval).clone())
            .collect();
        evals.sort_by(|a, b| {
            a.create_index
                .cmp(&b.create_index)
                .then_with(|| a.id.cmp(&b.id))
        });
        let index = evals
            .iter()
            .map(|eval| eval.modify_index)
            .max()
            .unwrap_or(snapshot.tables.evals);
        Ok((evals, index))
    })
    .await?;
    Ok(Indexed::new(index, evals))
}

/// `GET /v1/job/:job_id/summary`.
pub(crate) async fn summary(
    authz: Authz,
    State(state): State<crate::State>,
    Path(job_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<JobSummary>, Error> {
    let namespace = query.namespace();
    authz.allow_namespace(namespace, Capability::ReadJob)?;
    let key = JobKey::new(namespace, &job_id);
    let (summary, index) = block_on(&state, &query.blocking()?, |snapshot| {
        Ok(match snapshot.jobs.get(&key) {
            Some(job) => {
                let facts = eval_facts(snapshot, Some(&key));
                let summary = job_summary(snapshot, job, facts.get(&key));
                let index = summary.modify_index;
                (Some(summary), index)
            }
            None => (None, snapshot.tables.jobs),
        })
    })
    .await?;
    Ok(Indexed::new(index, summary.ok_or_else(job_not_found)?))
}

// ---------------------------------------------------------------------------------------------
// Parse

/// `POST|PUT /v1/jobs/parse` body (Nomad's `api.JobsParseRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ParseRequest {
    #[serde(rename = "JobHCL")]
    job_hcl: Option<String>,
    canonicalize: Option<bool>,
    variables: Option<String>,
}

/// `POST|PUT /v1/jobs/parse`: HCL2 in, the bare job JSON out.
pub(crate) async fn parse(
    authz: Authz,
    query: QueryParams,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<http_kit::Json<Value>, Error> {
    let namespace = query.namespace();
    if !(authz.allows_namespace(namespace, Capability::ParseJob)
        || authz.allows_namespace(namespace, Capability::SubmitJob))
    {
        return Err(Error::PermissionDenied);
    }
    let request: ParseRequest = match meta::json_body(&bytes)? {
        Value::Null => ParseRequest::default(),
        body => serde_json::from_value(body)
            .map_err(|err| Error::BadRequest(format!("failed to parse JSON input: {err}")))?,
    };
    let hcl = request.job_hcl.unwrap_or_default();
    if hcl.is_empty() {
        return Err(Error::BadRequest("Job spec is empty".to_owned()));
    }
    let variables = request.variables.unwrap_or_default();
    let mut job = crate::jobspec::parse(&hcl, &variables, &BTreeMap::new())
        .map_err(|err| Error::BadRequest(format!("Failed to parse job: {err}")))?;
    if request.canonicalize == Some(true) {
        crate::jobspec::canonicalize(&mut job);
    }
    Ok(http_kit::Json(job))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(raw: &str) -> QueryParams {
        QueryParams::from_pairs(serde_urlencoded::from_str(raw).unwrap_or_default())
    }

    #[test]
    fn namespace_precedence_is_query_then_body_then_job() {
        let job = serde_json::json!({"Namespace": "from-job"});
        assert_eq!(
            register_namespace(&query("namespace=q"), Some("b"), &job),
            "q"
        );
        assert_eq!(register_namespace(&query(""), Some("b"), &job), "b");
        assert_eq!(register_namespace(&query(""), None, &job), "from-job");
        assert_eq!(
            register_namespace(&query(""), None, &serde_json::json!({})),
            "default"
        );
    }

    #[test]
    fn region_global_means_the_server_region() {
        let job = serde_json::json!({"Region": "global"});
        assert_eq!(register_region(&query(""), None, &job, "eu"), "eu");
        assert_eq!(register_region(&query("region=us"), None, &job, "eu"), "us");
    }

    #[test]
    fn strip_nulls_removes_null_members_deeply() {
        let mut value = serde_json::json!({"A": null, "B": [{"C": null, "D": 1}]});
        strip_nulls(&mut value);
        assert_eq!(value, serde_json::json!({"B": [{"D": 1}]}));
    }

    #[test]
    fn oversized_submission_is_dropped_with_a_warning() {
        let raw = serde_json::json!({"Source": "x".repeat(MAX_SOURCE_SIZE + 1)});
        let (kept, warning) = submission_record(Some(raw)).unwrap_or((None, String::new()));
        assert!(kept.is_none());
        assert!(warning.contains("exceeds maximum"));
        let (kept, warning) = submission_record(Some(serde_json::json!({"Source": "job {}"})))
            .unwrap_or((None, String::new()));
        assert_eq!(kept.map(|s| s.format), Some("hcl2".to_owned()));
        assert!(warning.is_empty());
    }

    /// Registration's canonicalization before it was made sparse: the full `canonicalize`
    /// between two `strip_nulls`, then the same server defaults.
    fn full_pass_job(mut job_value: Value, namespace: &str, region: &str) -> Result<Job, String> {
        strip_nulls(&mut job_value);
        crate::jobspec::canonicalize(&mut job_value);
        strip_nulls(&mut job_value);
        server_defaults(&mut job_value, namespace, region);
        serde_json::from_value(job_value).map_err(|err| format!("failed to decode job: {err}"))
    }

    fn hcl_job(hcl: &str, vars: &str, flags: &[(&str, &str)]) -> Value {
        let flags: BTreeMap<String, String> = flags
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        match crate::jobspec::parse(hcl, vars, &flags) {
            Ok(job) => job,
            Err(err) => panic!("fixture does not parse: {err}"),
        }
    }

    #[test]
    fn register_canonicalization_matches_the_full_pass() {
        let testdata = [
            hcl_job(
                include_str!("../../../scheduler-jobspec/testdata/service.nomad.hcl"),
                include_str!("../../../scheduler-jobspec/testdata/service.vars.hcl"),
                &[("count", "3")],
            ),
            hcl_job(
                include_str!("../../../scheduler-jobspec/testdata/batch-periodic.nomad.hcl"),
                "",
                &[],
            ),
            hcl_job(
                include_str!("../../../scheduler-jobspec/testdata/parameterized.nomad.hcl"),
                "",
                &[],
            ),
            hcl_job(
                include_str!("../../../scheduler-jobspec/testdata/constraints.nomad.hcl"),
                "",
                &[],
            ),
            hcl_job(
                include_str!("../../../scheduler-jobspec/testdata/connect.nomad.hcl"),
                "",
                &[],
            ),
            hcl_job(
                include_str!("../../../scheduler-jobspec/testdata/system.nomad.hcl"),
                "",
                &[],
            ),
        ];
        let json = [
            // The job nodesim registers.
            serde_json::json!({
                "ID": "sim-1", "Name": "sim-1", "Type": "service", "Datacenters": ["dc1"],
                "Constraints": [{"LTarget": "${attr.unique.hostname}", "RTarget": "^sim-",
                                 "Operand": "regexp"}],
                "TaskGroups": [{"Name": "app", "Count": 2, "Tasks": [{
                    "Name": "app", "Driver": "raw_exec",
                    "Config": {"command": "/bin/sleep", "args": ["3600"]},
                    "Resources": {"CPU": 100, "MemoryMB": 64}}]}]
            }),
            // Minimal, with nulls, no name.
            serde_json::json!({"ID": "min", "Name": null, "Constraints": null, "TaskGroups": [
                {"Name": "g", "Count": null, "Tasks": [{"Name": "t", "Driver": "docker",
                 "Resources": null, "LogConfig": null}]}]}),
            // Every skipped job-level member set, explicitly and to non-zero values.
            serde_json::json!({
                "ID": "set", "ParentID": "p", "Namespace": "ns", "Region": "r", "NodePool": "",
                "Priority": 0, "Stop": true, "AllAtOnce": true, "ConsulNamespace": "cns",
                "VaultNamespace": "vns", "NomadTokenID": "tok", "Status": "running",
                "StatusDescription": "d", "Stable": true, "Version": 7, "CreateIndex": 3,
                "ModifyIndex": 4, "JobModifyIndex": 5, "Type": "batch",
                "Reschedule": {"Attempts": 3}, "Migrate": {"MaxParallel": 2},
                "Update": {"MaxParallel": 0},
                "TaskGroups": [{"Name": "g", "Consul": {}, "Tasks": [{"Name": "t",
                    "Driver": "exec", "Consul": {}}]}]
            }),
            // A group `consul` block with the job's consul namespace left unset.
            serde_json::json!({"ID": "consul", "TaskGroups": [{"Name": "g", "Consul": {},
                "Tasks": [{"Name": "t", "Driver": "exec"}]}]}),
            serde_json::json!({"ID": "consul-ns", "ConsulNamespace": "",
                "TaskGroups": [{"Name": "g", "Consul": {"Namespace": "own"}}]}),
            // Other types and job-level policies merged into groups.
            serde_json::json!({"ID": "sys", "Type": "system", "Update": {"Stagger": 1},
                "TaskGroups": [{"Name": "g", "Update": {"MaxParallel": 3}}]}),
            serde_json::json!({"ID": "sb", "Type": "sysbatch",
                "Reschedule": {"Attempts": 1}, "TaskGroups": [{"Name": "g",
                "ReschedulePolicy": {"Delay": 5}, "Migrate": {"HealthCheck": "task_states"}}]}),
            serde_json::json!({"ID": "svc", "Migrate": {"MaxParallel": 4},
                "TaskGroups": [{"Name": "a"}, {"Name": "b", "Migrate": {"MinHealthyTime": 1}}]}),
            // Wrongly typed members: the same error either way.
            serde_json::json!({"ID": "bad", "Stop": "yes"}),
            serde_json::json!({"ID": "bad", "Version": -1}),
            serde_json::json!({"ID": "bad", "ParentID": 5}),
            serde_json::json!({"ID": "bad", "NodePool": 5, "Status": []}),
            serde_json::json!({"ID": "bad", "ConsulNamespace": 5,
                "TaskGroups": [{"Name": "g", "Consul": {}}]}),
            serde_json::json!({"ID": "bad", "Bogus": 1}),
            serde_json::json!({"ID": "bad", "TaskGroups": [{"Name": "g", "Count": "x"}]}),
        ];
        for job in testdata.into_iter().chain(json) {
            let mut sparse = job.clone();
            let new = canonical_job(&mut sparse, "ns1", "eu").map_err(|err| format!("{err}"));
            let old = full_pass_job(job.clone(), "ns1", "eu");
            assert_eq!(new, old, "job {job}");
        }
    }

    #[test]
    fn register_body_read_directly_matches_the_value_detour() {
        let detour = |bytes: &[u8]| -> String {
            let request = match meta::json_body(bytes) {
                Err(err) => Err(err),
                Ok(Value::Null) => Ok(RegisterRequest::default()),
                Ok(body) => serde_json::from_value::<RegisterRequest>(body)
                    .map_err(|err| Error::BadRequest(format!("failed to parse JSON input: {err}"))),
            };
            format!("{request:?}")
        };
        let bodies: [&[u8]; 14] = [
            b"",
            b"  \n",
            b"null",
            b"{}",
            b"[]",
            b"{bad",
            br#"{"Job": {"ID": "a", "TaskGroups": [{"Name": "g"}]}, "EnforceIndex": true,
                "JobModifyIndex": 5, "EvalPriority": 60, "PolicyOverride": false,
                "PreserveCounts": true, "Region": "r", "Namespace": "n",
                "Submission": {"Source": "job {}"}, "Other": [1, 2]}"#,
            br#"{"Job": {"ID": "a"}, "Job": {"ID": "b"}}"#,
            br#"{"Job": {"ID": "a", "ID": "b"}}"#,
            br#"{"Job": null, "EvalPriority": null}"#,
            br#"{"Job": {"ID": "a"}, "EvalPriority": "x"}"#,
            br#"{"Job": {"ID": "a"}, "JobModifyIndex": -1}"#,
            br#"[{"ID": "a"}, null, true]"#,
            br#"{"Job": {"ID": "a"}} trailing"#,
        ];
        for body in bodies {
            assert_eq!(
                format!("{:?}", register_request(body)),
                detour(body),
                "body {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn query_unescape_decodes_percent_escapes() {
        assert_eq!(query_unescape("a%20b"), "a b");
        assert_eq!(query_unescape("plain"), "plain");
    }
}
