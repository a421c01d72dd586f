//! The broker task: the one owner of the [`Broker`] and the [`Store`] (docs/DESIGN.md,
//! "Concurrency"). Connections send it batches of channel operations through one bounded
//! channel; it drains them in batches, applies each to the broker, logs all the batch's events
//! with one `store.log` call, then releases what may be released.
//!
//! One rule governs what clients see: nothing runs ahead of the log. Every frame of a batch
//! (replies, deliveries, publisher confirms, `tx.commit-ok`, closes) is encoded at once, in
//! order, into its connection's [`Outbox`], and the outbox is sealed with the store's latest
//! ticket: the frames reach the socket only once every record logged up to then is durable
//! (group commit). That one gate gives S-DUR-3 (a confirm follows the fsync that covers its
//! message), S-DUR-4 (an ack's effects, a freed prefetch slot and the next delivery, a queue
//! count, are seen only once the ack is durable) and S-DLX-7 (a dead-lettered message is seen
//! in its dead-letter queue only once the one record that moved it is durable, so a crash
//! cannot bring it back in its source queue as well). Even a batch that logged nothing waits
//! for what was logged before it (it may show its effects: a queue count, `get-empty`), which
//! costs nothing when the log is idle. Consecutive publisher confirms of a channel coalesce
//! into one `basic.ack` with `multiple`. It also owns the expiry timer: one sleep until
//! `broker.next_deadline()`, re-armed after every batch.
//!
//! It holds no business rules: routing, TTL and dead-lettering are the broker's. It never reads
//! the time except through the injected [`Clock`].

//!
//! # Files
//!
//! - `mod.rs`: the task's state ([`Core`], per connection and per channel).
//! - `msg.rs`: what connections send it ([`CoreMsg`], [`Op`]).
//! - `gate.rs`: the loop, the batch's log call and the durability gate.
//! - `ops.rs`: connection and channel operations applied to the broker.
//! - `frames.rs`: a broker outcome's effects encoded as frames.
//! - `admin.rs`: the management API's requests.
//! - `metadata.rs`: the task as a member of the metadata group, which keeps the cluster's
//!   definitions (S-CLU-51..54); `converge.rs`: its live broker brought to them.
//! - `replica.rs`: the task as a member of the group replicating quorum queues (a cluster);
//!   `member.rs`: its state there, and the gate its frames wait at; `void_guard.rs`: the
//!   bound on its take-overs after voided entries (S-CLU-62).
//! - `timings.rs`: where the task's time goes (histograms for the metrics endpoint).

mod admin;
mod converge;
mod frames;
mod gate;
mod member;
mod metadata;
mod msg;
mod ops;
mod replica;
mod timings;
mod void_guard;

use member::DurableFuture;
pub(crate) use msg::{ChanOp, CoreMsg, Handoff, LocalUse, Op, OpenConn};
pub use timings::CoreTimingsSnapshot;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, basic};
use bytes::BytesMut;
use tokio::sync::{mpsc, oneshot, watch};

use crate::admin::AdminDone;
use crate::auth::UserRegistry;
use crate::counters::MessageCounters;
use crate::methods::MethodId;
use crate::outbox::Outbox;
use wharf_broker::{Broker, Command, Event, LoggedMessage, Publish};
use wharf_clock::Clock;
use wharf_protocol::{self as protocol, ChannelId};
use wharf_store::{Store, Ticket};

/// An admin answer's ticket not known yet: the records go into this batch's `store.log`.
const TICKET_THIS_BATCH: Ticket = Ticket::MAX;
/// Commands drained per batch.
const BATCH_MSGS_MAX: usize = 64;

#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "buffered only inside transactions; same shape as Op"
)]
enum TxOp {
    Publish(Box<Publish>),
    Cmd(Command, MethodId),
}

#[derive(Debug, Default)]
struct ChanState {
    /// We sent `channel.close` and wait for `close-ok`; everything else is ignored.
    closing: bool,
    /// Confirm mode: the next publish sequence number.
    confirm_next: Option<u64>,
    /// Transaction mode: the buffered publishes and acks.
    tx: Option<Vec<TxOp>>,
    /// The client's `channel.flow`.
    client_flow_off: bool,
    /// Has published at least once (a publisher, for the metrics).
    publishing: bool,
    /// Tags of its consumers with automatic acknowledgement (their deliveries are counted
    /// apart, as RabbitMQ does).
    auto_ack_consumers: HashSet<String>,
    /// Its message counts (S-MGMT-8).
    stats: crate::admin::ChannelStats,
}

#[derive(Debug)]
struct ConnState {
    vhost: String,
    user: String,
    peer: std::net::SocketAddr,
    opened_at_ms: u64,
    outbox: Arc<Outbox>,
    frame_max: u32,
    cancel_notify: bool,
    client_properties: wharf_broker::FieldTable,
    channels: HashMap<u16, ChanState>,
    /// Deliveries paused because the outbox is over the high mark.
    throttled: bool,
    /// Publisher acks not yet encoded: (channel, highest sequence number, more than one).
    /// Consecutive confirms of one channel become one `basic.ack` with `multiple`; the run
    /// is encoded before anything else is appended to the connection, so order is kept.
    ack_run: Option<(u16, u64, bool)>,
}

impl ConnState {
    fn new(open: &OpenConn, opened_at_ms: u64) -> Self {
        ConnState {
            vhost: open.vhost.clone(),
            user: open.user.clone(),
            peer: open.peer,
            opened_at_ms,
            outbox: open.outbox.clone(),
            frame_max: open.frame_max,
            cancel_notify: open.cancel_notify,
            client_properties: open.client_properties.clone(),
            channels: HashMap::new(),
            throttled: false,
            ack_run: None,
        }
    }

