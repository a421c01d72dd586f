//! Broker values and listings as RabbitMQ's management JSON, and JSON bodies back to broker
//! values. Pure mapping: no decisions (which policy applies, what a setting means) are made
//! here; those come from the broker's listings. Must not depend on tokio or sockets.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::{Map, Value as Json, json};

use crate::admin::{ChannelInfo, ConnectionInfo};
use wharf_broker::{
    ApplyTo, BindingInfo, DestName, ExchangeInfo, FieldTable, Message, PolicyInfo, Properties,
    QueueInfo, QueueKind, Value,
};

/// The node name shown where RabbitMQ shows `rabbit@host`, for a node outside a cluster (a
/// member of one is named by its slot and seed, `wharf_cluster::node_name`).
pub const NODE: &str = "wharf@localhost";

/// Where a queue listed by this node lives, as its JSON says: the node that serves it (a
/// quorum queue's leader in a cluster; `None` while no leader is known: the field is left
/// out), and whether its consumers are known here (a follower reads a quorum queue from the
/// group's committed state, which holds no consumers: the field is left out, S-CLU-42).
#[derive(Debug, Clone, Copy)]
pub struct QueueSite<'a> {
    /// The serving node's name.
    pub node: Option<&'a str>,
    /// Whether `consumers` is known here.
    pub consumers_known: bool,
}

/// A field table as a JSON object (numbers, strings, booleans, nested tables and arrays).
pub fn table_to_json(table: &FieldTable) -> Json {
    let mut map = Map::new();
    for (k, v) in table.iter() {
        map.insert(k.to_owned(), value_to_json(v));
    }
    Json::Object(map)
}

