//! Turns decoded store records into JSON values (the one representation every command
//! prints, as JSON lines or as aligned `key=value` text), and bodies into text, hex or base64.
//! Pure functions over the broker's types; must not read files.

use serde_json::{Map, Value as Json, json};
use wharf_broker::{
    DestName, Event, ExchangeKind, FieldTable, Message, MessageRecord, Properties, SettleKind,
    Value,
};

/// How message bodies are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BodyMode {
    /// As text when the body is printable UTF-8, as hex otherwise.
    Auto,
    /// Always hex.
    Hex,
    /// Always base64.
    Base64,
    /// Not shown (only its size).
    None,
}

/// One AMQP field value as JSON: numbers as numbers, strings as strings when UTF-8 (else
/// `{"bytes_hex": ..}`), tables as objects, arrays as arrays.
pub fn value_json(v: &Value) -> Json {
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
        Value::Decimal { scale, value } => json!({ "decimal": value, "scale": scale }),
        Value::ShortStr(s) => json!(s),
        Value::LongStr(b) => match std::str::from_utf8(b) {
            Ok(s) => json!(s),
            Err(_) => json!({ "bytes_hex": hex(b) }),
        },
        Value::Array(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Timestamp(t) => json!({ "timestamp": t }),
        Value::Table(t) => table_json(t),
        Value::Bytes(b) => json!({ "bytes_hex": hex(b) }),
        Value::Void => Json::Null,
    }
}

/// A field table as a JSON object, in table order.
pub fn table_json(t: &FieldTable) -> Json {
    let mut m = Map::new();
    for (k, v) in t.iter() {
        m.insert(k.to_owned(), value_json(v));
    }
    Json::Object(m)
}

/// The properties that are set, by their AMQP names.
pub fn properties_json(p: &Properties) -> Json {
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Json>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    put("content-type", p.content_type.as_ref().map(|s| json!(s)));
    put(
        "content-encoding",
        p.content_encoding.as_ref().map(|s| json!(s)),
    );
    put("headers", p.headers.as_ref().map(table_json));
    put("delivery-mode", p.delivery_mode.map(|v| json!(v)));
    put("priority", p.priority.map(|v| json!(v)));
    put(
        "correlation-id",
        p.correlation_id.as_ref().map(|s| json!(s)),
    );
    put("reply-to", p.reply_to.as_ref().map(|s| json!(s)));
    put("expiration", p.expiration.as_ref().map(|s| json!(s)));
    put("message-id", p.message_id.as_ref().map(|s| json!(s)));
    put("timestamp", p.timestamp.map(|v| json!(v)));
    put("type", p.kind.as_ref().map(|s| json!(s)));
    put("user-id", p.user_id.as_ref().map(|s| json!(s)));
    put("app-id", p.app_id.as_ref().map(|s| json!(s)));
    put("cluster-id", p.cluster_id.as_ref().map(|s| json!(s)));
    Json::Object(m)
}

/// Puts the body into `m` as `body` (text), `body_hex` or `body_base64`, and always
/// `body_bytes`.
pub fn put_body(m: &mut Map<String, Json>, body: &[u8], mode: BodyMode) {
    m.insert("body_bytes".to_owned(), json!(body.len()));
    match mode {
        BodyMode::None => {}
        BodyMode::Base64 => {
            m.insert("body_base64".to_owned(), json!(base64(body)));
        }
        BodyMode::Hex => {
            m.insert("body_hex".to_owned(), json!(hex(body)));
        }
        BodyMode::Auto => match printable(body) {
            Some(text) => {
                m.insert("body".to_owned(), json!(text));
            }
            None => {
                m.insert("body_hex".to_owned(), json!(hex(body)));
            }
        },
    }
}

