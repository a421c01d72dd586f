//! `basic.qos`, `basic.consume`, `basic.cancel`, `basic.get`, `basic.ack`, `basic.nack`,
//! `basic.reject`, `basic.recover`, `basic.recover-async`: each one broker command on the
//! channel. Acks, nacks, rejects and `recover-async` have no reply (sent as `nowait`); the
//! others are answered once accepted. `basic.publish` is in `publish.rs` (it has content).

use amq_protocol::protocol::{AMQPClass, basic};

use super::id::MethodId;
use super::scope::{Method, Scope};
use crate::convert::{short, table_from_wire};
use base64::Engine as _;
use wharf_broker::{Command, REPLY_QUEUE, Reply};

/// A fresh reply-name suffix (S-DRT-2): 16 random bytes, URL-safe base64, so that a reply
/// name cannot be guessed by another client. Empty if the system has no randomness to give
/// (the broker then refuses the consume with 541).
fn reply_suffix() -> String {
    let mut key = [0u8; 16];
    match getrandom::fill(&mut key) {
        Ok(()) => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key),
        Err(_) => String::new(),
    }
}

/// A basic-class method without content.
pub(super) fn from_wire(m: basic::AMQPMethod, scope: &Scope<'_>) -> Method {
    let chan = scope.chan;
    let (cmd, nowait) = match m {
        // amq-protocol drops prefetch_size; the decoder refuses a non-zero one with 540 as
        // RabbitMQ does (S-PROTO-3), so it is 0 here.
        basic::AMQPMethod::Qos(q) => (
            Command::Qos {
                chan,
                prefetch_count: q.prefetch_count,
                global: q.global,
            },
            false,
        ),
        // S-DRT-1: the direct reply-to pseudo-queue is the channel's own consumer.
        basic::AMQPMethod::Consume(c) if c.queue.as_str() == REPLY_QUEUE => (
            Command::ReplyConsume {
                chan,
                consumer_tag: c.consumer_tag.to_string(),
                no_ack: c.no_ack,
                suffix: reply_suffix(),
            },
            c.nowait,
        ),
        basic::AMQPMethod::Consume(c) => (
            Command::Consume {
                chan,
                queue: c.queue.to_string(),
                consumer_tag: c.consumer_tag.to_string(),
                no_ack: c.no_ack,
                exclusive: c.exclusive,
                arguments: table_from_wire(&c.arguments),
            },
            c.nowait,
        ),
        basic::AMQPMethod::Cancel(c) => (
            Command::Cancel {
                chan,
                consumer_tag: c.consumer_tag.to_string(),
            },
            c.nowait,
        ),
        basic::AMQPMethod::Get(g) => (
            Command::Get {
                chan,
                queue: g.queue.to_string(),
                no_ack: g.no_ack,
            },
            false,
        ),
        basic::AMQPMethod::Ack(a) => (
            Command::Ack {
                chan,
                delivery_tag: a.delivery_tag,
                multiple: a.multiple,
            },
            true,
        ),
        basic::AMQPMethod::Nack(n) => (
            Command::Nack {
                chan,
                delivery_tag: n.delivery_tag,
                multiple: n.multiple,
                requeue: n.requeue,
            },
            true,
        ),
        basic::AMQPMethod::Reject(r) => (
            Command::Reject {
                chan,
                delivery_tag: r.delivery_tag,
                requeue: r.requeue,
            },
            true,
        ),
        basic::AMQPMethod::Recover(r) => (
            Command::Recover {
                chan,
                requeue: r.requeue,
            },
            false,
        ),
        basic::AMQPMethod::RecoverAsync(r) => (
            Command::Recover {
                chan,
                requeue: r.requeue,
            },
            true,
        ),
        _ => return Method::Unimplemented,
    };
    Method::Command { cmd, nowait }
}

/// The reply of an accepted basic method: `qos-ok`, `consume-ok`, `cancel-ok`, `get-empty`
/// (a `get-ok` is a delivery, sent by the broker task), `recover-ok`.
pub(super) fn reply(method: MethodId, reply: &Reply) -> Option<AMQPClass> {
    let ok = match (method, reply) {
        (MethodId::BASIC_QOS, _) => basic::AMQPMethod::QosOk(basic::QosOk {}),
        (MethodId::BASIC_CONSUME, Reply::ConsumeOk { consumer_tag }) => {
            basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                consumer_tag: short(consumer_tag),
            })
        }
        (MethodId::BASIC_CANCEL, Reply::CancelOk { consumer_tag }) => {
            basic::AMQPMethod::CancelOk(basic::CancelOk {
                consumer_tag: short(consumer_tag),
            })
        }
        (MethodId::BASIC_GET, Reply::GetEmpty) => basic::AMQPMethod::GetEmpty(basic::GetEmpty {}),
        (MethodId::BASIC_RECOVER, _) => basic::AMQPMethod::RecoverOk(basic::RecoverOk {}),
        _ => return None,
    };
    Some(AMQPClass::Basic(ok))
}
