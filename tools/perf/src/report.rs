//! The result of a run: rates, MiB/s, latency percentiles and CPU cost, computed from raw
//! totals, and rendered as human text or one JSON line. Pure: no I/O, no clock.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::histogram::Histogram;
use crate::resources::mib;
use crate::soak::WatchSummary;

/// Raw totals collected by a run.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Body size in bytes.
    pub size_bytes: usize,
    /// Messages published: confirmed by the broker when confirms are on, else written.
    pub published: u64,
    /// Messages the broker nacked (not counted in `published`).
    pub nacked: u64,
    /// From the start to the last confirm (or to the publishers' close-ok without confirms).
    pub publish_elapsed: Duration,
    /// Messages consumed.
    pub consumed: u64,
    /// Body bytes consumed (consumers need not know the publishers' size).
    pub consumed_bytes: u64,
    /// From the start to the last delivery.
    pub consume_elapsed: Duration,
    /// Whole run, start to the end of every task.
    pub wall: Duration,
    /// End-to-end latencies in microseconds, for messages sent during this run.
    pub latency_us: Histogram,
    /// CPU seconds the broker process used during the run.
    pub broker_cpu_s: Option<f64>,
    /// CPU seconds this generator used during the run.
    pub perf_cpu_s: Option<f64>,
    /// The `--rate` target in msg/s, when the publishers were paced.
    pub target_rate: Option<u64>,
    /// Messages the holding consumer held (`--hold`).
    pub held: Option<u64>,
    /// What the directory watcher saw (`--watch-dir`).
    pub watch: Option<WatchSummary>,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Latency {
    /// Messages measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Smallest.
    pub min_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

/// What a run reports (also the JSON line's fields).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Body size in bytes.
    pub size_bytes: usize,
    /// Messages published (confirmed, with confirms on).
    pub published: u64,
    /// Messages nacked by the broker.
    pub nacked: u64,
    /// Publish rate, messages per second (the achieved rate).
    pub publish_msg_s: f64,
    /// The `--rate` target, messages per second, when the publishers were paced.
    pub target_msg_s: Option<u64>,
    /// Publish rate in MiB of body per second.
    pub publish_mib_s: f64,
    /// Messages consumed.
    pub consumed: u64,
    /// Consume rate, messages per second.
    pub consume_msg_s: f64,
    /// Consume rate in MiB of body per second.
    pub consume_mib_s: f64,
    /// End-to-end latency, when any message carried a send time from this run.
    pub latency: Option<Latency>,
    /// Wall time of the run in seconds.
    pub wall_s: f64,
    /// Broker CPU seconds over the run.
    pub broker_cpu_s: Option<f64>,
    /// Broker CPU microseconds per message (per published one if any, else per consumed one).
    pub broker_cpu_us_per_msg: Option<f64>,
    /// Generator CPU seconds over the run.
    pub perf_cpu_s: Option<f64>,
    /// Generator CPU as a fraction of one core over the run.
    pub perf_cpu_cores: Option<f64>,
    /// Messages held unacked for the whole run (`--hold`).
    pub held: Option<u64>,
    /// The data directory against the queued bytes (`--watch-dir`).
    pub watch: Option<WatchSummary>,
}

const MIB: f64 = 1024.0 * 1024.0;

#[expect(
    clippy::cast_precision_loss,
    reason = "message counts stay far below 2^52"
)]
fn as_f64(count: u64) -> f64 {
    count as f64
}

/// Events per second; 0 when nothing happened or no time passed.
fn rate(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if count == 0 || seconds <= 0.0 {
        0.0
    } else {
        as_f64(count) / seconds
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "latencies in microseconds stay far below 2^52"
)]
fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn latency(histogram: &Histogram) -> Option<Latency> {
    Some(Latency {
        count: histogram.count(),
        p50_ms: us_to_ms(histogram.percentile(50.0)?),
        p99_ms: us_to_ms(histogram.percentile(99.0)?),
        p999_ms: us_to_ms(histogram.percentile(99.9)?),
        max_ms: us_to_ms(histogram.max()?),
        min_ms: us_to_ms(histogram.min()?),
        mean_ms: histogram.mean()? / 1000.0,
    })
}

