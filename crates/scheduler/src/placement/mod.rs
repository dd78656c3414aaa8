//! Placement: the pure core of the scheduler (Nomad's `scheduler/`): one evaluation in, one
//! plan out.
//!
//! `compute(snapshot, eval, ctx) -> Plan` looks up the evaluation's job and
//! - stops every non-terminal allocation when the job is stopped or gone;
//! - for service and batch jobs reconciles each task group (`reconcile.rs`): scale up and
//!   down, in-place and destructive updates to the job's version, lost allocations of down
//!   nodes, migrations (`alloc stop`), rescheduling of failed allocations now or through a
//!   delayed follow-up evaluation (`reschedule.rs`);
//! - for system (and sysbatch) jobs wants one allocation per group on every ready node;
//! - places what is missing through the stack (`rank.rs`: feasibility from `feasible.rs`
//!   with version constraints from `version.rs`, bin-packing, port availability from
//!   `ports.rs`, anti-affinity, affinities, spreads), assigning each placement's static and
//!   dynamic ports on its node, recording metrics on every allocation, and reports what found
//!   no node in `FailedTGAllocs`/`QueuedAllocations` with one blocked evaluation.
//!
//! Invariants:
//! - No I/O and no clock is read here: "now" comes from `ctx.now`, and the `AllocationTime`
//!   metric is measured with `ctx.stopwatch`; node order and every new ID come from
//!   generators seeded with `ctx.seed` (mixed with the evaluation ID and snapshot index), so a
//!   run is deterministic for a seed and a stopwatch.
//! - The only state kept between runs is a memo of per-node-table facts (`nodes.rs`: ready
//!   nodes, capacities, static feasibility, usage), keyed by the identity of the snapshot's
//!   persistent maps; it changes how fast a result comes, never the result.
//! - No panics on any input: a malformed job (unknown operators, bad patterns, absurd counts
//!   or policies) yields fewer placements, never a crash.
//! - The plan only names allocations of the evaluation's job; what it places on a node plus
//!   what the node already holds (minus what the plan stops there) fits the node, which the
//!   plan applier checks again before committing.

mod feasible;
mod nodes;
pub(crate) mod ports;
mod rank;
mod reconcile;
mod reschedule;
mod version;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::state::Snapshot;
use crate::structs::{
    ALLOC_CLIENT_LOST, ALLOC_CLIENT_PENDING, ALLOC_DESIRED_RUN, ALLOC_DESIRED_STOP, AllocMetric,
    AllocStop, AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources,
    AllocatedSharedResources, AllocatedTaskResources, Allocation, EVAL_STATUS_BLOCKED,
    EVAL_STATUS_COMPLETE, EVAL_STATUS_PENDING, Evaluation, JOB_TYPE_BATCH, JOB_TYPE_SYSBATCH,
    JOB_TYPE_SYSTEM, Job, JobKey, Plan, ReschedulePolicy, Resources, TRIGGER_QUEUED_ALLOCS,
    TRIGGER_RETRY_FAILED_ALLOC, TaskGroup, alloc_name,
};
use nodes::NodeSet;
use rank::{SelectOptions, Stack};
use reconcile::{GroupInput, PlaceKind, Update};

/// What a placement run gets besides the snapshot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlacementContext {
    /// Unix nanoseconds "now" (for reschedule delays and timestamps).
    pub(crate) now: i64,
    /// Seeds node shuffling and new allocation/evaluation IDs.
    pub(crate) seed: u64,
    /// A monotonic clock in nanoseconds, read before and after each node selection to time
    /// it (`AllocMetric.AllocationTime`, the only output that depends on it).
    pub(crate) stopwatch: fn() -> i64,
}

