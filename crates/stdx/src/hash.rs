//! FNV-1a (64-bit): a small, stable, non-cryptographic hash for checksums and content hashes
//! that must come out the same in every process and release (the standard library's hasher
//! is randomly keyed).
//!
//! Also [`FastMap`], the map type for in-memory maps on hot paths.
//!
//! Invariant: [`fnv1a_64`] is FNV-1a 64 as published (offset basis `0xcbf29ce484222325`, prime
//! `0x100000001b3`); snapshot checksums depend on it, so it never changes.

/// A `HashMap` with foldhash's fast hasher (randomly seeded per process; hashbrown's own
/// default), for in-memory maps read on every request: the token and barrier caches, request
/// metrics. The standard SipHash cost ~400 instructions a lookup there. Their keys are the
/// server's (token ids it generated, route patterns) or bounded in number (the barrier cache),
/// so SipHash's resistance to chosen colliding keys buys little; maps a client fills at will
/// keep the standard hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The FNV-1a 64 offset basis.
pub const FNV1A_64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV1A_64_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a 64 of `bytes`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hasher = Fnv1a64::new();
    hasher.write(bytes);
    hasher.finish()
}

/// FNV-1a 64 fed in pieces, from the standard offset basis or another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    /// From the standard offset basis.
    pub fn new() -> Fnv1a64 {
        Fnv1a64(FNV1A_64_OFFSET)
    }

    /// From another starting value (several independent lanes over the same input).
    pub fn with_offset(offset: u64) -> Fnv1a64 {
        Fnv1a64(offset)
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(FNV1A_64_PRIME);
        }
    }

    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a64 {
    fn default() -> Fnv1a64 {
        Fnv1a64::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn feeding_in_pieces_equals_feeding_at_once() {
        let mut hasher = Fnv1a64::default();
        hasher.write(b"foo");
        hasher.write(b"bar");
        assert_eq!(hasher.finish(), fnv1a_64(b"foobar"));
        assert_ne!(Fnv1a64::with_offset(1).finish(), Fnv1a64::new().finish());
    }
}
