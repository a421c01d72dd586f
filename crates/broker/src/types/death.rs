//! How messages die: why (S-DLX-1), a death that waits to be dead-lettered (S-QQ-10), and a
//! message's newest `x-death` entry read back as plain data: where it died, why, and how it
//! had been routed there (S-DLX-5), what the dead-letter explorer groups by and what a move
//! back routes with (S-UI-9, S-UI-10).

use crate::types::Properties;
use crate::value::{FieldTable, Value};

/// The newest entry of a message's `x-death` header (the first of the array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// The queue it died in.
    pub queue: String,
    /// Why (`rejected`, `expired`, `maxlen`, `delivery_limit`).
    pub reason: String,
    /// The exchange it had been published to before it died.
    pub exchange: String,
    /// The routing keys it had been published with (its key, then `CC`).
    pub routing_keys: Vec<String>,
    /// How many times it died in that queue for that reason.
    pub count: u64,
}

impl Death {
    /// The newest `x-death` entry of `props`; `None` when the message never died (no
    /// `x-death`, or an entry without a queue or reason).
    #[must_use]
    pub fn newest(props: &Properties) -> Option<Death> {
        let Some(Value::Array(deaths)) = props.headers.as_ref()?.get("x-death") else {
            return None;
        };
        let Some(Value::Table(t)) = deaths.first() else {
            return None;
        };
        Some(Death {
            queue: text(t, "queue")?,
            reason: text(t, "reason")?,
            exchange: text(t, "exchange").unwrap_or_default(),
            routing_keys: match t.get("routing-keys") {
                Some(Value::Array(keys)) => keys
                    .iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            },
            count: t
                .get("count")
                .and_then(Value::as_integer)
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
        })
    }
}

fn text(t: &FieldTable, key: &str) -> Option<String> {
    t.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Why a message left a queue other than by an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeathReason {
    /// `basic.reject` / `basic.nack` without requeue.
    Rejected,
    /// Its deadline passed.
    Expired,
    /// Length limit.
    Maxlen,
    /// Returned more than `x-delivery-limit` times.
    DeliveryLimit,
}

impl DeathReason {
    /// The reason as written in `x-death`.
    pub fn name(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::Maxlen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// A message waiting in its quorum queue to be dead-lettered (S-QQ-10): why it died and
/// when (the `time` of its `x-death` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldDeath {
    /// Why it died.
    pub reason: DeathReason,
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
}
