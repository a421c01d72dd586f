//! The broker: owns every vhost, exchange, queue, channel and consumer, and applies commands,
//! timers and replayed events to them. This file holds the state and the front door
//! ([`Broker::handle`]), which hands each command to the file of its domain; the children
//! hold the `impl Broker` blocks, one domain each:
//!
//! - `state.rs`: the entities the broker holds (plain data).
//! - `lookups.rs`, `refusals.rs`, `marks.rs`: lookups, errors and logged marks every domain
//!   shares.
//! - `vhosts.rs`, `connections.rs`, `exchanges.rs` (with bindings), `queues.rs`,
//!   `policies.rs` (S-POL), `access.rs` (users, permissions): the definitions.
//! - `publish.rs` (routing, S-LEN), `delivery.rs` (deliveries, get, acks, requeue, prefetch,
//!   flow), `consumers.rs` (consume, cancel, priorities, single active consumer, consumer
//!   timeout: S-CONS), `expiry.rs` (S-TTL, S-QEXP, timers), `dead_letter.rs` (S-DLX) with
//!   `dead_letter_hold.rs` (S-QQ-10, at-least-once),
//!   `scheduling.rs` (S-SCHED), `reply_to.rs` with `reply_names.rs` (S-DRT, direct
//!   reply-to), `move_back.rs` (out of a dead-letter queue, S-UI-10): moving messages.
//!   `flow.rs` (S-FLOW): which publishers to slow.
//! - `replay.rs`, `recovery.rs`, `paging.rs`, `snapshot.rs`: durability's side.
//! - `invariants.rs`, `queries.rs`: the invariant walk and the management queries;
//!   `browse.rs`, `search.rs` and `time_views.rs`: the dashboard's read-only views (S-UI).
//!
//! Must not depend on `protocol`, `wal`, `store`, `server`, a clock or any I/O.

mod access;
mod browse;
mod connections;
mod consumers;
mod dead_letter;
mod dead_letter_hold;
mod delivery;
mod exchanges;
mod expiry;
mod flow;
mod invariants;
mod lookups;
mod marks;
mod move_back;
mod paging;
mod policies;
mod publish;
mod queries;
mod queues;
mod recovery;
mod refusals;
mod replay;
mod reply_names;
mod reply_to;
mod scheduling;
mod search;
mod snapshot;
mod state;
mod time_views;
mod topic_access;
mod vhosts;

pub use self::browse::{BrowsedMessage, QueueBrowse};
pub use self::search::{MessageMatch, QueueSearch};
pub use self::time_views::{ExpiryHorizon, ScheduledFor, ScheduledMessage, ScheduledPage};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use self::reply_names::REPLY_QUEUE;

use self::state::{
    Access, Channel, Conn, Exchange, ExchangeId, Queue, QueueId, Scheduled, Timer, Vhost,
};
use crate::error::BrokerError;
use crate::types::{ChanRef, Command, ConnId, MessageId, MessageLoader, Outcome, RecordSize};

/// The whole broker model. See the module doc of [`crate`] for the API.
#[derive(Debug)]
pub struct Broker {
    vhosts: BTreeMap<String, Vhost>,
    queues: BTreeMap<QueueId, Queue>,
    exchanges: BTreeMap<ExchangeId, Exchange>,
    conns: BTreeMap<ConnId, Conn>,
    channels: BTreeMap<ChanRef, Channel>,
    scheduled: BTreeMap<MessageId, Scheduled>,
    timers: BTreeSet<(u64, Timer)>,
    next_message: u64,
    next_queue: u64,
    next_exchange: u64,
    next_consumer: u64,
    name_seq: u64,
    dirty: Vec<QueueId>,
    dead_letter_dropped: u64,
    /// Messages acknowledged out of quorum queues since start (the server labels its ack
    /// counter by queue type with it).
    acked_quorum: u64,
    /// Queues that may hold messages waiting to be dead-lettered (S-QQ-10); a queue whose
    /// hold emptied leaves at its next retry.
    holding: BTreeSet<QueueId>,
    /// Unacked deliveries a channel may hold over all its consumers (the safety cap for
    /// consumers without prefetch), `limits::UNACKED_PER_CHANNEL_MAX` or lower.
    unacked_per_channel_max: u32,
    /// The consumer timeout where neither queue nor consumer sets one (S-CONS-9).
    consumer_timeout_ms: Option<u64>,
    /// Users and permissions (`access.rs`).
    access: Access,
    /// Reads stored messages back (the store's; `None` in a broker that never stores).
    loader: Option<Arc<dyn MessageLoader>>,
    /// The store's rule for whether a message's log record fits (`None`: the default rule,
    /// `publish.rs`).
    record_size: Option<Arc<dyn RecordSize>>,
    /// The first failure to read a stored message back: the server stops (S-DUR-7).
    storage_failure: Option<String>,
    /// What the content of queued messages takes (in memory, and in all), over every queue.
    totals: Arc<crate::queue::ContentTotals>,
    /// Large messages paged out whose content may still be held elsewhere (`paging.rs`):
    /// read from here while it is, instead of from disk (S-BIG-3). Pruned at each page-out.
    paged_large: std::collections::HashMap<MessageId, std::sync::Weak<crate::types::Message>>,
    /// The queue the last page-out stopped at: the next one starts after it.
    page_cursor: QueueId,
    /// Direct reply-to consumers (S-DRT, `reply_names.rs`, `reply_to.rs`).
    reply_to: reply_names::ReplyConsumers,
    /// Publisher flow control (S-FLOW-1, `flow.rs`).
    flow: state::Flow,
}

impl Default for Broker {
    fn default() -> Self {
        Self::new()
    }
}

