//! The only code allowed to read the system clock (enforced by `clippy.toml`'s
//! `disallowed-methods`). Everything else is handed a [`Clock`], so time can be injected: in our
//! tests, and in the tests of services that run wharf on a manual clock (docs/DESIGN.md,
//! "Injected time and disk are product features").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch. Deadlines and leases are
/// expressed in this unit because they must survive restarts (S-TTL-4).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "this is the one place that reads the clock"
    )]
    fn now_ms(&self) -> u64 {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms: Arc::new(AtomicU64::new(now_ms)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`, which may be earlier than the current time.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Measures how long something took in real, monotonic time (recovery in the start line),
/// independent of the injected [`Clock`]: a manual clock must not make recovery look instant,
/// and a wall clock that steps must not make it look negative. For reports only; no rule may
/// depend on it.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch {
    started: Instant,
}

impl Stopwatch {
    /// Starts measuring now.
    #[expect(
        clippy::disallowed_methods,
        reason = "the stopwatch measures real elapsed time for reports, never for rules"
    )]
    pub fn start() -> Self {
        Stopwatch {
            started: Instant::now(),
        }
    }

    /// Real time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// [`Stopwatch::elapsed`] in whole milliseconds.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_time() {
        let clock = ManualClock::new(1_000);
        let other = clock.clone();
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(Duration::from_millis(250));
        assert_eq!(other.now_ms(), 1_250);
        other.set(5);
        assert_eq!(clock.now_ms(), 5);
    }

    #[test]
    fn stopwatch_measures_real_time_whatever_the_injected_clock() {
        let clock = ManualClock::new(1_000);
        let watch = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(clock.now_ms(), 1_000, "the manual clock did not move");
        assert!(watch.elapsed() >= Duration::from_millis(20));
        assert!(watch.elapsed_ms() >= 20);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
