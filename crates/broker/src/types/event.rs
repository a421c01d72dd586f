//! Events: the durable facts the store logs, in order ([`Event`]), and the message events as
//! recovery reads them with the content left on disk ([`StoredEvent`]).

use std::sync::Arc;

use super::command::PolicySpec;
use super::death::DeathReason;
use super::ids::{DestName, ExchangeKind, MessageId};
use super::message::{Message, StoredMessage};
use crate::value::FieldTable;

/// A message event of the log as recovery reads it: the message's content stays on disk.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredEvent {
    /// As [`Event::Published`].
    Published {
        /// Virtual host.
        vhost: String,
        /// The message.
        message: StoredMessage,
        /// Durable queues it entered.
        queues: Vec<String>,
        /// The schedule it ends.
        scheduled: Option<MessageId>,
    },
    /// As [`Event::DeadLettered`].
    DeadLettered {
        /// Virtual host.
        vhost: String,
        /// Source queue, when logged there.
        from: Option<String>,
        /// Its id in the source queue.
        id: MessageId,
        /// The new copy, if it entered a durable queue.
        message: Option<StoredMessage>,
        /// Durable queues it entered.
        targets: Vec<String>,
    },
}

/// A message as logged once (S-DUR-2): everything needed to rebuild it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRecord {
    /// The message (id, enqueue time, own TTL, exchange, key, properties, body).
    pub message: Arc<Message>,
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleKind {
    /// Acked by a consumer (or delivered with `no_ack`).
    Ack,
    /// Expired without a dead-letter exchange.
    Expire,
    /// Dropped otherwise (rejected, maxlen, delivery limit, without a dead-letter exchange;
    /// or dead-lettered to no durable queue).
    Discard,
}

