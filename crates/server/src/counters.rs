//! [`MessageCounters`]: what the broker task counts for the metrics (`crate::metrics`) and the
//! management API's `message_stats`: plain integers bumped as operations and outcomes are
//! applied, copied on a scrape. A leaf module: it names nothing else of the server.
//!
//! Each counter is one of RabbitMQ's global counters (`rabbitmq_global_*`, the churn
//! counters) or one of wharf's own (`expired`, `dead_lettered`). Nothing here is sampled or
//! estimated: a counter moves exactly when the thing it counts happens.

/// Upper bounds of the message size histogram, bytes (RabbitMQ's `rabbitmq_message_size_bytes`
/// buckets); a last bucket, `+Inf`, follows.
pub const MESSAGE_SIZE_BOUNDS: [u64; 8] = [
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
];

/// The counters RabbitMQ labels by queue type (`queue_type`), kept for quorum queues beside
/// the totals of [`MessageCounters`]: a classic queue's share is the total less this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueTypeCounters {
    /// As [`MessageCounters::delivered`].
    pub delivered: u64,
    /// As [`MessageCounters::delivered_consume_auto_ack`].
    pub delivered_consume_auto_ack: u64,
    /// As [`MessageCounters::delivered_consume_manual_ack`].
    pub delivered_consume_manual_ack: u64,
    /// As [`MessageCounters::delivered_get_auto_ack`].
    pub delivered_get_auto_ack: u64,
    /// As [`MessageCounters::delivered_get_manual_ack`].
    pub delivered_get_manual_ack: u64,
    /// As [`MessageCounters::get_empty`].
    pub get_empty: u64,
    /// As [`MessageCounters::redelivered`].
    pub redelivered: u64,
    /// As [`MessageCounters::acked`].
    pub acked: u64,
}

impl QueueTypeCounters {
    fn deliver(&mut self, consume: bool, auto_ack: bool, redelivered: bool) {
        self.delivered += 1;
        let bucket = match (consume, auto_ack) {
            (true, true) => &mut self.delivered_consume_auto_ack,
            (true, false) => &mut self.delivered_consume_manual_ack,
            (false, true) => &mut self.delivered_get_auto_ack,
            (false, false) => &mut self.delivered_get_manual_ack,
        };
        *bucket += 1;
        self.redelivered += u64::from(redelivered);
    }

    /// Each counter less `part`'s (the classic share of the totals).
    #[must_use]
    pub fn less(&self, part: &QueueTypeCounters) -> QueueTypeCounters {
        QueueTypeCounters {
            delivered: self.delivered.saturating_sub(part.delivered),
            delivered_consume_auto_ack: self
                .delivered_consume_auto_ack
                .saturating_sub(part.delivered_consume_auto_ack),
            delivered_consume_manual_ack: self
                .delivered_consume_manual_ack
                .saturating_sub(part.delivered_consume_manual_ack),
            delivered_get_auto_ack: self
                .delivered_get_auto_ack
                .saturating_sub(part.delivered_get_auto_ack),
            delivered_get_manual_ack: self
                .delivered_get_manual_ack
                .saturating_sub(part.delivered_get_manual_ack),
            get_empty: self.get_empty.saturating_sub(part.get_empty),
            redelivered: self.redelivered.saturating_sub(part.redelivered),
            acked: self.acked.saturating_sub(part.acked),
        }
    }
}

