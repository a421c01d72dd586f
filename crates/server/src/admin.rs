//! The admin path into the broker task (docs/DESIGN.md: "the same broker commands serve the admin
//! API"): what the management API (`crate::mgmt`) may ask the broker task, and how it is
//! answered. A request is either a broker [`Command`] (answered once its events are durable,
//! like the AMQP path's definition replies, S-DUR-1), a take of messages through a private
//! channel (`basic.get` with `no_ack`), or a read-only query run inside the task against
//! [`AdminView`]. No business rules here: the broker decides, this only carries.
//!
//! Must not depend on `crate::mgmt` (the HTTP layer uses this, not the other way round).

use std::fmt;
use std::net::SocketAddr;

use tokio::sync::oneshot;

use crate::counters::MessageCounters;
use wharf_broker::{Broker, BrokerError, Command, GetOk, Reply};

/// A read-only query, run inside the broker task between batches; it sends its own answer
/// (through a oneshot it captured). Keep it to copying: serialising happens outside.
pub type AdminQuery = Box<dyn FnOnce(&AdminView<'_>) + Send>;

/// A request of the management API to the broker task.
pub enum AdminRequest {
    /// A definition command (vhost, exchange, queue, binding, policy). The answer is sent
    /// once the events it produced are durable.
    Command {
        /// The command (boxed: a command is large, and this message travels the same
        /// channel as every connection's operations).
        cmd: Box<Command>,
        /// The broker's reply or refusal.
        done: oneshot::Sender<Result<Reply, BrokerError>>,
    },
    /// Takes up to `count` ready messages from a queue and acknowledges them at once
    /// (management "get" with `ack_requeue_false`), through a private connection and channel;
    /// answered once the removal is durable.
    Take {
        /// Virtual host.
        vhost: String,
        /// Queue.
        queue: String,
        /// At most this many messages.
        count: u32,
        /// The messages taken, in queue order, or the refusal (404 for no such queue).
        done: oneshot::Sender<Result<Vec<GetOk>, BrokerError>>,
    },
    /// A read-only look at the broker and the connection table.
    Query(AdminQuery),
    /// Closes a client connection with 320 `CONNECTION_FORCED` and `reason` (the
    /// management API's `DELETE /api/connections/{name}`); answers whether it was open.
    CloseConnection {
        /// The connection's id.
        id: u64,
        /// The text after `CONNECTION_FORCED - `.
        reason: String,
        /// Whether such a connection was open.
        done: oneshot::Sender<bool>,
    },
}

impl fmt::Debug for AdminRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminRequest::Command { cmd, .. } => f.debug_tuple("Command").field(cmd).finish(),
            AdminRequest::Take {
                vhost,
                queue,
                count,
                ..
            } => f
                .debug_struct("Take")
                .field("vhost", vhost)
                .field("queue", queue)
                .field("count", count)
                .finish(),
            AdminRequest::Query(_) => f.write_str("Query"),
            AdminRequest::CloseConnection { id, .. } => {
                f.debug_struct("CloseConnection").field("id", id).finish()
            }
        }
    }
}

/// An answer held back until its records are durable.
#[derive(Debug)]
pub(crate) enum AdminDone {
    /// A command's answer.
    Command(oneshot::Sender<Result<Reply, BrokerError>>, Reply),
    /// A take's answer.
    Take(oneshot::Sender<Result<Vec<GetOk>, BrokerError>>, Vec<GetOk>),
}

impl AdminDone {
    /// Sends the answer (the asker may have gone: then nothing happens).
    pub(crate) fn send(self) {
        match self {
            AdminDone::Command(done, reply) => {
                let _ = done.send(Ok(reply));
            }
            AdminDone::Take(done, taken) => {
                let _ = done.send(Ok(taken));
            }
        }
    }

    /// Answers with `refusal` instead: what it did will not be shown (its gate failed).
    pub(crate) fn refuse(self, refusal: BrokerError) {
        match self {
            AdminDone::Command(done, _) => {
                let _ = done.send(Err(refusal));
            }
            AdminDone::Take(done, _) => {
                let _ = done.send(Err(refusal));
            }
        }
    }
}

/// One open channel as the connection table knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    /// The channel number.
    pub number: u16,
    /// In confirm mode.
    pub confirm: bool,
    /// In transaction mode.
    pub transactional: bool,
    /// Has published at least once (a publisher, as RabbitMQ counts them).
    pub publishing: bool,
    /// Its message counts since it opened (S-MGMT-8).
    pub stats: ChannelStats,
}