    /// Encodes the pending run of publisher acks, if any.
    fn flush_acks(&mut self) {
        if let Some((ch, seq, multiple)) = self.ack_run.take() {
            self.outbox
                .append(|buf| protocol::encode_ack(buf, ChannelId(ch), seq, multiple));
        }
    }

    /// Appends frames to the outbox after the pending acks; returns the bytes queued.
    fn append(&mut self, encode: impl FnOnce(&mut BytesMut)) -> usize {
        self.flush_acks();
        self.outbox.append(encode)
    }

    /// Appends a content: `head` (method and content header), then `body` in body frames,
    /// sent from the message itself when large (S-BIG-3).
    fn append_content(
        &mut self,
        head: impl FnOnce(&mut BytesMut),
        ch: u16,
        body: &bytes::Bytes,
    ) -> usize {
        self.flush_acks();
        let frame_max = self.frame_max;
        self.outbox
            .append_content(head, wharf_protocol::ChannelId(ch), body, frame_max)
    }

    /// A publisher confirm (S-DUR-3): an ack joins the channel's run, a nack (refused by a
    /// queue, S-LEN-2) is encoded in its place. Released with the batch, once durable.
    fn confirm(&mut self, ch: u16, seq: u64, ack: bool) {
        if ack {
            if let Some((run_ch, last, multiple)) = self.ack_run.as_mut()
                && *run_ch == ch
                && *last + 1 == seq
            {
                *last = seq;
                *multiple = true;
                return;
            }
            self.flush_acks();
            self.ack_run = Some((ch, seq, false));
            return;
        }
        let nack = AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
            delivery_tag: seq,
            multiple: false,
            requeue: false,
        }));
        self.append(|buf| protocol::encode_method(buf, ChannelId(ch), &nack));
    }
}

/// The broker task's state.
pub struct Core {
    broker: Broker,
    store: Option<Store>,
    clock: Arc<dyn Clock>,
    conns: HashMap<u64, ConnState>,
    /// Events of the current batch.
    events: Vec<Event>,
    /// Where the store wrote the messages of the current batch (reused, for the broker).
    logged: Vec<LoggedMessage>,
    /// The last ticket the store returned.
    last_ticket: Ticket,
    /// Connections whose outbox got bytes in this batch.
    dirty: HashSet<u64>,
    /// Outboxes of connections dropped in this batch after they got bytes (their close), to
    /// be sealed with the batch.
    dropped_dirty: Vec<(u64, Arc<Outbox>)>,
    /// Outboxes holding sealed frames not yet durable, by connection (dropped ones too, so
    /// their last frames still go out).
    held: HashMap<u64, Arc<Outbox>>,
    /// The watermark `held` was last released at.
    released_to: Ticket,
    /// Tickets sent to the durability waiter; the highest one.
    waited_ticket: Ticket,
    to_waiter: mpsc::Sender<(Ticket, DurableFuture)>,
    durable: watch::Receiver<Result<Ticket, String>>,
    armed: Option<u64>,
    stopping: bool,
    /// `Tick`s to answer once the batch is flushed.
    ticks: Vec<oneshot::Sender<()>>,
    /// Management answers waiting for their records to be durable, in order.
    admin_waiting: VecDeque<(Ticket, AdminDone)>,
    /// Message counters for the metrics endpoint.
    counters: MessageCounters,
    /// The users and permissions connections check against, refreshed after admin commands.
    registry: Option<Arc<UserRegistry>>,
    /// The registry's snapshot as last refreshed here, for the topic permission checks of
    /// the publish path (S-TPERM-2): no lock per publish.
    access: Option<Arc<crate::auth::Snapshot>>,
    /// Memory for the content of queued messages before they are paged out.
    message_memory_bytes: u64,
    /// Where the task's time goes (metrics).
    timings: timings::CoreTimings,
    /// Close the store on this task's thread, not the blocking pool
    /// (`ServerConfig::inline_store`).
    inline_store: bool,
    /// What the inline store's I/O took (`ServerConfig::inline_store_latency`).
    io_latency: Option<Arc<dyn crate::server_config::IoLatency>>,
    /// Membership of the group replicating quorum queues, in a cluster (`replica.rs`).
    replica: Option<member::Replica>,
    /// Membership of the metadata group, in a cluster (`metadata.rs`).
    meta: Option<metadata::Meta>,
}

impl Core {
    /// Keeps `registry` in step with the broker's users, permissions and vhosts.
    pub fn set_registry(&mut self, registry: Arc<UserRegistry>) {
        self.registry = Some(registry);
        self.refresh_access();
    }

    /// Rebuilds the registry's snapshot from the broker's definitions (after any change to
    /// users, permissions or vhosts) and keeps it for the topic permission checks.
    pub(super) fn refresh_access(&mut self) {
        if let Some(registry) = &self.registry {
            registry.refresh(&self.broker);
            self.access = Some(registry.snapshot());
        }
    }

    /// Sets the memory for the content of queued messages (`ServerConfig::message_memory_bytes`).
    pub fn set_message_memory_bytes(&mut self, bytes: u64) {
        self.message_memory_bytes = bytes;
    }

    /// Closes the store on this task's thread at the end (`ServerConfig::inline_store`).
    pub fn set_inline_store(&mut self, inline: bool) {
        self.inline_store = inline;
    }

    /// The inline store's I/O takes this time (`ServerConfig::inline_store_latency`).
    pub fn set_io_latency(&mut self, latency: Option<Arc<dyn crate::server_config::IoLatency>>) {
        self.io_latency = latency;
    }
}
