//! `queue.declare`, `queue.bind`, `queue.unbind`, `queue.purge`, `queue.delete`: each one
//! broker command (the connection owns the exclusive queues it declares), answered with its
//! `-ok` once accepted (unless `nowait`; `queue.unbind` has no `nowait`).

use amq_protocol::protocol::{AMQPClass, queue};

use super::id::MethodId;
use super::scope::{Method, Scope};
use crate::convert::{short, table_from_wire};
use wharf_broker::{self as broker, Command, Reply};

/// A queue-class method.
pub(super) fn from_wire(m: queue::AMQPMethod, scope: &Scope<'_>) -> Method {
    let vhost = scope.vhost.to_owned();
    let owner = scope.owner;
    let (cmd, nowait) = match m {
        queue::AMQPMethod::Declare(d) => (
            Command::QueueDeclare(broker::QueueDeclare {
                vhost,
                queue: d.queue.to_string(),
                passive: d.passive,
                durable: d.durable,
                exclusive: d.exclusive,
                auto_delete: d.auto_delete,
                arguments: table_from_wire(&d.arguments),
                owner,
            }),
            d.nowait,
        ),
        queue::AMQPMethod::Bind(b) => (
            Command::QueueBind {
                vhost,
                queue: b.queue.to_string(),
                exchange: b.exchange.to_string(),
                routing_key: b.routing_key.to_string(),
                arguments: table_from_wire(&b.arguments),
                bind: true,
                owner,
            },
            b.nowait,
        ),
        queue::AMQPMethod::Unbind(b) => (
            Command::QueueBind {
                vhost,
                queue: b.queue.to_string(),
                exchange: b.exchange.to_string(),
                routing_key: b.routing_key.to_string(),
                arguments: table_from_wire(&b.arguments),
                bind: false,
                owner,
            },
            false,
        ),
        queue::AMQPMethod::Purge(p) => (
            Command::QueuePurge {
                vhost,
                queue: p.queue.to_string(),
                owner,
            },
            p.nowait,
        ),
        queue::AMQPMethod::Delete(d) => (
            Command::QueueDelete {
                vhost,
                queue: d.queue.to_string(),
                if_unused: d.if_unused,
                if_empty: d.if_empty,
                owner,
            },
            d.nowait,
        ),
        _ => return Method::Unimplemented,
    };
    Method::Command { cmd, nowait }
}

/// The `-ok` of an accepted queue method, with the counts the broker replied.
pub(super) fn reply(method: MethodId, reply: &Reply) -> Option<AMQPClass> {
    let ok = match (method, reply) {
        (
            MethodId::QUEUE_DECLARE,
            Reply::QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            },
        ) => queue::AMQPMethod::DeclareOk(queue::DeclareOk {
            queue: short(queue),
            message_count: *message_count,
            consumer_count: *consumer_count,
        }),
        (MethodId::QUEUE_BIND, _) => queue::AMQPMethod::BindOk(queue::BindOk {}),
        (MethodId::QUEUE_UNBIND, _) => queue::AMQPMethod::UnbindOk(queue::UnbindOk {}),
        (MethodId::QUEUE_PURGE, Reply::PurgeOk { message_count }) => {
            queue::AMQPMethod::PurgeOk(queue::PurgeOk {
                message_count: *message_count,
            })
        }
        (MethodId::QUEUE_DELETE, Reply::DeleteOk { message_count }) => {
            queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                message_count: *message_count,
            })
        }
        _ => return None,
    };
    Some(AMQPClass::Queue(ok))
}
