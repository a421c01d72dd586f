//! The broker's public vocabulary: identifiers, message content, commands in, outcomes out
//! (effects for `server`, durable events for `store`). Plain data; no logic beyond small helpers.
//! Must not depend on anything outside `broker`.

use std::sync::Arc;

use bytes::Bytes;

use crate::value::FieldTable;

/// A client connection, numbered by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A channel number inside one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u16);

/// One channel of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChanRef {
    /// The connection.
    pub conn: ConnId,
    /// The channel inside it.
    pub channel: ChannelId,
}

impl ChanRef {
    /// The channel `channel` of connection `conn`.
    pub fn new(conn: u64, channel: u16) -> Self {
        Self {
            conn: ConnId(conn),
            channel: ChannelId(channel),
        }
    }
}

/// A message, numbered by the broker in publish order (monotonic, never reused, survives
/// recovery through the events). A dead-lettered copy gets a new id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageId(pub u64);

/// A delivery tag: per channel, 1, 2, 3, ... in delivery order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryTag(pub u64);

/// The 14 properties of AMQP 0-9-1's `basic` class.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    /// `content-type`.
    pub content_type: Option<String>,
    /// `content-encoding`.
    pub content_encoding: Option<String>,
    /// `headers`.
    pub headers: Option<FieldTable>,
    /// `delivery-mode`: 2 = persistent (S-DUR-2), anything else transient.
    pub delivery_mode: Option<u8>,
    /// `priority` (kept, not used for ordering).
    pub priority: Option<u8>,
    /// `correlation-id`.
    pub correlation_id: Option<String>,
    /// `reply-to`.
    pub reply_to: Option<String>,
    /// `expiration`: the per-message TTL as a decimal string of milliseconds (S-TTL-2).
    pub expiration: Option<String>,
    /// `message-id`.
    pub message_id: Option<String>,
    /// `timestamp`: seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    /// `type`.
    pub kind: Option<String>,
    /// `user-id`.
    pub user_id: Option<String>,
    /// `app-id`.
    pub app_id: Option<String>,
    /// `cluster-id`.
    pub cluster_id: Option<String>,
}

impl Properties {
    /// True when `delivery-mode` is 2.
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(2)
    }

    /// An upper bound of the bytes the store's record encoding gives these properties
    /// (storage-format.md "Properties": strings as a length and the bytes, tables as a count
    /// and the entries), so that a message whose record could not fit the log is refused
    /// before it changes anything.
    pub fn stored_bytes_bound(&self) -> usize {
        let strings = [
            &self.content_type,
            &self.content_encoding,
            &self.correlation_id,
            &self.reply_to,
            &self.expiration,
            &self.message_id,
            &self.kind,
            &self.user_id,
            &self.app_id,
            &self.cluster_id,
        ];
        let text: usize = strings
            .iter()
            .filter_map(|s| s.as_ref())
            .map(|s| 4 + s.len())
            .sum();
        2 + 2 + 8 + text + self.headers.as_ref().map_or(0, table_bytes_bound)
    }
}

fn table_bytes_bound(t: &FieldTable) -> usize {
    4 + t
        .iter()
        .map(|(k, v)| 2 + k.len() + value_bytes_bound(v))
        .sum::<usize>()
}

fn value_bytes_bound(v: &crate::value::Value) -> usize {
    use crate::value::Value;
    1 + match v {
        Value::ShortStr(s) => 4 + s.len(),
        Value::LongStr(b) | Value::Bytes(b) => 4 + b.len(),
        Value::Array(items) => 4 + items.iter().map(value_bytes_bound).sum::<usize>(),
        Value::Table(t) => table_bytes_bound(t),
        _ => 8,
    }
}

/// A message as the broker holds it: stored once and shared (`Arc`) by every queue it entered.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The broker's id for it.
    pub id: MessageId,
    /// When it entered its queues (ms since the epoch); for a scheduled message the scheduled
    /// time (S-TTL-4). The same for every queue, since routing is one step.
    pub enqueued_at_ms: u64,
    /// Its own TTL parsed from `expiration` (S-TTL-2), if any.
    pub ttl_ms: Option<u32>,
    /// The exchange it was published to (for a dead-lettered copy: the dead-letter exchange).
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its properties.
    pub properties: Properties,
    /// Its body.
    pub body: Bytes,
    /// Where the store wrote its record, once it did (set by `store::Store::log`): lets the
    /// broker drop the content from memory and read it back later (DESIGN "Memory").
    pub stored: StoredSlot,
}

impl Message {
    /// True when `delivery-mode` is 2.
    pub fn is_persistent(&self) -> bool {
        self.properties.is_persistent()
    }

    /// Its body length.
    pub fn body_len(&self) -> u32 {
        u32::try_from(self.body.len()).unwrap_or(u32::MAX)
    }

    /// The reference that stands for it once its content is left on disk: `None` until the
    /// store has written its record.
    pub fn stored_ref(&self) -> Option<(u64, StoredMessage)> {
        let &(lsn, at) = self.stored.0.get()?;
        Some((
            lsn,
            StoredMessage {
                id: self.id,
                enqueued_at_ms: self.enqueued_at_ms,
                ttl_ms: self.ttl_ms,
                body_len: self.body_len(),
                at,
            },
        ))
    }
}

