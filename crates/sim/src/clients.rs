//! The simulated clients: publishers in confirm mode, a consumer of `work` that acks and
//! rejects (with and without requeue), a `basic.get` client of `dead`, and an administrator
//! who changes the TTL policy and (re)declares the leased queue. Each acts through the node
//! exactly as a connection's channel would, and keeps only what a real client knows: its
//! unconfirmed publishes and the deliveries it holds.

use std::collections::BTreeMap;

use bytes::Bytes;
use wharf_broker::{
    ApplyTo, ChanRef, Command, FieldTable, PolicySpec, Properties, Publish, QueueDeclare, Value,
};

use crate::model::{DEAD, LEASE, LEASE_MS, TTL, TTL_QUEUE_MS, WORK};

/// Connection ids of the clients.
pub const PUBLISHERS: [u64; 2] = [1, 2];
/// The consumer of `work`.
pub const CONSUMER: u64 = 3;
/// The `basic.get` client of `dead`.
pub const GETTER: u64 = 4;
/// The administrator (policies, declarations).
pub const ADMIN: u64 = 5;
/// Every client, in order.
pub const CLIENTS: [u64; 5] = [PUBLISHERS[0], PUBLISHERS[1], CONSUMER, GETTER, ADMIN];
/// The consumer's prefetch.
pub const PREFETCH: u16 = 4;

/// A publisher in confirm mode.
#[derive(Debug, Default)]
pub struct Publisher {
    /// The next publish sequence number.
    pub next_seq: u64,
    /// Unconfirmed publishes: sequence number to key (`None`: unroutable).
    pub unconfirmed: BTreeMap<u64, Option<u64>>,
}

impl Publisher {
    /// The connection died: a new channel starts counting again at 1.
    pub fn reset(&mut self) {
        self.next_seq = 1;
        self.unconfirmed.clear();
    }
}

/// A client holding deliveries (delivery tag, key).
#[derive(Debug, Default)]
pub struct Holder {
    /// Held deliveries.
    pub held: Vec<(u64, u64)>,
}

fn chan(conn: u64) -> ChanRef {
    ChanRef::new(conn, 1)
}

fn table(pairs: Vec<(&str, Value)>) -> FieldTable {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn declare(queue: &str, arguments: FieldTable) -> Command {
    Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: queue.into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
        owner: Some(wharf_broker::ConnId(ADMIN)),
    })
}

/// The topology, declared at every start (redeclaring with the same arguments is a no-op):
/// the fanout exchange `dead` bound to the queue `dead`, `work` dead-lettering to it, `ttl`
/// with a message TTL dead-lettering to it.
#[must_use]
pub fn topology() -> Vec<Command> {
    let dlx = || ("x-dead-letter-exchange", Value::long_str("dead"));
    vec![
        Command::ExchangeDeclare(wharf_broker::ExchangeDeclare {
            vhost: "/".into(),
            exchange: "dead".into(),
            kind: "fanout".into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        }),
        declare(DEAD, FieldTable::new()),
        Command::QueueBind {
            vhost: "/".into(),
            queue: DEAD.into(),
            exchange: "dead".into(),
            routing_key: String::new(),
            arguments: FieldTable::new(),
            bind: true,
            owner: Some(wharf_broker::ConnId(ADMIN)),
        },
        declare(WORK, table(vec![dlx()])),
        declare(
            TTL,
            table(vec![
                dlx(),
                (
                    "x-message-ttl",
                    Value::U32(u32::try_from(TTL_QUEUE_MS).unwrap_or(0)),
                ),
            ]),
        ),
    ]
}

/// `lease`, with its lease (S-QEXP-1); declaring it again renews the lease (S-QEXP-2).
#[must_use]
pub fn declare_lease() -> Command {
    let expires = u32::try_from(LEASE_MS).unwrap_or(0);
    declare(LEASE, table(vec![("x-expires", Value::U32(expires))]))
}

/// The consumer's `basic.qos` and `basic.consume` on `work`.
#[must_use]
pub fn consume() -> Vec<Command> {
    vec![
        Command::Qos {
            chan: chan(CONSUMER),
            prefetch_count: PREFETCH,
            global: false,
        },
        Command::Consume {
            chan: chan(CONSUMER),
            queue: WORK.into(),
            consumer_tag: "worker".into(),
            no_ack: false,
            exclusive: false,
            arguments: FieldTable::new(),
        },
    ]
}

/// A persistent publish of `body` to `queue` through the default exchange.
#[must_use]
pub fn publish(queue: &str, body: Vec<u8>, expiration_ms: Option<u64>) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: queue.into(),
        mandatory: false,
        properties: Properties {
            delivery_mode: Some(2),
            expiration: expiration_ms.map(|e| e.to_string()),
            ..Properties::default()
        },
        body: Bytes::from(body),
    })
}

/// `basic.get` (with acks) on `queue`.
#[must_use]
pub fn get(conn: u64, queue: &str) -> Command {
    Command::Get {
        chan: chan(conn),
        queue: queue.into(),
        no_ack: false,
    }
}

/// `basic.ack` of one delivery.
#[must_use]
pub fn ack(conn: u64, tag: u64) -> Command {
    Command::Ack {
        chan: chan(conn),
        delivery_tag: tag,
        multiple: false,
    }
}

/// `basic.reject`.
#[must_use]
pub fn reject(conn: u64, tag: u64, requeue: bool) -> Command {
    Command::Reject {
        chan: chan(conn),
        delivery_tag: tag,
        requeue,
    }
}

/// The policy `p` on `ttl` with a `message-ttl` (S-TTL-11: it applies to queued messages
/// too), or its removal.
#[must_use]
pub fn policy(ttl_ms: Option<u64>) -> Command {
    match ttl_ms {
        Some(ttl) => Command::PolicySet {
            vhost: "/".into(),
            policy: PolicySpec {
                name: "p".into(),
                pattern: "^ttl$".into(),
                apply_to: ApplyTo::Queues,
                priority: 0,
                definition: format!("{{\"message-ttl\": {ttl}}}"),
            },
            operator: false,
        },
        None => Command::PolicyClear {
            vhost: "/".into(),
            name: "p".into(),
            operator: false,
        },
    }
}
