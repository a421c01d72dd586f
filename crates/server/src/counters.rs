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
    /// Messages handed to clients (`basic.deliver` and `basic.get-ok`).
    pub delivered: u64,
    /// Deliveries to consumers with automatic acknowledgement.
    pub delivered_consume_auto_ack: u64,
    /// Deliveries to consumers with manual acknowledgement.
    pub delivered_consume_manual_ack: u64,
    /// Messages fetched by `basic.get` with `no_ack` (and the management API's get).
    pub delivered_get_auto_ack: u64,
    /// Messages fetched by `basic.get` with manual acknowledgement.
    pub delivered_get_manual_ack: u64,
    /// `basic.get` answered `get-empty`.
    pub get_empty: u64,
    /// Deliveries (and gets) flagged `redelivered`.
    pub redelivered: u64,
    /// Messages acknowledged by `basic.ack` (a `multiple` ack counts every message it
    /// settles).
    pub acked: u64,
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

    /// Counts a delivery to a consumer.
    pub fn deliver(&mut self, auto_ack: bool, redelivered: bool) {
        self.delivered += 1;
        if auto_ack {
            self.delivered_consume_auto_ack += 1;
        } else {
            self.delivered_consume_manual_ack += 1;
        }
        self.redelivered += u64::from(redelivered);
    }

    /// Counts a message fetched by `basic.get` (or the management API's get).
    pub fn get(&mut self, auto_ack: bool, redelivered: bool) {
        self.delivered += 1;
        if auto_ack {
            self.delivered_get_auto_ack += 1;
        } else {
            self.delivered_get_manual_ack += 1;
        }
        self.redelivered += u64::from(redelivered);
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
