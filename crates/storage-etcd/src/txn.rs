//! Turning a cairn [`Txn`] into one etcd transaction.
//!
//! etcd refuses a transaction that changes one key twice (two puts, or a put inside a range the
//! same transaction deletes: "duplicate key given in txn request"), and allows one change per
//! key per revision. [`normalize`] therefore reduces each branch to the writes with the same final
//! state: a later put replaces an earlier put of its key, a put carves its key out of earlier
//! deletes, a delete drops earlier puts of its keys. A key deleted and put again in one
//! transaction so keeps its `create_revision` and counts one more version, and a watch sees only
//! the put: the documented difference of this backend (docs/design.md, storage on etcd).
//!
//! Every delete also writes the key's tombstone (`keys.rs`), and only when the key exists (a
//! delete of a missing key writes nothing, as the trait requires): a single delete becomes a
//! nested transaction `if key exists { delete; put tombstone }`; a range delete needs the keys
//! it removes, read at a revision `R` before the transaction, which then runs only if no key in
//! the range changed after `R` (a guard compare; the caller retries when it fails).
//!
//! Invariant: the keys the branches write are pairwise distinct after normalization, so etcd
//! accepts the transaction whatever the cairn transaction repeated.

use etcd_client::{Compare as EtcdCompare, CompareOp, DeleteOptions, Txn as EtcdTxn, TxnOp};
use storage::{Compare, KeyRange, Op, Revision, Txn};

use crate::keys::{Layout, successor};

/// One write after normalization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
    DeleteRange(KeyRange),
}

/// The writes with the same final state as `ops`, at most one change per key.
pub(crate) fn normalize(ops: &[Op]) -> Vec<Write> {
    let mut out: Vec<Write> = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Op::Put { key, value } => {
                let mut carved = Vec::with_capacity(out.len() + 1);
                for write in out.drain(..) {
                    match write {
                        Write::Put { key: old, .. } if old == *key => {}
                        Write::Delete { key: old } if old == *key => {}
                        Write::DeleteRange(range) if range.contains(key) => {
                            let before = KeyRange::between(&range.start, key);
                            let after = KeyRange::between(successor(key), &range.end);
                            for piece in [before, after] {
                                if !piece.is_empty() {
                                    carved.push(Write::DeleteRange(piece));
                                }
                            }
                        }
                        other => carved.push(other),
                    }
                }
                out = carved;
                out.push(Write::Put {
                    key: key.clone(),
                    value: value.clone(),
                });
            }
            Op::Delete { key } => {
                out.retain(|write| match write {
                    Write::Put { key: old, .. } | Write::Delete { key: old } => old != key,
                    Write::DeleteRange(_) => true,
                });
                out.push(Write::Delete { key: key.clone() });
            }
            Op::DeleteRange(range) => {
                if range.is_empty() {
                    continue;
                }
                out.retain(|write| match write {
                    Write::Put { key, .. } | Write::Delete { key } => !range.contains(key),
                    Write::DeleteRange(_) => true,
                });
                out.push(Write::DeleteRange(range.clone()));
            }
        }
    }
    out
}

/// The ranges a branch deletes: what must be read before the transaction.
pub(crate) fn deleted_ranges(writes: &[Write]) -> Vec<KeyRange> {
    writes
        .iter()
        .filter_map(|write| match write {
            Write::DeleteRange(range) => Some(range.clone()),
            _ => None,
        })
        .collect()
}

/// A revision as etcd's signed one (revisions beyond `i64::MAX` never exist).
pub(crate) fn signed(revision: Revision) -> i64 {
    i64::try_from(revision).unwrap_or(i64::MAX)
}

pub(crate) fn compare(layout: &Layout, compare: &Compare) -> EtcdCompare {
    match compare {
        Compare::Exists(key) => {
            EtcdCompare::create_revision(layout.data(key), CompareOp::Greater, 0)
        }
        Compare::Missing(key) => {
            EtcdCompare::create_revision(layout.data(key), CompareOp::Equal, 0)
        }
        Compare::ModRevision(key, revision) => {
            EtcdCompare::mod_revision(layout.data(key), CompareOp::Equal, signed(*revision))
        }
    }
}

