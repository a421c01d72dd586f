//! `/api/overview` (totals, listeners, node) and `/api/healthchecks/node`, open to any user.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use serde_json::{Value as JsonValue, json};

use super::api::{ApiResult, Authenticated};
use super::json::NODE;
use super::rates::overview_counts;
use super::reply::ok_json;

pub(crate) async fn overview(Authenticated(api, _): Authenticated) -> ApiResult {
    let totals = api
        .query(|view| {
            let mut queues = 0usize;
            let mut exchanges = 0usize;
            let mut consumers = 0usize;
            let (mut ready, mut unacked) = (0u64, 0u64);
            for vhost in view.broker.vhost_names() {
                let qs = view.broker.queues(&vhost);
                queues += qs.len();
                ready += qs.iter().map(|q| q.ready).sum::<u64>();
                unacked += qs.iter().map(|q| q.unacked).sum::<u64>();
                exchanges += view.broker.exchanges(&vhost).len();
                consumers += view.broker.consumers(&vhost).len();
            }
            let channels: usize = view.connections.iter().map(|c| c.channels.len()).sum();
            json!({
                "object_totals": {
                    "connections": view.connections.len(),
                    "channels": channels,
                    "consumers": consumers,
                    "exchanges": exchanges,
                    "queues": queues,
                },
                "queue_totals": {
                    "messages": ready.saturating_add(unacked),
                    "messages_ready": ready,
                    "messages_unacknowledged": unacked,
                },
            })
        })
        .await?;
    let (now_ms, counters) = api.query(|v| (v.now_ms, v.counters)).await?;
    let message_stats = api
        .rates
        .one(now_ms, "overview".to_owned(), overview_counts(&counters));
    let exchange_types: Vec<JsonValue> =
        ["direct", "fanout", "headers", "topic", "x-delayed-message"]
            .iter()
            .map(|t| json!({ "name": t, "enabled": true }))
            .collect();
    let listeners: Vec<JsonValue> = api
        .listeners()
        .iter()
        .map(|(protocol, addr)| {
            json!({
                "node": NODE,
                "protocol": protocol,
                "ip_address": addr.ip().to_string(),
                "port": addr.port(),
            })
        })
        .collect();
    let mut out = json!({
        // The management API level wharf follows, for tools that check it.
        "management_version": "3.13.0",
        "rabbitmq_version": "3.13.0",
        "product_name": "wharf",
        "product_version": env!("CARGO_PKG_VERSION"),
        "cluster_name": NODE,
        "node": NODE,
        "rates_mode": "basic",
        "message_stats": message_stats,
        "exchange_types": exchange_types,
        "listeners": listeners,
    });
    if let (Some(out), JsonValue::Object(t)) = (out.as_object_mut(), totals) {
        out.extend(t);
    }
    Ok(ok_json(out))
}

pub(crate) async fn healthcheck(Authenticated(api, _): Authenticated) -> ApiResult {
    // Answered by the broker task itself: a stuck or stopped task fails the check.
    api.query(|_| ()).await?;
    Ok(ok_json(json!({ "status": "ok" })))
}
