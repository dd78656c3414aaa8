//! How the state writer stores a record: compact JSON, without the fields whose value is the
//! type's default.
//!
//! Where it sits: `draft.rs` encodes every job version, submission, allocation, node and
//! evaluation through [`encode`]; `load.rs` and `follow.rs` decode them with plain
//! `serde_json::from_slice`. Every stored type reads a missing field as the value the type's
//! `Default` gives it (`#[serde(default)]` on each struct of `scheduler-structs`), so dropping a
//! field equal to its default changes nothing a reader sees, while an allocation's record loses
//! about a third of its bytes (empty maps and lists, zero counters, empty strings, nulls).
//!
//! Invariants:
//! - `decode(encode(x)) == x` for every stored type (tests below over realistic records).
//! - Only fields of structs are dropped, compared with the same field of the type's default
//!   (nested structs recursively); entries of maps and lists are kept as they are, since a map
//!   has no per-key default.

use std::sync::OnceLock;

use serde::Serialize;
use serde_json::Value;

use crate::Error;
use crate::structs::{Allocation, Evaluation, Job, JobSubmission, Node};

/// A type the writer stores, with its default serialized once.
pub(super) trait Record: Serialize {
    fn defaults() -> &'static Value;
}

macro_rules! record {
    ($($ty:ty),*) => {$(
        impl Record for $ty {
            fn defaults() -> &'static Value {
                static DEFAULTS: OnceLock<Value> = OnceLock::new();
                DEFAULTS.get_or_init(|| {
                    serde_json::to_value(<$ty>::default()).unwrap_or(Value::Null)
                })
            }
        }
    )*};
}

record!(Allocation, Evaluation, Job, JobSubmission, Node);

/// The record's stored bytes.
pub(super) fn encode<T: Record>(value: &T) -> Result<Vec<u8>, Error> {
    let failed = |err: serde_json::Error| Error::Internal(format!("encoding a record: {err}"));
    let mut tree = serde_json::to_value(value).map_err(failed)?;
    strip_defaults(&mut tree, T::defaults());
    serde_json::to_vec(&tree).map_err(failed)
}

/// Drops the fields of `value` equal to the same field of `defaults`, recursing into fields
/// that are objects on both sides (nested structs).
fn strip_defaults(value: &mut Value, defaults: &Value) {
    let (Value::Object(fields), Value::Object(defaults)) = (value, defaults) else {
        return;
    };
    fields.retain(|name, field| match defaults.get(name) {
        Some(default) if field == default => false,
        Some(default) => {
            strip_defaults(field, default);
            true
        }
        None => true,
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::structs::*;

    fn roundtrip<T>(value: &T) -> usize
    where
        T: Record + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = encode(value).expect("encode");
        let back: T = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(&back, value);
        bytes.len()
    }

    #[test]
    fn every_stored_type_reads_back_equal_and_an_allocation_shrinks() {
        let mut scores = BTreeMap::new();
        scores.insert("binpack".to_owned(), 0.25);
        scores.insert("job-anti-affinity".to_owned(), 0.0);
        let mut tasks = BTreeMap::new();
        tasks.insert(
            "app".to_owned(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: 100,
                    ..AllocatedCpuResources::default()
                },
                memory: AllocatedMemoryResources {
                    memory_mb: 64,
                    memory_max_mb: 0,
                },
                ..AllocatedTaskResources::default()
            },
        );
        let alloc = Allocation {
            id: "a1".to_owned(),
            namespace: "default".to_owned(),
            eval_id: "e1".to_owned(),
            name: "web.app[0]".to_owned(),
            node_id: "n1".to_owned(),
            job_id: "web".to_owned(),
            job_type: JOB_TYPE_SERVICE.to_owned(),
            task_group: "app".to_owned(),
            resources: Some(Resources {
                cpu: 100,
                memory_mb: 64,
                ..Resources::default()
            }),
            allocated_resources: AllocatedResources {
                tasks,
                ..AllocatedResources::default()
            },
            metrics: AllocMetric {
                nodes_evaluated: 8,
                nodes_in_pool: 200,
                score_meta_data: vec![NodeScoreMeta {
                    node_id: "n1".to_owned(),
                    scores,
                    norm_score: 0.25,
                }],
                allocation_time: 40_000,
                ..AllocMetric::default()
            },
            desired_status: ALLOC_DESIRED_RUN.to_owned(),
            client_status: ALLOC_CLIENT_PENDING.to_owned(),
            desired_transition: DesiredTransition {
                migrate: Some(false),
                ..DesiredTransition::default()
            },
            create_index: 7,
            modify_index: 9,
            create_time: 1,
            modify_time: 2,
            ..Allocation::default()
        };
        let compact = roundtrip(&alloc);
        let plain = serde_json::to_vec(&alloc).expect("plain").len();
        assert!(compact * 3 < plain * 2, "{compact} of {plain} bytes");
        roundtrip(&Allocation::default());
        roundtrip(&Evaluation {
            id: "e1".to_owned(),
            status: EVAL_STATUS_BLOCKED.to_owned(),
            wait_until: 5,
            ..Evaluation::default()
        });
        roundtrip(&Job {
            id: "web".to_owned(),
            priority: 50,
            stop: true,
            task_groups: vec![TaskGroup {
                name: "app".to_owned(),
                count: 0,
                ..TaskGroup::default()
            }],
            ..Job::default()
        });
        roundtrip(&Node {
            id: "n1".to_owned(),
            status: NODE_STATUS_DOWN.to_owned(),
            ..Node::default()
        });
        roundtrip(&JobSubmission::default());
    }
}
