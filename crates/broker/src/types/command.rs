//! Commands in: what the server (or the admin API) asks of the broker, with the AMQP method
//! fields each needs.

use bytes::Bytes;

use super::ids::{ChanRef, ConnId, MessageId};
use super::message::Properties;
use crate::value::FieldTable;

/// `exchange.declare`.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the flags of AMQP's exchange.declare"
)]
pub struct ExchangeDeclare {
    /// Virtual host.
    pub vhost: String,
    /// Exchange name.
    pub exchange: String,
    /// Type name as sent by the client (`direct`, `topic`, `x-delayed-message`, ...).
    pub kind: String,
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last binding (as source) goes.
    pub auto_delete: bool,
    /// Clients may not publish to it.
    pub internal: bool,
    /// Arguments (`alternate-exchange`, `x-delayed-type`).
    pub arguments: FieldTable,
}

/// `queue.declare`.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the flags of AMQP's queue.declare"
)]
pub struct QueueDeclare {
    /// Virtual host.
    pub vhost: String,
    /// Queue name; empty asks for a server-named queue (`amq.gen-...`).
    pub queue: String,
    /// Only check that it exists (404 if not).
    pub passive: bool,
    /// Survives a restart.
    pub durable: bool,
    /// Owned by `owner`, deleted when it closes.
    pub exclusive: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Arguments (`x-message-ttl`, `x-expires`, ...), validated here.
    pub arguments: FieldTable,
    /// The declaring connection (None for the admin API; then `exclusive` is refused).
    pub owner: Option<ConnId>,
}

/// `basic.publish` with its content.
#[derive(Debug, Clone, PartialEq)]
pub struct Publish {
    /// Virtual host.
    pub vhost: String,
    /// Exchange name ("" = default exchange).
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Return the message (312 `NO_ROUTE`) if it reaches no queue.
    pub mandatory: bool,
    /// The properties.
    pub properties: Properties,
    /// The body.
    pub body: Bytes,
}

/// What a policy applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApplyTo {
    /// Queues only.
    Queues,
    /// Exchanges only.
    Exchanges,
    /// Both.
    All,
}

/// A policy as given by an operator (S-POL-1, S-POL-4). `definition` is JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// Policy name.
    pub name: String,
    /// Regular expression matched (unanchored, as RabbitMQ) against entity names.
    pub pattern: String,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Higher wins (S-POL-2).
    pub priority: i32,
    /// A JSON object with the keys `message-ttl`, `expires`, `dead-letter-exchange`,
    /// `dead-letter-routing-key`, `max-length`, `max-length-bytes`, `overflow`, `delivery-limit`.
    pub definition: String,
}

