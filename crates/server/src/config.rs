//! The broker's configuration file (TOML) and its merge with the command-line flags: parse
//! ([`FileConfig::parse`]), merge ([`merge`]: a flag beats the file, the file beats the
//! default), check ([`Config::validate`]), and turn into a [`ServerConfig`].
//!
//! Depends only on `crate`'s plain config types (no sockets, no tokio), so every rule
//! here is unit-tested without a process.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;

use crate::alarm::MemoryLimit;
use crate::server_config::ServerConfig;
use crate::tls::TlsListener;
use crate::users::{User, Users};
use wharf_base::limits;

/// Defaults of every setting (the binary's flags have no defaults of their own, so that a
/// flag left out lets the file speak).
pub mod defaults {
    /// `bind`.
    pub const BIND: &str = "127.0.0.1";
    /// `port`.
    pub const PORT: u16 = 5672;
    /// `data_dir`.
    pub const DATA_DIR: &str = "./wharf-data";
    /// `mgmt_port`.
    pub const MGMT_PORT: u16 = 15672;
    /// `log`.
    pub const LOG: &str = "info";
    /// `loopback_users` (RabbitMQ's default).
    pub const LOOPBACK_USERS: &[&str] = &["guest"];
    /// `disk_free_limit`, bytes (RabbitMQ's 50 MB).
    pub const DISK_FREE_LIMIT_BYTES: u64 = wharf_base::limits::DISK_FREE_LIMIT_BYTES_DEFAULT;
    /// `memory_high_watermark`, a fraction of RAM (RabbitMQ's 0.4).
    pub const MEMORY_HIGH_WATERMARK: f64 = wharf_base::limits::MEMORY_HIGH_WATERMARK_DEFAULT;
    /// `tls.port` / `--tls-port` (RabbitMQ's AMQPS port).
    pub const TLS_PORT: u16 = 5671;
    /// `mgmt_tls.port` (RabbitMQ's `management.ssl.port`).
    pub const MGMT_TLS_PORT: u16 = 15671;
    /// `checkpoint_log_bytes_min`, bytes.
    pub const CHECKPOINT_LOG_BYTES_MIN: u64 = wharf_base::limits::CHECKPOINT_LOG_BYTES_MIN;
    /// `fsync`.
    pub const FSYNC: &str = "always";
    /// `message_memory_bytes`, bytes.
    pub const MESSAGE_MEMORY_BYTES: u64 = wharf_base::limits::MESSAGE_MEMORY_BYTES;
}

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

/// Parses a byte size with RabbitMQ's units: `k`/`KiB`, `M`/`MiB`, `G`/`GiB` are powers of
/// 1024, `kB`/`MB`/`GB` powers of 1000; no unit means bytes.
///
/// # Errors
/// The text is not a number with one of those units, or overflows.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 50000000, \"50MB\", \"1GiB\")"))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "kiB" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("unknown unit '{other}' in '{text}'")),
    };
    n.checked_mul(multiplier)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// The disk limit from a setting (bytes or a unit string; a fraction makes no sense here).
fn disk_limit(setting: &SizeSetting) -> Result<u64, ConfigError> {
    byte_size("disk_free_limit", setting)
}

/// A number of bytes from a setting of `key` (bytes or a unit string, not a fraction).
fn byte_size(key: &str, setting: &SizeSetting) -> Result<u64, ConfigError> {
    match setting {
        SizeSetting::Bytes(b) => Ok(*b),
        SizeSetting::Text(t) => parse_bytes(t).map_err(|e| invalid(key, e)),
        SizeSetting::Fraction(f) => Err(invalid(key, format!("{f} is not a number of bytes"))),
    }
}

/// When the write-ahead log is made durable. Only one policy exists: every publisher confirm,
/// definition reply and acknowledged settle waits for `fdatasync` (S-DUR-3). A policy that
/// confirms after `write()` alone would need the log's writer and the broker task's release
/// gate to change together, and would lose confirmed messages on power loss; it is not
/// offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// `fsync = "always"`: fdatasync before every confirm (group commit batches them).
    #[default]
    Always,
}

impl FsyncPolicy {
    /// Parses the `fsync` key.
    ///
    /// # Errors
    /// Anything but `"always"`, with the reason.
    pub fn parse(text: &str) -> Result<FsyncPolicy, ConfigError> {
        match text {
            "always" => Ok(FsyncPolicy::Always),
            other => Err(invalid(
                "fsync",
                format!(
                    "'{other}' is not supported: only \"always\" (every confirm waits for \
                     fdatasync, S-DUR-3; confirming earlier could lose confirmed messages on \
                     power loss)"
                ),
            )),
        }
    }
}

