//! The exposition itself: `rabbitmq_prometheus`'s metric families (names, types, help texts and
//! labels as RabbitMQ 3.13 serves them) and wharf's own `wharf_` families, written by the
//! `prometheus-client` crate's Prometheus text encoder (format 0.0.4, as RabbitMQ answers).
//!
//! [`Exposition`] is one scrape: a [`Snapshot`] from the broker task, the [`NodeFigures`]
//! measured outside it, and which endpoint asked ([`Endpoint`]).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::detailed::{Detailed, Family};
use super::objects;
use super::raft::{self, RaftFigures};
use super::sample::{Labels, Value, family};
use super::snapshot::{QueueFigures, Snapshot};
use super::timings::histogram;
use crate::counters::{MESSAGE_SIZE_BOUNDS, MessageCounters, QueueTypeCounters};

/// Which of `rabbitmq_prometheus`'s endpoints is answered.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    /// `/metrics`: per-queue families summed over every queue, without labels.
    Aggregated,
    /// `/metrics/per-object`: one sample per queue, labelled `vhost` and `queue`.
    PerObject,
    /// `/metrics/detailed`: only the families asked for, prefixed `rabbitmq_detailed_`.
    Detailed(Detailed),
}

/// Figures of the node measured outside the broker task.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeFigures {
    /// The node's name (`rabbitmq_node`).
    pub(crate) node: String,
    /// The cluster's name (`rabbitmq_cluster`).
    pub(crate) cluster: String,
    /// The resource monitor's last samples (`None`: unknown, the family is left out).
    pub(crate) disk_free_bytes: Option<u64>,
    pub(crate) memory_used_bytes: Option<u64>,
    pub(crate) memory_limit_bytes: Option<u64>,
    pub(crate) disk_free_limit_bytes: Option<u64>,
    /// Whether the disk and memory alarms are on (`None`: no alarms known).
    pub(crate) alarms: Option<(bool, bool)>,
    pub(crate) open_fds: Option<u64>,
    pub(crate) max_fds: Option<u64>,
    /// How long recovery took at start, ms.
    pub(crate) recovery_ms: u64,
    /// When the server started, ms since the epoch (the server's clock).
    pub(crate) started_at_ms: u64,
}

/// One scrape.
#[derive(Debug)]
pub(crate) struct Exposition {
    pub(crate) snapshot: Snapshot,
    pub(crate) node: NodeFigures,
    pub(crate) endpoint: Endpoint,
    /// The quorum queues' group, on a member of one.
    pub(crate) raft: Option<RaftFigures>,
}

/// The RabbitMQ version whose metrics wharf follows (`rabbitmq_build_info`).
const RABBITMQ_VERSION: &str = "3.13.0";

const PROTOCOL: (&str, &str) = ("protocol", "amqp091");

#[expect(
    clippy::cast_precision_loss,
    reason = "milliseconds and microseconds here are far below 2^52"
)]
fn seconds(value: u64, per_second: f64) -> f64 {
    value as f64 / per_second
}

/// A family of one unlabelled sample.
fn single(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    value: Value,
) -> fmt::Result {
    family(enc, name, help, kind, &[(Vec::new(), value)])
}

/// A per-queue family: its name (without the prefix), help, and how to read it.
type QueueMetric = (&'static str, &'static str, fn(&QueueFigures) -> u64);

const QUEUE_COARSE: [QueueMetric; 3] = [
    (
        "queue_messages_ready",
        "Messages ready to be delivered to consumers",
        |q| q.ready,
    ),
    (
        "queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        |q| q.unacked,
    ),
    (
        "queue_messages",
        "Sum of ready and unacknowledged messages - total queue depth",
        |q| q.ready.saturating_add(q.unacked),
    ),
];

const QUEUE_CONSUMERS: QueueMetric = ("queue_consumers", "Consumers on a queue", |q| q.consumers);

const QUEUE_BYTES: QueueMetric = (
    "queue_messages_ready_bytes",
    "Size in bytes of ready messages",
    |q| q.ready_bytes,
);

/// RabbitMQ's global message counters labelled by protocol only: the part of the name
/// between `rabbitmq_global_messages_` and `_total`, the help text, and how to read it.
type GlobalCounter = (&'static str, &'static str, fn(&MessageCounters) -> u64);