/// The body as text when it is UTF-8 without control characters other than whitespace.
fn printable(body: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(body).ok()?;
    s.chars()
        .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
        .then_some(s)
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, to the millisecond
/// (`2026-01-01T00:00:00.000Z`), shown next to every time in milliseconds; `None` past the
/// calendar's range.
pub fn rfc3339(ms: u64) -> Option<String> {
    let nanos = i128::from(ms).checked_mul(1_000_000)?;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()?;
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    t.format(&format).ok()
}

/// [`rfc3339`] of an optional time, as JSON (`null` when there is none).
pub fn rfc3339_json(ms: Option<u64>) -> Json {
    json!(ms.and_then(rfc3339))
}

/// A message as JSON: id, times, TTL, exchange, key, properties, body.
pub fn message_json(msg: &Message, mode: BodyMode) -> Json {
    let mut m = Map::new();
    m.insert("id".to_owned(), json!(msg.id.0));
    m.insert("enqueued_at_ms".to_owned(), json!(msg.enqueued_at_ms));
    m.insert(
        "enqueued_at".to_owned(),
        rfc3339_json(Some(msg.enqueued_at_ms)),
    );
    if let Some(ttl) = msg.ttl_ms {
        m.insert("ttl_ms".to_owned(), json!(ttl));
    }
    m.insert("exchange".to_owned(), json!(msg.exchange));
    m.insert("routing_key".to_owned(), json!(msg.routing_key));
    m.insert("properties".to_owned(), properties_json(&msg.properties));
    put_body(&mut m, &msg.body, mode);
    Json::Object(m)
}

fn record_json(r: &MessageRecord, mode: BodyMode) -> Json {
    message_json(&r.message, mode)
}

fn exchange_kind(k: ExchangeKind) -> String {
    match k {
        ExchangeKind::Delayed(t) => format!("x-delayed-message({t:?})").to_lowercase(),
        other => other.name().to_owned(),
    }
}

fn dest_json(d: &DestName) -> Json {
    match d {
        DestName::Queue(q) => json!({ "queue": q }),
        DestName::Exchange(x) => json!({ "exchange": x }),
    }
}

/// The settle kind's name.
pub fn settle_name(k: SettleKind) -> &'static str {
    match k {
        SettleKind::Ack => "ack",
        SettleKind::Expire => "expire",
        SettleKind::Discard => "discard",
    }
}

fn ids_json(ids: &[wharf_broker::MessageId]) -> Json {
    Json::Array(ids.iter().map(|i| json!(i.0)).collect())
}

/// An event's fields as a JSON object (without its kind, position or Lsn).
#[expect(
    clippy::too_many_lines,
    reason = "one arm per event kind, each a few lines"
)]
pub fn event_json(e: &Event, mode: BodyMode) -> Map<String, Json> {
    let v = match e {
        Event::VhostAdded { vhost } | Event::VhostDeleted { vhost } => json!({ "vhost": vhost }),
        Event::ExchangeDeclared {
            vhost,
            exchange,
            kind,
            auto_delete,
            internal,
            arguments,
        } => json!({ "vhost": vhost, "exchange": exchange, "type": exchange_kind(*kind),
            "auto_delete": auto_delete, "internal": internal, "arguments": table_json(arguments) }),
        Event::ExchangeDeleted { vhost, exchange } => {
            json!({ "vhost": vhost, "exchange": exchange })
        }
        Event::QueueDeclared {
            vhost,
            queue,
            auto_delete,
            arguments,
        } => json!({ "vhost": vhost, "queue": queue, "auto_delete": auto_delete,
            "arguments": table_json(arguments) }),
        Event::QueueDeleted { vhost, queue } => json!({ "vhost": vhost, "queue": queue }),
        Event::Bound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        }
        | Event::Unbound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        } => json!({ "vhost": vhost, "source": source, "destination": dest_json(destination),
            "routing_key": routing_key, "arguments": table_json(arguments) }),
        Event::PolicySet {
            vhost,
            policy,
            operator,
        } => json!({ "vhost": vhost, "name": policy.name, "pattern": policy.pattern,
            "apply_to": format!("{:?}", policy.apply_to).to_lowercase(), "priority": policy.priority,
            "definition": serde_json::from_str::<Json>(&policy.definition)
                .unwrap_or_else(|_| json!(policy.definition)),
            "operator": operator }),
        Event::PolicyCleared {
            vhost,
            name,
            operator,
        } => json!({ "vhost": vhost, "name": name, "operator": operator }),
        Event::Published {
            vhost,
            message,
            queues,
            scheduled,
        } => {
            let mut v = json!({ "vhost": vhost, "queues": queues,
                "message": record_json(message, mode) });
            if let Some(s) = scheduled {
                v["scheduled_as"] = json!(s.0);
            }
            v
        }
        Event::Scheduled {
            vhost,
            exchange,
            message,
        } => json!({ "vhost": vhost, "exchange": exchange, "message": record_json(message, mode) }),
        Event::Unscheduled { vhost, id } => json!({ "vhost": vhost, "id": id.0 }),
        Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        } => {
            json!({ "vhost": vhost, "queue": queue, "how": settle_name(*kind), "ids": ids_json(ids) })
        }
        Event::Delivered { vhost, queue, ids }
        | Event::Returned { vhost, queue, ids }
        | Event::Purged { vhost, queue, ids } => {
            json!({ "vhost": vhost, "queue": queue, "ids": ids_json(ids) })
        }
        Event::DeadLetterHeld {
            vhost,
            queue,
            reason,
            at_ms,
            ids,
        } => json!({ "vhost": vhost, "queue": queue, "reason": reason.name(), "at_ms": at_ms,
            "ids": ids_json(ids) }),
        Event::DeadLettered {
            vhost,
            from,
            id,
            message,
            targets,
        } => {
            let mut v = json!({ "vhost": vhost, "from": from, "id": id.0, "targets": targets });
            if let Some(m) = message {
                v["reason"] = json!(death_reason(&m.message));
                v["message"] = record_json(m, mode);
            }
            v
        }
        // The hash is not the password, but a dump is no place for it either: show only
        // whether one is set and how long it is.
        Event::UserPut {
            name,
            password_hash,
            tags,
        } => json!({ "user": name, "tags": tags,
            "password_hash": format!("<{} chars>", password_hash.len()) }),
        Event::UserDeleted { name } => json!({ "user": name }),
        Event::PermissionSet {
            user,
            vhost,
            configure,
            write,
            read,
        } => json!({ "vhost": vhost, "user": user, "configure": configure, "write": write,
            "read": read }),
        Event::PermissionCleared { user, vhost } => json!({ "vhost": vhost, "user": user }),
        Event::TopicPermissionSet {
            user,
            vhost,
            exchange,
            write,
            read,
        } => json!({ "vhost": vhost, "user": user, "exchange": exchange, "write": write,
            "read": read }),
        Event::TopicPermissionCleared {
            user,
            vhost,
            exchange,
        } => json!({ "vhost": vhost, "user": user, "exchange": exchange }),
    };
    match v {
        Json::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("value".to_owned(), other);
            m
        }
    }
}