fn value_to_json(v: &Value) -> Json {
    match v {
        Value::Bool(b) => json!(b),
        Value::I8(n) => json!(n),
        Value::U8(n) => json!(n),
        Value::I16(n) => json!(n),
        Value::U16(n) => json!(n),
        Value::I32(n) => json!(n),
        Value::U32(n) => json!(n),
        Value::I64(n) => json!(n),
        Value::F32(n) => json!(n),
        Value::F64(n) => json!(n),
        Value::Decimal { scale, value } => {
            json!(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        Value::ShortStr(s) => json!(s),
        Value::LongStr(b) | Value::Bytes(b) => json!(String::from_utf8_lossy(b)),
        Value::Array(items) => Json::Array(items.iter().map(value_to_json).collect()),
        Value::Timestamp(t) => json!(t),
        Value::Table(t) => table_to_json(t),
        Value::Void => Json::Null,
    }
}

/// A JSON object as a field table, typed as RabbitMQ's management plugin does: integers as
/// signed 64-bit, other numbers as doubles, strings as long strings.
///
/// # Errors
/// `json` is not an object (the text says so).
pub fn json_to_table(json: &Json) -> Result<FieldTable, String> {
    match json {
        Json::Object(map) => {
            let mut table = FieldTable::new();
            for (k, v) in map {
                table.insert(k.clone(), json_to_value(v));
            }
            Ok(table)
        }
        Json::Null => Ok(FieldTable::new()),
        other => Err(format!("arguments must be a JSON object, got {other}")),
    }
}

fn json_to_value(v: &Json) -> Value {
    match v {
        Json::Null => Value::Void,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::long_str(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(json_to_value).collect()),
        Json::Object(_) => Value::Table(json_to_table(v).unwrap_or_default()),
    }
}

/// `apply-to` as RabbitMQ spells it.
pub fn apply_to_name(a: ApplyTo) -> &'static str {
    match a {
        ApplyTo::Queues => "queues",
        ApplyTo::Exchanges => "exchanges",
        ApplyTo::All => "all",
    }
}

/// `apply-to` from RabbitMQ's spelling.
pub fn apply_to_parse(s: &str) -> Option<ApplyTo> {
    match s {
        "queues" => Some(ApplyTo::Queues),
        "exchanges" => Some(ApplyTo::Exchanges),
        "all" => Some(ApplyTo::All),
        _ => None,
    }
}

/// A queue as `/api/queues` shows it; a quorum queue also shows what waits to be
/// dead-lettered (`messages_dlx`, `message_bytes_dlx`: S-QQ-10), as RabbitMQ does.
pub fn queue(q: &QueueInfo, effective: &Json, site: QueueSite<'_>) -> Json {
    let mut map = Map::new();
    for key in QUEUE_FIELDS {
        if let Some(v) = queue_field(q, key, site) {
            map.insert(key.to_owned(), v);
        }
    }
    map.insert("arguments".to_owned(), table_to_json(&q.arguments));
    map.insert("effective_policy_definition".to_owned(), effective.clone());
    map.insert("exclusive_consumer_tag".to_owned(), Json::Null);
    Json::Object(map)
}

/// The fields of a queue's JSON that come straight from its [`QueueInfo`]: a listing can
/// filter and sort by them before it builds any row (S-MGMT-2).
pub const QUEUE_FIELDS: [&str; 19] = [
    "name",
    "vhost",
    "durable",
    "auto_delete",
    "exclusive",
    "node",
    "state",
    "type",
    "messages",
    "messages_ready",
    "messages_unacknowledged",
    "message_bytes",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    "consumers",
    "policy",
    "operator_policy",
    "messages_dlx",
    "message_bytes_dlx",
];

/// Field `key` (one of [`QUEUE_FIELDS`]) of a queue's JSON; `None` when the JSON has no such
/// field (`messages_dlx` of a classic queue, or a key not in the list).
pub fn queue_field(q: &QueueInfo, key: &str, site: QueueSite<'_>) -> Option<Json> {
    let quorum = q.kind == QueueKind::Quorum;
    Some(match key {
        "name" => json!(q.name),
        "vhost" => json!(q.vhost),
        "durable" => json!(q.durable),
        "auto_delete" => json!(q.auto_delete),
        "exclusive" => json!(q.exclusive_owner.is_some()),
        "node" => json!(site.node?),
        "state" => json!("running"),
        "type" => json!(q.kind.name()),
        "messages" => json!(q.ready.saturating_add(q.unacked)),
        "messages_ready" => json!(q.ready),
        "messages_unacknowledged" => json!(q.unacked),
        "message_bytes" => json!(q.ready_bytes.saturating_add(q.unacked_bytes)),
        "message_bytes_ready" => json!(q.ready_bytes),
        "message_bytes_unacknowledged" => json!(q.unacked_bytes),
        "consumers" if site.consumers_known => json!(q.consumers),
        "policy" => json!(q.policy),
        "operator_policy" => json!(q.operator_policy),
        "messages_dlx" if quorum => json!(q.dead_letter_held),
        "message_bytes_dlx" if quorum => json!(q.dead_letter_held_bytes),
        _ => return None,
    })
}

/// An exchange as `/api/exchanges` shows it.
pub fn exchange(x: &ExchangeInfo) -> Json {
    json!({
        "name": x.name,
        "vhost": x.vhost,
        "type": x.kind.name(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_to_json(&x.arguments),
        "user_who_performed_action": "",
    })
}

/// A binding's `properties_key`, the last path segment that names it in the API: its routing
/// key (`~` when empty), with a hash of its arguments when it has any.
pub fn properties_key(b: &BindingInfo) -> String {
    if b.arguments.is_empty() {
        if b.routing_key.is_empty() {
            "~".to_owned()
        } else {
            b.routing_key.clone()
        }
    } else {
        // RabbitMQ appends a hash of the arguments; any stable distinct suffix serves.
        let mut key = format!("{}~", b.routing_key);
        let hash = crc32fast::hash(table_to_json(&b.arguments).to_string().as_bytes());
        let _ = write!(key, "{hash:08x}");
        key
    }
}

/// A binding as `/api/bindings` shows it.
pub fn binding(vhost: &str, b: &BindingInfo) -> Json {
    let (destination, destination_type) = match &b.destination {
        DestName::Queue(q) => (q.as_str(), "queue"),
        DestName::Exchange(x) => (x.as_str(), "exchange"),
    };
    let properties_key = properties_key(b);
    json!({
        "source": b.source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": destination_type,
        "routing_key": b.routing_key,
        "arguments": table_to_json(&b.arguments),
        "properties_key": properties_key,
    })
}

/// A policy as `/api/policies` shows it.
pub fn policy(p: &PolicyInfo) -> Json {
    let definition: Json = serde_json::from_str(&p.policy.definition).unwrap_or(Json::Null);
    json!({
        "vhost": p.vhost,
        "name": p.policy.name,
        "pattern": p.policy.pattern,
        "apply-to": apply_to_name(p.policy.apply_to),
        "definition": definition,
        "priority": p.policy.priority,
    })
}

/// RabbitMQ's connection name: `peer -> server`.
pub fn connection_name(c: &ConnectionInfo, server: std::net::SocketAddr) -> String {
    format!("{} -> {}", c.peer, server)
}

/// A connection's `state` (S-MGMT-7): `blocked` while its publishes are held by a resource
/// alarm, `blocking` while an alarm is on and it has not published into it, `flow` while its
/// deliveries are paused for a slow socket or its publishes are slowed (S-FLOW-1), else
/// `running`.
fn connection_state(c: &ConnectionInfo, alarm_on: bool) -> &'static str {
    if c.blocked {
        "blocked"
    } else if alarm_on {
        "blocking"
    } else if c.throttled || c.flow {
        "flow"
    } else {
        "running"
    }
}

/// A connection as `/api/connections` shows it, with its `client_properties` and, when the
/// client named it, `user_provided_name`.
pub fn connection(
    c: &ConnectionInfo,
    server: std::net::SocketAddr,
    alarm_on: bool,
    node: &str,
) -> Json {
    let user_provided_name = c
        .client_properties
        .get("connection_name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut out = json!({
        "name": connection_name(c, server),
        "node": node,
        "vhost": c.vhost,
        "user": c.user,
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "host": server.ip().to_string(),
        "port": server.port(),
        "channels": c.channels.len(),
        "state": connection_state(c, alarm_on),
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "ssl": false,
        "frame_max": c.frame_max,
        "connected_at": c.opened_at_ms,
        "recv_oct": c.traffic.0,
        "send_oct": c.traffic.1,
        "client_properties": table_to_json(&c.client_properties),
    });
    if let (Some(name), Some(map)) = (user_provided_name, out.as_object_mut()) {
        map.insert("user_provided_name".to_owned(), json!(name));
    }
    out
}

