//! One place per AMQP method a client sends on a channel (mini-redis's `cmd/`): how it is
//! read off the wire, what it becomes (a channel operation or one broker command, whose
//! permissions the connection checks through `auth::required_permissions`), and the reply
//! frame that answers it once the broker accepted it.
//!
//! - `id.rs`: [`MethodId`], named method ids for close frames and replies.
//! - `scope.rs`: what the families share ([`Scope`], [`Method`]).
//! - `dispatch.rs`: a decoded method to its family, and a reply to its family.
//! - `channel.rs`: `channel.open`, `close`, `close-ok`, `flow`.
//! - `exchange.rs`: `exchange.declare`, `delete`, `bind`, `unbind`.
//! - `queue.rs`: `queue.declare`, `bind`, `unbind`, `purge`, `delete`.
//! - `basic.rs`: `basic.qos`, `consume`, `cancel`, `get`, `ack`, `nack`, `reject`,
//!   `recover`, `recover-async`.
//! - `publish.rs`: `basic.publish` with its content.
//! - `modes.rs`: `confirm.select`, `tx.select`, `tx.commit`, `tx.rollback`.
//!
//! The connection's state machine (handshake, frames, channel states) stays in
//! `connection.rs`; the broker task's side of modes and transactions in `core::ops`.

mod basic;
mod channel;
mod dispatch;
mod exchange;
mod id;
mod modes;
mod publish;
mod queue;
mod scope;

pub(crate) use dispatch::{from_wire, reply};
pub(crate) use id::MethodId;
pub(crate) use publish::from_content as publish_from_content;
pub(crate) use scope::{Method, Scope};
