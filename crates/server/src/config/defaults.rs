//! Defaults of every setting (the binary's flags have no defaults of their own, so that a
//! flag left out lets the file speak).

/// `bind`, when neither the flag nor the file sets it: IPv4 loopback, and IPv6 loopback
/// (`BIND_IF_AVAILABLE`) where the host has it, since many clients resolve `localhost` to
/// `::1` first (S-NET-1).
pub const BIND: &str = "127.0.0.1";
/// Hosts also listened on by default, skipped with a warning when they cannot be bound.
pub const BIND_IF_AVAILABLE: &[&str] = &["::1"];
/// `port`.
pub const PORT: u16 = 5672;
/// `data_dir`.
pub const DATA_DIR: &str = "./wharf-data";
/// `mgmt_port`.
pub const MGMT_PORT: u16 = 15672;
/// `prometheus_port` (`rabbitmq_prometheus`'s port).
pub const PROMETHEUS_PORT: u16 = 15692;
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