/// Upstream's `DescBlockedEvalFailedPlacements`.
const BLOCKED_DESCRIPTION: &str = "created to place remaining allocations";
/// Upstream's `DescReschedulingFollowupEval`.
const FOLLOWUP_DESCRIPTION: &str = "created for delayed rescheduling";
/// Mixed into the seed of the node shuffle so it differs from the ID stream.
const SHUFFLE_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// Processes one evaluation against a snapshot.
pub(crate) fn compute(snapshot: &Snapshot, eval: &Evaluation, ctx: &PlacementContext) -> Plan {
    let key = JobKey::new(&eval.namespace, &eval.job_id);
    let job = snapshot.jobs.get(&key).map(|job| &**job);
    let allocs: Vec<&Allocation> = snapshot.allocs_of_job(&key).map(|a| &**a).collect();
    let mut run = Run::new(snapshot, eval, ctx, key);
    match job {
        Some(job) if !job.stop => match job.job_type.as_str() {
            JOB_TYPE_SYSTEM => run.system(job, &allocs, false),
            JOB_TYPE_SYSBATCH => run.system(job, &allocs, true),
            _ => run.generic(job, &allocs),
        },
        _ => {
            for stop in reconcile::stop_all(snapshot, &allocs) {
                run.stop(None, stop.alloc, stop.description, stop.lost);
            }
        }
    }
    run.finish(job)
}

/// The state of one run: the plan being built and what it changes.
struct Run<'a> {
    snapshot: &'a Snapshot,
    eval: &'a Evaluation,
    ctx: PlacementContext,
    key: JobKey,
    /// New IDs.
    rng: StdRng,
    node_allocation: BTreeMap<String, Vec<Arc<Allocation>>>,
    node_update: BTreeMap<String, Vec<AllocStop>>,
    new_evals: Vec<Evaluation>,
    failed: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, i64>,
    /// Whether placements failed for lack of capacity (a blocked evaluation is due).
    blocked: bool,
    next_eval: String,
}

/// The seed of a run's generators: the caller's seed mixed with the evaluation and the
/// snapshot (as upstream seeds its shuffle with the evaluation ID and the state index), so a
/// reused seed still gives other IDs to another evaluation or a retry on a newer snapshot.
fn run_seed(seed: u64, eval: &Evaluation, index: u64) -> u64 {
    // FNV-1a: stable across processes, unlike the standard library's hasher.
    seed ^ stdx::hash::fnv1a_64(eval.id.as_bytes()) ^ index.rotate_left(32)
}

/// An ID in UUID v4 format from the run's generator.
fn new_id(rng: &mut StdRng) -> String {
    uuid::Builder::from_random_bytes(rng.random())
        .into_uuid()
        .to_string()
}

/// Upstream's `AllocMetric.ExhaustResources`, for `times` failures at once.
fn exhaust_resources(metric: &mut AllocMetric, tg: &TaskGroup, times: i64) {
    if metric.dimension_exhausted.is_empty() {
        return;
    }
    let cpu = metric.dimension_exhausted.contains_key("cpu");
    let memory = metric.dimension_exhausted.contains_key("memory");
    let mut exhausted = match metric.resources_exhausted.take() {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    for task in &tg.tasks {
        let mut resources: Resources = exhausted
            .get(&task.name)
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default();
        if memory {
            resources.memory_mb = resources
                .memory_mb
                .saturating_add(task.resources.memory_mb.saturating_mul(times));
        }
        if cpu {
            resources.cpu = resources
                .cpu
                .saturating_add(task.resources.cpu.saturating_mul(times));
        }
        if let Ok(value) = serde_json::to_value(&resources) {
            exhausted.insert(task.name.clone(), value);
        }
    }
    metric.resources_exhausted = Some(serde_json::Value::Object(exhausted));
}

/// Upstream's `mergeNodeFiltered`.
fn merge_filtered(acc: &mut AllocMetric, metric: &AllocMetric) {
    acc.nodes_evaluated += metric.nodes_evaluated;
    acc.nodes_filtered += metric.nodes_filtered;
    for (class, count) in &metric.class_filtered {
        *acc.class_filtered.entry(class.clone()).or_default() += count;
    }
    for (constraint, count) in &metric.constraint_filtered {
        *acc.constraint_filtered
            .entry(constraint.clone())
            .or_default() += count;
    }
    acc.allocation_time = acc.allocation_time.saturating_add(metric.allocation_time);
}

/// Whether the definition of group `name` changed between two job versions in a way an
/// allocation cannot follow in place: anything but the count and the placement-only blocks
/// (constraints, affinities, spreads, update, migrate, reschedule, scaling), plus the job's
/// meta (which tasks see). A version no longer retained counts as changed.
fn group_changed(old: Option<&Job>, new: &Job, name: &str) -> bool {
    let (Some(old), Some(new_tg)) = (old, new.task_group(name)) else {
        return true;
    };
    let Some(old_tg) = old.task_group(name) else {
        return true;
    };
    if old.meta != new.meta {
        return true;
    }
    let strip = |tg: &TaskGroup| TaskGroup {
        count: 0,
        constraints: Vec::new(),
        affinities: Vec::new(),
        spreads: Vec::new(),
        reschedule_policy: None,
        migrate: None,
        update: None,
        scaling: None,
        ..tg.clone()
    };
    strip(old_tg) != strip(new_tg)
}

/// The reschedule policy an allocation runs under: its own job version's (as upstream, which
/// reads it from the allocation's job), else the current group's.
fn policy_of<'a>(
    snapshot: &'a Snapshot,
    key: &JobKey,
    alloc: &Allocation,
    current: Option<&'a TaskGroup>,
) -> Option<&'a ReschedulePolicy> {
    snapshot
        .job_version(key, alloc.job_version)
        .and_then(|old| old.task_group(&alloc.task_group))
        .or(current)
        .and_then(|tg| tg.reschedule_policy.as_ref())
}

