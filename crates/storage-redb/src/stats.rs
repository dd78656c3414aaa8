//! What the writer has done since the store opened, for [`crate::RedbStorage::stats`]:
//! counters of requests and commits (groups made durable, through the write-ahead log or a
//! durable redb commit), and the distributions of commit latency and of requests per commit
//! (group size).
//!
//! Where it sits: the writer thread (`writer.rs`) records after each group; readers (tests,
//! `cairn`'s metrics endpoint through [`crate::RedbStatsSource`]) copy a snapshot. Plain data:
//! this crate depends on no metrics library; `cairn` renders the figures.
//!
//! Invariants: only the writer thread records, once per group, after its commit returned; a
//! distribution's `counts` has one entry per bound plus one for values above every bound, and
//! they add up to `count`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Bucket bounds of [`RedbStats::commit_seconds`]: 0.5 ms to 10 s.
pub const COMMIT_SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Bucket bounds of [`RedbStats::batch_sizes`]: powers of two up to the largest group.
pub const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Counts of the writer's work since the store was opened.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct RedbStats {
    /// Commits: groups that wrote something, each made durable once (a synced log record or a
    /// durable redb commit).
    pub commits: u64,
    /// Transactions and restores the writer applied, writing or not.
    pub requests: u64,
    /// Seconds from opening a group's write transaction to its commit (durable and visible),
    /// per commit.
    pub commit_seconds: Distribution,
    /// Requests per commit.
    pub batch_sizes: Distribution,
}

/// Observations in fixed buckets, with their count, sum, extremes and sum of squares.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Distribution {
    /// Upper bounds of the buckets, increasing; a last bucket above them is implied.
    pub bounds: &'static [f64],
    /// Observations per bucket (not cumulative), `bounds.len() + 1` entries.
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
    /// The smallest and largest observation (0 while empty).
    pub min: f64,
    pub max: f64,
    pub sum_squares: f64,
}

impl Distribution {
    fn new(bounds: &'static [f64]) -> Distribution {
        Distribution {
            bounds,
            counts: vec![0; bounds.len() + 1],
            ..Distribution::default()
        }
    }

    fn observe(&mut self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        if self.count == 0 {
            (self.min, self.max) = (value, value);
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += 1;
        self.sum += value;
        self.sum_squares += value * value;
    }
}

/// The live figures, shared by the writer and every reader.
#[derive(Debug)]
pub(crate) struct Counters {
    commits: AtomicU64,
    requests: AtomicU64,
    /// (commit latency, batch size), updated together once per commit.
    distributions: Mutex<(Distribution, Distribution)>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            commits: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            distributions: Mutex::new((
                Distribution::new(COMMIT_SECONDS_BUCKETS),
                Distribution::new(BATCH_SIZE_BUCKETS),
            )),
        }
    }
}

impl Counters {
    /// Records one group of `requests`; `commit_seconds` is `Some` when it was committed
    /// (it wrote something).
    pub(crate) fn record_group(&self, requests: usize, commit_seconds: Option<f64>) {
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
        if let Some(seconds) = commit_seconds {
            self.commits.fetch_add(1, Ordering::Relaxed);
            let mut distributions = self
                .distributions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            distributions.0.observe(seconds);
            distributions.1.observe(requests as f64);
        }
    }

    pub(crate) fn snapshot(&self) -> RedbStats {
        let distributions = self
            .distributions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        RedbStats {
            commits: self.commits.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            commit_seconds: distributions.0,
            batch_sizes: distributions.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_that_wrote_are_counted_as_commits_with_their_size_and_latency() {
        let counters = Counters::default();
        counters.record_group(3, Some(0.002));
        counters.record_group(1, None);
        counters.record_group(300, Some(0.02));
        let stats = counters.snapshot();
        assert_eq!((stats.commits, stats.requests), (2, 304));
        assert_eq!(stats.batch_sizes.count, 2);
        assert_eq!(stats.batch_sizes.counts, vec![0, 0, 1, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!((stats.batch_sizes.min, stats.batch_sizes.max), (3.0, 300.0));
        assert_eq!(stats.commit_seconds.count, 2);
        assert_eq!(stats.commit_seconds.counts.iter().sum::<u64>(), 2);
        assert_eq!(stats.commit_seconds.counts[2], 1); // 2 ms: the 2.5 ms bucket
    }
}