/// Counts kept by the broker task since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageCounters {
    /// `basic.publish` methods handled (routed or not): RabbitMQ's `messages_received`.
    pub published: u64,
    /// Of those, published on a channel in confirm mode (`messages_received_confirm`).
    pub published_confirm: u64,
    /// Published messages that reached at least one queue (`messages_routed`).
    pub routed: u64,
    /// Unroutable messages published without `mandatory`, dropped.
    pub unroutable_dropped: u64,
    /// Unroutable messages published with `mandatory`, returned to the publisher.
    pub unroutable_returned: u64,
    /// Publisher confirms (`basic.ack`) sent, one per message.
    pub confirmed: u64,
    /// The counters RabbitMQ labels by queue type, for every queue: messages handed to
    /// clients (`basic.deliver` and `basic.get-ok`; by consume or get, automatic or manual
    /// acknowledgement; the management API's get counts as a get with automatic
    /// acknowledgement), `basic.get` answered `get-empty`, deliveries flagged `redelivered`,
    /// and messages acknowledged by `basic.ack` (a `multiple` ack counts every message it
    /// settles).
    pub all: QueueTypeCounters,
    /// The share of [`MessageCounters::all`] that came from quorum queues.
    pub quorum: QueueTypeCounters,
    /// Messages that expired in a queue (S-TTL).
    pub expired: u64,
    /// Messages dead-lettered into at least one queue (S-DLX).
    pub dead_lettered: u64,
    /// Connections opened (`connection.open-ok` sent).
    pub connections_opened: u64,
    /// Channels opened.
    pub channels_opened: u64,
    /// Successful `queue.declare` methods (passive ones included, as RabbitMQ counts them).
    pub queues_declared: u64,
    /// Queues deleted, for whatever reason (delete, auto-delete, lease, owner gone).
    pub queues_deleted: u64,
    /// Queues that existed when the broker task started (recovered ones): queues created
    /// since are `live - at_start + deleted`.
    pub queues_at_start: u64,
    /// Message sizes (body bytes) of publishes: counts per bucket of
    /// [`MESSAGE_SIZE_BOUNDS`], then `+Inf`.
    pub message_size_buckets: [u64; 9],
    /// The sum of the published body sizes, bytes.
    pub message_size_sum: u64,
}

impl MessageCounters {
    /// Counts one `basic.publish` of `body_bytes` (before routing).
    pub fn publish(&mut self, body_bytes: usize, confirm: bool) {
        let size = u64::try_from(body_bytes).unwrap_or(u64::MAX);
        self.published += 1;
        self.published_confirm += u64::from(confirm);
        let bucket = MESSAGE_SIZE_BOUNDS
            .iter()
            .position(|&bound| size <= bound)
            .unwrap_or(MESSAGE_SIZE_BOUNDS.len());
        if let Some(n) = self.message_size_buckets.get_mut(bucket) {
            *n += 1;
        }
        self.message_size_sum = self.message_size_sum.saturating_add(size);
    }

    /// Counts a publish's fate: routed, or dropped / returned as unroutable.
    pub fn routing(&mut self, routed: bool, mandatory: bool) {
        match (routed, mandatory) {
            (true, _) => self.routed += 1,
            (false, true) => self.unroutable_returned += 1,
            (false, false) => self.unroutable_dropped += 1,
        }
    }

    /// Counts a delivery to a consumer, from a quorum queue or not.
    pub fn deliver(&mut self, auto_ack: bool, redelivered: bool, quorum: bool) {
        self.all.deliver(true, auto_ack, redelivered);
        if quorum {
            self.quorum.deliver(true, auto_ack, redelivered);
        }
    }

    /// Counts a message fetched by `basic.get` (or the management API's get).
    pub fn get(&mut self, auto_ack: bool, redelivered: bool, quorum: bool) {
        self.all.deliver(false, auto_ack, redelivered);
        if quorum {
            self.quorum.deliver(false, auto_ack, redelivered);
        }
    }

    /// Counts a `basic.get` answered `get-empty`.
    pub fn get_empty(&mut self, quorum: bool) {
        self.all.get_empty += 1;
        self.quorum.get_empty += u64::from(quorum);
    }

    /// Counts `settled` messages acknowledged, `quorum` of them out of quorum queues.
    pub fn ack(&mut self, settled: u64, quorum: u64) {
        self.all.acked += settled;
        self.quorum.acked += quorum;
    }

    /// Queues created since start, given how many exist now.
    pub fn queues_created(&self, live: u64) -> u64 {
        (live + self.queues_deleted).saturating_sub(self.queues_at_start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_sizes_fall_in_rabbitmqs_buckets() {
        let mut c = MessageCounters::default();
        for size in [0, 100, 101, 100_000_000, 100_000_001] {
            c.publish(size, false);
        }
        assert_eq!(c.message_size_buckets, [2, 1, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(c.message_size_sum, 200_000_202);
        assert_eq!(c.published, 5);
    }

    #[test]
    fn created_queues_are_derived_from_live_and_deleted() {
        let c = MessageCounters {
            queues_at_start: 3,
            queues_deleted: 2,
            ..MessageCounters::default()
        };
        // 3 recovered, 2 deleted, 4 live: 3 were created in this run.
        assert_eq!(c.queues_created(4), 3);
    }
}
