//! The file as written (TOML): every key optional, unknown keys refused; parsed by
//! [`FileConfig::parse`].

use serde::Deserialize;
use std::path::PathBuf;

use super::error::ConfigError;

/// A size as written in the file: bytes, a string with RabbitMQ's units (`"50MB"`,
/// `"512MiB"`, `"2GB"`), or (for memory only) a fraction of RAM such as `0.4`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SizeSetting {
    /// A number of bytes.
    Bytes(u64),
    /// A fraction of RAM.
    Fraction(f64),
    /// Bytes with a unit, or a fraction as text (from a flag).
    Text(String),
}

/// The file as written: every key optional, unknown keys refused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Addresses to listen on: one host, a comma-separated list, or a TOML list of hosts
    /// (joined with commas here).
    #[serde(default, deserialize_with = "one_or_many")]
    pub bind: Option<String>,
    /// AMQP port (wider than `u16` so that 70000 is refused by name in `validate`).
    pub port: Option<u32>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Management port (reserved).
    pub mgmt_port: Option<u32>,
    /// Prometheus metrics port (wider than `u16` so that 70000 is refused by name).
    pub prometheus_port: Option<u32>,
    /// Whether the Prometheus listener is served (default true).
    pub prometheus: Option<bool>,
    /// Log filter.
    pub log: Option<String>,
    /// Heartbeat proposed to clients, seconds (0: none).
    pub heartbeat_secs: Option<u32>,
    /// Users who may log in only from loopback.
    pub loopback_users: Option<Vec<String>>,
    /// Whether `guest`/`guest` exists besides the listed users (default true).
    pub default_user: Option<bool>,
    /// Free disk space below which publishers are blocked.
    pub disk_free_limit: Option<SizeSetting>,
    /// Memory use (bytes, or a fraction of RAM) above which publishers are blocked.
    pub memory_high_watermark: Option<SizeSetting>,
    /// Open connections at most.
    pub connection_max: Option<u64>,
    /// `channel_max` offered to clients.
    pub channel_max: Option<u64>,
    /// `frame_max` offered to clients, bytes.
    pub frame_max: Option<u64>,
    /// Largest message body accepted, bytes.
    pub max_message_size: Option<u64>,
    /// Unacked deliveries per channel at most, prefetch 0 included.
    pub unacked_per_channel_max: Option<u64>,
    /// Ready messages behind a consumer above which publishers are slowed (S-FLOW-1; 0 off).
    pub flow_ready_high: Option<u64>,
    /// RabbitMQ's `consumer_timeout`, ms: a delivery unacked for longer closes its channel
    /// (S-CONS-9; positive, default 30 minutes).
    pub consumer_timeout: Option<u64>,
    /// Users.
    #[serde(default)]
    pub users: Vec<FileUser>,
    /// Vhosts to create at start.
    #[serde(default)]
    pub vhosts: Vec<FileVhost>,
    /// The AMQPS listener (`[tls]`).
    pub tls: Option<FileTls>,
    /// The management API over HTTPS (`[mgmt_tls]`, the same keys as `[tls]`).
    pub mgmt_tls: Option<FileTls>,
    /// The floor of the periodic checkpoint threshold (bytes or a unit string).
    pub checkpoint_log_bytes_min: Option<SizeSetting>,
    /// When the log is fsynced (only `"always"`).
    pub fsync: Option<String>,
    /// Memory for the content of queued messages (bytes or a unit string).
    pub message_memory_bytes: Option<SizeSetting>,
    /// The cluster listener, `HOST:PORT` (an IP address), one of `cluster_seeds`.
    pub cluster_listen: Option<String>,
    /// Every node's cluster listener, the same list on every node: a comma-separated string
    /// or a TOML list.
    #[serde(default, deserialize_with = "one_or_many")]
    pub cluster_seeds: Option<String>,
    /// This node's id (its position in `cluster_seeds`, from 1), when `cluster_listen` is not
    /// its seed address (behind a proxy).
    pub cluster_id: Option<u64>,
    /// Forward clients' quorum queue work to the group's leader (S-CLU-70); `false`: refuse
    /// it with 405 naming the leader (S-CLU-11). Default true.
    pub cluster_forward: Option<bool>,
}

/// The `[tls]` table (AMQPS is served when both files are named), and the `[mgmt_tls]` table
/// (the management API over HTTPS, likewise).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTls {
    /// PEM certificate chain, leaf first.
    pub cert_file: Option<PathBuf>,
    /// PEM private key.
    pub key_file: Option<PathBuf>,
    /// The port (default 5671 for `[tls]`, 15671 for `[mgmt_tls]`; wider than `u16` so that
    /// 70000 is refused by name).
    pub port: Option<u32>,
}

/// A `[[users]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUser {
    /// Name.
    pub name: String,
    /// Password, plain text.
    pub password: String,
    /// Vhosts the user may open (`"*"`: all); default `["/"]`.
    pub vhosts: Option<Vec<String>>,
    /// Tags (`administrator`, `management`, `monitoring`, `policymaker`); default none.
    pub tags: Option<Vec<String>>,
}

/// A `[[vhosts]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileVhost {
    /// Name.
    pub name: String,
}

impl FileConfig {
    /// Parses a TOML text.
    ///
    /// # Errors
    /// Invalid TOML, an unknown key or a wrong type: the message names the key and line.
    pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(ConfigError::Parse)
    }
}

/// A string, or a list of strings joined with commas (`bind = ["127.0.0.1", "::1"]`).
fn one_or_many<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(Some(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => one,
        OneOrMany::Many(many) => many.join(","),
    }))
}