/// Where a message's record is, once written: the record's Lsn (durable once the log's
/// watermark reaches it) and the store's opaque position of it. Set once. Not part of the
/// message's value: a clone starts empty (a copy with another id is another message) and
/// equality ignores it.
#[derive(Debug, Default)]
pub struct StoredSlot(std::sync::OnceLock<(u64, StoredAt)>);

impl StoredSlot {
    /// Records where the message was written (a second call keeps the first).
    pub fn set(&self, lsn: u64, at: StoredAt) {
        let _ = self.0.set((lsn, at));
    }

    /// A slot already filled (a message read back from the store).
    pub fn filled(lsn: u64, at: StoredAt) -> Self {
        Self(std::sync::OnceLock::from((lsn, at)))
    }
}

impl Clone for StoredSlot {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for StoredSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A position in the store, opaque to the broker: the store packs a file and an offset into it.
pub type StoredAt = u64;

/// A persistent message whose content (exchange, routing key, properties, body) is on disk:
/// what memory holds of it (32 bytes), enough for queue order, deadlines and byte counts.
/// Every stored message is persistent (only persistent messages are logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its id.
    pub id: MessageId,
    /// Enqueue time (ms since the epoch).
    pub enqueued_at_ms: u64,
    /// Its own TTL.
    pub ttl_ms: Option<u32>,
    /// Body length in bytes.
    pub body_len: u32,
    /// Where its record is.
    pub at: StoredAt,
}

/// A queued message: in memory, or on disk with a small reference in memory.
#[derive(Debug, Clone)]
pub enum MessageRef {
    /// Content in memory, shared by every queue it is in.
    Loaded(Arc<Message>),
    /// Content on disk (read back through the broker's [`MessageLoader`]).
    Stored(StoredMessage),
}

impl MessageRef {
    /// Its id.
    pub fn id(&self) -> MessageId {
        match self {
            MessageRef::Loaded(m) => m.id,
            MessageRef::Stored(s) => s.id,
        }
    }

    /// Persistent (every stored message is).
    pub fn is_persistent(&self) -> bool {
        match self {
            MessageRef::Loaded(m) => m.is_persistent(),
            MessageRef::Stored(_) => true,
        }
    }

    /// Body length in bytes.
    pub fn body_len(&self) -> u64 {
        u64::from(match self {
            MessageRef::Loaded(m) => m.body_len(),
            MessageRef::Stored(s) => s.body_len,
        })
    }

    /// Enqueue time and own TTL: what its deadline is derived from.
    pub fn timing(&self) -> (u64, Option<u32>) {
        match self {
            MessageRef::Loaded(m) => (m.enqueued_at_ms, m.ttl_ms),
            MessageRef::Stored(s) => (s.enqueued_at_ms, s.ttl_ms),
        }
    }
}

/// Reads a stored message's content back (the store implements it and hands one to the
/// broker; the broker stays free of files).
pub trait MessageLoader: Send + Sync + std::fmt::Debug {
    /// The whole message `stored` stands for.
    ///
    /// # Errors
    /// The record cannot be read or is damaged (the caller stops: S-DUR-7).
    fn load(&self, stored: &StoredMessage) -> Result<Message, String>;
}

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

/// Exchange types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    /// `direct`.
    Direct,
    /// `fanout`.
    Fanout,
    /// `topic`.
    Topic,
    /// `headers`.
    Headers,
    /// `x-delayed-message` (S-SCHED-1); routes as its `x-delayed-type` once the delay passed.
    Delayed(DelayedType),
}

/// The routing type of an `x-delayed-message` exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelayedType {
    /// `direct`.
    Direct,
    /// `fanout`.
    Fanout,
    /// `topic`.
    Topic,
    /// `headers`.
    Headers,
}

impl ExchangeKind {
    /// The type name as AMQP spells it.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::Delayed(_) => "x-delayed-message",
        }
    }
}

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

/// A command from the server (or admin API) to the broker. `now` is passed beside it.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a publish is the common command; boxing it would cost an allocation each"
)]
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
}

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
    /// The queue it came from.
    pub queue: Arc<str>,
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
    /// A persistent message entered a durable queue (or was durably scheduled): confirm only
    /// after this outcome's events are on stable storage (S-DUR-3).
    pub needs_durability: bool,
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

/// Why a message left a queue other than by an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeathReason {
    /// `basic.reject` / `basic.nack` without requeue.
    Rejected,
    /// Its deadline passed.
    Expired,
    /// Length limit.
    Maxlen,
    /// Returned more than `x-delivery-limit` times.
    DeliveryLimit,
}

impl DeathReason {
    /// The reason as written in `x-death`.
    pub fn name(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::Maxlen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
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

/// A binding's destination by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DestName {
    /// A queue.
    Queue(String),
    /// An exchange.
    Exchange(String),
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
    /// Consumers.
    pub consumers: u32,
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
}