impl Report {
    /// Computes the report from raw totals.
    pub fn from_totals(totals: &Totals) -> Self {
        let publish_msg_s = rate(totals.published, totals.publish_elapsed);
        let consume_msg_s = rate(totals.consumed, totals.consume_elapsed);
        #[expect(
            clippy::cast_precision_loss,
            reason = "message sizes stay far below 2^52"
        )]
        let size_mib = totals.size_bytes as f64 / MIB;
        let per_msg = if totals.published > 0 {
            totals.published
        } else {
            totals.consumed
        };
        let wall_s = totals.wall.as_secs_f64();
        Self {
            size_bytes: totals.size_bytes,
            published: totals.published,
            nacked: totals.nacked,
            publish_msg_s,
            target_msg_s: totals.target_rate,
            publish_mib_s: publish_msg_s * size_mib,
            consumed: totals.consumed,
            consume_msg_s,
            consume_mib_s: if totals.consumed_bytes == 0 {
                0.0
            } else {
                rate(totals.consumed_bytes, totals.consume_elapsed) / MIB
            },
            latency: latency(&totals.latency_us),
            wall_s,
            broker_cpu_s: totals.broker_cpu_s,
            broker_cpu_us_per_msg: totals
                .broker_cpu_s
                .filter(|_| per_msg > 0)
                .map(|cpu_s| cpu_s * 1e6 / as_f64(per_msg)),
            perf_cpu_s: totals.perf_cpu_s,
            perf_cpu_cores: totals
                .perf_cpu_s
                .filter(|_| wall_s > 0.0)
                .map(|cpu_s| cpu_s / wall_s),
            held: totals.held,
            watch: totals.watch.clone(),
        }
    }

    /// One JSON line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Human-readable text, one fact per line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "published {} msgs ({} nacked): {:.0} msg/s",
            self.published, self.nacked, self.publish_msg_s
        );
        if let Some(target) = self.target_msg_s {
            let _ = write!(out, " (target {target} msg/s)");
        }
        let _ = writeln!(out, ", {:.2} MiB/s", self.publish_mib_s);
        let _ = writeln!(
            out,
            "consumed  {} msgs: {:.0} msg/s, {:.2} MiB/s",
            self.consumed, self.consume_msg_s, self.consume_mib_s
        );
        if let Some(l) = &self.latency {
            let _ = writeln!(
                out,
                "latency (n={}): p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms, mean {:.3} ms",
                l.count, l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms, l.mean_ms
            );
        }
        let _ = write!(out, "wall {:.2} s", self.wall_s);
        if let (Some(cpu_s), Some(per_msg)) = (self.broker_cpu_s, self.broker_cpu_us_per_msg) {
            let _ = write!(out, "; broker cpu {cpu_s:.2} s = {per_msg:.1} us/msg");
        }
        if let (Some(cpu_s), Some(cores)) = (self.perf_cpu_s, self.perf_cpu_cores) {
            let _ = write!(out, "; wharf-perf cpu {cpu_s:.2} s ({cores:.2} cores)");
        }
        out.push('\n');
        if let Some(held) = self.held {
            let _ = writeln!(out, "held {held} msgs unacked for the whole run");
        }
        if let Some(watch) = &self.watch {
            out.push_str(&watch_text(watch));
        }
        out
    }
}

