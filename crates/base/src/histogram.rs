//! [`Histogram`]: counts of values in fixed buckets, with their sum, for the metrics endpoint
//! (Prometheus histograms). Plain relaxed atomics, one add per bucket, sum and count per
//! value, so any thread may record and a scrape may read at any time (a scrape racing a
//! record may see it half counted; the next scrape corrects it). Knows nothing of time: a
//! duration is recorded in microseconds by whoever measured it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds for latencies, microseconds (10 us to 1 s; +Inf is implied).
pub const LATENCY_BOUNDS_US: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
];

/// Bucket bounds for counts of things per batch (+Inf is implied).
pub const COUNT_BOUNDS: [u64; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];

/// Live counters: one per bucket (not cumulative; the last is +Inf), the sum and the count.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    count: AtomicU64,
}

/// A copy of a histogram's counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// The finite upper bounds of the buckets.
    pub bounds: &'static [u64],
    /// Values per bucket (`bounds`, then +Inf); not cumulative.
    pub buckets: Vec<u64>,
    /// Sum of the values.
    pub sum: u64,
    /// Values counted.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [u64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "ascending bounds");
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// A latency histogram ([`LATENCY_BOUNDS_US`]).
    pub fn latency() -> Self {
        Self::new(&LATENCY_BOUNDS_US)
    }

    /// A histogram of counts per batch ([`COUNT_BOUNDS`]).
    pub fn counts() -> Self {
        Self::new(&COUNT_BOUNDS)
    }

    /// Counts `value` in the bucket of its upper bound.
    pub fn record(&self, value: u64) {
        let at = self
            .bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(self.bounds.len());
        if let Some(b) = self.buckets.get(at) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(value, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a duration, in microseconds.
    pub fn record_duration(&self, d: Duration) {
        self.record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// The counters now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_bucket_of_their_upper_bound() {
        let h = Histogram::new(&[1, 10]);
        for v in [0, 1, 2, 10, 11, 1_000] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![2, 2, 2]);
        assert_eq!(s.sum, 1_024);
        assert_eq!(s.count, 6);
    }

    #[test]
    fn durations_count_in_microseconds() {
        let h = Histogram::latency();
        h.record_duration(Duration::from_micros(30));
        h.record_duration(Duration::from_secs(2));
        let s = h.snapshot();
        assert_eq!(s.buckets[2], 1, "30 us is <= 50 us");
        assert_eq!(s.buckets[LATENCY_BOUNDS_US.len()], 1, "+Inf");
        assert_eq!(s.sum, 2_000_030);
    }
}
