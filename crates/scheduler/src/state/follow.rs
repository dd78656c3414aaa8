//! Following the store: how a server that does not lead keeps its snapshot equal to what the
//! leader's writer commits, from the store's watch on the `scheduler/` prefix.
//!
//! Where it sits: `crate::ha` runs [`StateStore::follow`] while this server does not lead (and
//! drops it before a writer starts, so only one of them publishes snapshots at a time). The
//! writer commits each batch as one storage transaction that also writes `scheduler/index`;
//! the follower gathers the events of one store revision (one batch) and applies them to a
//! copy of the current snapshot in one go, then publishes it, so readers and blocking queries
//! see a whole batch or none of it.
//!
//! Invariants:
//! - Applying an event is idempotent (a put replaces the record and its share of the secondary
//!   indexes; a delete of an absent record does nothing), so a watch may start at any revision
//!   at or before the one the snapshot was loaded at.
//! - The snapshot's `index` and table indexes never go backwards: a batch stamps each table it
//!   changes with the batch's index, as the writer does.
//! - Secondary indexes (`allocs_by_node`, `allocs_by_job`, `node_usage`, `blocked_evals`,
//!   `evals_by_job`, `jobs` as the latest version) stay as the writer keeps them.
//! - A purge that leaves every version in place (allocations still reference them) shows in
//!   a batch only as a deregistration evaluation created with the batch's index and no job
//!   write; the follower drops the job then, as the writer did.
//! - Keys outside the snapshot's tables (ACL, namespaces) are ignored: they are read from the
//!   store per request on every server.
//! - A watch that fails (compaction, a broken connection) or that is seen to lag behind the
//!   stored index for several checks in a row is replaced by a full reload, so the follower
//!   never stays silently stale.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use storage::{Event, EventKind, KeyRange, Revision, Storage};

use super::{Snapshot, StateStore, keys, load};

/// Every key the snapshot's tables live under (ACL and namespace keys too, which are skipped).
const PREFIX: &str = "scheduler/";
use crate::Error;
use crate::structs::{
    Allocation, Evaluation, Job, JobKey, JobSubmission, Node, TRIGGER_JOB_DEREGISTER,
};

/// How long the follower waits for an event before it checks the stored index itself.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long the check of the stored index may take before it counts as a lagging one.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks in a row that may find the stored index ahead of the snapshot before the follower
/// reloads (an event in flight explains one; several mean the watch is stuck).
const STALE_CHECKS: u32 = 3;

/// The pause before a failed watch or reload is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(500);

