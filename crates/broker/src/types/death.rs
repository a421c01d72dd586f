//! Why a message died (S-DLX-1), and a death that waits to be dead-lettered (S-QQ-10).

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