const GLOBAL_COUNTERS: [GlobalCounter; 6] = [
    (
        "received",
        "Total number of messages received from publishers",
        |c| c.published,
    ),
    (
        "received_confirm",
        "Total number of messages received from publishers expecting confirmations",
        |c| c.published_confirm,
    ),
    (
        "routed",
        "Total number of messages routed to queues or streams",
        |c| c.routed,
    ),
    (
        "unroutable_dropped",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        |c| c.unroutable_dropped,
    ),
    (
        "unroutable_returned",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        |c| c.unroutable_returned,
    ),
    (
        "confirmed",
        "Total number of messages confirmed to publishers",
        |c| c.confirmed,
    ),
];

/// RabbitMQ's global message counters labelled by protocol and queue type, read from one
/// queue type's counters.
type QueueTypeCounter = (&'static str, &'static str, fn(&QueueTypeCounters) -> u64);

const QUEUE_TYPE_COUNTERS: [QueueTypeCounter; 8] = [
    (
        "delivered",
        "Total number of messages delivered to consumers",
        |c| c.delivered,
    ),
    (
        "delivered_consume_auto_ack",
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
        |c| c.delivered_consume_auto_ack,
    ),
    (
        "delivered_consume_manual_ack",
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
        |c| c.delivered_consume_manual_ack,
    ),
    (
        "delivered_get_auto_ack",
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
        |c| c.delivered_get_auto_ack,
    ),
    (
        "delivered_get_manual_ack",
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
        |c| c.delivered_get_manual_ack,
    ),
    (
        "get_empty",
        "Total number of times basic.get operations fetched no message",
        |c| c.get_empty,
    ),
    (
        "redelivered",
        "Total number of messages redelivered to consumers",
        |c| c.redelivered,
    ),
    (
        "acknowledged",
        "Total number of messages acknowledged by consumers",
        |c| c.acked,
    ),
];

impl Exposition {
    fn queues(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        prefix: &str,
        metrics: &[QueueMetric],
        per_object: bool,
        keep: &dyn Fn(&QueueFigures) -> bool,
    ) -> fmt::Result {
        let queues: Vec<&QueueFigures> = self.snapshot.queues.iter().filter(|q| keep(q)).collect();
        for (name, help, read) in metrics {
            let samples: Vec<(Labels, Value)> = if per_object {
                queues
                    .iter()
                    .map(|q| {
                        let labels = vec![("vhost", q.vhost.clone()), ("queue", q.name.clone())];
                        (labels, Value::Int(read(q)))
                    })
                    .collect()
            } else {
                let sum = queues.iter().map(|q| read(q)).sum();
                vec![(Vec::new(), Value::Int(sum))]
            };
            family(
                enc,
                &format!("{prefix}{name}"),
                help,
                MetricType::Gauge,
                &samples,
            )?;
        }
        Ok(())
    }

    fn churn(&self, enc: &mut DescriptorEncoder<'_>, prefix: &str) -> fmt::Result {
        let (s, c) = (&self.snapshot, &self.snapshot.counters);
        let live_queues = s.queue_count;
        let counters = [
            (
                "connections_opened_total",
                "Total number of connections opened",
                c.connections_opened,
            ),
            (
                "connections_closed_total",
                "Total number of connections closed or terminated",
                c.connections_opened.saturating_sub(s.connections),
            ),
            (
                "channels_opened_total",
                "Total number of channels opened",
                c.channels_opened,
            ),
            (
                "channels_closed_total",
                "Total number of channels closed",
                c.channels_opened.saturating_sub(s.channels),
            ),
            (
                "queues_declared_total",
                "Total number of queues declared",
                c.queues_declared,
            ),
            (
                "queues_created_total",
                "Total number of queues created",
                c.queues_created(live_queues),
            ),
            (
                "queues_deleted_total",
                "Total number of queues deleted",
                c.queues_deleted,
            ),
        ];
        for (name, help, value) in counters {
            single(
                enc,
                &format!("{prefix}{name}"),
                help,
                MetricType::Counter,
                Value::Int(value),
            )?;
        }
        Ok(())
    }

