//! The resolved configuration ([`Config`], [`TlsConfig`]) and its conversion to the server's
//! [`ServerConfig`].

use std::path::PathBuf;

use super::error::{ConfigError, invalid};
use super::values::FsyncPolicy;
use crate::alarm::MemoryLimit;
use crate::server_config::ServerConfig;
use crate::tls::TlsListener;
use crate::users::{User, Users};

/// The resolved settings of a TLS listener (AMQPS, or the management API's HTTPS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The port.
    pub port: u32,
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
}

/// The resolved configuration, checked by [`Config::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Hosts to listen on, separated by commas; each must bind.
    pub bind: String,
    /// Hosts also listened on when they can be bound (the default's `::1`).
    pub bind_if_available: Vec<String>,
    /// AMQP port (0 picks a free one; the log says which).
    pub port: u32,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Management HTTP API port (0 picks a free one; the log says which).
    pub mgmt_port: u32,
    /// Prometheus metrics port (0 picks a free one); `None`: not served.
    pub prometheus_port: Option<u32>,
    /// Log filter.
    pub log: String,
    /// Heartbeat, seconds.
    pub heartbeat_secs: u32,
    /// Who may log in.
    pub users: Vec<User>,
    /// Vhosts created at start.
    pub vhosts: Vec<String>,
    /// Free disk bytes below which publishers are blocked.
    pub disk_free_limit_bytes: u64,
    /// Memory use above which publishers are blocked.
    pub memory_high_watermark: MemoryLimit,
    /// Open connections at most.
    pub connection_max: u64,
    /// `channel_max` offered to clients.
    pub channel_max: u64,
    /// `frame_max` offered to clients.
    pub frame_max: u64,
    /// Largest message body accepted.
    pub max_message_size: u64,
    /// Unacked deliveries per channel at most.
    pub unacked_per_channel_max: u64,
    /// Publisher flow control's high mark, ready messages (S-FLOW-1; 0 off).
    pub flow_ready_high: u64,
    /// The consumer timeout, ms (S-CONS-9).
    pub consumer_timeout_ms: u64,
    /// Names that may log in only from loopback.
    pub loopback_users: Vec<String>,
    /// AMQPS, when `tls.cert_file` and `tls.key_file` are both given.
    pub tls: Option<TlsConfig>,
    /// The management API over HTTPS, when `mgmt_tls.cert_file` and `mgmt_tls.key_file` are
    /// both given.
    pub mgmt_tls: Option<TlsConfig>,
    /// The floor of the periodic checkpoint threshold, bytes.
    pub checkpoint_log_bytes_min: u64,
    /// When the log is fsynced.
    pub fsync: FsyncPolicy,
    /// Memory for the content of queued messages, bytes.
    pub message_memory_bytes: u64,
    /// The cluster listener (`None`: a single node). The server does not read it: the binary
    /// starts a cluster node with it (`wharf_cluster::NodeConfig::from_seeds`).
    pub cluster_listen: Option<String>,
    /// Every node's cluster listener, comma-separated.
    pub cluster_seeds: Option<String>,
    /// This node's id, when not its position of `cluster_listen` in `cluster_seeds`.
    pub cluster_id: Option<u64>,
    /// Whether a member forwards clients' quorum queue work to the leader (S-CLU-70).
    pub cluster_forward: bool,
}

impl Config {
    /// The server's configuration (with the system clock).
    ///
    /// # Errors
    /// A value out of range (only if [`Config::validate`] was skipped).
    pub fn server_config(&self) -> Result<ServerConfig, ConfigError> {
        let port = u16::try_from(self.port).map_err(|_| invalid("port", "above 65535"))?;
        let heartbeat = u16::try_from(self.heartbeat_secs)
            .map_err(|_| invalid("heartbeat_secs", "above 65535"))?;
        let mgmt_port =
            u16::try_from(self.mgmt_port).map_err(|_| invalid("mgmt_port", "above 65535"))?;
        let host_port = |host: &str, port: u16| {
            let host = host.trim();
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        };
        // The management API and AMQPS listen on the first host.
        let first = self.bind.split(',').next().unwrap_or_default();
        let address = |port: u16| host_port(first, port);
        let all: Vec<String> = self.bind.split(',').map(|h| host_port(h, port)).collect();
        let mut server = ServerConfig::new(all.join(","), self.data_dir.clone());
        server.bind_if_available = self
            .bind_if_available
            .iter()
            .map(|h| host_port(h, port))
            .collect();
        // The management API listens on the same address as AMQP.
        server.mgmt_bind = Some(address(mgmt_port));
        if let Some(port) = self.prometheus_port {
            let port =
                u16::try_from(port).map_err(|_| invalid("prometheus_port", "above 65535"))?;
            server.prometheus_bind = Some(address(port));
        }
        server.heartbeat_secs = heartbeat;
        server.users = Users(self.users.clone());
        server.vhosts.clone_from(&self.vhosts);
        server.disk_free_limit_bytes = self.disk_free_limit_bytes;
        server.memory_high_watermark = self.memory_high_watermark;
        let out_of_range = |key: &str| invalid(key, "out of range");
        server.connection_max =
            u32::try_from(self.connection_max).map_err(|_| out_of_range("connection_max"))?;
        server.channel_max =
            u16::try_from(self.channel_max).map_err(|_| out_of_range("channel_max"))?;
        server.frame_max = u32::try_from(self.frame_max).map_err(|_| out_of_range("frame_max"))?;
        server.message_bytes_max =
            u32::try_from(self.max_message_size).map_err(|_| out_of_range("max_message_size"))?;
        server.unacked_per_channel_max = u32::try_from(self.unacked_per_channel_max)
            .map_err(|_| out_of_range("unacked_per_channel_max"))?;
        server.flow_ready_high =
            usize::try_from(self.flow_ready_high).map_err(|_| out_of_range("flow_ready_high"))?;
        server.consumer_timeout_ms = Some(self.consumer_timeout_ms);
        server.loopback_users.clone_from(&self.loopback_users);
        if let Some(t) = &self.tls {
            let port = u16::try_from(t.port).map_err(|_| invalid("tls.port", "above 65535"))?;
            server.tls = Some(TlsListener {
                bind: address(port),
                cert_file: t.cert_file.clone(),
                key_file: t.key_file.clone(),
            });
        }
        if let Some(t) = &self.mgmt_tls {
            let port =
                u16::try_from(t.port).map_err(|_| invalid("mgmt_tls.port", "above 65535"))?;
            server.mgmt_tls = Some(TlsListener {
                bind: address(port),
                cert_file: t.cert_file.clone(),
                key_file: t.key_file.clone(),
            });
        }
        server.checkpoint_log_bytes_min = self.checkpoint_log_bytes_min;
        server.message_memory_bytes = self.message_memory_bytes;
        Ok(server)
    }
}
