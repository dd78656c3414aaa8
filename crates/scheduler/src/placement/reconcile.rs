//! Reconciliation: what a job wants versus the allocations it has (Nomad's
//! `scheduler/reconciler`: `reconcile_cluster.go` for service and batch groups,
//! `reconcile_node.go` for system jobs).
//!
//! For one group of a service or batch job the allocations are classified into untainted,
//! lost (node down or gone), migrating (`DesiredTransition.Migrate`), to reschedule now or
//! later (failed, per `ReschedulePolicy`) and ignored (already stopped, or complete for
//! services); the result says what to stop (lost, extras above `Count` highest index first),
//! what to update in place or destructively, and what to place (replacements keep the old
//! name; new allocations take the lowest free indexes).
//!
//! Invariants: pure decisions over the snapshot (no placement happens here); every list is in
//! a deterministic order (allocations come in ID order, stops of extras in index order);
//! absurd counts cost nothing (new names are produced lazily).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::reschedule::{self, Decision};
use crate::state::Snapshot;
use crate::structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_EVICT, ALLOC_DESIRED_STOP, Allocation, Job, NODE_STATUS_DOWN, Node,
    ReschedulePolicy, TaskGroup,
};

pub(super) const NOT_NEEDED: &str = "alloc not needed due to job update";
pub(super) const MIGRATING: &str = "alloc is being migrated";
pub(super) const UPDATING: &str = "alloc is being updated due to job update";
pub(super) const LOST: &str = "alloc is lost since its node is down";
pub(super) const RESCHEDULED: &str = "alloc was rescheduled because it failed";

/// How an allocation of an older job version follows the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Update {
    /// Nothing to do (same version, or terminal).
    Ignore,
    /// Same definition where it matters: the allocation moves to the new version as is.
    InPlace,
    /// Stop it and place a replacement.
    Destructive,
}

/// An allocation to stop.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stop<'a> {
    pub(super) alloc: &'a Allocation,
    pub(super) description: &'static str,
    /// Its node is down or gone: client status becomes `lost`.
    pub(super) lost: bool,
}

/// Why a replacement is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlaceKind {
    /// A failed allocation rescheduled now (its stop waits for a successful placement).
    Reschedule,
    /// An allocation of a lost node (already stopped).
    Lost,
    /// An allocation being migrated (already stopped).
    Migrate,
}

/// A replacement for an existing allocation (same name).
#[derive(Debug, Clone, Copy)]
pub(super) struct Replace<'a> {
    pub(super) prev: &'a Allocation,
    pub(super) kind: PlaceKind,
}

/// New allocation names: the lowest indexes not taken, produced lazily.
#[derive(Debug, Default)]
pub(super) struct FreshNames {
    taken: BTreeSet<u64>,
    cursor: u64,
    /// How many names are still wanted.
    pub(super) remaining: u64,
}

impl FreshNames {
    /// The next free index, if any is still wanted.
    pub(super) fn next_index(&mut self) -> Option<u64> {
        if self.remaining == 0 {
            return None;
        }
        while self.taken.contains(&self.cursor) {
            self.cursor = self.cursor.saturating_add(1);
        }
        let index = self.cursor;
        self.cursor = self.cursor.saturating_add(1);
        self.remaining -= 1;
        Some(index)
    }
}

/// The reconciliation of one group of a service or batch job.
#[derive(Debug, Default)]
pub(super) struct GroupResult<'a> {
    /// Stops applied before any placement (lost, migrating, extras, unneeded groups).
    pub(super) stops: Vec<Stop<'a>>,
    pub(super) in_place: Vec<&'a Allocation>,
    pub(super) destructive: Vec<&'a Allocation>,
    pub(super) replace: Vec<Replace<'a>>,
    pub(super) fresh: FreshNames,
    /// Failed allocations to reschedule later, with the time.
    pub(super) later: Vec<(&'a Allocation, i64)>,
}

/// Whether the allocation's node is down or gone.
pub(super) fn node_lost(snapshot: &Snapshot, alloc: &Allocation) -> bool {
    snapshot
        .node(&alloc.node_id)
        .is_none_or(|node| node.status == NODE_STATUS_DOWN)
}

/// Stops for every non-terminal allocation (job stopped or gone, group removed).
pub(super) fn stop_all<'a>(snapshot: &Snapshot, allocs: &[&'a Allocation]) -> Vec<Stop<'a>> {
    allocs
        .iter()
        .filter(|alloc| !alloc.terminal())
        .map(|alloc| {
            let lost = node_lost(snapshot, alloc);
            Stop {
                alloc,
                description: if lost { LOST } else { NOT_NEEDED },
                lost,
            }
        })
        .collect()
}

