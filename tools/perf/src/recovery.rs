//! The recovery scenario (issue 5, "Performance"): spawn the broker, prefill a durable queue
//! with persistent messages (with confirms, through `run`), read its RSS and data directory,
//! stop it (SIGTERM and wait, or SIGKILL) by the pid it was spawned with, restart it with the
//! same command and time, from the signal, (a) its accepting an AMQP connection, (b) a passive
//! queue.declare reporting every message, and optionally (c) a consumer having received them
//! all. Every wait polls; none sleeps a fixed time. Depends on `broker_proc`, `client`, `run`,
//! `resources`, `clock`, `report`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use amq_protocol::types::FieldTable;
use anyhow::{Context, Result, bail};
use rustix::process::Signal;
use serde::Serialize;

use crate::args::{self, RecoveryConfig, RunConfig, StopMode};
use crate::broker_proc::BrokerChild;
use crate::client::Connection;
use crate::clock::Stopwatch;
use crate::report::Report;
use crate::resources::{self, DirSize, mib};
use crate::run;

/// Longest a single connection attempt may take before it counts as "not accepting yet".
const CONNECT_ATTEMPT_MAX: Duration = Duration::from_secs(5);

/// What one round measured. Times are milliseconds from the stop signal.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoundReport {
    /// Round number, from 1.
    pub round: u32,
    /// Prefill publish rate (confirmed msg/s).
    pub prefill_msg_s: f64,
    /// Broker CPU per prefilled message, microseconds.
    pub prefill_broker_us_per_msg: Option<f64>,
    /// Broker RSS once the queue held every message, bytes.
    pub rss_serving_bytes: Option<u64>,
    /// Data directory then.
    pub dir_serving: Option<DirSize>,
    /// The old process had exited (a clean stop's duration; a kill's reaping).
    pub exited_ms: Option<f64>,
    /// The old process's exit code (`None`: killed by a signal, or not stopped).
    pub exit_code: Option<i32>,
    /// The restarted broker accepted an AMQP connection (handshake and channel open).
    pub accepting_ms: Option<f64>,
    /// A passive queue.declare reported every message.
    pub visible_ms: Option<f64>,
    /// A consumer had received (and acked) every message (`--drain`).
    pub drained_ms: Option<f64>,
    /// The drain's consume rate, msg/s.
    pub drain_msg_s: Option<f64>,
    /// Broker RSS right after (b), bytes.
    pub rss_recovered_bytes: Option<u64>,
    /// Data directory then (before any drain).
    pub dir_recovered: Option<DirSize>,
}

/// Medians over the rounds (even counts: the mean of the middle two).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Medians {
    /// Of [`RoundReport::prefill_msg_s`].
    pub prefill_msg_s: Option<f64>,
    /// Of [`RoundReport::rss_serving_bytes`].
    pub rss_serving_bytes: Option<f64>,
    /// Of the serving directory's allocated bytes.
    pub dir_serving_allocated_bytes: Option<f64>,
    /// Of [`RoundReport::exited_ms`].
    pub exited_ms: Option<f64>,
    /// Of [`RoundReport::accepting_ms`].
    pub accepting_ms: Option<f64>,
    /// Of [`RoundReport::visible_ms`].
    pub visible_ms: Option<f64>,
    /// Of [`RoundReport::drained_ms`].
    pub drained_ms: Option<f64>,
    /// Of [`RoundReport::drain_msg_s`].
    pub drain_msg_s: Option<f64>,
    /// Of [`RoundReport::rss_recovered_bytes`].
    pub rss_recovered_bytes: Option<f64>,
    /// Of the recovered directory's allocated bytes.
    pub dir_recovered_allocated_bytes: Option<f64>,
}

/// The whole scenario's report (one JSON line).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecoveryReport {
    /// Messages per round.
    pub messages: u64,
    /// Body size.
    pub size_bytes: usize,
    /// How the broker was stopped.
    pub stop: StopMode,
    /// Each round.
    pub rounds: Vec<RoundReport>,
    /// Medians over the rounds.
    pub median: Medians,
}

/// The median of the values present; `None` if there are none.
pub fn median(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().flatten().collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values.get(middle).copied()
    } else {
        Some((values.get(middle - 1)? + values.get(middle)?) / 2.0)
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "byte counts stay far below 2^52"
)]
fn bytes_f64(bytes: Option<u64>) -> Option<f64> {
    bytes.map(|b| b as f64)
}

