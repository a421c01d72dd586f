//! wharf's own histograms (issue 18): where the broker task's time goes (each batch, its size,
//! starting a checkpoint, page-out, read-back) and the log writer's (fsync latency and batch
//! size, segment rolls, preallocation). Latencies are kept in microseconds and written in
//! seconds, as Prometheus wants. Also the one writer of a histogram family ([`histogram`]),
//! which `families.rs` uses for RabbitMQ's message size histogram.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::core::CoreTimingsSnapshot;
use wharf_base::HistogramSnapshot;
use wharf_wal::SyncSnapshot;

/// A histogram of one label set: `bounds` are the finite upper bounds, `buckets` the counts
/// per bucket (not cumulative) with the `+Inf` bucket last.
pub(super) fn histogram(
    enc: &mut DescriptorEncoder<'_>,
    (name, help): (&str, &str),
    labels: &[(&'static str, String)],
    (bounds, buckets): (&[f64], &[u64]),
    sum: f64,
) -> fmt::Result {
    let pairs: Vec<(f64, u64)> = bounds
        .iter()
        .copied()
        .chain([f64::INFINITY])
        .zip(buckets.iter().copied())
        .collect();
    let count = buckets.iter().sum();
    let mut metric = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    metric
        .encode_family(&labels)?
        .encode_histogram::<NoLabelSet>(sum, count, &pairs, None)
}

#[expect(
    clippy::cast_precision_loss,
    reason = "bounds and sums of microseconds and counts here are far below 2^52"
)]
fn write(
    enc: &mut DescriptorEncoder<'_>,
    name_help: (&str, &str),
    h: &HistogramSnapshot,
    per_unit: f64,
) -> fmt::Result {
    let bounds: Vec<f64> = h.bounds.iter().map(|&b| b as f64 / per_unit).collect();
    histogram(
        enc,
        name_help,
        &[],
        (&bounds, &h.buckets),
        h.sum as f64 / per_unit,
    )
}

/// A latency histogram kept in microseconds, written in seconds.
fn seconds(
    enc: &mut DescriptorEncoder<'_>,
    name_help: (&str, &str),
    h: &HistogramSnapshot,
) -> fmt::Result {
    write(enc, name_help, h, 1e6)
}

/// A histogram of counts.
fn counts(
    enc: &mut DescriptorEncoder<'_>,
    name_help: (&str, &str),
    h: &HistogramSnapshot,
) -> fmt::Result {
    write(enc, name_help, h, 1.0)
}

/// Writes every histogram; the log's only while the store is open.
pub(super) fn encode(
    enc: &mut DescriptorEncoder<'_>,
    sync: Option<&SyncSnapshot>,
    t: &CoreTimingsSnapshot,
) -> fmt::Result {
    seconds(
        enc,
        (
            "wharf_core_batch_seconds",
            "Time the broker task spent on one batch of messages: applying them, logging their events, sealing and releasing outboxes.",
        ),
        &t.batch,
    )?;
    counts(
        enc,
        (
            "wharf_core_batch_messages",
            "Messages (operation batches of connections, management requests) the broker task drained into one batch.",
        ),
        &t.batch_messages,
    )?;
    seconds(
        enc,
        (
            "wharf_checkpoint_start_seconds",
            "Time the broker task spent starting a checkpoint (the broker's snapshot included).",
        ),
        &t.checkpoint_start,
    )?;
    seconds(
        enc,
        (
            "wharf_page_out_seconds",
            "Time the broker task spent paging message bodies out to their stored copies, per page-out that freed memory.",
        ),
        &t.page_out,
    )?;
    seconds(
        enc,
        (
            "wharf_read_back_seconds",
            "Time the broker task spent reading one stored message back from the log or the checkpoint.",
        ),
        &t.read_back,
    )?;
    let Some(sync) = sync else {
        return Ok(());
    };
    seconds(
        enc,
        (
            "wharf_wal_fsync_seconds",
            "Latency of the write-ahead log's fdatasync calls.",
        ),
        &sync.latency,
    )?;
    counts(
        enc,
        (
            "wharf_wal_records_per_fsync",
            "Records made durable by one fdatasync (group commit's batch size).",
        ),
        &sync.records,
    )?;
    seconds(
        enc,
        (
            "wharf_wal_segment_roll_seconds",
            "Time the log writer spent rolling to a new segment (sealing the old one, creating and reserving the new one).",
        ),
        &sync.roll,
    )?;
    seconds(
        enc,
        (
            "wharf_wal_preallocate_seconds",
            "Time the log writer spent zero-filling ahead of the write position (one preallocation step).",
        ),
        &sync.prefill,
    )
}