/// The parts of an allocation every placement of a group shares.
fn alloc_template(job: &Job, tg: &TaskGroup, eval_id: &str, now: i64) -> Allocation {
    let disk_mb = tg.disk_mb();
    let mut allocated = AllocatedResources {
        shared: AllocatedSharedResources {
            disk_mb,
            networks: tg.networks.clone(),
            ports: Vec::new(),
        },
        ..AllocatedResources::default()
    };
    let mut total = Resources {
        disk_mb,
        ..Resources::default()
    };
    let mut task_resources = BTreeMap::new();
    for task in &tg.tasks {
        allocated.tasks.insert(
            task.name.clone(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: task.resources.cpu,
                    reserved_cores: Vec::new(),
                },
                memory: AllocatedMemoryResources {
                    memory_mb: task.resources.memory_mb,
                    memory_max_mb: task.resources.memory_max_mb,
                },
                networks: task.resources.networks.clone(),
                devices: Vec::new(),
            },
        );
        allocated
            .task_lifecycles
            .insert(task.name.clone(), task.lifecycle.clone());
        task_resources.insert(task.name.clone(), task.resources.clone());
        total.cpu = total.cpu.saturating_add(task.resources.cpu);
        total.cores = total.cores.saturating_add(task.resources.cores);
        total.memory_mb = total.memory_mb.saturating_add(task.resources.memory_mb);
        total.memory_max_mb = total
            .memory_max_mb
            .saturating_add(task.resources.memory_max_mb);
    }
    Allocation {
        namespace: job.namespace.clone(),
        eval_id: eval_id.to_owned(),
        job_id: job.id.clone(),
        job_type: job.job_type.clone(),
        job_version: job.version,
        task_group: tg.name.clone(),
        resources: Some(total),
        shared_resources: Some(Resources {
            disk_mb,
            networks: tg.networks.clone(),
            ..Resources::default()
        }),
        task_resources,
        allocated_resources: allocated,
        desired_status: ALLOC_DESIRED_RUN.to_owned(),
        client_status: ALLOC_CLIENT_PENDING.to_owned(),
        create_time: now,
        modify_time: now,
        ..Allocation::default()
    }
}

/// One placement to attempt.
struct Attempt<'a> {
    /// Index of the group in the job (and in the stack).
    group: usize,
    index: u64,
    prev: Option<&'a Allocation>,
    kind: AttemptKind,
    /// System jobs: the node.
    only: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttemptKind {
    New,
    Destructive,
    Replace(PlaceKind),
}

