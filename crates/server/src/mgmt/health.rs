//! What monitoring tools and probes ask: `/api/whoami`, RabbitMQ's health checks
//! (`/api/health/checks/…`), `/api/aliveness-test/{vhost}`, and `/api/nodes` (this node, and
//! in a cluster every other, `cluster.rs`). A failed check answers 503 with RabbitMQ's body (S-MGMT-5).
//! Handlers map the request to broker queries and commands; no rules here (STYLE 2.2).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value as JsonValue, json};

use super::api::{ApiError, ApiResult, Authenticated, Monitor, Reader};
use super::cluster;
use super::reply::ok_json;
use wharf_broker::{Command, Properties, Publish, QueueDeclare};

pub(crate) async fn whoami(Authenticated(_, who): Authenticated) -> ApiResult {
    Ok(ok_json(json!({ "name": who.name, "tags": who.tags })))
}

fn failed(body: JsonValue) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

/// The resource alarms in force, as RabbitMQ names them (`memory`, `disk`).
fn alarms_on(api: &super::api::Api) -> Vec<&'static str> {
    let Some((disk, memory)) = api.config().metrics.node_figures().alarms else {
        return Vec::new();
    };
    let mut on = Vec::new();
    if memory {
        on.push("memory");
    }
    if disk {
        on.push("disk");
    }
    on
}

/// `/api/health/checks/alarms` and `…/local-alarms` (one node: the same answer).
pub(crate) async fn alarms(Authenticated(api, _): Authenticated) -> ApiResult {
    let on = alarms_on(&api);
    if on.is_empty() {
        return Ok(ok_json(json!({ "status": "ok" })));
    }
    let alarms: Vec<JsonValue> = on
        .iter()
        .map(|resource| json!({ "node": api.node_name(), "resource": resource }))
        .collect();
    Ok(failed(json!({
        "status": "failed",
        "reason": "resource alarm(s) in effect in the cluster",
        "alarms": alarms,
    })))
}

/// The ports wharf listens on (AMQP, this API's listeners, Prometheus).
fn ports(api: &super::api::Api) -> Vec<u16> {
    api.listeners().iter().map(|(_, a)| a.port()).collect()
}

pub(crate) async fn port_listener(
    Path(port): Path<String>,
    Authenticated(api, _): Authenticated,
) -> ApiResult {
    let Ok(port) = port.parse::<u16>() else {
        return Err(ApiError::BadRequest(format!("Invalid port: {port}")));
    };
    let ports = ports(&api);
    if ports.contains(&port) {
        return Ok(ok_json(json!({ "status": "ok", "port": port })));
    }
    Ok(failed(json!({
        "status": "failed",
        "reason": "No active listener",
        "missing": port,
        "ports": ports,
    })))
}

/// Every vhost is served by the one broker task: it answering is the check.
pub(crate) async fn virtual_hosts(Authenticated(api, _): Authenticated) -> ApiResult {
    api.query(|_| ()).await?;
    Ok(ok_json(json!({ "status": "ok" })))
}

/// Passes on a single node; in a cluster fails, as RabbitMQ's, when stopping this node would
/// leave the quorum queues' group without a majority of running voters, naming its quorum
/// queues (S-CLU-45).
pub(crate) async fn node_is_quorum_critical(Authenticated(api, _): Authenticated) -> ApiResult {
    api.query(|_| ()).await?;
    let Some(group) = api.group() else {
        return Ok(ok_json(
            json!({ "status": "ok", "reason": "single node cluster" }),
        ));
    };
    let sight = cluster::Sight::of(group, true).await;
    if !sight.quorum_critical(api.node_name()) {
        return Ok(ok_json(json!({ "status": "ok" })));
    }
    let leader = sight.figures.leader_name.clone();
    let queues: Vec<JsonValue> = group
        .quorum_queues()
        .into_iter()
        .map(|(vhost, name)| {
            json!({
                "name": name,
                "readable_name": format!("queue '{name}' in vhost '{vhost}'"),
                "node": leader,
                "virtual_host": vhost,
                "type": "quorum",
            })
        })
        .collect();
    Ok(failed(json!({
        "status": "failed",
        "reason": "There are quorum queues that would lose their quorum if the target node is shut down",
        "queues": queues,
    })))
}

/// RabbitMQ's aliveness test: declares the queue `aliveness-test` in the vhost, publishes a
/// message to it and takes it back, all through the broker's own commands.
pub(crate) async fn aliveness(Path(vhost): Path<String>, Reader(api, scope): Reader) -> ApiResult {
    if !api
        .query(|v| v.broker.vhost_names())
        .await?
        .contains(&vhost)
    {
        return Err(ApiError::NotFound);
    }
    scope.check(&vhost)?;
    let queue = "aliveness-test".to_owned();
    api.command(Command::QueueDeclare(QueueDeclare {
        vhost: vhost.clone(),
        queue: queue.clone(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: wharf_broker::FieldTable::new(),
        owner: None,
    }))
    .await?;
    api.command(Command::Publish(Publish {
        vhost: vhost.clone(),
        exchange: String::new(),
        routing_key: queue.clone(),
        mandatory: false,
        properties: Properties::default(),
        body: bytes::Bytes::from_static(b"test_message"),
    }))
    .await?;
    let taken = api.take(vhost, queue, 1).await?;
    if taken
        .iter()
        .any(|g| g.message.body.as_ref() == b"test_message")
    {
        Ok(ok_json(json!({ "status": "ok" })))
    } else {
        Ok(failed(
            json!({ "status": "failed", "reason": "the test message did not come back" }),
        ))
    }
}

/// The one node, with RabbitMQ's field names for what wharf measures: memory (`mem_used`,
/// `mem_limit`, `mem_alarm`), disk (`disk_free`, `disk_free_limit`, `disk_free_alarm`), file
/// descriptors, uptime and the exchange types; the same figures the Prometheus metrics show
/// (`crate::metrics`), read once. `wharfctl status` reads it.
async fn node_json(api: &super::api::Api) -> Result<JsonValue, ApiError> {
    let now_ms = api.query(|view| view.now_ms).await?;
    let n = api.config().metrics.node_figures();
    let exchange_types: Vec<JsonValue> = ["direct", "fanout", "headers", "topic"]
        .iter()
        .map(|t| json!({ "name": t, "enabled": true }))
        .collect();
    Ok(json!({
        "name": api.node_name(),
        "type": "disc",
        "running": true,
        "being_drained": false,
        "partitions": [],
        "rates_mode": "basic",
        "os_pid": std::process::id().to_string(),
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
        "exchange_types": exchange_types,
        "processors": std::thread::available_parallelism().map_or(1, usize::from),
    }))
}

/// Every node: this one with its figures, and in a cluster every other with what wharf knows
/// of it (S-CLU-40).
pub(crate) async fn nodes(Monitor(api): Monitor) -> ApiResult {
    let own = node_json(&api).await?;
    Ok(ok_json(JsonValue::Array(
        cluster::nodes_json(&api, own).await?,
    )))
}

pub(crate) async fn node(Path(name): Path<String>, Monitor(api): Monitor) -> ApiResult {
    let own = node_json(&api).await?;
    cluster::nodes_json(&api, own)
        .await?
        .into_iter()
        .find(|n| n.get("name").and_then(JsonValue::as_str) == Some(name.as_str()))
        .map(ok_json)
        .ok_or(ApiError::NotFound)
}
