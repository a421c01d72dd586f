//! Sampled message rates for `message_stats` (RabbitMQ's `rates_mode: basic`): a small ring of
//! (time, counters) samples, taken when a listing asks for them, so that the broker task pays
//! nothing per message beyond the counters it already keeps (S-MGMT-6). The time is the broker
//! task's clock (`AdminView::now_ms`), so a test on a manual clock sees exact rates.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value as Json, json};

use crate::counters::MessageCounters;

/// Samples kept; older ones are dropped first.
const SAMPLES_MAX: usize = 32;
/// A rate is measured over at least this long when the samples allow it (RabbitMQ's basic
/// mode reports the last 5 s).
const WINDOW_MS: u64 = 5_000;

/// The ring of samples.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    samples: Mutex<VecDeque<(u64, MessageCounters)>>,
}

/// Messages per second between two counts `dt_ms` apart (0 when no time passed).
#[expect(
    clippy::cast_precision_loss,
    reason = "counts and milliseconds far below 2^52"
)]
fn per_second(new: u64, old: u64, dt_ms: u64) -> f64 {
    if dt_ms == 0 {
        return 0.0;
    }
    new.saturating_sub(old) as f64 * 1000.0 / dt_ms as f64
}

impl Rates {
    /// Records `counters` seen at `now_ms` and returns RabbitMQ's `message_stats`: each count
    /// with its `*_details.rate`, measured from the newest sample at least [`WINDOW_MS`] old
    /// (or the oldest there is). A sample at a time already sampled keeps the first one.
    pub(crate) fn message_stats(&self, now_ms: u64, counters: MessageCounters) -> Json {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.back().is_none_or(|(t, _)| *t < now_ms) {
            if samples.len() == SAMPLES_MAX {
                samples.pop_front();
            }
            samples.push_back((now_ms, counters));
        }
        let (then, old) = samples
            .iter()
            .rev()
            .find(|(t, _)| now_ms.saturating_sub(*t) >= WINDOW_MS)
            .or_else(|| samples.front())
            .copied()
            .unwrap_or((now_ms, counters));
        let dt = now_ms.saturating_sub(then);
        let mut map = Map::new();
        for (name, new, old) in [
            ("publish", counters.published, old.published),
            ("deliver_get", counters.delivered, old.delivered),
            ("ack", counters.acked, old.acked),
            // The dashboard's other series (S-UI-5): RabbitMQ's names, then wharf's own.
            ("confirm", counters.confirmed, old.confirmed),
            ("redeliver", counters.redelivered, old.redelivered),
            ("expired", counters.expired, old.expired),
            ("dead_lettered", counters.dead_lettered, old.dead_lettered),
        ] {
            map.insert(name.to_owned(), json!(new));
            map.insert(
                format!("{name}_details"),
                json!({ "rate": per_second(new, old, dt) }),
            );
        }
        Json::Object(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(published: u64) -> MessageCounters {
        MessageCounters {
            published,
            ..MessageCounters::default()
        }
    }

    #[test]
    fn s_mgmt_6_rates_come_from_samples_on_the_broker_clock() {
        let rates = Rates::default();
        let first = rates.message_stats(10_000, counters(0));
        assert_eq!(first["publish_details"]["rate"], 0.0);
        // Same instant again: the first sample stays.
        rates.message_stats(10_000, counters(7));
        let later = rates.message_stats(15_000, counters(10));
        assert_eq!(later["publish"], 10);
        assert_eq!(later["publish_details"]["rate"], 2.0);
        // A sample 1 s later still measures over the last 5 s window.
        let next = rates.message_stats(16_000, counters(20));
        assert_eq!(next["publish_details"]["rate"], 20.0 / 6.0);
        let after = rates.message_stats(21_000, counters(20));
        assert_eq!(after["publish_details"]["rate"], 0.0);
    }

    #[test]
    fn s_ui_5_message_stats_carry_the_dashboard_series() {
        let rates = Rates::default();
        rates.message_stats(0, MessageCounters::default());
        let now = MessageCounters {
            confirmed: 10,
            redelivered: 5,
            expired: 20,
            dead_lettered: 15,
            ..MessageCounters::default()
        };
        let stats = rates.message_stats(5_000, now);
        for (name, count, rate) in [
            ("confirm", 10, 2.0),
            ("redeliver", 5, 1.0),
            ("expired", 20, 4.0),
            ("dead_lettered", 15, 3.0),
        ] {
            assert_eq!(stats[name], count, "{name}");
            assert_eq!(stats[format!("{name}_details")]["rate"], rate, "{name}");
        }
    }
}