impl<'a> Run<'a> {
    fn new(
        snapshot: &'a Snapshot,
        eval: &'a Evaluation,
        ctx: &PlacementContext,
        key: JobKey,
    ) -> Run<'a> {
        Run {
            snapshot,
            eval,
            ctx: *ctx,
            key,
            rng: StdRng::seed_from_u64(run_seed(ctx.seed, eval, snapshot.index)),
            node_allocation: BTreeMap::new(),
            node_update: BTreeMap::new(),
            new_evals: Vec::new(),
            failed: BTreeMap::new(),
            queued: BTreeMap::new(),
            blocked: false,
            next_eval: String::new(),
        }
    }

    /// Adds a stop to the plan and takes the allocation out of what the node holds.
    fn stop(
        &mut self,
        stack: Option<&mut Stack<'a>>,
        alloc: &'a Allocation,
        description: &str,
        lost: bool,
    ) {
        self.node_update
            .entry(alloc.node_id.clone())
            .or_default()
            .push(AllocStop {
                alloc_id: alloc.id.clone(),
                desired_status: ALLOC_DESIRED_STOP.to_owned(),
                desired_description: description.to_owned(),
                client_status: lost.then(|| ALLOC_CLIENT_LOST.to_owned()),
                next_allocation: None,
            });
        self.account(stack, alloc, false);
    }

    /// Withdraws the stop of `alloc` (its replacement found no node).
    fn unstop(&mut self, stack: Option<&mut Stack<'a>>, alloc: &'a Allocation) {
        if let Some(stops) = self.node_update.get_mut(&alloc.node_id) {
            if let Some(at) = stops.iter().rposition(|stop| stop.alloc_id == alloc.id) {
                stops.remove(at);
            }
            if stops.is_empty() {
                self.node_update.remove(&alloc.node_id);
            }
        }
        self.account(stack, alloc, true);
    }

    /// Counts a non-terminal allocation of the job in (or out of) its node.
    fn account(&mut self, stack: Option<&mut Stack<'a>>, alloc: &'a Allocation, add: bool) {
        if let Some(stack) = stack {
            let node = self.snapshot.node(&alloc.node_id).map(|node| &**node);
            stack.account(alloc, node, add);
        }
    }

    /// Links the stop of `prev` to its replacement.
    fn link_stop(&mut self, prev: &Allocation, next: &str) {
        if let Some(stop) = self
            .node_update
            .get_mut(&prev.node_id)
            .and_then(|stops| stops.iter_mut().rev().find(|stop| stop.alloc_id == prev.id))
        {
            stop.next_allocation = Some(next.to_owned());
        }
    }

    /// A copy of an existing allocation for the plan's updates.
    fn updated(&self, alloc: &Allocation) -> Allocation {
        let mut copy = alloc.clone();
        copy.job = None;
        copy.modify_time = self.ctx.now;
        copy
    }

    fn push_alloc(&mut self, alloc: Allocation) {
        self.node_allocation
            .entry(alloc.node_id.clone())
            .or_default()
            .push(Arc::new(alloc));
    }

    /// The stack and per-run state shared by the generic and system paths.
    fn prepare(
        &mut self,
        job: &'a Job,
        allocs: &[&'a Allocation],
        system: bool,
    ) -> (Stack<'a>, Vec<Allocation>) {
        let batch = job.job_type == JOB_TYPE_BATCH;
        let seed = run_seed(self.ctx.seed, self.eval, self.snapshot.index) ^ SHUFFLE_SALT;
        let nodes = NodeSet::new(self.snapshot, job, seed);
        let mut stack = Stack::new(self.snapshot, nodes, batch, system, self.ctx.stopwatch);
        let mut existing = Vec::new();
        for alloc in allocs.iter().copied().filter(|alloc| !alloc.terminal()) {
            stack.count_existing(alloc);
            if let Some(node) = self.snapshot.node(&alloc.node_id) {
                existing.push((&**node, alloc.task_group.as_str()));
            }
        }
        let mut templates = Vec::new();
        for tg in &job.task_groups {
            stack.prepare_group(job, tg, &existing);
            templates.push(alloc_template(job, tg, &self.eval.id, self.ctx.now));
            self.queued.insert(tg.name.clone(), 0);
        }
        (stack, templates)
    }

    /// How allocation `alloc` (of group index `group`) follows the job's current version.
    fn update_kind(
        snapshot: &Snapshot,
        key: &JobKey,
        job: &Job,
        stack: &mut Stack<'a>,
        changed: &mut HashMap<(u64, usize), bool>,
        alloc: &Allocation,
        group: usize,
    ) -> Update {
        if alloc.job_version == job.version {
            return Update::Ignore;
        }
        let Some(tg) = job.task_groups.get(group) else {
            return Update::Destructive;
        };
        let is_changed = *changed
            .entry((alloc.job_version, group))
            .or_insert_with(|| {
                let old = snapshot
                    .job_version(key, alloc.job_version)
                    .map(|job| &**job);
                group_changed(old, job, &tg.name)
            });
        if is_changed {
            return Update::Destructive;
        }
        if alloc.terminal() {
            return Update::Ignore;
        }
        let Some(node) = snapshot.node(&alloc.node_id) else {
            return Update::Destructive;
        };
        if !feasible::in_datacenters(node, &job.datacenters)
            || !feasible::in_pool(node, &job.node_pool)
            || stack.static_check(group, node).is_some()
        {
            return Update::Destructive;
        }
        Update::InPlace
    }

    /// Service and batch jobs.
    fn generic(&mut self, job: &'a Job, allocs: &[&'a Allocation]) {
        let batch = job.job_type == JOB_TYPE_BATCH;
        let (mut stack, templates) = self.prepare(job, allocs, false);

        // Allocations by group: the job's groups first, then groups it no longer has.
        let mut by_group: BTreeMap<&'a str, Vec<&'a Allocation>> = BTreeMap::new();
        for &alloc in allocs {
            by_group
                .entry(alloc.task_group.as_str())
                .or_default()
                .push(alloc);
        }
        let mut groups: Vec<(&'a str, Option<usize>)> = Vec::new();
        for (index, tg) in job.task_groups.iter().enumerate() {
            // A (malformed) repeated group name is reconciled once.
            if !groups.iter().any(|(name, _)| *name == tg.name) {
                groups.push((tg.name.as_str(), Some(index)));
            }
        }
        for name in by_group.keys() {
            if job.task_group(name).is_none() {
                groups.push((name, None));
            }
        }

        let snapshot = self.snapshot;
        let key = self.key.clone();
        let eval_id = self.eval.id.as_str();
        let mut changed = HashMap::new();
        let mut results = Vec::new();
        for (name, index) in groups {
            let tg = index.and_then(|index| job.task_groups.get(index));
            let input = GroupInput {
                snapshot,
                job,
                tg,
                batch,
                eval_id,
                now: self.ctx.now,
            };
            let group_allocs = by_group.get(name).map_or(&[][..], Vec::as_slice);
            let policy_of = |alloc: &'a Allocation| policy_of(snapshot, &key, alloc, tg);
            let result =
                reconcile::generic_group(&input, group_allocs, policy_of, |alloc| match index {
                    Some(group) => Self::update_kind(
                        snapshot,
                        &key,
                        job,
                        &mut stack,
                        &mut changed,
                        alloc,
                        group,
                    ),
                    None => Update::Ignore,
                });
            results.push((index, result));
        }

        // Stops, in-place updates and follow-up evaluations first.
        for (_, result) in &results {
            for stop in &result.stops {
                self.stop(Some(&mut stack), stop.alloc, stop.description, stop.lost);
            }
            for alloc in &result.in_place {
                let mut copy = self.updated(alloc);
                copy.job_version = job.version;
                copy.eval_id = self.eval.id.clone();
                self.push_alloc(copy);
            }
            self.followups(job, &result.later);
        }

        // Destructive updates of every group, then the other placements (upstream's order:
        // stopping first frees what the replacements need).
        let mut attempts = Vec::new();
        for (index, result) in &results {
            let Some(group) = *index else { continue };
            for alloc in &result.destructive {
                attempts.push(Attempt {
                    group,
                    index: alloc.index().unwrap_or(0),
                    prev: Some(alloc),
                    kind: AttemptKind::Destructive,
                    only: None,
                });
            }
        }
        for (index, result) in &results {
            let Some(group) = *index else { continue };
            let planned = result.destructive.len() + result.replace.len();
            let planned = i64::try_from(planned).unwrap_or(i64::MAX);
            let fresh = i64::try_from(result.fresh.remaining).unwrap_or(i64::MAX);
            if let Some(tg) = job.task_groups.get(group) {
                self.queued
                    .insert(tg.name.clone(), planned.saturating_add(fresh));
            }
        }
        for attempt in attempts {
            self.attempt(job, &mut stack, &templates, attempt);
        }
        for (index, result) in &mut results {
            let Some(group) = *index else { continue };
            for replace in &result.replace {
                self.attempt(
                    job,
                    &mut stack,
                    &templates,
                    Attempt {
                        group,
                        index: replace.prev.index().unwrap_or(0),
                        prev: Some(replace.prev),
                        kind: AttemptKind::Replace(replace.kind),
                        only: None,
                    },
                );
            }
            while let Some(index) = result.fresh.next_index() {
                let Some(tg) = job.task_groups.get(group) else {
                    break;
                };
                if let Some(metric) = self.failed.get_mut(&tg.name) {
                    // The group already failed: the rest fail alike (coalesced at once).
                    let rest = i64::try_from(result.fresh.remaining)
                        .unwrap_or(i64::MAX)
                        .saturating_add(1);
                    metric.coalesced_failures = metric.coalesced_failures.saturating_add(rest);
                    exhaust_resources(metric, tg, rest);
                    result.fresh.remaining = 0;
                    break;
                }
                self.attempt(
                    job,
                    &mut stack,
                    &templates,
                    Attempt {
                        group,
                        index,
                        prev: None,
                        kind: AttemptKind::New,
                        only: None,
                    },
                );
            }
        }
        self.blocked = !self.failed.is_empty();
    }

    /// System and sysbatch jobs.
    fn system(&mut self, job: &'a Job, allocs: &[&'a Allocation], sysbatch: bool) {
        let (mut stack, templates) = self.prepare(job, allocs, true);
        let snapshot = self.snapshot;
        let key = self.key.clone();
        let mut changed = HashMap::new();
        let ready = Arc::clone(&stack.nodes.ready);
        let result = reconcile::system_job(
            snapshot,
            job,
            sysbatch,
            allocs,
            &ready.nodes,
            |alloc, group| {
                Self::update_kind(snapshot, &key, job, &mut stack, &mut changed, alloc, group)
            },
        );
        for stop in &result.stops {
            self.stop(Some(&mut stack), stop.alloc, stop.description, stop.lost);
        }
        for alloc in &result.in_place {
            let mut copy = self.updated(alloc);
            copy.job_version = job.version;
            copy.eval_id = self.eval.id.clone();
            self.push_alloc(copy);
        }
        for place in &result.place {
            if let Some(tg) = job.task_groups.get(place.group) {
                *self.queued.entry(tg.name.clone()).or_default() += 1;
            }
        }
        let mut filtered: BTreeMap<usize, AllocMetric> = BTreeMap::new();
        for place in &result.place {
            let kind = if place.stop_prev.is_some() {
                AttemptKind::Destructive
            } else {
                AttemptKind::Replace(PlaceKind::Migrate)
            };
            let outcome = self.attempt(
                job,
                &mut stack,
                &templates,
                Attempt {
                    group: place.group,
                    index: 0,
                    prev: place.prev,
                    kind,
                    only: Some(place.position),
                },
            );
            let Some(tg) = job.task_groups.get(place.group) else {
                continue;
            };
            if let Outcome::Filtered(metric) = outcome {
                // Nodes that do not meet the constraints simply do not run the group.
                let queued = self.queued.entry(tg.name.clone()).or_default();
                *queued -= 1;
                let queued = *queued;
                let acc = filtered.entry(place.group).or_default();
                merge_filtered(acc, &metric);
                if queued <= 0 && !result.existing.contains(&place.group) {
                    self.failed.insert(tg.name.clone(), acc.clone());
                }
            }
        }
    }

    /// Places one allocation; reports how it went.
    fn attempt(
        &mut self,
        job: &'a Job,
        stack: &mut Stack<'a>,
        templates: &[Allocation],
        attempt: Attempt<'a>,
    ) -> Outcome {
        let Some(tg) = job.task_groups.get(attempt.group) else {
            return Outcome::Skipped;
        };
        let system = attempt.only.is_some();
        if !system && let Some(metric) = self.failed.get_mut(&tg.name) {
            metric.coalesced_failures = metric.coalesced_failures.saturating_add(1);
            exhaust_resources(metric, tg, 1);
            return Outcome::Skipped;
        }
        if attempt.kind == AttemptKind::Destructive
            && let Some(prev) = attempt.prev
        {
            self.stop(Some(&mut *stack), prev, reconcile::UPDATING, false);
        }

        let mut options = SelectOptions {
            only: attempt.only,
            ..SelectOptions::default()
        };
        if let Some(prev) = attempt.prev {
            if attempt.kind == AttemptKind::Replace(PlaceKind::Reschedule) {
                options.penalty_nodes = reschedule::penalty_nodes(prev);
            }
            let disk = tg.ephemeral_disk.as_ref();
            if !system && disk.is_some_and(|disk| disk.sticky || disk.migrate) {
                options.preferred = stack.nodes.position(&prev.node_id);
            }
        }
        let (found, mut metric) = stack.select(attempt.group, &options);
        metric.nodes_available = stack.nodes.ready.by_dc.clone();
        metric.nodes_in_pool = i64::try_from(stack.nodes.len()).unwrap_or(i64::MAX);

        let Some((position, node)) = found.and_then(|position| {
            let node = Arc::clone(stack.nodes.node(position)?);
            Some((position, node))
        }) else {
            if attempt.kind == AttemptKind::Destructive
                && let Some(prev) = attempt.prev
            {
                self.unstop(Some(&mut *stack), prev);
            }
            if system && metric.nodes_filtered > 0 {
                return Outcome::Filtered(Box::new(metric));
            }
            match self.failed.get_mut(&tg.name) {
                Some(existing) => {
                    existing.coalesced_failures = existing.coalesced_failures.saturating_add(1);
                    exhaust_resources(existing, tg, 1);
                }
                None => {
                    exhaust_resources(&mut metric, tg, 1);
                    self.failed.insert(tg.name.clone(), metric);
                }
            }
            self.blocked = true;
            return Outcome::Failed;
        };

        let Some(template) = templates.get(attempt.group) else {
            return Outcome::Skipped;
        };
        let mut alloc = template.clone();
        alloc.id = new_id(&mut self.rng);
        alloc.name = alloc_name(&job.id, &tg.name, attempt.index);
        alloc.node_id = node.id.clone();
        alloc.node_name = node.name.clone();
        alloc.metrics = metric;
        let ask = stack
            .groups
            .get(attempt.group)
            .and_then(|g| g.ports.clone());
        if let Some(ask) = ask {
            // The node ranked feasible against this very used set, so an offer exists; were
            // it refused anyway, the ports stay 0 and the plan applier's check still holds.
            let used = stack.used_ports(position);
            if let Ok(offer) = ports::assign(&ask, &node, &used, &mut self.rng) {
                stack.place_ports(position, &offer.held);
                offer.apply(&mut alloc);
            }
        }
        if let Some(prev) = attempt.prev {
            alloc.previous_allocation = prev.id.clone();
            match attempt.kind {
                AttemptKind::Replace(PlaceKind::Reschedule) => {
                    let policy = policy_of(self.snapshot, &self.key, prev, Some(tg));
                    alloc.reschedule_tracker =
                        Some(reschedule::next_tracker(prev, policy, self.ctx.now));
                    self.stop(Some(&mut *stack), prev, reconcile::RESCHEDULED, false);
                    self.link_stop(prev, &alloc.id);
                }
                _ => self.link_stop(prev, &alloc.id),
            }
        }
        stack.place(attempt.group, position);
        self.push_alloc(alloc);
        if let Some(queued) = self.queued.get_mut(&tg.name) {
            *queued -= 1;
        }
        Outcome::Placed
    }

    /// Follow-up evaluations for failed allocations to reschedule later, batched within
    /// upstream's window, and the allocations marked with them.
    fn followups(&mut self, job: &Job, later: &[(&'a Allocation, i64)]) {
        let mut later = later.to_vec();
        later.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.id.cmp(&b.0.id)));
        let mut current: Option<(String, i64)> = None;
        for (alloc, at) in later {
            let eval_id = match &current {
                Some((id, start))
                    if at.saturating_sub(*start) < reschedule::BATCHED_FAILED_ALLOC_WINDOW =>
                {
                    id.clone()
                }
                _ => {
                    let id = new_id(&mut self.rng);
                    self.new_evals.push(Evaluation {
                        id: id.clone(),
                        namespace: job.namespace.clone(),
                        priority: self.eval.priority,
                        job_type: job.job_type.clone(),
                        triggered_by: TRIGGER_RETRY_FAILED_ALLOC.to_owned(),
                        job_id: job.id.clone(),
                        job_modify_index: job.modify_index,
                        status: EVAL_STATUS_PENDING.to_owned(),
                        status_description: FOLLOWUP_DESCRIPTION.to_owned(),
                        wait_until: at,
                        previous_eval: self.eval.id.clone(),
                        create_time: self.ctx.now,
                        modify_time: self.ctx.now,
                        ..Evaluation::default()
                    });
                    self.next_eval = id.clone();
                    current = Some((id.clone(), at));
                    id
                }
            };
            let mut copy = self.updated(alloc);
            copy.followup_eval_id = eval_id;
            self.push_alloc(copy);
        }
    }

    /// The plan: the evaluation completed, with queued counts, failures and a blocked
    /// evaluation for what found no node.
    fn finish(mut self, job: Option<&Job>) -> Plan {
        let mut eval = self.eval.clone();
        eval.status = EVAL_STATUS_COMPLETE.to_owned();
        eval.status_description = String::new();
        eval.snapshot_index = self.snapshot.index;
        if let Some(job) = job {
            for tg in &job.task_groups {
                self.queued.entry(tg.name.clone()).or_insert(0);
            }
        }
        for queued in self.queued.values_mut() {
            *queued = (*queued).max(0);
        }
        eval.queued_allocations = std::mem::take(&mut self.queued);
        eval.failed_tg_allocs = self.failed.clone();
        if !self.next_eval.is_empty() {
            eval.next_eval = self.next_eval.clone();
        }
        if self.blocked && !self.failed.is_empty() {
            let id = new_id(&mut self.rng);
            self.new_evals.push(Evaluation {
                id: id.clone(),
                namespace: self.eval.namespace.clone(),
                priority: self.eval.priority,
                job_type: self.eval.job_type.clone(),
                triggered_by: TRIGGER_QUEUED_ALLOCS.to_owned(),
                job_id: self.eval.job_id.clone(),
                job_modify_index: self.eval.job_modify_index,
                status: EVAL_STATUS_BLOCKED.to_owned(),
                status_description: BLOCKED_DESCRIPTION.to_owned(),
                previous_eval: self.eval.id.clone(),
                failed_tg_allocs: self.failed.clone(),
                create_time: self.ctx.now,
                modify_time: self.ctx.now,
                ..Evaluation::default()
            });
            eval.blocked_eval = id;
        }
        Plan {
            eval,
            job_modify_index: job.map_or(0, |job| job.job_modify_index),
            snapshot_index: self.snapshot.index,
            node_allocation: self.node_allocation,
            node_update: self.node_update,
            all_at_once: job.is_some_and(|job| job.all_at_once),
            new_evals: self.new_evals,
        }
    }
}

/// What one placement attempt did.
enum Outcome {
    Placed,
    /// No node: capacity (reported in `FailedTGAllocs`).
    Failed,
    /// System jobs: the node does not meet the group's constraints.
    Filtered(Box<AllocMetric>),
    /// Not attempted (the group already failed, or an inconsistent index).
    Skipped,
}
