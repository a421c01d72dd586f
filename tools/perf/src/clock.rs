//! The only code in wharf-perf that reads the clocks (the workspace's `clippy.toml` bans
//! `Instant::now` and `SystemTime::now` elsewhere). Depends on std only.
//!
//! Two clocks on purpose: rates are measured on the monotonic clock, while the send timestamp
//! embedded in a message body is wall-clock microseconds, so that a publisher and a consumer in
//! different processes (a pre-filled queue, `compare.sh`) still agree on what "sent" means.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic stopwatch started at a fixed origin; clones share the origin.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    origin: Instant,
}

impl Stopwatch {
    /// A stopwatch whose origin is now.
    #[expect(
        clippy::disallowed_methods,
        reason = "the perf tool's one reader of the monotonic clock"
    )]
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Time since the origin.
    pub fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// Wall-clock microseconds since the Unix epoch (0 if the clock stands before 1970).
#[expect(
    clippy::disallowed_methods,
    reason = "the perf tool's one reader of the wall clock (send stamps in message bodies)"
)]
pub fn wall_us() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX)
}
