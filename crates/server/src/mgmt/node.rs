//! `GET /api/environment` (wharf's own, for `wharfctl environment`): the settings the server
//! runs with, users and passwords left out; administrators only. The node's figures
//! (`/api/nodes`) are in `health`.

use serde_json::json;

use super::api::{Admin, ApiResult};
use super::reply::ok_json;
use crate::alarm::MemoryLimit;
use crate::server_config::ServerConfig;

/// The settings `config` runs the server with, as `GET /api/environment` shows them (no
/// users, no passwords).
pub(crate) fn environment(config: &ServerConfig) -> serde_json::Value {
    let memory = match config.memory_high_watermark {
        MemoryLimit::Bytes(b) => json!({ "bytes": b }),
        MemoryLimit::Fraction(f) => json!({ "fraction_of_ram": f }),
    };
    json!({
        "amqp_listener": config.bind,
        "amqps_listener": config.tls.as_ref().map(|t| &t.bind),
        "management_listener": config.mgmt_bind,
        "management_https_listener": config.mgmt_tls.as_ref().map(|t| &t.bind),
        "prometheus_listener": config.prometheus_bind,
        "data_dir": config.data_dir.display().to_string(),
        "fsync": "always",
        "heartbeat_secs": config.heartbeat_secs,
        "connection_max": config.connection_max,
        "channel_max": config.channel_max,
        "frame_max": config.frame_max,
        "max_message_size": config.message_bytes_max,
        "unacked_per_channel_max": config.unacked_per_channel_max,
        "flow_ready_high": config.flow_ready_high,
        "disk_free_limit_bytes": config.disk_free_limit_bytes,
        "memory_high_watermark": memory,
        "checkpoint_log_bytes_min": config.checkpoint_log_bytes_min,
        "message_memory_bytes": config.message_memory_bytes,
        "loopback_users": config.loopback_users,
        "vhosts_at_start": config.vhosts,
        "salvage": config.salvage,
    })
}

pub(crate) async fn environment_get(Admin(api): Admin) -> ApiResult {
    Ok(ok_json(api.config().environment.clone()))
}
