//! The per-connection and per-channel families of `rabbitmq_prometheus` (S-OPS-10):
//! `connection_coarse_metrics` and `connection_metrics` per connection, `channel_metrics`,
//! `channel_exchange_metrics` and `channel_queue_metrics` per channel, under RabbitMQ's names,
//! types and help texts. Summed without labels on `/metrics`; on `/metrics/per-object` and
//! `/metrics/detailed` one sample per object, labelled `channel` as RabbitMQ labels both
//! (its value is the client's address, and for a channel its number: `127.0.0.1:50312 (1)`,
//! where RabbitMQ writes the Erlang process id).

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::detailed::Family;
use super::sample::{Labels, Value, family};
use super::snapshot::ConnFigures;
use crate::admin::ChannelStats;

/// One family of one object kind: RabbitMQ's name without the prefix, its help text, its
/// type, and how to read it.
type ObjectMetric<T> = (&'static str, &'static str, MetricType, fn(&T) -> u64);

const CONNECTION_COARSE: [ObjectMetric<ConnFigures>; 2] = [
    (
        "connection_incoming_bytes_total",
        "Total number of bytes received on a connection",
        MetricType::Counter,
        |c| c.received_bytes,
    ),
    (
        "connection_outgoing_bytes_total",
        "Total number of bytes sent on a connection",
        MetricType::Counter,
        |c| c.sent_bytes,
    ),
];

const CONNECTION: [ObjectMetric<ConnFigures>; 1] = [(
    "connection_channels",
    "Channels on a connection",
    MetricType::Gauge,
    |c| u64::try_from(c.channels.len()).unwrap_or(u64::MAX),
)];

const CHANNEL: [ObjectMetric<ChannelStats>; 2] = [
    (
        "channel_consumers",
        "Consumers on a channel",
        MetricType::Gauge,
        |s| s.consumers,
    ),
    (
        "channel_messages_unacked",
        "Delivered but not yet acknowledged messages",
        MetricType::Gauge,
        |s| s.unacked,
    ),
];

const CHANNEL_EXCHANGE: [ObjectMetric<ChannelStats>; 4] = [
    (
        "channel_messages_published_total",
        "Total number of messages published into an exchange on a channel",
        MetricType::Counter,
        |s| s.publish,
    ),
    (
        "channel_messages_confirmed_total",
        "Total number of messages published into an exchange and confirmed on the channel",
        MetricType::Counter,
        |s| s.confirm,
    ),
    (
        "channel_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        MetricType::Counter,
        |s| s.returned_unroutable,
    ),
    (
        "channel_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        MetricType::Counter,
        |s| s.dropped_unroutable,
    ),
];

const CHANNEL_QUEUE: [ObjectMetric<ChannelStats>; 7] = [
    (
        "channel_get_ack_total",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        MetricType::Counter,
        |s| s.get_manual,
    ),
    (
        "channel_get_total",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        MetricType::Counter,
        |s| s.get_no_ack,
    ),
    (
        "channel_messages_delivered_ack_total",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        MetricType::Counter,
        |s| s.deliver_manual,
    ),
    (
        "channel_messages_delivered_total",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        MetricType::Counter,
        |s| s.deliver_no_ack,
    ),
    (
        "channel_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
        MetricType::Counter,
        |s| s.redeliver,
    ),
    (
        "channel_messages_acked_total",
        "Total number of messages acknowledged by consumers",
        MetricType::Counter,
        |s| s.ack,
    ),
    (
        "channel_get_empty_total",
        "Total number of times basic.get operations fetched no message",
        MetricType::Counter,
        |s| s.get_empty,
    ),
];

/// Writes `metrics` for `objects` (label value, figures): one labelled sample each, or their
/// sum without labels.
fn write<T>(
    enc: &mut DescriptorEncoder<'_>,
    prefix: &str,
    metrics: &[ObjectMetric<T>],
    objects: &[(String, &T)],
    per_object: bool,
) -> fmt::Result {
    for (name, help, kind, read) in metrics {
        let samples: Vec<(Labels, Value)> = if per_object {
            objects
                .iter()
                .map(|(label, o)| (vec![("channel", label.clone())], Value::Int(read(o))))
                .collect()
        } else {
            let sum = objects.iter().map(|(_, o)| read(o)).sum();
            vec![(Vec::new(), Value::Int(sum))]
        };
        family(enc, &format!("{prefix}{name}"), help, *kind, &samples)?;
    }
    Ok(())
}

/// The per-connection and per-channel families `wants` selects, for `conns`.
pub(super) fn connections_and_channels(
    enc: &mut DescriptorEncoder<'_>,
    prefix: &str,
    conns: &[ConnFigures],
    per_object: bool,
    wants: &dyn Fn(Family) -> bool,
) -> fmt::Result {
    let by_conn: Vec<(String, &ConnFigures)> =
        conns.iter().map(|c| (c.peer.to_string(), c)).collect();
    let by_chan: Vec<(String, &ChannelStats)> = conns
        .iter()
        .flat_map(|c| {
            c.channels
                .iter()
                .map(move |(n, s)| (format!("{} ({n})", c.peer), s))
        })
        .collect();
    if wants(Family::ConnectionCoarse) {
        write(enc, prefix, &CONNECTION_COARSE, &by_conn, per_object)?;
    }
    if wants(Family::Connection) {
        write(enc, prefix, &CONNECTION, &by_conn, per_object)?;
    }
    if wants(Family::Channel) {
        write(enc, prefix, &CHANNEL, &by_chan, per_object)?;
    }
    if wants(Family::ChannelExchange) {
        write(enc, prefix, &CHANNEL_EXCHANGE, &by_chan, per_object)?;
    }
    if wants(Family::ChannelQueue) {
        write(enc, prefix, &CHANNEL_QUEUE, &by_chan, per_object)?;
    }
    Ok(())
}
