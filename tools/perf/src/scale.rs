//! The scale scenario (issue 18): many durable queues and many connections, a few of them
//! publishing slowly. wharf-perf spawns the broker (as `recovery` does, `broker_proc`) and
//! reports, from outside:
//!
//! - memory per empty durable queue and per idle connection (RSS deltas, `/proc/PID/status`);
//! - the broker's CPU while every connection is idle, and while `--slow` of them publish slowly
//!   (work per tick or per poll that grows with connections shows here);
//! - the publish rate (and broker CPU per message) with confirms spread over `--spread-queues`
//!   queues, against the same publishers into one queue;
//! - the start-up time with the queues declared: a clean stop, then the time from the restart
//!   to accepting a connection and to seeing the last queue.
//!
//! Defaults are modest (1,000 queues, 1,000 connections, 100 slow); the issue's figures are
//! `--queues 10000 --connections 10000 --slow 1000`. The soft limit on open files is raised to
//! the hard one (the broker, our child, inherits it); loopback ports suffice. Depends on
//! `client`, `wire`, `broker_proc`, `recovery` (waiting for the broker), `cpu`, `resources`.

use std::time::Duration;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{AMQPClass, BasicProperties, confirm, queue};
use amq_protocol::types::FieldTable;
use anyhow::{Context, Result, anyhow, bail};
use bytes::Buf;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::broker_proc::BrokerChild;
use crate::client::{CHANNEL, Connection};
use crate::clock::Stopwatch;
use crate::wire::{self, FRAME_METHOD, PublishTemplate};
use crate::{cpu, recovery, resources};

/// What `wharf-perf scale` was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleConfig {
    /// Broker URI (of the broker we spawn).
    pub uri: String,
    /// The broker's command line.
    pub broker: Vec<String>,
    /// Where the broker's output goes.
    pub broker_log: Option<std::path::PathBuf>,
    /// Durable queues declared.
    pub queues: u32,
    /// Connections opened (each with one channel) and left idle.
    pub connections: u32,
    /// Of those, how many publish slowly.
    pub slow: u32,
    /// Messages per second each slow publisher sends (with confirms, one at a time).
    pub slow_rate: f64,
    /// Seconds of the idle and the slow phases, and of each spread run.
    pub phase: Duration,
    /// Queues the fast publishes are spread over (round robin).
    pub spread_queues: u32,
    /// Fast publishers (connections of their own).
    pub spread_publishers: u32,
    /// Confirm window of each fast publisher.
    pub window: u32,
    /// Body bytes (persistent messages).
    pub size_bytes: usize,
    /// How long any one step may take.
    pub step_timeout: Duration,
    /// Print JSON.
    pub json: bool,
}

/// Usage of `wharf-perf scale`.
pub const USAGE: &str = "\
wharf-perf scale --broker-cmd \"PATH --data-dir DIR --port P ...\" --uri amqp://...:P/%2f [options]
  --queues N            durable queues declared (1000)
  --connections N       idle connections opened, one channel each (1000)
  --slow N              of them publishing slowly, with confirms (100)
  --slow-rate R         messages per second each slow publisher sends (1)
  --phase S             seconds of the idle phase, the slow phase and each spread run (10)
  --spread-queues N     queues the fast publishes are spread over (1000, at most --queues)
  --spread-publishers N fast publishers (4); --window W their confirm window (256)
  --size B              body bytes, persistent (1024)
  --broker-log FILE     append the broker's output to FILE
  --step-timeout S      longest any step may take (300)
  --json                one JSON object
The data directory should start empty. The issue's figures: --queues 10000 --connections 10000
--slow 1000.
";

