//! wharf-perf: an AMQP 0-9-1 load generator in the spirit of RabbitMQ's PerfTest, for wharf and
//! RabbitMQ alike. This file parses arguments, builds the tokio runtime and prints the report.
//! It does not depend on the wharf library: it measures the broker from the outside, over TCP.
//!
//! # Layout
//! - `args`: command line -> [`args::Command`] (pure).
//! - `wire`: frame splitting, pre-encoded publishes, hand-decoded hot methods (pure).
//! - `client`: connection handshake and setup RPCs over tokio.
//! - `run`: publishers and consumers; `ttl_mix`: the expiry scenario.
//! - `sink`: a null broker, to measure the generator's own ceiling.
//! - `pacing`: the `--rate` schedule (pure).
//! - `histogram`, `report`: latency percentiles and the report (pure).
//! - `clock`, `cpu`: the only readers of clocks and `/proc`.

mod args;
mod client;
mod clock;
mod cpu;
mod histogram;
mod pacing;
mod report;
mod run;
mod sink;
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

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
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
