//! A fixed-size log-linear latency histogram (in the manner of `HdrHistogram`) and its
//! percentiles. Depends on std only.
//!
//! Values below 256 are exact; above, each power of two is split into 128 buckets, so a
//! reported value is within 1/128 (< 0.8 %) of a recorded one. Memory is fixed (7,424 counters)
//! whatever the run length, so a long run cannot grow the generator.

/// Sub-bucket precision: 2^7 = 128 buckets per power of two.
const SUB_BITS: u32 = 7;
const SUB_COUNT: u64 = 1 << SUB_BITS;
/// Buckets needed to cover all of `u64`: exact values up to 2 * `SUB_COUNT`, then
/// `SUB_COUNT` buckets for each remaining power of two.
const BUCKETS: usize = (64 - SUB_BITS as usize) * (1 << SUB_BITS) + (1 << SUB_BITS);

/// Counts of recorded values (microseconds in this tool), with exact count, min, max and sum.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            count: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }
}

/// The bucket holding `value`.
fn bucket_of(value: u64) -> usize {
    if value < 2 * SUB_COUNT {
        // Exact: `value` < 256 fits any usize.
        return usize::try_from(value).unwrap_or(0);
    }
    let exp = value.ilog2(); // >= SUB_BITS + 1 here
    let shift = exp - SUB_BITS;
    let block = u64::from(shift) + 1;
    let index = block * SUB_COUNT + (value >> shift) - SUB_COUNT;
    usize::try_from(index).unwrap_or(BUCKETS - 1)
}

/// The smallest value that falls into `bucket`, and the bucket's width.
fn bucket_range(bucket: usize) -> (u64, u64) {
    let bucket = bucket as u64;
    if bucket < 2 * SUB_COUNT {
        return (bucket, 1);
    }
    let block = bucket >> SUB_BITS;
    let offset = bucket & (SUB_COUNT - 1);
    let shift = block - 1;
    ((SUB_COUNT + offset) << shift, 1 << shift)
}

impl Histogram {
    /// Records one value.
    pub fn record(&mut self, value: u64) {
        let bucket = bucket_of(value);
        if let Some(slot) = self.counts.get_mut(bucket) {
            *slot += 1;
        }
        self.count += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.sum += u128::from(value);
    }

    /// Adds every value recorded in `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Largest recorded value, if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Smallest recorded value, if any.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Mean of the recorded values, if any.
    pub fn mean(&self) -> Option<f64> {
        #[expect(
            clippy::cast_precision_loss,
            reason = "a mean only needs f64 precision"
        )]
        let mean = self.sum as f64 / self.count as f64;
        (self.count > 0).then_some(mean)
    }

    /// The value below or at which `percentile` % of the recorded values lie (nearest-rank
    /// definition), reported as the middle of its bucket and clamped to [min, max]. `None` when
    /// empty; `percentile` is clamped to [0, 100].
    pub fn percentile(&self, percentile: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let fraction = percentile.clamp(0.0, 100.0) / 100.0;
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a rank within 1 of exact is enough; the product is in [0, count]"
        )]
        let rank = ((fraction * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, width) = bucket_range(bucket);
                let middle = low + (width - 1) / 2;
                return Some(middle.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_invert() {
        let mut previous_end = 0;
        for bucket in 0..BUCKETS {
            let (low, width) = bucket_range(bucket);
            assert_eq!(low, previous_end, "gap before bucket {bucket}");
            assert_eq!(bucket_of(low), bucket);
            assert_eq!(bucket_of(low + (width - 1)), bucket);
            previous_end = low.wrapping_add(width);
        }
        assert_eq!(previous_end, 0, "the last bucket must end at 2^64");
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), Some(50));
        assert_eq!(h.percentile(99.0), Some(99));
        assert_eq!(h.percentile(99.9), Some(100));
        assert_eq!(h.percentile(0.0), Some(1));
        assert_eq!(h.percentile(100.0), Some(100));
        assert_eq!(h.min(), Some(1));
        assert_eq!(h.max(), Some(100));
        assert!((h.mean().unwrap() - 50.5).abs() < 1e-9);
    }

    #[test]
    fn large_values_stay_within_relative_error() {
        let mut h = Histogram::default();
        // 1,000 values spread from 1 ms to 1 s: the nearest-rank p99 is the 990th.
        let values: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        for &v in values.iter().rev() {
            h.record(v);
        }
        for (p, exact) in [(50.0, 500_000), (99.0, 990_000), (99.9, 999_000)] {
            let got = h.percentile(p).unwrap();
            // |got - exact| / exact < 1/128, in integers.
            assert!(
                got.abs_diff(exact) * 128 < exact,
                "p{p}: got {got}, exact {exact}"
            );
        }
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        );
        for v in 0..5000u64 {
            let value = v * v % 77_777;
            if v % 3 == 0 {
                a.record(value);
            } else {
                b.record(value);
            }
            all.record(value);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        for p in [1.0, 50.0, 90.0, 99.0, 99.9] {
            assert_eq!(a.percentile(p), all.percentile(p));
        }
        assert_eq!((a.min(), a.max()), (all.min(), all.max()));
    }

    #[test]
    fn empty_histogram_has_no_percentiles() {
        let h = Histogram::default();
        assert_eq!(h.percentile(50.0), None);
        assert_eq!(h.mean(), None);
        assert_eq!(h.max(), None);
    }
}
