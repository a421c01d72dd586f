//! `GET /api/nodes/{name}`: the node's resource figures under RabbitMQ's field names
//! (`mem_used`, `mem_limit`, `mem_alarm`, `disk_free`, `disk_free_limit`, `disk_free_alarm`,
//! `fd_used`, `fd_total`, `uptime`), as `wharfctl status` reads them; the same figures the
//! Prometheus metrics show (`crate::metrics`), read once. Any user may read it. A minimal
//! version of the node endpoint: the full `/api/nodes` belongs with the rest of the
//! management API's node listings. Also `GET /api/parameters`: wharf keeps no runtime
//! parameters (federation and shovel are not implemented), so the list is empty.

use axum::extract::Path;
use serde_json::json;

use super::api::{ApiError, ApiResult, Authenticated};
use super::json::NODE;
use super::reply::ok_json;

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