/// The reason of the newest `x-death` entry of a dead-lettered copy (`rejected`, `expired`,
/// `maxlen`, `delivery_limit`), if it carries one.
pub fn death_reason(msg: &Message) -> Option<String> {
    let headers = msg.properties.headers.as_ref()?;
    let Some(Value::Array(deaths)) = headers.get("x-death") else {
        return None;
    };
    let Some(Value::Table(first)) = deaths.first() else {
        return None;
    };
    first
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Standard base64 with padding (RFC 4648).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sym = |i: u32| char::from(ALPHABET[(i & 63) as usize]);
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (b(0) << 16) | (b(1) << 8) | b(2);
        out.push(sym(n >> 18));
        out.push(sym(n >> 12));
        out.push(if chunk.len() > 1 { sym(n >> 6) } else { '=' });
        out.push(if chunk.len() > 2 { sym(n) } else { '=' });
    }
    out
}

/// A JSON object as one human line: `key=value` pairs, strings bare when they hold no space
/// or quote, everything else as compact JSON.
pub fn human_pairs(m: &Map<String, Json>) -> String {
    let mut parts = Vec::with_capacity(m.len());
    for (k, v) in m {
        parts.push(format!("{k}={}", human_value(v)));
    }
    parts.join(" ")
}

/// One JSON value for a human line.
pub fn human_value(v: &Json) -> String {
    match v {
        Json::String(s)
            if !s.is_empty()
                && !s.contains(|c: char| c.is_whitespace() || c == '"' || c == '=') =>
        {
            s.clone()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_examples() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn user_records_show_tags_and_permissions_but_not_the_hash() {
        let e = Event::UserPut {
            name: "u".into(),
            password_hash: "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN".into(),
            tags: vec!["administrator".into()],
        };
        let m = event_json(&e, BodyMode::Auto);
        assert_eq!(m["user"], json!("u"));
        assert_eq!(m["tags"], json!(["administrator"]));
        assert_eq!(m["password_hash"], json!("<48 chars>"));
        let e = Event::PermissionSet {
            user: "u".into(),
            vhost: "/".into(),
            configure: ".*".into(),
            write: "^amq\\.default$".into(),
            read: String::new(),
        };
        let m = event_json(&e, BodyMode::Auto);
        assert_eq!(m["vhost"], json!("/"));
        assert_eq!(m["write"], json!("^amq\\.default$"));
        assert_eq!(m["read"], json!(""));
    }

    #[test]
    fn printable_bodies_are_text_and_others_hex() {
        let mut m = Map::new();
        put_body(&mut m, b"hello\n", BodyMode::Auto);
        assert_eq!(m["body"], json!("hello\n"));
        let mut m = Map::new();
        put_body(&mut m, &[0, 0xff], BodyMode::Auto);
        assert_eq!(m["body_hex"], json!("00ff"));
    }
}
