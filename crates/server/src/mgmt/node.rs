//! `GET /api/nodes/{name}`: the node's resource figures under RabbitMQ's field names
//! (`mem_used`, `mem_limit`, `mem_alarm`, `disk_free`, `disk_free_limit`, `disk_free_alarm`,
//! `fd_used`, `fd_total`, `uptime`), as `wharfctl status` reads them; the same figures the
//! Prometheus metrics show (`crate::metrics`), read once. Any user may read it. A minimal
//! version of the node endpoint: the full `/api/nodes` belongs with the rest of the
//! management API's node listings. Also `GET /api/parameters`: wharf keeps no runtime
//! parameters (federation and shovel are not implemented), so the list is empty. And
//! `GET /api/environment` (wharf's own, for `wharfctl environment`): the settings the server
//! runs with, users and passwords left out; administrators only.

use axum::extract::Path;
use serde_json::json;

use super::api::{Admin, ApiError, ApiResult, Authenticated};
use super::json::NODE;
use super::reply::ok_json;
use crate::alarm::MemoryLimit;
use crate::server_config::ServerConfig;

pub(crate) async fn node_get(
    Path(name): Path<String>,
    Authenticated(api): Authenticated,
) -> ApiResult {
    if name != NODE {
        return Err(ApiError::NotFound);
    }
    let now_ms = api.query(|view| view.now_ms).await?;
    let n = api.config().metrics.node_figures();
    Ok(ok_json(json!({
        "name": NODE,
        "type": "disc",
        "running": true,
        "mem_used": n.memory_used_bytes,
        "mem_limit": n.memory_limit_bytes,
        "mem_alarm": n.alarms.is_some_and(|(_, memory)| memory),
        "mem_calculation_strategy": "rss",
        "disk_free": n.disk_free_bytes,
        "disk_free_limit": n.disk_free_limit_bytes,
        "disk_free_alarm": n.alarms.is_some_and(|(disk, _)| disk),
        "fd_used": n.open_fds,
        "fd_total": n.max_fds,
        "uptime": now_ms.saturating_sub(n.started_at_ms),
    })))
}

pub(crate) async fn parameters(Authenticated(_): Authenticated) -> ApiResult {
    Ok(ok_json(json!([])))
}

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