/// A channel as `/api/channels` shows it.
pub fn channel(
    c: &ConnectionInfo,
    ch: &ChannelInfo,
    server: std::net::SocketAddr,
    (consumers, unacked): (usize, u64),
    node: &str,
) -> Json {
    let conn_name = connection_name(c, server);
    json!({
        "name": format!("{conn_name} ({})", ch.number),
        "number": ch.number,
        "node": node,
        "vhost": c.vhost,
        "user": c.user,
        "connection_details": {
            "name": conn_name,
            "peer_host": c.peer.ip().to_string(),
            "peer_port": c.peer.port(),
        },
        "confirm": ch.confirm,
        "transactional": ch.transactional,
        "consumer_count": consumers,
        "messages_unacknowledged": unacked,
        // No `messages_unconfirmed`: confirms are encoded as soon as a publish is routed and
        // held in the connection's outbox until the log is durable, and no per-channel count
        // of them is kept, so any number here would be made up.
        "state": "running",
    })
}

/// How to show a message body in `/get`: RabbitMQ's `encoding` (`auto` or `base64`) and
/// `truncate` (bytes kept).
pub fn payload(body: &[u8], encoding: &str, truncate: Option<usize>) -> (String, &'static str) {
    let body = match truncate {
        Some(n) if n < body.len() => body.get(..n).unwrap_or(body),
        _ => body,
    };
    if encoding == "auto"
        && let Ok(text) = std::str::from_utf8(body)
    {
        return (text.to_owned(), "string");
    }
    (
        base64::engine::general_purpose::STANDARD.encode(body),
        "base64",
    )
}

