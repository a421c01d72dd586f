//! `/metrics`: Prometheus text exposition (format 0.0.4), without authentication as
//! `rabbitmq_prometheus` serves it. Per-queue gauges, message counters kept by the broker
//! task, connection and channel counts, the log's fsync histograms, the recovery time of this
//! start, and the free disk space and memory use the resource monitor last measured (read from
//! `server::alarm::Alarms`, not measured again). Written by hand: the format is a few lines per
//! family.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::api::{Api, ApiError};
use crate::admin::{AdminView, MessageCounters};
use crate::alarm::Samples;
use wharf_broker::QueueInfo;
use wharf_wal::{SYNC_LATENCY_BOUNDS_US, SYNC_RECORDS_BOUNDS, SyncSnapshot};

/// Escapes a label value (backslash, quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one histogram: cumulative buckets with `le` bounds, then `_sum` and `_count`.
fn histogram(out: &mut String, name: &str, bounds: &[String], buckets: &[u64], sum: &str) {
    let mut cumulative = 0u64;
    for (i, n) in buckets.iter().enumerate() {
        cumulative = cumulative.saturating_add(*n);
        let le = bounds.get(i).map_or("+Inf", String::as_str);
        let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum {sum}");
    let _ = writeln!(out, "{name}_count {cumulative}");
}

fn sync_histograms(out: &mut String, sync: &SyncSnapshot) {
    #[expect(
        clippy::cast_precision_loss,
        reason = "bucket bounds and sums of microseconds are far below 2^52"
    )]
    let seconds = |us: u64| format!("{}", us as f64 / 1e6);
    family(
        out,
        "wharf_wal_fsync_seconds",
        "histogram",
        "Latency of the write-ahead log's fdatasync calls.",
    );
    let bounds: Vec<String> = SYNC_LATENCY_BOUNDS_US.iter().map(|&b| seconds(b)).collect();
    histogram(
        out,
        "wharf_wal_fsync_seconds",
        &bounds,
        &sync.latency_buckets,
        &seconds(sync.latency_sum_us),
    );
    family(
        out,
        "wharf_wal_records_per_fsync",
        "histogram",
        "Records made durable by one fdatasync (group commit's batch size).",
    );
    let bounds: Vec<String> = SYNC_RECORDS_BOUNDS.iter().map(u64::to_string).collect();
    histogram(
        out,
        "wharf_wal_records_per_fsync",
        &bounds,
        &sync.records_buckets,
        &sync.records_sum.to_string(),
    );
}

/// A per-queue gauge: its name, help text and how to read it.
type QueueGauge = (&'static str, &'static str, fn(&QueueInfo) -> u64);

const QUEUE_GAUGES: [QueueGauge; 4] = [
    (
        "wharf_queue_messages_ready",
        "Ready messages per queue.",
        |q| q.ready,
    ),
    (
        "wharf_queue_messages_unacked",
        "Delivered, unacknowledged messages per queue.",
        |q| q.unacked,
    ),
    (
        "wharf_queue_messages_ready_bytes",
        "Body bytes of the ready messages per queue.",
        |q| q.ready_bytes,
    ),
    ("wharf_queue_consumers", "Consumers per queue.", |q| {
        u64::from(q.consumers)
    }),
];

fn queue_gauges(out: &mut String, view: &AdminView<'_>) {
    let mut queues = Vec::new();
    for v in view.broker.vhost_names() {
        queues.extend(view.broker.queues(&v));
    }
    for (name, help, get) in QUEUE_GAUGES {
        family(out, name, "gauge", help);
        for q in &queues {
            let _ = writeln!(
                out,
                "{name}{{vhost=\"{}\",queue=\"{}\"}} {}",
                label(&q.vhost),
                label(&q.name),
                get(q)
            );
        }
    }
}

fn message_counters(out: &mut String, c: &MessageCounters) {
    let counters = [
        (
            "wharf_messages_published_total",
            "basic.publish methods handled.",
            c.published,
        ),
        (
            "wharf_messages_delivered_total",
            "Messages handed to clients (deliver and get).",
            c.delivered,
        ),
        (
            "wharf_messages_acked_total",
            "Messages acknowledged by basic.ack (a multiple ack counts each message).",
            c.acked,
        ),
        (
            "wharf_messages_expired_total",
            "Messages that expired in a queue.",
            c.expired,
        ),
        (
            "wharf_messages_dead_lettered_total",
            "Messages dead-lettered into at least one queue.",
            c.dead_lettered,
        ),
    ];
    for (name, help, value) in counters {
        family(out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// Everything read inside the broker task (copying and formatting only).
fn scrape(view: &AdminView<'_>) -> String {
    let mut out = String::new();
    queue_gauges(&mut out, view);
    message_counters(&mut out, &view.counters);
    if let Some(sync) = &view.sync {
        sync_histograms(&mut out, sync);
    }
    family(
        &mut out,
        "wharf_connections",
        "gauge",
        "Open AMQP connections.",
    );
    let _ = writeln!(out, "wharf_connections {}", view.connections.len());
    let channels: usize = view.connections.iter().map(|c| c.channels.len()).sum();
    family(&mut out, "wharf_channels", "gauge", "Open AMQP channels.");
    let _ = writeln!(out, "wharf_channels {channels}");
    out
}

/// The resource monitor's last samples; a family is left out while its value is unknown
/// (before the first check, or when the probe failed), rather than reported as 0.
fn resource_gauges(out: &mut String, s: Samples) {
    let gauges = [
        (
            "wharf_disk_free_bytes",
            "Free bytes on the data directory's file system (the disk alarm's measure).",
            s.disk_free_bytes,
        ),
        (
            "wharf_memory_used_bytes",
            "Resident anonymous memory of the process (the memory alarm's measure).",
            s.memory_used_bytes,
        ),
        (
            "wharf_memory_limit_bytes",
            "Memory use at which the memory alarm blocks publishers.",
            s.memory_limit_bytes,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(value) = value {
            family(out, name, "gauge", help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

pub(crate) async fn metrics(State(api): State<Api>) -> Result<Response, ApiError> {
    let recovery_ms = api.config().recovery_ms;
    let mut text = api.query(scrape).await?;
    family(
        &mut text,
        "wharf_recovery_seconds",
        "gauge",
        "How long recovery took when the broker started.",
    );
    #[expect(
        clippy::cast_precision_loss,
        reason = "milliseconds of a recovery are far below 2^52"
    )]
    let seconds = recovery_ms as f64 / 1000.0;
    let _ = writeln!(text, "wharf_recovery_seconds {seconds}");
    if let Some(alarms) = &api.config().alarms {
        resource_gauges(&mut text, alarms.samples());
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
