//! What the management queries return: queues, exchanges, bindings, policies, consumers,
//! users and permissions as listed.

use super::command::PolicySpec;
use super::ids::{ChanRef, ConnId, DestName, ExchangeKind};
use super::message::Message;
use crate::args::QueueKind;
use crate::value::FieldTable;

/// Counts over every vhost ([`crate::Broker::totals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Queues.
    pub queues: u64,
    /// Exchanges (the predeclared ones included).
    pub exchanges: u64,
    /// Consumers on queues.
    pub consumers: u64,
    /// Ready messages.
    pub ready: u64,
    /// Bytes of the ready messages' bodies.
    pub ready_bytes: u64,
    /// Delivered messages not yet acknowledged.
    pub unacked: u64,
}

/// A queue as the management API lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    /// Virtual host.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Durable.
    pub durable: bool,
    /// Exclusive owner.
    pub exclusive_owner: Option<ConnId>,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
    /// The policy that applies, if any.
    pub policy: Option<String>,
    /// The operator policy that applies, if any.
    pub operator_policy: Option<String>,
    /// Ready messages.
    pub ready: u64,
    /// Delivered, unacked messages.
    pub unacked: u64,
    /// Body bytes of ready messages.
    pub ready_bytes: u64,
    /// Body bytes of delivered, unacked messages (counted as they come and go: a listing
    /// costs nothing per message).
    pub unacked_bytes: u64,
    /// Consumers.
    pub consumers: u32,
    /// Messages waiting to be dead-lettered (S-QQ-10; RabbitMQ's `messages_dlx`).
    pub dead_letter_held: u64,
    /// Their body bytes (`message_bytes_dlx`).
    pub dead_letter_held_bytes: u64,
    /// The queue type (S-QQ-1).
    pub kind: QueueKind,
    /// The highest priority of a priority queue (S-PRIO-1: `x-max-priority`, at least 1);
    /// `None` for a plain queue.
    pub max_priority: Option<u8>,
    /// Messages in and out since the broker started (S-MGMT-8).
    pub stats: QueueStats,
}

impl QueueInfo {
    /// The priority this queue files `message` under (S-PRIO-2: none is 0, above the
    /// maximum is the maximum); `None` in a plain queue.
    pub fn priority_of(&self, message: &Message) -> Option<u8> {
        let max = self.max_priority?;
        Some(message.properties.priority.unwrap_or(0).min(max))
    }
}

/// A queue's message counts since the broker started (not kept across a restart), bumped
/// where the broker already holds the queue: RabbitMQ's per-queue `message_stats`
/// (S-MGMT-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Messages that entered the queue (published or dead-lettered into it).
    pub publish: u64,
    /// Messages handed out, to consumers and by `basic.get`.
    pub deliver_get: u64,
    /// Of those, handed out flagged `redelivered`.
    pub redeliver: u64,
    /// Messages acknowledged by `basic.ack`.
    pub ack: u64,
}

/// An exchange's message counts since the broker started (S-MGMT-8), kept in cells so that
/// the publish path bumps them through the shared reference it already holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    /// Messages published to the exchange.
    pub publish_in: std::cell::Cell<u64>,
    /// Of those, messages it routed to at least one queue.
    pub publish_out: std::cell::Cell<u64>,
}

impl ExchangeStats {
    /// Counts one publish, routed or not.
    pub fn count(&self, routed: bool) {
        self.publish_in.set(self.publish_in.get() + 1);
        self.publish_out
            .set(self.publish_out.get() + u64::from(routed));
    }
}

/// An exchange as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeInfo {
    /// Virtual host.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Type.
    pub kind: ExchangeKind,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Internal.
    pub internal: bool,
    /// Arguments.
    pub arguments: FieldTable,
    /// Messages in and out since the broker started (S-MGMT-8).
    pub stats: ExchangeStats,
}

/// A binding as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingInfo {
    /// Source exchange.
    pub source: String,
    /// Destination.
    pub destination: DestName,
    /// Key.
    pub routing_key: String,
    /// Arguments.
    pub arguments: FieldTable,
}

/// A policy as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyInfo {
    /// Virtual host.
    pub vhost: String,
    /// The policy as set.
    pub policy: PolicySpec,
    /// Operator policy.
    pub operator: bool,
}

/// A consumer as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerInfo {
    /// Channel.
    pub chan: ChanRef,
    /// Tag.
    pub consumer_tag: String,
    /// Queue.
    pub queue: String,
    /// `no_ack`.
    pub no_ack: bool,
    /// Exclusive.
    pub exclusive: bool,
    /// Its prefetch limit (0 = none).
    pub prefetch_count: u16,
    /// Messages it holds unacked.
    pub unacked: u32,
    /// The `basic.consume` arguments (`x-priority`, ...).
    pub arguments: FieldTable,
    /// It receives messages: always, unless it waits behind a single active consumer
    /// (S-CONS-7).
    pub active: bool,
    /// RabbitMQ's `activity_status`: `up`, `single_active` or `waiting` (S-CONS-7).
    pub activity_status: &'static str,
}

/// A user as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// Name.
    pub name: String,
    /// `base64(salt ++ sha256(salt ++ password))`, RabbitMQ's `password_hash` (empty: the
    /// user cannot log in with a password, as RabbitMQ's passwordless users).
    pub password_hash: String,
    /// Tags (`administrator`, `management`, `monitoring`, `policymaker`, or any other word).
    pub tags: Vec<String>,
}

/// A user's topic permission on one topic exchange of one vhost (RabbitMQ's
/// `set_topic_permissions`, S-TPERM-1): write and read regular expressions matched
/// (unanchored) against routing keys; an empty one matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPermissionInfo {
    /// The user.
    pub user: String,
    /// The vhost.
    pub vhost: String,
    /// The topic exchange it restricts.
    pub exchange: String,
    /// Matched against the routing key of a publish to the exchange (S-TPERM-2).
    pub write: String,
    /// Matched against the routing key of a binding from the exchange (S-TPERM-3).
    pub read: String,
}

/// A user's permissions on one vhost (RabbitMQ's configure, write, read): each a regular
/// expression matched (unanchored, as RabbitMQ) against resource names; an empty one matches
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionInfo {
    /// The user.
    pub user: String,
    /// The vhost.
    pub vhost: String,
    /// Declare and delete.
    pub configure: String,
    /// Publish to, bind to.
    pub write: String,
    /// Consume from, get from, purge, bind from.
    pub read: String,
}
