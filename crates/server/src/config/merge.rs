//! Flags over the file over the defaults ([`merge`]), into a checked [`Config`].

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::defaults;
use super::error::{ConfigError, invalid};
use super::file::{FileConfig, FileTls, FileUser, SizeSetting};
use super::resolved::{Config, TlsConfig};
use super::values::{FsyncPolicy, byte_size, disk_limit, memory_limit};
use crate::alarm::MemoryLimit;
use crate::users::{User, Users};

use wharf_base::limits;

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
    /// `--prometheus-port`.
    pub prometheus_port: Option<u16>,
    /// `--no-prometheus` (`Some(false)`).
    pub prometheus: Option<bool>,
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
    /// `--cluster-listen`.
    pub cluster_listen: Option<String>,
    /// `--cluster-seeds`.
    pub cluster_seeds: Option<String>,
    /// `--cluster-id`.
    pub cluster_id: Option<u64>,
    /// `--cluster-forward`.
    pub cluster_forward: Option<bool>,
}

/// The hosts to listen on, given or by default (S-NET-1): given ones are all required; the
/// default's IPv6 loopback is optional.
fn bind_hosts(given: Option<String>) -> (String, Vec<String>) {
    match given {
        Some(hosts) => (hosts, Vec::new()),
        None => (
            defaults::BIND.to_owned(),
            defaults::BIND_IF_AVAILABLE
                .iter()
                .map(|&h| h.to_owned())
                .collect(),
        ),
    }
}

/// Merges flags over the file over the defaults, then validates.
///
/// # Errors
/// What [`Config::validate`] refuses.
pub fn merge(file: FileConfig, flags: Overrides) -> Result<Config, ConfigError> {
    let (checkpoint_log_bytes_min, fsync, message_memory_bytes) = durability(&file)?;
    let prometheus_port = prometheus_port(&file, &flags);
    let (users, loopback) = users(file.users, file.default_user, file.loopback_users);
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
    let (bind, bind_if_available) = bind_hosts(flags.bind.or(file.bind));
    let config = Config {
        bind,
        bind_if_available,
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
        prometheus_port,
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
            .unwrap_or(u64::from(limits::MESSAGE_BODY_BYTES_DEFAULT)),
        unacked_per_channel_max: file
            .unacked_per_channel_max
            .unwrap_or(u64::from(limits::UNACKED_PER_CHANNEL_MAX)),
        flow_ready_high: file
            .flow_ready_high
            .unwrap_or(limits::FLOW_READY_HIGH as u64),
        consumer_timeout_ms: file
            .consumer_timeout
            .unwrap_or(limits::CONSUMER_TIMEOUT_MS_DEFAULT),
        tls: merge_tls("tls", file.tls, flags.tls_port, defaults::TLS_PORT)?,
        mgmt_tls: merge_tls("mgmt_tls", file.mgmt_tls, None, defaults::MGMT_TLS_PORT)?,
        checkpoint_log_bytes_min,
        fsync,
        message_memory_bytes,
        loopback_users: loopback.into_iter().collect(),
        cluster_listen: flags.cluster_listen.or(file.cluster_listen),
        cluster_seeds: flags.cluster_seeds.or(file.cluster_seeds),
        cluster_id: flags.cluster_id.or(file.cluster_id),
        cluster_forward: flags
            .cluster_forward
            .or(file.cluster_forward)
            .unwrap_or(true),
    };
    config.validate()?;
    Ok(config)
}

/// The users: the file's first (so that `users[i]` in an error is the file's i-th table),
/// then the default `guest` unless turned off or listed; and the users that may log in
/// from loopback addresses only.
fn users(
    listed: Vec<FileUser>,
    default_user: Option<bool>,
    loopback_users: Option<Vec<String>>,
) -> (Vec<User>, BTreeSet<String>) {
    let loopback: BTreeSet<String> = match loopback_users {
        Some(listed) => listed.into_iter().collect(),
        None => defaults::LOOPBACK_USERS
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    };
    let listed_guest = listed.iter().any(|u| u.name == "guest");
    let mut users: Vec<User> = listed
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
    if default_user.unwrap_or(true) && !listed_guest {
        users.extend(Users::default().0);
    }
    for u in &mut users {
        u.loopback_only = loopback.contains(&u.name);
    }
    (users, loopback)
}

/// The Prometheus listener's port: the flag, the file's, else 15692; `None` when turned off
/// (`--no-prometheus`, `prometheus = false`).
fn prometheus_port(file: &FileConfig, flags: &Overrides) -> Option<u32> {
    let on = flags.prometheus.or(file.prometheus).unwrap_or(true);
    on.then(|| {
        flags
            .prometheus_port
            .map(u32::from)
            .or(file.prometheus_port)
            .unwrap_or(u32::from(defaults::PROMETHEUS_PORT))
    })
}

/// The store's keys: `checkpoint_log_bytes_min`, `fsync` and `message_memory_bytes`.
pub(super) fn durability(file: &FileConfig) -> Result<(u64, FsyncPolicy, u64), ConfigError> {
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
pub(super) fn merge_tls(
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
