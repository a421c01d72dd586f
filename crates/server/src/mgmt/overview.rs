//! `/api/overview` (totals, listeners, node) and `/api/healthchecks/node`, open to any user.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use serde_json::{Value as JsonValue, json};

use super::api::{ApiResult, Authenticated};
use super::rates::overview_counts;
use super::reply::ok_json;

pub(crate) async fn overview(Authenticated(api, _): Authenticated) -> ApiResult {
    let totals = api
        .query(|view| {
            // Counted in one walk that copies nothing: the dashboard polls this every 5 s,
            // and it runs on the broker task (issue 18).
            let t = view.broker.totals();
            let c = view.connections.counts();
            json!({
                "object_totals": {
                    "connections": c.connections,
                    "channels": c.channels,
                    "consumers": t.consumers,
                    "exchanges": t.exchanges,
                    "queues": t.queues,
                },
                "queue_totals": {
                    "messages": t.ready.saturating_add(t.unacked),
                    "messages_ready": t.ready,
                    "messages_unacknowledged": t.unacked,
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
                "node": api.node_name(),
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
        "cluster_name": api.config().metrics.cluster,
        "node": api.node_name(),
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