/// Upstream's `shouldFilter`.
enum Filter {
    /// Counts toward the group as it is.
    Untainted,
    /// Not considered at all.
    Ignore,
    /// Failed: rescheduling decides.
    Consider,
}

fn should_filter(alloc: &Allocation, batch: bool) -> Filter {
    if batch {
        if alloc.desired_transition.reschedule == Some(true) {
            return Filter::Consider;
        }
        match alloc.desired_status.as_str() {
            ALLOC_DESIRED_STOP => {
                return if alloc.client_status == ALLOC_CLIENT_COMPLETE {
                    Filter::Untainted
                } else {
                    Filter::Ignore
                };
            }
            ALLOC_DESIRED_EVICT => return Filter::Ignore,
            _ => {}
        }
        return if alloc.client_status == ALLOC_CLIENT_FAILED {
            Filter::Consider
        } else {
            Filter::Untainted
        };
    }
    if alloc.server_terminal() {
        return Filter::Ignore;
    }
    match alloc.client_status.as_str() {
        ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_LOST => Filter::Ignore,
        _ => Filter::Consider,
    }
}

/// Inputs of [`generic_group`] besides the allocations.
pub(super) struct GroupInput<'a, 'e> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) job: &'a Job,
    pub(super) tg: Option<&'a TaskGroup>,
    pub(super) batch: bool,
    pub(super) eval_id: &'e str,
    pub(super) now: i64,
}