/// A command from the server (or admin API) to the broker. `now` is passed beside it. The
/// publish variants hold their [`Publish`] unboxed: a publish is the common command, and
/// boxing it would cost an allocation each.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Create a virtual host (idempotent).
    VhostAdd {
        /// Name.
        vhost: String,
    },
    /// Delete a virtual host and everything in it.
    VhostDelete {
        /// Name.
        vhost: String,
    },
    /// A connection opened on `vhost`.
    ConnectionOpen {
        /// Connection.
        conn: ConnId,
        /// Its virtual host (must exist: 530 otherwise).
        vhost: String,
    },
    /// A connection closed: its unacked messages are requeued, its consumers cancelled, its
    /// exclusive queues deleted.
    ConnectionClose {
        /// Connection.
        conn: ConnId,
    },
    /// A channel opened.
    ChannelOpen {
        /// Channel.
        chan: ChanRef,
    },
    /// A channel closed: its unacked messages are requeued (S-TTL-7), its consumers cancelled.
    ChannelClose {
        /// Channel.
        chan: ChanRef,
    },
    /// Pause (`active = false`) or resume deliveries to a channel: `channel.flow` from the
    /// client, or the server's socket being full. Paused channels get no deliveries; messages
    /// wait in their queues, so nothing grows without bound.
    ChannelFlow {
        /// Channel.
        chan: ChanRef,
        /// Deliveries allowed.
        active: bool,
    },
    /// `basic.qos`: `global = false` sets the limit for consumers started later on this
    /// channel; `global = true` sets a limit shared by all consumers of the channel (RabbitMQ
    /// 3.x's reading). 0 = unlimited.
    Qos {
        /// Channel.
        chan: ChanRef,
        /// Unacked messages allowed.
        prefetch_count: u16,
        /// Per channel rather than per consumer.
        global: bool,
    },
    /// `exchange.declare`.
    ExchangeDeclare(ExchangeDeclare),
    /// `exchange.delete`.
    ExchangeDelete {
        /// Virtual host.
        vhost: String,
        /// Exchange.
        exchange: String,
        /// Refuse (406) if it has bindings as source.
        if_unused: bool,
    },
    /// `exchange.bind` (destination <- source) or `exchange.unbind` when `bind` is false.
    ExchangeBind {
        /// Virtual host.
        vhost: String,
        /// Destination exchange.
        destination: String,
        /// Source exchange.
        source: String,
        /// Binding key.
        routing_key: String,
        /// Binding arguments.
        arguments: FieldTable,
        /// True for bind, false for unbind.
        bind: bool,
    },
    /// `queue.declare`.
    QueueDeclare(QueueDeclare),
    /// `queue.bind` or, when `bind` is false, `queue.unbind`.
    QueueBind {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Source exchange.
        exchange: String,
        /// Binding key.
        routing_key: String,
        /// Binding arguments.
        arguments: FieldTable,
        /// True for bind, false for unbind.
        bind: bool,
        /// The connection asking (exclusive queues check it).
        owner: Option<ConnId>,
    },
    /// `queue.purge`: removes the ready messages.
    QueuePurge {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// The connection asking.
        owner: Option<ConnId>,
    },
    /// Moves dead-lettered messages of `queue` back to the exchange and routing keys of their
    /// newest `x-death` entry (S-UI-10), each in one `DeadLettered` event; the management
    /// API's dead-letter explorer. Not an AMQP method.
    MoveBack {
        /// Virtual host.
        vhost: String,
        /// The dead-letter queue.
        queue: String,
        /// The ready messages to move, or `None` for every ready message.
        ids: Option<Vec<MessageId>>,
    },
    /// `queue.delete`.
    QueueDelete {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// Refuse (406) if it has consumers.
        if_unused: bool,
        /// Refuse (406) if it has ready messages.
        if_empty: bool,
        /// The connection asking.
        owner: Option<ConnId>,
    },
    /// `basic.consume`.
    Consume {
        /// Channel.
        chan: ChanRef,
        /// Queue.
        queue: String,
        /// Consumer tag; empty asks for a server-generated one (`amq.ctag-...`).
        consumer_tag: String,
        /// Messages count as acked when sent.
        no_ack: bool,
        /// The only consumer of the queue.
        exclusive: bool,
        /// Arguments (`x-priority`, `x-consumer-timeout`), validated here (S-CONS).
        arguments: FieldTable,
    },
    /// `basic.cancel`.
    Cancel {
        /// Channel.
        chan: ChanRef,
        /// Consumer tag.
        consumer_tag: String,
    },
    /// `basic.get`.
    Get {
        /// Channel.
        chan: ChanRef,
        /// Queue.
        queue: String,
        /// Count as acked at once.
        no_ack: bool,
    },
    /// `basic.ack`.
    Ack {
        /// Channel.
        chan: ChanRef,
        /// Delivery tag (0 with `multiple` = all).
        delivery_tag: u64,
        /// Up to and including the tag.
        multiple: bool,
    },
    /// `basic.nack`.
    Nack {
        /// Channel.
        chan: ChanRef,
        /// Delivery tag (0 with `multiple` = all).
        delivery_tag: u64,
        /// Up to and including the tag.
        multiple: bool,
        /// Back to the queue (true) or dead-lettered / discarded (false).
        requeue: bool,
    },
    /// `basic.reject`.
    Reject {
        /// Channel.
        chan: ChanRef,
        /// Delivery tag.
        delivery_tag: u64,
        /// Back to the queue (true) or dead-lettered / discarded (false).
        requeue: bool,
    },
    /// `basic.recover`: every unacked message of the channel goes back to its queue.
    /// `requeue = false` is refused with 540 `NOT_IMPLEMENTED`, as RabbitMQ does.
    Recover {
        /// Channel.
        chan: ChanRef,
        /// Requeue flag as sent.
        requeue: bool,
    },
    /// `basic.publish`.
    Publish(Publish),
    /// `set_policy` (S-POL-4); `operator = true` for an operator policy.
    PolicySet {
        /// Virtual host.
        vhost: String,
        /// The policy.
        policy: PolicySpec,
        /// Operator policy.
        operator: bool,
    },
    /// `clear_policy`.
    PolicyClear {
        /// Virtual host.
        vhost: String,
        /// Policy name.
        name: String,
        /// Operator policy.
        operator: bool,
    },
    /// `add_user` / `change_password` / `set_user_tags`: creates or replaces a user. The
    /// password arrives hashed (`broker::access`); the broker never sees it in clear.
    UserPut {
        /// Name.
        name: String,
        /// RabbitMQ's `password_hash` (base64 of salt ++ SHA-256).
        password_hash: String,
        /// Tags.
        tags: Vec<String>,
    },
    /// `delete_user`: the user and its permissions go (404 if unknown).
    UserDelete {
        /// Name.
        name: String,
    },
    /// `set_permissions`: the user and vhost must exist, each regex must compile (406).
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
    /// `clear_permissions`.
    PermissionClear {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
    },
    /// `set_topic_permissions` (S-TPERM-1): the user and vhost must exist, each regex must
    /// compile (406).
    TopicPermissionSet {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
        /// The exchange it restricts.
        exchange: String,
        /// Write regex (routing keys of publishes).
        write: String,
        /// Read regex (routing keys of bindings).
        read: String,
    },
    /// `clear_topic_permissions`: one exchange's, or (`None`) all of the user's in the vhost.
    TopicPermissionClear {
        /// User.
        user: String,
        /// Virtual host.
        vhost: String,
        /// The exchange, or every exchange.
        exchange: Option<String>,
    },
    /// `basic.publish` on a channel: as [`Command::Publish`], after the channel's direct
    /// reply-to rule (S-DRT-3): a `reply_to` of `amq.rabbitmq.reply-to` becomes the channel's
    /// reply name, or is refused when the channel has no reply consumer.
    PublishOn {
        /// The publishing channel.
        chan: ChanRef,
        /// The publish.
        publish: Publish,
    },
    /// `basic.consume` of the direct reply-to pseudo-queue `amq.rabbitmq.reply-to` (S-DRT-1).
    ReplyConsume {
        /// Channel.
        chan: ChanRef,
        /// Consumer tag; empty asks for a server-generated one.
        consumer_tag: String,
        /// Must be true: a reply consumer cannot acknowledge (406 otherwise).
        no_ack: bool,
        /// The channel's reply name is `amq.rabbitmq.reply-to.<suffix>`. Chosen by the
        /// caller (the server draws it at random, so that a reply name cannot be guessed),
        /// as `now` is: the broker itself stays deterministic.
        suffix: String,
    },
}
