//! Soak additions to a run, for issue 5's disk figure ("a 30-minute run of publishers and
//! consumers at half the maximum rate, with a few messages left unacked for the whole run, keeps
//! the data directory within 2x the queued bytes plus two segments"):
//! - `--hold N`: one extra consumer connection, prefetch N, that takes N messages and never acks
//!   them; closing it at the end of the run hands them back to the queue.
//! - `--watch-dir DIR`: every few seconds, the directory's size (allocated and apparent) against
//!   the bound `2 x queued bytes + 2 x segment`, the queued bytes being (ready messages from a
//!   passive queue.declare + held ones) x body size.
//!
//! The bound arithmetic and the summary are pure and tested. Depends on `client`, `wire`,
//! `resources`, `clock`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use amq_protocol::types::FieldTable;
use anyhow::{Context, Result, bail};
use bytes::Buf;
use serde::Serialize;
use tokio::sync::watch;

use crate::args::RunConfig;
use crate::client::{Connection, check_close};
use crate::clock::Stopwatch;
use crate::resources::{self, DirSize, mib};
use crate::wire::{self, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD};

/// Opens the holding consumer (prefetch `hold`, acks on) before the run starts.
pub async fn open_holder(config: &RunConfig) -> Result<Connection> {
    let mut conn = Connection::open(&config.uri).await?;
    conn.basic_qos(config.soak.hold).await?;
    conn.basic_consume(&config.queue.name, false).await?;
    Ok(conn)
}

/// Takes deliveries (counting them in `held`) and acks none until `stop`; then closes the
/// connection, which hands them back. Returns how many it held.
pub async fn hold(
    mut conn: Connection,
    held: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> Result<u64> {
    loop {
        while let Some((frame, used)) = wire::split_frame(&conn.rbuf, conn.frame_max)? {
            match frame.kind {
                FRAME_METHOD => {
                    if wire::fast_deliver_tag(frame.payload).is_some() {
                        held.fetch_add(1, Ordering::Relaxed);
                    } else {
                        check_close(wire::decode_method(frame.payload)?)?;
                    }
                }
                FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT => {}
                other => bail!("unexpected frame type {other} on the holding consumer"),
            }
            conn.rbuf.advance(used);
        }
        if *stop.borrow() {
            break;
        }
        tokio::select! {
            filled = conn.fill() => filled?,
            _ = stop.changed() => break,
        }
    }
    conn.close().await?;
    Ok(held.load(Ordering::Relaxed))
}

/// The disk bound of issue 5: twice the queued bytes plus two segments.
pub fn bound_bytes(queued_bytes: u64, segment_bytes: u64) -> u64 {
    queued_bytes
        .saturating_mul(2)
        .saturating_add(segment_bytes.saturating_mul(2))
}

#[expect(
    clippy::cast_precision_loss,
    reason = "byte counts stay far below 2^52"
)]
fn ratio(bytes: u64, bound: u64) -> f64 {
    if bound == 0 {
        f64::INFINITY
    } else {
        bytes as f64 / bound as f64
    }
}

/// One sample of the directory against the queue.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WatchSample {
    /// Seconds since the run started.
    pub at_s: f64,
    /// The directory's size.
    pub dir: DirSize,
    /// Ready messages (passive queue.declare; excludes unacked ones).
    pub ready: u64,
    /// Messages the holding consumer had taken.
    pub held: u64,
    /// (ready + held) x body size.
    pub queued_bytes: u64,
    /// `2 x queued_bytes + 2 x segment`.
    pub bound_bytes: u64,
    /// Allocated bytes / bound (the figure; at most 1 meets the goal).
    pub ratio: f64,
    /// Apparent bytes / bound.
    pub ratio_apparent: f64,
}

impl WatchSample {
    /// A sample from its raw parts.
    pub fn new(at_s: f64, dir: DirSize, ready: u64, held: u64, size: u64, segment: u64) -> Self {
        let queued_bytes = ready.saturating_add(held).saturating_mul(size);
        let bound = bound_bytes(queued_bytes, segment);
        Self {
            at_s,
            dir,
            ready,
            held,
            queued_bytes,
            bound_bytes: bound,
            ratio: ratio(dir.allocated_bytes, bound),
            ratio_apparent: ratio(dir.apparent_bytes, bound),
        }
    }

    /// One line for the progress log.
    pub fn to_text(self) -> String {
        format!(
            "watch {:.0} s: dir {:.1} MiB (apparent {:.1} MiB), queued {} ready + {} held = \
             {:.1} MiB, bound {:.1} MiB, ratio {:.3}",
            self.at_s,
            mib(self.dir.allocated_bytes),
            mib(self.dir.apparent_bytes),
            self.ready,
            self.held,
            mib(self.queued_bytes),
            mib(self.bound_bytes),
            self.ratio
        )
    }
}

/// What the watch saw over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WatchSummary {
    /// Samples taken.
    pub samples: u64,
    /// The segment size the bound used.
    pub segment_bytes: u64,
    /// Largest allocated size seen.
    pub max_allocated_bytes: u64,
    /// Largest apparent size seen.
    pub max_apparent_bytes: u64,
    /// Largest queued bytes seen.
    pub max_queued_bytes: u64,
    /// The sample with the largest ratio (the figure).
    pub worst: Option<WatchSample>,
    /// The last sample.
    pub last: Option<WatchSample>,
}

