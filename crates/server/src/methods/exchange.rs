//! `exchange.declare`, `exchange.delete`, `exchange.bind`, `exchange.unbind`: each one broker
//! command, answered with its `-ok` once accepted (unless `nowait`).

use amq_protocol::protocol::{AMQPClass, exchange};

use super::id::MethodId;
use super::scope::{Method, Scope};
use crate::convert::table_from_wire;
use wharf_broker::{self as broker, Command};

/// An exchange-class method.
pub(super) fn from_wire(m: exchange::AMQPMethod, scope: &Scope<'_>) -> Method {
    let vhost = scope.vhost.to_owned();
    let (cmd, nowait) = match m {
        exchange::AMQPMethod::Declare(d) => (
            Command::ExchangeDeclare(broker::ExchangeDeclare {
                vhost,
                exchange: d.exchange.to_string(),
                kind: d.kind.to_string(),
                passive: d.passive,
                durable: d.durable,
                auto_delete: d.auto_delete,
                internal: d.internal,
                arguments: table_from_wire(&d.arguments),
            }),
            d.nowait,
        ),
        exchange::AMQPMethod::Delete(d) => (
            Command::ExchangeDelete {
                vhost,
                exchange: d.exchange.to_string(),
                if_unused: d.if_unused,
            },
            d.nowait,
        ),
        exchange::AMQPMethod::Bind(b) => (
            Command::ExchangeBind {
                vhost,
                destination: b.destination.to_string(),
                source: b.source.to_string(),
                routing_key: b.routing_key.to_string(),
                arguments: table_from_wire(&b.arguments),
                bind: true,
            },
            b.nowait,
        ),
        exchange::AMQPMethod::Unbind(b) => (
            Command::ExchangeBind {
                vhost,
                destination: b.destination.to_string(),
                source: b.source.to_string(),
                routing_key: b.routing_key.to_string(),
                arguments: table_from_wire(&b.arguments),
                bind: false,
            },
            b.nowait,
        ),
        _ => return Method::Unimplemented,
    };
    Method::Command { cmd, nowait }
}

/// The `-ok` of an accepted exchange method.
pub(super) fn reply(method: MethodId) -> Option<AMQPClass> {
    let ok = match method {
        MethodId::EXCHANGE_DECLARE => exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {}),
        MethodId::EXCHANGE_DELETE => exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {}),
        MethodId::EXCHANGE_BIND => exchange::AMQPMethod::BindOk(exchange::BindOk {}),
        MethodId::EXCHANGE_UNBIND => exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {}),
        _ => return None,
    };
    Some(AMQPClass::Exchange(ok))
}
