//! [`ServerConfig`]: how to run a server (listeners, data directory, clock, users, limits,
//! alarms, the management API). The file schema that fills it lives in `config`.

use std::path::PathBuf;
use std::sync::Arc;

use wharf_base::limits;
use wharf_clock::{Clock, ManualClock, SystemClock};
use wharf_wal::Storage;

use crate::alarm;
use crate::tls;
use crate::users::Users;

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to listen on: `host:port`, or several separated by commas; each must bind
    /// (port 0 picks a free one; later addresses with port 0 take the first one's port).
    pub bind: String,
    /// More addresses to listen on when they can be bound; one that cannot (`[::1]:5672` on
    /// a host without IPv6) is logged and skipped (S-NET-1).
    pub bind_if_available: Vec<String>,
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
    /// Largest message body accepted (at most `limits::MESSAGE_BODY_BYTES_MAX`, 512 MiB; by
    /// default RabbitMQ's 128 MiB).
    pub message_bytes_max: u32,
    /// Unacknowledged deliveries one channel may hold, prefetch 0 included (at most
    /// `limits::UNACKED_PER_CHANNEL_MAX`).
    pub unacked_per_channel_max: u32,
    /// Publisher flow control (S-FLOW-1): ready messages behind a consumer on another
    /// connection above which a queue slows its publishers, until a quarter of it; 0 turns it
    /// off (default `limits::FLOW_READY_HIGH`).
    pub flow_ready_high: usize,
    /// The consumer timeout where neither queue nor consumer sets one, ms (S-CONS-9);
    /// default `limits::CONSUMER_TIMEOUT_MS_DEFAULT`, `None`: no timeout.
    pub consumer_timeout_ms: Option<u64>,
    /// Where the management HTTP API listens (`host:port`, port 0 picks one); `None`: not
    /// served.
    pub mgmt_bind: Option<String>,
    /// Where Prometheus metrics are served (`host:port`, port 0 picks one), as
    /// `rabbitmq_prometheus` serves them on 15692; `None`: not served.
    pub prometheus_bind: Option<String>,
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
    /// With a configured `storage`: the log's segment size (default
    /// `limits::SEGMENT_BYTES_MAX`); a simulated disk holds its segments in memory. Ignored
    /// for real files, whose segments are fitted to the volume (S-DISK-5).
    pub storage_segment_bytes: Option<u64>,
    /// Runs the store on the broker task's thread (the deterministic simulation, `wharf-sim`):
    /// the log's writer inline (`WalConfig::inline_writer`: whoever waits for durability
    /// writes and syncs), periodic checkpoints inline, and no blocking-pool task to open or
    /// close the store, so a run on a current-thread runtime with paused time starts no
    /// thread and does the same I/O in the same order every time. Default false (production:
    /// a writer thread, a checkpoint thread, the store opened and closed off the runtime).
    pub inline_store: bool,
    /// With `inline_store`: the virtual time the store's I/O took (the simulation's slow
    /// disk), slept by the durability waiter before it reports a batch durable, so that
    /// frames and confirms wait for a slow fsync while the broker task goes on batching.
    /// `None` (the default, and production): no wait.
    pub inline_store_latency: Option<Arc<dyn IoLatency>>,
    /// Membership of the Raft group that replicates quorum queues (DESIGN "Replication",
    /// S-CLU-10): this node's handle on the group, built by whoever starts the node. `None`
    /// (the default): a single node, whose quorum queues live in its own log.
    pub cluster: Option<wharf_cluster::QueueGroup>,
    /// With `cluster`: this member's handle on the metadata group, which keeps the cluster-wide
    /// definitions (S-CLU-51..54). `None`: the definitions stay this node's own.
    pub metadata: Option<wharf_cluster::MetadataGroup>,
    /// With `cluster`: how this member reaches the other members' servers to forward a
    /// client's quorum-queue work to the group's leader (S-CLU-70), and where the others'
    /// forwarded connections come in. `None`: no forwarding (a follower refuses such work
    /// with 405, S-CLU-11).
    pub relay: Option<RelayHandle>,
    /// Told the first AMQP address once it is bound and before the start line ("wharf
    /// listening") is logged, so whoever reads the start line finds the address already
    /// published (a cluster node names it in its status, S-CLU-13). `None`: nobody is told.
    pub on_listening: Option<ListeningHook>,
}

/// A member's relay to the other members' servers (`ServerConfig::relay`, S-CLU-70).
#[derive(Clone)]
pub struct RelayHandle(pub Arc<dyn wharf_cluster::Relay>);

impl std::fmt::Debug for RelayHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayHandle")
    }
}

/// A callback given the server's AMQP address before its start line
/// (`ServerConfig::on_listening`).
#[derive(Clone)]
pub struct ListeningHook(pub Arc<dyn Fn(std::net::SocketAddr) + Send + Sync>);

impl std::fmt::Debug for ListeningHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListeningHook")
    }
}

/// What the store's I/O cost in time since last asked (`ServerConfig::inline_store_latency`).
pub trait IoLatency: Send + Sync + std::fmt::Debug {
    /// The time taken since the last call.
    fn take(&self) -> std::time::Duration;
}

impl ServerConfig {
    /// Defaults: system clock, 60 s heartbeats, guest/guest from loopback.
    pub fn new(bind: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            bind: bind.into(),
            bind_if_available: Vec::new(),
            data_dir: data_dir.into(),
            clock: Arc::new(SystemClock),
            heartbeat_secs: limits::HEARTBEAT_SECS_DEFAULT,
            users: Users::default(),
            salvage: false,
            vhosts: Vec::new(),
            disk_free_limit_bytes: limits::DISK_FREE_LIMIT_BYTES_DEFAULT,
            memory_high_watermark: alarm::MemoryLimit::Fraction(
                limits::MEMORY_HIGH_WATERMARK_DEFAULT,
            ),
            resource_probe: None,
            connection_max: limits::CONNECTIONS_MAX,
            channel_max: limits::CHANNELS_PER_CONNECTION_MAX,
            frame_max: limits::FRAME_BYTES_MAX,
            message_bytes_max: limits::MESSAGE_BODY_BYTES_DEFAULT,
            unacked_per_channel_max: limits::UNACKED_PER_CHANNEL_MAX,
            flow_ready_high: limits::FLOW_READY_HIGH,
            consumer_timeout_ms: Some(limits::CONSUMER_TIMEOUT_MS_DEFAULT),
            mgmt_bind: None,
            prometheus_bind: None,
            loopback_users: vec!["guest".to_owned()],
            tls: None,
            mgmt_tls: None,
            checkpoint_log_bytes_min: limits::CHECKPOINT_LOG_BYTES_MIN,
            message_memory_bytes: limits::MESSAGE_MEMORY_BYTES,
            storage: None,
            clock_control: None,
            storage_segment_bytes: None,
            inline_store: false,
            inline_store_latency: None,
            cluster: None,
            metadata: None,
            relay: None,
            on_listening: None,
        }
    }
}
