//! `wharf-perf failover`: how long a quorum queue is unavailable to a publisher when its
//! leader dies (issue #17). A publisher with confirms finds the leader among `--uri`s (the
//! node where declaring the quorum queue succeeds: a follower refuses with 405, S-CLU-11) and
//! publishes persistent messages, one confirm outstanding; after `--warmup` the tool SIGKILLs
//! the leader by the pid given for its `--uri` (`--pid`, in the same order; never by name), and
//! the publisher, its connection gone, finds the new leader by itself the same way and
//! publishes on. Reported: the time from the kill to the first confirm from another node, and
//! to the new leader's declare-ok. Works against any broker whose followers refuse; depends on
//! `client`, `wire`, `clock` and rustix's `kill`.

use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, BasicProperties, basic};
use amq_protocol::types::{AMQPValue, FieldTable};
use anyhow::{Result, anyhow, bail};
use rustix::process::{Pid, Signal, kill_process};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::client::{CHANNEL, Connection};
use crate::clock::Stopwatch;
use crate::wire::PublishTemplate;

/// Usage of `wharf-perf failover`.
pub const USAGE: &str = "\
wharf-perf failover --uri URI --pid PID [--uri URI --pid PID ...] [--queue NAME] [--size BYTES]
    [--warmup SECONDS] [--timeout SECONDS] [--json]
  Publishes persistent messages with confirms to the leader of a quorum queue (found among the
  --uri's: where declaring it succeeds), SIGKILLs the leader by its --pid (same order as the
  --uri's) after --warmup (default 3), and reports the time from the kill to the first confirm
  on the new leader, found by the publisher itself. --queue default wharf-perf-failover,
  --size default 1024, --timeout default 30.
";

/// What `wharf-perf failover` was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct FailoverConfig {
    /// Every node's AMQP URI.
    pub uris: Vec<String>,
    /// Every node's pid, in the order of `uris`.
    pub pids: Vec<i32>,
    /// The quorum queue.
    pub queue: String,
    /// Body bytes.
    pub size_bytes: usize,
    /// Publishing before the kill.
    pub warmup: Duration,
    /// How long the publisher may look for a new leader.
    pub timeout: Duration,
    /// Print JSON.
    pub json: bool,
}

/// Parses the options after `failover`.
pub fn parse(args: &[String]) -> Result<FailoverConfig> {
    let mut config = FailoverConfig {
        uris: Vec::new(),
        pids: Vec::new(),
        queue: "wharf-perf-failover".to_owned(),
        size_bytes: 1024,
        warmup: Duration::from_secs(3),
        timeout: Duration::from_secs(30),
        json: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow!("{flag} needs a value"))
                .cloned()
        };
        match flag.as_str() {
            "--uri" => config.uris.push(value()?),
            "--pid" => config.pids.push(value()?.parse()?),
            "--queue" => config.queue = value()?,
            "--size" => config.size_bytes = value()?.parse()?,
            "--warmup" => config.warmup = Duration::from_secs_f64(value()?.parse()?),
            "--timeout" => config.timeout = Duration::from_secs_f64(value()?.parse()?),
            "--json" => config.json = true,
            other => bail!("unknown failover option {other:?}\n{USAGE}"),
        }
    }
    if config.uris.len() < 2 || config.uris.len() != config.pids.len() {
        bail!("failover needs two --uri or more, each with its --pid\n{USAGE}");
    }
    Ok(config)
}

/// What a failover run measured.
#[derive(Debug, Serialize)]
pub struct FailoverReport {
    /// The leader killed.
    pub killed_uri: String,
    /// Its pid.
    pub killed_pid: i32,
    /// The leader the publisher found after the kill.
    pub new_leader_uri: String,
    /// Messages confirmed before the kill.
    pub confirmed_before_kill: u64,
    /// From the kill to the new leader's declare-ok (ms).
    pub kill_to_leader_ms: f64,
    /// From the kill to the first confirm on the new leader (ms).
    pub kill_to_first_confirm_ms: f64,
}

impl FailoverReport {
    /// The report as text.
    pub fn to_text(&self) -> String {
        format!(
            "killed leader {} (pid {}) after {} confirms\nnew leader {}\nkill to new leader's declare-ok: {:.1} ms\nkill to first confirm on the new leader: {:.1} ms\n",
            self.killed_uri,
            self.killed_pid,
            self.confirmed_before_kill,
            self.new_leader_uri,
            self.kill_to_leader_ms,
            self.kill_to_first_confirm_ms
        )
    }
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args
}

