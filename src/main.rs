//! The `wharf` broker binary: parses flags (each also an environment variable) and the
//! `--config` file (`wharf_server::config`: a flag beats the file), starts the
//! server, and shuts it down gracefully on SIGINT/SIGTERM (connections closed with 320, the
//! process exits once everything acknowledged is durable). `anyhow` lives here, at the edge.
//! `--test-mode` and `--test-clock` (the fixture for tests in other languages) are
//! `test_mode.rs`. With `--cluster-listen` and `--cluster-seeds` a cluster node
//! (`wharf_cluster::Node`) runs beside the server, and the server's quorum queues are
//! replicated through the node's queue group (`wharf_cluster::QUEUE_GROUP`, handed to the
//! server as `ServerConfig::cluster`; DESIGN "Replication", S-CLU-10), and its definitions
//! through the metadata group (`ServerConfig::metadata`, S-CLU-51..54).

mod test_mode;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use wharf_server::Server;
use wharf_server::config::{Config, FileConfig, Overrides};

/// wharf: a durable AMQP 0-9-1 message broker (fsync before every publisher confirm).
///
/// Every setting may also come from the configuration file; a flag (or its environment
/// variable) beats the file, the file beats the default.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on for AMQP clients, or several separated by commas
    /// (`127.0.0.1,::1`) [default: 127.0.0.1, and `::1` where the host has IPv6].
    #[arg(long, env = "WHARF_BIND")]
    bind: Option<String>,
    /// AMQP port; 0 picks a free one, named in the log [default: 5672].
    #[arg(long, env = "WHARF_PORT")]
    port: Option<u16>,
    /// Directory holding the write-ahead log (created if missing) [default: ./wharf-data].
    #[arg(long, env = "WHARF_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Port of the management HTTP API and /metrics, on the same address [default: 15672].
    #[arg(long, env = "WHARF_MGMT_PORT")]
    mgmt_port: Option<u16>,
    /// Port of the Prometheus metrics (/metrics, /metrics/per-object, /metrics/detailed, as
    /// RabbitMQ's Prometheus plugin serves them), on the same address; 0 picks a free one
    /// [default: 15692].
    #[arg(long, env = "WHARF_PROMETHEUS_PORT")]
    prometheus_port: Option<u16>,
    /// Do not serve the Prometheus metrics listener (the management API's /metrics stays).
    #[arg(long, env = "WHARF_NO_PROMETHEUS")]
    no_prometheus: bool,
    /// AMQPS port, served when the configuration file names `tls.cert_file` and
    /// `tls.key_file` [default: 5671].
    #[arg(long, env = "WHARF_TLS_PORT")]
    tls_port: Option<u16>,
    /// This node's cluster listener, `IP:PORT`, one of `--cluster-seeds`: starts a cluster
    /// node beside the broker (docs/DESIGN.md, "Replication").
    #[arg(long, env = "WHARF_CLUSTER_LISTEN")]
    cluster_listen: Option<String>,
    /// Every node's cluster listener, comma-separated, the same list in the same order on
    /// every node (a node's id is its position, from 1).
    #[arg(long, env = "WHARF_CLUSTER_SEEDS")]
    cluster_seeds: Option<String>,
    /// This node's id (its position in `--cluster-seeds`, from 1) when `--cluster-listen` is
    /// not its seed address (a node behind a proxy or NAT) [default: the position of
    /// `--cluster-listen`].
    #[arg(long, env = "WHARF_CLUSTER_ID")]
    cluster_id: Option<u64>,
    /// Forward a client's quorum queue work to the group's leader over the cluster link
    /// (S-CLU-70); `false`: a node that does not lead refuses it with 405 naming the leader
    /// (S-CLU-11) [default: true].
    #[arg(long, env = "WHARF_CLUSTER_FORWARD")]
    cluster_forward: Option<bool>,
    /// Configuration file (TOML): users, vhosts, TLS files, and every setting above.
    #[arg(long, env = "WHARF_CONFIG")]
    config: Option<PathBuf>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive list [default: info].
    #[arg(long, env = "WHARF_LOG")]
    log: Option<String>,
    /// Free disk space below which publishers are blocked: bytes or with a unit (50MB, 1GiB)
    /// [default: 50MB].
    #[arg(long, env = "WHARF_DISK_FREE_LIMIT")]
    disk_free_limit: Option<String>,
    /// Memory use above which publishers are blocked: a fraction of RAM (0.4) or bytes with a
    /// unit (2GiB) [default: 0.4].
    #[arg(long, env = "WHARF_MEMORY_HIGH_WATERMARK")]
    memory_high_watermark: Option<String>,
    /// Open connections at most; more are refused at connection.open [default: 65536].
    #[arg(long, env = "WHARF_CONNECTION_MAX")]
    connection_max: Option<u32>,
    /// Heartbeat interval proposed to clients, seconds (0: none) [default: 60].
    #[arg(long, env = "WHARF_HEARTBEAT")]
    heartbeat: Option<u16>,
    /// Start on a damaged log by giving up what is damaged (S-DISK-8): recovery skips damaged
    /// records, cuts a log that ends before what an fsync covered, and logs each loss (file,
    /// offset, Lsns). Only as a flag, never from the file or the environment: it is a
    /// one-time decision, to be taken after reading `wharf-inspect verify`.
    #[arg(long)]
    salvage: bool,
    #[command(flatten)]
    test: test_mode::TestArgs,
}

