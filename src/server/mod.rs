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
//! - [`convert`]: wire values <-> broker values, broker errors -> AMQP closes (S-ERR-1).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), wharf::server::ServerError> {
//! let config = wharf::server::ServerConfig::new("127.0.0.1:0", "/tmp/wharf-data");
//! let server = wharf::server::Server::start(config).await?;
//! println!("connect to {}", server.amqp_url());
//! server.shutdown().await?;
//! # Ok(()) }
//! ```

mod connection;
pub mod convert;
mod core;
mod outbox;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::broker::{Broker, Command, DeathFate, Effect, Outcome};
use crate::clock::{Clock, Stopwatch, SystemClock};
use crate::store::{Store, StoreConfig, StoreError};

/// Bounds and waits of the server layer (the shared ones are in `crate::limits`).
pub mod limits_server {
    use std::time::Duration;

    /// Batches of operations queued towards the broker task before readers wait (and so
    /// stop reading their sockets): the publisher backpressure bound.
    pub const CORE_QUEUE_BATCHES_MAX: usize = 256;
    /// How long a peer has to finish the handshake.
    pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);
    /// How long we wait for `close-ok` after sending `connection.close`.
    pub const CLOSE_OK_WAIT: Duration = Duration::from_secs(2);
    /// Bytes of partly received message bodies one connection may hold over all its channels
    /// (more than one maximal message, far less than `channel_max` of them).
    pub const GATHERING_BYTES_PER_CONNECTION_MAX: usize =
        2 * crate::limits::MESSAGE_BODY_BYTES_MAX as usize + 1024 * 1024;
    /// The heartbeat interval proposed in `connection.tune`, in seconds (RabbitMQ's 60).
    pub const HEARTBEAT_SECS_DEFAULT: u16 = 60;
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
    /// A task of the server failed.
    #[error("server task failed: {0}")]
    Task(String),
}

/// A user who may log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Name.
    pub name: String,
    /// Password (plain; compared in full).
    pub password: String,
    /// Only from a loopback address (RabbitMQ's rule for `guest`).
    pub loopback_only: bool,
    /// The vhosts this user may open; `"*"` stands for every vhost.
    pub vhosts: Vec<String>,
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
        }])
    }
}

impl Users {
    /// `None` if `name`/`password` may log in from `peer`, else RabbitMQ's refusal text.
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
    core: mpsc::Sender<core::CoreMsg>,
    stop_accepting: watch::Sender<bool>,
    accept_task: JoinHandle<()>,
    core_task: JoinHandle<Result<(), StoreError>>,
    core_done: watch::Receiver<bool>,
    /// Yields `None` once every connection task (and the accept loop) has ended.
    connections_gone: mpsc::Receiver<()>,
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
        let clock = config.clock.clone();
        let stopwatch = Stopwatch::start();
        let store_config = StoreConfig {
            dir: config.data_dir.clone(),
            salvage: config.salvage,
        };
        let (store, mut broker, summary) =
            tokio::task::spawn_blocking(move || Store::open(&store_config))
                .await
                .map_err(|e| ServerError::Task(e.to_string()))??;
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
        let live = LiveCounts::of(&broker);
        let mut core = core::Core::new(broker, store, clock.clone());
        core.log_startup(recovered.events)?;
        let recovery_ms = stopwatch.elapsed_ms();

        let listener =
            TcpListener::bind(&config.bind)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.bind.clone(),
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.bind.clone(),
            source,
        })?;
        // The one recovery summary line (STYLE 3.5): what came back, what died while the
        // broker was down (S-DUR-5), how long it took in real time.
        info!(
            addr = %local_addr,
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
            users: Arc::new(config.users.clone()),
            heartbeat_secs: config.heartbeat_secs,
            alive,
        };
        let accept_task = tokio::spawn(accept_loop(listener, ctx, stop_rx));
        Ok(ServerHandle {
            local_addr,
            core: core_tx,
            stop_accepting,
            accept_task,
            core_task,
            core_done,
            connections_gone,
        })
    }
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
    let mut next_id: u64 = 1;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let id = next_id;
                    next_id += 1;
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

    /// Raises (`Some(reason)`) or clears (`None`) a resource alarm: clients that advertised
    /// `connection.blocked` get `connection.blocked` / `connection.unblocked` (the memory and
    /// disk alarms will call this; publishers are not yet throttled by it).
    pub async fn set_blocked(&self, reason: Option<String>) {
        let _ = self.core.send(core::CoreMsg::Blocked(reason)).await;
    }

    /// Graceful shutdown: stop accepting, close every connection (320 `CONNECTION_FORCED`),
    /// make everything logged durable and close the store.
    ///
    /// # Errors
    /// The final sync failed, or a server task panicked.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        let _ = self.stop_accepting.send(true);
        let _ = self.accept_task.await;
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