    fn node(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        prefix: &str,
        coarse: bool,
        limits: bool,
    ) -> fmt::Result {
        let n = &self.node;
        let mut gauges = Vec::new();
        if coarse {
            gauges.extend([
                (
                    "process_open_fds",
                    "Open file descriptors",
                    n.open_fds.map(Value::Int),
                ),
                (
                    "process_resident_memory_bytes",
                    "Memory used in bytes",
                    n.memory_used_bytes.map(Value::Int),
                ),
                (
                    "disk_space_available_bytes",
                    "Disk space available in bytes",
                    n.disk_free_bytes.map(Value::Int),
                ),
            ]);
        }
        if limits {
            let uptime_ms = self.snapshot.now_ms.saturating_sub(n.started_at_ms);
            gauges.extend([
                (
                    "process_max_fds",
                    "Open file descriptors limit",
                    n.max_fds.map(Value::Int),
                ),
                (
                    "resident_memory_limit_bytes",
                    "Memory high watermark in bytes",
                    n.memory_limit_bytes.map(Value::Int),
                ),
                (
                    "disk_space_available_limit_bytes",
                    "Free disk space low watermark in bytes",
                    n.disk_free_limit_bytes.map(Value::Int),
                ),
                (
                    "erlang_uptime_seconds",
                    "Node uptime",
                    Some(Value::Float(seconds(uptime_ms, 1e3))),
                ),
            ]);
        }
        for (name, help, value) in gauges {
            if let Some(value) = value {
                single(
                    enc,
                    &format!("{prefix}{name}"),
                    help,
                    MetricType::Gauge,
                    value,
                )?;
            }
        }
        Ok(())
    }

    fn alarms(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let Some((disk, memory)) = self.node.alarms else {
            return Ok(());
        };
        let alarms = [
            (
                "rabbitmq_alarms_free_disk_space_watermark",
                "is 1 if free disk space watermark alarm is in effect",
                disk,
            ),
            (
                "rabbitmq_alarms_memory_used_watermark",
                "is 1 if VM memory watermark alarm is in effect",
                memory,
            ),
        ];
        for (name, help, on) in alarms {
            single(
                enc,
                name,
                help,
                MetricType::Unknown,
                Value::Int(u64::from(on)),
            )?;
        }
        Ok(())
    }

    fn totals(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let s = &self.snapshot;
        let totals = [
            (
                "rabbitmq_connections",
                "Connections currently open",
                s.connections,
            ),
            ("rabbitmq_channels", "Channels currently open", s.channels),
            (
                "rabbitmq_consumers",
                "Consumers currently connected",
                s.consumers(),
            ),
            ("rabbitmq_queues", "Queues available", s.queue_count),
        ];
        for (name, help, value) in totals {
            single(enc, name, help, MetricType::Gauge, Value::Int(value))?;
        }
        Ok(())
    }

