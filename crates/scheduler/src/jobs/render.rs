//! What the job endpoints compute from a snapshot: a job's status (Nomad's `getJobStatus`),
//! its summary (allocation counts per task group), and the list stub.
//!
//! Where it sits: pure helpers over a [`Snapshot`] used by `jobs/mod.rs` (and by `nodes.rs`
//! nowhere else); the store keeps neither status nor summary, they are derived on every read so
//! they can never go stale.
//!
//! Invariants: no I/O; a job's status depends only on its allocations and evaluations in the
//! same snapshot; the summary counts only allocations of the job's current registration
//! (created at or after the job's `CreateIndex`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::state::Snapshot;
use crate::structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_CLIENT_PENDING,
    ALLOC_CLIENT_RUNNING, ALLOC_CLIENT_UNKNOWN, Allocation, EVAL_STATUS_BLOCKED, Evaluation,
    JOB_STATUS_DEAD, JOB_STATUS_PENDING, JOB_STATUS_RUNNING, JOB_TYPE_SYSTEM, Job,
    JobChildrenSummary, JobKey, JobSummary, TaskGroupSummary,
};

/// What a job's evaluations say about it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EvalFacts {
    /// Whether any evaluation of the job is still pending or blocked.
    pub(crate) active: bool,
    /// Whether the job has any evaluation at all.
    pub(crate) any: bool,
    /// The queued counts of the latest evaluation that reported them.
    pub(crate) queued: BTreeMap<String, i64>,
    queued_index: u64,
    /// The highest `ModifyIndex` among the job's evaluations.
    pub(crate) max_modify_index: u64,
}

impl EvalFacts {
    fn add(&mut self, eval: &Evaluation) {
        self.any = true;
        self.active |= !eval.terminal();
        self.max_modify_index = self.max_modify_index.max(eval.modify_index);
        let reports_queued = eval.terminal() || eval.status == EVAL_STATUS_BLOCKED;
        if reports_queued
            && !eval.queued_allocations.is_empty()
            && eval.modify_index >= self.queued_index
        {
            self.queued = eval.queued_allocations.clone();
            self.queued_index = eval.modify_index;
        }
    }
}

/// One pass over the evaluations: the facts of every job (or of `only` that job).
pub(crate) fn eval_facts(snapshot: &Snapshot, only: Option<&JobKey>) -> HashMap<JobKey, EvalFacts> {
    let mut facts: HashMap<JobKey, EvalFacts> = HashMap::new();
    if let Some(key) = only {
        for eval in snapshot.evals_of_job(key) {
            facts.entry(key.clone()).or_default().add(eval);
        }
        return facts;
    }
    for eval in snapshot.evals.values() {
        facts
            .entry(JobKey::new(&eval.namespace, &eval.job_id))
            .or_default()
            .add(eval);
    }
    facts
}

/// A job's status, as Nomad's `getJobStatus` decides it: system, periodic and parameterized
/// jobs run until stopped; otherwise a non-terminal allocation means running, a pending or
/// blocked evaluation pending, and a stopped job or one whose evaluations all finished dead.
pub(crate) fn job_status<'a>(
    job: &Job,
    allocs: impl IntoIterator<Item = &'a Arc<Allocation>>,
    evals: Option<&EvalFacts>,
) -> &'static str {
    if job.job_type == JOB_TYPE_SYSTEM
        || job.is_parameterized()
        || job.periodic.as_ref().is_some_and(|p| !p.is_null())
    {
        return if job.stop {
            JOB_STATUS_DEAD
        } else {
            JOB_STATUS_RUNNING
        };
    }
    if allocs.into_iter().any(|alloc| !alloc.terminal()) {
        return JOB_STATUS_RUNNING;
    }
    match evals {
        Some(facts) if facts.active => JOB_STATUS_PENDING,
        Some(facts) if facts.any => JOB_STATUS_DEAD,
        _ if job.stop => JOB_STATUS_DEAD,
        _ => JOB_STATUS_PENDING,
    }
}

/// A job as the API shows it: the stored job with its computed status.
pub(crate) fn job_with_status(snapshot: &Snapshot, job: &Job, evals: Option<&EvalFacts>) -> Job {
    let mut out = job.clone();
    out.status = job_status(job, snapshot.allocs_of_job(&job.key()), evals).to_owned();
    out
}

/// Whether `alloc` belongs to the job's current registration (not to an earlier job with the
/// same ID that was purged): it was created after the job was.
pub(crate) fn current_registration(job: &Job, alloc: &Allocation) -> bool {
    alloc.create_index >= job.create_index
}

