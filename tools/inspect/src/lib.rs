//! `wharf-inspect`: offline inspection of a wharf data directory (summary, verify, dump,
//! trace, queues, export, raft). It reads the log through the same `wal` scan and `store` codec
//! that recovery uses, and replays it into a `Broker` with `Broker::apply`, as recovery does:
//! there is no second parser. It opens files read-only and never writes to the directory.
//! Uses `wal`, `store` and `broker`, and `cluster`'s decoders for a member's Raft state; never
//! `server`, and never starts a tokio runtime (openraft links tokio in).
//!
//! # Layout
//! - `scan`: the directory checks and the read-only recovery scan with decoding.
//! - `state`: the replay into a broker, with counters and consistency checks.
//! - `render`: records as JSON; bodies as text, hex or base64.
//! - `commands`, `trace`: the commands.
//! - `raft`: a cluster member's Raft log, votes and snapshot (`raft`), through `wharf-cluster`'s
//!   decoders.
//! - `workload`: scripted workloads through the library (tests, `gen-bench-log`).

pub mod commands;
pub mod raft;
pub mod render;
pub mod scan;
pub mod state;
pub mod trace;
pub mod workload;

use std::ffi::OsString;
use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use wharf_broker::{FieldTable, Properties, Value};
use wharf_clock::{Clock as _, SystemClock};

use commands::{Ctx, Filter};
use render::BodyMode;
use trace::Selector;

/// Exit code for a missing, foreign or too-new data directory and for usage errors.
pub const EXIT_FATAL: i32 = 2;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "wharf-inspect",
    version,
    about = "Look inside a wharf data directory without starting the broker (read-only)."
)]
pub struct Cli {
    /// JSON lines instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Progress on stderr (the default when stderr is a terminal).
    #[arg(long, global = true)]
    pub progress: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Cmd,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Segments, records by kind, live and reclaimable bytes, queues, what recovery would do.
    Summary {
        /// The data directory.
        dir: PathBuf,
        /// "Now" for recovery's expiry, ms since the epoch (default: the wall clock).
        #[arg(long)]
        now: Option<u64>,
    },
    /// Check every frame, checksum and record; exit 0 only when clean.
    Verify {
        /// The data directory.
        dir: PathBuf,
        /// List every problem, not only the first.
        #[arg(long)]
        all: bool,
    },
    /// Records as lines (or JSON lines with --json), filtered.
    Dump {
        /// The data directory.
        dir: PathBuf,
        /// Only records of these kinds (`published`, `settled`, `dead_lettered`, ...; repeatable).
        #[arg(long = "kind")]
        kinds: Vec<String>,
        /// Only records of this virtual host.
        #[arg(long)]
        vhost: Option<String>,
        /// Only records about this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only records about this exchange.
        #[arg(long)]
        exchange: Option<String>,
        /// Only records about this broker message id.
        #[arg(long)]
        message: Option<u64>,
        /// Only records with this routing key.
        #[arg(long)]
        routing_key: Option<String>,
        /// Only records with a time at or after this (ms since the epoch).
        #[arg(long)]
        since: Option<u64>,
        /// Only records with a time at or before this (ms since the epoch).
        #[arg(long)]
        until: Option<u64>,
        /// How bodies are shown.
        #[arg(long, value_enum, default_value = "auto")]
        body: BodyMode,
    },
    /// The life of one message, following its dead-lettered copies.
    Trace {
        /// The data directory.
        dir: PathBuf,
        /// The broker's message id (or use --by).
        message: Option<u64>,
        /// `message_id=..`, `correlation_id=..` or `header:NAME=VALUE`.
        #[arg(long)]
        by: Option<String>,
        /// How bodies are shown.
        #[arg(long, value_enum, default_value = "auto")]
        body: BodyMode,
    },
    /// The queues recovery would rebuild: ready, bytes, oldest, next deadline, arguments, policy.
    Queues {
        /// The data directory.
        dir: PathBuf,
        /// "Now" for recovery's expiry, ms since the epoch (default: the wall clock).
        #[arg(long)]
        now: Option<u64>,
    },
    /// A cluster member's Raft state under DIR/raft: its member file, each group's log records
    /// (votes, committed marks, truncations, purges, entries with their decoded events and
    /// whether a committed entry was voided), its snapshot file.
    Raft {
        /// The data directory.
        dir: PathBuf,
        /// Only this group.
        #[arg(long)]
        group: Option<u64>,
        /// How bodies are shown.
        #[arg(long, value_enum, default_value = "auto")]
        body: BodyMode,
    },
    /// A queue's live messages as JSON lines (bodies in base64), in queue order.
    Export {
        /// The data directory.
        dir: PathBuf,
        /// The queue.
        #[arg(long)]
        queue: String,
        /// Its virtual host.
        #[arg(long, default_value = "/")]
        vhost: String,
        /// "Now" for recovery's expiry, ms since the epoch (default: the wall clock).
        #[arg(long)]
        now: Option<u64>,
    },
    /// Times each stage of a scan (for finding where the time goes): the WAL scan alone,
    /// plus decoding, plus the consistency checks and the broker replay.
    #[command(hide = true)]
    BenchScan {
        /// The data directory.
        dir: PathBuf,
        /// `wal`, `decode`, `replay`, or `timeline` (the dashboard's read of one message,
        /// `wharf_store::trace::trace_dir`, for `--message`).
        #[arg(long, default_value = "wal")]
        stage: String,
        /// The broker message id `--stage timeline` traces.
        #[arg(long, default_value_t = 1)]
        message: u64,
    },
    /// Writes a benchmark log (not read-only: creates DIR). For measuring the inspector.
    #[command(hide = true)]
    GenBenchLog {
        /// The directory to create.
        dir: PathBuf,
        /// Approximate log size in MiB.
        #[arg(long, default_value_t = 64)]
        mib: u64,
        /// Body size of each message.
        #[arg(long, default_value_t = 1024)]
        body_bytes: usize,
    },
}