/// Reconciles one group of a service or batch job. `allocs` are the group's allocations (any
/// version), `policy_of` gives the reschedule policy an allocation runs under, `update` how
/// an allocation of another version follows the job.
pub(super) fn generic_group<'a>(
    input: &GroupInput<'a, '_>,
    allocs: &[&'a Allocation],
    policy_of: impl Fn(&'a Allocation) -> Option<&'a ReschedulePolicy>,
    mut update: impl FnMut(&'a Allocation) -> Update,
) -> GroupResult<'a> {
    let batch = input.batch;
    let mut result = GroupResult::default();
    // Server-terminal allocations are done with, except batch ones (a completed batch
    // allocation keeps its slot).
    let all: Vec<&'a Allocation> = allocs
        .iter()
        .copied()
        .filter(|alloc| {
            !alloc.server_terminal() || (batch && alloc.desired_transition.reschedule != Some(true))
        })
        .collect();
    let Some(tg) = input.tg.filter(|tg| tg.count > 0) else {
        result.stops = stop_all(input.snapshot, &all);
        return result;
    };
    let count = u64::try_from(tg.count).unwrap_or(0);

    // Batch: terminal allocations of older versions are history.
    let all = all
        .into_iter()
        .filter(|alloc| !(batch && alloc.terminal() && alloc.job_version < input.job.version));

    let mut untainted = Vec::new();
    let mut migrate = Vec::new();
    let mut lost = Vec::new();
    for alloc in all {
        if alloc.terminal() {
            untainted.push(alloc);
        } else if node_lost(input.snapshot, alloc) {
            lost.push(alloc);
        } else if alloc.desired_transition.migrate == Some(true) {
            migrate.push(alloc);
        } else {
            untainted.push(alloc);
        }
    }

    // Rescheduling of failed allocations.
    let mut kept = Vec::new();
    let mut reschedule_now = Vec::new();
    for alloc in untainted {
        if !alloc.next_allocation.is_empty() && alloc.terminal() {
            continue;
        }
        match should_filter(alloc, batch) {
            Filter::Untainted => {
                kept.push(alloc);
                continue;
            }
            Filter::Ignore => continue,
            Filter::Consider => {}
        }
        if alloc.desired_transition.force_reschedule == Some(true) && alloc.client_terminal() {
            reschedule_now.push(alloc);
            continue;
        }
        match reschedule::decide(alloc, policy_of(alloc), input.eval_id, input.now) {
            Decision::Now => reschedule_now.push(alloc),
            Decision::Later(at) => {
                kept.push(alloc);
                result.later.push((alloc, at));
            }
            Decision::Never => kept.push(alloc),
        }
    }
    let mut untainted = kept;

    let mut taken: BTreeSet<u64> = untainted
        .iter()
        .chain(&migrate)
        .chain(&reschedule_now)
        .chain(&lost)
        .filter_map(|alloc| alloc.index())
        .collect();

    // Stops: lost allocations, then extras above the count.
    for alloc in &lost {
        result.stops.push(Stop {
            alloc,
            description: LOST,
            lost: true,
        });
    }
    let known = untainted
        .iter()
        .filter(|alloc| alloc.client_status != ALLOC_CLIENT_UNKNOWN)
        .count() as u64;
    let mut remove = (known + migrate.len() as u64).saturating_sub(count);
    if remove > 0 {
        let by_index_desc = |a: &&'a Allocation, b: &&'a Allocation| {
            b.index().cmp(&a.index()).then_with(|| a.id.cmp(&b.id))
        };
        // Migrating allocations go first.
        migrate.sort_by(by_index_desc);
        let from_migrating = migrate
            .len()
            .min(usize::try_from(remove).unwrap_or(usize::MAX));
        for alloc in migrate.drain(..from_migrating) {
            if let Some(index) = alloc.index() {
                taken.remove(&index);
            }
            result.stops.push(Stop {
                alloc,
                description: NOT_NEEDED,
                lost: false,
            });
            remove -= 1;
        }
        let mut working: Vec<&'a Allocation> = untainted
            .iter()
            .copied()
            .filter(|alloc| !alloc.server_terminal())
            .collect();
        working.sort_by(by_index_desc);
        let mut stopped = HashSet::new();
        for alloc in working
            .into_iter()
            .take(usize::try_from(remove).unwrap_or(usize::MAX))
        {
            stopped.insert(alloc.id.as_str());
            result.stops.push(Stop {
                alloc,
                description: NOT_NEEDED,
                lost: false,
            });
        }
        untainted.retain(|alloc| !stopped.contains(alloc.id.as_str()));
    }

    // Updates of allocations of other versions.
    for alloc in &untainted {
        match update(alloc) {
            Update::Ignore => {}
            Update::InPlace => result.in_place.push(alloc),
            Update::Destructive => result.destructive.push(alloc),
        }
    }
    result
        .destructive
        .sort_by_key(|alloc| (alloc.index(), alloc.id.as_str()));
    // An allocation stopped or replaced now needs no follow-up.
    if !result.later.is_empty() {
        let gone: HashSet<&str> = result
            .destructive
            .iter()
            .map(|alloc| alloc.id.as_str())
            .chain(result.stops.iter().map(|stop| stop.alloc.id.as_str()))
            .collect();
        result
            .later
            .retain(|(alloc, _)| !gone.contains(alloc.id.as_str()));
    }

    // Placements: failed allocations rescheduled now, lost ones up to the count, migrations,
    // then new names; never more than the count.
    let mut existing = (untainted.len() + migrate.len() + reschedule_now.len()) as u64;
    for alloc in &reschedule_now {
        result.replace.push(Replace {
            prev: alloc,
            kind: PlaceKind::Reschedule,
        });
    }
    for alloc in &lost {
        if existing >= count {
            break;
        }
        existing += 1;
        result.replace.push(Replace {
            prev: alloc,
            kind: PlaceKind::Lost,
        });
    }
    migrate.sort_by_key(|alloc| (alloc.index(), alloc.id.as_str()));
    for alloc in &migrate {
        result.stops.push(Stop {
            alloc,
            description: MIGRATING,
            lost: false,
        });
        result.replace.push(Replace {
            prev: alloc,
            kind: PlaceKind::Migrate,
        });
    }
    result
        .replace
        .truncate(usize::try_from(count).unwrap_or(usize::MAX));
    let fresh = count
        .saturating_sub(existing)
        .min(count.saturating_sub(result.replace.len() as u64));
    result.fresh = FreshNames {
        taken,
        cursor: 0,
        remaining: fresh,
    };
    result
}

/// One allocation a system job wants on a node.
#[derive(Debug, Clone, Copy)]
pub(super) struct SystemPlace<'a> {
    /// Index of the group in the job.
    pub(super) group: usize,
    /// Position of the node in the run's node set.
    pub(super) position: usize,
    /// The allocation it replaces, if any.
    pub(super) prev: Option<&'a Allocation>,
    /// The replaced allocation is stopped only if the placement succeeds (destructive
    /// update); otherwise it was already stopped or is terminal.
    pub(super) stop_prev: Option<&'static str>,
}