/// A channel's message counts since it opened, bumped where the broker task already holds
/// the channel's state (S-MGMT-8): RabbitMQ's per-channel `message_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelStats {
    /// `basic.publish` methods handled.
    pub publish: u64,
    /// Messages handed to its consumers and fetched by `basic.get`.
    pub deliver_get: u64,
    /// Of those, flagged `redelivered`.
    pub redeliver: u64,
    /// Messages it acknowledged by `basic.ack`.
    pub ack: u64,
    /// Of `deliver_get`: delivered to consumers with automatic and with manual
    /// acknowledgement, fetched by `basic.get` with automatic and with manual
    /// acknowledgement (RabbitMQ's `deliver_no_ack`, `deliver`, `get_no_ack`, `get`).
    pub deliver_no_ack: u64,
    /// See [`ChannelStats::deliver_no_ack`].
    pub deliver_manual: u64,
    /// See [`ChannelStats::deliver_no_ack`].
    pub get_no_ack: u64,
    /// See [`ChannelStats::deliver_no_ack`].
    pub get_manual: u64,
    /// `basic.get` answered `get-empty`.
    pub get_empty: u64,
    /// Publishes confirmed to it (`basic.ack` under publisher confirms).
    pub confirm: u64,
    /// Unroutable publishes returned to it (`mandatory`), and dropped.
    pub returned_unroutable: u64,
    /// See [`ChannelStats::returned_unroutable`].
    pub dropped_unroutable: u64,
    /// Messages it holds delivered and not yet acknowledged, and consumers on it (filled
    /// when listed, from the broker).
    pub unacked: u64,
    /// See [`ChannelStats::unacked`].
    pub consumers: u64,
}

/// One open connection as the broker task knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionInfo {
    /// The server's id for it.
    pub id: u64,
    /// Its virtual host.
    pub vhost: String,
    /// The user it logged in as.
    pub user: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// When it was opened (ms since the epoch, the server's clock).
    pub opened_at_ms: u64,
    /// Negotiated `frame_max`.
    pub frame_max: u32,
    /// Deliveries paused because its socket is slow.
    pub throttled: bool,
    /// Its publishes are held back by a resource alarm.
    pub blocked: bool,
    /// Its socket is read no further: a queue it publishes into is behind (S-FLOW-1).
    pub flow: bool,
    /// The client's `client-properties`.
    pub client_properties: wharf_broker::FieldTable,
    /// Its open channels, by number.
    pub channels: Vec<ChannelInfo>,
    /// Bytes received from the client and sent to it (RabbitMQ's `recv_oct`, `send_oct`).
    pub traffic: (u64, u64),
}

/// One open connection's traffic and its channels' counts: what the metrics read of it
/// (no copy of its client properties, user or vhost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionTraffic {
    /// The client's address.
    pub peer: SocketAddr,
    /// Bytes received from the client and sent to it.
    pub traffic: (u64, u64),
    /// Its open channels, by number: number and counts (as [`ChannelInfo::stats`]).
    pub channels: Vec<(u16, ChannelStats)>,
}

/// Open connections and channels, counted without listing them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Open connections.
    pub connections: u64,
    /// Their open channels.
    pub channels: u64,
    /// Open channels that have published.
    pub publishing: u64,
}

/// The broker task's connections, listed only when a query asks (a listing copies each
/// connection's properties; polls that only count must not pay for it on the broker task).
pub trait Connections {
    /// Every open connection, by id.
    fn list(&self) -> Vec<ConnectionInfo>;
    /// Every open connection's traffic and channel counts, by id: what `list` says of them,
    /// without copying the rest.
    fn traffic(&self) -> Vec<ConnectionTraffic>;
    /// How many connections and channels are open.
    fn counts(&self) -> ConnectionCounts;
}

impl std::fmt::Debug for dyn Connections + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Connections").field(&self.counts()).finish()
    }
}

/// What a query sees: the broker (its query functions) and the broker task's tables.
#[derive(Debug)]
pub struct AdminView<'a> {
    /// The broker: `queues`, `exchanges`, `bindings`, `policies`, `consumers`,
    /// `ready_messages`, `vhost_names`, `totals`.
    pub broker: &'a Broker,
    /// Open connections.
    pub connections: &'a dyn Connections,
    /// Message counters since start.
    pub counters: MessageCounters,
    /// The server's clock, ms since the epoch.
    pub now_ms: u64,
    /// The log's sync histograms (`None` once the store is closed).
    pub sync: Option<wharf_wal::SyncSnapshot>,
    /// Where the broker task's time goes.
    pub timings: crate::core::CoreTimingsSnapshot,
}
