//! Histograms of the writer thread's work: how long each `fdatasync` took and how many
//! records it made durable (group commit's batch size), how long each segment roll took
//! (sealing the old segment, creating and reserving the new one) and each zero-fill ahead
//! of the write position (preallocation). Bumped by the writer thread, read by the metrics
//! endpoint; a few nanoseconds against a sync of tens of microseconds at least. Knows
//! nothing of what the records are.

use std::time::Duration;

use wharf_base::histogram::{COUNT_BOUNDS, LATENCY_BOUNDS_US};
use wharf_base::{Histogram, HistogramSnapshot};

/// Upper bounds of the latency buckets, microseconds (Prometheus `le`; +Inf is implied).
pub const SYNC_LATENCY_BOUNDS_US: [u64; 16] = LATENCY_BOUNDS_US;

/// Upper bounds of the records-per-sync buckets (+Inf is implied).
pub const SYNC_RECORDS_BOUNDS: [u64; 12] = COUNT_BOUNDS;

/// The live counters.
#[derive(Debug)]
pub struct SyncStats {
    latency: Histogram,
    records: Histogram,
    roll: Histogram,
    prefill: Histogram,
}

impl Default for SyncStats {
    fn default() -> Self {
        SyncStats {
            latency: Histogram::latency(),
            records: Histogram::counts(),
            roll: Histogram::latency(),
            prefill: Histogram::latency(),
        }
    }
}

/// A copy of the counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncSnapshot {
    /// `fdatasync` latencies, microseconds.
    pub latency: HistogramSnapshot,
    /// Records made durable per `fdatasync`.
    pub records: HistogramSnapshot,
    /// Segment rolls (seal the old, create and reserve the new), microseconds.
    pub roll: HistogramSnapshot,
    /// Zero-fills ahead of the write position (preallocation steps), microseconds.
    pub prefill: HistogramSnapshot,
}

impl SyncStats {
    /// Counts one sync that took `latency` and made `records` records durable.
    pub fn record(&self, latency: Duration, records: u64) {
        self.latency.record_duration(latency);
        self.records.record(records);
    }

    /// Counts one segment roll that took `took`.
    pub fn record_roll(&self, took: Duration) {
        self.roll.record_duration(took);
    }

    /// Counts one preallocation step that took `took`.
    pub fn record_prefill(&self, took: Duration) {
        self.prefill.record_duration(took);
    }

    /// The counters now.
    pub fn snapshot(&self) -> SyncSnapshot {
        SyncSnapshot {
            latency: self.latency.snapshot(),
            records: self.records.snapshot(),
            roll: self.roll.snapshot(),
            prefill: self.prefill.snapshot(),
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
        s.record_roll(Duration::from_millis(3));
        let snap = s.snapshot();
        assert_eq!(snap.latency.count, 3);
        assert_eq!(snap.latency.buckets[3], 1, "100 us is <= 100");
        assert_eq!(snap.latency.buckets[4], 1, "101 us is <= 250");
        assert_eq!(
            snap.latency.buckets[SYNC_LATENCY_BOUNDS_US.len()],
            1,
            "+Inf"
        );
        assert_eq!(snap.records.buckets[0], 1);
        assert_eq!(snap.records.buckets[2], 1, "3 records is <= 4");
        assert_eq!(snap.records.buckets[SYNC_RECORDS_BOUNDS.len()], 1);
        assert_eq!(snap.records.sum, 10_004);
        assert_eq!(snap.latency.sum, 100 + 101 + 5_000_000);
        assert_eq!((snap.roll.count, snap.roll.sum), (1, 3_000));
        assert_eq!(snap.prefill.count, 0);
    }
}
