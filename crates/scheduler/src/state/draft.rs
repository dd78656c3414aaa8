//! A draft of the next snapshot: the only way the state changes.
//!
//! Every mutation method changes the in-memory tables, keeps the secondary indexes
//! (`allocs_by_node`, `allocs_by_job`, `node_usage`) in step, stamps the table index, and
//! records the storage operation that makes the change durable. The writer commits the
//! recorded operations and only then publishes the draft's snapshot.
//!
//! Transactions: the recorded operations are committed as one storage transaction per
//! *segment*, each within the store's [`TxnLimits`] (etcd's request limits; the embedded store
//! has none, so there a batch is one segment). [`Draft::apply_command`] keeps a command whole
//! in one segment when it fits one, closing the open segment before it ([`Draft::cut`]) if
//! needed; a command too large for any one segment is applied again in *split* mode, where the
//! command itself marks the parts that may be committed apart ([`Draft::unit`]: one allocation
//! of a plan, one client update, one deletion of a garbage collection...). Every segment gets
//! its own index (the index is bumped at each cut), so each committed transaction is the state
//! after a whole sequence of smaller commands: what followers and a restart may see.
//!
//! Invariants: the open segment (the operations after the last cut) is always within the limits
//! once a command is applied; a failed command is rolled back whole, its cuts included, or,
//! when it was applied without a checkpoint (no limits, not careful), the draft is marked
//! tainted and its owner (the writer) rebuilds it carefully before using it; a unit larger than
//! a whole transaction fails its command with a clear error.

use std::sync::Arc;

use imbl::OrdSet;
use storage::{Compare, Op, TxnLimits};

use super::record::encode;
use super::{Snapshot, keys};
use crate::Error;
use crate::structs::{Allocation, Comparable, Evaluation, Job, JobKey, JobSubmission, Node};

#[derive(Debug)]
pub(crate) struct Draft {
    pub(crate) snap: Snapshot,
    pub(crate) ops: Vec<Op>,
    /// Evaluations written with status pending (the broker is told after the commit).
    pub(crate) pending_evals: Vec<Arc<Evaluation>>,
    /// Whether capacity may have been freed or added (blocked evaluations get another run).
    pub(crate) capacity_changed: bool,
    /// The segments closed so far, in order; the open one follows the last.
    pub(crate) cuts: Vec<Cut>,
    /// What one transaction may carry.
    limits: TxnLimits,
    /// Bytes of `ops`, as `limits` counts them.
    bytes: usize,
    /// Whether the command being applied may be cut between its units.
    split: bool,
    /// Whether every command is applied with a checkpoint to roll back to (see
    /// [`Draft::apply_command`]); always so when `limits` are bounded.
    careful: bool,
    /// Whether a command failed without a checkpoint, leaving whatever it changed before it
    /// failed: the draft must not be used, only rebuilt (see [`Draft::apply_command`]).
    tainted: bool,
}

/// The end of a closed segment: one transaction of its own.
#[derive(Debug)]
pub(crate) struct Cut {
    /// Its operations end here in `Draft::ops` (they start where the previous cut's end).
    pub(crate) ops_end: usize,
    bytes_end: usize,
    /// Its pending evaluations end here in `Draft::pending_evals`.
    pub(crate) pending_end: usize,
    /// The state once it is committed (its `index` is the segment's).
    pub(crate) snap: Snapshot,
}

/// A draft's state before a command (O(1): the snapshot's maps are persistent).
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    snap: Snapshot,
    ops: usize,
    bytes: usize,
    cuts: usize,
    pending_evals: usize,
    capacity_changed: bool,
}

impl Draft {
    pub(crate) fn new(snap: Snapshot, limits: TxnLimits) -> Draft {
        Draft {
            snap,
            ops: Vec::new(),
            pending_evals: Vec::new(),
            capacity_changed: false,
            cuts: Vec::new(),
            limits,
            bytes: 0,
            split: false,
            careful: false,
            tainted: false,
        }
    }

