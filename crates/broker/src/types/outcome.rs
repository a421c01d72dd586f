//! Outcomes out: the method reply, the effects the server carries out (deliveries, returns,
//! cancels, deletions, deaths) and the events for the store, gathered in one [`Outcome`].

use std::sync::Arc;

use super::death::DeathReason;
use super::event::Event;
use super::ids::{ChanRef, DeliveryTag, MessageId};
use super::message::Message;
use crate::args::QueueKind;
use crate::error::BrokerError;

/// A message handed to a consumer (`basic.deliver`).
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The channel.
    pub chan: ChanRef,
    /// The consumer.
    pub consumer_tag: Arc<str>,
    /// Per-channel tag.
    pub delivery_tag: DeliveryTag,
    /// Delivered (or possibly delivered) before.
    pub redelivered: bool,
    /// Times it came back to the queue (RabbitMQ's `x-delivery-count`); 0 on first delivery.
    pub delivery_count: u32,
    /// The `x-delivery-count` header to add (S-QQ-9): on a quorum queue, once the message
    /// came back at least once; `None` otherwise.
    pub count_header: Option<u32>,
    /// The queue it came from.
    pub queue: Arc<str>,
    /// That queue's type (the server labels its delivery counters with it).
    pub queue_kind: QueueKind,
    /// The message (its exchange and routing key are the ones to put in `basic.deliver`).
    pub message: Arc<Message>,
}

/// A `basic.get` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct GetOk {
    /// Per-channel tag (0 would never be used; tags start at 1).
    pub delivery_tag: DeliveryTag,
    /// Delivered before.
    pub redelivered: bool,
    /// Times it came back to the queue.
    pub delivery_count: u32,
    /// The `x-delivery-count` header to add, as [`Delivery::count_header`].
    pub count_header: Option<u32>,
    /// The queue's type, as [`Delivery::queue_kind`].
    pub queue_kind: QueueKind,
    /// Ready messages left in the queue.
    pub message_count: u32,
    /// The message.
    pub message: Arc<Message>,
}

/// What happened to a publish (S-LEN-2: `refused` means nack under confirms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PublishResult {
    /// It reached at least one queue (or was scheduled).
    pub routed: bool,
    /// At least one queue refused it (`reject-publish[-dlx]`): the server nacks it.
    pub refused: bool,
    /// A queue it entered is behind its consumers (S-FLOW-1): the server reads the
    /// publishing connection no further until [`crate::Broker::flow_released`] names it.
    pub flow: bool,
}

/// The data of a method reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Reply {
    /// Nothing beyond "ok".
    #[default]
    Ok,
    /// `queue.declare-ok`.
    QueueDeclareOk {
        /// The queue name (server-generated if it was empty).
        queue: String,
        /// Ready messages.
        message_count: u32,
        /// Consumers.
        consumer_count: u32,
    },
    /// `queue.purge-ok`.
    PurgeOk {
        /// Messages removed.
        message_count: u32,
    },
    /// `queue.delete-ok`.
    DeleteOk {
        /// Messages removed.
        message_count: u32,
    },
    /// `basic.consume-ok`.
    ConsumeOk {
        /// The consumer tag (generated if it was empty).
        consumer_tag: String,
    },
    /// `basic.cancel-ok` (also sent for an unknown tag, as RabbitMQ does).
    CancelOk {
        /// The consumer tag.
        consumer_tag: String,
    },
    /// `basic.get-ok`.
    GetOk(GetOk),
    /// `basic.get-empty`.
    GetEmpty,
    /// The publish's fate.
    Published(PublishResult),
    /// A move back out of a dead-letter queue (S-UI-10): what moved, what stayed and why.
    MovedBack {
        /// The messages moved (their ids in the dead-letter queue), in the order asked.
        moved: Vec<MessageId>,
        /// The messages left where they were, each with the reason.
        skipped: Vec<(MessageId, String)>,
    },
}