/// Parses the options after `scale`.
pub fn parse(args: &[String]) -> Result<ScaleConfig> {
    let mut config = ScaleConfig {
        uri: crate::args::DEFAULT_URI.to_owned(),
        broker: Vec::new(),
        broker_log: None,
        queues: 1000,
        connections: 1000,
        slow: 100,
        slow_rate: 1.0,
        phase: Duration::from_secs(10),
        spread_queues: 1000,
        spread_publishers: 4,
        window: 256,
        size_bytes: 1024,
        step_timeout: Duration::from_secs(300),
        json: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow!("{flag} needs a value"))
                .cloned()
        };
        let secs = |v: String| -> Result<Duration> {
            Ok(Duration::from_secs(v.parse().context("seconds")?))
        };
        match flag.as_str() {
            "--uri" => config.uri = value()?,
            "--broker-cmd" => {
                config.broker = value()?.split_whitespace().map(str::to_owned).collect();
            }
            "--broker-log" => config.broker_log = Some(value()?.into()),
            "--queues" => config.queues = value()?.parse().context("--queues")?,
            "--connections" => config.connections = value()?.parse().context("--connections")?,
            "--slow" => config.slow = value()?.parse().context("--slow")?,
            "--slow-rate" => config.slow_rate = value()?.parse().context("--slow-rate")?,
            "--phase" => config.phase = secs(value()?)?,
            "--spread-queues" => {
                config.spread_queues = value()?.parse().context("--spread-queues")?;
            }
            "--spread-publishers" => {
                config.spread_publishers = value()?.parse().context("--spread-publishers")?;
            }
            "--window" => config.window = value()?.parse().context("--window")?,
            "--size" | "-s" => config.size_bytes = value()?.parse().context("--size")?,
            "--step-timeout" => config.step_timeout = secs(value()?)?,
            "--json" => config.json = true,
            other => bail!("unknown scale option {other:?}\n{USAGE}"),
        }
    }
    validate(&config)?;
    Ok(config)
}

fn validate(config: &ScaleConfig) -> Result<()> {
    if config.broker.is_empty() {
        bail!("scale needs the broker command: --broker-cmd\n{USAGE}");
    }
    if config.queues == 0 || config.spread_queues == 0 || config.spread_queues > config.queues {
        bail!("--queues must be at least 1, --spread-queues 1 to --queues");
    }
    if config.slow > config.connections {
        bail!("--slow must be at most --connections");
    }
    if !(config.slow_rate > 0.0 && config.slow_rate <= 1000.0) {
        bail!("--slow-rate must be above 0 and at most 1000");
    }
    if config.spread_publishers == 0 || config.window == 0 || config.window > 65_535 {
        bail!("--spread-publishers must be at least 1, --window 1 to 65535");
    }
    if config.phase.is_zero() {
        bail!("--phase must be at least 1 s");
    }
    Ok(())
}

/// The name of queue `i`.
fn queue_name(i: u32) -> String {
    format!("wharf-perf-scale-{i}")
}

/// What a publish phase measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PublishFigures {
    /// Messages confirmed.
    pub confirmed: u64,
    /// Confirmed messages per second.
    pub msg_s: f64,
    /// Broker CPU cores used on average.
    pub broker_cores: Option<f64>,
    /// Broker CPU microseconds per confirmed message.
    pub broker_us_per_msg: Option<f64>,
}

/// What the scenario measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScaleReport {
    /// Queues and connections, as asked.
    pub queues: u32,
    /// Connections opened.
    pub connections: u32,
    /// Broker RSS when it had just started, bytes.
    pub rss_start_bytes: Option<u64>,
    /// Declaring every queue, ms.
    pub declare_ms: f64,
    /// RSS growth per empty durable queue, bytes.
    pub bytes_per_queue: Option<f64>,
    /// Opening every connection, ms.
    pub connect_ms: f64,
    /// RSS growth per idle connection (one channel open), bytes.
    pub bytes_per_connection: Option<f64>,
    /// Broker CPU cores while every connection was idle.
    pub idle_broker_cores: Option<f64>,
    /// The slow publishers, among the idle connections.
    pub slow: PublishFigures,
    /// Fast publishers into one queue.
    pub one_queue: PublishFigures,
    /// The same publishers spread over `--spread-queues` queues.
    pub spread: PublishFigures,
    /// Queues the spread run used.
    pub spread_queues: u32,
    /// From SIGTERM to the old broker's exit, ms.
    pub stop_ms: Option<f64>,
    /// From the restart to accepting an AMQP connection, ms.
    pub accepting_ms: Option<f64>,
    /// From the restart to the last queue answering a passive declare, ms.
    pub queues_visible_ms: Option<f64>,
    /// RSS after the restart (no connections but ours), bytes.
    pub rss_restarted_bytes: Option<u64>,
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}{unit}"))
}

