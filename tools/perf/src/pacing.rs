//! The publish-rate schedule behind `--rate` (as in RabbitMQ PerfTest): publisher message `k`
//! (from 0) is due `k / rate` seconds after the start. Pure integer arithmetic on elapsed time:
//! no clock, no tokio; the publisher reads its stopwatch and asks this module what is due.
//!
//! A publisher that falls behind (the broker was slow, the confirm window was full) sends what is
//! due at once, but at most `burst_max` (its confirm window) per look at the schedule, so that a
//! stall is followed by window-sized bursts as confirms return, never by one huge write; it
//! catches up no faster than the broker confirms.

use std::time::Duration;

/// The tokio timer's resolution; at high rates a publisher wakes this often and sends what is
/// due, rather than sleeping once per message.
pub const TICK: Duration = Duration::from_millis(1);

const NANOS_PER_S: u128 = 1_000_000_000;

/// One publisher's schedule: `numerator / denominator` messages per second (the total `--rate`
/// split evenly across publishers, kept as a fraction so that 5 msg/s over 2 publishers is
/// exactly 2.5 each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    numerator: u64,
    denominator: u64,
    burst_max: u64,
}

impl Pace {
    /// One publisher's share of `total_rate` msg/s across `publishers`, sending at most
    /// `burst_max` messages per look at the schedule when behind. `None` when unpaced (a rate of 0, no
    /// publishers).
    pub fn new(total_rate: u64, publishers: u32, burst_max: u64) -> Option<Self> {
        (total_rate > 0 && publishers > 0).then_some(Self {
            numerator: total_rate,
            denominator: u64::from(publishers),
            burst_max: burst_max.max(1),
        })
    }

    /// Messages whose send time has come by `elapsed` (message `k` at `k / rate`, so message 0
    /// is due at once).
    pub fn scheduled(&self, elapsed: Duration) -> u64 {
        let by_now = elapsed
            .as_nanos()
            .saturating_mul(u128::from(self.numerator))
            / (u128::from(self.denominator) * NANOS_PER_S);
        u64::try_from(by_now.saturating_add(1)).unwrap_or(u64::MAX)
    }

    /// How many to send now, `sent` having gone already: what is due, capped at the burst bound.
    pub fn due(&self, elapsed: Duration, sent: u64) -> u64 {
        self.scheduled(elapsed)
            .saturating_sub(sent)
            .min(self.burst_max)
    }

    /// When message `k` (from 0) is due: the smallest elapsed time at which it is scheduled.
    pub fn send_time(&self, k: u64) -> Duration {
        let nanos = u128::from(k)
            .saturating_mul(u128::from(self.denominator) * NANOS_PER_S)
            .div_ceil(u128::from(self.numerator));
        u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
    }

    /// How long to sleep when nothing is due: until message `sent` is, but at least one
    /// [`TICK`], so that at high rates one wake-up sends a batch.
    pub fn wait(&self, elapsed: Duration, sent: u64) -> Duration {
        self.send_time(sent).saturating_sub(elapsed).max(TICK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn zero_rate_or_no_publishers_is_unpaced() {
        assert_eq!(Pace::new(0, 1, 256), None);
        assert_eq!(Pace::new(1000, 0, 256), None);
    }

    #[test]
    fn first_message_is_due_at_once_then_one_per_period() {
        let pace = Pace::new(1000, 1, 1_000_000).unwrap();
        assert_eq!(pace.due(Duration::ZERO, 0), 1);
        assert_eq!(pace.due(Duration::ZERO, 1), 0);
        assert_eq!(pace.due(Duration::from_micros(999), 1), 0);
        assert_eq!(pace.due(ms(1), 1), 1);
        // After 1 s at 1000 msg/s, messages 0..=1000 are due.
        assert_eq!(pace.scheduled(ms(1000)), 1001);
        assert_eq!(pace.due(ms(1000), 1000), 1);
    }

    #[test]
    fn high_rate_sends_a_batch_per_tick() {
        // 100k msg/s: each 1 ms wake-up finds 100 due.
        let pace = Pace::new(100_000, 1, 256).unwrap();
        let sent = pace.scheduled(ms(5));
        assert_eq!(sent, 501);
        assert_eq!(pace.due(ms(6), sent), 100);
        // Over 5 s the schedule holds 500,001 messages: the rate is exact, not tick-rounded.
        assert_eq!(pace.scheduled(Duration::from_secs(5)), 500_001);
    }

    #[test]
    fn total_rate_splits_evenly_across_publishers_as_a_fraction() {
        // 5 msg/s over 2 publishers: 2.5 each, so 25 each after 10 s (+ message 0).
        let pace = Pace::new(5, 2, 100).unwrap();
        assert_eq!(pace.scheduled(Duration::from_secs(10)), 26);
        assert_eq!(pace.scheduled(ms(399)), 1);
        assert_eq!(pace.scheduled(ms(400)), 2);
        assert_eq!(pace.send_time(1), ms(400));
    }

    #[test]
    fn catch_up_is_bounded_by_the_burst_limit() {
        let pace = Pace::new(100_000, 1, 256).unwrap();
        // Stalled for 1 s with nothing sent: 100,001 are due but one burst is 256.
        assert_eq!(pace.due(Duration::from_secs(1), 0), 256);
        // Still behind after that burst: the next one is again at most 256.
        assert_eq!(pace.due(Duration::from_secs(1), 256), 256);
        // Nearly caught up: only what is due.
        assert_eq!(pace.due(Duration::from_secs(1), 100_000), 1);
        // Ahead of the schedule (never happens, but must not underflow).
        assert_eq!(pace.due(Duration::ZERO, 10), 0);
        // A burst limit of 0 would never send; it is raised to 1.
        assert_eq!(Pace::new(10, 1, 0).unwrap().due(Duration::ZERO, 0), 1);
    }

    #[test]
    fn wait_is_until_the_next_send_time_but_at_least_a_tick() {
        let slow = Pace::new(10, 1, 256).unwrap();
        // Message 1 is due at 100 ms.
        assert_eq!(slow.send_time(1), ms(100));
        assert_eq!(slow.wait(ms(30), 1), ms(70));
        // Behind schedule, or the next message microseconds away: one tick.
        assert_eq!(slow.wait(ms(500), 1), TICK);
        let fast = Pace::new(100_000, 1, 256).unwrap();
        assert_eq!(fast.wait(Duration::ZERO, 1), TICK);
        // send_time and scheduled agree: message k is scheduled exactly from send_time(k).
        for k in [1, 7, 99_999, 100_000, 123_457] {
            let at = fast.send_time(k);
            assert_eq!(fast.scheduled(at), k + 1);
            assert_eq!(
                fast.scheduled(at.checked_sub(Duration::from_nanos(1)).unwrap()),
                k
            );
        }
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let pace = Pace::new(u64::MAX, 1, u64::MAX).unwrap();
        assert_eq!(pace.scheduled(Duration::MAX), u64::MAX);
        let slow = Pace::new(1, 1024, 1).unwrap();
        assert_eq!(slow.send_time(u64::MAX), Duration::MAX);
    }
}
