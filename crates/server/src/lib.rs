//! The server layer: tokio glue from sockets to the broker. It may use every other layer but
//! holds no business rules (a TTL or routing decision found here is a bug).
//!
//! # Layout
//!
//! - [`Server::start`] opens the store (recovery), binds the listener and spawns the broker
//!   task and the accept loop; it returns a [`ServerHandle`].
//! - `core`: the broker task, sole owner of the `Broker` and the `Store`; batches commands,
//!   one `store.log` per batch, the expiry timer. Every frame it emits is released to the
//!   socket only once what was logged before it is durable (S-DUR-3/4, S-DLX-7).
//! - `connection`: one task per client: handshake, frame decoding, channel states, methods to
//!   broker commands.
//! - `outbox`: a connection's outgoing buffer, its release gate (frames sealed with a log
//!   ticket, written once it is durable) and the writer task (one write per batch).
//! - [`alarm`]: disk and memory alarms; a connection that publishes while one is on stops
//!   being read (RabbitMQ's resource alarms).
//! - [`admin`]: what the management API (`crate::mgmt`) asks the broker task; the listener
//!   starts with the server when [`ServerConfig::mgmt_bind`] is set.
//! - [`convert`]: wire values <-> broker values, broker errors -> AMQP closes (S-ERR-1).
//! - [`auth`]: password hashes (RabbitMQ's format), the shared [`auth::UserRegistry`] that
//!   connections and the management API log in through, and the permissions each command
//!   needs (checked by the connection before a method becomes a broker command).
//! - [`tls`]: the AMQPS listener's `rustls::ServerConfig` (reusable by the management API).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), wharf_server::ServerError> {
//! let config = wharf_server::ServerConfig::new("127.0.0.1:0", "/tmp/wharf-data");
//! let server = wharf_server::Server::start(config).await?;
//! println!("connect to {}", server.amqp_url());
//! server.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod alarm;
pub mod auth;
pub mod clock_control;
mod connection;
pub mod convert;
mod core;
mod outbox;
pub mod tls;

pub mod config;
pub mod mgmt;
pub mod testing;

pub(crate) use core::CoreMsg;

pub use clock_control::ClockControlError;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use wharf_broker::{Broker, BrokerError, Command, DeathFate, Effect, Outcome};
use wharf_clock::{Clock, ManualClock, Stopwatch, SystemClock};
use wharf_store::{Store, StoreConfig, StoreError};
use wharf_wal::{FileStorage, Storage, WalConfig};

/// Bounds and waits of the server layer, kept in `wharf_base::limits` with the others (these
/// names stay for the code that uses them).
pub mod limits_server {
    pub use wharf_base::limits::{
        ALARM_HYSTERESIS_PERCENT, CLOSE_OK_WAIT, CORE_QUEUE_BATCHES_MAX,
        GATHERING_BYTES_PER_CONNECTION_MAX, HANDSHAKE_WAIT, HEARTBEAT_SECS_DEFAULT,
        RESOURCE_CHECK_INTERVAL,
    };
}

/// Errors of starting or stopping the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be opened or closed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A configured vhost could not be created.
    #[error("cannot create vhost '{name}': {reason}")]
    Vhost {
        /// The vhost.
        name: String,
        /// Why.
        reason: String,
    },
    /// A configured user could not be put into the broker.
    #[error("cannot create user '{name}': {reason}")]
    User {
        /// The user.
        name: String,
        /// Why.
        reason: String,
    },
    /// The TLS certificate or key could not be loaded.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A task of the server failed.
    #[error("server task failed: {0}")]
    Task(String),
}

/// A user from the configuration: put into the broker at start (its password hashed; the
/// log never holds it in clear) with full permissions on its vhosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Name.
    pub name: String,
    /// Password (plain in the configuration only; hashed before it reaches the broker).
    pub password: String,
    /// Only from a loopback address (RabbitMQ's rule for `guest`).
    pub loopback_only: bool,
    /// The vhosts this user gets full permissions on at start; `"*"` stands for every vhost
    /// that exists then.
    pub vhosts: Vec<String>,
    /// Tags (`administrator`, `management`, `monitoring`, `policymaker`).
    pub tags: Vec<String>,
    /// Put only on a broker whose log never defined a user (RabbitMQ's default user on a
    /// fresh node): once an operator deleted it, it stays deleted.
    pub initial_only: bool,
}