impl PublishFigures {
    fn text(&self) -> String {
        format!(
            "{} confirmed, {:.0} msg/s, broker {} cores, {} per msg",
            self.confirmed,
            self.msg_s,
            opt(self.broker_cores, ""),
            opt(self.broker_us_per_msg, " us"),
        )
    }
}

impl ScaleReport {
    /// Human-readable text.
    #[expect(
        clippy::cast_precision_loss,
        reason = "byte counts and message counts far below 2^52, for a report"
    )]
    pub fn to_text(&self) -> String {
        let mib = |b: Option<u64>| opt(b.map(|b| b as f64 / resources::MIB as f64), " MiB");
        format!(
            "scale: {} queues, {} connections\n\
             rss at start {}, per empty queue {}, per idle connection {}\n\
             declare {:.0} ms, connect {:.0} ms, idle broker {} cores\n\
             slow publishers: {}\n\
             one queue: {}\n\
             spread over {} queues: {}\n\
             restart: stop {}, accepting {}, last queue visible {}, rss {}\n",
            self.queues,
            self.connections,
            mib(self.rss_start_bytes),
            opt(self.bytes_per_queue, " B"),
            opt(self.bytes_per_connection, " B"),
            self.declare_ms,
            self.connect_ms,
            opt(self.idle_broker_cores, ""),
            self.slow.text(),
            self.one_queue.text(),
            self.spread_queues,
            self.spread.text(),
            opt(self.stop_ms, " ms"),
            opt(self.accepting_ms, " ms"),
            opt(self.queues_visible_ms, " ms"),
            mib(self.rss_restarted_bytes),
        )
    }
}

/// Raises the soft limit on open files to the hard one (each connection is a socket here and
/// in the broker, which inherits the limit); returns the limit now.
fn raise_open_files() -> Result<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    // No hard limit: as many as the kernel's default `nr_open`.
    limit.current = Some(limit.maximum.unwrap_or(1 << 20));
    setrlimit(Resource::Nofile, limit).context("raising the open-files limit")?;
    Ok(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
}

/// RSS once it has settled: the broker frees what a step used in its own time, so take the
/// smallest of a few samples.
async fn settled_rss(pid: u32) -> Option<u64> {
    let mut least: Option<u64> = None;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(rss) = resources::rss_bytes(pid) {
            least = Some(least.map_or(rss, |l| l.min(rss)));
        }
    }
    least
}

#[expect(
    clippy::cast_precision_loss,
    reason = "byte counts and message counts far below 2^52, for a report"
)]
fn per(delta_from: Option<u64>, delta_to: Option<u64>, n: u32) -> Option<f64> {
    let (from, to) = (delta_from?, delta_to?);
    (n > 0).then(|| (to as f64 - from as f64) / f64::from(n))
}

/// Declares queues `0..n` durable on `conn`: `nowait` declares written in batches, each batch
/// closed by a passive declare of its last queue (so the broker never holds more than a batch).
async fn declare_queues(conn: &mut Connection, n: u32) -> Result<()> {
    const BATCH: u32 = 500;
    let mut from = 0;
    while from < n {
        let to = n.min(from + BATCH);
        let mut out = Vec::new();
        for i in from..to {
            let declare = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
                queue: queue_name(i).into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                nowait: true,
                arguments: FieldTable::default(),
            }));
            wire::encode(&AMQPFrame::Method(CHANNEL, declare), &mut out)?;
        }
        conn.stream.write_all(&out).await?;
        conn.queue_declare(&queue_name(to - 1), true, true, FieldTable::default())
            .await?;
        from = to;
    }
    Ok(())
}