/// The memory limit from a setting: a fraction (number with a point, or such text) or bytes.
fn memory_limit(setting: &SizeSetting) -> Result<MemoryLimit, ConfigError> {
    match setting {
        SizeSetting::Bytes(b) => Ok(MemoryLimit::Bytes(*b)),
        SizeSetting::Fraction(f) => Ok(MemoryLimit::Fraction(*f)),
        SizeSetting::Text(t) if t.contains('.') => t
            .trim()
            .parse::<f64>()
            .map(MemoryLimit::Fraction)
            .map_err(|_| invalid("memory_high_watermark", format!("'{t}' is not a fraction"))),
        SizeSetting::Text(t) => parse_bytes(t)
            .map(MemoryLimit::Bytes)
            .map_err(|e| invalid("memory_high_watermark", e)),
    }
}

/// A vhost or user name longer than this cannot travel in a short string.
const NAME_BYTES_MAX: usize = 255;

/// What is wrong with a configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The file is not valid TOML, has an unknown key, or a value of the wrong type; the
    /// text names the key (from the TOML parser).
    #[error("{0}")]
    Parse(String),
    /// A value is out of range or inconsistent.
    #[error("{key}: {reason}")]
    Invalid {
        /// The key, as written in the file (`users[1].name`).
        key: String,
        /// Why it is refused.
        reason: String,
    },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// The file as written: every key optional, unknown keys refused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address to listen on.
    pub bind: Option<String>,
    /// AMQP port (wider than `u16` so that 70000 is refused by name in `validate`).
    pub port: Option<u32>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Management port (reserved).
    pub mgmt_port: Option<u32>,
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
        toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
    }
}

