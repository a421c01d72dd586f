//! [`Server::start`]: recovery first (S-DUR-5), then the broker task, the listeners, the
//! resource monitor and the management API, handed back as a [`ServerHandle`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::info;

use wharf_base::limits;
use wharf_clock::{Clock, Stopwatch};
use wharf_store::{LogHealth, RecoverySummary, StoreError};

use crate::alarm;
use crate::auth;
use crate::connection;
use crate::core::{self, CoreMsg};
use crate::error::ServerError;
use crate::handle::ServerHandle;
use crate::listener::{accept_loops, bind_plain, bind_tls, tls_accept_loop};
use crate::metrics;
use crate::mgmt;
use crate::recovery::{DowntimeDeaths, LiveCounts, Recovered, recover};
use crate::server_config::ServerConfig;

/// The server entry point.
#[derive(Debug)]
pub struct Server;

/// Sets its flag when dropped.
struct DoneGuard(watch::Sender<bool>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

impl Server {
    /// Recovers the store in `config.data_dir`, then listens on `config.bind`. Clients are
    /// served only after recovery (S-DUR-5).
    ///
    /// # Errors
    /// The store cannot be opened (corrupt log, unusable directory); the address is taken.
    pub async fn start(mut config: ServerConfig) -> Result<ServerHandle, ServerError> {
        let segment_bytes =
            crate::volume::fit_to_volume(&mut config).map_err(|source| StoreError::Io {
                path: config.data_dir.clone(),
                source,
            })?;
        let clock: Arc<dyn Clock> = match &config.clock_control {
            Some(manual) => Arc::new(manual.clone()),
            None => config.clock.clone(),
        };
        let stopwatch = Stopwatch::start();
        let started_at_ms = clock.now_ms();
        let Recovered {
            store,
            broker,
            summary,
            events,
            downtime,
        } = recover(&config, segment_bytes, clock.as_ref()).await?;
        let registry = Arc::new(registry_for(&config));
        let alarms = Arc::new(alarm::Alarms::default());
        let log_health = LogHealth::of(&store);
        let live = LiveCounts::of(&broker);
        let spooler = Arc::new(connection::LogSpooler(store.body_spooler()));
        let core = broker_task(&config, (broker, store), clock.clone(), &registry, events)?;
        let recovery_ms = stopwatch.elapsed_ms();

        let (listeners, addrs, tls_listener) = bind_amqp(&config).await?;
        let local_addr = addrs[0];
        if let Some(hook) = &config.on_listening {
            (hook.0)(local_addr);
        }
        log_listening(
            &config,
            (&addrs, tls_listener.as_ref().map(|(_, a, _)| *a)),
            recovery_ms,
            &summary,
            &live,
            &downtime,
        );
        let (core_tx, core_task, core_done) = spawn_core(core);
        let (stop_accepting, stop_rx) = watch::channel(false);
        let (alive, connections_gone) = mpsc::channel(1);
        let ctx = conn_ctx(
            &config,
            core_tx.clone(),
            registry.clone(),
            alive,
            &alarms,
            spooler,
        );
        let (tls_local_addr, tls_accept_task) = tls_listener
            .map(|(listener, addr, acceptor)| {
                let loop_ = tls_accept_loop(listener, acceptor, ctx.clone(), stop_rx.clone());
                (addr, tokio::spawn(loop_))
            })
            .unzip();
        let listeners = listeners.into_iter().map(|(l, _)| l).collect();
        let door = connection::Door::new(ctx.clone());
        let relay_door = relay_door(&config, &ctx);
        let accept_task = tokio::spawn(accept_loops(listeners, ctx, stop_rx.clone()));
        let (monitor, monitor_task) = start_monitor(&config, log_health, alarms.clone());
        let metrics = metrics_source(&config, &core_tx, &alarms, (recovery_ms, started_at_ms));
        let prometheus = start_prometheus(&config, &metrics, &stop_rx).await?;
        let (mgmt, mgmt_tls_addr) = start_mgmt(
            &config,
            MgmtParts {
                registry: registry.clone(),
                metrics,
                amqp_addr: local_addr,
                amqps_addr: tls_local_addr,
                resources: monitor.clone(),
                prometheus_addr: prometheus.as_ref().map(|(a, _)| *a),
            },
            core_tx.clone(),
            stop_rx,
        )
        .await?;
        Ok(ServerHandle {
            local_addr,
            clock_control: config.clock_control.clone(),
            core: core_tx,
            stop_accepting,
            accept_task,
            tls_local_addr,
            tls_accept_task,
            registry,
            core_task,
            core_done,
            connections_gone,
            alarms,
            monitor: monitor.check,
            monitor_task,
            mgmt,
            mgmt_tls_addr,
            prometheus,
            door,
            relay_door,
        })
    }
}

/// The AMQP listeners (every address of `bind`, those of `bind_if_available` that can be
/// bound; at least one) and the AMQPS one when configured.
async fn bind_amqp(
    config: &ServerConfig,
) -> Result<
    (
        Vec<(TcpListener, SocketAddr)>,
        Vec<SocketAddr>,
        Option<(TcpListener, SocketAddr, tokio_rustls::TlsAcceptor)>,
    ),
    ServerError,
> {
    let listeners = bind_plain(&config.bind, &config.bind_if_available).await?;
    let addrs: Vec<SocketAddr> = listeners.iter().map(|(_, a)| *a).collect();
    if addrs.is_empty() {
        return Err(ServerError::Bind {
            addr: config.bind.clone(),
            source: std::io::Error::other("no address to listen on"),
        });
    }
    let tls_listener = match &config.tls {
        Some(t) => Some(bind_tls(t).await?),
        None => None,
    };
    Ok((listeners, addrs, tls_listener))
}

/// The one recovery summary line (STYLE 3.5): what came back, what died while the broker was
/// down (S-DUR-5), how long it took in real time.
fn log_listening(
    config: &ServerConfig,
    (addrs, tls_addr): (&[SocketAddr], Option<SocketAddr>),
    recovery_ms: u64,
    summary: &RecoverySummary,
    live: &LiveCounts,
    downtime: &DowntimeDeaths,
) {
    let (addr, also) = match addrs {
        [first, rest @ ..] => (Some(first), rest),
        [] => (None, addrs),
    };
    info!(
        addr = %addr.map_or_else(String::new, ToString::to_string),
        also = ?also,
        ?tls_addr,
        data_dir = %config.data_dir.display(),
        recovery_ms,
        records = summary.records,
        queues = live.queues,
        messages = live.messages,
        expired_in_downtime = downtime.died,
        dead_lettered = downtime.dead_lettered,
        dropped = downtime.died - downtime.dead_lettered,
        torn_tail_bytes = summary.torn_tail_bytes,
        salvaged_records = summary.salvaged_records,
        "wharf listening"
    );
}

/// What every connection of the server needs.
fn conn_ctx(
    config: &ServerConfig,
    core: mpsc::Sender<CoreMsg>,
    users: Arc<auth::UserRegistry>,
    alive: mpsc::Sender<()>,
    alarms: &alarm::Alarms,
    spooler: Arc<connection::LogSpooler>,
) -> connection::ConnCtx {
    connection::ConnCtx {
        core,
        users,
        next_id: Arc::new(AtomicU64::new(1)),
        heartbeat_secs: config.heartbeat_secs,
        alive,
        alarm: alarms.watch(),
        limits: connection::ConnLimits::from_config(config),
        open_connections: Arc::default(),
        spooler,
        trusted: false,
        forward: connection::ForwardCtx::of(config).map(Arc::new),
    }
}

/// S-CLU-70: where the other members' relayed connections come in, when this server is a
/// member with a relay: a door of its own whose connections skip the password check.
fn relay_door(config: &ServerConfig, ctx: &connection::ConnCtx) -> Option<Arc<connection::Door>> {
    let relay = config.relay.as_ref()?;
    config.cluster.as_ref()?;
    let mut trusted = ctx.clone();
    trusted.trusted = true;
    trusted.forward = None;
    let door = Arc::new(connection::Door::new(trusted));
    let serving = Arc::clone(&door);
    relay.0.set_door(Arc::new(move || serving.open()));
    Some(door)
}

/// The broker task over the recovered broker and store, with recovery's events logged, and
/// a member of the quorum queues' group when `config.cluster` says so (S-CLU-10).
fn broker_task(
    config: &ServerConfig,
    (broker, store): (wharf_broker::Broker, wharf_store::Store),
    clock: Arc<dyn Clock>,
    registry: &Arc<auth::UserRegistry>,
    events: Vec<wharf_broker::Event>,
) -> Result<core::Core, StoreError> {
    let mut core = core::Core::new(broker, store, clock);
    core.set_registry(registry.clone());
    core.set_message_memory_bytes(config.message_memory_bytes);
    core.set_inline_store(config.inline_store);
    core.set_io_latency(config.inline_store_latency.clone());
    core.log_startup(events)?;
    if let Some(group) = config.cluster.clone() {
        core.set_replica(group);
        if let Some(meta) = config.metadata.clone() {
            let (vhosts, users) = (config.vhosts.clone(), config.users.clone());
            core.set_metadata(
                meta,
                Box::new(move |broker, now_ms| {
                    crate::recovery::put_configured(broker, (&vhosts, &users), now_ms)
                        .unwrap_or_else(|e| {
                            tracing::error!(error = %e, "the configured vhosts and users do not fit the cluster's definitions");
                            Vec::new()
                        })
                }),
            );
        }
    }
    Ok(core)
}

/// Spawns the broker task: (its inbox, its task, a flag set once it ended).
fn spawn_core(
    core: core::Core,
) -> (
    mpsc::Sender<CoreMsg>,
    JoinHandle<Result<(), StoreError>>,
    watch::Receiver<bool>,
) {
    let (core_tx, core_rx) = mpsc::channel(limits::CORE_QUEUE_BATCHES_MAX);
    let (core_done_tx, core_done) = watch::channel(false);
    let core_task = tokio::spawn(async move {
        // Tell the handle when the broker task ends, however it ends (a panic included: the
        // guard runs on unwind), so the binary exits instead of serving nothing.
        let _done = DoneGuard(core_done_tx);
        core.run(core_rx).await
    });
    (core_tx, core_task, core_done)
}

/// What the management API takes from the rest of the start.
struct MgmtParts {
    registry: Arc<auth::UserRegistry>,
    metrics: metrics::MetricsSource,
    amqp_addr: SocketAddr,
    amqps_addr: Option<SocketAddr>,
    resources: alarm::ResourceControl,
    prometheus_addr: Option<SocketAddr>,
}

/// Starts the management API when `mgmt_bind` is set: (its address and task, its HTTPS
/// address).
async fn start_mgmt(
    config: &ServerConfig,
    parts: MgmtParts,
    core: mpsc::Sender<CoreMsg>,
    stop: watch::Receiver<bool>,
) -> Result<(Option<(SocketAddr, JoinHandle<()>)>, Option<SocketAddr>), ServerError> {
    let Some(bind) = &config.mgmt_bind else {
        return Ok((None, None));
    };
    let mgmt_config = mgmt::MgmtConfig {
        bind: bind.clone(),
        users: parts.registry,
        metrics: parts.metrics,
        environment: mgmt::environment(config),
        amqp_addr: parts.amqp_addr,
        amqps_addr: parts.amqps_addr,
        prometheus_addr: parts.prometheus_addr,
        resources: parts.resources,
        clock: config.clock_control.clone(),
        tls: config.mgmt_tls.clone(),
        data_dir: Some(config.data_dir.clone()),
    };
    let m = mgmt::serve(mgmt_config, core, stop).await?;
    Ok((Some((m.addr, m.task)), m.tls_addr))
}

/// Starts the Prometheus listener when `prometheus_bind` is set: its address and task.
async fn start_prometheus(
    config: &ServerConfig,
    source: &metrics::MetricsSource,
    stop: &watch::Receiver<bool>,
) -> Result<Option<(SocketAddr, JoinHandle<()>)>, ServerError> {
    match &config.prometheus_bind {
        Some(bind) => Ok(Some(
            metrics::serve(bind, source.clone(), stop.clone()).await?,
        )),
        None => Ok(None),
    }
}

/// Where the metrics (and the management API's node figures) read: in a cluster, the node's
/// and the cluster's names are the group's (S-CLU-40), and the group's Raft is read too.
fn metrics_source(
    config: &ServerConfig,
    core: &mpsc::Sender<CoreMsg>,
    alarms: &Arc<alarm::Alarms>,
    (recovery_ms, started_at_ms): (u64, u64),
) -> metrics::MetricsSource {
    let (node, cluster) = config.cluster.as_ref().map_or_else(
        || (mgmt::NODE.to_owned(), mgmt::NODE.to_owned()),
        |g| (g.node_name(), g.cluster_name()),
    );
    metrics::MetricsSource {
        core: core.clone(),
        alarms: Some(alarms.clone()),
        node,
        cluster,
        group: config.cluster.clone(),
        recovery_ms,
        started_at_ms,
    }
}

/// Spawns the resource monitor (see `alarm`) over the configured probe and limits.
fn start_monitor(
    config: &ServerConfig,
    wal: LogHealth,
    alarms: Arc<alarm::Alarms>,
) -> (alarm::ResourceControl, JoinHandle<()>) {
    let probe = config.resource_probe.clone().unwrap_or_else(|| {
        Arc::new(alarm::SystemProbe {
            dir: config.data_dir.clone(),
        })
    });
    // A fraction is of the RAM, or of the cgroup v2 limit when lower.
    let memory_bytes = alarm::memory_available_bytes();
    let limits = alarm::Limits::resolve(
        config.memory_high_watermark,
        alarm::DiskLimit::Bytes(config.disk_free_limit_bytes),
        memory_bytes,
    );
    alarms.set_limits(limits);
    info!(
        disk_free_limit_bytes = limits.thresholds.disk_free_limit_bytes,
        memory_limit_bytes = limits.thresholds.memory_limit_bytes,
        "resource alarms armed"
    );
    let monitor = alarm::Monitor {
        probe,
        alarms: alarms.clone(),
        wal,
        probe_failed: false,
    };
    let (tx, rx) = mpsc::channel(8);
    // S-DISK-1: a check at each allocation of the store, not only once a second. A full
    // request queue already holds a check to come.
    let wake = tx.downgrade();
    monitor.wal.on_allocation(move || {
        if let Some(tx) = wake.upgrade() {
            let _ = tx.try_send(oneshot::channel().0);
        }
    });
    let control = alarm::ResourceControl {
        alarms,
        check: tx,
        memory_bytes,
    };
    (control, tokio::spawn(alarm::monitor(monitor, rx)))
}

/// The registry of a server: `loopback_users` plus every configured `loopback_only` user may
/// log in from loopback only (filled from the broker by the broker task).
fn registry_for(config: &ServerConfig) -> auth::UserRegistry {
    let loopback_only = config
        .users
        .0
        .iter()
        .filter(|u| u.loopback_only)
        .map(|u| u.name.clone());
    auth::UserRegistry::new(config.loopback_users.iter().cloned().chain(loopback_only))
}
