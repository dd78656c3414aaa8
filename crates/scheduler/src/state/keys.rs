//! Every storage key the scheduler's state writes, in one place.
//!
//! Layout (all under `scheduler/`; `\0` separates parts because IDs may contain `/`):
//! - `scheduler/index`: the last committed index (decimal).
//! - `scheduler/jobs/<ns>\0<id>\0<version:020>`: one record per retained job version.
//! - `scheduler/submissions/<ns>\0<id>\0<version:020>`: the submitted source of a version.
//! - `scheduler/allocs/<id>`, `scheduler/nodes/<id>`, `scheduler/evals/<id>`.
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

pub(crate) fn alloc(id: &str) -> Vec<u8> {
    format!("{ALLOCS}{id}").into_bytes()
}

pub(crate) fn node(id: &str) -> Vec<u8> {
    format!("{NODES}{id}").into_bytes()
}

pub(crate) fn eval(id: &str) -> Vec<u8> {
    format!("{EVALS}{id}").into_bytes()
}
