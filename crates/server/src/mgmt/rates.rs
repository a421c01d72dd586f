//! Sampled message rates for `message_stats` (RabbitMQ's `rates_mode: basic`): per object
//! (the overview, a queue, an exchange, a channel), a small ring of (time, counts) samples,
//! taken when a listing asks for them, so that the broker task pays nothing per message
//! beyond the counters it already keeps (S-MGMT-6, S-MGMT-8). The time is the broker task's
//! clock (`AdminView::now_ms`), so a test on a manual clock sees exact rates.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value as Json, json};

use crate::counters::MessageCounters;

/// Samples kept per object; older ones are dropped first.
const SAMPLES_MAX: usize = 32;
/// A rate is measured over at least this long when the samples allow it (RabbitMQ's basic
/// mode reports the last 5 s).
const WINDOW_MS: u64 = 5_000;
/// An object not sampled for this long (deleted, or no longer listed) loses its ring.
const STALE_MS: u64 = 10 * 60 * 1000;

/// One object's counts, named as RabbitMQ names them in `message_stats`.
pub(crate) type Counts = Vec<(&'static str, u64)>;

/// The overview's series: RabbitMQ's names, then the dashboard's others (S-UI-5), RabbitMQ's
/// names where it has them and wharf's own after.
pub(crate) fn overview_counts(c: &MessageCounters) -> Counts {
    vec![
        ("publish", c.published),
        ("deliver_get", c.all.delivered),
        ("ack", c.all.acked),
        ("redeliver", c.all.redelivered),
        ("confirm", c.confirmed),
        ("expired", c.expired),
        ("dead_lettered", c.dead_lettered),
    ]
}

/// One object's samples: (time, counts), oldest first.
type Ring = VecDeque<(u64, Vec<u64>)>;

/// The rings of samples, by object key (`q/VHOST/NAME`, `x/VHOST/NAME`, …).
#[derive(Debug, Default)]
pub(crate) struct Rates {
    rings: Mutex<HashMap<String, Ring>>,
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

/// Records `counts` in `ring` at `now_ms` and returns RabbitMQ's `message_stats`: each count
/// with its `*_details.rate`, measured from the newest sample at least [`WINDOW_MS`] old (or
/// the oldest there is). A sample at a time already sampled keeps the first one.
fn sample(ring: &mut Ring, now_ms: u64, counts: &Counts) -> Json {
    let values: Vec<u64> = counts.iter().map(|(_, v)| *v).collect();
    record(ring, now_ms, &values);
    let (then, old) = ring
        .iter()
        .rev()
        .find(|(t, _)| now_ms.saturating_sub(*t) >= WINDOW_MS)
        .or_else(|| ring.front())
        .map_or((now_ms, values.as_slice()), |(t, v)| (*t, v.as_slice()));
    let dt = now_ms.saturating_sub(then);
    let mut map = Map::new();
    for (i, (name, new)) in counts.iter().enumerate() {
        let old = old.get(i).copied().unwrap_or(*new);
        map.insert((*name).to_owned(), json!(new));
        map.insert(
            format!("{name}_details"),
            json!({ "rate": per_second(*new, old, dt) }),
        );
    }
    Json::Object(map)
}

/// Records `values` in `ring` at `now_ms`, unless a sample of that time is there already.
fn record(ring: &mut Ring, now_ms: u64, values: &[u64]) {
    if ring.back().is_none_or(|(t, _)| *t < now_ms) {
        if ring.len() == SAMPLES_MAX {
            ring.pop_front();
        }
        ring.push_back((now_ms, values.to_vec()));
    }
}

impl Rates {
    /// Samples each (key, counts) of one listing at `now_ms` without answering anything: a
    /// paged listing samples every object it lists, shown or not, so the rates of the page
    /// asked next are measured as if every page had been built (S-MGMT-8).
    pub(crate) fn record(&self, now_ms: u64, objects: &[(String, Counts)]) {
        let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, counts) in objects {
            let values: Vec<u64> = counts.iter().map(|(_, v)| *v).collect();
            record(rings.entry(key.clone()).or_default(), now_ms, &values);
        }
    }

    /// `message_stats` for each (key, counts) of one listing at `now_ms`, in order; rings of
    /// objects not sampled for [`STALE_MS`] are dropped.
    pub(crate) fn message_stats(&self, now_ms: u64, objects: &[(String, Counts)]) -> Vec<Json> {
        let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        let out = objects
            .iter()
            .map(|(key, counts)| sample(rings.entry(key.clone()).or_default(), now_ms, counts))
            .collect();
        rings.retain(|_, ring| {
            ring.back()
                .is_some_and(|(t, _)| now_ms.saturating_sub(*t) < STALE_MS)
        });
        out
    }

    /// Adds `message_stats` to each listed object: `list[i]` gets that of `objects[i]`.
    pub(crate) fn attach(&self, now_ms: u64, list: &mut [Json], objects: &[(String, Counts)]) {
        for (item, stats) in list.iter_mut().zip(self.message_stats(now_ms, objects)) {
            if let Some(map) = item.as_object_mut() {
                map.insert("message_stats".to_owned(), stats);
            }
        }
    }

    /// `message_stats` of one object.
    pub(crate) fn one(&self, now_ms: u64, key: String, counts: Counts) -> Json {
        self.message_stats(now_ms, &[(key, counts)])
            .pop()
            .unwrap_or(Json::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(n: u64) -> Counts {
        vec![("publish", n)]
    }

    #[test]
    fn s_mgmt_6_rates_come_from_samples_on_the_broker_clock() {
        let rates = Rates::default();
        let key = || "overview".to_owned();
        let first = rates.one(10_000, key(), published(0));
        assert_eq!(first["publish_details"]["rate"], 0.0);
        // Same instant again: the first sample stays.
        rates.one(10_000, key(), published(7));
        let later = rates.one(15_000, key(), published(10));
        assert_eq!(later["publish"], 10);
        assert_eq!(later["publish_details"]["rate"], 2.0);
        // A sample 1 s later still measures over the last 5 s window.
        let next = rates.one(16_000, key(), published(20));
        assert_eq!(next["publish_details"]["rate"], 20.0 / 6.0);
        let after = rates.one(21_000, key(), published(20));
        assert_eq!(after["publish_details"]["rate"], 0.0);
    }

    #[test]
    fn s_ui_5_message_stats_carry_the_dashboard_series() {
        let rates = Rates::default();
        let key = || "overview".to_owned();
        rates.one(0, key(), overview_counts(&MessageCounters::default()));
        let now = MessageCounters {
            confirmed: 10,
            all: crate::counters::QueueTypeCounters {
                redelivered: 5,
                ..Default::default()
            },
            expired: 20,
            dead_lettered: 15,
            ..MessageCounters::default()
        };
        let stats = rates.one(5_000, key(), overview_counts(&now));
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

    #[test]
    fn s_mgmt_8_each_object_has_its_own_ring_and_stale_ones_go() {
        let rates = Rates::default();
        let objects = |a: u64, b: u64| {
            vec![
                ("q/a".to_owned(), published(a)),
                ("q/b".to_owned(), published(b)),
            ]
        };
        rates.message_stats(0, &objects(0, 0));
        let s = rates.message_stats(5_000, &objects(10, 50));
        assert_eq!(s[0]["publish_details"]["rate"], 2.0);
        assert_eq!(s[1]["publish_details"]["rate"], 10.0);
        // `q/b` is not listed for longer than STALE_MS: its ring goes, and it starts over.
        rates.message_stats(STALE_MS + 5_000, &[("q/a".to_owned(), published(10))]);
        let s = rates.one(STALE_MS + 6_000, "q/b".to_owned(), published(60));
        assert_eq!(s["publish_details"]["rate"], 0.0);
        assert_eq!(rates.rings.lock().unwrap().len(), 2);
    }
}
