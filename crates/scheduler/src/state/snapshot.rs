//! The scheduler's in-memory state: an immutable, cheaply cloned snapshot of every table.
//!
//! A [`Snapshot`] is what readers (HTTP handlers, placement) see: persistent maps (`imbl`)
//! make a clone O(1), so every reader works on a consistent view while the writer prepares the
//! next one. Only the state writer (`state::run_writer`) builds new snapshots, and only after
//! their changes are durable in storage (a new writer may also reload one from storage:
//! `StateStore::catch_up`).
//!
//! Invariants:
//! - `index` is the index of the last committed write; every record's `ModifyIndex` is at most
//!   `index`.
//! - `allocs_by_node`, `allocs_by_job` and `node_usage` always agree with `allocs`:
//!   `node_usage[n]` is the sum of the resources of the non-terminal allocations on node `n`.
//! - `jobs` holds the latest version of each job; `job_versions` every retained version of it
//!   (the latest [`TRACKED_VERSIONS`] per job, plus older ones that non-terminal allocations
//!   still run), including the latest.
//! - `blocked_evals` holds exactly the IDs of the evaluations whose status is `blocked`, and
//!   `evals_by_job` exactly the IDs of each job's evaluations (every status); both change only
//!   through [`Snapshot::insert_eval`] and
//!   [`Snapshot::remove_eval`].

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use crate::structs::{Allocation, Comparable, Evaluation, Job, JobKey, JobSubmission, Node};

/// Versions (and submissions) kept per job, as Nomad's `job_tracked_versions`.
pub(crate) const TRACKED_VERSIONS: usize = 6;

/// Per-table indexes: the index of the last write to each table (Nomad's `X-Nomad-Index`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableIndexes {
    pub jobs: u64,
    pub allocs: u64,
    pub nodes: u64,
    pub evals: u64,
}

/// A consistent view of every scheduler table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub(crate) index: u64,
    /// The store revision that wrote `scheduler/index` for `index` (0 before any write): the
    /// writer's next commit requires it unchanged, so a second writer can never commit on top
    /// of a state it has not seen.
    pub(crate) index_revision: storage::Revision,
    pub(crate) tables: TableIndexes,
    pub(crate) jobs: OrdMap<JobKey, Arc<Job>>,
    pub(crate) job_versions: OrdMap<(JobKey, u64), Arc<Job>>,
    pub(crate) submissions: OrdMap<(JobKey, u64), Arc<JobSubmission>>,
    pub(crate) allocs: OrdMap<String, Arc<Allocation>>,
    pub(crate) allocs_by_node: OrdMap<String, OrdSet<String>>,
    pub(crate) allocs_by_job: OrdMap<JobKey, OrdSet<String>>,
    pub(crate) node_usage: OrdMap<String, Comparable>,
    pub(crate) nodes: OrdMap<String, Arc<Node>>,
    pub(crate) evals: OrdMap<String, Arc<Evaluation>>,
    /// IDs of the evaluations with status `blocked`.
    pub(crate) blocked_evals: OrdSet<String>,
    /// IDs of each job's evaluations.
    pub(crate) evals_by_job: OrdMap<JobKey, OrdSet<String>>,
}

impl Snapshot {
    #[cfg(test)]
    pub(crate) fn job(&self, namespace: &str, id: &str) -> Option<&Arc<Job>> {
        self.jobs.get(&JobKey::new(namespace, id))
    }

    pub(crate) fn job_version(&self, key: &JobKey, version: u64) -> Option<&Arc<Job>> {
        self.job_versions.get(&(key.clone(), version))
    }

    /// Every retained version of a job, newest first.
    pub(crate) fn job_versions_of(&self, key: &JobKey) -> Vec<Arc<Job>> {
        let mut versions: Vec<Arc<Job>> = self
            .job_versions
            .range((key.clone(), 0)..=(key.clone(), u64::MAX))
            .map(|(_, job)| Arc::clone(job))
            .collect();
        versions.reverse();
        versions
    }

    pub(crate) fn alloc(&self, id: &str) -> Option<&Arc<Allocation>> {
        self.allocs.get(id)
    }

    /// The allocations of one node (terminal ones included), in ID order.
    pub(crate) fn allocs_on_node(&self, node_id: &str) -> impl Iterator<Item = &Arc<Allocation>> {
        self.allocs_by_node
            .get(node_id)
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(|id| self.allocs.get(id))
    }

    /// The allocations of one job (every version, terminal ones included), in ID order.
    pub(crate) fn allocs_of_job(&self, key: &JobKey) -> impl Iterator<Item = &Arc<Allocation>> {
        self.allocs_by_job
            .get(key)
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(|id| self.allocs.get(id))
    }

    /// What the non-terminal allocations on a node use.
    pub(crate) fn node_used(&self, node_id: &str) -> Comparable {
        self.node_usage.get(node_id).copied().unwrap_or_default()
    }

    pub(crate) fn node(&self, id: &str) -> Option<&Arc<Node>> {
        self.nodes.get(id)
    }

    pub(crate) fn eval(&self, id: &str) -> Option<&Arc<Evaluation>> {
        self.evals.get(id)
    }

    /// The evaluations of one job (every status), in ID order.
    pub(crate) fn evals_of_job(&self, key: &JobKey) -> impl Iterator<Item = &Arc<Evaluation>> {
        self.evals_by_job
            .get(key)
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(|id| self.evals.get(id))
    }

    /// Inserts or replaces an evaluation, keeping `blocked_evals` and `evals_by_job` in step.
    pub(crate) fn insert_eval(&mut self, eval: Arc<Evaluation>) {
        if eval.status == crate::structs::EVAL_STATUS_BLOCKED {
            self.blocked_evals.insert(eval.id.clone());
        } else {
            self.blocked_evals.remove(&eval.id);
        }
        let key = JobKey::new(&eval.namespace, &eval.job_id);
        let known = self
            .evals_by_job
            .get(&key)
            .is_some_and(|ids| ids.contains(&eval.id));
        if !known {
            self.evals_by_job
                .entry(key)
                .or_default()
                .insert(eval.id.clone());
        }
        self.evals.insert(eval.id.clone(), eval);
    }

    /// Removes an evaluation and its entries in `blocked_evals` and `evals_by_job`.
    pub(crate) fn remove_eval(&mut self, id: &str) -> Option<Arc<Evaluation>> {
        let eval = self.evals.remove(id)?;
        self.blocked_evals.remove(id);
        let key = JobKey::new(&eval.namespace, &eval.job_id);
        if let Some(ids) = self.evals_by_job.get_mut(&key) {
            ids.remove(id);
            if ids.is_empty() {
                self.evals_by_job.remove(&key);
            }
        }
        Some(eval)
    }
}