/// The watcher's summary as text: the worst sample and the maxima.
fn watch_text(watch: &WatchSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "disk ({} samples, segment {:.0} MiB): max dir {:.1} MiB (apparent {:.1} MiB), \
         max queued {:.1} MiB",
        watch.samples,
        mib(watch.segment_bytes),
        mib(watch.max_allocated_bytes),
        mib(watch.max_apparent_bytes),
        mib(watch.max_queued_bytes)
    );
    if let Some(worst) = &watch.worst {
        let _ = writeln!(
            out,
            "disk max ratio dir / (2 x queued + 2 x segment) = {:.3} ({})",
            worst.ratio,
            if worst.ratio <= 1.0 { "within" } else { "OVER" }
        );
        let _ = writeln!(out, "  at {}", worst.to_text());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals() -> Totals {
        let mut latency_us = Histogram::default();
        for us in 1..=1000 {
            latency_us.record(us);
        }
        Totals {
            size_bytes: 1024,
            published: 20_000,
            nacked: 3,
            publish_elapsed: Duration::from_secs(2),
            consumed: 5_000,
            consumed_bytes: 5_000 * 1024,
            consume_elapsed: Duration::from_millis(500),
            wall: Duration::from_secs(4),
            latency_us,
            broker_cpu_s: Some(1.0),
            perf_cpu_s: Some(2.0),
            target_rate: None,
            held: None,
            watch: None,
        }
    }

    #[test]
    fn rates_bandwidth_and_cpu_per_message() {
        let report = Report::from_totals(&totals());
        assert!((report.publish_msg_s - 10_000.0).abs() < 1e-6);
        assert!((report.consume_msg_s - 10_000.0).abs() < 1e-6);
        // 10,000 msg/s of 1 KiB = 9.765625 MiB/s.
        assert!((report.publish_mib_s - 9.765_625).abs() < 1e-9);
        assert!((report.consume_mib_s - 9.765_625).abs() < 1e-9);
        // 1 CPU second over 20,000 published messages = 50 us each.
        assert!((report.broker_cpu_us_per_msg.unwrap() - 50.0).abs() < 1e-9);
        assert!((report.perf_cpu_cores.unwrap() - 0.5).abs() < 1e-9);
        let latency = report.latency.unwrap();
        assert_eq!(latency.count, 1000);
        // Above 256 us the histogram's buckets are up to 1/128 wide; max is exact.
        assert!((latency.p50_ms - 0.5).abs() < 0.5 / 128.0);
        assert!((latency.p99_ms - 0.99).abs() < 0.99 / 128.0);
        assert!((latency.p999_ms - 0.999).abs() < 0.999 / 128.0);
        assert!((latency.max_ms - 1.0).abs() < 1e-9);
        assert!((latency.mean_ms - 0.5005).abs() < 1e-9);
    }

    #[test]
    fn cpu_per_message_falls_back_to_consumed_and_nothing_gives_zero() {
        let mut t = totals();
        t.published = 0;
        let report = Report::from_totals(&t);
        assert!((report.broker_cpu_us_per_msg.unwrap() - 200.0).abs() < 1e-9);
        assert!(report.publish_msg_s.abs() < f64::EPSILON);

        let empty = Report::from_totals(&Totals::default());
        assert!(empty.consume_msg_s.abs() < f64::EPSILON);
        assert_eq!(empty.latency, None);
        assert_eq!(empty.broker_cpu_us_per_msg, None);
        assert_eq!(empty.perf_cpu_cores, None);
    }

    #[test]
    fn json_is_one_line_with_the_figures() {
        let json = Report::from_totals(&totals()).to_json();
        assert!(!json.contains('\n'));
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["published"], 20_000);
        assert_eq!(value["nacked"], 3);
        assert!((value["latency"]["max_ms"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        assert!((value["publish_msg_s"].as_f64().unwrap() - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn a_paced_run_reports_its_target_next_to_the_achieved_rate() {
        let unpaced = Report::from_totals(&totals());
        assert!(!unpaced.to_text().contains("target"));
        let json: serde_json::Value = serde_json::from_str(&unpaced.to_json()).unwrap();
        assert!(json["target_msg_s"].is_null());
        let mut t = totals();
        t.target_rate = Some(12_000);
        let paced = Report::from_totals(&t);
        assert!(
            paced
                .to_text()
                .contains("10000 msg/s (target 12000 msg/s), 9.77 MiB/s")
        );
        let json: serde_json::Value = serde_json::from_str(&paced.to_json()).unwrap();
        assert_eq!(json["target_msg_s"], 12_000);
    }

    #[test]
    fn text_names_every_figure() {
        let text = Report::from_totals(&totals()).to_text();
        for needle in [
            "10000 msg/s",
            "9.77 MiB/s",
            "max 1.000 ms",
            "50.0 us/msg",
            "0.50 cores",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
    }
}
