//! The figures a scrape reports, as plain data: a [`Family`] is one metric name with its help
//! text and one sample per label set; a [`Histogram`] is a distribution in fixed buckets.
//!
//! Where it sits: everything that reports figures (the request recorder in `registry.rs`, the
//! store's figures handed to [`Metrics::add_source`](crate::metrics::Metrics::add_source), each
//! service's own gauges) produces families; `render.rs` turns the same families into the
//! Prometheus text format or the go-metrics JSON summary.
//!
//! Invariants: a family's samples all have its kind (the constructors take only that kind's
//! values); a histogram's `counts` has one entry per bound plus one for `+Inf`, and their sum
//! is `count`.

/// Label pairs of one sample, in the order they are rendered.
pub type Labels = Vec<(&'static str, String)>;

/// One metric: its name (without the `_total` a counter gets when rendered), its help text and
/// its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub samples: Samples,
}

/// A family's samples, all of one kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Samples {
    /// Monotonic counts since the process started.
    Counter(Vec<(Labels, u64)>),
    /// Values computed when the scrape happens (counts of things, flags).
    Gauge(Vec<(Labels, i64)>),
    Histogram(Vec<(Labels, Histogram)>),
}

impl Family {
    pub fn counter(name: &'static str, help: &'static str, samples: Vec<(Labels, u64)>) -> Family {
        Family {
            name,
            help,
            samples: Samples::Counter(samples),
        }
    }

    pub fn gauge(name: &'static str, help: &'static str, samples: Vec<(Labels, i64)>) -> Family {
        Family {
            name,
            help,
            samples: Samples::Gauge(samples),
        }
    }

    /// A gauge with one unlabelled sample.
    pub fn single_gauge(name: &'static str, help: &'static str, value: i64) -> Family {
        Family::gauge(name, help, vec![(Labels::new(), value)])
    }

    pub fn histogram(
        name: &'static str,
        help: &'static str,
        samples: Vec<(Labels, Histogram)>,
    ) -> Family {
        Family {
            name,
            help,
            samples: Samples::Histogram(samples),
        }
    }
}

/// A distribution of observed values in fixed buckets, with what the go-metrics summary also
/// reports (minimum, maximum, sum of squares).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Upper bounds of the buckets, increasing; the `+Inf` bucket is implied.
    pub bounds: &'static [f64],
    /// Observations per bucket (not cumulative): `bounds.len() + 1` entries, the last for
    /// values above every bound.
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
    /// The smallest and largest observation (0 while empty).
    pub min: f64,
    pub max: f64,
    pub sum_squares: f64,
}

/// Bucket bounds for latencies in seconds: 0.5 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Histogram {
    /// An empty histogram over `bounds` (increasing, finite).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            count: 0,
            sum: 0.0,
            min: 0.0,
            max: 0.0,
            sum_squares: 0.0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        if self.count == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += 1;
        self.sum += value;
        self.sum_squares += value * value;
    }

    /// The mean, or 0 while empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The sample standard deviation (go-metrics' formula), or 0 below two observations.
    pub fn stddev(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let count = self.count as f64;
        let variance = (count * self.sum_squares - self.sum * self.sum) / (count * (count - 1.0));
        variance.max(0.0).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: &[f64] = &[1.0, 10.0];

    #[test]
    fn histogram_counts_each_value_in_the_first_bucket_that_holds_it() {
        let mut histogram = Histogram::new(BOUNDS);
        for value in [0.5, 1.0, 3.0, 10.0, 11.0] {
            histogram.observe(value);
        }
        assert_eq!(histogram.counts, vec![2, 2, 1]);
        assert_eq!(histogram.count, 5);
        assert_eq!(histogram.sum, 25.5);
        assert_eq!((histogram.min, histogram.max), (0.5, 11.0));
    }

    #[test]
    fn histogram_mean_and_stddev_follow_go_metrics() {
        let mut histogram = Histogram::new(BOUNDS);
        assert_eq!((histogram.mean(), histogram.stddev()), (0.0, 0.0));
        for value in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            histogram.observe(value);
        }
        assert_eq!(histogram.mean(), 5.0);
        // Sample standard deviation: sqrt(32 / 7).
        assert!((histogram.stddev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }
}