/// The users of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Users(pub Vec<User>);

impl Default for Users {
    /// `guest`/`guest`, loopback only, as RabbitMQ ships.
    fn default() -> Self {
        Users(vec![User {
            name: "guest".to_owned(),
            password: "guest".to_owned(),
            loopback_only: true,
            vhosts: vec!["/".to_owned()],
            tags: vec!["administrator".to_owned()],
            initial_only: true,
        }])
    }
}

impl Users {
    /// `None` if `name`/`password` may log in from `peer` by this list alone, else RabbitMQ's
    /// refusal text. A running server checks its [`auth::UserRegistry`] instead.
    pub fn check(&self, name: &str, password: &str, peer: SocketAddr) -> Option<String> {
        let refused = || {
            Some(
                "Login was refused using authentication mechanism PLAIN. For details see the \
                 broker logfile."
                    .to_owned(),
            )
        };
        let Some(user) = self.0.iter().find(|u| u.name == name) else {
            return refused();
        };
        if user.password != password {
            return refused();
        }
        if user.loopback_only && !is_loopback(peer.ip()) {
            return Some(format!("user '{name}' can only connect via localhost"));
        }
        None
    }

    /// Whether `name` may open `vhost` (its list names it, or holds `"*"`).
    #[must_use]
    pub fn may_open(&self, name: &str, vhost: &str) -> bool {
        self.0
            .iter()
            .find(|u| u.name == name)
            .is_some_and(|u| u.vhosts.iter().any(|v| v == "*" || v == vhost))
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on, `host:port` (port 0 picks a free one).
    pub bind: String,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The clock (`SystemClock`; a `ManualClock` in tests).
    pub clock: Arc<dyn Clock>,
    /// Heartbeat interval proposed to clients, seconds (0 = none).
    pub heartbeat_secs: u16,
    /// Who may log in.
    pub users: Users,
    /// Start despite corrupt records in the middle of the log (S-DUR-7).
    pub salvage: bool,
    /// Vhosts created at start if missing (before the listener opens).
    pub vhosts: Vec<String>,
    /// The disk alarm goes on when the data directory's file system has less free space.
    pub disk_free_limit_bytes: u64,
    /// The memory alarm goes on when the process uses this much (see `alarm`).
    pub memory_high_watermark: alarm::MemoryLimit,
    /// Where free disk and memory use are read (`None`: the machine, [`alarm::SystemProbe`]).
    pub resource_probe: Option<Arc<dyn alarm::ResourceProbe>>,
    /// Open connections at most; one more is refused at `connection.open` (530).
    pub connection_max: u32,
    /// `channel_max` offered in `connection.tune` (at most
    /// `limits::CHANNELS_PER_CONNECTION_MAX`).
    pub channel_max: u16,
    /// `frame_max` offered in `connection.tune` (between `limits::FRAME_BYTES_MIN` and
    /// `limits::FRAME_BYTES_MAX`).
    pub frame_max: u32,
    /// Largest message body accepted (at most `limits::MESSAGE_BODY_BYTES_MAX`).
    pub message_bytes_max: u32,
    /// Unacknowledged deliveries one channel may hold, prefetch 0 included (at most
    /// `limits::UNACKED_PER_CHANNEL_MAX`).
    pub unacked_per_channel_max: u32,
    /// Where the management HTTP API listens (`host:port`, port 0 picks one); `None`: not
    /// served.
    pub mgmt_bind: Option<String>,
    /// RabbitMQ's `loopback_users`: these names may log in from a loopback address only
    /// (besides every `User` with `loopback_only`).
    pub loopback_users: Vec<String>,
    /// The AMQPS listener, if any.
    pub tls: Option<tls::TlsListener>,
    /// The management API over HTTPS too (besides `mgmt_bind`), if any; served only when
    /// `mgmt_bind` is set.
    pub mgmt_tls: Option<tls::TlsListener>,
    /// The floor of the periodic checkpoint threshold: a checkpoint is taken once the log
    /// written since the last one exceeds the larger of this and the last checkpoint's size
    /// (`store::CheckpointTrigger`); default `limits::CHECKPOINT_LOG_BYTES_MIN`.
    pub checkpoint_log_bytes_min: u64,
    /// Memory for the content of queued messages: beyond it the oldest persistent messages
    /// of durable queues are paged out once durable and read back when delivered (DESIGN
    /// "Memory"); default `limits::MESSAGE_MEMORY_BYTES`, 0 keeps none in memory.
    pub message_memory_bytes: u64,
    /// The disk the log lives on: `None` for real files in `data_dir`; `Some` for another
    /// [`Storage`], e.g. a `wal::SimStorage` that can lose power (`crate::testing`).
    pub storage: Option<Arc<dyn Storage>>,
    /// Clock control (`--test-clock`): when set, the server runs on this clock (the `clock`
    /// field is then ignored) and [`ServerHandle::clock_advance`] and friends may move it.
    /// `None` (the default): they are refused.
    pub clock_control: Option<ManualClock>,
}

impl ServerConfig {
    /// Defaults: system clock, 60 s heartbeats, guest/guest from loopback.
    pub fn new(bind: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            bind: bind.into(),
            data_dir: data_dir.into(),
            clock: Arc::new(SystemClock),
            heartbeat_secs: limits_server::HEARTBEAT_SECS_DEFAULT,
            users: Users::default(),
            salvage: false,
            vhosts: Vec::new(),
            disk_free_limit_bytes: wharf_base::limits::DISK_FREE_LIMIT_BYTES_DEFAULT,
            memory_high_watermark: alarm::MemoryLimit::Fraction(
                wharf_base::limits::MEMORY_HIGH_WATERMARK_DEFAULT,
            ),
            resource_probe: None,
            connection_max: wharf_base::limits::CONNECTIONS_MAX,
            channel_max: wharf_base::limits::CHANNELS_PER_CONNECTION_MAX,
            frame_max: wharf_base::limits::FRAME_BYTES_MAX,
            message_bytes_max: wharf_base::limits::MESSAGE_BODY_BYTES_MAX,
            unacked_per_channel_max: wharf_base::limits::UNACKED_PER_CHANNEL_MAX,
            mgmt_bind: None,
            loopback_users: vec!["guest".to_owned()],
            tls: None,
            mgmt_tls: None,
            checkpoint_log_bytes_min: wharf_base::limits::CHECKPOINT_LOG_BYTES_MIN,
            message_memory_bytes: wharf_base::limits::MESSAGE_MEMORY_BYTES,
            storage: None,
            clock_control: None,
        }
    }
}