/// The reconciliation of a system (or sysbatch) job.
#[derive(Debug, Default)]
pub(super) struct SystemResult<'a> {
    pub(super) stops: Vec<Stop<'a>>,
    pub(super) in_place: Vec<&'a Allocation>,
    pub(super) place: Vec<SystemPlace<'a>>,
    /// Groups with an allocation kept somewhere (for the failed-placement report).
    pub(super) existing: BTreeSet<usize>,
}

/// Reconciles a system job: one allocation per group on every ready node of its pool and
/// datacenters. `nodes` are those nodes in ID order (positions of the run's node set);
/// `update` as in [`generic_group`], with the group's index.
pub(super) fn system_job<'a>(
    snapshot: &'a Snapshot,
    job: &'a Job,
    sysbatch: bool,
    allocs: &[&'a Allocation],
    nodes: &[Arc<Node>],
    mut update: impl FnMut(&'a Allocation, usize) -> Update,
) -> SystemResult<'a> {
    let mut result = SystemResult::default();
    let position = |node_id: &str| {
        nodes
            .binary_search_by(|node| node.id.as_str().cmp(node_id))
            .ok()
    };
    // Required names: system groups run one allocation per node (count is 0 or 1).
    let mut required: Vec<(String, usize)> = Vec::new();
    for (group, tg) in job.task_groups.iter().enumerate() {
        let name = crate::structs::alloc_name(&job.id, &tg.name, 0);
        if tg.count > 0 && !required.iter().any(|(other, _)| *other == name) {
            required.push((name, group));
        }
    }
    let mut live: BTreeSet<(&'a str, &'a str)> = BTreeSet::new();
    let mut terminal: BTreeMap<(&'a str, &'a str), &'a Allocation> = BTreeMap::new();
    for alloc in allocs.iter().copied() {
        if alloc.terminal() {
            let key = (alloc.node_id.as_str(), alloc.name.as_str());
            let newer = terminal
                .get(&key)
                .is_none_or(|other| other.create_index <= alloc.create_index);
            if newer {
                terminal.insert(key, alloc);
            }
            continue;
        }
        live.insert((alloc.node_id.as_str(), alloc.name.as_str()));
        let Some(group) = required
            .iter()
            .find(|(name, _)| *name == alloc.name)
            .map(|(_, group)| *group)
        else {
            result.stops.push(Stop {
                alloc,
                description: NOT_NEEDED,
                lost: false,
            });
            continue;
        };
        let node_position = position(&alloc.node_id);
        if alloc.desired_transition.migrate == Some(true) {
            result.stops.push(Stop {
                alloc,
                description: MIGRATING,
                lost: false,
            });
            if let Some(position) = node_position {
                result.place.push(SystemPlace {
                    group,
                    position,
                    prev: Some(alloc),
                    stop_prev: None,
                });
            }
            continue;
        }
        if node_lost(snapshot, alloc) {
            result.stops.push(Stop {
                alloc,
                description: LOST,
                lost: true,
            });
            continue;
        }
        let Some(position) = node_position else {
            // A node that is not ready keeps an up-to-date allocation; a ready node outside
            // the job's pool or datacenters does not.
            let ready = snapshot
                .node(&alloc.node_id)
                .is_some_and(|node| node.ready_for_placement());
            if ready || alloc.job_version != job.version {
                result.stops.push(Stop {
                    alloc,
                    description: NOT_NEEDED,
                    lost: false,
                });
            } else {
                result.existing.insert(group);
            }
            continue;
        };
        match update(alloc, group) {
            Update::Ignore => {
                result.existing.insert(group);
            }
            Update::InPlace => {
                result.existing.insert(group);
                result.in_place.push(alloc);
            }
            Update::Destructive => result.place.push(SystemPlace {
                group,
                position,
                prev: Some(alloc),
                stop_prev: Some(UPDATING),
            }),
        }
    }
    for (position, node) in nodes.iter().enumerate() {
        for (name, group) in &required {
            if live.contains(&(node.id.as_str(), name.as_str())) {
                continue;
            }
            let previous = terminal.get(&(node.id.as_str(), name.as_str())).copied();
            if sysbatch
                && let Some(done) = previous
                && done.job_version == job.version
            {
                // A finished sysbatch allocation is not run again until the job changes.
                result.existing.insert(*group);
                continue;
            }
            result.place.push(SystemPlace {
                group: *group,
                position,
                prev: previous,
                stop_prev: None,
            });
        }
    }
    result
}
