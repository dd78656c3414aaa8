//! Where cairn's keys live in etcd: three subspaces under the configured prefix.
//!
//! - `{prefix}kv/{key}`: the store's keys, exactly as services wrote them;
//! - `{prefix}tomb/{key}`: one empty tombstone per deleted key, written in the transaction that
//!   deleted it, so [`storage::Storage::range_revision`] can see deletes (etcd forgets them),
//!   until a tidy (`tidy.rs`) removes it once compaction has passed its revision;
//! - `{prefix}meta/...`: the store's marker (its creation revision), the leader key, the
//!   membership records and the tombstone floor (`meta/tombstone-floor`).
//!
//! Invariant: the mapping is a bijection between cairn keys and the `kv/` subspace that keeps
//! byte order, so cairn's half-open ranges map to etcd's `[key, range_end)` ranges; an unbounded
//! cairn range ends at the end of the subspace, never beyond it.

use storage::{KeyRange, prefix_end};

/// The key layout of one store.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    data: Vec<u8>,
    tomb: Vec<u8>,
    meta: Vec<u8>,
}

impl Layout {
    pub(crate) fn new(prefix: &[u8]) -> Layout {
        let sub = |name: &[u8]| {
            let mut key = prefix.to_vec();
            key.extend_from_slice(name);
            key
        };
        Layout {
            data: sub(b"kv/"),
            tomb: sub(b"tomb/"),
            meta: sub(b"meta/"),
        }
    }

    pub(crate) fn data(&self, key: &[u8]) -> Vec<u8> {
        join(&self.data, key)
    }

    pub(crate) fn tomb(&self, key: &[u8]) -> Vec<u8> {
        join(&self.tomb, key)
    }

    pub(crate) fn meta(&self, name: &str) -> Vec<u8> {
        join(&self.meta, name.as_bytes())
    }

    /// The cairn key of an etcd key in the data subspace, or `None` for any other key.
    pub(crate) fn strip_data<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        key.strip_prefix(self.data.as_slice())
    }

    /// `[start, end)` in the data subspace for a cairn range (the caller skips empty ranges).
    pub(crate) fn data_range(&self, range: &KeyRange) -> (Vec<u8>, Vec<u8>) {
        self.sub_range(&self.data, range)
    }

    /// `[start, end)` in the tombstone subspace for a cairn range.
    pub(crate) fn tomb_range(&self, range: &KeyRange) -> (Vec<u8>, Vec<u8>) {
        self.sub_range(&self.tomb, range)
    }

    /// The key holding the tombstone floor: the highest delete revision whose tombstone a
    /// tidy removed (20 decimal digits, so etcd's byte compare is numeric).
    pub(crate) fn tombstone_floor(&self) -> Vec<u8> {
        self.meta("tombstone-floor")
    }

    fn sub_range(&self, base: &[u8], range: &KeyRange) -> (Vec<u8>, Vec<u8>) {
        let start = join(base, &range.start);
        let end = if range.end.is_empty() {
            prefix_end(base)
        } else {
            join(base, &range.end)
        };
        (start, end)
    }
}

fn join(base: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(base.len() + key.len());
    out.extend_from_slice(base);
    out.extend_from_slice(key);
    out
}

/// The smallest key after `key` (`key` followed by a zero byte).
pub(crate) fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbounded_range_ends_at_the_end_of_the_data_subspace() {
        let layout = Layout::new(b"c/");
        assert_eq!(
            layout.data_range(&KeyRange::all()),
            (b"c/kv/".to_vec(), b"c/kv0".to_vec())
        );
        assert_eq!(
            layout.data_range(&KeyRange::prefix("a/")),
            (b"c/kv/a/".to_vec(), b"c/kv/a0".to_vec())
        );
        assert_eq!(
            layout.tomb_range(&KeyRange::between("b", "")),
            (b"c/tomb/b".to_vec(), b"c/tomb0".to_vec())
        );
        assert_eq!(layout.strip_data(b"c/kv/x"), Some(b"x".as_slice()));
        assert_eq!(layout.strip_data(b"c/tomb/x"), None);
    }
}
