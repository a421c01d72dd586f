//! The `wharf` broker binary: parses flags (each also an environment variable), starts the
//! server, and shuts it down gracefully on SIGINT/SIGTERM (connections closed with 320, the
//! process exits once everything acknowledged is durable). `anyhow` lives here, at the edge.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use wharf::server::{Server, ServerConfig};

/// wharf: a durable AMQP 0-9-1 message broker (fsync before every publisher confirm).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on for AMQP clients.
    #[arg(long, env = "WHARF_BIND", default_value = "127.0.0.1")]
    bind: String,
    /// AMQP port.
    #[arg(long, env = "WHARF_PORT", default_value_t = 5672)]
    port: u16,
    /// Directory holding the write-ahead log and checkpoints (created if missing).
    #[arg(long, env = "WHARF_DATA_DIR", default_value = "./wharf-data")]
    data_dir: PathBuf,
    /// Port reserved for the management HTTP API (not served yet).
    #[arg(long, env = "WHARF_MGMT_PORT", default_value_t = 15672)]
    mgmt_port: u16,
    /// Configuration file (not supported yet: refused if given).
    #[arg(long, env = "WHARF_CONFIG")]
    config: Option<PathBuf>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive list.
    #[arg(long, env = "WHARF_LOG", default_value = "info")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&args.log).context("parsing --log")?)
        .init();
    if let Some(path) = &args.config {
        anyhow::bail!(
            "--config {}: configuration files are not supported yet; use the flags",
            path.display()
        );
    }
    let _ = args.mgmt_port;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let bind = if args.bind.contains(':') {
        format!("[{}]:{}", args.bind, args.port)
    } else {
        format!("{}:{}", args.bind, args.port)
    };
    let config = ServerConfig::new(bind, args.data_dir.clone());
    let server = Server::start(config)
        .await
        .with_context(|| format!("starting wharf with data in {}", args.data_dir.display()))?;
    tokio::select! {
        r = wait_for_signal() => r?,
        () = server.stopped() => tracing::error!("the broker task stopped; exiting"),
    }
    tracing::info!("shutting down");
    server.shutdown().await.context("shutting down")?;
    tracing::info!("stopped; everything acknowledged is durable");
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_signal() -> anyhow::Result<()> {
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")
}