/// The server entry point.
#[derive(Debug)]
pub struct Server;

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    /// The manual clock that clock control moves, when enabled.
    clock_control: Option<ManualClock>,
    core: mpsc::Sender<core::CoreMsg>,
    stop_accepting: watch::Sender<bool>,
    accept_task: JoinHandle<()>,
    tls_local_addr: Option<SocketAddr>,
    tls_accept_task: Option<JoinHandle<()>>,
    registry: Arc<auth::UserRegistry>,
    core_task: JoinHandle<Result<(), StoreError>>,
    core_done: watch::Receiver<bool>,
    /// Yields `None` once every connection task (and the accept loop) has ended.
    connections_gone: mpsc::Receiver<()>,
    /// The resource alarms (disk, memory, raised by hand).
    alarms: Arc<alarm::Alarms>,
    /// Asks the resource monitor for a check now.
    monitor: mpsc::Sender<oneshot::Sender<()>>,
    monitor_task: JoinHandle<()>,
    /// The management API's address and task, when served.
    mgmt: Option<(SocketAddr, JoinHandle<()>)>,
    /// The management API's HTTPS address, when served.
    mgmt_tls_addr: Option<SocketAddr>,
}

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
    pub async fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
        let clock: Arc<dyn Clock> = match &config.clock_control {
            Some(manual) => Arc::new(manual.clone()),
            None => config.clock.clone(),
        };
        let stopwatch = Stopwatch::start();
        let Recovered {
            store,
            broker,
            summary,
            events,
            downtime,
        } = recover(&config, clock.as_ref()).await?;
        let registry = Arc::new(registry_for(&config));
        let alarms = Arc::new(alarm::Alarms::default());
        let wal = store.wal_appender();
        let live = LiveCounts::of(&broker);
        let mut core = core::Core::new(broker, store, clock.clone());
        core.set_registry(registry.clone());
        core.set_message_memory_bytes(config.message_memory_bytes);
        core.log_startup(events)?;
        let recovery_ms = stopwatch.elapsed_ms();

        let (listener, local_addr) = bind_plain(&config.bind).await?;
        let tls_listener = match &config.tls {
            Some(t) => Some(bind_tls(t).await?),
            None => None,
        };
        // The one recovery summary line (STYLE 3.5): what came back, what died while the
        // broker was down (S-DUR-5), how long it took in real time.
        info!(
            addr = %local_addr,
            tls_addr = ?tls_listener.as_ref().map(|(_, a, _)| *a),
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

        let (core_tx, core_rx) = mpsc::channel(limits_server::CORE_QUEUE_BATCHES_MAX);
        let (core_done_tx, core_done) = watch::channel(false);
        let core_task = tokio::spawn(async move {
            // Tell the handle when the broker task ends, however it ends (a panic included:
            // the guard runs on unwind), so the binary exits instead of serving nothing.
            let _done = DoneGuard(core_done_tx);
            core.run(core_rx).await
        });
        let (stop_accepting, stop_rx) = watch::channel(false);
        let (alive, connections_gone) = mpsc::channel(1);
        let ctx = connection::ConnCtx {
            core: core_tx.clone(),
            users: registry.clone(),
            next_id: Arc::new(AtomicU64::new(1)),
            heartbeat_secs: config.heartbeat_secs,
            alive,
            alarm: alarms.subscribe(),
            limits: connection::ConnLimits::from_config(&config),
            open_connections: Arc::default(),
        };
        let (tls_local_addr, tls_accept_task) = tls_listener
            .map(|(listener, addr, acceptor)| {
                let loop_ = tls_accept_loop(listener, acceptor, ctx.clone(), stop_rx.clone());
                (addr, tokio::spawn(loop_))
            })
            .unzip();
        let accept_task = tokio::spawn(accept_loop(listener, ctx, stop_rx.clone()));
        let (monitor, monitor_task) = start_monitor(&config, wal, alarms.clone());
        let (mgmt, mgmt_tls_addr) = start_mgmt(
            &config,
            MgmtParts {
                registry: registry.clone(),
                recovery_ms,
                amqp_addr: local_addr,
                alarms: alarms.clone(),
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
            monitor,
            monitor_task,
            mgmt,
            mgmt_tls_addr,
        })
    }
}

