//! `channel.open`, `channel.close`, `channel.close-ok`, `channel.flow`: channel states, kept
//! by the broker task (`core::ops`); the connection forgets a channel's content assembler on
//! a close. Their replies are the broker task's.

use amq_protocol::protocol::channel;

use super::scope::Method;
use crate::core::Op;

/// A channel-class method received on an open channel.
pub(super) fn from_wire(m: channel::AMQPMethod) -> Method {
    Method::Op(match m {
        channel::AMQPMethod::Open(_) => Op::Open,
        channel::AMQPMethod::Close(_) => Op::Close,
        channel::AMQPMethod::CloseOk(_) => Op::CloseOk,
        channel::AMQPMethod::Flow(f) => Op::Flow(f.active),
        _ => return Method::Unimplemented,
    })
}
