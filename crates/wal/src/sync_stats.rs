//! Histograms of the writer's `fdatasync`s: how long each took and how many records it made
//! durable (group commit's batch size). Plain atomics bumped once per sync by the writer
//! thread, read by the metrics endpoint; a few nanoseconds against a sync of tens of
//! microseconds at least. Knows nothing of what the records are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, microseconds (Prometheus `le`; +Inf is implied).
pub const SYNC_LATENCY_BOUNDS_US: [u64; 13] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// Upper bounds of the records-per-sync buckets (+Inf is implied).
pub const SYNC_RECORDS_BOUNDS: [u64; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];

/// The live counters (one per bucket, not cumulative; the last is +Inf).
#[derive(Debug, Default)]
pub struct SyncStats {
    latency: [AtomicU64; SYNC_LATENCY_BOUNDS_US.len() + 1],
    latency_sum_us: AtomicU64,
    records: [AtomicU64; SYNC_RECORDS_BOUNDS.len() + 1],
    records_sum: AtomicU64,
    count: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncSnapshot {
    /// Syncs per latency bucket (bounds [`SYNC_LATENCY_BOUNDS_US`], then +Inf).
    pub latency_buckets: Vec<u64>,
    /// Sum of the latencies, microseconds.
    pub latency_sum_us: u64,
    /// Syncs per records-per-sync bucket (bounds [`SYNC_RECORDS_BOUNDS`], then +Inf).
    pub records_buckets: Vec<u64>,
    /// Records made durable by these syncs.
    pub records_sum: u64,
    /// Syncs counted.
    pub count: u64,
}

fn bucket(bounds: &[u64], value: u64) -> usize {
    bounds
        .iter()
        .position(|&b| value <= b)
        .unwrap_or(bounds.len())
}

impl SyncStats {
    /// Counts one sync that took `latency` and made `records` records durable.
    pub fn record(&self, latency: Duration, records: u64) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        if let Some(b) = self.latency.get(bucket(&SYNC_LATENCY_BOUNDS_US, us)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(b) = self.records.get(bucket(&SYNC_RECORDS_BOUNDS, records)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        self.records_sum.fetch_add(records, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now (each read on its own: a scrape racing a sync may see it half
    /// counted, which the next scrape corrects).
    pub fn snapshot(&self) -> SyncSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SyncSnapshot {
            latency_buckets: self.latency.iter().map(load).collect(),
            latency_sum_us: load(&self.latency_sum_us),
            records_buckets: self.records.iter().map(load).collect(),
            records_sum: load(&self.records_sum),
            count: load(&self.count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_land_in_the_bucket_of_their_upper_bound() {
        let s = SyncStats::default();
        s.record(Duration::from_micros(100), 1);
        s.record(Duration::from_micros(101), 3);
        s.record(Duration::from_secs(5), 10_000);
        let snap = s.snapshot();
        assert_eq!(snap.count, 3);
        assert_eq!(snap.latency_buckets[0], 1, "100 us is <= 100");
        assert_eq!(snap.latency_buckets[1], 1, "101 us is <= 250");
        assert_eq!(
            snap.latency_buckets[SYNC_LATENCY_BOUNDS_US.len()],
            1,
            "+Inf"
        );
        assert_eq!(snap.records_buckets[0], 1);
        assert_eq!(snap.records_buckets[2], 1, "3 records is <= 4");
        assert_eq!(snap.records_buckets[SYNC_RECORDS_BOUNDS.len()], 1);
        assert_eq!(snap.records_sum, 10_004);
        assert_eq!(snap.latency_sum_us, 100 + 101 + 5_000_000);
    }
}