/// The settings given as flags or environment variables (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--bind`.
    pub bind: Option<String>,
    /// `--port`.
    pub port: Option<u16>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--mgmt-port`.
    pub mgmt_port: Option<u16>,
    /// `--log`.
    pub log: Option<String>,
    /// `--disk-free-limit` (bytes or a unit string).
    pub disk_free_limit: Option<String>,
    /// `--memory-high-watermark` (a fraction such as `0.4`, or bytes with a unit).
    pub memory_high_watermark: Option<String>,
    /// `--connection-max`.
    pub connection_max: Option<u32>,
    /// `--heartbeat` (seconds).
    pub heartbeat_secs: Option<u16>,
    /// `--tls-port`.
    pub tls_port: Option<u16>,
}

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
    /// Address to listen on.
    pub bind: String,
    /// AMQP port (0 picks a free one; the log says which).
    pub port: u32,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Management HTTP API port (0 picks a free one; the log says which).
    pub mgmt_port: u32,
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
}

/// Merges flags over the file over the defaults, then validates.
///
/// # Errors
/// What [`Config::validate`] refuses.
pub fn merge(file: FileConfig, flags: Overrides) -> Result<Config, ConfigError> {
    let (checkpoint_log_bytes_min, fsync, message_memory_bytes) = durability(&file)?;
    let loopback: BTreeSet<String> = match file.loopback_users {
        Some(listed) => listed.into_iter().collect(),
        None => defaults::LOOPBACK_USERS
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    };
    let listed_guest = file.users.iter().any(|u| u.name == "guest");
    // The file's users first, so that `users[i]` in an error is the file's i-th table.
    let mut users: Vec<User> = file
        .users
        .into_iter()
        .map(|u| User {
            name: u.name,
            password: u.password,
            loopback_only: false,
            vhosts: u.vhosts.unwrap_or_else(|| vec!["/".to_owned()]),
            tags: u.tags.unwrap_or_default(),
            initial_only: false,
        })
        .collect();
    if file.default_user.unwrap_or(true) && !listed_guest {
        users.extend(Users::default().0);
    }
    for u in &mut users {
        u.loopback_only = loopback.contains(&u.name);
    }
    let disk_free_limit_bytes = match flags.disk_free_limit.map(SizeSetting::Text) {
        Some(flag) => disk_limit(&flag)?,
        None => file
            .disk_free_limit
            .as_ref()
            .map_or(Ok(defaults::DISK_FREE_LIMIT_BYTES), disk_limit)?,
    };
    let memory_high_watermark = match flags.memory_high_watermark.map(SizeSetting::Text) {
        Some(flag) => memory_limit(&flag)?,
        None => file.memory_high_watermark.as_ref().map_or(
            Ok(MemoryLimit::Fraction(defaults::MEMORY_HIGH_WATERMARK)),
            memory_limit,
        )?,
    };
    let config = Config {
        bind: flags
            .bind
            .or(file.bind)
            .unwrap_or_else(|| defaults::BIND.to_owned()),
        port: flags
            .port
            .map(u32::from)
            .or(file.port)
            .unwrap_or(u32::from(defaults::PORT)),
        data_dir: flags
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from(defaults::DATA_DIR)),
        mgmt_port: flags
            .mgmt_port
            .map(u32::from)
            .or(file.mgmt_port)
            .unwrap_or(u32::from(defaults::MGMT_PORT)),
        log: flags
            .log
            .or(file.log)
            .unwrap_or_else(|| defaults::LOG.to_owned()),
        heartbeat_secs: flags
            .heartbeat_secs
            .map(u32::from)
            .or(file.heartbeat_secs)
            .unwrap_or(u32::from(limits::HEARTBEAT_SECS_DEFAULT)),
        users,
        vhosts: file.vhosts.into_iter().map(|v| v.name).collect(),
        disk_free_limit_bytes,
        memory_high_watermark,
        connection_max: flags
            .connection_max
            .map(u64::from)
            .or(file.connection_max)
            .unwrap_or(u64::from(limits::CONNECTIONS_MAX)),
        channel_max: file
            .channel_max
            .unwrap_or(u64::from(limits::CHANNELS_PER_CONNECTION_MAX)),
        frame_max: file.frame_max.unwrap_or(u64::from(limits::FRAME_BYTES_MAX)),
        max_message_size: file
            .max_message_size
            .unwrap_or(u64::from(limits::MESSAGE_BODY_BYTES_MAX)),
        unacked_per_channel_max: file
            .unacked_per_channel_max
            .unwrap_or(u64::from(limits::UNACKED_PER_CHANNEL_MAX)),
        tls: merge_tls("tls", file.tls, flags.tls_port, defaults::TLS_PORT)?,
        mgmt_tls: merge_tls("mgmt_tls", file.mgmt_tls, None, defaults::MGMT_TLS_PORT)?,
        checkpoint_log_bytes_min,
        fsync,
        message_memory_bytes,
        loopback_users: loopback.into_iter().collect(),
    };
    config.validate()?;
    Ok(config)
}

/// The store's keys: `checkpoint_log_bytes_min`, `fsync` and `message_memory_bytes`.
fn durability(file: &FileConfig) -> Result<(u64, FsyncPolicy, u64), ConfigError> {
    let checkpoint = file
        .checkpoint_log_bytes_min
        .as_ref()
        .map_or(Ok(defaults::CHECKPOINT_LOG_BYTES_MIN), |s| {
            byte_size("checkpoint_log_bytes_min", s)
        })?;
    let fsync = file
        .fsync
        .as_deref()
        .map_or(Ok(FsyncPolicy::Always), FsyncPolicy::parse)?;
    let memory = file
        .message_memory_bytes
        .as_ref()
        .map_or(Ok(defaults::MESSAGE_MEMORY_BYTES), |s| {
            byte_size("message_memory_bytes", s)
        })?;
    Ok((checkpoint, fsync, memory))
}

/// `[tls]` with both files gives AMQPS on `--tls-port`, else `tls.port`, else 5671 (and
/// `[mgmt_tls]` HTTPS on `mgmt_tls.port`, else 15671); one file without the other is refused
/// by name.
fn merge_tls(
    table: &str,
    file: Option<FileTls>,
    port: Option<u16>,
    default_port: u16,
) -> Result<Option<TlsConfig>, ConfigError> {
    let Some(t) = file else {
        return Ok(None);
    };
    let port = port
        .map(u32::from)
        .or(t.port)
        .unwrap_or(u32::from(default_port));
    match (t.cert_file, t.key_file) {
        (Some(cert_file), Some(key_file)) => Ok(Some(TlsConfig {
            port,
            cert_file,
            key_file,
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(invalid(
            format!("{table}.key_file"),
            format!("missing ({table}.cert_file is given)"),
        )),
        (None, Some(_)) => Err(invalid(
            format!("{table}.cert_file"),
            format!("missing ({table}.key_file is given)"),
        )),
    }
}

fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(invalid(
            key,
            format!("longer than {NAME_BYTES_MAX} bytes ({})", name.len()),
        ));
    }
    Ok(())
}

impl Config {
    /// Refuses out-of-range ports and heartbeats, empty or over-long names, duplicate users.
    /// Port 0 is allowed: the system picks a free port and the log names it.
    ///
    /// # Errors
    /// The first offending key and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("port", self.port),
            ("mgmt_port", self.mgmt_port),
            ("heartbeat_secs", self.heartbeat_secs),
            ("tls.port", self.tls.as_ref().map_or(0, |t| t.port)),
            (
                "mgmt_tls.port",
                self.mgmt_tls.as_ref().map_or(0, |t| t.port),
            ),
        ] {
            if u16::try_from(value).is_err() {
                return Err(invalid(key, format!("{value} is above 65535")));
            }
        }
        if self.bind.is_empty() {
            return Err(invalid("bind", "must not be empty"));
        }
        self.validate_limits()?;
        let mut seen = BTreeSet::new();
        for (i, u) in self.users.iter().enumerate() {
            check_name(&format!("users[{i}].name"), &u.name)?;
            if !seen.insert(u.name.as_str()) {
                return Err(invalid(
                    format!("users[{i}].name"),
                    format!("user '{}' is listed twice", u.name),
                ));
            }
            for (j, v) in u.vhosts.iter().enumerate() {
                check_name(&format!("users[{i}].vhosts[{j}]"), v)?;
            }
        }
        for (i, v) in self.vhosts.iter().enumerate() {
            check_name(&format!("vhosts[{i}].name"), v)?;
        }
        Ok(())
    }

    /// Limits may lower the hard bounds of `wharf_base::limits`, never raise them (STYLE 3.2).
    fn validate_limits(&self) -> Result<(), ConfigError> {
        for (key, value, min, max) in [
            (
                "connection_max",
                self.connection_max,
                1,
                u64::from(limits::CONNECTIONS_MAX),
            ),
            (
                "channel_max",
                self.channel_max,
                1,
                u64::from(limits::CHANNELS_PER_CONNECTION_MAX),
            ),
            (
                "frame_max",
                self.frame_max,
                u64::from(limits::FRAME_BYTES_MIN),
                u64::from(limits::FRAME_BYTES_MAX),
            ),
            (
                "max_message_size",
                self.max_message_size,
                1,
                u64::from(limits::MESSAGE_BODY_BYTES_MAX),
            ),
            (
                "unacked_per_channel_max",
                self.unacked_per_channel_max,
                1,
                u64::from(limits::UNACKED_PER_CHANNEL_MAX),
            ),
        ] {
            if !(min..=max).contains(&value) {
                return Err(invalid(
                    key,
                    format!(
                        "{value} is outside {min}..={max} (config may lower a limit, not raise it)"
                    ),
                ));
            }
        }
        let (low, high) = (
            limits::CHECKPOINT_LOG_BYTES_MIN_LOWEST,
            limits::CHECKPOINT_LOG_BYTES_MIN_HIGHEST,
        );
        if !(low..=high).contains(&self.checkpoint_log_bytes_min) {
            return Err(invalid(
                "checkpoint_log_bytes_min",
                format!(
                    "{} is outside {low}..={high} bytes (1 MiB to 4 GiB)",
                    self.checkpoint_log_bytes_min
                ),
            ));
        }
        match self.memory_high_watermark {
            MemoryLimit::Fraction(f) if !(f > 0.0 && f <= 1.0) => Err(invalid(
                "memory_high_watermark",
                format!("the fraction {f} is outside (0, 1]"),
            )),
            MemoryLimit::Bytes(0) => Err(invalid("memory_high_watermark", "must be positive")),
            _ => Ok(()),
        }
    }

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
        let address = |port: u16| {
            if self.bind.contains(':') {
                format!("[{}]:{port}", self.bind)
            } else {
                format!("{}:{port}", self.bind)
            }
        };
        let mut server = ServerConfig::new(address(port), self.data_dir.clone());
        // The management API listens on the same address as AMQP.
        server.mgmt_bind = Some(address(mgmt_port));
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

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use std::net::SocketAddr;

    use super::*;

    const FULL: &str = r#"
bind = "0.0.0.0"
port = 5673
data_dir = "/var/lib/wharf"
mgmt_port = 15673
log = "debug"
heartbeat_secs = 30
loopback_users = ["guest", "local"]

[[users]]
name = "app"
password = "s3cret"
vhosts = ["prod", "/"]

[[users]]
name = "local"
password = "pw"

[[users]]
name = "admin"
password = "root"
vhosts = ["*"]

[[vhosts]]
name = "prod"
"#;

    fn peer(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_a_full_file() {
        let c = merge(FileConfig::parse(FULL).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.bind, "0.0.0.0");
        assert_eq!(c.port, 5673);
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/wharf"));
        assert_eq!(c.mgmt_port, 15673);
        assert_eq!(c.log, "debug");
        assert_eq!(c.heartbeat_secs, 30);
        assert_eq!(c.vhosts, vec!["prod".to_owned()]);
        let names: Vec<&str> = c.users.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["app", "local", "admin", "guest"]);
        let by = |n: &str| c.users.iter().find(|u| u.name == n).unwrap();
        assert!(by("guest").loopback_only);
        assert!(by("local").loopback_only);
        assert!(!by("app").loopback_only);
        assert_eq!(by("local").vhosts, ["/"]);
        assert_eq!(by("app").vhosts, ["prod", "/"]);
        let s = c.server_config().unwrap();
        assert_eq!(s.bind, "0.0.0.0:5673");
        assert_eq!(s.heartbeat_secs, 30);
        assert!(s.users.may_open("admin", "anything"));
        assert!(s.users.may_open("app", "prod"));
        assert!(!s.users.may_open("app", "other"));
        assert!(!s.users.may_open("nobody", "/"));
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let c = merge(FileConfig::parse("").unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.bind, defaults::BIND);
        assert_eq!(c.port, 5672);
        assert_eq!(c.mgmt_port, 15672);
        assert_eq!(c.log, "info");
        assert_eq!(c.heartbeat_secs, 60);
        assert_eq!(c.users, Users::default().0);
        assert!(c.vhosts.is_empty());
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = FileConfig::parse("prot = 5672\n").unwrap_err().to_string();
        assert!(e.contains("prot"), "{e}");
        let e = FileConfig::parse("[[users]]\nname = \"a\"\npassword = \"b\"\nvhost = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("vhost"), "{e}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let e = FileConfig::parse("port = \"five\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("port"), "{e}");
        let e = FileConfig::parse("loopback_users = \"guest\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("loopback_users"), "{e}");
    }

    #[test]
    fn flags_override_the_file() {
        let file = FileConfig::parse(FULL).unwrap();
        let flags = Overrides {
            bind: Some("127.0.0.2".into()),
            port: Some(0),
            data_dir: Some("/tmp/x".into()),
            mgmt_port: None,
            log: Some("warn".into()),
            ..Overrides::default()
        };
        let c = merge(file, flags).unwrap();
        assert_eq!(c.bind, "127.0.0.2");
        assert_eq!(c.port, 0);
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.mgmt_port, 15673, "not given as a flag: the file's");
        assert_eq!(c.log, "warn");
    }

    #[test]
    fn out_of_range_values_are_refused_by_key() {
        for (text, key) in [
            ("port = 70000", "port"),
            ("mgmt_port = 65536", "mgmt_port"),
            ("heartbeat_secs = 65536", "heartbeat_secs"),
            ("bind = \"\"", "bind"),
            ("[[users]]\nname = \"\"\npassword = \"x\"", "users[0].name"),
            ("[[vhosts]]\nname = \"\"", "vhosts[0].name"),
            (
                "[[users]]\nname = \"a\"\npassword = \"x\"\nvhosts = [\"\"]",
                "users[0].vhosts[0]",
            ),
        ] {
            let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
            match e {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, key, "{text}"),
                ConfigError::Parse(p) => panic!("{text}: {p}"),
            }
        }
        // A negative port is a type error from the parser, still naming the key.
        let e = FileConfig::parse("port = -1").unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
    }

    #[test]
    fn resource_limits_parse_with_units_and_defaults() {
        let c = merge(FileConfig::default(), Overrides::default()).unwrap();
        assert_eq!(c.disk_free_limit_bytes, 50_000_000);
        assert_eq!(c.memory_high_watermark, MemoryLimit::Fraction(0.4));
        assert_eq!(c.connection_max, u64::from(limits::CONNECTIONS_MAX));
        assert_eq!(c.channel_max, 2047);
        assert_eq!(c.frame_max, 131_072);
        assert_eq!(c.max_message_size, 16 * 1024 * 1024);
        let text = "disk_free_limit = \"2GB\"\nmemory_high_watermark = 0.6\n\
                    connection_max = 10\nchannel_max = 16\nframe_max = 8192\n\
                    max_message_size = 1048576\nunacked_per_channel_max = 100\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.disk_free_limit_bytes, 2_000_000_000);
        assert_eq!(c.memory_high_watermark, MemoryLimit::Fraction(0.6));
        let s = c.server_config().unwrap();
        assert_eq!(s.connection_max, 10);
        assert_eq!(s.channel_max, 16);
        assert_eq!(s.frame_max, 8192);
        assert_eq!(s.message_bytes_max, 1_048_576);
        assert_eq!(s.unacked_per_channel_max, 100);
        assert_eq!(s.disk_free_limit_bytes, 2_000_000_000);
        let text = "disk_free_limit = 1000\nmemory_high_watermark = \"512MiB\"\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.disk_free_limit_bytes, 1000);
        assert_eq!(c.memory_high_watermark, MemoryLimit::Bytes(512 << 20));
        let text = "memory_high_watermark = 1073741824\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.memory_high_watermark, MemoryLimit::Bytes(1 << 30));
    }

    #[test]
    fn resource_flags_override_the_file() {
        let text = "disk_free_limit = \"1GB\"\nmemory_high_watermark = 0.6\n\
                    connection_max = 10\nheartbeat_secs = 5\n";
        let flags = Overrides {
            disk_free_limit: Some("100MB".into()),
            memory_high_watermark: Some("0.25".into()),
            connection_max: Some(3),
            heartbeat_secs: Some(0),
            ..Overrides::default()
        };
        let c = merge(FileConfig::parse(text).unwrap(), flags).unwrap();
        assert_eq!(c.disk_free_limit_bytes, 100_000_000);
        assert_eq!(c.memory_high_watermark, MemoryLimit::Fraction(0.25));
        assert_eq!(c.connection_max, 3);
        assert_eq!(c.heartbeat_secs, 0);
        let flags = Overrides {
            memory_high_watermark: Some("2GiB".into()),
            ..Overrides::default()
        };
        let c = merge(FileConfig::default(), flags).unwrap();
        assert_eq!(c.memory_high_watermark, MemoryLimit::Bytes(2 << 30));
    }

    #[test]
    fn resource_limits_out_of_range_are_refused_by_key() {
        for (text, key) in [
            ("disk_free_limit = \"50XB\"", "disk_free_limit"),
            ("disk_free_limit = \"lots\"", "disk_free_limit"),
            ("disk_free_limit = 0.5", "disk_free_limit"),
            ("disk_free_limit = \"99999999999GB\"", "disk_free_limit"),
            ("memory_high_watermark = 1.5", "memory_high_watermark"),
            ("memory_high_watermark = 0.0", "memory_high_watermark"),
            ("memory_high_watermark = 0", "memory_high_watermark"),
            ("memory_high_watermark = \"0.x\"", "memory_high_watermark"),
            ("connection_max = 0", "connection_max"),
            ("connection_max = 65537", "connection_max"),
            ("channel_max = 0", "channel_max"),
            ("channel_max = 2048", "channel_max"),
            ("frame_max = 4095", "frame_max"),
            ("frame_max = 131073", "frame_max"),
            ("max_message_size = 0", "max_message_size"),
            ("max_message_size = 16777217", "max_message_size"),
            ("unacked_per_channel_max = 0", "unacked_per_channel_max"),
            ("unacked_per_channel_max = 65536", "unacked_per_channel_max"),
        ] {
            let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
            match e {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, key, "{text}"),
                ConfigError::Parse(p) => panic!("{text}: {p}"),
            }
        }
        let flags = Overrides {
            disk_free_limit: Some("12 parsecs".into()),
            ..Overrides::default()
        };
        let e = merge(FileConfig::default(), flags).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { ref key, .. } if key == "disk_free_limit"));
        // Wrong types and unknown keys are the parser's, and name the key.
        let e = FileConfig::parse("channel_max = \"many\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("channel_max"), "{e}");
        let e = FileConfig::parse("disk_free_limit = [1]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("disk_free_limit"), "{e}");
        let e = FileConfig::parse("vm_memory_high_watermark = 0.4\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("vm_memory_high_watermark"), "{e}");
    }

    #[test]
    fn sizes_use_rabbitmq_units() {
        assert_eq!(parse_bytes("50MB"), Ok(50_000_000));
        assert_eq!(parse_bytes("50M"), Ok(50 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("2kB"), Ok(2000));
        assert_eq!(parse_bytes("2k"), Ok(2048));
        assert_eq!(parse_bytes("123"), Ok(123));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("MB").is_err());
        assert!(parse_bytes("-5MB").is_err());
        assert!(parse_bytes("99999999999999999999").is_err());
    }

    #[test]
    fn tls_needs_both_files_and_the_flag_beats_the_file_port() {
        let text = "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        let tls = c.tls.clone().unwrap();
        assert_eq!(tls.port, 5671);
        assert_eq!(tls.cert_file, PathBuf::from("c.pem"));
        let s = c.server_config().unwrap();
        assert_eq!(s.tls.unwrap().bind, "127.0.0.1:5671");
        let flags = Overrides {
            tls_port: Some(5000),
            ..Overrides::default()
        };
        let with_port = format!("{text}port = 6000\n");
        let c = merge(FileConfig::parse(&with_port).unwrap(), flags).unwrap();
        assert_eq!(c.tls.unwrap().port, 5000);
        let e = merge(
            FileConfig::parse("[tls]\ncert_file = \"c.pem\"\n").unwrap(),
            Overrides::default(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            invalid("tls.key_file", "missing (tls.cert_file is given)")
        );
        let e = merge(
            FileConfig::parse(&format!("{text}port = 70000\n")).unwrap(),
            Overrides::default(),
        )
        .unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { key, .. } if key == "tls.port"));
        let c = merge(FileConfig::default(), Overrides::default()).unwrap();
        assert_eq!(c.tls, None, "no [tls]: no AMQPS");
    }

    #[test]
    fn mgmt_tls_needs_both_files_and_defaults_to_15671() {
        let text = "[mgmt_tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        let t = c.mgmt_tls.clone().unwrap();
        assert_eq!(t.port, 15671);
        assert_eq!(t.key_file, PathBuf::from("k.pem"));
        assert_eq!(c.tls, None, "[mgmt_tls] is not AMQPS");
        let s = c.server_config().unwrap();
        let listener = s.mgmt_tls.unwrap();
        assert_eq!(listener.bind, "127.0.0.1:15671");
        assert_eq!(listener.cert_file, PathBuf::from("c.pem"));
        assert_eq!(
            s.mgmt_bind.as_deref(),
            Some("127.0.0.1:15672"),
            "plain HTTP stays"
        );
        let c = merge(
            FileConfig::parse(&format!("{text}port = 8443\n")).unwrap(),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            c.server_config().unwrap().mgmt_tls.unwrap().bind,
            "127.0.0.1:8443"
        );
        let e = merge(
            FileConfig::parse("[mgmt_tls]\nkey_file = \"k.pem\"\n").unwrap(),
            Overrides::default(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            invalid("mgmt_tls.cert_file", "missing (mgmt_tls.key_file is given)")
        );
        let e = merge(
            FileConfig::parse(&format!("{text}port = 65536\n")).unwrap(),
            Overrides::default(),
        )
        .unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { key, .. } if key == "mgmt_tls.port"));
        let e = FileConfig::parse("[mgmt_tls]\ncertfile = \"c.pem\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("certfile"), "{e}");
        let c = merge(FileConfig::default(), Overrides::default()).unwrap();
        assert_eq!(c.mgmt_tls, None);
        assert_eq!(c.server_config().unwrap().mgmt_tls, None);
    }

    #[test]
    fn message_memory_bytes_takes_units_and_reaches_the_server() {
        let merged = |text: &str| merge(FileConfig::parse(text).unwrap(), Overrides::default());
        let c = merged("").unwrap();
        assert_eq!(c.message_memory_bytes, 16 << 20);
        for (text, want) in [
            ("message_memory_bytes = \"8MiB\"", 8 << 20),
            ("message_memory_bytes = 0", 0),
        ] {
            let c = merged(text).unwrap();
            assert_eq!(c.message_memory_bytes, want, "{text}");
            assert_eq!(c.server_config().unwrap().message_memory_bytes, want);
        }
        assert!(merged("message_memory_bytes = \"lots\"").is_err());
    }

    #[test]
    fn checkpoint_log_bytes_min_takes_units_and_is_bounded() {
        let c = merge(FileConfig::default(), Overrides::default()).unwrap();
        assert_eq!(c.checkpoint_log_bytes_min, 64 << 20);
        assert_eq!(
            c.server_config().unwrap().checkpoint_log_bytes_min,
            limits::CHECKPOINT_LOG_BYTES_MIN
        );
        for (text, bytes) in [
            ("checkpoint_log_bytes_min = \"256MiB\"", 256 << 20),
            ("checkpoint_log_bytes_min = 1048576", 1 << 20),
            ("checkpoint_log_bytes_min = \"4GiB\"", 4 << 30),
        ] {
            let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
            assert_eq!(c.checkpoint_log_bytes_min, bytes, "{text}");
            assert_eq!(c.server_config().unwrap().checkpoint_log_bytes_min, bytes);
        }
        for text in [
            "checkpoint_log_bytes_min = 1048575",
            "checkpoint_log_bytes_min = 0",
            "checkpoint_log_bytes_min = \"5GiB\"",
            "checkpoint_log_bytes_min = 0.5",
            "checkpoint_log_bytes_min = \"lots\"",
        ] {
            let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
            assert!(
                matches!(e, ConfigError::Invalid { ref key, .. } if key == "checkpoint_log_bytes_min"),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn fsync_accepts_only_always() {
        let c = merge(FileConfig::default(), Overrides::default()).unwrap();
        assert_eq!(c.fsync, FsyncPolicy::Always);
        let c = merge(
            FileConfig::parse("fsync = \"always\"").unwrap(),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.fsync, FsyncPolicy::Always);
        for value in ["never", "none", "batch", "Always", ""] {
            let text = format!("fsync = \"{value}\"");
            let e = merge(FileConfig::parse(&text).unwrap(), Overrides::default()).unwrap_err();
            match e {
                ConfigError::Invalid { key, reason } => {
                    assert_eq!(key, "fsync");
                    assert!(reason.contains("S-DUR-3"), "{reason}");
                }
                ConfigError::Parse(p) => panic!("{text}: {p}"),
            }
        }
        let e = FileConfig::parse("fsync = true").unwrap_err().to_string();
        assert!(e.contains("fsync"), "{e}");
    }

    #[test]
    fn user_tags_and_loopback_users_reach_the_server_config() {
        let text = "loopback_users = [\"ops\"]\n                    [[users]]\nname = \"ops\"\npassword = \"pw\"\ntags = [\"administrator\"]\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        let s = c.server_config().unwrap();
        assert_eq!(s.loopback_users, ["ops"]);
        let ops = s.users.0.iter().find(|u| u.name == "ops").unwrap();
        assert_eq!(ops.tags, ["administrator"]);
        assert!(!ops.initial_only, "a listed user is put at every start");
        let guest = s.users.0.iter().find(|u| u.name == "guest").unwrap();
        assert!(
            guest.initial_only,
            "the default guest only on a fresh data dir"
        );
    }

    #[test]
    fn duplicate_users_are_refused() {
        let text = "[[users]]\nname = \"a\"\npassword = \"x\"\n\
                    [[users]]\nname = \"a\"\npassword = \"y\"\n";
        let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
        assert_eq!(e, invalid("users[1].name", "user 'a' is listed twice"));
    }

    #[test]
    fn guest_is_dropped_only_by_default_user_false_or_replaced_by_a_listed_guest() {
        let text = "default_user = false\n[[users]]\nname = \"a\"\npassword = \"x\"\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.users.len(), 1);
        assert_eq!(c.users[0].name, "a");
        let text = "[[users]]\nname = \"guest\"\npassword = \"other\"\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.users.len(), 1);
        assert_eq!(c.users[0].password, "other");
        assert!(c.users[0].loopback_only, "guest stays in loopback_users");
    }

    #[test]
    fn loopback_users_may_log_in_only_from_loopback() {
        let text = "loopback_users = [\"local\"]\n\
                    [[users]]\nname = \"local\"\npassword = \"pw\"\n\
                    [[users]]\nname = \"remote\"\npassword = \"pw\"\n";
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        let users = Users(c.users);
        let far = peer("10.1.2.3:40000");
        assert_eq!(
            users.check("local", "pw", far),
            Some("user 'local' can only connect via localhost".to_owned())
        );
        assert_eq!(users.check("local", "pw", peer("127.0.0.1:40000")), None);
        assert_eq!(users.check("local", "pw", peer("[::1]:40000")), None);
        assert_eq!(users.check("remote", "pw", far), None);
        // guest is no longer in loopback_users here, so it may come from afar.
        assert_eq!(users.check("guest", "guest", far), None);
        // The default list restricts guest.
        let c = merge(FileConfig::default(), Overrides::default()).unwrap();
        assert!(Users(c.users).check("guest", "guest", far).is_some());
    }

    #[test]
    fn wrong_password_and_unknown_user_get_rabbitmq_text() {
        let users = Users::default();
        let local = peer("127.0.0.1:1");
        let text = "Login was refused using authentication mechanism PLAIN. For details see \
                    the broker logfile.";
        assert_eq!(users.check("guest", "nope", local).as_deref(), Some(text));
        assert_eq!(users.check("nobody", "guest", local).as_deref(), Some(text));
    }
}