fn load(args: Args) -> anyhow::Result<Config> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --config {}", path.display()))?;
            FileConfig::parse(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => FileConfig::default(),
    };
    let flags = Overrides {
        bind: args.bind,
        port: args.port,
        data_dir: args.data_dir,
        mgmt_port: args.mgmt_port,
        prometheus_port: args.prometheus_port,
        prometheus: args.no_prometheus.then_some(false),
        log: args.log,
        disk_free_limit: args.disk_free_limit,
        memory_high_watermark: args.memory_high_watermark,
        connection_max: args.connection_max,
        heartbeat_secs: args.heartbeat,
        tls_port: args.tls_port,
        cluster_listen: args.cluster_listen,
        cluster_seeds: args.cluster_seeds,
        cluster_id: args.cluster_id,
        cluster_forward: args.cluster_forward,
    };
    let origin = args
        .config
        .as_ref()
        .map_or_else(|| "flags".to_owned(), |p| p.display().to_string());
    wharf_server::config::merge(file, flags).with_context(|| format!("in {origin}"))
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    let test = args.test.clone();
    let salvage = args.salvage;
    // Removed when main returns, after the graceful shutdown.
    let _temp_dir = test.fixture_defaults(
        &mut args.bind,
        &mut args.port,
        &mut args.mgmt_port,
        &mut args.prometheus_port,
        &mut args.data_dir,
    )?;
    let config = load(args)?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&config.log).context("parsing log")?);
    if test.test_mode {
        // Stdout carries the fixture protocol only.
        logs.with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    } else {
        // Colour codes only for a person at a terminal, not in log files or journald. The
        // logs go to stdout (tracing's default, which scripts may read), so that is the
        // stream asked.
        logs.with_ansi(std::io::stdout().is_terminal()).init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(config, &test, salvage))
}