/// A durable fact for the log, in the order it happened. Only durable entities and
/// persistent messages in durable queues appear. Replaying them with `Broker::apply` rebuilds
/// the durable state exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A virtual host was created.
    VhostAdded {
        /// Name.
        vhost: String,
    },
    /// A virtual host was deleted with all it held.
    VhostDeleted {
        /// Name.
        vhost: String,
    },
    /// A durable exchange was declared.
    ExchangeDeclared {
        /// Virtual host.
        vhost: String,
        /// Name.
        exchange: String,
        /// Type.
        kind: ExchangeKind,
        /// Auto-delete.
        auto_delete: bool,
        /// Internal.
        internal: bool,
        /// Arguments.
        arguments: FieldTable,
    },
    /// A durable exchange was deleted (with its bindings).
    ExchangeDeleted {
        /// Virtual host.
        vhost: String,
        /// Name.
        exchange: String,
    },
    /// A durable queue was declared.
    QueueDeclared {
        /// Virtual host.
        vhost: String,
        /// Name.
        queue: String,
        /// Auto-delete.
        auto_delete: bool,
        /// Arguments (already validated).
        arguments: FieldTable,
    },
    /// A durable queue was deleted with its messages (S-QEXP-5 when by lease).
    QueueDeleted {
        /// Virtual host.
        vhost: String,
        /// Name.
        queue: String,
    },
    /// A binding between durable entities was added.
    Bound {
        /// Virtual host.
        vhost: String,
        /// Source exchange.
        source: String,
        /// Destination.
        destination: DestName,
        /// Key.
        routing_key: String,
        /// Arguments.
        arguments: FieldTable,
    },
    /// A binding between durable entities was removed.
    Unbound {
        /// Virtual host.
        vhost: String,
        /// Source exchange.
        source: String,
        /// Destination.
        destination: DestName,
        /// Key.
        routing_key: String,
        /// Arguments.
        arguments: FieldTable,
    },
    /// A policy was set or replaced (S-POL-3).
    PolicySet {
        /// Virtual host.
        vhost: String,
        /// The policy.
        policy: PolicySpec,
        /// Operator policy.
        operator: bool,
    },
    /// A policy was cleared.
    PolicyCleared {
        /// Virtual host.
        vhost: String,
        /// Name.
        name: String,
        /// Operator policy.
        operator: bool,
    },
    /// A persistent message entered durable queues (body logged once). `queues` are in the
    /// order they were entered.
    Published {
        /// Virtual host.
        vhost: String,
        /// The message.
        message: MessageRecord,
        /// Durable queues it entered.
        queues: Vec<String>,
        /// When a scheduled message became due: the id it was scheduled under, whose schedule
        /// this event ends (the routed message gets a new id, so ids stay in queue order).
        scheduled: Option<MessageId>,
    },
    /// A persistent message was accepted by an `x-delayed-message` exchange (S-SCHED-1) and
    /// will be routed at `due_ms`. Its later `Published` event ends the schedule.
    Scheduled {
        /// Virtual host.
        vhost: String,
        /// Exchange.
        exchange: String,
        /// The message (`enqueued_at_ms` = the due time).
        message: MessageRecord,
    },
    /// A scheduled message became due and routed nowhere durable; the schedule ends.
    Unscheduled {
        /// Virtual host.
        vhost: String,
        /// The message.
        id: MessageId,
    },
    /// Messages left a durable queue (a batch).
    Settled {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Messages.
        ids: Vec<MessageId>,
        /// How.
        kind: SettleKind,
    },
    /// Messages were handed to a consumer (so `redelivered` survives a crash, S-DUR-6).
    Delivered {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Messages.
        ids: Vec<MessageId>,
    },
    /// Messages came back to the queue (delivery count + 1, redelivered).
    Returned {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Messages.
        ids: Vec<MessageId>,
    },
    /// One dead-lettering, atomic (S-DLX-7): removes `id` from `from` (if it was logged there)
    /// and enqueues the new copy into the durable `targets`.
    DeadLettered {
        /// Virtual host.
        vhost: String,
        /// Source queue, if the message was logged there.
        from: Option<String>,
        /// The message's id in the source queue.
        id: MessageId,
        /// The new copy with its `x-death` headers, if it entered any durable queue.
        message: Option<MessageRecord>,
        /// Durable queues it entered.
        targets: Vec<String>,
    },
    /// Messages died in a quorum queue with at-least-once dead-lettering and could not be
    /// dead-lettered yet (S-QQ-10): they leave the queue's ready (or unacked) messages and
    /// wait in it, until a `DeadLettered` event naming the queue as its source moves them.
    DeadLetterHeld {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Why they died.
        reason: DeathReason,
        /// When (ms since the Unix epoch; the `x-death` time).
        at_ms: u64,
        /// Messages.
        ids: Vec<MessageId>,
    },
    /// A durable queue's ready messages were purged (the logged ones are listed; messages
    /// held unacked stay).
    Purged {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Messages removed.
        ids: Vec<MessageId>,
    },
    /// A user was created or replaced (never a clear password: its RabbitMQ hash).
    UserPut {
        /// Name.
        name: String,
        /// `base64(salt ++ sha256(salt ++ password))`.
        password_hash: String,
        /// Tags.
        tags: Vec<String>,
    },
    /// A user was deleted with its permissions.
    UserDeleted {
        /// Name.
        name: String,
    },
    /// A user's permissions on a vhost were set or replaced.
    PermissionSet {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
        /// Configure regex.
        configure: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// A user's permissions on a vhost were cleared.
    PermissionCleared {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
    },
    /// A user's topic permission on an exchange was set or replaced (format 3).
    TopicPermissionSet {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
        /// Exchange.
        exchange: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// A user's topic permission on an exchange was cleared (format 3).
    TopicPermissionCleared {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
        /// Exchange.
        exchange: String,
    },
}

impl Event {
    /// The message whose content the event carries (a publish, a schedule, a dead-lettered
    /// copy), if any.
    pub fn message(&self) -> Option<&Arc<Message>> {
        match self {
            Event::Published { message, .. } | Event::Scheduled { message, .. } => {
                Some(&message.message)
            }
            Event::DeadLettered {
                message: Some(message),
                ..
            } => Some(&message.message),
            _ => None,
        }
    }
}