    fn globals(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let c = &self.snapshot.counters;
        let by_protocol = vec![(PROTOCOL.0, PROTOCOL.1.to_owned())];
        for (name, help, read) in GLOBAL_COUNTERS {
            let name = format!("rabbitmq_global_messages_{name}_total");
            let samples = [(by_protocol.clone(), Value::Int(read(c)))];
            family(enc, &name, help, MetricType::Counter, &samples)?;
        }
        // Every queue type wharf has, as RabbitMQ serves every type it has (0 until used).
        let classic = c.all.less(&c.quorum);
        let by_type = [
            ("rabbit_classic_queue", &classic),
            ("rabbit_quorum_queue", &c.quorum),
        ];
        for (name, help, read) in QUEUE_TYPE_COUNTERS {
            let name = format!("rabbitmq_global_messages_{name}_total");
            let samples: Vec<(Labels, Value)> = by_type
                .iter()
                .map(|(queue_type, counters)| {
                    let mut labels = by_protocol.clone();
                    labels.push(("queue_type", (*queue_type).to_owned()));
                    (labels, Value::Int(read(counters)))
                })
                .collect();
            family(enc, &name, help, MetricType::Counter, &samples)?;
        }
        let gauges = [
            (
                "rabbitmq_global_publishers",
                "Publishers currently connected",
                self.snapshot.publishers,
            ),
            (
                "rabbitmq_global_consumers",
                "Consumers currently connected",
                self.snapshot.consumers(),
            ),
        ];
        for (name, help, value) in gauges {
            let samples = [(by_protocol.clone(), Value::Int(value))];
            family(enc, name, help, MetricType::Gauge, &samples)?;
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "bucket bounds are far below 2^52"
        )]
        let bounds: Vec<f64> = MESSAGE_SIZE_BOUNDS.iter().map(|&b| b as f64).collect();
        #[expect(
            clippy::cast_precision_loss,
            reason = "a sum of sizes far below 2^52 is exact"
        )]
        let sum = c.message_size_sum as f64;
        histogram(
            enc,
            (
                "rabbitmq_message_size_bytes",
                "Size of messages received from publishers",
            ),
            &by_protocol,
            (&bounds, &c.message_size_buckets),
            sum,
        )
    }

    fn identity(&self, enc: &mut DescriptorEncoder<'_>, endpoint: &str) -> fmt::Result {
        let build = vec![
            ("rabbitmq_version", RABBITMQ_VERSION.to_owned()),
            ("product_name", "wharf".to_owned()),
            ("product_version", env!("CARGO_PKG_VERSION").to_owned()),
            (
                "prometheus_plugin_version",
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
            (
                "prometheus_client_version",
                "prometheus-client 0.26".to_owned(),
            ),
        ];
        family(
            enc,
            "rabbitmq_build_info",
            "RabbitMQ & Erlang/OTP version info",
            MetricType::Unknown,
            &[(build, Value::Int(1))],
        )?;
        let identity = vec![
            ("rabbitmq_node", self.node.node.clone()),
            ("rabbitmq_cluster", self.node.cluster.clone()),
            ("rabbitmq_endpoint", endpoint.to_owned()),
        ];
        family(
            enc,
            "rabbitmq_identity_info",
            "RabbitMQ node & cluster identity info",
            MetricType::Unknown,
            &[(identity, Value::Int(1))],
        )
    }

    /// wharf's own figures, which RabbitMQ has no name for.
    fn wharf(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let c = &self.snapshot.counters;
        single(
            enc,
            "wharf_messages_expired_total",
            "Messages that expired in a queue.",
            MetricType::Counter,
            Value::Int(c.expired),
        )?;
        single(
            enc,
            "wharf_messages_dead_lettered_total",
            "Messages dead-lettered into at least one queue.",
            MetricType::Counter,
            Value::Int(c.dead_lettered),
        )?;
        single(
            enc,
            "wharf_recovery_seconds",
            "How long recovery took when the broker started.",
            MetricType::Gauge,
            Value::Float(seconds(self.node.recovery_ms, 1e3)),
        )?;
        if let Some(r) = &self.raft {
            raft::lag(enc, r)?;
            raft::voided(enc, r)?;
        }
        super::timings::encode(enc, self.snapshot.sync.as_ref(), &self.snapshot.timings)
    }

    /// `/metrics` and `/metrics/per-object`: every family wharf fills.
    fn everything(&self, enc: &mut DescriptorEncoder<'_>, per_object: bool) -> fmt::Result {
        self.alarms(enc)?;
        self.churn(enc, "rabbitmq_")?;
        self.node(enc, "rabbitmq_", true, true)?;
        let mut queue_metrics = QUEUE_COARSE.to_vec();
        queue_metrics.extend([QUEUE_CONSUMERS, QUEUE_BYTES]);
        self.queues(enc, "rabbitmq_", &queue_metrics, per_object, &|_| true)?;
        let conns = &self.snapshot.conns;
        objects::connections_and_channels(enc, "rabbitmq_", conns, per_object, &|_| true)?;
        if let Some(r) = &self.raft {
            raft::ra_metrics(enc, "rabbitmq_", r, per_object, &|_| true)?;
        }
        self.totals(enc)?;
        self.globals(enc)?;
        self.identity(
            enc,
            if per_object {
                "per-object"
            } else {
                "aggregated"
            },
        )?;
        self.wharf(enc)
    }

    /// `/metrics/detailed`: the families asked for, per object, in the vhosts asked for.
    fn detailed(&self, enc: &mut DescriptorEncoder<'_>, d: &Detailed) -> fmt::Result {
        let prefix = "rabbitmq_detailed_";
        if d.wants(Family::ConnectionChurn) {
            self.churn(enc, prefix)?;
        }
        self.node(
            enc,
            prefix,
            d.wants(Family::NodeCoarse),
            d.wants(Family::Node),
        )?;
        let mut queue_metrics = Vec::new();
        if d.wants(Family::QueueCoarse) {
            queue_metrics.extend(QUEUE_COARSE);
        }
        if d.wants(Family::Queue) {
            queue_metrics.extend([QUEUE_CONSUMERS, QUEUE_BYTES]);
        } else if d.wants(Family::QueueConsumerCount) {
            queue_metrics.push(QUEUE_CONSUMERS);
        }
        self.queues(enc, prefix, &queue_metrics, true, &|q| d.in_vhost(&q.vhost))?;
        let conns = &self.snapshot.conns;
        objects::connections_and_channels(enc, prefix, conns, true, &|f| d.wants(f))?;
        if let Some(r) = self.raft.as_ref().filter(|_| d.wants(Family::Ra)) {
            raft::ra_metrics(enc, prefix, r, true, &|v| d.in_vhost(v))?;
            raft::lag(enc, r)?;
            raft::voided(enc, r)?;
        }
        self.identity(enc, "detailed")
    }
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        match &self.endpoint {
            Endpoint::Aggregated => self.everything(&mut enc, false),
            Endpoint::PerObject => self.everything(&mut enc, true),
            Endpoint::Detailed(d) => self.detailed(&mut enc, d),
        }
    }
}
