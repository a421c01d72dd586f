//! The broker commands the tests run on a leader's live broker: a quorum queue, persistent
//! publishes, a get on one channel.

use bytes::Bytes;
use wharf_broker::{
    ChanRef, Command, ConnId, FieldTable, Properties, Publish, QueueDeclare, Value,
};

/// The connection and channel the tests consume on.
pub const CONN: u64 = 1;

fn chan() -> ChanRef {
    ChanRef::new(CONN, 1)
}

/// Declares the quorum queue `queue`, with a message TTL if given.
pub fn declare_quorum(queue: &str, ttl_ms: Option<u32>) -> Command {
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type", Value::long_str("quorum"));
    if let Some(ttl) = ttl_ms {
        arguments.insert("x-message-ttl", Value::U32(ttl));
    }
    declare(queue, arguments)
}

/// Declares the durable classic queue `queue`.
pub fn declare_classic(queue: &str) -> Command {
    declare(queue, FieldTable::new())
}

/// Binds `queue` to `exchange` with an empty key.
pub fn bind(queue: &str, exchange: &str) -> Command {
    Command::QueueBind {
        vhost: "/".into(),
        queue: queue.into(),
        exchange: exchange.into(),
        routing_key: String::new(),
        arguments: FieldTable::new(),
        bind: true,
        owner: None,
    }
}

/// Declares the durable queue `queue` with `arguments`.
pub fn declare(queue: &str, arguments: FieldTable) -> Command {
    Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: queue.into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
        owner: None,
    })
}

/// A persistent publish of `body` to `queue` through the default exchange, with a
/// per-message TTL if given.
pub fn publish(queue: &str, body: &str, expiration_ms: Option<u64>) -> Command {
    publish_to("", queue, body, expiration_ms)
}

/// A persistent publish of `body` to `exchange` with `routing_key`, with a per-message TTL if
/// given.
pub fn publish_to(
    exchange: &str,
    routing_key: &str,
    body: &str,
    expiration_ms: Option<u64>,
) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory: false,
        properties: Properties {
            delivery_mode: Some(2),
            expiration: expiration_ms.map(|e| e.to_string()),
            ..Properties::default()
        },
        body: Bytes::from(body.as_bytes().to_vec()),
    })
}

/// Opens the test connection and its channel.
pub fn open() -> Vec<Command> {
    vec![
        Command::ConnectionOpen {
            conn: ConnId(CONN),
            vhost: "/".into(),
        },
        Command::ChannelOpen { chan: chan() },
    ]
}

/// `basic.get` with acks on `queue`.
pub fn get(queue: &str) -> Command {
    Command::Get {
        chan: chan(),
        queue: queue.into(),
        no_ack: false,
    }
}