/// The job's summary (Nomad's `JobSummary`), counted from its allocations.
pub(crate) fn job_summary(snapshot: &Snapshot, job: &Job, evals: Option<&EvalFacts>) -> JobSummary {
    let mut summary: BTreeMap<String, TaskGroupSummary> = job
        .task_groups
        .iter()
        .map(|group| (group.name.clone(), TaskGroupSummary::default()))
        .collect();
    let mut modify_index = job.modify_index;
    for alloc in snapshot.allocs_of_job(&job.key()) {
        if !current_registration(job, alloc) {
            continue;
        }
        modify_index = modify_index.max(alloc.modify_index);
        let group = match summary.get_mut(&alloc.task_group) {
            Some(group) => group,
            None => summary.entry(alloc.task_group.clone()).or_default(),
        };
        match alloc.client_status.as_str() {
            ALLOC_CLIENT_PENDING => group.starting += 1,
            ALLOC_CLIENT_RUNNING => group.running += 1,
            ALLOC_CLIENT_COMPLETE => group.complete += 1,
            ALLOC_CLIENT_FAILED => group.failed += 1,
            ALLOC_CLIENT_LOST => group.lost += 1,
            ALLOC_CLIENT_UNKNOWN => group.unknown += 1,
            _ => {}
        }
    }
    if let Some(facts) = evals {
        modify_index = modify_index.max(facts.queued_index);
        for (name, group) in &mut summary {
            group.queued = facts.queued.get(name).copied().unwrap_or(0).max(0);
        }
    }
    JobSummary {
        job_id: job.id.clone(),
        namespace: job.namespace.clone(),
        summary,
        children: children_summary(snapshot, job),
        create_index: job.create_index,
        modify_index,
    }
}

/// Counts of a periodic or parameterized job's children by status (one pass over the jobs
/// and one over the evaluations, only for such parents).
fn children_summary(snapshot: &Snapshot, parent: &Job) -> JobChildrenSummary {
    let mut children = JobChildrenSummary::default();
    if !(parent.is_parameterized() || parent.periodic.as_ref().is_some_and(|p| !p.is_null())) {
        return children;
    }
    let mut facts: Option<HashMap<JobKey, EvalFacts>> = None;
    for child in snapshot
        .jobs
        .values()
        .filter(|job| job.namespace == parent.namespace && job.parent_id == parent.id)
    {
        let facts = facts.get_or_insert_with(|| eval_facts(snapshot, None));
        let key = child.key();
        match job_status(child, snapshot.allocs_of_job(&key), facts.get(&key)) {
            JOB_STATUS_PENDING => children.pending += 1,
            JOB_STATUS_RUNNING => children.running += 1,
            _ => children.dead += 1,
        }
    }
    children
}

/// The index a read of one job reports: the job, its allocations or its evaluations,
/// whichever changed last (its status and summary derive from all three).
pub(crate) fn job_read_index(snapshot: &Snapshot, job: &Job, evals: Option<&EvalFacts>) -> u64 {
    let allocs = snapshot
        .allocs_of_job(&job.key())
        .map(|alloc| alloc.modify_index)
        .max()
        .unwrap_or(0);
    job.modify_index
        .max(allocs)
        .max(evals.map_or(0, |facts| facts.max_modify_index))
}

/// A job list entry (Nomad's `JobListStub`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct JobListStub {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    #[serde(rename = "ParentID")]
    pub(crate) parent_id: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) datacenters: Vec<String>,
    pub(crate) node_pool: String,
    pub(crate) multiregion: Option<Value>,
    #[serde(rename = "Type")]
    pub(crate) job_type: String,
    pub(crate) priority: i64,
    pub(crate) periodic: bool,
    pub(crate) parameterized_job: bool,
    pub(crate) stop: bool,
    pub(crate) status: String,
    pub(crate) status_description: String,
    pub(crate) job_summary: JobSummary,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
    pub(crate) job_modify_index: u64,
    pub(crate) submit_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) meta: Option<BTreeMap<String, String>>,
}