/// A message's properties as `/get` shows them (only the ones set).
pub fn properties(p: &Properties) -> Json {
    let mut map = Map::new();
    let mut put = |k: &str, v: Json| {
        map.insert(k.to_owned(), v);
    };
    if let Some(v) = &p.content_type {
        put("content_type", json!(v));
    }
    if let Some(v) = &p.content_encoding {
        put("content_encoding", json!(v));
    }
    if let Some(v) = &p.headers {
        put("headers", table_to_json(v));
    }
    if let Some(v) = p.delivery_mode {
        put("delivery_mode", json!(v));
    }
    if let Some(v) = p.priority {
        put("priority", json!(v));
    }
    if let Some(v) = &p.correlation_id {
        put("correlation_id", json!(v));
    }
    if let Some(v) = &p.reply_to {
        put("reply_to", json!(v));
    }
    if let Some(v) = &p.expiration {
        put("expiration", json!(v));
    }
    if let Some(v) = &p.message_id {
        put("message_id", json!(v));
    }
    if let Some(v) = p.timestamp {
        put("timestamp", json!(v));
    }
    if let Some(v) = &p.kind {
        put("type", json!(v));
    }
    if let Some(v) = &p.user_id {
        put("user_id", json!(v));
    }
    if let Some(v) = &p.app_id {
        put("app_id", json!(v));
    }
    Json::Object(map)
}

/// One message of a `/get` answer.
pub fn message(
    m: &Message,
    redelivered: bool,
    message_count: u64,
    encoding: &str,
    truncate: Option<usize>,
) -> Json {
    let (payload, payload_encoding) = payload(&m.body, encoding, truncate);
    json!({
        "payload_bytes": m.body.len(),
        "redelivered": redelivered,
        "exchange": m.exchange,
        "routing_key": m.routing_key,
        "message_count": message_count,
        "properties": properties(&m.properties),
        "payload": payload,
        "payload_encoding": payload_encoding,
    })
}

/// Message properties from the management API's `properties` object (RabbitMQ's names; the
/// inverse of [`properties`]). An unknown key is ignored, as RabbitMQ does.
///
/// # Errors
/// The name of a property whose value has the wrong type.
pub fn properties_from_json(json: &Json) -> Result<Properties, &'static str> {
    let mut p = Properties::default();
    let Json::Object(map) = json else {
        return Ok(p);
    };
    let text = |k: &'static str| -> Result<Option<String>, &'static str> {
        match map.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(k),
        }
    };
    let int = |k: &'static str| -> Result<Option<u64>, &'static str> {
        match map.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .map(Some)
                .ok_or(k),
        }
    };
    let small = |k: &'static str| -> Result<Option<u8>, &'static str> {
        int(k)?.map(|n| u8::try_from(n).map_err(|_| k)).transpose()
    };
    p.content_type = text("content_type")?;
    p.content_encoding = text("content_encoding")?;
    p.headers = match map.get("headers") {
        None | Some(Json::Null) => None,
        Some(h @ Json::Object(_)) => Some(json_to_table(h).map_err(|_| "headers")?),
        Some(_) => return Err("headers"),
    };
    p.delivery_mode = small("delivery_mode")?;
    p.priority = small("priority")?;
    p.correlation_id = text("correlation_id")?;
    p.reply_to = text("reply_to")?;
    p.expiration = text("expiration")?;
    p.message_id = text("message_id")?;
    p.timestamp = int("timestamp")?;
    p.kind = text("type")?;
    p.user_id = text("user_id")?;
    p.app_id = text("app_id")?;
    Ok(p)
}