/// Runs the inspector on `args` (program name first), writing to `out`; returns the exit
/// code: 0 fine, 1 problems found (verify) or nothing matched (trace), 2 fatal.
pub fn run<I, T>(args: I, out: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_FATAL } else { 0 };
        }
    };
    match dispatch(&cli, out) {
        Ok(code) => code,
        // The reader went away (a closed pipe): nothing to report.
        Err(e) if e.0.is_empty() => 0,
        Err(e) => {
            eprintln!("wharf-inspect: {e}");
            EXIT_FATAL
        }
    }
}

fn ctx<'a>(cli: &Cli, dir: &'a Path) -> Ctx<'a> {
    Ctx {
        dir,
        json: cli.json,
        progress: cli.progress || std::io::stderr().is_terminal(),
    }
}

fn now_or_clock(now: Option<u64>) -> u64 {
    now.unwrap_or_else(|| SystemClock.now_ms())
}

fn dispatch(cli: &Cli, out: &mut dyn Write) -> Result<i32, scan::Fatal> {
    match &cli.command {
        Cmd::Summary { dir, now } => commands::summary(&ctx(cli, dir), now_or_clock(*now), out),
        Cmd::Verify { dir, all } => commands::verify(&ctx(cli, dir), *all, out),
        Cmd::Dump {
            dir,
            kinds,
            vhost,
            queue,
            exchange,
            message,
            routing_key,
            since,
            until,
            body,
        } => {
            let filter = Filter {
                kinds: record_kinds(kinds)?,
                vhost: vhost.clone(),
                queue: queue.clone(),
                exchange: exchange.clone(),
                message: *message,
                routing_key: routing_key.clone(),
                since_ms: *since,
                until_ms: *until,
            };
            commands::dump(&ctx(cli, dir), &filter, *body, out)
        }
        Cmd::Trace {
            dir,
            message,
            by,
            body,
        } => {
            let sel = match (message, by) {
                (Some(id), None) => Selector::Id(*id),
                (None, Some(spec)) => Selector::parse_by(spec).map_err(scan::Fatal)?,
                _ => {
                    return Err(scan::Fatal(
                        "trace needs either a message id or --by (not both)".to_owned(),
                    ));
                }
            };
            trace::trace(&ctx(cli, dir), &sel, *body, out)
        }
        Cmd::Queues { dir, now } => commands::queues(&ctx(cli, dir), now_or_clock(*now), out),
        Cmd::Raft { dir, group, body } => raft::raft(dir, cli.json, *group, *body, out),
        Cmd::Export {
            dir,
            queue,
            vhost,
            now,
        } => trace::export(&ctx(cli, dir), vhost, queue, now_or_clock(*now), out),
        Cmd::BenchScan {
            dir,
            stage,
            message,
        } => {
            if stage == "timeline" {
                return bench_timeline(dir, *message, out);
            }
            if !["wal", "decode", "replay"].contains(&stage.as_str()) {
                return Err(scan::Fatal(format!(
                    "--stage {stage}: use wal, decode, replay or timeline"
                )));
            }
            bench_scan(dir, stage, out)
        }
        Cmd::GenBenchLog {
            dir,
            mib,
            body_bytes,
        } => gen_bench_log(dir, *mib, *body_bytes)
            .map(|()| 0)
            .map_err(|e| scan::Fatal(format!("{e:#}"))),
    }
}

