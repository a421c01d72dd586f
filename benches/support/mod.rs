//! What the table-printing benches share: a stopwatch (benches time themselves), numbers
//! from the environment, directory sizes and medians.

use std::path::Path;
use std::time::{Duration, Instant};

#[expect(
    clippy::disallowed_methods,
    reason = "a benchmark measures elapsed time; this is not broker logic"
)]
pub fn stopwatch() -> Instant {
    Instant::now()
}

/// The number in environment variable `name`, or `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes of every file in `dir`.
#[allow(clippy::unwrap_used, reason = "a benchmark: a panic aborts the run")]
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// The median of `times` (sorted in place).
#[allow(
    clippy::indexing_slicing,
    reason = "a benchmark: a panic aborts the run"
)]
pub fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}