    /// What one transaction may carry.
    pub(crate) fn limits(&self) -> TxnLimits {
        self.limits
    }

    /// Applies every later command with a checkpoint (a failed one then changes nothing).
    pub(crate) fn set_careful(&mut self, careful: bool) {
        self.careful = careful;
    }

    /// Whether a command failed without a checkpoint: the draft holds part of its changes and
    /// must be rebuilt from its commands, carefully.
    pub(crate) fn tainted(&self) -> bool {
        self.tainted
    }

    /// Where the draft stands, to roll a failed command back to.
    pub(crate) fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            snap: self.snap.clone(),
            ops: self.ops.len(),
            bytes: self.bytes,
            cuts: self.cuts.len(),
            pending_evals: self.pending_evals.len(),
            capacity_changed: self.capacity_changed,
        }
    }

    pub(crate) fn rollback(&mut self, checkpoint: &Checkpoint) {
        self.snap = checkpoint.snap.clone();
        self.ops.truncate(checkpoint.ops);
        self.bytes = checkpoint.bytes;
        self.cuts.truncate(checkpoint.cuts);
        self.pending_evals.truncate(checkpoint.pending_evals);
        self.capacity_changed = checkpoint.capacity_changed;
    }

    /// The index this draft's writes get (the open segment's).
    pub(crate) fn index(&self) -> u64 {
        self.snap.index
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        let op = Op::Put { key, value };
        self.bytes = self.bytes.saturating_add(self.limits.op_bytes(&op));
        self.ops.push(op);
    }

    fn delete(&mut self, key: Vec<u8>) {
        let op = Op::Delete { key };
        self.bytes = self.bytes.saturating_add(self.limits.op_bytes(&op));
        self.ops.push(op);
    }

    /// Where the open segment starts in `ops`, and its bytes in `bytes`.
    fn open_start(&self) -> (usize, usize) {
        self.cuts
            .last()
            .map_or((0, 0), |cut| (cut.ops_end, cut.bytes_end))
    }

    /// Whether the open segment has no operation.
    pub(crate) fn open_is_empty(&self) -> bool {
        self.ops.len() == self.open_start().0
    }

    /// Whether the open segment, with the writer's fence and index write, is one transaction
    /// the store accepts.
    pub(crate) fn open_fits(&self) -> bool {
        if self.limits.is_unbounded() {
            return true;
        }
        let (ops_start, bytes_start) = self.open_start();
        let ops = self.ops.len() - ops_start + 1;
        let bytes = (self.bytes - bytes_start).saturating_add(fixed_bytes(&self.limits));
        ops <= self.limits.max_ops && bytes <= self.limits.max_bytes
    }

    /// Closes the open segment: it is committed as one transaction with the current index,
    /// and what follows is written with the next.
    pub(crate) fn cut(&mut self) {
        self.cuts.push(Cut {
            ops_end: self.ops.len(),
            bytes_end: self.bytes,
            pending_end: self.pending_evals.len(),
            snap: self.snap.clone(),
        });
        self.snap.index += 1;
    }

    /// Applies one command (`apply`, which may run up to three times): whole in the open
    /// segment if it fits there; else whole in a segment of its own; else split between its
    /// units. A command that fails is rolled back whole.
    ///
    /// Without limits (one segment, nothing to cut) and unless [`Draft::set_careful`] asked
    /// for it, no checkpoint is taken: a checkpoint shares every node of the persistent maps,
    /// so each change after it copies its whole path again (for every command: a leaf of
    /// allocations per placed allocation), where without one a node is copied once per draft.
    /// A command that fails then marks the draft [`Draft::tainted`] (it may have changed part
    /// of the state before failing): its owner rebuilds the draft from its commands, carefully.
    pub(crate) fn apply_command<T>(
        &mut self,
        mut apply: impl FnMut(&mut Draft) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.limits.is_unbounded() && !self.careful {
            let result = apply(self);
            if result.is_err() {
                self.tainted = true;
            }
            return result;
        }
        let checkpoint = self.checkpoint();
        let result = apply(self);
        if result.is_err() {
            self.rollback(&checkpoint);
            return result;
        }
        if self.open_fits() {
            return result;
        }
        self.rollback(&checkpoint);
        if !self.open_is_empty() {
            self.cut();
            match apply(self) {
                Ok(value) if self.open_fits() => return Ok(value),
                Ok(_) => self.rollback(&checkpoint),
                Err(err) => {
                    self.rollback(&checkpoint);
                    return Err(err);
                }
            }
        }
        self.split = true;
        let result = apply(self);
        self.split = false;
        if result.is_ok() && !self.open_fits() {
            self.rollback(&checkpoint);
            return Err(self.too_large());
        }
        if result.is_err() {
            self.rollback(&checkpoint);
        }
        result
    }

    fn too_large(&self) -> Error {
        let (ops_start, bytes_start) = self.open_start();
        Error::BadRequest(format!(
            "a single change is larger than one storage transaction allows \
             ({} operations and {} bytes; the store takes {} and {})",
            self.ops.len() - ops_start,
            self.bytes - bytes_start,
            self.limits.max_ops.saturating_sub(1),
            self.limits
                .max_bytes
                .saturating_sub(fixed_bytes(&self.limits)),
        ))
    }

    /// Runs one part of a command that may be committed apart from the rest of it (in split
    /// mode; otherwise it just runs): if the part makes the open segment too large, it is
    /// undone, the segment closed before it, and it runs again at the start of the next.
    pub(crate) fn unit<T>(
        &mut self,
        mut part: impl FnMut(&mut Draft) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if !self.split {
            return part(self);
        }
        let checkpoint = self.checkpoint();
        let was_empty = self.open_is_empty();
        let value = part(self)?;
        if self.open_fits() {
            return Ok(value);
        }
        if !was_empty {
            self.rollback(&checkpoint);
            self.cut();
            let value = part(self)?;
            if self.open_fits() {
                return Ok(value);
            }
        }
        let err = self.too_large();
        self.rollback(&checkpoint);
        Err(err)
    }

    /// Stores a job version and makes it the latest.
    pub(crate) fn put_job(&mut self, job: Job) -> Result<Arc<Job>, Error> {
        let key = job.key();
        self.put(keys::job_version(&key, job.version), encode(&job)?);
        let job = Arc::new(job);
        self.snap
            .job_versions
            .insert((key.clone(), job.version), Arc::clone(&job));
        self.snap.jobs.insert(key.clone(), Arc::clone(&job));
        self.snap.tables.jobs = self.index();
        self.trim_versions(&key);
        Ok(job)
    }

    /// Drops versions (and submissions) beyond the retained count, oldest first, except
    /// versions that non-terminal allocations still run.
    fn trim_versions(&mut self, key: &JobKey) {
        let versions: Vec<u64> = self
            .snap
            .job_versions
            .range((key.clone(), 0)..=(key.clone(), u64::MAX))
            .map(|((_, version), _)| *version)
            .collect();
        let excess = versions.len().saturating_sub(super::TRACKED_VERSIONS);
        if excess == 0 {
            return;
        }
        // A version a live allocation still runs stays: its client needs the job.
        let in_use: std::collections::BTreeSet<u64> = self
            .snap
            .allocs_of_job(key)
            .filter(|alloc| !alloc.terminal())
            .map(|alloc| alloc.job_version)
            .collect();
        for version in versions
            .into_iter()
            .take(excess)
            .filter(|version| !in_use.contains(version))
        {
            self.snap.job_versions.remove(&(key.clone(), version));
            self.delete(keys::job_version(key, version));
            if self
                .snap
                .submissions
                .remove(&(key.clone(), version))
                .is_some()
            {
                self.delete(keys::submission(key, version));
            }
        }
    }

    /// Removes a job and its versions and submissions (purge). Allocations stay, and so do
    /// the versions they run (as in Nomad, where each allocation keeps its own copy of the
    /// job): they are no longer the job's versions, only what its allocations show. Returns
    /// how many versions went.
    pub(crate) fn purge_job(&mut self, key: &JobKey) -> usize {
        self.snap.jobs.remove(key);
        let referenced: std::collections::BTreeSet<u64> = self
            .snap
            .allocs_of_job(key)
            .map(|alloc| alloc.job_version)
            .collect();
        let versions: Vec<u64> = self
            .snap
            .job_versions
            .range((key.clone(), 0)..=(key.clone(), u64::MAX))
            .map(|((_, version), _)| *version)
            .filter(|version| !referenced.contains(version))
            .collect();
        let removed = versions.len();
        for version in versions {
            self.snap.job_versions.remove(&(key.clone(), version));
            self.delete(keys::job_version(key, version));
            if self
                .snap
                .submissions
                .remove(&(key.clone(), version))
                .is_some()
            {
                self.delete(keys::submission(key, version));
            }
        }
        self.snap.tables.jobs = self.index();
        removed
    }

    pub(crate) fn put_submission(&mut self, submission: JobSubmission) -> Result<(), Error> {
        let key = JobKey::new(&submission.namespace, &submission.job_id);
        self.put(
            keys::submission(&key, submission.version),
            encode(&submission)?,
        );
        self.snap
            .submissions
            .insert((key, submission.version), Arc::new(submission));
        Ok(())
    }

    /// Inserts or replaces an allocation, keeping the node and job indexes and the node's
    /// usage in step.
    pub(crate) fn put_alloc(&mut self, alloc: Allocation) -> Result<Arc<Allocation>, Error> {
        let mut alloc = Arc::new(alloc);
        self.put_alloc_shared(&mut alloc)?;
        Ok(alloc)
    }

    /// [`Draft::put_alloc`] of a shared allocation: its indexes are set in place (copied
    /// first only if another holder shares it) and the state stores that very `Arc`.
    pub(crate) fn put_alloc_shared(&mut self, shared: &mut Arc<Allocation>) -> Result<(), Error> {
        let index = self.index();
        let alloc = Arc::make_mut(shared);
        alloc.job = None;
        let old = self.snap.allocs.get(&alloc.id).cloned();
        match &old {
            Some(old) => {
                alloc.create_index = old.create_index;
                if alloc.create_time == 0 {
                    alloc.create_time = old.create_time;
                }
            }
            None => {
                alloc.create_index = index;
                alloc.alloc_modify_index = index;
            }
        }
        alloc.modify_index = index;
        self.put(keys::alloc(alloc.create_index, &alloc.id), encode(&*alloc)?);
        let alloc = Arc::clone(shared);
        if let Some(old) = &old {
            if !old.terminal() {
                self.change_usage(&old.node_id, |usage| {
                    usage.subtract(&old.allocated_resources.comparable());
                });
            }
            if old.terminal() != alloc.terminal() {
                self.capacity_changed = true;
            }
        }
        if !alloc.terminal() {
            self.change_usage(&alloc.node_id, |usage| {
                usage.add(&alloc.allocated_resources.comparable());
            });
        }
        // Each index changed in one descent where the entry exists (a lookup and then an
        // insert or entry would walk the persistent map twice).
        match self.snap.allocs_by_node.get_mut(&alloc.node_id) {
            Some(ids) => {
                ids.insert(alloc.id.clone());
            }
            None => {
                self.snap
                    .allocs_by_node
                    .insert(alloc.node_id.clone(), OrdSet::unit(alloc.id.clone()));
            }
        }
        let job = JobKey::new(&alloc.namespace, &alloc.job_id);
        match self.snap.allocs_by_job.get_mut(&job) {
            Some(ids) => {
                ids.insert(alloc.id.clone());
            }
            None => {
                self.snap
                    .allocs_by_job
                    .insert(job, OrdSet::unit(alloc.id.clone()));
            }
        }
        self.snap.allocs.insert(alloc.id.clone(), alloc);
        self.snap.tables.allocs = index;
        Ok(())
    }

    /// Changes what a node's live allocations use (from nothing if it had none).
    fn change_usage(&mut self, node_id: &str, change: impl FnOnce(&mut Comparable)) {
        match self.snap.node_usage.get_mut(node_id) {
            Some(usage) => change(usage),
            None => {
                let mut usage = Comparable::default();
                change(&mut usage);
                self.snap.node_usage.insert(node_id.to_owned(), usage);
            }
        }
    }

    pub(crate) fn put_node(&mut self, mut node: Node) -> Result<Arc<Node>, Error> {
        let index = self.index();
        match self.snap.nodes.get(&node.id) {
            Some(old) => node.create_index = old.create_index,
            None => node.create_index = index,
        }
        node.modify_index = index;
        self.put(keys::node(&node.id), encode(&node)?);
        let node = Arc::new(node);
        self.snap.nodes.insert(node.id.clone(), Arc::clone(&node));
        self.snap.tables.nodes = index;
        Ok(node)
    }

    pub(crate) fn put_eval(&mut self, mut eval: Evaluation) -> Result<Arc<Evaluation>, Error> {
        let index = self.index();
        match self.snap.evals.get(&eval.id) {
            Some(old) => eval.create_index = old.create_index,
            None => eval.create_index = index,
        }
        eval.modify_index = index;
        self.put(keys::eval(eval.create_index, &eval.id), encode(&eval)?);
        let eval = Arc::new(eval);
        self.snap.insert_eval(Arc::clone(&eval));
        self.snap.tables.evals = index;
        if eval.status == crate::structs::EVAL_STATUS_PENDING {
            self.pending_evals.push(Arc::clone(&eval));
        }
        Ok(eval)
    }

    /// Removes an allocation (garbage collection: only terminal ones), keeping the node and
    /// job indexes and the node's usage in step.
    pub(crate) fn delete_alloc(&mut self, id: &str) {
        let Some(old) = self.snap.allocs.remove(id) else {
            return;
        };
        self.delete(keys::alloc(old.create_index, &old.id));
        if !old.terminal() {
            let mut usage = self.snap.node_used(&old.node_id);
            usage.subtract(&old.allocated_resources.comparable());
            self.snap.node_usage.insert(old.node_id.clone(), usage);
            self.capacity_changed = true;
        }
        if let Some(ids) = self.snap.allocs_by_node.get_mut(&old.node_id) {
            ids.remove(id);
            if ids.is_empty() {
                self.snap.allocs_by_node.remove(&old.node_id);
            }
        }
        let key = JobKey::new(&old.namespace, &old.job_id);
        if let Some(ids) = self.snap.allocs_by_job.get_mut(&key) {
            ids.remove(id);
            if ids.is_empty() {
                self.snap.allocs_by_job.remove(&key);
            }
        }
        self.snap.tables.allocs = self.index();
    }

    /// Removes an evaluation (garbage collection: only terminal ones).
    pub(crate) fn delete_eval(&mut self, id: &str) {
        let Some(old) = self.snap.remove_eval(id) else {
            return;
        };
        self.delete(keys::eval(old.create_index, &old.id));
        self.snap.tables.evals = self.index();
    }

    /// Removes a node (garbage collection: only down nodes with nothing live on them).
    pub(crate) fn delete_node(&mut self, id: &str) {
        if self.snap.nodes.remove(id).is_none() {
            return;
        }
        self.delete(keys::node(id));
        self.snap.node_usage.remove(id);
        self.snap.tables.nodes = self.index();
    }
}

/// What every transaction of the writer carries beyond its segment: the fence compare on
/// `scheduler/index` and the write of the new index.
fn fixed_bytes(limits: &TxnLimits) -> usize {
    let index = keys::INDEX.as_bytes().to_vec();
    limits
        .compare_bytes(&Compare::ModRevision(index.clone(), 0))
        .saturating_add(limits.op_bytes(&Op::Put {
            key: index,
            value: vec![b'0'; 20],
        }))
}