/// The list entry of `job`, with its computed `status`.
pub(crate) fn job_stub(
    job: &Job,
    status: &str,
    summary: JobSummary,
    with_meta: bool,
) -> JobListStub {
    JobListStub {
        id: job.id.clone(),
        parent_id: job.parent_id.clone(),
        name: job.name.clone(),
        namespace: job.namespace.clone(),
        datacenters: job.datacenters.clone(),
        node_pool: job.node_pool.clone(),
        multiregion: job.multiregion.clone(),
        job_type: job.job_type.clone(),
        priority: job.priority,
        periodic: job.periodic.as_ref().is_some_and(|p| !p.is_null()),
        parameterized_job: job.is_parameterized(),
        stop: job.stop,
        status: status.to_owned(),
        status_description: job.status_description.clone(),
        job_summary: summary,
        create_index: job.create_index,
        modify_index: job.modify_index,
        job_modify_index: job.job_modify_index,
        submit_time: job.submit_time,
        meta: with_meta.then(|| job.meta.clone()),
    }
}

/// The dotted paths of a job's JSON that are Go maps (for the filter's missing-key rules).
pub(crate) const JOB_MAP_FIELDS: &[&str] = &[
    "Meta",
    "TaskGroups.*.Meta",
    "TaskGroups.*.Volumes",
    "TaskGroups.*.Tasks.*.Meta",
    "TaskGroups.*.Tasks.*.Env",
    "TaskGroups.*.Tasks.*.Config",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{
        ALLOC_DESIRED_RUN, ALLOC_DESIRED_STOP, EVAL_STATUS_COMPLETE, EVAL_STATUS_PENDING,
        JOB_TYPE_SERVICE,
    };

    fn job() -> Job {
        Job {
            id: "web".to_owned(),
            namespace: "default".to_owned(),
            job_type: JOB_TYPE_SERVICE.to_owned(),
            ..Job::default()
        }
    }

    fn alloc(desired: &str, client: &str) -> Arc<Allocation> {
        Arc::new(Allocation {
            desired_status: desired.to_owned(),
            client_status: client.to_owned(),
            ..Allocation::default()
        })
    }

    fn facts(statuses: &[&str]) -> EvalFacts {
        let mut facts = EvalFacts::default();
        for status in statuses {
            facts.add(&Evaluation {
                status: (*status).to_owned(),
                ..Evaluation::default()
            });
        }
        facts
    }

    #[test]
    fn running_when_an_allocation_is_live() {
        let allocs = [alloc(ALLOC_DESIRED_RUN, ALLOC_CLIENT_RUNNING)];
        assert_eq!(job_status(&job(), &allocs, None), JOB_STATUS_RUNNING);
    }

    #[test]
    fn pending_while_an_evaluation_is_pending() {
        let allocs = [alloc(ALLOC_DESIRED_STOP, ALLOC_CLIENT_RUNNING)];
        let evals = facts(&[EVAL_STATUS_COMPLETE, EVAL_STATUS_PENDING]);
        assert_eq!(
            job_status(&job(), &allocs, Some(&evals)),
            JOB_STATUS_PENDING
        );
    }

    #[test]
    fn dead_when_everything_finished() {
        let allocs = [alloc(ALLOC_DESIRED_RUN, ALLOC_CLIENT_COMPLETE)];
        let evals = facts(&[EVAL_STATUS_COMPLETE]);
        assert_eq!(job_status(&job(), &allocs, Some(&evals)), JOB_STATUS_DEAD);
    }

    #[test]
    fn new_job_without_evaluations_is_pending_and_stopped_one_dead() {
        assert_eq!(job_status(&job(), &[], None), JOB_STATUS_PENDING);
        let stopped = Job {
            stop: true,
            ..job()
        };
        assert_eq!(job_status(&stopped, &[], None), JOB_STATUS_DEAD);
    }

    #[test]
    fn system_and_periodic_jobs_run_until_stopped() {
        let system = Job {
            job_type: JOB_TYPE_SYSTEM.to_owned(),
            ..job()
        };
        assert_eq!(job_status(&system, &[], None), JOB_STATUS_RUNNING);
        let periodic = Job {
            periodic: Some(serde_json::json!({"Enabled": true})),
            stop: true,
            ..job()
        };
        assert_eq!(job_status(&periodic, &[], None), JOB_STATUS_DEAD);
    }

    #[test]
    fn stub_carries_meta_only_when_asked() {
        let mut job = job();
        job.meta.insert("team".to_owned(), "infra".to_owned());
        let without =
            serde_json::to_value(job_stub(&job, &job.status, JobSummary::default(), false))
                .unwrap_or_default();
        assert!(without.get("Meta").is_none());
        let with = serde_json::to_value(job_stub(&job, &job.status, JobSummary::default(), true))
            .unwrap_or_default();
        assert_eq!(with["Meta"]["team"], "infra");
    }
}