/// Why a queue went away on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueDeletedReason {
    /// Deleted by `queue.delete` or a vhost delete.
    Deleted,
    /// Its last consumer went (`auto-delete`).
    AutoDelete,
    /// Its lease ran out (S-QEXP).
    Expired,
    /// Its exclusive owner closed.
    OwnerClosed,
}

/// Something the server must do or tell a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// `basic.deliver` to a consumer.
    Deliver(Delivery),
    /// `basic.return` of an unroutable mandatory message.
    Return {
        /// Reply code (312 `NO_ROUTE`).
        reply_code: u16,
        /// Reply text (`NO_ROUTE`).
        reply_text: String,
        /// Exchange published to.
        exchange: String,
        /// Routing key.
        routing_key: String,
        /// The message.
        message: Arc<Message>,
    },
    /// `basic.cancel` sent by the server (its queue was deleted).
    ConsumerCancelled {
        /// Channel.
        chan: ChanRef,
        /// Consumer tag.
        consumer_tag: Arc<str>,
    },
    /// A queue was deleted.
    QueueDeleted {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Why.
        reason: QueueDeletedReason,
    },
    /// An exchange was deleted (auto-delete or delete).
    ExchangeDeleted {
        /// Virtual host.
        vhost: String,
        /// Exchange.
        exchange: String,
    },
    /// A message left a queue without an ack: expired, rejected, over the limit.
    MessageDied {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// The message.
        id: MessageId,
        /// Why.
        reason: DeathReason,
        /// Where it went: republished to the dead-letter exchange and reaching `targets`
        /// queues, or dropped (no dead-letter exchange, exchange missing (S-DLX-4), cycle
        /// (S-DLX-6)).
        fate: DeathFate,
    },
    /// A delivery on `chan` stayed unacknowledged past its consumer timeout (S-CONS-8): the
    /// server closes the channel with `error` (406) and then sends `ChannelClose`, which
    /// requeues its unacked messages. The broker has changed nothing yet.
    ChannelTimedOut {
        /// The channel.
        chan: ChanRef,
        /// The close to send, with RabbitMQ's text.
        error: BrokerError,
    },
    /// A queue was declared, or a policy set, with an argument or key wharf accepts and does
    /// nothing with, as RabbitMQ does on a single node (`x-queue-mode`, `x-queue-version`, the policy keys
    /// `queue-mode`, `queue-version`: S-PRIO-8; the leader locators, in-memory limits and a
    /// quorum queue's `reject-publish-dlx`: S-QQ-6, S-QQ-8): worth a warning.
    ArgumentIgnored {
        /// Virtual host.
        vhost: String,
        /// What carried it, in RabbitMQ's words: `queue 'q'` or `policy 'p'`.
        what: String,
        /// The argument's or key's name.
        argument: String,
    },
}

/// What became of a dead message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathFate {
    /// The queue has no dead-letter exchange: discarded.
    Discarded,
    /// Dead-lettered into this many queues (0: routed nowhere or cycle).
    DeadLettered {
        /// Queues reached.
        targets: u32,
    },
    /// The dead-letter exchange does not exist (S-DLX-4): dropped and counted.
    ExchangeMissing,
    /// At-least-once (S-QQ-10): it could not be dead-lettered now, so it waits in its queue.
    Held,
}

/// Everything a command (or a timer) produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Durable facts for the store, in order.
    pub events: Vec<Event>,
    /// Effects for the server, in order.
    pub effects: Vec<Effect>,
    /// The method reply's data.
    pub reply: Reply,
}

impl Outcome {
    /// The deliveries among the effects.
    pub fn deliveries(&self) -> impl Iterator<Item = &Delivery> {
        self.effects.iter().filter_map(|e| match e {
            Effect::Deliver(d) => Some(d),
            _ => None,
        })
    }

    /// The publish result, if this was a publish.
    pub fn published(&self) -> Option<PublishResult> {
        match self.reply {
            Reply::Published(p) => Some(p),
            _ => None,
        }
    }
}
