//! wharf-perf: an AMQP 0-9-1 load generator in the spirit of RabbitMQ's PerfTest, for wharf and
//! RabbitMQ alike. This file parses arguments, builds the tokio runtime and prints the report.
//! It does not depend on the wharf library: it measures the broker from the outside, over TCP.
//!
//! # Layout
//! - `args`: command line -> [`args::Command`] (pure).
//! - `wire`: frame splitting, pre-encoded publishes, hand-decoded hot methods (pure).
//! - `client`: connection handshake and setup RPCs over tokio.
//! - `rpc`: RPC round trips through direct reply-to.
//! - `run`: publishers and consumers (with `soak`: `--hold`, `--watch-dir`); `ttl_mix`: the
//!   expiry scenario; `recovery`: spawn, prefill, stop, restart and time the broker
//!   (`broker_proc` owns the child process).
//! - `scale`: many queues and connections, memory per object, start-up with many queues.
//! - `sink`: a null broker, to measure the generator's own ceiling.
//! - `pacing`: the `--rate` schedule (pure); `rng`: splitmix64 (shuffles, `--priorities`).
//! - `histogram`, `report`: latency percentiles and the report (pure).
//! - `clock`, `cpu`, `resources`: the only readers of clocks, `/proc` and directory sizes.

mod args;
mod broker_proc;
mod client;
mod clock;
mod cpu;
mod failover;
mod histogram;
mod pacing;
mod recovery;
mod report;
mod resources;
mod rng;
mod rpc;
mod run;
mod scale;
mod sink;
mod soak;
mod ttl_mix;
mod wire;

use anyhow::{Context, Result};

use crate::args::Command;
use crate::report::Report;

fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        builder.worker_threads(threads.max(1));
    }
    builder
        .enable_all()
        .build()
        .context("building the tokio runtime")
}

/// Runs `work` unless SIGINT or SIGTERM comes first; then `work` is dropped (which kills a
/// broker child by its pid) and the interruption is the error.
async fn until_interrupted<T>(work: impl Future<Output = Result<T>>) -> Result<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    tokio::select! {
        result = work => result,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted (SIGINT)"),
        _ = term.recv() => anyhow::bail!("interrupted (SIGTERM)"),
    }
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // `rpc` parses its own options (`rpc.rs`), so that `args` needs no scenario module.
    if argv.first().map(String::as_str) == Some("rpc") {
        let config = rpc::parse(argv.get(1..).unwrap_or_default())?;
        let json = config.json;
        let report = runtime(None)?.block_on(rpc::rpc(config))?;
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print!("{}", report.to_text());
        }
        return Ok(());
    }
    // `failover` parses its own options too (`failover.rs`).
    if argv.first().map(String::as_str) == Some("failover") {
        if argv.iter().any(|a| a == "--help" || a == "-h") {
            print!("{}", failover::USAGE);
            return Ok(());
        }
        let config = failover::parse(argv.get(1..).unwrap_or_default())?;
        let json = config.json;
        let report = runtime(None)?.block_on(until_interrupted(failover::failover(config)))?;
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print!("{}", report.to_text());
        }
        return Ok(());
    }
    // `scale` parses its own options too (`scale.rs`).
    if argv.first().map(String::as_str) == Some("scale") {
        if argv.iter().any(|a| a == "--help" || a == "-h") {
            print!("{}", scale::USAGE);
            return Ok(());
        }
        let config = scale::parse(argv.get(1..).unwrap_or_default())?;
        let json = config.json;
        let report = runtime(None)?.block_on(until_interrupted(scale::scale(config)))?;
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print!("{}", report.to_text());
        }
        return Ok(());
    }
    match args::parse(&argv)? {
        Command::Help => print!("{}", args::USAGE),
        Command::Run(config) => {
            let json = config.json;
            let totals = runtime(config.threads)?.block_on(run::run(config))?;
            let report = Report::from_totals(&totals);
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_text());
            }
        }
        Command::Sink { listen, size_bytes } => {
            runtime(None)?.block_on(async {
                let listener = tokio::net::TcpListener::bind(&listen)
                    .await
                    .with_context(|| format!("binding {listen}"))?;
                eprintln!("wharf-perf sink listening on {}", listener.local_addr()?);
                sink::serve(listener, size_bytes).await
            })?;
        }
        Command::Recovery(config) => {
            let json = config.json;
            let report = runtime(None)?.block_on(until_interrupted(recovery::recovery(config)))?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.to_text());
            }
        }
        Command::TtlMix(config) => {
            let json = config.json;
            let report = runtime(None)?.block_on(ttl_mix::ttl_mix(config))?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.to_text());
            }
        }
    }
    Ok(())
}