impl WatchSummary {
    /// Folds one sample in.
    pub fn record(&mut self, sample: WatchSample) {
        self.samples += 1;
        self.max_allocated_bytes = self.max_allocated_bytes.max(sample.dir.allocated_bytes);
        self.max_apparent_bytes = self.max_apparent_bytes.max(sample.dir.apparent_bytes);
        self.max_queued_bytes = self.max_queued_bytes.max(sample.queued_bytes);
        if self.worst.is_none_or(|w| sample.ratio > w.ratio) {
            self.worst = Some(sample);
        }
        self.last = Some(sample);
    }
}

/// What the watcher needs besides the run's configuration.
pub struct Watch {
    /// The directory.
    pub dir: PathBuf,
    /// Held-message counter of the holding consumer.
    pub held: Arc<AtomicU64>,
    /// The run's stopwatch.
    pub clock: Stopwatch,
}

async fn take_sample(
    conn: &mut Connection,
    config: &RunConfig,
    watch: &Watch,
) -> Result<WatchSample> {
    let dir = watch.dir.clone();
    let size = tokio::task::spawn_blocking(move || resources::dir_size(&dir))
        .await
        .context("directory size task")??;
    let (ready, _) = conn
        .queue_declare(&config.queue.name, false, true, FieldTable::default())
        .await?;
    Ok(WatchSample::new(
        watch.clock.elapsed().as_secs_f64(),
        size,
        u64::from(ready),
        watch.held.load(Ordering::Relaxed),
        config.size_bytes as u64,
        config.soak.segment_bytes,
    ))
}

/// Samples every `--watch-every` until `stop`, once more at the stop, and summarises. Each
/// sample is also printed to stderr, so that a long run can be followed.
pub async fn watch_dir(
    config: Arc<RunConfig>,
    watch: Watch,
    mut stop: watch::Receiver<bool>,
) -> Result<WatchSummary> {
    let mut conn = Connection::open(&config.uri).await?;
    let mut summary = WatchSummary {
        segment_bytes: config.soak.segment_bytes,
        ..WatchSummary::default()
    };
    let mut ticker = tokio::time::interval(config.soak.watch_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => *stop.borrow(),
            _ = stop.changed() => true,
        };
        let sample = take_sample(&mut conn, &config, &watch).await?;
        eprintln!("{}", sample.to_text());
        summary.record(sample);
        if stopping {
            break;
        }
    }
    conn.close().await?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEGMENT: u64 = 64 * 1024 * 1024;

    fn dir(allocated_bytes: u64) -> DirSize {
        DirSize {
            allocated_bytes,
            apparent_bytes: allocated_bytes / 2,
            files: 3,
        }
    }

    #[test]
    fn the_bound_is_twice_the_queued_bytes_plus_two_segments() {
        assert_eq!(bound_bytes(0, SEGMENT), 2 * SEGMENT);
        assert_eq!(bound_bytes(1000, SEGMENT), 2000 + 2 * SEGMENT);
        assert_eq!(bound_bytes(u64::MAX, SEGMENT), u64::MAX, "saturates");
    }

    #[test]
    fn held_messages_count_as_queued() {
        let sample = WatchSample::new(1.0, dir(2 * SEGMENT), 995, 5, 1024, SEGMENT);
        assert_eq!(sample.queued_bytes, 1000 * 1024);
        assert_eq!(sample.bound_bytes, 2 * 1000 * 1024 + 2 * SEGMENT);
        assert!(sample.ratio < 1.0);
        assert!((sample.ratio_apparent - sample.ratio / 2.0).abs() < 1e-12);
    }

    #[test]
    fn an_empty_queue_allows_two_segments() {
        let at = WatchSample::new(0.0, dir(2 * SEGMENT), 0, 0, 1024, SEGMENT);
        assert!((at.ratio - 1.0).abs() < 1e-12);
        let over = WatchSample::new(0.0, dir(3 * SEGMENT), 0, 0, 1024, SEGMENT);
        assert!((over.ratio - 1.5).abs() < 1e-12);
        let nothing = WatchSample::new(0.0, dir(1), 0, 0, 1024, 0);
        assert!(nothing.ratio.is_infinite(), "no bound at all");
    }

    #[test]
    fn the_summary_keeps_the_worst_ratio_and_the_maxima() {
        let mut summary = WatchSummary::default();
        assert_eq!(summary.worst, None);
        // A big directory with a big queue is fine; a smaller one with an empty queue is not.
        summary.record(WatchSample::new(
            5.0,
            dir(900 * 1024 * 1024),
            1_000_000,
            5,
            1024,
            SEGMENT,
        ));
        summary.record(WatchSample::new(
            10.0,
            dir(192 * 1024 * 1024),
            0,
            5,
            1024,
            SEGMENT,
        ));
        summary.record(WatchSample::new(
            15.0,
            dir(64 * 1024 * 1024),
            0,
            5,
            1024,
            SEGMENT,
        ));
        assert_eq!(summary.samples, 3);
        assert_eq!(summary.max_allocated_bytes, 900 * 1024 * 1024);
        assert_eq!(summary.max_queued_bytes, 1_000_005 * 1024);
        let worst = summary.worst.unwrap();
        assert!((worst.at_s - 10.0).abs() < 1e-12);
        assert!(worst.ratio > 1.0);
        assert!((summary.last.unwrap().at_s - 15.0).abs() < 1e-12);
    }

    #[test]
    fn sample_text_names_the_figures() {
        let text = WatchSample::new(30.0, dir(128 * 1024 * 1024), 10, 5, 1024, SEGMENT).to_text();
        assert!(text.contains("watch 30 s: dir 128.0 MiB"), "{text}");
        assert!(text.contains("10 ready + 5 held"), "{text}");
        assert!(text.contains("ratio 1.000"), "{text}");
    }
}
