//! The durable state's two forms: [`DurableState`], the comparable view a restart must restore
//! (replay equivalence tests), and [`Snapshot`], the copy a checkpoint encodes, with the
//! [`Placement`] of a message restored from one.

use super::death::HeldDeath;
use super::event::Event;
use super::ids::MessageId;
use super::info::{BindingInfo, ExchangeInfo, PermissionInfo, PolicyInfo, QueueInfo, UserInfo};
use super::message::MessageRef;

/// One persistent message of a durable queue as the log knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableMessage {
    /// Its id.
    pub id: MessageId,
    /// Enqueue time (ms).
    pub enqueued_at_ms: u64,
    /// Deadline in this queue (ms), if any.
    pub deadline_ms: Option<u64>,
    /// Times it came back.
    pub delivery_count: u32,
    /// Delivered before (unacked ones count as delivered).
    pub redelivered: bool,
    /// Waiting to be dead-lettered (S-QQ-10), not ready.
    pub held: Option<HeldDeath>,
}

/// Everything that must survive a restart, in a comparable form (S-DUR-1/2/5).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DurableState {
    /// Vhost names.
    pub vhosts: Vec<String>,
    /// Durable exchanges.
    pub exchanges: Vec<ExchangeInfo>,
    /// Bindings between durable entities, per vhost.
    pub bindings: Vec<(String, BindingInfo)>,
    /// Durable queues with their persistent messages in queue order.
    pub queues: Vec<(QueueInfo, Vec<DurableMessage>)>,
    /// Policies.
    pub policies: Vec<PolicyInfo>,
    /// Durable scheduled messages: (id, due time).
    pub scheduled: Vec<(MessageId, u64)>,
    /// Users, by name.
    pub users: Vec<UserInfo>,
    /// Permissions, by (user, vhost).
    pub permissions: Vec<PermissionInfo>,
}

/// A copy of the durable state taken for a checkpoint: cheap to take in the broker task (the
/// messages are shared `Arc`s, not copied) and `Send`, so it can be encoded on another thread.
/// Replaying `definitions`, then `scheduled`, then every message into its queues (in id order,
/// which is queue order) rebuilds what replaying the log up to the snapshot would (S-DUR-1/2).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Events that declare the durable definitions, in an order `Broker::apply` accepts:
    /// vhosts a fresh broker has but this one deleted, vhosts, then per vhost its durable
    /// exchanges, logged queues, policies and bindings between durable entities.
    pub definitions: Vec<Event>,
    /// `Event::Scheduled` for every durable scheduled message (S-SCHED-1).
    pub scheduled: Vec<Event>,
    /// Every logged queue with its persistent messages (ready and unacked) in queue order.
    pub queues: Vec<QueueSnapshot>,
    /// The id the next new message gets (so ids are never reused across a checkpoint).
    pub next_message_id: u64,
}

/// The persistent messages of one logged queue, in id order (queue order within each
/// priority, S-PRIO-6).
#[derive(Debug, Clone)]
pub struct QueueSnapshot {
    /// Virtual host.
    pub vhost: String,
    /// Queue name.
    pub queue: String,
    /// Its messages, ids strictly increasing.
    pub messages: Vec<SnapshotMessage>,
}

/// One persistent message in one queue, with the per-queue marks replay keeps.
#[derive(Debug, Clone)]
pub struct SnapshotMessage {
    /// The message (in memory, shared with every queue it is in; or its stored reference).
    pub message: MessageRef,
    /// Times it came back to this queue (x-delivery-count).
    pub delivery_count: u32,
    /// Delivered before; unacked messages count as delivered (S-DUR-6).
    pub redelivered: bool,
    /// Waiting to be dead-lettered (S-QQ-10), not ready.
    pub held: Option<HeldDeath>,
}

/// Where a restored message sits: one queue and its marks there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Queue name.
    pub queue: String,
    /// Times it came back to this queue.
    pub delivery_count: u32,
    /// Delivered before.
    pub redelivered: bool,
    /// Waiting to be dead-lettered (S-QQ-10), not ready.
    pub held: Option<HeldDeath>,
}