impl StateStore {
    /// Keeps the snapshot equal to the store until the future is dropped (it never returns on
    /// its own). `from`: the revision the current snapshot was loaded at, or `None` to reload
    /// first. `contact` is called each time the follower knows it is up to date with the
    /// store (an applied batch, or a check that found nothing new).
    pub(crate) async fn follow(&self, from: Option<Revision>, contact: impl Fn()) {
        let mut after = from;
        loop {
            let start = match after.take() {
                Some(revision) => revision,
                None => match self.reload().await {
                    Ok(revision) => revision,
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot reload the scheduler state");
                        tokio::time::sleep(RETRY_AFTER).await;
                        continue;
                    }
                },
            };
            contact();
            match self.follow_from(start, &contact).await {
                // The watch broke but everything up to `revision` is applied: watch again
                // from there.
                Ok(revision) => after = Some(revision),
                Err(err) => {
                    tracing::warn!(error = %err, "the scheduler state's watch failed; reloading");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }

    /// Loads every table again and publishes the result; the revision it was loaded at (a
    /// watch from there misses nothing: the load read at or after it).
    async fn reload(&self) -> Result<Revision, Error> {
        let storage = self.inner.storage.as_ref();
        let revision = storage.revision().await?;
        let snapshot = load::load(storage).await?;
        self.inner.current.send_replace(Arc::new(snapshot));
        Ok(revision)
    }

    /// Applies the watch's batches from `after` on. `Ok(revision)`: the stream ended after
    /// `revision` was applied; `Err`: reload (compaction, or the watch lagging).
    async fn follow_from(&self, after: Revision, contact: &impl Fn()) -> Result<Revision, Error> {
        let storage: &dyn Storage = self.inner.storage.as_ref();
        let mut stream = storage
            .watch(KeyRange::prefix(PREFIX.as_bytes()), after)
            .await?;
        let mut applied = after;
        let mut stale_checks = 0;
        let mut next = None;
        loop {
            let first = match next.take() {
                Some(event) => event,
                None => match tokio::time::timeout(CHECK_EVERY, stream.next()).await {
                    Ok(Some(event)) => event?,
                    Ok(None) => return Ok(applied),
                    Err(_) => {
                        // A store that does not answer the check counts as a lagging one.
                        let stored =
                            match tokio::time::timeout(CHECK_TIMEOUT, self.stored_index()).await {
                                Ok(stored) => Some(stored?),
                                Err(_) => None,
                            };
                        if stored == Some(self.snapshot().index) {
                            stale_checks = 0;
                            contact();
                        } else {
                            stale_checks += 1;
                            if stale_checks >= STALE_CHECKS {
                                return Err(Error::Internal(
                                    "the watch lags behind the stored index".to_owned(),
                                ));
                            }
                        }
                        continue;
                    }
                },
            };
            // Every event of this revision that is already here (a batch arrives whole).
            let revision = first.revision;
            let mut batch = vec![first];
            let mut failed = None;
            while let Some(ready) = stream.next().now_or_never() {
                match ready {
                    Some(Ok(event)) if event.revision == revision => batch.push(event),
                    Some(Ok(event)) => {
                        next = Some(event);
                        break;
                    }
                    Some(Err(err)) => {
                        failed = Some(err);
                        break;
                    }
                    None => break,
                }
            }
            let mut snapshot = (*self.snapshot()).clone();
            apply_batch(&mut snapshot, &batch);
            self.inner.current.send_replace(Arc::new(snapshot));
            applied = revision;
            stale_checks = 0;
            contact();
            if let Some(err) = failed {
                return Err(err.into());
            }
        }
    }

    /// Waits (at most `within`) until the snapshot holds every batch committed so far: after
    /// a write forwarded to the leader, so the caller's next read here sees it.
    pub(crate) async fn wait_caught_up(&self, within: Duration) {
        let caught_up = async {
            let Ok(stored) = self.stored_index().await else {
                return;
            };
            let mut current = self.subscribe();
            let _ = current.wait_for(|snap| snap.index >= stored).await;
        };
        let _ = tokio::time::timeout(within, caught_up).await;
    }

    /// The index the last committed batch wrote (0 before any).
    async fn stored_index(&self) -> Result<u64, Error> {
        let stored = self.inner.storage.get(keys::INDEX.as_bytes()).await?;
        Ok(stored.map_or(0, |kv| parse_index(&kv.value)))
    }
}

fn parse_index(value: &[u8]) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// Applies the events of one committed batch (one store revision) to `snap`.
pub(super) fn apply_batch(snap: &mut Snapshot, events: &[Event]) {
    // The batch's index first: deletes stamp their table with it.
    for event in events {
        if event.kind == EventKind::Put && event.key == keys::INDEX.as_bytes() {
            snap.index = snap.index.max(parse_index(&event.value));
            snap.index_revision = snap.index_revision.max(event.revision);
        }
    }
    let mut jobs_written = std::collections::HashSet::new();
    let mut deregistered = Vec::new();
    for event in events {
        match apply_event(snap, event) {
            Ok(Applied::Job(key)) => {
                jobs_written.insert(key);
            }
            Ok(Applied::Deregistered(key)) => deregistered.push(key),
            Ok(Applied::Other) => {}
            Err(err) => {
                tracing::error!(error = %err, "cannot apply a scheduler record the leader wrote")
            }
        }
    }
    // A purge writes nothing under the job when allocations still reference every version
    // (the versions stay for them): the batch shows it only as a deregistration evaluation
    // created with the batch's index and no write of the job itself (a stop always rewrites
    // the job; a registration later in the same batch writes it too).
    for key in deregistered {
        if !jobs_written.contains(&key) && snap.jobs.remove(&key).is_some() {
            snap.tables.jobs = snap.tables.jobs.max(snap.index);
        }
    }
}

/// What an applied event was, for the batch's purge check.
enum Applied {
    /// A version of this job was written.
    Job(JobKey),
    /// A deregistration evaluation for this job was created in this batch.
    Deregistered(JobKey),
    Other,
}

fn decode<T: serde::de::DeserializeOwned>(event: &Event) -> Result<T, Error> {
    serde_json::from_slice(&event.value).map_err(|err| {
        Error::Internal(format!(
            "corrupt scheduler record {}: {err}",
            String::from_utf8_lossy(&event.key)
        ))
    })
}

/// `<ns>\0<id>\0<version:020>` (after the table prefix) as a job key and version.
fn job_key_version(rest: &str) -> Option<(JobKey, u64)> {
    let (rest, version) = rest.rsplit_once('\0')?;
    let (namespace, id) = rest.split_once('\0')?;
    Some((JobKey::new(namespace, id), version.parse().ok()?))
}

/// `<CreateIndex:020>/<id>` (after the table prefix): the record's ID.
fn id_after_index(rest: &str) -> Option<&str> {
    rest.split_once('/').map(|(_, id)| id)
}

fn apply_event(snap: &mut Snapshot, event: &Event) -> Result<Applied, Error> {
    let Ok(key) = std::str::from_utf8(&event.key) else {
        return Ok(Applied::Other);
    };
    let put = event.kind == EventKind::Put;
    let index = snap.index;
    if let Some(rest) = key.strip_prefix(keys::JOBS) {
        if put {
            let job: Job = decode(event)?;
            let job_key = job.key();
            let job = Arc::new(job);
            snap.job_versions
                .insert((job_key.clone(), job.version), Arc::clone(&job));
            // The writer only ever stores a version as the job's latest (a registration,
            // a stop, a revert all make one).
            snap.jobs.insert(job_key.clone(), job);
            snap.tables.jobs = snap.tables.jobs.max(index);
            return Ok(Applied::Job(job_key));
        } else if let Some((job_key, version)) = job_key_version(rest) {
            snap.job_versions.remove(&(job_key.clone(), version));
            // Only a purge deletes the latest version.
            if snap
                .jobs
                .get(&job_key)
                .is_some_and(|latest| latest.version == version)
            {
                snap.jobs.remove(&job_key);
            }
            snap.tables.jobs = snap.tables.jobs.max(index);
        }
    } else if let Some(rest) = key.strip_prefix(keys::SUBMISSIONS) {
        if put {
            let submission: JobSubmission = decode(event)?;
            let job_key = JobKey::new(&submission.namespace, &submission.job_id);
            snap.submissions
                .insert((job_key, submission.version), Arc::new(submission));
        } else if let Some(found) = job_key_version(rest) {
            snap.submissions.remove(&found);
        }
    } else if let Some(rest) = key.strip_prefix(keys::ALLOCS) {
        if put {
            let alloc: Allocation = decode(event)?;
            remove_alloc(snap, &alloc.id);
            add_alloc(snap, alloc);
        } else if let Some(id) = id_after_index(rest) {
            remove_alloc(snap, id);
        }
        snap.tables.allocs = snap.tables.allocs.max(index);
    } else if let Some(id) = key.strip_prefix(keys::NODES) {
        if put {
            let node: Node = decode(event)?;
            snap.nodes.insert(node.id.clone(), Arc::new(node));
        } else {
            snap.nodes.remove(id);
        }
        snap.tables.nodes = snap.tables.nodes.max(index);
    } else if let Some(rest) = key.strip_prefix(keys::EVALS) {
        if put {
            let eval: Evaluation = decode(event)?;
            let deregistered = (eval.triggered_by == TRIGGER_JOB_DEREGISTER
                && eval.create_index == index
                && eval.job_modify_index == index)
                .then(|| JobKey::new(&eval.namespace, &eval.job_id));
            snap.insert_eval(Arc::new(eval));
            snap.tables.evals = snap.tables.evals.max(index);
            if let Some(job_key) = deregistered {
                return Ok(Applied::Deregistered(job_key));
            }
            return Ok(Applied::Other);
        } else if let Some(id) = id_after_index(rest) {
            remove_eval(snap, id);
        }
        snap.tables.evals = snap.tables.evals.max(index);
    }
    Ok(Applied::Other)
}

/// Takes an allocation out of the tables and its share out of the secondary indexes.
fn remove_alloc(snap: &mut Snapshot, id: &str) {
    let Some(old) = snap.allocs.remove(id) else {
        return;
    };
    if !old.terminal() {
        let mut usage = snap.node_used(&old.node_id);
        usage.subtract(&old.allocated_resources.comparable());
        snap.node_usage.insert(old.node_id.clone(), usage);
    }
    if let Some(ids) = snap.allocs_by_node.get_mut(&old.node_id) {
        ids.remove(id);
        if ids.is_empty() {
            snap.allocs_by_node.remove(&old.node_id);
        }
    }
    let job_key = JobKey::new(&old.namespace, &old.job_id);
    if let Some(ids) = snap.allocs_by_job.get_mut(&job_key) {
        ids.remove(id);
        if ids.is_empty() {
            snap.allocs_by_job.remove(&job_key);
        }
    }
}

/// Takes an evaluation out of the tables and out of `blocked_evals` and `evals_by_job`.
fn remove_eval(snap: &mut Snapshot, id: &str) {
    let Some(old) = snap.evals.remove(id) else {
        return;
    };
    snap.blocked_evals.remove(id);
    let job_key = JobKey::new(&old.namespace, &old.job_id);
    if let Some(ids) = snap.evals_by_job.get_mut(&job_key) {
        ids.remove(id);
        if ids.is_empty() {
            snap.evals_by_job.remove(&job_key);
        }
    }
}

/// Puts an allocation into the tables and its share into the secondary indexes.
fn add_alloc(snap: &mut Snapshot, alloc: Allocation) {
    if !alloc.terminal() {
        let mut usage = snap.node_used(&alloc.node_id);
        usage.add(&alloc.allocated_resources.comparable());
        snap.node_usage.insert(alloc.node_id.clone(), usage);
    }
    snap.allocs_by_node
        .entry(alloc.node_id.clone())
        .or_default()
        .insert(alloc.id.clone());
    snap.allocs_by_job
        .entry(JobKey::new(&alloc.namespace, &alloc.job_id))
        .or_default()
        .insert(alloc.id.clone());
    snap.allocs.insert(alloc.id.clone(), Arc::new(alloc));
}