async fn run(config: Config, test: &test_mode::TestArgs, salvage: bool) -> anyhow::Result<()> {
    let mut server_config = config.server_config()?;
    test.apply(&mut server_config);
    if salvage {
        tracing::warn!(
            data_dir = %config.data_dir.display(),
            "--salvage: damaged log records will be skipped and their loss logged"
        );
        server_config.salvage = true;
    }
    // Handlers first: a SIGTERM right after the start line must stop gracefully, not kill.
    let signalled = signals()?;
    let node = start_cluster(&config).await?;
    if let Some(cluster) = &node {
        server_config.cluster = Some(cluster.group.clone());
        server_config.metadata = Some(cluster.metadata.clone());
        // S-CLU-70: clients' quorum queue work goes to the leader's server over the link.
        server_config.relay = config.cluster_forward.then(|| {
            wharf_server::RelayHandle(std::sync::Arc::new(
                cluster.node.relay(cluster.group.raft.clone()),
            ))
        });
        // Named before the start line, so a `cluster_status` run after it finds it.
        let advertiser = cluster.node.clone();
        server_config.on_listening = Some(wharf_server::ListeningHook(std::sync::Arc::new(
            move |amqp| advertise(&advertiser, amqp),
        )));
    }
    let server = Server::start(server_config)
        .await
        .with_context(|| format!("starting wharf with data in {}", config.data_dir.display()))?;
    if test.test_mode {
        test_mode::announce(&server, &config.data_dir);
    }
    tokio::select! {
        r = signalled => r?,
        () = server.stopped() => tracing::error!("the broker task stopped; exiting"),
        () = test_mode::serve_stdin(&server), if test.test_mode => {}
    }
    tracing::info!("shutting down");
    server.shutdown().await.context("shutting down")?;
    if let Some(cluster) = node {
        cluster.shutdown().await;
    }
    tracing::info!("stopped; everything acknowledged is durable");
    Ok(())
}

/// The cluster node of a clustered `wharf`, its queue group, and the task that learns where
/// the group's leaders take AMQP clients (S-CLU-13).
struct Cluster {
    node: wharf_cluster::Node,
    group: wharf_cluster::QueueGroup,
    /// The node's handle on the metadata group, which keeps the cluster's definitions.
    metadata: wharf_cluster::MetadataGroup,
    learner: tokio::task::JoinHandle<()>,
}

/// Names the server's AMQP address `amqp` in `node`'s status, where the other nodes learn
/// it. A wildcard address (`0.0.0.0`, `::`) is named by the cluster listener's IP.
fn advertise(node: &wharf_cluster::Node, mut amqp: std::net::SocketAddr) {
    if amqp.ip().is_unspecified() {
        amqp.set_ip(node.addr().ip());
    }
    node.advertise_amqp(amqp);
}

impl Cluster {
    async fn shutdown(self) {
        self.learner.abort();
        self.node.shutdown().await;
    }
}

/// Starts the cluster node when `cluster_listen` and `cluster_seeds` are set, and opens its
/// queue group (`QUEUE_GROUP`), the one that carries the server's quorum queues: its groups
/// live under `<data dir>/raft`.
async fn start_cluster(config: &Config) -> anyhow::Result<Option<Cluster>> {
    let (Some(listen), Some(seeds)) = (&config.cluster_listen, &config.cluster_seeds) else {
        return Ok(None);
    };
    let mut node_config = wharf_cluster::NodeConfig::from_seeds(
        listen,
        seeds,
        config.data_dir.join("raft"),
        config.cluster_id,
    )?;
    node_config.message_memory_bytes = config.message_memory_bytes;
    let node = wharf_cluster::Node::start(node_config)
        .await
        .context("starting the cluster node")?;
    tracing::info!(node = node.id(), listen = %node.addr(), "cluster node listening");
    let handle = match node.group(wharf_cluster::QUEUE_GROUP).await {
        Ok(h) => h,
        Err(e) => {
            node.shutdown().await;
            return Err(e).context("opening the quorum queues' group");
        }
    };
    let group = wharf_cluster::QueueGroup {
        node: handle.node,
        raft: handle.raft,
        machine: handle.machine,
        leaders: wharf_cluster::LeaderAddrs::default(),
        peers: std::sync::Arc::new(wharf_cluster::SeedPeers {
            seeds: node.seeds(),
        }),
    };
    let metadata = match node.metadata().await {
        Ok(m) => m,
        Err(e) => {
            node.shutdown().await;
            return Err(e).context("opening the metadata group");
        }
    };
    let learner = group.learn_leader_addresses();
    Ok(Some(Cluster {
        node,
        group,
        metadata,
        learner,
    }))
}

/// Installs the SIGINT and SIGTERM handlers now; the future ends at the first signal.
#[cfg(unix)]
fn signals() -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        Ok(())
    })
}

#[cfg(not(unix))]
fn signals() -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    Ok(async { tokio::signal::ctrl_c().await.context("waiting for Ctrl-C") })
}
