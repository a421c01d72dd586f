//! `/api/connections`, `/api/channels`, `/api/consumers`: what the broker task knows of its
//! clients; and closing a connection (`DELETE /api/connections/{name}`).
//! Handlers map the request to a broker command or query and the answer to RabbitMQ's JSON;
//! validation is the broker's (STYLE 2.2).

use std::collections::HashMap;

use axum::extract::{Path, Query};
use axum::http::HeaderMap;
use serde_json::{Value as JsonValue, json};
use tokio::sync::oneshot;

use super::api::{Api, ApiError, ApiResult, Authenticated, Reader, Scope};
use super::json as j;
use super::reply::{list_answer, no_content, ok_json, vhosts_of};
use crate::admin::{AdminRequest, ConnectionInfo};

/// The connections `scope` sees, copied out of the broker task (the JSON is written outside
/// it), and whether a resource alarm is on.
async fn visible_connections(
    api: &Api,
    scope: Scope,
) -> Result<(Vec<ConnectionInfo>, bool), ApiError> {
    let alarm_on = api
        .config()
        .metrics
        .alarms
        .as_ref()
        .is_some_and(|a| a.reason().is_some());
    let conns = api
        .query(move |view| {
            let mut conns = view.connections.list();
            conns.retain(|c| scope.sees_user(&c.user));
            conns
        })
        .await?;
    Ok((conns, alarm_on))
}

pub(crate) async fn connections(
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let server = api.config().amqp_addr;
    let (conns, alarm_on) = visible_connections(&api, scope).await?;
    let list = conns
        .iter()
        .map(|c| j::connection(c, server, alarm_on, api.node_name()))
        .collect();
    list_answer(list, &q)
}

pub(crate) async fn connection_get(
    Path(name): Path<String>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let server = api.config().amqp_addr;
    let (conns, alarm_on) = visible_connections(&api, scope).await?;
    let found = conns
        .iter()
        .find(|c| j::connection_name(c, server) == name)
        .ok_or(ApiError::NotFound)?;
    Ok(ok_json(j::connection(
        found,
        server,
        alarm_on,
        api.node_name(),
    )))
}

/// `DELETE /api/connections/{name}`: closes it with 320 `CONNECTION_FORCED` and the
/// `X-Reason` header's text (RabbitMQ's default "Closed via management plugin"); 404 when no
/// open connection has that name (S-MGMT-4). An administrator may close any connection,
/// another user only its own (401 "User not authorised to access object", S-MGMT-1).
pub(crate) async fn connection_delete(
    Path(name): Path<String>,
    headers: HeaderMap,
    Authenticated(api, who): Authenticated,
) -> ApiResult {
    let server = api.config().amqp_addr;
    let (id, user) = api
        .query(move |view| {
            view.connections
                .list()
                .iter()
                .find(|c| j::connection_name(c, server) == name)
                .map(|c| (c.id, c.user.clone()))
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    if user != who.name && !who.has_tag("administrator") {
        return Err(ApiError::NotAuthorised(
            "User not authorised to access object",
        ));
    }
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin")
        .to_owned();
    let (done, answer) = oneshot::channel();
    api.send(AdminRequest::CloseConnection { id, reason, done })
        .await?;
    if answer.await.map_err(|_| ApiError::Unavailable)? {
        Ok(no_content())
    } else {
        Err(ApiError::NotFound)
    }
}

pub(crate) async fn channels(
    Query(q): Query<HashMap<String, String>>,
    Reader(api, scope): Reader,
) -> ApiResult {
    let server = api.config().amqp_addr;
    // Copied in the broker task: the connections, and consumers and their unacked messages
    // per channel, gathered in one walk per vhost (not one per connection, issue 18). The
    // JSON is written outside the task.
    let (now_ms, conns, per_channel) = api
        .query(move |view| {
            let mut conns = view.connections.list();
            conns.retain(|c| scope.sees_user(&c.user));
            let vhosts: std::collections::BTreeSet<&str> =
                conns.iter().map(|c| c.vhost.as_str()).collect();
            let mut per_channel: HashMap<(u64, u16), (usize, u64)> = HashMap::new();
            for v in vhosts {
                for k in view.broker.consumers(v) {
                    let entry = per_channel
                        .entry((k.chan.conn.0, k.chan.channel.0))
                        .or_default();
                    entry.0 += 1;
                    entry.1 += u64::from(k.unacked);
                }
            }
            (view.now_ms, conns, per_channel)
        })
        .await?;
    let (mut list, mut counts) = (Vec::new(), Vec::new());
    for c in &conns {
        for ch in &c.channels {
            let (consumers, unacked) = per_channel
                .get(&(c.id, ch.number))
                .copied()
                .unwrap_or_default();
            let json = j::channel(c, ch, server, (consumers, unacked), api.node_name());
            let s = ch.stats;
            let named = vec![
                ("publish", s.publish),
                ("deliver_get", s.deliver_get),
                ("redeliver", s.redeliver),
                ("ack", s.ack),
            ];
            counts.push((format!("ch/{}", json["name"]), named));
            list.push(json);
        }
    }
    api.rates.attach(now_ms, &mut list, &counts);
    list_answer(list, &q)
}

async fn consumer_list(api: &Api, scope: &Scope, vhost: Option<String>) -> ApiResult {
    let vhosts = vhosts_of(api, scope, vhost).await?;
    let server = api.config().amqp_addr;
    // Copied in the broker task (the consumers of each vhost and the connections), written
    // as JSON outside it, each consumer's connection found by id (issue 18: not a walk over
    // every connection per consumer).
    let (consumers, conns) = api
        .query(move |view| {
            let consumers: Vec<_> = vhosts
                .iter()
                .map(|v| (v.clone(), view.broker.consumers(v)))
                .collect();
            (consumers, view.connections.list())
        })
        .await?;
    let conns: HashMap<u64, &ConnectionInfo> = conns.iter().map(|c| (c.id, c)).collect();
    let mut list = Vec::new();
    for (v, vhost_consumers) in &consumers {
        for k in vhost_consumers {
            let conn = conns.get(&k.chan.conn.0).copied();
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
    Ok(ok_json(JsonValue::Array(list)))
}

pub(crate) async fn consumers_all(Reader(api, scope): Reader) -> ApiResult {
    consumer_list(&api, &scope, None).await
}

pub(crate) async fn consumers_vhost(
    Path(vhost): Path<String>,
    Reader(api, scope): Reader,
) -> ApiResult {
    consumer_list(&api, &scope, Some(vhost)).await
}