impl Broker {
    /// An empty broker with the vhost `/` and its predeclared exchanges.
    pub fn new() -> Self {
        let mut b = Self {
            vhosts: BTreeMap::new(),
            queues: BTreeMap::new(),
            exchanges: BTreeMap::new(),
            conns: BTreeMap::new(),
            channels: BTreeMap::new(),
            scheduled: BTreeMap::new(),
            timers: BTreeSet::new(),
            next_message: 1,
            next_queue: 1,
            next_exchange: 1,
            next_consumer: 1,
            name_seq: 0,
            dirty: Vec::new(),
            dead_letter_dropped: 0,
            acked_quorum: 0,
            holding: BTreeSet::new(),
            unacked_per_channel_max: wharf_base::limits::UNACKED_PER_CHANNEL_MAX,
            consumer_timeout_ms: None,
            access: Access::default(),
            loader: None,
            record_size: None,
            storage_failure: None,
            totals: Arc::default(),
            paged_large: std::collections::HashMap::new(),
            page_cursor: QueueId(0),
            reply_to: reply_names::ReplyConsumers::default(),
            flow: state::Flow::default(),
        };
        b.add_vhost("/");
        b
    }

    /// Applies one command at `now_ms`. The server sends `reply` first, then the effects,
    /// and releases publisher confirms only once `events` are durable.
    ///
    /// # Errors
    /// The AMQP error RabbitMQ would send; the model is unchanged.
    pub fn handle(&mut self, cmd: Command, now_ms: u64) -> Result<Outcome, BrokerError> {
        let mut out = Outcome::default();
        let retry = if self.holding.is_empty() {
            None
        } else {
            opens_routes(&cmd)
        };
        let result = self.dispatch(cmd, now_ms, &mut out);
        if result.is_ok()
            && let Some(vhost) = retry
        {
            self.retry_held_in(&vhost, now_ms, &mut out);
        }
        self.process_dirty(now_ms, &mut out);
        #[cfg(debug_assertions)]
        self.check_invariants();
        // An error must change nothing: every command validates before it mutates, so a
        // refused command has no events (which would otherwise never reach the log).
        debug_assert!(
            result.is_ok() || (out.events.is_empty() && out.effects.is_empty()),
            "a refused command left events or effects behind: {out:?}"
        );
        result.map(|()| out)
    }

    /// Hands each command to the file of its domain.
    fn dispatch(&mut self, cmd: Command, now: u64, out: &mut Outcome) -> Result<(), BrokerError> {
        match cmd {
            Command::Publish(p) => self.publish(p, None, now, out),
            // S-DRT: the direct reply-to pseudo-queue is the channel's, not a queue.
            Command::PublishOn { chan, publish } => self.publish_on(chan, publish, now, out),
            Command::ReplyConsume {
                chan,
                consumer_tag,
                no_ack,
                suffix,
            } => self.reply_consume(chan, consumer_tag, no_ack, suffix, out),
            Command::Cancel {
                chan,
                ref consumer_tag,
            } if self.reply_to.is_tag(chan, consumer_tag) => {
                self.reply_cancel(chan, out);
                Ok(())
            }
            Command::QueueDeclare(ref d) if reply_names::is_reply_name(&d.queue) => {
                self.reply_declare(d, out)
            }
            Command::VhostAdd { .. } | Command::VhostDelete { .. } => {
                self.vhost_command(cmd, now, out);
                Ok(())
            }
            Command::ConnectionOpen { .. }
            | Command::ConnectionClose { .. }
            | Command::ChannelOpen { .. }
            | Command::ChannelClose { .. } => self.connection_command(cmd, now, out),
            Command::ExchangeDeclare(_)
            | Command::ExchangeDelete { .. }
            | Command::ExchangeBind { .. }
            | Command::QueueBind { .. } => self.exchange_command(cmd, out),
            Command::QueueDeclare(_) | Command::QueuePurge { .. } | Command::QueueDelete { .. } => {
                self.queue_command(cmd, now, out)
            }
            Command::MoveBack { vhost, queue, ids } => {
                self.move_back(&vhost, &queue, ids, now, out)
            }
            Command::PolicySet { .. } | Command::PolicyClear { .. } => {
                self.policy_command(cmd, now, out)
            }
            Command::UserPut { .. }
            | Command::UserDelete { .. }
            | Command::PermissionSet { .. }
            | Command::PermissionClear { .. } => self.access_command(cmd, out),
            Command::TopicPermissionSet { .. } | Command::TopicPermissionClear { .. } => {
                self.topic_access_command(cmd, out)
            }
            Command::ChannelFlow { .. }
            | Command::Qos { .. }
            | Command::Consume { .. }
            | Command::Cancel { .. }
            | Command::Get { .. }
            | Command::Ack { .. }
            | Command::Nack { .. }
            | Command::Reject { .. }
            | Command::Recover { .. } => self.delivery_command(cmd, now, out),
        }
    }
}

/// S-QQ-10: the vhost in which `cmd` may open a dead-letter route (an exchange, queue,
/// binding or policy), so that the messages held there are tried again.
fn opens_routes(cmd: &Command) -> Option<String> {
    match cmd {
        Command::ExchangeDeclare(d) => Some(d.vhost.clone()),
        Command::QueueDeclare(d) => Some(d.vhost.clone()),
        Command::ExchangeBind {
            vhost, bind: true, ..
        }
        | Command::QueueBind {
            vhost, bind: true, ..
        }
        | Command::PolicySet { vhost, .. }
        | Command::PolicyClear { vhost, .. } => Some(vhost.clone()),
        _ => None,
    }
}