/// The node (its index in `uris`) where declaring the quorum queue succeeds, with a
/// confirm-mode connection on it; tries every node in turn until `deadline` on `clock`.
async fn find_leader(
    config: &FailoverConfig,
    clock: Stopwatch,
    deadline: Duration,
) -> Result<(usize, Connection)> {
    loop {
        for (i, uri) in config.uris.iter().enumerate() {
            let attempt = async {
                let mut conn = Connection::open(uri).await?;
                conn.queue_declare(&config.queue, true, false, quorum())
                    .await?;
                conn.confirm_select().await?;
                Ok::<_, anyhow::Error>(conn)
            };
            if let Ok(Ok(conn)) = tokio::time::timeout(Duration::from_secs(2), attempt).await {
                return Ok((i, conn));
            }
        }
        if clock.elapsed() > deadline {
            bail!("no node took the quorum queue {:?}", config.queue);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Publishes one message and waits for its confirm.
async fn publish_one(conn: &mut Connection, template: &PublishTemplate, body: &[u8]) -> Result<()> {
    let mut out = Vec::with_capacity(template.encoded_bytes());
    template.push(&mut out, body);
    conn.stream.write_all(&out).await?;
    loop {
        match conn.next_method().await? {
            AMQPClass::Basic(basic::AMQPMethod::Ack(_)) => return Ok(()),
            AMQPClass::Basic(basic::AMQPMethod::Nack(_)) => bail!("nacked"),
            _ => {}
        }
    }
}

/// Runs the measurement.
///
/// # Errors
/// No leader found, the kill failed, or no new leader within `--timeout`.
pub async fn failover(config: FailoverConfig) -> Result<FailoverReport> {
    let clock = Stopwatch::start();
    let (leader, mut conn) = find_leader(&config, clock, config.timeout).await?;
    let properties = BasicProperties::default().with_delivery_mode(2);
    let body = vec![0u8; config.size_bytes];
    // Killed: (node, when); the publisher reports (node, when, declare-ok time) of its first
    // confirm from another node.
    let (killed_tx, killed_rx) = watch::channel::<Option<(usize, Duration)>>(None);
    let publisher = {
        let config = config.clone();
        tokio::spawn(async move {
            let mut node = leader;
            let mut confirmed: u64 = 0;
            let mut found_at = Duration::ZERO;
            loop {
                let template = PublishTemplate::new(
                    CHANNEL,
                    &config.queue,
                    properties.clone(),
                    body.len(),
                    conn.frame_max,
                )?;
                while publish_one(&mut conn, &template, &body).await.is_ok() {
                    let killed = *killed_rx.borrow();
                    match killed {
                        Some((dead, _)) if dead != node => {
                            return Ok::<_, anyhow::Error>((
                                node,
                                clock.elapsed(),
                                found_at,
                                confirmed,
                            ));
                        }
                        Some(_) => {}
                        None => confirmed += 1,
                    }
                }
                // The connection failed: find the leader again, as any client would.
                let deadline = clock.elapsed() + config.timeout;
                (node, conn) = find_leader(&config, clock, deadline).await?;
                found_at = clock.elapsed();
            }
        })
    };
    tokio::time::sleep(config.warmup).await;
    let pid = config.pids[leader];
    let target = Pid::from_raw(pid).ok_or_else(|| anyhow!("bad pid {pid}"))?;
    kill_process(target, Signal::KILL).map_err(|e| anyhow!("SIGKILL to pid {pid}: {e}"))?;
    let killed_at = clock.elapsed();
    let _ = killed_tx.send(Some((leader, killed_at)));
    let (node, confirmed_at, found_at, confirmed) = publisher.await??;
    let ms = |d: Duration| d.saturating_sub(killed_at).as_secs_f64() * 1000.0;
    Ok(FailoverReport {
        killed_uri: config.uris[leader].clone(),
        killed_pid: pid,
        new_leader_uri: config.uris[node].clone(),
        confirmed_before_kill: confirmed,
        kill_to_leader_ms: ms(found_at),
        kill_to_first_confirm_ms: ms(confirmed_at),
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_nodes_in_order_and_refuses_a_uri_without_its_pid() {
        let config = parse(&argv(
            "--uri a --pid 10 --uri b --pid 20 --size 16 --warmup 0.5",
        ))
        .unwrap();
        assert_eq!(config.uris, ["a", "b"]);
        assert_eq!(config.pids, [10, 20]);
        assert_eq!(config.size_bytes, 16);
        assert_eq!(config.warmup, Duration::from_millis(500));
        assert!(parse(&argv("--uri a --pid 10 --uri b")).is_err());
        assert!(
            parse(&argv("--uri a --pid 10")).is_err(),
            "one node has nobody to fail over to"
        );
        assert!(parse(&argv("--uri a --pid 10 --uri b --pid 20 --bogus")).is_err());
    }
}