impl Medians {
    /// Medians of every figure over `rounds`.
    pub fn of(rounds: &[RoundReport]) -> Self {
        let of = |pick: &dyn Fn(&RoundReport) -> Option<f64>| median(rounds.iter().map(pick));
        Self {
            prefill_msg_s: of(&|r| Some(r.prefill_msg_s)),
            rss_serving_bytes: of(&|r| bytes_f64(r.rss_serving_bytes)),
            dir_serving_allocated_bytes: of(&|r| {
                bytes_f64(r.dir_serving.map(|d| d.allocated_bytes))
            }),
            exited_ms: of(&|r| r.exited_ms),
            accepting_ms: of(&|r| r.accepting_ms),
            visible_ms: of(&|r| r.visible_ms),
            drained_ms: of(&|r| r.drained_ms),
            drain_msg_s: of(&|r| r.drain_msg_s),
            rss_recovered_bytes: of(&|r| bytes_f64(r.rss_recovered_bytes)),
            dir_recovered_allocated_bytes: of(&|r| {
                bytes_f64(r.dir_recovered.map(|d| d.allocated_bytes))
            }),
        }
    }
}

fn opt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0} ms"))
}

fn opt_mib(bytes: Option<f64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| format!("{:.1} MiB", b / 1_048_576.0))
}

fn dir_text(dir: Option<DirSize>) -> String {
    dir.map_or_else(
        || "-".to_owned(),
        |d| {
            format!(
                "{:.1} MiB (apparent {:.1} MiB)",
                mib(d.allocated_bytes),
                mib(d.apparent_bytes)
            )
        },
    )
}

impl RecoveryReport {
    /// One round as text (also the progress line on stderr).
    pub fn round_text(&self, r: &RoundReport) -> String {
        let mut out = format!(
            "round {}: prefill {} x {} B at {:.0} msg/s; serving: RSS {}, dir {}\n",
            r.round,
            self.messages,
            self.size_bytes,
            r.prefill_msg_s,
            opt_mib(bytes_f64(r.rss_serving_bytes)),
            dir_text(r.dir_serving)
        );
        if self.stop != StopMode::None {
            let _ = writeln!(
                out,
                "  {:?}: exited {}, accepting {}, all visible {}, drained {}; \
                 recovered: RSS {}, dir {}",
                self.stop,
                opt_ms(r.exited_ms),
                opt_ms(r.accepting_ms),
                opt_ms(r.visible_ms),
                opt_ms(r.drained_ms),
                opt_mib(bytes_f64(r.rss_recovered_bytes)),
                dir_text(r.dir_recovered)
            );
        }
        out
    }

    /// Human-readable text: one line per round and one of medians.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for r in &self.rounds {
            out.push_str(&self.round_text(r));
        }
        let m = &self.median;
        let _ = writeln!(
            out,
            "median of {}: prefill {:.0} msg/s, RSS serving {}, dir {}; exited {}, accepting {}, \
             all visible {}, drained {} ({} msg/s); RSS recovered {}, dir {}",
            self.rounds.len(),
            m.prefill_msg_s.unwrap_or(0.0),
            opt_mib(m.rss_serving_bytes),
            opt_mib(m.dir_serving_allocated_bytes),
            opt_ms(m.exited_ms),
            opt_ms(m.accepting_ms),
            opt_ms(m.visible_ms),
            opt_ms(m.drained_ms),
            m.drain_msg_s
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.0}")),
            opt_mib(m.rss_recovered_bytes),
            opt_mib(m.dir_recovered_allocated_bytes),
        );
        out
    }
}

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

async fn measure_dir(dir: Option<&PathBuf>) -> Result<Option<DirSize>> {
    let Some(dir) = dir.cloned() else {
        return Ok(None);
    };
    let size = tokio::task::spawn_blocking(move || resources::dir_size(&dir))
        .await
        .context("directory size task")??;
    Ok(Some(size))
}

