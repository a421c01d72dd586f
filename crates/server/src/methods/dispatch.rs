//! A decoded method to its family's conversion ([`from_wire`]), and a broker reply to its
//! family's reply frame ([`reply`]).

use amq_protocol::protocol::AMQPClass;

use super::id::MethodId;
use super::{basic, channel, exchange, modes, queue};
use crate::core::Op;
use wharf_broker::{ChanRef, Command, ConnId, Reply};

/// Where a method applies: the connection's vhost and the channel it came on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    /// The vhost the connection opened.
    pub(crate) vhost: &'a str,
    /// The channel.
    pub(crate) chan: ChanRef,
    /// The connection, as owner of the exclusive queues it declares.
    pub(crate) owner: Option<ConnId>,
}

/// What a client's method asks, in the terms the connection passes on to the broker task.
#[derive(Debug)]
pub(crate) enum Method {
    /// A channel-state or mode operation (`channel.*`, `confirm.select`, `tx.*`).
    Op(Op),
    /// One broker command; the connection checks its permissions before sending it.
    Command {
        /// The command.
        cmd: Command,
        /// No reply wanted.
        nowait: bool,
    },
    /// A method a client does not send on a channel (server-only methods such as
    /// `basic.deliver`, or connection methods): RabbitMQ's "unimplemented method".
    Unimplemented,
}

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
