//! `/metrics/detailed`'s query: `family=` (repeatable) names `rabbitmq_prometheus`'s metric
//! families, `vhost=` (repeatable) limits the per-queue families to those vhosts. A family of
//! RabbitMQ's that wharf does not keep, or a name RabbitMQ does not know, is ignored as
//! RabbitMQ ignores it, with a warning naming it (S-OPS-3).

use std::collections::BTreeSet;

/// A family of `rabbitmq_prometheus` that wharf fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Family {
    /// Connections, channels and queues opened, closed, declared, created, deleted.
    ConnectionChurn,
    /// Open file descriptors, resident memory, free disk space.
    NodeCoarse,
    /// Their limits, and the uptime.
    Node,
    /// Ready, unacknowledged and total messages per queue.
    QueueCoarse,
    /// Consumers per queue.
    QueueConsumerCount,
    /// Consumers and ready bytes per queue.
    Queue,
    /// Bytes received and sent per connection.
    ConnectionCoarse,
    /// Channels per connection.
    Connection,
    /// Consumers and unacknowledged messages per channel.
    Channel,
    /// Messages published, confirmed, returned and dropped per channel.
    ChannelExchange,
    /// Messages delivered, fetched, redelivered and acknowledged per channel.
    ChannelQueue,
    /// The Raft figures of each quorum queue's group (`raft.rs`).
    Ra,
}

/// `rabbitmq_prometheus`'s names of the families wharf fills.
const FILLED: [(&str, Family); 12] = [
    ("connection_churn_metrics", Family::ConnectionChurn),
    ("node_coarse_metrics", Family::NodeCoarse),
    ("node_metrics", Family::Node),
    ("queue_coarse_metrics", Family::QueueCoarse),
    ("queue_consumer_count", Family::QueueConsumerCount),
    ("queue_metrics", Family::Queue),
    ("connection_coarse_metrics", Family::ConnectionCoarse),
    ("connection_metrics", Family::Connection),
    ("channel_metrics", Family::Channel),
    ("channel_exchange_metrics", Family::ChannelExchange),
    ("channel_queue_metrics", Family::ChannelQueue),
    ("ra_metrics", Family::Ra),
];

/// `rabbitmq_prometheus`'s families wharf has no figures for (Erlang processes and Mnesia
/// I/O, per channel-queue-exchange and exchange counters, streams, the cluster families).
pub(crate) const NOT_KEPT: [&str; 12] = [
    "node_persister_metrics",
    "auth_attempt_metrics",
    "auth_attempt_detailed_metrics",
    "channel_process_metrics",
    "channel_queue_exchange_metrics",
    "exchange_metrics",
    "queue_delivery_metrics",
    "queue_exchange_metrics",
    "stream_consumer_metrics",
    "vhost_status",
    "exchange_bindings",
    "exchange_names",
];

/// What `/metrics/detailed` was asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Detailed {
    families: BTreeSet<Family>,
    /// `None`: every vhost.
    vhosts: Option<BTreeSet<String>>,
}

/// A family name that is ignored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ignored {
    /// One of RabbitMQ's that wharf has no figures for.
    NotKept(String),
    /// Not one of RabbitMQ's.
    Unknown(String),
}

impl Detailed {
    /// Reads the query's `(key, value)` pairs; other keys are ignored, as by RabbitMQ.
    pub(crate) fn parse(pairs: &[(String, String)]) -> (Detailed, Vec<Ignored>) {
        let mut d = Detailed::default();
        let mut ignored = Vec::new();
        for (key, value) in pairs {
            match key.as_str() {
                "family" => match FILLED.iter().find(|(name, _)| name == value) {
                    Some((_, f)) => {
                        d.families.insert(*f);
                    }
                    None if NOT_KEPT.contains(&value.as_str()) => {
                        ignored.push(Ignored::NotKept(value.clone()));
                    }
                    None => ignored.push(Ignored::Unknown(value.clone())),
                },
                "vhost" => {
                    d.vhosts
                        .get_or_insert_with(BTreeSet::new)
                        .insert(value.clone());
                }
                _ => {}
            }
        }
        (d, ignored)
    }

    /// Whether `family` was asked for.
    pub(crate) fn wants(&self, family: Family) -> bool {
        self.families.contains(&family)
    }

    /// Whether a queue of `vhost` is shown.
    pub(crate) fn in_vhost(&self, vhost: &str) -> bool {
        self.vhosts.as_ref().is_none_or(|v| v.contains(vhost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn s_ops_3_families_and_vhosts_are_read_and_the_rest_named() {
        let (d, ignored) = Detailed::parse(&pairs(&[
            ("family", "queue_coarse_metrics"),
            ("family", "exchange_metrics"),
            ("family", "nonsense"),
            ("vhost", "a"),
            ("vhost", "b"),
        ]));
        assert!(d.wants(Family::QueueCoarse));
        assert!(!d.wants(Family::Queue));
        assert!(d.in_vhost("a") && d.in_vhost("b") && !d.in_vhost("/"));
        assert_eq!(
            ignored,
            [
                Ignored::NotKept("exchange_metrics".into()),
                Ignored::Unknown("nonsense".into())
            ]
        );
        let (all, _) = Detailed::parse(&pairs(&[("family", "queue_metrics")]));
        assert!(all.in_vhost("/"));
    }
}
