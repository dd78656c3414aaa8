//! The commands the state writer applies, and what each does to a draft (Nomad's FSM apply
//! functions plus the plan applier's commit).
//!
//! Invariants:
//! - `apply` either succeeds or returns an error before or after partial changes; the writer
//!   rolls a failed command back, so each function may bail out at any point.
//! - No command reads the clock or the network: `now` comes from the writer.
//! - The plan applier re-checks every node a plan touches against the latest state and commits
//!   only the nodes that still fit (all or nothing with `AllAtOnce`); the evaluation's final
//!   status is written only when the whole plan was committed, so a partly refused plan is
//!   re-planned by its worker.
//! - Where a command may be committed in parts (it is too large for one storage transaction:
//!   `draft.rs`), it marks them with `Draft::unit`: each part leaves a state that a sequence of
//!   smaller commands could have left (one stop or placement of a plan, one client update with
//!   its rescheduling evaluation, one evaluation, one deletion of a garbage collection).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::draft::Draft;
use super::gc::{GcPass, GcReport};
use crate::Error;
use crate::placement::ports;
use crate::structs::*;

/// A change to the scheduler's state.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    RegisterJob(Box<RegisterJob>),
    DeregisterJob(DeregisterJob),
    /// A client registers (or re-registers) its node.
    UpsertNode(Box<Node>),
    /// The heartbeat monitor (down) or a returning client (ready) changes a node's status.
    SetNodeStatus {
        node_id: String,
        status: String,
    },
    /// A client reports task states and client statuses.
    ClientAllocUpdates(Vec<AllocClientUpdate>),
    /// `POST /v1/allocation/:id/stop`.
    StopAlloc {
        alloc_id: String,
        no_shutdown_delay: bool,
    },
    /// A worker's plan, to re-check and commit.
    ApplyPlan(Box<Plan>),
    /// Evaluations to write as they are (a worker giving up on one, for example).
    UpsertEvals(Vec<Evaluation>),
    /// A garbage-collection pass (`gc.rs`).
    Gc(GcPass),
}

#[derive(Debug, Clone)]
pub(crate) struct RegisterJob {
    /// Canonical; `ID`, `Namespace`, `Type`, `Priority` already validated.
    pub(crate) job: Job,
    pub(crate) submission: Option<JobSubmission>,
    /// `EnforceIndex`: the `JobModifyIndex` the job must have (0: must not exist).
    pub(crate) enforce_index: Option<u64>,
    pub(crate) preserve_counts: bool,
    pub(crate) eval_priority: Option<i64>,
}

#[derive(Debug, Clone)]
pub(crate) struct DeregisterJob {
    pub(crate) namespace: String,
    pub(crate) job_id: String,
    pub(crate) purge: bool,
    pub(crate) eval_priority: Option<i64>,
}

/// What a command produced, beyond its index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Done,
    /// A job register or deregister.
    Job {
        /// Empty when no evaluation was created (periodic and parameterized jobs).
        eval_id: String,
        eval_create_index: u64,
        job_modify_index: u64,
        warnings: String,
    },
    /// An allocation stop.
    AllocStop {
        eval_id: String,
    },
    Plan(PlanResult),
    /// What a garbage-collection pass removed.
    Gc(GcReport),
}

/// Applies `command` (which it may change only as a re-application would: a plan's allocations
/// become the versions stored, see [`apply_plan`]).
pub(super) fn apply(draft: &mut Draft, command: &mut Command, now: i64) -> Result<Outcome, Error> {
    match command {
        Command::RegisterJob(register) => register_job(draft, register, now),
        Command::DeregisterJob(deregister) => deregister_job(draft, deregister, now),
        Command::UpsertNode(node) => upsert_node(draft, (**node).clone(), now),
        Command::SetNodeStatus { node_id, status } => set_node_status(draft, node_id, status, now),
        Command::ClientAllocUpdates(updates) => client_alloc_updates(draft, updates, now),
        Command::StopAlloc {
            alloc_id,
            no_shutdown_delay,
        } => stop_alloc(draft, alloc_id, *no_shutdown_delay, now),
        Command::ApplyPlan(plan) => apply_plan(draft, plan, now).map(Outcome::Plan),
        Command::UpsertEvals(evals) => {
            for eval in evals {
                draft.unit(|draft| draft.put_eval(eval.clone()))?;
            }
            Ok(Outcome::Done)
        }
        Command::Gc(pass) => super::gc::collect(draft, pass).map(Outcome::Gc),
    }
}

