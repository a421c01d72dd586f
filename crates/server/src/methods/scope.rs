//! What the method families share: where a method applies ([`Scope`]) and what it becomes
//! ([`Method`]).

use crate::core::Op;
use wharf_broker::{ChanRef, Command, ConnId};

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