/// What the management API takes from the rest of the start.
struct MgmtParts {
    registry: Arc<auth::UserRegistry>,
    recovery_ms: u64,
    amqp_addr: SocketAddr,
    alarms: Arc<alarm::Alarms>,
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
    let mgmt_config = crate::mgmt::MgmtConfig {
        bind: bind.clone(),
        users: parts.registry,
        recovery_ms: parts.recovery_ms,
        amqp_addr: parts.amqp_addr,
        clock: config.clock_control.clone(),
        tls: config.mgmt_tls.clone(),
        alarms: Some(parts.alarms),
    };
    let m = crate::mgmt::serve(mgmt_config, core, stop).await?;
    Ok((Some((m.addr, m.task)), m.tls_addr))
}

/// Spawns the resource monitor (see `alarm`) over the configured probe and limits.
fn start_monitor(
    config: &ServerConfig,
    wal: wharf_wal::Appender,
    alarms: Arc<alarm::Alarms>,
) -> (mpsc::Sender<oneshot::Sender<()>>, JoinHandle<()>) {
    let probe = config.resource_probe.clone().unwrap_or_else(|| {
        Arc::new(alarm::SystemProbe {
            dir: config.data_dir.clone(),
        })
    });
    let thresholds = alarm::Thresholds {
        disk_free_limit_bytes: config.disk_free_limit_bytes,
        // A fraction is of the RAM, or of the cgroup v2 limit when lower.
        memory_limit_bytes: config
            .memory_high_watermark
            .bytes(alarm::memory_available_bytes()),
    };
    info!(
        disk_free_limit_bytes = thresholds.disk_free_limit_bytes,
        memory_limit_bytes = thresholds.memory_limit_bytes,
        "resource alarms armed"
    );
    let monitor = alarm::Monitor {
        probe,
        thresholds,
        alarms,
        wal,
        probe_failed: false,
    };
    let (tx, rx) = mpsc::channel(8);
    (tx, tokio::spawn(alarm::monitor(monitor, rx)))
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

/// Puts the configured users into the broker (their passwords hashed), with full
/// permissions on their vhosts, as configured vhosts are created: before any client can
/// connect. A user whose stored hash already matches its configured password and tags is
/// left alone (no new salt, no log record at every start); the default user
/// (`initial_only`) only on a broker whose log never defined a user.
fn put_configured_users(
    broker: &mut Broker,
    config: &ServerConfig,
    now_ms: u64,
) -> Result<Vec<wharf_broker::Event>, ServerError> {
    let mut events = Vec::new();
    let never_defined = !broker.users_ever_defined();
    for u in &config.users.0 {
        if u.initial_only && !never_defined {
            continue;
        }
        let failed = |reason: String| ServerError::User {
            name: u.name.clone(),
            reason,
        };
        let unchanged = broker.user(&u.name).is_some_and(|stored| {
            stored.tags == u.tags && auth::verify_password(&stored.password_hash, &u.password)
        });
        let mut cmds = Vec::new();
        if !unchanged {
            cmds.push(Command::UserPut {
                name: u.name.clone(),
                password_hash: auth::hash_password(&u.password).map_err(failed)?,
                tags: u.tags.clone(),
            });
        }
        let vhosts: Vec<String> = if u.vhosts.iter().any(|v| v == "*") {
            broker.vhost_names()
        } else {
            u.vhosts.clone()
        };
        for vhost in vhosts {
            if !broker.vhost_names().contains(&vhost) {
                warn!(user = %u.name, %vhost, "configured vhost of a user does not exist; skipped");
                continue;
            }
            cmds.push(Command::PermissionSet {
                user: u.name.clone(),
                vhost,
                configure: ".*".to_owned(),
                write: ".*".to_owned(),
                read: ".*".to_owned(),
            });
        }
        for cmd in cmds {
            let out = broker
                .handle(cmd, now_ms)
                .map_err(|e: BrokerError| failed(e.text))?;
            events.extend(out.events);
        }
    }
    Ok(events)
}

async fn bind_tls(
    t: &tls::TlsListener,
) -> Result<(TcpListener, SocketAddr, tokio_rustls::TlsAcceptor), ServerError> {
    let config = tls::server_config(&t.cert_file, &t.key_file)?;
    let bind_error = |source| ServerError::Bind {
        addr: t.bind.clone(),
        source,
    };
    let listener = TcpListener::bind(&t.bind).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr, tokio_rustls::TlsAcceptor::from(config)))
}

