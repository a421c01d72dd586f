//! The broker's public vocabulary: plain data that crosses its boundary. Commands come in,
//! outcomes (replies, effects for `server`, events for `store`) go out.
//!
//! - `ids.rs`: connection, channel, message and delivery-tag ids; exchange types; binding
//!   destinations by name.
//! - `message.rs`: properties, messages, stored references, the loader of stored messages.
//! - `command.rs`: [`Command`] and the method fields it carries.
//! - `outcome.rs`: [`Outcome`]: replies, effects, deliveries.
//! - `death.rs`: why a message died, a held death, and [`Death`], a message's newest
//!   `x-death` entry.
//! - `event.rs`: [`Event`] (the durable facts) and [`StoredEvent`].
//! - `info.rs`: what the management queries list.
//! - `snapshot.rs`: [`DurableState`] and [`Snapshot`] (checkpoints).

mod command;
mod death;
mod event;
mod ids;
mod info;
mod message;
mod outcome;
mod snapshot;

pub use command::{ApplyTo, Command, ExchangeDeclare, PolicySpec, Publish, QueueDeclare};
pub use death::{Death, DeathReason, HeldDeath};
pub use event::{Event, MessageRecord, SettleKind, StoredEvent};
pub use ids::{
    ChanRef, ChannelId, ConnId, DelayedType, DeliveryTag, DestName, ExchangeKind, MessageId,
};
pub use info::{
    BindingInfo, ConsumerInfo, ExchangeInfo, ExchangeStats, PermissionInfo, PolicyInfo, QueueInfo,
    QueueStats, TopicPermissionInfo, Totals, UserInfo,
};
pub use message::{
    GROUP_LOG_BIT, LoggedMessage, Message, MessageLoader, MessageRef, PageOut, Properties,
    RecordSize, StoredAt, StoredMessage, StoredSlot, store_pages,
};
pub use outcome::{
    DeathFate, Delivery, Effect, GetOk, Outcome, PublishResult, QueueDeletedReason, Reply,
};
pub use snapshot::{
    DurableMessage, DurableState, Placement, QueueSnapshot, Snapshot, SnapshotMessage,
};
