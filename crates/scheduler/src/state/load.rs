//! Rebuilding the snapshot from storage at start.
//!
//! Invariant: the loaded snapshot equals the one the writer last published (same records, same
//! secondary indexes, same table indexes), so a restart changes nothing a reader can see (a job
//! purged while allocations still reference its versions included: see [`drop_purged_jobs`]).

use std::sync::Arc;

use storage::{Storage, StorageExt};

use super::{Snapshot, keys};
use crate::Error;
use crate::structs::{Allocation, Evaluation, Job, JobKey, JobSubmission, Node};

fn decode<T: serde::de::DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(value).map_err(|err| {
        Error::Internal(format!(
            "corrupt scheduler record {}: {err}",
            String::from_utf8_lossy(key)
        ))
    })
}

pub(super) async fn load(storage: &dyn Storage) -> Result<Snapshot, Error> {
    let mut snap = Snapshot::default();
    if let Some(kv) = storage.get(keys::INDEX.as_bytes()).await? {
        snap.index = String::from_utf8_lossy(&kv.value).parse().unwrap_or(0);
        snap.index_revision = kv.mod_revision;
    }
    for kv in storage.scan_prefix(keys::JOBS.as_bytes()).await?.kvs {
        let job: Job = decode(&kv.key, &kv.value)?;
        snap.tables.jobs = snap.tables.jobs.max(job.modify_index);
        let key = job.key();
        let job = Arc::new(job);
        let newer = snap
            .jobs
            .get(&key)
            .is_none_or(|latest| latest.version < job.version);
        if newer {
            snap.jobs.insert(key.clone(), Arc::clone(&job));
        }
        snap.job_versions.insert((key, job.version), job);
    }
    for kv in storage.scan_prefix(keys::SUBMISSIONS.as_bytes()).await?.kvs {
        let submission: JobSubmission = decode(&kv.key, &kv.value)?;
        let key = JobKey::new(&submission.namespace, &submission.job_id);
        snap.submissions
            .insert((key, submission.version), Arc::new(submission));
    }
    for kv in storage.scan_prefix(keys::ALLOCS.as_bytes()).await?.kvs {
        let alloc: Allocation = decode(&kv.key, &kv.value)?;
        snap.tables.allocs = snap.tables.allocs.max(alloc.modify_index);
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
    for kv in storage.scan_prefix(keys::NODES.as_bytes()).await?.kvs {
        let node: Node = decode(&kv.key, &kv.value)?;
        snap.tables.nodes = snap.tables.nodes.max(node.modify_index);
        snap.nodes.insert(node.id.clone(), Arc::new(node));
    }
    for kv in storage.scan_prefix(keys::EVALS.as_bytes()).await?.kvs {
        let eval: Evaluation = decode(&kv.key, &kv.value)?;
        snap.tables.evals = snap.tables.evals.max(eval.modify_index);
        snap.insert_eval(Arc::new(eval));
    }
    drop_purged_jobs(&mut snap);
    Ok(snap)
}

/// A purge that leaves versions in place for the allocations that reference them writes no
/// job record, only its deregistration evaluation (with the purge's index as its
/// `JobModifyIndex`): a job whose latest stored version is older than such an evaluation was
/// purged after it, and is not a job any more (its versions stay, for its allocations).
fn drop_purged_jobs(snap: &mut Snapshot) {
    let purged: Vec<JobKey> = snap
        .jobs
        .iter()
        .filter(|(key, latest)| {
            snap.evals_of_job(key).any(|eval| {
                eval.triggered_by == crate::structs::TRIGGER_JOB_DEREGISTER
                    && eval.job_modify_index > latest.modify_index
            })
        })
        .map(|(key, _)| key.clone())
        .collect();
    for key in purged {
        snap.jobs.remove(&key);
    }
}
