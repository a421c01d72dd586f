//! `/api/connections`, `/api/channels`, `/api/consumers`: what the broker task knows of its
//! clients.
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use axum::extract::Path;
use serde_json::{Value as JsonValue, json};

use super::api::{Admin, Api, ApiResult};
use super::json as j;
use super::reply::{ok_json, vhosts_of};

pub(crate) async fn connections(Admin(api): Admin) -> ApiResult {
    let server = api.config().amqp_addr;
    let list = api
        .query(move |view| {
            let list: Vec<JsonValue> = view
                .connections
                .iter()
                .map(|c| j::connection(c, server))
                .collect();
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn channels(Admin(api): Admin) -> ApiResult {
    let server = api.config().amqp_addr;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for c in &view.connections {
                let consumers = view.broker.consumers(&c.vhost);
                for ch in &c.channels {
                    let mine: Vec<_> = consumers
                        .iter()
                        .filter(|k| k.chan.conn.0 == c.id && k.chan.channel.0 == ch.number)
                        .collect();
                    let unacked = mine.iter().map(|k| u64::from(k.unacked)).sum();
                    list.push(j::channel(c, ch, server, mine.len(), unacked));
                }
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

async fn consumer_list(api: &Api, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, vhost).await?;
    let server = api.config().amqp_addr;
    let list = api
        .query(move |view| {
            let mut list = Vec::new();
            for v in &vhosts {
                for k in view.broker.consumers(v) {
                    let conn = view.connections.iter().find(|c| c.id == k.chan.conn.0);
                    let (conn_name, peer_host, peer_port, user) = conn.map_or_else(
                        || (String::new(), String::new(), 0, String::new()),
                        |c| {
                            (
                                j::connection_name(c, server),
                                c.peer.ip().to_string(),
                                c.peer.port(),
                                c.user.clone(),
                            )
                        },
                    );
                    list.push(json!({
                        "consumer_tag": k.consumer_tag,
                        "queue": { "name": k.queue, "vhost": v },
                        "channel_details": {
                            "name": format!("{conn_name} ({})", k.chan.channel.0),
                            "number": k.chan.channel.0,
                            "connection_name": conn_name,
                            "peer_host": peer_host,
                            "peer_port": peer_port,
                            "user": user,
                        },
                        "ack_required": !k.no_ack,
                        "exclusive": k.exclusive,
                        "prefetch_count": k.prefetch_count,
                        // S-CONS-7: as the broker says (single active consumer).
                        "active": k.active,
                        "activity_status": k.activity_status,
                        "arguments": j::table_to_json(&k.arguments),
                    }));
                }
            }
            list
        })
        .await?;
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn consumers_all(Admin(api): Admin) -> ApiResult {
    consumer_list(&api, None).await
}

pub(crate) async fn consumers_vhost(Path(vhost): Path<String>, Admin(api): Admin) -> ApiResult {
    consumer_list(&api, Some(vhost)).await
}