/// Opens `n` connections, at most 64 handshakes at a time.
async fn open_connections(uri: &str, n: u32) -> Result<Vec<Connection>> {
    const AT_ONCE: u32 = 64;
    let mut conns = Vec::new();
    let mut from = 0;
    while from < n {
        let to = n.min(from + AT_ONCE);
        let opening: Vec<_> = (from..to)
            .map(|_| {
                let uri = uri.to_owned();
                tokio::spawn(async move { Connection::open(&uri).await })
            })
            .collect();
        for task in opening {
            conns.push(task.await.context("connection task")??);
        }
        from = to;
    }
    Ok(conns)
}

/// One publisher: confirms on, up to `window` messages outstanding, each message to the next
/// of `queues` in turn, until `until` passed. Returns the messages confirmed.
async fn publish(
    mut conn: Connection,
    queues: Vec<String>,
    size_bytes: usize,
    window: u64,
    pace: Option<Duration>,
    until: Duration,
) -> Result<u64> {
    conn.rpc(AMQPClass::Confirm(confirm::AMQPMethod::Select(
        confirm::Select { nowait: false },
    )))
    .await?;
    let properties = BasicProperties::default().with_delivery_mode(2);
    let templates = queues
        .iter()
        .map(|q| PublishTemplate::new(CHANNEL, q, properties.clone(), size_bytes, conn.frame_max))
        .collect::<Result<Vec<_>>>()?;
    let body = vec![0u8; size_bytes];
    let clock = Stopwatch::start();
    let (mut sent, mut confirmed, mut next) = (0u64, 0u64, 0usize);
    let mut out = Vec::new();
    while clock.elapsed() < until {
        out.clear();
        while sent - confirmed < window && (pace.is_none() || out.is_empty()) {
            if let Some(t) = templates.get(next) {
                t.push(&mut out, &body);
            }
            next = (next + 1) % templates.len();
            sent += 1;
        }
        if !out.is_empty() {
            conn.stream.write_all(&out).await?;
        }
        // Confirms: at least one, then whatever else has arrived.
        let target = if pace.is_some() { sent } else { confirmed + 1 };
        while confirmed < target {
            confirmed = confirmed.max(next_confirm(&mut conn).await?);
        }
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
    }
    while confirmed < sent {
        confirmed = confirmed.max(next_confirm(&mut conn).await?);
    }
    Ok(confirmed)
}

/// Reads until a publisher confirm arrives and returns the highest sequence number it covers
/// (a nack counts as answered: the scenario counts what the broker answered).
async fn next_confirm(conn: &mut Connection) -> Result<u64> {
    loop {
        if let Some((frame, used)) = wire::split_frame(&conn.rbuf, conn.frame_max)? {
            let confirm = (frame.kind == FRAME_METHOD)
                .then(|| wire::fast_confirm(frame.payload))
                .flatten();
            conn.rbuf.advance(used);
            if let Some(c) = confirm {
                return Ok(c.tag);
            }
            continue;
        }
        conn.fill().await?;
    }
}

/// Runs `publishers` (each given its connection and queues) for `phase` and measures them.
#[expect(
    clippy::cast_precision_loss,
    reason = "byte counts and message counts far below 2^52, for a report"
)]
async fn publish_phase(
    pid: u32,
    publishers: Vec<(Connection, Vec<String>)>,
    config: &ScaleConfig,
    window: u64,
    pace: Option<Duration>,
) -> Result<PublishFigures> {
    let cpu_before = cpu::process_cpu_s(pid);
    let clock = Stopwatch::start();
    let tasks: Vec<_> = publishers
        .into_iter()
        .map(|(conn, queues)| {
            tokio::spawn(publish(
                conn,
                queues,
                config.size_bytes,
                window,
                pace,
                config.phase,
            ))
        })
        .collect();
    let mut confirmed = 0;
    for task in tasks {
        confirmed += task.await.context("publisher task")??;
    }
    let wall = clock.elapsed().as_secs_f64();
    let cpu = cpu::process_cpu_s(pid)
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    Ok(PublishFigures {
        confirmed,
        msg_s: confirmed as f64 / wall,
        broker_cores: cpu.map(|c| c / wall),
        broker_us_per_msg: cpu
            .filter(|_| confirmed > 0)
            .map(|c| c * 1e6 / confirmed as f64),
    })
}