/// The AMQPS listener: each accepted socket does its TLS handshake (bounded by
/// `HANDSHAKE_WAIT`) in its own task, then is served like a plain one.
async fn tls_accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    ctx: connection::ConnCtx,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                    let acceptor = acceptor.clone();
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let handshake = tokio::time::timeout(
                            limits_server::HANDSHAKE_WAIT,
                            acceptor.accept(stream),
                        );
                        match handshake.await {
                            Ok(Ok(tls)) => connection::serve_stream(tls, peer, id, ctx).await,
                            Ok(Err(e)) => info!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => info!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Binds the AMQP listener on `bind` (`host:port`; port 0 picks a free one).
async fn bind_plain(bind: &str) -> Result<(TcpListener, SocketAddr), ServerError> {
    let bind_error = |source| ServerError::Bind {
        addr: bind.to_owned(),
        source,
    };
    let listener = TcpListener::bind(bind).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr))
}

/// What recovery hands the broker task: the store and the broker rebuilt from it, with the
/// events logged before serving (downtime expiries, configured vhosts and users).
struct Recovered {
    store: Store,
    broker: Broker,
    summary: wharf_store::RecoverySummary,
    events: Vec<wharf_broker::Event>,
    downtime: DowntimeDeaths,
}

/// Opens the store (recovery, S-DUR-5), expires what died while the broker was down, and puts
/// the configured vhosts and users: everything that must hold before any client connects.
async fn recover(config: &ServerConfig, clock: &dyn Clock) -> Result<Recovered, ServerError> {
    let store_config = StoreConfig {
        dir: config.data_dir.clone(),
        salvage: config.salvage,
    };
    let storage = config
        .storage
        .clone()
        .unwrap_or_else(|| Arc::new(FileStorage));
    let (mut store, mut broker, summary) = tokio::task::spawn_blocking(move || {
        Store::open_with(&store_config, storage, &WalConfig::default())
    })
    .await
    .map_err(|e| ServerError::Task(e.to_string()))??;
    store.set_checkpoint_trigger(wharf_store::CheckpointTrigger {
        enabled: true,
        log_bytes_min: config.checkpoint_log_bytes_min,
    });
    broker.set_unacked_per_channel_max(config.unacked_per_channel_max);
    let mut recovered = broker.recovered(clock.now_ms());
    let downtime = DowntimeDeaths::of(&recovered);
    // Configured vhosts exist before any client can connect; existing ones are kept
    // (VhostAdd of a known vhost changes nothing and logs nothing).
    for vhost in &config.vhosts {
        let added = broker
            .handle(
                Command::VhostAdd {
                    vhost: vhost.clone(),
                },
                clock.now_ms(),
            )
            .map_err(|e| ServerError::Vhost {
                name: vhost.clone(),
                reason: e.to_string(),
            })?;
        recovered.events.extend(added.events);
    }
    recovered
        .events
        .extend(put_configured_users(&mut broker, config, clock.now_ms())?);
    Ok(Recovered {
        store,
        broker,
        summary,
        events: recovered.events,
        downtime,
    })
}

