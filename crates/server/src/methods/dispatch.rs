//! A decoded method to its family's conversion ([`from_wire`]), and a broker reply to its
//! family's reply frame ([`reply`]).

use amq_protocol::protocol::AMQPClass;

use super::id::MethodId;
use super::scope::{Method, Scope};
use super::{basic, channel, exchange, modes, queue};
use wharf_broker::Reply;

/// The conversion of a decoded method received on a channel.
pub(crate) fn from_wire(m: AMQPClass, scope: &Scope<'_>) -> Method {
    match m {
        AMQPClass::Channel(m) => channel::from_wire(m),
        AMQPClass::Exchange(m) => exchange::from_wire(m, scope),
        AMQPClass::Queue(m) => queue::from_wire(m, scope),
        AMQPClass::Basic(m) => basic::from_wire(m, scope),
        AMQPClass::Confirm(m) => modes::confirm_from_wire(&m),
        AMQPClass::Tx(m) => modes::tx_from_wire(&m),
        _ => Method::Unimplemented,
    }
}

/// The reply frame of a method the broker accepted with `reply`, if it has one.
pub(crate) fn reply(method: MethodId, reply: &Reply) -> Option<AMQPClass> {
    match method.class {
        40 => exchange::reply(method),
        50 => queue::reply(method, reply),
        60 => basic::reply(method, reply),
        _ => None,
    }
}
