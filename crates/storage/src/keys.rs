//! Key ranges: the half-open byte intervals that scans, deletes and watches address.
//!
//! Invariant: a range is `[start, end)` in lexicographic byte order; an empty `end` means
//! "to the end of the keyspace", as in etcd.

use std::fmt;

/// A half-open key interval `[start, end)`; `end` empty means unbounded.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

impl KeyRange {
    /// Every key that starts with `prefix` (the whole keyspace for an empty prefix).
    pub fn prefix(prefix: impl AsRef<[u8]>) -> KeyRange {
        let start = prefix.as_ref().to_vec();
        let end = prefix_end(&start);
        KeyRange { start, end }
    }

    /// Exactly one key.
    pub fn key(key: impl AsRef<[u8]>) -> KeyRange {
        let start = key.as_ref().to_vec();
        let mut end = start.clone();
        end.push(0);
        KeyRange { start, end }
    }

    /// `[start, end)`; an empty `end` is unbounded.
    pub fn between(start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> KeyRange {
        KeyRange {
            start: start.as_ref().to_vec(),
            end: end.as_ref().to_vec(),
        }
    }

    /// The whole keyspace.
    pub fn all() -> KeyRange {
        KeyRange {
            start: Vec::new(),
            end: Vec::new(),
        }
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }

    /// `start..end` as bounds for `BTreeMap::range` and similar.
    pub fn bounds(&self) -> (std::ops::Bound<&[u8]>, std::ops::Bound<&[u8]>) {
        use std::ops::Bound;
        let end = if self.end.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(self.end.as_slice())
        };
        (Bound::Included(self.start.as_slice()), end)
    }

    /// Whether the range holds no key at all (`end <= start` with a bounded end).
    pub fn is_empty(&self) -> bool {
        !self.end.is_empty() && self.end <= self.start
    }
}

impl fmt::Debug for KeyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:?}, {:?})",
            String::from_utf8_lossy(&self.start),
            String::from_utf8_lossy(&self.end)
        )
    }
}

/// The smallest key greater than every key with this prefix, or empty (unbounded) when none
/// exists (an empty prefix, or one made only of 0xff bytes).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"abc"), b"abd".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), Vec::<u8>::new());
        assert_eq!(prefix_end(b""), Vec::<u8>::new());
    }

    #[test]
    fn prefix_range_contains_only_prefixed_keys() {
        let range = KeyRange::prefix("registry/kv/");
        assert!(range.contains(b"registry/kv/a"));
        assert!(range.contains(b"registry/kv/"));
        assert!(!range.contains(b"registry/kv"));
        assert!(!range.contains(b"registry/kw"));
    }

    #[test]
    fn key_range_contains_exactly_one_key() {
        let range = KeyRange::key("a");
        assert!(range.contains(b"a"));
        assert!(!range.contains(b"a\0"));
        assert!(!range.contains(b"ab"));
    }
}