/// What the broker holds after recovery, for the start line.
struct LiveCounts {
    queues: usize,
    messages: u64,
}

impl LiveCounts {
    fn of(broker: &Broker) -> Self {
        let mut counts = LiveCounts {
            queues: 0,
            messages: 0,
        };
        for vhost in broker.vhost_names() {
            for q in broker.queues(&vhost) {
                counts.queues += 1;
                counts.messages = counts.messages.saturating_add(q.ready);
            }
        }
        counts
    }
}

/// Messages whose deadline passed while the broker was down, from `recovered(now)`'s outcome
/// (S-DUR-5): how many died, and how many of them reached a dead-letter queue.
struct DowntimeDeaths {
    died: u64,
    dead_lettered: u64,
}

impl DowntimeDeaths {
    fn of(recovered: &Outcome) -> Self {
        let mut deaths = DowntimeDeaths {
            died: 0,
            dead_lettered: 0,
        };
        for effect in &recovered.effects {
            if let Effect::MessageDied { fate, .. } = effect {
                deaths.died += 1;
                if matches!(fate, DeathFate::DeadLettered { targets } if *targets > 0) {
                    deaths.dead_lettered += 1;
                }
            }
        }
        deaths
    }
}

async fn accept_loop(
    listener: TcpListener,
    ctx: connection::ConnCtx,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(connection::serve(stream, peer, id, ctx.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the management HTTP API, when served ([`ServerConfig::mgmt_bind`]).
    pub fn mgmt_addr(&self) -> Option<SocketAddr> {
        self.mgmt.as_ref().map(|(addr, _)| *addr)
    }

    /// The address of the management API's HTTPS listener, when served
    /// ([`ServerConfig::mgmt_tls`]).
    pub fn mgmt_tls_addr(&self) -> Option<SocketAddr> {
        self.mgmt_tls_addr
    }

    /// Sends a management request to the broker task (the embedded Rust API's way to the
    /// same commands the HTTP API uses). Dropped if the broker task has stopped: the
    /// request's answer channel then closes.
    pub async fn admin_request(&self, req: admin::AdminRequest) {
        let _ = self.core.send(core::CoreMsg::Admin(req)).await;
    }

    /// The AMQPS listener's address, if TLS is configured.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.tls_local_addr
    }

    /// The user registry connections log in through (for the management API: one
    /// [`auth::UserRegistry::check`] per request, no broker round trip).
    pub fn user_registry(&self) -> Arc<auth::UserRegistry> {
        self.registry.clone()
    }

    /// Applies a definition command as an operator (users, permissions, vhosts, policies):
    /// its events are logged like a client's, and connections see changed users and
    /// permissions from their next operation on.
    ///
    /// # Errors
    /// The broker's refusal, or an internal error if the broker task is gone.
    pub async fn admin(&self, cmd: Command) -> Result<(), BrokerError> {
        let gone = || {
            BrokerError::new(
                wharf_broker::ErrorKind::InternalError,
                "the broker task is not running",
            )
        };
        let (done, answer) = oneshot::channel();
        self.core
            .send(core::CoreMsg::Admin(admin::AdminRequest::Command {
                cmd: Box::new(cmd),
                done,
            }))
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?.map(|_reply| ())
    }

    /// An `amqp://` URL for the default user and vhost.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.local_addr)
    }

    /// Runs the timer step now: expires what is due at the clock's current time (for tests
    /// on a manual clock). Resolves once the resulting frames are handed to the writers.
    pub async fn tick(&self) {
        let (done, wait) = oneshot::channel();
        if self.core.send(core::CoreMsg::Tick(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Resolves if the broker task stops on its own (the log failed, or a bug): the server
    /// then serves nothing and its process should exit; [`ServerHandle::shutdown`] says why.
    pub async fn stopped(&self) {
        let mut done = self.core_done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// Raises (`Some(reason)`) or clears (`None`) a resource alarm by hand, besides the disk
    /// and memory alarms: while any is on, a connection that publishes stops being read (its
    /// publishes wait in TCP; nothing is refused or lost) and, if it advertised the
    /// capability, gets `connection.blocked`, then `connection.unblocked` when all clear.
    /// Connections that only consume are not blocked (RabbitMQ's rule).
    #[expect(
        clippy::unused_async,
        reason = "kept async: callers await it, as they did when it went through the broker task"
    )]
    pub async fn set_blocked(&self, reason: Option<String>) {
        self.alarms.set_manual(reason);
    }

    /// The reason publishers are blocked now (`"low on disk"`, `"low on memory"`, ...), or
    /// `None` when no alarm is on.
    pub fn blocked_reason(&self) -> Option<String> {
        self.alarms.reason()
    }

    /// Samples free disk and memory now (as the monitor does every second) and raises or
    /// clears the alarms; resolves once done. For tests with an injected `resource_probe`.
    pub async fn check_resources(&self) {
        let (done, wait) = oneshot::channel();
        if self.monitor.send(done).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// Graceful shutdown: stop accepting, close every connection (320 `CONNECTION_FORCED`),
    /// make everything logged durable and close the store.
    ///
    /// # Errors
    /// The final sync failed, or a server task panicked.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        // Connections held by an alarm wake on the 320 close below, not on the alarm.
        self.monitor_task.abort();
        let _ = self.stop_accepting.send(true);
        let _ = self.accept_task.await;
        if let Some((_, task)) = self.mgmt.take() {
            // Bounded: a client holding a request open must not hold up the shutdown.
            let _ = tokio::time::timeout(limits_server::CLOSE_OK_WAIT, task).await;
        }
        if let Some(task) = self.tls_accept_task.take() {
            let _ = task.await;
        }
        let _ = self.core.send(core::CoreMsg::Shutdown).await;
        drop(self.core);
        let stored = self
            .core_task
            .await
            .map_err(|e| ServerError::Task(e.to_string()));
        // Give connections the time to flush their 320 close and see close-ok (bounded).
        let _ =
            tokio::time::timeout(limits_server::CLOSE_OK_WAIT, self.connections_gone.recv()).await;
        stored??;
        Ok(())
    }
}