/// Polls (every `poll`) until the broker accepts an AMQP connection at `uri`; fails if it
/// exits or `step_timeout` passes.
pub async fn wait_accepting(
    uri: &str,
    poll: Duration,
    step_timeout: Duration,
    broker: &mut BrokerChild,
) -> Result<Connection> {
    let clock = Stopwatch::start();
    loop {
        if let Some(status) = broker.exited()? {
            bail!("the broker exited while starting ({status}); see --broker-log");
        }
        if let Ok(Ok(conn)) = tokio::time::timeout(CONNECT_ATTEMPT_MAX, Connection::open(uri)).await
        {
            return Ok(conn);
        }
        if clock.elapsed() > step_timeout {
            bail!("the broker did not accept {uri} within {step_timeout:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

/// Polls a passive queue.declare until it reports `expected` messages. A refused declare (the
/// queue not there yet) closes the channel, so the next poll opens a fresh connection.
async fn wait_count(
    config: &RecoveryConfig,
    broker: &mut BrokerChild,
    mut conn: Option<Connection>,
    expected: u64,
) -> Result<Connection> {
    let clock = Stopwatch::start();
    let mut last: Option<u64> = None;
    loop {
        if let Some(status) = broker.exited()? {
            bail!("the broker exited ({status}); see --broker-log");
        }
        if conn.is_none() {
            conn = Connection::open(&config.uri).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            match c
                .queue_declare(&config.queue, true, true, FieldTable::default())
                .await
            {
                Ok((count, _)) if u64::from(count) == expected => {
                    return conn.context("checked just above");
                }
                Ok((count, _)) => last = Some(u64::from(count)),
                Err(_) => conn = None,
            }
        }
        if clock.elapsed() > config.step_timeout {
            bail!(
                "queue {:?} held {last:?} messages, not {expected}, after {:?}",
                config.queue,
                config.step_timeout
            );
        }
        tokio::time::sleep(config.poll).await;
    }
}

fn prefill_config(config: &RecoveryConfig, broker_pid: u32) -> RunConfig {
    let mut run = args::default_run();
    run.uri.clone_from(&config.uri);
    run.producers = config.producers;
    run.consumers = 0;
    run.size_bytes = config.size_bytes;
    run.persistent = true;
    run.confirm_window = Some(config.confirm_window);
    run.queue.name.clone_from(&config.queue);
    run.queue.durable = true;
    run.pmessages = Some(config.messages / u64::from(config.producers));
    run.purge_before = true;
    run.broker_pid = Some(broker_pid);
    run
}

fn drain_config(config: &RecoveryConfig) -> RunConfig {
    let mut run = args::default_run();
    run.uri.clone_from(&config.uri);
    run.producers = 0;
    run.consumers = 1;
    run.qos = config.drain_qos;
    run.multi_ack_every = config.drain_ack_every;
    run.queue.name.clone_from(&config.queue);
    run.queue.durable = true;
    run.cmessages = Some(config.messages);
    run
}

/// Purges the queue and prefills it; fills in the serving figures of `report`.
async fn prefill(
    config: &RecoveryConfig,
    broker: &mut BrokerChild,
    report: &mut RoundReport,
) -> Result<()> {
    let totals = run::run(prefill_config(config, broker.pid())).await?;
    if totals.published != config.messages || totals.nacked > 0 {
        bail!(
            "prefill: {} confirmed and {} nacked of {}",
            totals.published,
            totals.nacked,
            config.messages
        );
    }
    let prefill = Report::from_totals(&totals);
    report.prefill_msg_s = prefill.publish_msg_s;
    report.prefill_broker_us_per_msg = prefill.broker_cpu_us_per_msg;
    wait_count(config, broker, None, config.messages)
        .await?
        .close()
        .await?;
    report.rss_serving_bytes = resources::rss_bytes(broker.pid());
    report.dir_serving = measure_dir(config.dir.as_ref()).await?;
    Ok(())
}

/// Stops `broker` as configured, restarts it and times the recovery; returns the new broker.
async fn stop_and_recover(
    config: &RecoveryConfig,
    mut broker: BrokerChild,
    report: &mut RoundReport,
) -> Result<BrokerChild> {
    let signal = match config.stop {
        StopMode::Term => Signal::TERM,
        StopMode::Kill => Signal::KILL,
        StopMode::None => return Ok(broker),
    };
    let clock = Stopwatch::start();
    broker.signal(signal)?;
    let status = broker.wait(config.step_timeout).await?;
    report.exited_ms = Some(ms(clock.elapsed()));
    report.exit_code = status.code();
    drop(broker);
    let mut broker = BrokerChild::spawn(&config.broker, config.broker_log.as_deref())?;
    let conn = wait_accepting(&config.uri, config.poll, config.step_timeout, &mut broker).await?;
    report.accepting_ms = Some(ms(clock.elapsed()));
    let conn = wait_count(config, &mut broker, Some(conn), config.messages).await?;
    report.visible_ms = Some(ms(clock.elapsed()));
    report.rss_recovered_bytes = resources::rss_bytes(broker.pid());
    report.dir_recovered = measure_dir(config.dir.as_ref()).await?;
    conn.close().await?;
    if config.drain {
        let totals = run::run(drain_config(config)).await?;
        report.drained_ms = Some(ms(clock.elapsed()));
        if totals.consumed != config.messages {
            bail!("drain: consumed {} of {}", totals.consumed, config.messages);
        }
        report.drain_msg_s = Some(Report::from_totals(&totals).consume_msg_s);
    }
    Ok(broker)
}

fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing --fresh data directory {}", dir.display()))
        }
        _ => Ok(()),
    }
}

async fn start(config: &RecoveryConfig) -> Result<BrokerChild> {
    let mut broker = BrokerChild::spawn(&config.broker, config.broker_log.as_deref())?;
    wait_accepting(&config.uri, config.poll, config.step_timeout, &mut broker)
        .await?
        .close()
        .await?;
    Ok(broker)
}

/// Runs every round and returns the report. The broker is stopped cleanly at the end; on any
/// error (or when this future is dropped, e.g. on Ctrl-C) it is killed by its pid.
pub async fn recovery(config: RecoveryConfig) -> Result<RecoveryReport> {
    let mut result = RecoveryReport {
        messages: config.messages,
        size_bytes: config.size_bytes,
        stop: config.stop,
        rounds: Vec::new(),
        median: Medians::default(),
    };
    let mut broker: Option<BrokerChild> = None;
    for round in 1..=config.rounds {
        if config.fresh {
            if let Some(old) = broker.take() {
                old.stop(config.step_timeout).await?;
            }
            if let Some(dir) = &config.dir {
                remove_dir(dir)?;
            }
        }
        let mut current = match broker.take() {
            Some(running) => running,
            None => start(&config).await?,
        };
        let mut report = RoundReport {
            round,
            ..RoundReport::default()
        };
        prefill(&config, &mut current, &mut report).await?;
        broker = Some(stop_and_recover(&config, current, &mut report).await?);
        eprint!("{}", result.round_text(&report));
        result.rounds.push(report);
    }
    if let Some(last) = broker {
        last.stop(config.step_timeout).await?;
    }
    result.median = Medians::of(&result.rounds);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_missing() {
        assert_eq!(median([Some(3.0), Some(1.0), Some(2.0)]), Some(2.0));
        assert_eq!(
            median([Some(4.0), Some(1.0), Some(3.0), Some(2.0)]),
            Some(2.5)
        );
        assert_eq!(median([None, Some(7.0), None]), Some(7.0));
        assert_eq!(median([None, None]), None);
        assert_eq!(median(std::iter::empty()), None);
    }

    fn round(n: u32, visible_ms: f64, rss: u64) -> RoundReport {
        RoundReport {
            round: n,
            prefill_msg_s: 100_000.0 * f64::from(n),
            visible_ms: Some(visible_ms),
            rss_recovered_bytes: Some(rss),
            dir_recovered: Some(DirSize {
                allocated_bytes: rss * 2,
                apparent_bytes: rss,
                files: 1,
            }),
            ..RoundReport::default()
        }
    }

    #[test]
    fn medians_pick_each_figure_independently() {
        let rounds = [
            round(1, 900.0, 300),
            round(2, 500.0, 100),
            round(3, 700.0, 200),
        ];
        let m = Medians::of(&rounds);
        assert_eq!(m.visible_ms, Some(700.0));
        assert_eq!(m.prefill_msg_s, Some(200_000.0));
        assert_eq!(m.rss_recovered_bytes, Some(200.0));
        assert_eq!(m.dir_recovered_allocated_bytes, Some(400.0));
        assert_eq!(m.drained_ms, None, "no round drained");
    }

    #[test]
    fn report_json_and_text_carry_the_figures() {
        let rounds = vec![round(1, 812.0, 150 * 1_048_576)];
        let report = RecoveryReport {
            messages: 1_000_000,
            size_bytes: 100,
            stop: StopMode::Kill,
            median: Medians::of(&rounds),
            rounds,
        };
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(json["stop"], "kill");
        assert_eq!(json["median"]["visible_ms"], 812.0);
        assert_eq!(json["rounds"][0]["round"], 1);
        let text = report.to_text();
        assert!(text.contains("all visible 812 ms"), "{text}");
        assert!(text.contains("RSS recovered 150.0 MiB"), "{text}");
    }

    #[test]
    fn the_prefill_splits_messages_among_publishers_with_confirms_into_a_durable_queue() {
        let argv: Vec<String> =
            "--broker wharf --messages 1000 -x 4 -s 64 --uri amqp://g:g@127.0.0.1:1/%2f"
                .split_whitespace()
                .map(str::to_owned)
                .collect();
        let args::Command::Recovery(config) = args::parse(
            &std::iter::once("recovery".to_owned())
                .chain(argv)
                .collect::<Vec<_>>(),
        )
        .unwrap() else {
            panic!("not recovery");
        };
        let run = prefill_config(&config, 42);
        assert_eq!((run.producers, run.pmessages), (4, Some(250)));
        assert!(run.persistent && run.queue.durable && run.purge_before);
        assert_eq!(run.confirm_window, Some(1024));
        assert_eq!(run.consumers, 0);
        assert_eq!(run.broker_pid, Some(42));
        let drain = drain_config(&config);
        assert_eq!((drain.consumers, drain.cmessages), (1, Some(1000)));
        assert_eq!((drain.qos, drain.multi_ack_every), (1000, 100));
    }
}