/// Purges queues `0..n` (`nowait`, then a passive declare as the barrier).
async fn purge_queues(conn: &mut Connection, n: u32) -> Result<()> {
    let mut out = Vec::new();
    for i in 0..n {
        let purge = AMQPClass::Queue(queue::AMQPMethod::Purge(queue::Purge {
            queue: queue_name(i).into(),
            nowait: true,
        }));
        wire::encode(&AMQPFrame::Method(CHANNEL, purge), &mut out)?;
    }
    conn.stream.write_all(&out).await?;
    conn.queue_declare(&queue_name(n - 1), true, true, FieldTable::default())
        .await?;
    Ok(())
}

/// Runs the scenario. The broker is stopped cleanly at the end; on an error (or Ctrl-C) it is
/// killed by its pid when dropped.
pub async fn scale(config: ScaleConfig) -> Result<ScaleReport> {
    let files = raise_open_files()?;
    let needed = u64::from(config.connections + config.spread_publishers) + 64;
    if files < needed {
        bail!("the open-files limit is {files}, {needed} are needed (raise the hard limit)");
    }
    let mut report = ScaleReport {
        queues: config.queues,
        connections: config.connections,
        spread_queues: config.spread_queues,
        ..ScaleReport::default()
    };
    let poll = Duration::from_millis(10);
    let mut broker = BrokerChild::spawn(&config.broker, config.broker_log.as_deref())?;
    let pid = broker.pid();
    let mut admin =
        recovery::wait_accepting(&config.uri, poll, config.step_timeout, &mut broker).await?;
    report.rss_start_bytes = settled_rss(pid).await;

    let clock = Stopwatch::start();
    declare_queues(&mut admin, config.queues).await?;
    report.declare_ms = clock.elapsed().as_secs_f64() * 1000.0;
    let rss_queues = settled_rss(pid).await;
    report.bytes_per_queue = per(report.rss_start_bytes, rss_queues, config.queues);
    eprintln!("scale: {} queues declared", config.queues);

    let clock = Stopwatch::start();
    let mut idle = open_connections(&config.uri, config.connections).await?;
    report.connect_ms = clock.elapsed().as_secs_f64() * 1000.0;
    let rss_conns = settled_rss(pid).await;
    report.bytes_per_connection = per(rss_queues, rss_conns, config.connections);
    eprintln!("scale: {} connections open", config.connections);

    let cpu_before = cpu::process_cpu_s(pid);
    tokio::time::sleep(config.phase).await;
    report.idle_broker_cores = cpu::process_cpu_s(pid)
        .zip(cpu_before)
        .map(|(after, before)| (after - before) / config.phase.as_secs_f64());

    // The slow publishers: the first `slow` idle connections, each into its own queue.
    let slow: Vec<_> = idle
        .drain(..config.slow as usize)
        .enumerate()
        .map(|(i, conn)| {
            let i = u32::try_from(i).unwrap_or(u32::MAX) % config.queues;
            (conn, vec![queue_name(i)])
        })
        .collect();
    let pace = Duration::from_secs_f64(1.0 / config.slow_rate);
    report.slow = publish_phase(pid, slow, &config, 1, Some(pace)).await?;
    eprintln!("scale: slow publishers {}", report.slow.text());

    let spread_names: Vec<String> = (0..config.spread_queues).map(queue_name).collect();
    let window = u64::from(config.window);
    for spread in [false, true] {
        let fast = open_connections(&config.uri, config.spread_publishers).await?;
        let publishers = fast
            .into_iter()
            .enumerate()
            .map(|(p, conn)| {
                let queues = if spread {
                    // Each publisher starts at its own place in the round.
                    let mut names = spread_names.clone();
                    names.rotate_left(p * spread_names.len() / config.spread_publishers as usize);
                    names
                } else {
                    vec![queue_name(0)]
                };
                (conn, queues)
            })
            .collect();
        // Each run starts with empty queues (a backlog left by the one before would be
        // measured with it: checkpoints, reclaim).
        purge_queues(&mut admin, config.queues).await?;
        let figures = publish_phase(pid, publishers, &config, window, None).await?;
        eprintln!(
            "scale: {} {}",
            if spread { "spread" } else { "one queue" },
            figures.text()
        );
        if spread {
            report.spread = figures;
        } else {
            report.one_queue = figures;
        }
    }
    drop(idle);

    // Start-up with the queues (emptied, so that it measures the queues, not a backlog).
    purge_queues(&mut admin, config.queues).await?;
    drop(admin);
    restart(&config, broker, &mut report).await?;
    Ok(report)
}

