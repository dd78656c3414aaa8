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
    indexed(ALLOCS, create_index, id)
}

pub(crate) fn node(id: &str) -> Vec<u8> {
    format!("{NODES}{id}").into_bytes()
}

pub(crate) fn eval(create_index: u64, id: &str) -> Vec<u8> {
    indexed(EVALS, create_index, id)
}

/// `<prefix><index:020>/<id>`, built in place: the writer makes one for every allocation it
/// stores, and `format!`'s padded integer costs several times the rest.
fn indexed(prefix: &str, index: u64, id: &str) -> Vec<u8> {
    // u64::MAX has 20 digits: the padding always fits.
    let mut digits = [b'0'; 20];
    let (mut rest, mut at) = (index, digits.len());
    while rest > 0 {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let mut key = Vec::with_capacity(prefix.len() + digits.len() + 1 + id.len());
    key.extend_from_slice(prefix.as_bytes());
    key.extend_from_slice(&digits);
    key.push(b'/');
    key.extend_from_slice(id.as_bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_keys_are_the_padded_format() {
        for index in [0, 1, 9, 10, 32, 1_000_000, u64::MAX / 7, u64::MAX] {
            for id in ["", "2a9a2004-8222-429f-a251-eedfb9159a37", "a/b"] {
                assert_eq!(
                    alloc(index, id),
                    format!("{ALLOCS}{index:020}/{id}").into_bytes()
                );
                assert_eq!(
                    eval(index, id),
                    format!("{EVALS}{index:020}/{id}").into_bytes()
                );
            }
        }
    }
}