/// The guard for a range read at `read_at`: no key in it was written after that revision.
pub(crate) fn unchanged_since(layout: &Layout, range: &KeyRange, read_at: i64) -> EtcdCompare {
    let (start, end) = layout.data_range(range);
    EtcdCompare::mod_revision(start, CompareOp::Less, read_at.saturating_add(1)).with_range(end)
}

/// etcd operations for one normalized branch. `range_keys(range)` lists the keys a range delete
/// removes (read before the transaction and guarded by [`unchanged_since`]).
pub(crate) fn branch_ops(
    layout: &Layout,
    writes: &[Write],
    range_keys: &dyn Fn(&KeyRange) -> Vec<Vec<u8>>,
) -> Vec<TxnOp> {
    let single_deletes: std::collections::BTreeSet<&[u8]> = writes
        .iter()
        .filter_map(|write| match write {
            Write::Delete { key } => Some(key.as_slice()),
            _ => None,
        })
        .collect();
    let mut tombstoned = std::collections::BTreeSet::new();
    let mut ops = Vec::with_capacity(writes.len());
    for write in writes {
        match write {
            Write::Put { key, value } => {
                ops.push(TxnOp::put(layout.data(key), value.clone(), None));
            }
            Write::Delete { key } => {
                if !tombstoned.insert(key.clone()) {
                    continue;
                }
                let data = layout.data(key);
                ops.push(TxnOp::txn(
                    EtcdTxn::new()
                        .when([EtcdCompare::create_revision(
                            data.clone(),
                            CompareOp::Greater,
                            0,
                        )])
                        .and_then([
                            TxnOp::delete(data, None),
                            TxnOp::put(layout.tomb(key), Vec::new(), None),
                        ]),
                ));
            }
            Write::DeleteRange(range) => {
                let (start, end) = layout.data_range(range);
                ops.push(TxnOp::delete(
                    start,
                    Some(DeleteOptions::new().with_range(end)),
                ));
                for key in range_keys(range) {
                    if single_deletes.contains(key.as_slice()) || !tombstoned.insert(key.clone()) {
                        continue;
                    }
                    ops.push(TxnOp::put(layout.tomb(&key), Vec::new(), None));
                }
            }
        }
    }
    ops
}

/// Both branches of `txn`, normalized.
pub(crate) fn branches(txn: &Txn) -> (Vec<Write>, Vec<Write>) {
    (normalize(&txn.success), normalize(&txn.failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str) -> Op {
        Op::Put {
            key: key.into(),
            value: b"v".to_vec(),
        }
    }

    #[test]
    fn a_put_after_a_range_delete_is_carved_out_of_the_range() {
        let writes = normalize(&[Op::DeleteRange(KeyRange::prefix("k/")), put("k/2")]);
        assert_eq!(
            writes,
            [
                Write::DeleteRange(KeyRange::between("k/", "k/2")),
                Write::DeleteRange(KeyRange::between("k/2\0", "k0")),
                Write::Put {
                    key: b"k/2".to_vec(),
                    value: b"v".to_vec()
                },
            ]
        );
    }

    #[test]
    fn later_writes_of_a_key_replace_earlier_ones() {
        let writes = normalize(&[
            put("a"),
            Op::Delete { key: b"a".to_vec() },
            put("b"),
            put("b"),
            Op::Delete { key: b"c".to_vec() },
            put("c"),
            put("d"),
            Op::DeleteRange(KeyRange::prefix("d")),
        ]);
        assert_eq!(
            writes,
            [
                Write::Delete { key: b"a".to_vec() },
                Write::Put {
                    key: b"b".to_vec(),
                    value: b"v".to_vec()
                },
                Write::Put {
                    key: b"c".to_vec(),
                    value: b"v".to_vec()
                },
                Write::DeleteRange(KeyRange::prefix("d")),
            ]
        );
    }

    #[test]
    fn empty_range_deletes_vanish() {
        assert!(normalize(&[Op::DeleteRange(KeyRange::between("b", "a"))]).is_empty());
    }
}
