//! What the broker holds: its entities (queues, exchanges with their bindings, vhosts,
//! connections, channels, consumers, unacked deliveries, scheduled messages, timers, users and
//! permissions) as plain data. The `impl Broker` blocks of the sibling files change them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::args::{Policy, QueueSettings};
use crate::held::DeadLetterHold;
use crate::queue::{Ready, Taken};
use crate::routing::TopicIndex;
use crate::types::{
    ChanRef, ChannelId, ConnId, ExchangeKind, Message, MessageId, PermissionInfo,
    TopicPermissionInfo, UserInfo,
};
use crate::value::FieldTable;

/// A queue's internal number; never reused, so a stale reference finds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct QueueId(pub(super) u64);

/// An exchange's internal number; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct ExchangeId(pub(super) u64);

/// A binding's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Dest {
    Queue(QueueId),
    Exchange(ExchangeId),
}

/// A consumer of one queue.
#[derive(Debug, Clone)]
pub(super) struct Consumer {
    pub(super) serial: u64,
    pub(super) chan: ChanRef,
    pub(super) tag: Arc<str>,
    pub(super) no_ack: bool,
    pub(super) exclusive: bool,
    /// Per-consumer prefetch limit, fixed at `basic.consume` (0 = none).
    pub(super) prefetch: u16,
    pub(super) unacked: u32,
    /// `x-priority` (S-CONS-1): a queue's consumers are kept highest first.
    pub(super) priority: i64,
    /// `x-consumer-timeout` (S-CONS-8), over the queue's and the server's.
    pub(super) timeout_ms: Option<u64>,
    /// The `basic.consume` arguments, as listed.
    pub(super) arguments: FieldTable,
}

/// One queue. Invariant: `armed_msg` / `armed_lease` are exactly the entries of this queue in
/// `Broker::timers`, and equal `ready.first_deadline()` / `lease_deadline()` after each step.
#[derive(Debug)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent AMQP flags and bookkeeping"
)]
pub(super) struct Queue {
    pub(super) id: QueueId,
    pub(super) vhost: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) durable: bool,
    pub(super) owner: Option<ConnId>,
    pub(super) auto_delete: bool,
    pub(super) arguments: FieldTable,
    pub(super) args: QueueSettings,
    pub(super) policy: Option<String>,
    pub(super) operator_policy: Option<String>,
    pub(super) eff: QueueSettings,
    pub(super) ready: Ready,
    /// Messages waiting to be dead-lettered (S-QQ-10): not ready, not unacked.
    pub(super) held: DeadLetterHold,
    pub(super) unacked: u64,
    /// Body bytes of the `unacked` messages, kept as they come and go so that a listing
    /// reads it instead of walking every channel's held messages.
    pub(super) unacked_bytes: u64,
    /// Highest `priority` first; registration order within a priority (S-CONS-1, S-CONS-5).
    pub(super) consumers: Vec<Consumer>,
    /// Where the round-robin resumes: an index into `consumers`, within one priority.
    pub(super) rr: usize,
    /// With single active consumer (S-CONS-4): the serial of the one consumer that receives.
    pub(super) active: Option<u64>,
    pub(super) had_consumer: bool,
    pub(super) last_used_ms: u64,
    pub(super) armed_msg: Option<u64>,
    pub(super) armed_lease: Option<u64>,
    pub(super) dirty: bool,
    /// Messages in and out since start (S-MGMT-8).
    pub(super) stats: crate::QueueStats,
}

impl Queue {
    /// Its persistent messages are logged: durable and not exclusive (an exclusive queue dies
    /// with its connection, so it never outlives a restart).
    pub(super) fn logged(&self) -> bool {
        self.durable && self.owner.is_none()
    }

