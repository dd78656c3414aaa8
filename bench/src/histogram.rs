//! A small HDR-style latency histogram: log-linear buckets over `u64` values (microseconds in
//! practice), mergeable, with percentile queries.
//!
//! Where it sits: every `loadgen` connection task records into its own [`Histogram`]; the
//! main task merges them once the run is over and prints p50/p99/max.
//!
//! Bucketing: values below `2^SIG_BITS` (128) have one bucket each, so they are exact. Above
//! that, each power-of-two range `[2^h, 2^(h+1))` is split into `2^(SIG_BITS-1)` (64) equal
//! buckets, so a bucket is never wider than 1/64 of its lower bound.
//!
//! Invariants:
//! - A percentile is reported as the highest value its bucket can hold, clamped to the
//!   exact maximum recorded: it is never below the true value and at most 1/64 above it.
//! - `count`, `min`, `max` and `sum` are exact; merging is exact (bucket counts add up).
//! - Values above [`MAX_TRACKABLE`] are clamped to it (about 12.7 days in microseconds).

/// Significant bits kept per value; see the module doc.
const SIG_BITS: u32 = 7;
/// Values below this have a bucket each.
const LINEAR: u64 = 1 << SIG_BITS;
/// Buckets per power of two above [`LINEAR`].
const HALF: u64 = 1 << (SIG_BITS - 1);
/// Highest power of two tracked (exclusive upper bound is `2^(MAX_EXP+1)`).
const MAX_EXP: u32 = 39;
/// The largest value recorded as itself; larger ones are clamped.
pub const MAX_TRACKABLE: u64 = (1 << (MAX_EXP + 1)) - 1;
/// Total number of buckets.
const BUCKETS: usize = (LINEAR + (MAX_EXP - SIG_BITS + 1) as u64 * HALF) as usize;

/// A mergeable latency histogram; see the module doc for its precision.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket a value falls in.
fn index_of(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let h = 63 - v.leading_zeros(); // position of the highest set bit, >= SIG_BITS
    let shift = h + 1 - SIG_BITS; // >= 1
    let mantissa = v >> shift; // in [HALF, LINEAR)
    (LINEAR + u64::from(shift - 1) * HALF + (mantissa - HALF)) as usize
}

/// The highest value that lands in bucket `i`.
fn highest_in(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let shift = (i - LINEAR) / HALF + 1;
    let mantissa = (i - LINEAR) % HALF + HALF;
    ((mantissa + 1) << shift) - 1
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            count: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    /// Records one value (clamped to [`MAX_TRACKABLE`]).
    pub fn record(&mut self, value: u64) {
        let v = value.min(MAX_TRACKABLE);
        self.counts[index_of(v)] += 1;
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    /// Adds every value recorded in `other` to `self`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += *b;
        }
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact largest value recorded, 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Exact smallest value recorded, 0 when empty.
    pub fn min(&self) -> u64 {
        if self.count == 0 { 0 } else { self.min }
    }

    /// Exact mean, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The value at quantile `q` in `[0, 1]` (0.5 = median, 0.99 = p99), 0 when empty.
    ///
    /// Uses the nearest-rank definition: the smallest recorded value such that at least
    /// `ceil(q * count)` values (and at least one) are less than or equal to it.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return highest_in(i).min(self.max).max(self.min);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for v in 1..200_000u64 {
            let i = index_of(v);
            assert!(i == last || i == last + 1, "gap at {v}");
            last = i;
            let hi = highest_in(i);
            assert!(hi >= v, "bucket top {hi} below {v}");
            assert!(
                (hi - v) as f64 <= v as f64 / 64.0,
                "bucket of {v} too wide: {hi}"
            );
        }
        assert_eq!(index_of(MAX_TRACKABLE), BUCKETS - 1);
        assert_eq!(highest_in(BUCKETS - 1), MAX_TRACKABLE);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), 50);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.quantile(0.0), 1);
        assert_eq!(h.min(), 1);
        assert_eq!(h.max(), 100);
        assert!((h.mean() - 50.5).abs() < 1e-9);
    }

    #[test]
    fn large_values_within_precision_and_merge() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        // 1..=10_000 µs split over two histograms; true p50 = 5000, p99 = 9900.
        for v in 1..=10_000u64 {
            if v % 2 == 0 { a.record(v) } else { b.record(v) }
        }
        a.merge(&b);
        assert_eq!(a.count(), 10_000);
        for (q, truth) in [(0.5, 5000u64), (0.99, 9900), (0.999, 9990)] {
            let got = a.quantile(q);
            assert!(
                got >= truth && got as f64 <= truth as f64 * (1.0 + 1.0 / 64.0),
                "q={q} got {got}"
            );
        }
        assert_eq!(a.quantile(1.0), 10_000);
        assert_eq!(a.max(), 10_000);
    }

    #[test]
    fn empty_and_clamped() {
        let mut h = Histogram::new();
        assert_eq!(h.quantile(0.5), 0);
        assert_eq!(h.min(), 0);
        h.record(u64::MAX);
        assert_eq!(h.max(), MAX_TRACKABLE);
        assert_eq!(h.quantile(0.5), MAX_TRACKABLE);
    }
}
