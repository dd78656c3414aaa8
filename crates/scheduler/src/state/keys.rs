//! Every storage key the scheduler's state writes, in one place.
//!
//! Layout (all under `scheduler/`; `\0` separates parts because IDs may contain `/`):
//! - `scheduler/index`: the last committed index (decimal).
//! - `scheduler/jobs/<ns>\0<id>\0<version:020>`: one record per retained job version.
//! - `scheduler/submissions/<ns>\0<id>\0<version:020>`: the submitted source of a version.
//! - `scheduler/allocs/<CreateIndex:020>/<id>`, `scheduler/evals/<CreateIndex:020>/<id>`:
//!   keyed by creation order, so a batch of new records appends at the end of the store's
//!   B-tree instead of touching random pages (IDs are random UUIDs); a record's CreateIndex
//!   never changes, so its key is stable.
//! - `scheduler/nodes/<id>`.
//!
//! ACL policies, tokens and namespaces live under `scheduler/acl/` and `scheduler/namespaces/`
//! (see `acl/` and `namespaces.rs`); they are not part of the snapshot.

use crate::structs::JobKey;

pub(crate) const INDEX: &str = "scheduler/index";
pub(crate) const JOBS: &str = "scheduler/jobs/";
pub(crate) const SUBMISSIONS: &str = "scheduler/submissions/";
pub(crate) const ALLOCS: &str = "scheduler/allocs/";
pub(crate) const NODES: &str = "scheduler/nodes/";
pub(crate) const EVALS: &str = "scheduler/evals/";

pub(crate) fn job_version(key: &JobKey, version: u64) -> Vec<u8> {
    format!("{JOBS}{}\0{}\0{version:020}", key.namespace, key.id).into_bytes()
}

pub(crate) fn submission(key: &JobKey, version: u64) -> Vec<u8> {
    format!("{SUBMISSIONS}{}\0{}\0{version:020}", key.namespace, key.id).into_bytes()
}

pub(crate) fn alloc(create_index: u64, id: &str) -> Vec<u8> {
    format!("{ALLOCS}{create_index:020}/{id}").into_bytes()
}

pub(crate) fn node(id: &str) -> Vec<u8> {
    format!("{NODES}{id}").into_bytes()
}

pub(crate) fn eval(create_index: u64, id: &str) -> Vec<u8> {
    format!("{EVALS}{create_index:020}/{id}").into_bytes()
}