/// The `--kind` values as record kind names (case and `_` ignored: `dead_lettered` is
/// `DeadLettered`). S-OPS-7: a name that is no record kind is a usage error (exit 2), not a
/// filter that quietly matches nothing.
fn record_kinds(kinds: &[String]) -> Result<Vec<String>, scan::Fatal> {
    let known: Vec<String> = (0..=u8::MAX)
        .filter(|&b| {
            b == wharf_store::codec::CARRIED_KIND
                || b == wharf_store::codec::REFERENCED_KIND
                || wharf_store::codec::RecordKind::from_byte(b).is_some()
        })
        .map(state::kind_name)
        .collect();
    kinds
        .iter()
        .map(|k| {
            let name = k.replace('_', "");
            if known.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
                Ok(name)
            } else {
                let snake: Vec<String> = known.iter().map(|n| snake_case(n)).collect();
                Err(scan::Fatal(format!(
                    "--kind {k}: no such record kind; one of {}",
                    snake.join(", ")
                )))
            }
        })
        .collect()
}

/// `DeadLettered` as `dead_lettered`.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn bench_scan(dir: &Path, stage: &str, out: &mut dyn Write) -> Result<i32, scan::Fatal> {
    let mut bytes = 0u64;
    let mut records = 0u64;
    let mut visit =
        |r: wharf_wal::RecordRef<'_>| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            records += 1;
            bytes += r.payload.len() as u64;
            if stage == "decode" {
                std::hint::black_box(wharf_store::codec::decode(r.kind, r.payload).is_ok());
            }
            Ok(())
        };
    if stage == "replay" {
        let mut replay = state::Replay::new();
        scan::scan(dir, false, &mut |s| replay.visit(s))?;
        records = replay.records;
        bytes = replay.record_bytes;
    } else {
        wharf_wal::scan(
            &wharf_wal::FileStorage,
            dir,
            wharf_wal::RecoveryMode::Salvage,
            &mut visit,
        )
        .map_err(|e| scan::Fatal(e.to_string()))?;
    }
    writeln!(out, "stage {stage}: {records} records, {bytes} bytes")
        .map_err(|e| scan::Fatal(e.to_string()))?;
    Ok(0)
}

/// The dashboard's timeline read (S-UI-7) of message `id`: how many steps it found.
/// Prints the time it took, how many sealed segments held the story's bytes (read whole) of
/// those searched, and how many of those read by their index (storage-format.md, "Segment
/// index") were read whole (the others only for their queue definitions).
fn bench_timeline(dir: &Path, id: u64, out: &mut dyn Write) -> Result<i32, scan::Fatal> {
    let started = wharf_clock::Stopwatch::start();
    let tracer = wharf_store::trace::trace_dir(
        &wharf_wal::FileStorage,
        dir,
        wharf_store::trace::Selector::Id(id),
    )
    .map_err(|e| scan::Fatal(e.to_string()))?;
    let elapsed = started.elapsed();
    writeln!(
        out,
        "stage timeline: message {id}, {} steps, {:.3} s; sealed segments read whole: {} of {} \
         searched, {} of {} indexed",
        tracer.steps.len(),
        elapsed.as_secs_f64(),
        tracer.read.read_whole,
        tracer.read.searched,
        tracer.read.indexed_whole,
        tracer.read.indexed,
    )
    .map_err(|e| scan::Fatal(e.to_string()))?;
    Ok(0)
}

/// Writes about `mib` MiB of log: publishes into a queue with a dead-letter exchange, most
/// messages acked, one in 100 rejected into the dead-letter queue, one in 1000 left queued.
fn gen_bench_log(dir: &Path, mib: u64, body_bytes: usize) -> anyhow::Result<()> {
    const T0_MS: u64 = 1_700_000_000_000;
    if dir.exists() {
        anyhow::bail!(
            "{} exists; gen-bench-log creates a new directory",
            dir.display()
        );
    }
    let mut d = workload::Driver::create(dir, wharf_base::limits::SEGMENT_BYTES_MAX, true, T0_MS)?;
    d.exchange("dlx", "fanout")?;
    d.queue("dead", FieldTable::new())?;
    d.bind("dead", "dlx", "")?;
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", Value::long_str("dlx"));
    d.queue("work", args)?;
    let body = vec![b'x'; body_bytes];
    let target = mib.saturating_mul(1024 * 1024);
    let per_message = body_bytes as u64 + 200;
    let count = target / per_message;
    for i in 0..count {
        d.now_ms = T0_MS + i;
        let props = Properties {
            message_id: Some(format!("m{i}")),
            correlation_id: Some(format!("c{}", i % 1000)),
            ..Properties::default()
        };
        d.publish("", "work", props, &body)?;
        if i % 1000 == 999 {
            continue;
        }
        if let Some(tag) = d.get("work")? {
            if i % 100 == 7 {
                d.reject(tag, false)?;
            } else {
                d.ack(tag)?;
            }
        }
    }
    d.close()
}