/// Stops `broker` cleanly, starts it again and times its start with the queues declared; then
/// stops it.
async fn restart(
    config: &ScaleConfig,
    broker: BrokerChild,
    report: &mut ScaleReport,
) -> Result<()> {
    let poll = Duration::from_millis(10);
    let clock = Stopwatch::start();
    broker.signal(rustix::process::Signal::TERM)?;
    let mut broker = broker;
    broker.wait(config.step_timeout).await?;
    report.stop_ms = Some(clock.elapsed().as_secs_f64() * 1000.0);
    drop(broker);
    let clock = Stopwatch::start();
    let mut broker = BrokerChild::spawn(&config.broker, config.broker_log.as_deref())?;
    let mut conn =
        recovery::wait_accepting(&config.uri, poll, config.step_timeout, &mut broker).await?;
    report.accepting_ms = Some(clock.elapsed().as_secs_f64() * 1000.0);
    conn.queue_declare(
        &queue_name(config.queues - 1),
        true,
        true,
        FieldTable::default(),
    )
    .await
    .context("the last queue after the restart")?;
    report.queues_visible_ms = Some(clock.elapsed().as_secs_f64() * 1000.0);
    report.rss_restarted_bytes = settled_rss(broker.pid()).await;
    conn.close().await?;
    broker.stop(config.step_timeout).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn defaults_are_modest_and_the_issues_figures_are_flags() {
        let c = parse(&argv("--broker-cmd wharf")).unwrap();
        assert_eq!((c.queues, c.connections, c.slow), (1000, 1000, 100));
        let c = parse(&argv(
            "--broker-cmd wharf --queues 10000 --connections 10000 --slow 1000 --json",
        ))
        .unwrap();
        assert_eq!((c.queues, c.connections, c.slow), (10_000, 10_000, 1000));
        assert!(c.json);
    }

    #[test]
    fn bad_input_is_refused() {
        for bad in [
            "",
            "--broker-cmd w --queues 0",
            "--broker-cmd w --queues 10 --spread-queues 11",
            "--broker-cmd w --connections 5 --slow 6",
            "--broker-cmd w --slow-rate 0",
            "--broker-cmd w --window 0",
            "--broker-cmd w --phase 0",
            "--broker-cmd w --bogus",
            "--broker-cmd w --queues",
        ] {
            assert!(parse(&argv(bad)).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn per_object_figures_are_deltas_over_the_count() {
        assert_eq!(per(Some(1000), Some(3000), 4), Some(500.0));
        assert_eq!(per(None, Some(3000), 4), None);
        assert_eq!(per(Some(1000), Some(3000), 0), None);
        let report = ScaleReport {
            bytes_per_queue: Some(512.0),
            ..ScaleReport::default()
        };
        assert!(report.to_text().contains("per empty queue 512.0 B"));
    }
}