/// A new evaluation for a job.
pub(crate) fn new_eval(
    job: &Job,
    triggered_by: &str,
    priority: Option<i64>,
    now: i64,
) -> Evaluation {
    Evaluation {
        id: uuid::Uuid::new_v4().to_string(),
        namespace: job.namespace.clone(),
        priority: priority.filter(|p| *p > 0).unwrap_or(job.priority),
        job_type: job.job_type.clone(),
        triggered_by: triggered_by.to_owned(),
        job_id: job.id.clone(),
        job_modify_index: job.job_modify_index,
        status: EVAL_STATUS_PENDING.to_owned(),
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

/// Whether two versions differ in anything but bookkeeping (Nomad's `SpecChanged`).
fn spec_changed(old: &Job, new: &Job) -> bool {
    let strip = |job: &Job| Job {
        version: 0,
        create_index: 0,
        modify_index: 0,
        job_modify_index: 0,
        submit_time: 0,
        stable: false,
        status: String::new(),
        status_description: String::new(),
        ..job.clone()
    };
    strip(old) != strip(new)
}

fn register_job(draft: &mut Draft, register: &RegisterJob, now: i64) -> Result<Outcome, Error> {
    let RegisterJob {
        job,
        submission,
        enforce_index,
        preserve_counts,
        eval_priority,
    } = register;
    let (enforce_index, preserve_counts, eval_priority) =
        (*enforce_index, *preserve_counts, *eval_priority);
    let mut job = job.clone();
    let index = draft.index();
    let key = job.key();
    let existing = draft.snap.jobs.get(&key).cloned();
    if let Some(expected) = enforce_index {
        match (&existing, expected) {
            (Some(_), 0) => {
                return Err(Error::Conflict(
                    "Enforcing job modify index 0: job already exists".to_owned(),
                ));
            }
            (None, expected) if expected > 0 => {
                return Err(Error::Conflict(format!(
                    "Enforcing job modify index {expected}: job does not exist"
                )));
            }
            (Some(current), expected) if current.job_modify_index != expected => {
                return Err(Error::Conflict(format!(
                    "Enforcing job modify index {expected}: job exists with conflicting job modify index: {}",
                    current.job_modify_index
                )));
            }
            _ => {}
        }
    }
    job.submit_time = now;
    job.modify_index = index;
    job.status = String::new();
    job.status_description = String::new();
    match &existing {
        Some(old) => {
            if preserve_counts {
                for group in &mut job.task_groups {
                    if let Some(old_group) = old.task_group(&group.name) {
                        group.count = old_group.count;
                    }
                }
            }
            job.create_index = old.create_index;
            if spec_changed(old, &job) {
                job.version = old.version + 1;
                job.job_modify_index = index;
                job.stable = false;
            } else {
                job.version = old.version;
                job.job_modify_index = old.job_modify_index;
                job.stable = old.stable;
            }
        }
        None => {
            job.version = 0;
            job.create_index = index;
            job.job_modify_index = index;
        }
    }
    let job = draft.put_job(job)?;
    if let Some(submission) = submission {
        let mut submission = submission.clone();
        submission.namespace = job.namespace.clone();
        submission.job_id = job.id.clone();
        submission.version = job.version;
        submission.job_modify_index = job.job_modify_index;
        draft.put_submission(submission)?;
    }
    let (eval_id, eval_create_index) = if job.is_periodic() || job.is_parameterized() {
        (String::new(), 0)
    } else {
        let eval = draft.put_eval(new_eval(&job, TRIGGER_JOB_REGISTER, eval_priority, now))?;
        (eval.id.clone(), eval.create_index)
    };
    Ok(Outcome::Job {
        eval_id,
        eval_create_index,
        job_modify_index: job.job_modify_index,
        warnings: String::new(),
    })
}

fn deregister_job(
    draft: &mut Draft,
    deregister: &DeregisterJob,
    now: i64,
) -> Result<Outcome, Error> {
    let key = JobKey::new(&deregister.namespace, &deregister.job_id);
    let Some(existing) = draft.snap.jobs.get(&key).cloned() else {
        return Err(Error::NotFound("job not found".to_owned()));
    };
    let index = draft.index();
    let job_modify_index = if deregister.purge {
        draft.purge_job(&key);
        index
    } else {
        let mut job = (*existing).clone();
        job.stop = true;
        job.submit_time = now;
        job.modify_index = index;
        if !existing.stop {
            job.version = existing.version + 1;
            job.job_modify_index = index;
            job.stable = false;
        }
        draft.put_job(job)?.job_modify_index
    };
    let mut eval = new_eval(
        &existing,
        TRIGGER_JOB_DEREGISTER,
        deregister.eval_priority,
        now,
    );
    eval.job_modify_index = job_modify_index;
    let eval = draft.put_eval(eval)?;
    Ok(Outcome::Job {
        eval_id: eval.id.clone(),
        eval_create_index: eval.create_index,
        job_modify_index,
        warnings: String::new(),
    })
}

/// Evaluations for every job with a non-terminal allocation on `node_id`, and for every
/// system job when the node can take work.
fn node_update_evals(draft: &mut Draft, node_id: &str, ready: bool, now: i64) -> Result<(), Error> {
    let mut jobs: BTreeSet<JobKey> = draft
        .snap
        .allocs_on_node(node_id)
        .filter(|alloc| !alloc.terminal())
        .map(|alloc| JobKey::new(&alloc.namespace, &alloc.job_id))
        .collect();
    if ready {
        jobs.extend(
            draft
                .snap
                .jobs
                .values()
                .filter(|job| {
                    !job.stop
                        && (job.job_type == JOB_TYPE_SYSTEM || job.job_type == JOB_TYPE_SYSBATCH)
                })
                .map(|job| job.key()),
        );
    }
    for key in jobs {
        let Some(job) = draft.snap.jobs.get(&key).cloned() else {
            continue;
        };
        draft.unit(|draft| {
            let mut eval = new_eval(&job, TRIGGER_NODE_UPDATE, None, now);
            eval.node_id = node_id.to_owned();
            eval.node_modify_index = draft.index();
            draft.put_eval(eval)
        })?;
    }
    Ok(())
}

fn upsert_node(draft: &mut Draft, mut node: Node, now: i64) -> Result<Outcome, Error> {
    if node.id.is_empty() {
        return Err(Error::BadRequest(
            "missing node ID for client registration".to_owned(),
        ));
    }
    if node.secret_id.is_empty() {
        return Err(Error::BadRequest(
            "missing node SecretID for client registration".to_owned(),
        ));
    }
    let previous = draft.snap.nodes.get(&node.id).cloned();
    if let Some(previous) = &previous
        && previous.secret_id != node.secret_id
    {
        return Err(Error::BadRequest(
            "node secret ID does not match".to_owned(),
        ));
    }
    if node.status.is_empty() {
        node.status = NODE_STATUS_READY.to_owned();
    }
    if node.node_pool.is_empty() {
        node.node_pool = DEFAULT_NODE_POOL.to_owned();
    }
    if node.scheduling_eligibility.is_empty() {
        node.scheduling_eligibility = previous.as_ref().map_or(NODE_ELIGIBLE.to_owned(), |p| {
            p.scheduling_eligibility.clone()
        });
    }
    let status_changed = previous.as_ref().is_none_or(|p| p.status != node.status);
    node.status_updated_at = if status_changed {
        now / 1_000_000_000
    } else {
        previous.as_ref().map_or(0, |p| p.status_updated_at)
    };
    let ready = node.status == NODE_STATUS_READY;
    // Re-registration with nothing new (a client restart) writes nothing.
    if let Some(previous) = &previous {
        let mut same = node.clone();
        same.create_index = previous.create_index;
        same.modify_index = previous.modify_index;
        if same == **previous {
            return Ok(Outcome::Done);
        }
    }
    // The evaluations before the node (see `put_node_last`).
    if status_changed {
        node_update_evals(draft, &node.id, ready, now)?;
    }
    put_node_last(draft, node, ready)?;
    Ok(Outcome::Done)
}

/// Writes a node whose status changed, after its evaluations, in a part of its own when the
/// command is split: a part committed alone then leaves evaluations that find the node as it
/// was (and do nothing), never a node marked down without the evaluations that move its work.
fn put_node_last(draft: &mut Draft, node: Node, ready: bool) -> Result<(), Error> {
    draft.unit(|draft| {
        draft.put_node(node.clone())?;
        if ready {
            draft.capacity_changed = true;
        }
        Ok(())
    })
}

fn set_node_status(
    draft: &mut Draft,
    node_id: &str,
    status: &str,
    now: i64,
) -> Result<Outcome, Error> {
    let Some(existing) = draft.snap.nodes.get(node_id).cloned() else {
        return Err(Error::NotFound("node not found".to_owned()));
    };
    if existing.status == status {
        return Ok(Outcome::Done);
    }
    let mut node = (*existing).clone();
    node.status = status.to_owned();
    node.status_updated_at = now / 1_000_000_000;
    node.events.push(NodeEvent {
        message: match status {
            NODE_STATUS_DOWN => "Node heartbeat missed".to_owned(),
            _ => "Node reregistered by heartbeat".to_owned(),
        },
        subsystem: "Cluster".to_owned(),
        create_index: draft.index(),
        ..NodeEvent::default()
    });
    if node.events.len() > 10 {
        let excess = node.events.len() - 10;
        node.events.drain(..excess);
    }
    let ready = status == NODE_STATUS_READY;
    node_update_evals(draft, node_id, ready, now)?;
    put_node_last(draft, node, ready)?;
    Ok(Outcome::Done)
}

fn client_alloc_updates(
    draft: &mut Draft,
    updates: &[AllocClientUpdate],
    now: i64,
) -> Result<Outcome, Error> {
    // Jobs that already got an evaluation for a newly failed allocation of this report.
    let mut failed_jobs: BTreeSet<JobKey> = BTreeSet::new();
    for update in updates {
        let failed = draft.unit(|draft| client_alloc_update(draft, update, &failed_jobs, now))?;
        failed_jobs.extend(failed);
    }
    Ok(Outcome::Done)
}

/// One allocation's client update, with the job's rescheduling evaluation if the allocation
/// newly failed (one per job and report: `failed_jobs` already have theirs). Returns the job
/// whose allocation newly failed.
fn client_alloc_update(
    draft: &mut Draft,
    update: &AllocClientUpdate,
    failed_jobs: &BTreeSet<JobKey>,
    now: i64,
) -> Result<Option<JobKey>, Error> {
    let Some(existing) = draft.snap.allocs.get(&update.id).cloned() else {
        return Ok(None);
    };
    if existing.node_id != update.node_id {
        return Err(Error::BadRequest(format!(
            "allocation {} is not placed on node {}",
            update.id, update.node_id
        )));
    }
    // The server decided it is lost; a late client report does not revive it.
    if existing.client_status == ALLOC_CLIENT_LOST {
        return Ok(None);
    }
    let mut alloc = (*existing).clone();
    alloc.client_status.clone_from(&update.client_status);
    alloc
        .client_description
        .clone_from(&update.client_description);
    alloc.task_states.clone_from(&update.task_states);
    alloc.modify_time = now;
    let newly_failed = alloc.client_status == ALLOC_CLIENT_FAILED
        && existing.client_status != ALLOC_CLIENT_FAILED
        && !alloc.server_terminal();
    let key = JobKey::new(&alloc.namespace, &alloc.job_id);
    draft.put_alloc(alloc)?;
    if !newly_failed {
        return Ok(None);
    }
    if !failed_jobs.contains(&key)
        && let Some(job) = draft.snap.jobs.get(&key).cloned()
        && !job.stop
        && job.job_type != JOB_TYPE_SYSTEM
        && job.job_type != JOB_TYPE_SYSBATCH
    {
        draft.put_eval(new_eval(&job, TRIGGER_ALLOC_FAILURE, None, now))?;
    }
    Ok(Some(key))
}

fn stop_alloc(
    draft: &mut Draft,
    alloc_id: &str,
    no_shutdown_delay: bool,
    now: i64,
) -> Result<Outcome, Error> {
    let Some(existing) = draft.snap.allocs.get(alloc_id).cloned() else {
        return Err(Error::NotFound("alloc not found".to_owned()));
    };
    let mut alloc = (*existing).clone();
    alloc.desired_transition.migrate = Some(true);
    if no_shutdown_delay {
        alloc.desired_transition.no_shutdown_delay = Some(true);
    }
    alloc.modify_time = now;
    alloc.alloc_modify_index = draft.index();
    draft.put_alloc(alloc)?;
    let job_key = JobKey::new(&existing.namespace, &existing.job_id);
    let job = draft.snap.jobs.get(&job_key).cloned().or_else(|| {
        draft
            .snap
            .job_version(&job_key, existing.job_version)
            .cloned()
    });
    let mut eval = match job {
        Some(job) => new_eval(&job, TRIGGER_ALLOC_STOP, None, now),
        None => Evaluation {
            id: uuid::Uuid::new_v4().to_string(),
            namespace: existing.namespace.clone(),
            priority: 50,
            job_type: existing.job_type.clone(),
            triggered_by: TRIGGER_ALLOC_STOP.to_owned(),
            job_id: existing.job_id.clone(),
            status: EVAL_STATUS_PENDING.to_owned(),
            create_time: now,
            modify_time: now,
            ..Evaluation::default()
        },
    };
    eval.node_id = existing.node_id.clone();
    let eval = draft.put_eval(eval)?;
    Ok(Outcome::AllocStop {
        eval_id: eval.id.clone(),
    })
}

/// Re-checks a plan against the latest state and commits the nodes that still fit.
///
/// Split (a plan too large for one transaction): each stop and each placement is a unit of
/// its own, so the plan may be committed in parts, as Nomad's plan applier commits plans
/// partially. On each node its stops come first, then the placements that add no work (updates
/// in place, allocations made terminal), then the new ones, so every part committed fits the
/// node as the whole plan did; the evaluation's own update comes last, in the last part, so a
/// plan committed only in part is re-planned.
fn apply_plan(draft: &mut Draft, plan: &mut Plan, now: i64) -> Result<PlanResult, Error> {
    let key = JobKey::new(&plan.eval.namespace, &plan.eval.job_id);
    let nodes: BTreeSet<&String> = plan
        .node_allocation
        .keys()
        .chain(plan.node_update.keys())
        .collect();
    let current_job_index = draft.snap.jobs.get(&key).map(|job| job.job_modify_index);
    let places_new = plan
        .node_allocation
        .values()
        .flatten()
        .any(|alloc| !draft.snap.allocs.contains_key(&alloc.id));
    // A plan computed against an older version of the job must be recomputed.
    if places_new && current_job_index.is_some_and(|current| current != plan.job_modify_index) {
        return Ok(PlanResult {
            committed_nodes: Vec::new(),
            refused_nodes: nodes.into_iter().cloned().collect(),
            index: 0,
        });
    }
    let mut fitting = Vec::new();
    let mut refused = Vec::new();
    for node_id in nodes {
        if node_fits(draft, node_id, plan) {
            fitting.push(node_id.clone());
        } else {
            refused.push(node_id.clone());
        }
    }
    if plan.all_at_once && !refused.is_empty() {
        refused.append(&mut fitting);
    }
    for node_id in &fitting {
        for stop in plan.node_update.get(node_id).into_iter().flatten() {
            draft.unit(|draft| stop_planned(draft, stop, now))?;
        }
        let Some(allocs) = plan.node_allocation.get_mut(node_id) else {
            continue;
        };
        let mut placing: Vec<(bool, usize)> = if allocs.len() > 1 {
            allocs
                .iter()
                .enumerate()
                .map(|(i, alloc)| (adds_work(draft, alloc), i))
                .collect()
        } else {
            // One placement on the node (the usual case): nothing to order.
            vec![(true, 0)]
        };
        placing.sort_by_key(|(adds, _)| *adds);
        for (_, i) in placing {
            let alloc = &mut allocs[i];
            // Completed in place (no copy while the plan holds it alone) and shared with the
            // state; applied again (a rebuild, a retry in parts), the stored version gets the
            // same fields again, keeping its first creation time.
            draft.unit(|draft| {
                let fields = Arc::make_mut(alloc);
                if fields.create_time == 0 {
                    fields.create_time = now;
                }
                fields.modify_time = now;
                fields.alloc_modify_index = draft.index();
                draft.put_alloc_shared(alloc)
            })?;
        }
    }
    if refused.is_empty() {
        let mut eval = plan.eval.clone();
        eval.modify_time = now;
        eval.snapshot_index = plan.snapshot_index;
        // Everything placed: older blocked evaluations of the job have nothing left to do.
        if eval.status == EVAL_STATUS_COMPLETE && eval.failed_tg_allocs.is_empty() {
            cancel_blocked_evals(draft, &key, &eval.id, now)?;
        }
        draft.unit(|draft| {
            draft.put_eval(eval.clone())?;
            for eval in &plan.new_evals {
                let mut eval = eval.clone();
                if eval.create_time == 0 {
                    eval.create_time = now;
                }
                eval.modify_time = now;
                draft.put_eval(eval)?;
            }
            Ok(())
        })?;
    }
    Ok(PlanResult {
        index: if fitting.is_empty() { 0 } else { draft.index() },
        committed_nodes: fitting,
        refused_nodes: refused,
    })
}

/// One of a plan's stops (or other updates of an allocation's desired state).
fn stop_planned(draft: &mut Draft, stop: &AllocStop, now: i64) -> Result<(), Error> {
    let Some(existing) = draft.snap.allocs.get(&stop.alloc_id).cloned() else {
        return Ok(());
    };
    let mut alloc = (*existing).clone();
    alloc.desired_status = stop.desired_status.clone();
    alloc.desired_description = stop.desired_description.clone();
    if let Some(client_status) = &stop.client_status {
        alloc.client_status = client_status.clone();
    }
    if let Some(next) = &stop.next_allocation {
        alloc.next_allocation = next.clone();
    }
    alloc.modify_time = now;
    alloc.alloc_modify_index = draft.index();
    draft.put_alloc(alloc).map(drop)
}

/// Whether placing `alloc` adds work to its node (it is live and replaces nothing live).
fn adds_work(draft: &Draft, alloc: &Allocation) -> bool {
    !alloc.terminal()
        && draft
            .snap
            .allocs
            .get(&alloc.id)
            .is_none_or(|old| old.terminal())
}

/// Whether a plan's changes on one node fit the node as it is now.
fn node_fits(draft: &Draft, node_id: &str, plan: &Plan) -> bool {
    let placing = plan.node_allocation.get(node_id);
    // Each placement with the version it replaces (looked up once).
    let placing: Vec<(&Arc<Allocation>, Option<&Arc<Allocation>>)> = placing
        .into_iter()
        .flatten()
        .map(|alloc| (alloc, draft.snap.allocs.get(&alloc.id)))
        .collect();
    let new_work = placing
        .iter()
        .any(|(alloc, old)| !alloc.terminal() && old.is_none_or(|old| old.terminal()));
    if !new_work {
        // Only stops and in-place updates: always allowed (even on a down node).
        return true;
    }
    let Some(node) = draft.snap.nodes.get(node_id) else {
        return false;
    };
    if !node.ready_for_placement() {
        return false;
    }
    let mut usage = draft.snap.node_used(node_id);
    for stop in plan.node_update.get(node_id).into_iter().flatten() {
        if let Some(alloc) = draft.snap.allocs.get(&stop.alloc_id)
            && !alloc.terminal()
        {
            usage.subtract(&alloc.allocated_resources.comparable());
        }
    }
    for (alloc, old) in placing {
        if let Some(old) = old
            && !old.terminal()
        {
            usage.subtract(&old.allocated_resources.comparable());
        }
        if !alloc.terminal() {
            usage.add(&alloc.allocated_resources.comparable());
        }
    }
    usage.exceeded_dimension(&node.capacity()).is_none() && ports_fit(draft, node_id, plan)
}

/// Whether the ports the plan's allocations on a node take are free there (no two live
/// allocations of a node share a port, whichever workers planned them).
fn ports_fit(draft: &Draft, node_id: &str, plan: &Plan) -> bool {
    let placing = plan.node_allocation.get(node_id).into_iter().flatten();
    let asked: Vec<i64> = placing
        .filter(|alloc| !alloc.terminal())
        .flat_map(|alloc| ports::held(alloc))
        .collect();
    if asked.is_empty() {
        return true;
    }
    let leaving: BTreeSet<&str> = plan
        .node_update
        .get(node_id)
        .into_iter()
        .flatten()
        .map(|stop| stop.alloc_id.as_str())
        .chain(
            plan.node_allocation
                .get(node_id)
                .into_iter()
                .flatten()
                .map(|a| a.id.as_str()),
        )
        .collect();
    let mut used = BTreeSet::new();
    for alloc in draft.snap.allocs_on_node(node_id) {
        if !alloc.terminal() && !leaving.contains(alloc.id.as_str()) {
            used.extend(ports::held(alloc));
        }
    }
    asked.into_iter().all(|port| used.insert(port))
}

/// Cancels the job's blocked evaluations (Nomad does this when a complete evaluation with no
/// failed placements is stored).
fn cancel_blocked_evals(
    draft: &mut Draft,
    key: &JobKey,
    except: &str,
    now: i64,
) -> Result<(), Error> {
    let blocked: Vec<Evaluation> = draft
        .snap
        .evals_of_job(key)
        .filter(|eval| eval.id != except && eval.status == EVAL_STATUS_BLOCKED)
        .map(|eval| (**eval).clone())
        .collect();
    for mut eval in blocked {
        eval.status = EVAL_STATUS_CANCELED.to_owned();
        eval.status_description =
            "evaluation cancelled: the job needs no more placements".to_owned();
        eval.modify_time = now;
        draft.unit(|draft| draft.put_eval(eval.clone()))?;
    }
    Ok(())
}

/// Capacity changed: every blocked evaluation gets another run.
pub(super) fn unblock_evals(draft: &mut Draft, now: i64) -> Result<(), Error> {
    let blocked: Vec<Evaluation> = draft
        .snap
        .blocked_evals
        .iter()
        .filter_map(|id| draft.snap.evals.get(id))
        .map(|eval| (**eval).clone())
        .collect();
    for mut eval in blocked {
        eval.status = EVAL_STATUS_PENDING.to_owned();
        eval.modify_time = now;
        draft.unit(|draft| draft.put_eval(eval.clone()))?;
    }
    Ok(())
}
