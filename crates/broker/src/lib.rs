//! The broker model: virtual hosts, exchanges, queues, bindings, consumers, message TTL, queue
//! expiry, dead-lettering, length limits, policies, scheduled messages.
//!
//! Pure and deterministic: no tokio, no sockets, no files, no clock. Time comes in as `now`
//! (milliseconds since the Unix epoch). Commands go in; durable events (for `store`) and effects
//! (for `server`) come out. Must not depend on `protocol`, `wal`, `store` or `server`.
//!
//! # API
//!
//! - [`Broker::new`] makes an empty broker with the vhost `/` and its predeclared exchanges
//!   (`""`, `amq.direct`, `amq.fanout`, `amq.topic`, `amq.headers`, `amq.match`).
//! - [`Broker::handle`]`(cmd, now_ms) -> Result<Outcome, BrokerError>`: one [`Command`] in,
//!   one [`Outcome`] out. The server sends the method reply (`Outcome::reply`) first, then
//!   the `effects` in order (deliveries, returns, server-sent cancels, deletions, deaths),
//!   and hands `events` (durable facts, in order) to the store. For a publish the reply is
//!   a [`PublishResult`]: `routed` and `refused` (nack under confirms, S-LEN-2); confirm
//!   only once this outcome's events are durable (S-DUR-3).
//!   An error changes nothing and leaves no events; its [`ErrorKind`] says whether it closes
//!   the channel or the connection, and the server then sends `ChannelClose` /
//!   `ConnectionClose` itself (which requeue that channel's or connection's unacked
//!   messages, S-TTL-7).
//! - Connections are [`ConnId`]s, channels [`ChanRef`] (`ConnId` + [`ChannelId`]); the server
//!   opens them with `ConnectionOpen` / `ChannelOpen` before using them. `ChannelFlow`
//!   pauses deliveries to a channel (client `channel.flow` or a full socket): messages then
//!   wait in their queues, so a slow consumer grows nothing but the queue.
//! - [`Delivery::delivery_count`] is RabbitMQ's `x-delivery-count` (times returned); the
//!   server may add it as a header.
//! - [`Broker::next_deadline`] is when to call [`Broker::expire_due`] next (earliest message
//!   deadline, queue lease or scheduled message); `expire_due(now)` does all due work and
//!   returns its outcome (events to log, effects to send).
//! - Recovery: a fresh broker, [`Broker::apply`] each logged [`Event`] in order (nothing
//!   fires during replay), then [`Broker::recovered`]`(now)` (S-QEXP-4, S-DUR-5, S-DUR-6),
//!   whose outcome's events must be logged like any other.
//!   [`Broker::durable_state`] is the comparable view of what a restart must restore.
//! - [`Broker::check_invariants`] walks everything (tests call it after every step; `handle`
//!   and `expire_due` call it in debug builds).
//! - Queries for management: [`Broker::queues`], [`Broker::exchanges`], [`Broker::bindings`],
//!   [`Broker::policies`], [`Broker::consumers`], [`Broker::ready_messages`],
//!   [`Broker::vhost_names`], [`Broker::dead_letter_dropped`], [`Broker::users`],
//!   [`Broker::permissions`].
//! - Users and permissions (`Command::UserPut` / `UserDelete` / `PermissionSet` /
//!   `PermissionClear`) are durable definitions like vhosts; the broker keeps them, the
//!   server decides with them (authentication, permission regexes).
//!
//! Messages are stored once (`Arc<Message>`) however many queues they enter; a queue entry is
//! 56 bytes (id, a [`MessageRef`], delivery count, flags). A persistent message in a logged
//! queue whose record is durable may be held as a [`StoredMessage`] instead (its content on
//! disk: [`Broker::page_out`] beyond a memory budget, and everything recovery restores); the
//! broker reads it back through the [`MessageLoader`] the store hands it
//! ([`Broker::set_loader`]) when it delivers or dead-letters it, and a failure to read is
//! kept for the server ([`Broker::storage_failure`]), which stops. The store reports where
//! it wrote each message's record and the broker records it ([`Broker::messages_logged`]) and hands it its rule for the
//! size of a message's record ([`RecordSize`], [`Broker::set_record_size`]), by which a
//! persistent message too large to log is refused before anything changes (S-DUR-3). Each
//! queue keeps an index of its ready messages ordered by deadline, so expiry anywhere in a
//! queue costs O(log n) per expired message and never a scan (S-TTL-9). Message ids are assigned when a message first enters
//! its queues (a dead-lettered copy or a due scheduled message gets a fresh one), so queue
//! order is id order and a requeue goes back to its original position.
//!
//! # Modules
//!
//! - `broker/`: [`Broker`]: its state (`mod.rs`, `state.rs`) and one file per domain with
//!   its `impl Broker` block (vhosts, connections, exchanges and bindings, queues, policies,
//!   access, publish, delivery, expiry, dead-lettering, scheduling, replay, recovery, paging,
//!   snapshot, invariants, queries, browse: a page of a queue read without consuming it).
//! - `types/`: the public vocabulary (ids, messages, commands, outcomes, events, query
//!   results, snapshots).
//! - `args/`: queue arguments, expiration, policy definitions, redeclare equivalence;
//!   effective settings.
//! - `queue.rs`: one queue's ready messages and deadline index; `held.rs`: its messages
//!   waiting to be dead-lettered (S-QQ-10).
//! - `routing/`: topic and headers matching.
//! - `value.rs`: AMQP field values and tables; `error.rs`: [`BrokerError`].

mod args;
mod broker;
mod error;
mod held;
mod queue;
mod routing;
mod types;
mod value;

pub use args::{
    DeadLetterStrategy, Overflow, QUORUM_DELIVERY_LIMIT, QueueKind, QueueSettings, noop_policy_key,
    parse_policy, parse_queue_args,
};
pub use broker::{Broker, BrowsedMessage, QueueBrowse, REPLY_QUEUE};
pub use broker::{
    ExpiryHorizon, MessageMatch, QueueSearch, ScheduledFor, ScheduledMessage, ScheduledPage,
};
pub use error::{BrokerError, ErrorKind};
pub use routing::{TopicIndex, topic_matches};
pub use types::{
    ApplyTo, BindingInfo, ChanRef, ChannelId, Command, ConnId, ConsumerInfo, Death, DeathFate,
    DeathReason, DelayedType, Delivery, DeliveryTag, DestName, DurableMessage, DurableState,
    Effect, Event, ExchangeDeclare, ExchangeInfo, ExchangeKind, ExchangeStats, GROUP_LOG_BIT,
    GetOk, HeldDeath, LoggedMessage, Message, MessageId, MessageLoader, MessageRecord, MessageRef,
    Outcome, PageOut, PermissionInfo, Placement, PolicyInfo, PolicySpec, Properties, Publish,
    PublishResult, QueueDeclare, QueueDeletedReason, QueueInfo, QueueSnapshot, QueueStats,
    RecordSize, Reply, SettleKind, Snapshot, SnapshotMessage, StoredAt, StoredEvent, StoredMessage,
    StoredSlot, TopicPermissionInfo, Totals, UserInfo, store_pages,
};
pub use value::{FieldTable, Value};