    /// When the messages' timer is due: the earliest deadline of a ready message, or the
    /// next retry of the dead-letter hold (S-QQ-10).
    pub(super) fn messages_deadline(&self) -> Option<u64> {
        match (self.ready.first_deadline(), self.held.retry_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the lease runs out (S-QEXP-1/2): unused = no consumers.
    pub(super) fn lease_deadline(&self) -> Option<u64> {
        if self.consumers.is_empty() {
            self.eff
                .expires_ms
                .map(|e| self.last_used_ms.saturating_add(e))
        } else {
            None
        }
    }
}

/// A binding from an exchange.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Binding {
    pub(super) key: String,
    pub(super) dest: Dest,
    pub(super) args: FieldTable,
}

/// One exchange with its outgoing bindings and routing indexes.
#[derive(Debug)]
pub(super) struct Exchange {
    pub(super) id: ExchangeId,
    pub(super) vhost: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) kind: ExchangeKind,
    pub(super) durable: bool,
    pub(super) auto_delete: bool,
    pub(super) internal: bool,
    pub(super) arguments: FieldTable,
    pub(super) alternate: Option<String>,
    pub(super) bindings: Vec<Binding>,
    pub(super) direct: HashMap<String, Vec<Dest>>,
    pub(super) topic: TopicIndex<Dest>,
    /// Messages in and out since start (S-MGMT-8).
    pub(super) stats: crate::ExchangeStats,
}

/// A virtual host's names.
#[derive(Debug, Default)]
pub(super) struct Vhost {
    pub(super) queues: BTreeMap<String, QueueId>,
    pub(super) exchanges: BTreeMap<String, ExchangeId>,
    pub(super) policies: BTreeMap<String, Policy>,
    pub(super) operator_policies: BTreeMap<String, Policy>,
}

/// A delivered, unacked message held by a channel. `consumer` is the consumer's serial
/// (None for `basic.get`).
#[derive(Debug, Clone)]
pub(super) struct Unacked {
    pub(super) queue: QueueId,
    pub(super) taken: Taken,
    pub(super) consumer: Option<u64>,
    /// When it was handed out, and the consumer timeout that applies to it (S-CONS-8).
    pub(super) delivered_ms: u64,
    pub(super) timeout_ms: Option<u64>,
}

/// One open channel.
#[derive(Debug)]
pub(super) struct Channel {
    pub(super) flow: bool,
    pub(super) prefetch: u16,
    pub(super) global_prefetch: u16,
    pub(super) next_tag: u64,
    pub(super) unacked: BTreeMap<u64, Unacked>,
    pub(super) consumer_unacked: u32,
    pub(super) consumers: BTreeMap<Arc<str>, QueueId>,
    /// The armed consumer-timeout timer (S-CONS-8): exactly this channel's entry in
    /// `Broker::timers`.
    pub(super) ack_timer: Option<u64>,
}

/// One open connection.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) vhost: String,
    pub(super) channels: BTreeSet<ChannelId>,
    pub(super) exclusive: BTreeSet<QueueId>,
}

/// A message waiting on an `x-delayed-message` exchange (S-SCHED-1).
#[derive(Debug, Clone)]
pub(super) struct Scheduled {
    pub(super) vhost: String,
    pub(super) exchange: String,
    pub(super) msg: Arc<Message>,
    pub(super) durable: bool,
}

/// What a timer entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Messages(QueueId),
    Lease(QueueId),
    Scheduled(MessageId),
    /// A channel's oldest unacked delivery may have timed out (S-CONS-8).
    AckTimeout(ChanRef),
}

/// The users and permissions of a broker. Invariant: every permission names an existing
/// user and an existing vhost.
#[derive(Debug, Default)]
pub(super) struct Access {
    pub(super) users: BTreeMap<String, UserInfo>,
    /// Keyed by (user, vhost).
    pub(super) permissions: BTreeMap<(String, String), PermissionInfo>,
    /// Topic permissions, keyed by (user, vhost, exchange); same invariant (S-TPERM-1).
    pub(super) topic: BTreeMap<(String, String, String), TopicPermissionInfo>,
    /// A user was ever defined (put or deleted) in this broker's history: the default user
    /// is seeded only while this is false, so an operator's delete of `guest` sticks.
    pub(super) ever_defined: bool,
}

/// Publisher flow control's marks and the queues over them (S-FLOW-1, `flow.rs`).
#[derive(Debug)]
pub(super) struct Flow {
    /// Ready messages above which a queue slows its publishers.
    pub(super) high: usize,
    /// Ready messages at or below which it lets them go.
    pub(super) low: usize,
    /// Queues over the high mark, each with the connections that published into it since.
    pub(super) marked: BTreeMap<QueueId, BTreeSet<ConnId>>,
}

impl Default for Flow {
    fn default() -> Self {
        Flow {
            high: wharf_base::limits::FLOW_READY_HIGH,
            low: wharf_base::limits::FLOW_READY_LOW,
            marked: BTreeMap::new(),
        }
    }
}
