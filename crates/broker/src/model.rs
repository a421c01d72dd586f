//! The broker: owns every vhost, exchange, queue, channel and consumer, and applies commands,
//! timers and replayed events to them. This file holds the state and the definition commands
//! (vhosts, connections, channels, exchanges, queues, bindings, policies); `flow.rs` moves
//! messages, `replay.rs` rebuilds from events and checks invariants. Must not depend on
//! `protocol`, `wal`, `store`, `server`, a clock or any I/O.

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::args::{
    self, Policy, QUEUE_ARGS, QueueSettings, assert_args_equivalence, assert_field_equivalence,
    parse_policy, parse_queue_args, rs_exchange, rs_queue, select_policy,
};
use crate::error::{BrokerError, ErrorKind};
use crate::queue::{Ready, Taken};
use crate::routing::headers::validate_binding_args;
use crate::routing::topic::TopicIndex;
use crate::types::{
    ChanRef, ChannelId, Command, ConnId, DelayedType, DestName, Effect, Event, ExchangeDeclare,
    ExchangeKind, MessageId, Outcome, PolicySpec, QueueDeclare, QueueDeletedReason, Reply,
};
use crate::value::{FieldTable, Value};

/// A queue's internal number; never reused, so a stale reference finds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct QueueId(pub u64);

/// An exchange's internal number; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ExchangeId(pub u64);

/// A binding's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Dest {
    Queue(QueueId),
    Exchange(ExchangeId),
}

/// A consumer of one queue.
#[derive(Debug, Clone)]
pub(crate) struct Consumer {
    pub serial: u64,
    pub chan: ChanRef,
    pub tag: Arc<str>,
    pub no_ack: bool,
    pub exclusive: bool,
    /// Per-consumer prefetch limit, fixed at `basic.consume` (0 = none).
    pub prefetch: u16,
    pub unacked: u32,
}

/// One queue. Invariant: `armed_msg` / `armed_lease` are exactly the entries of this queue in
/// `Broker::timers`, and equal `ready.first_deadline()` / `lease_deadline()` after each step.
#[derive(Debug)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent AMQP flags and bookkeeping"
)]
pub(crate) struct Queue {
    pub id: QueueId,
    pub vhost: Arc<str>,
    pub name: Arc<str>,
    pub durable: bool,
    pub owner: Option<ConnId>,
    pub auto_delete: bool,
    pub arguments: FieldTable,
    pub args: QueueSettings,
    pub policy: Option<String>,
    pub operator_policy: Option<String>,
    pub eff: QueueSettings,
    pub ready: Ready,
    pub unacked: u64,
    pub consumers: Vec<Consumer>,
    pub rr: usize,
    pub had_consumer: bool,
    pub last_used_ms: u64,
    pub armed_msg: Option<u64>,
    pub armed_lease: Option<u64>,
    pub dirty: bool,
}

impl Queue {
    /// Its persistent messages are logged: durable and not exclusive (an exclusive queue dies
    /// with its connection, so it never outlives a restart).
    pub fn logged(&self) -> bool {
        self.durable && self.owner.is_none()
    }

    /// When the lease runs out (S-QEXP-1/2): unused = no consumers.
    pub fn lease_deadline(&self) -> Option<u64> {
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
pub(crate) struct Binding {
    pub key: String,
    pub dest: Dest,
    pub args: FieldTable,
}

/// One exchange with its outgoing bindings and routing indexes.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub id: ExchangeId,
    pub vhost: Arc<str>,
    pub name: Arc<str>,
    pub kind: ExchangeKind,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
    pub alternate: Option<String>,
    pub bindings: Vec<Binding>,
    pub direct: HashMap<String, Vec<Dest>>,
    pub topic: TopicIndex<Dest>,
}

impl Exchange {
    /// The routing type (an `x-delayed-message` exchange routes as its delayed type).
    pub fn routing_kind(&self) -> DelayedType {
        match self.kind {
            ExchangeKind::Direct => DelayedType::Direct,
            ExchangeKind::Fanout => DelayedType::Fanout,
            ExchangeKind::Topic => DelayedType::Topic,
            ExchangeKind::Headers => DelayedType::Headers,
            ExchangeKind::Delayed(t) => t,
        }
    }

    fn add_binding(&mut self, b: Binding) -> bool {
        if self.bindings.contains(&b) {
            return false;
        }
        match self.routing_kind() {
            DelayedType::Direct => self.direct.entry(b.key.clone()).or_default().push(b.dest),
            DelayedType::Topic => {
                self.topic.bind(&b.key, b.dest);
            }
            DelayedType::Fanout | DelayedType::Headers => {}
        }
        self.bindings.push(b);
        true
    }

    fn remove_binding(&mut self, b: &Binding) -> bool {
        let Some(i) = self.bindings.iter().position(|x| x == b) else {
            return false;
        };
        self.bindings.remove(i);
        // Another binding may share key and destination with other arguments.
        let still = self
            .bindings
            .iter()
            .any(|x| x.key == b.key && x.dest == b.dest);
        if !still {
            match self.routing_kind() {
                DelayedType::Direct => {
                    if let Some(v) = self.direct.get_mut(&b.key) {
                        v.retain(|d| *d != b.dest);
                        if v.is_empty() {
                            self.direct.remove(&b.key);
                        }
                    }
                }
                DelayedType::Topic => {
                    self.topic.unbind(&b.key, b.dest);
                }
                DelayedType::Fanout | DelayedType::Headers => {}
            }
        }
        true
    }
}

/// A virtual host's names.
#[derive(Debug, Default)]
pub(crate) struct Vhost {
    pub queues: BTreeMap<String, QueueId>,
    pub exchanges: BTreeMap<String, ExchangeId>,
    pub policies: BTreeMap<String, Policy>,
    pub operator_policies: BTreeMap<String, Policy>,
}

/// A delivered, unacked message held by a channel. `consumer` is the consumer's serial
/// (None for `basic.get`).
#[derive(Debug, Clone)]
pub(crate) struct Unacked {
    pub queue: QueueId,
    pub taken: Taken,
    pub consumer: Option<u64>,
}

/// One open channel.
#[derive(Debug)]
pub(crate) struct Channel {
    pub flow: bool,
    pub prefetch: u16,
    pub global_prefetch: u16,
    pub next_tag: u64,
    pub unacked: BTreeMap<u64, Unacked>,
    pub consumer_unacked: u32,
    pub consumers: BTreeMap<Arc<str>, QueueId>,
}

/// One open connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub vhost: String,
    pub channels: BTreeSet<ChannelId>,
    pub exclusive: BTreeSet<QueueId>,
}

/// A message waiting on an `x-delayed-message` exchange (S-SCHED-1).
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    pub vhost: String,
    pub exchange: String,
    pub msg: Arc<crate::types::Message>,
    pub durable: bool,
}

/// What a timer entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    Messages(QueueId),
    Lease(QueueId),
    Scheduled(MessageId),
}

/// The whole broker model. See the module doc of [`crate`] for the API.
#[derive(Debug)]
pub struct Broker {
    pub(crate) vhosts: BTreeMap<String, Vhost>,
    pub(crate) queues: BTreeMap<QueueId, Queue>,
    pub(crate) exchanges: BTreeMap<ExchangeId, Exchange>,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    pub(crate) channels: BTreeMap<ChanRef, Channel>,
    pub(crate) scheduled: BTreeMap<MessageId, Scheduled>,
    pub(crate) timers: BTreeSet<(u64, Timer)>,
    pub(crate) next_message: u64,
    pub(crate) next_queue: u64,
    pub(crate) next_exchange: u64,
    pub(crate) next_consumer: u64,
    pub(crate) name_seq: u64,
    pub(crate) dirty: Vec<QueueId>,
    pub(crate) dead_letter_dropped: u64,
    /// Unacked deliveries a channel may hold over all its consumers (the safety cap for
    /// consumers without prefetch), `limits::UNACKED_PER_CHANNEL_MAX` or lower.
    pub(crate) unacked_per_channel_max: u32,
    /// Users and permissions (`access.rs`).
    pub(crate) access: crate::access::Access,
    /// Reads stored messages back (the store's; `None` in a broker that never stores).
    pub(crate) loader: Option<Arc<dyn crate::types::MessageLoader>>,
    /// The first failure to read a stored message back: the server stops (S-DUR-7).
    pub(crate) storage_failure: Option<String>,
    /// Memory the content of queued messages held in memory takes, over every queue.
    pub(crate) loaded_total: Arc<std::sync::atomic::AtomicU64>,
}

impl Default for Broker {
    fn default() -> Self {
        Self::new()
    }
}

/// The exchanges every vhost has (RabbitMQ's predeclared set, without `amq.rabbitmq.trace`).
const PREDECLARED: [(&str, ExchangeKind); 6] = [
    ("", ExchangeKind::Direct),
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

pub(crate) fn default_exchange_refused() -> BrokerError {
    BrokerError::new(
        ErrorKind::AccessRefused,
        "operation not permitted on the default exchange",
    )
}

fn no_exchange(vhost: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {}", rs_exchange(vhost, name)))
}

fn no_queue(vhost: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {}", rs_queue(vhost, name)))
}

/// A fixed bijective mix (splitmix64's finaliser), so generated names look random yet depend
/// only on the broker's own counter.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn parse_kind(name: &str, args: &FieldTable, what: &str) -> Result<ExchangeKind, BrokerError> {
    let plain = |n: &str| match n {
        "direct" => Some(DelayedType::Direct),
        "fanout" => Some(DelayedType::Fanout),
        "topic" => Some(DelayedType::Topic),
        "headers" => Some(DelayedType::Headers),
        _ => None,
    };
    match name {
        "x-delayed-message" => {
            let t = args
                .get("x-delayed-type")
                .and_then(Value::as_str)
                .and_then(plain)
                .ok_or_else(|| {
                    BrokerError::precondition(format!(
                        "invalid arg 'x-delayed-type' for {what}: Invalid argument, 'x-delayed-type' must be an existing exchange type"
                    ))
                })?;
            Ok(ExchangeKind::Delayed(t))
        }
        other => match plain(other) {
            Some(DelayedType::Direct) => Ok(ExchangeKind::Direct),
            Some(DelayedType::Fanout) => Ok(ExchangeKind::Fanout),
            Some(DelayedType::Topic) => Ok(ExchangeKind::Topic),
            Some(DelayedType::Headers) => Ok(ExchangeKind::Headers),
            None => Err(BrokerError::new(
                ErrorKind::CommandInvalid,
                format!("unknown exchange type '{other}'"),
            )),
        },
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
            unacked_per_channel_max: wharf_base::limits::UNACKED_PER_CHANNEL_MAX,
            access: crate::access::Access::default(),
            loader: None,
            storage_failure: None,
            loaded_total: Arc::default(),
        };
        b.add_vhost("/");
        b
    }

    /// Messages dropped because their dead-letter exchange did not exist (S-DLX-4).
    pub fn dead_letter_dropped(&self) -> u64 {
        self.dead_letter_dropped
    }

    /// Applies one command at `now_ms`. The server sends `reply` first, then the effects,
    /// and releases publisher confirms only once `events` are durable.
    ///
    /// # Errors
    /// The AMQP error RabbitMQ would send; the model is unchanged.
    pub fn handle(&mut self, cmd: Command, now_ms: u64) -> Result<Outcome, BrokerError> {
        let mut out = Outcome::default();
        let result = self.dispatch(cmd, now_ms, &mut out);
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

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per command, each delegating"
    )]
    fn dispatch(&mut self, cmd: Command, now: u64, out: &mut Outcome) -> Result<(), BrokerError> {
        match cmd {
            Command::VhostAdd { vhost } => {
                if !self.vhosts.contains_key(&vhost) {
                    self.add_vhost(&vhost);
                    out.events.push(Event::VhostAdded { vhost });
                }
                Ok(())
            }
            Command::VhostDelete { vhost } => {
                if self.vhosts.contains_key(&vhost) {
                    self.delete_vhost(&vhost, now, out);
                    out.events.push(Event::VhostDeleted { vhost });
                }
                Ok(())
            }
            Command::ConnectionOpen { conn, vhost } => self.open_connection(conn, vhost),
            Command::ConnectionClose { conn } => {
                self.close_connection(conn, now, out);
                Ok(())
            }
            Command::ChannelOpen { chan } => self.open_channel(chan),
            Command::ChannelClose { chan } => {
                self.close_channel(chan, now, out);
                Ok(())
            }
            Command::ChannelFlow { chan, active } => {
                self.channel_mut(chan)?.flow = active;
                self.mark_channel_queues(chan);
                Ok(())
            }
            Command::Qos {
                chan,
                prefetch_count,
                global,
            } => {
                let ch = self.channel_mut(chan)?;
                if global {
                    ch.global_prefetch = prefetch_count;
                } else {
                    ch.prefetch = prefetch_count;
                }
                self.mark_channel_queues(chan);
                Ok(())
            }
            Command::ExchangeDeclare(d) => self.declare_exchange(d, out),
            Command::ExchangeDelete {
                vhost,
                exchange,
                if_unused,
            } => self.delete_exchange_cmd(&vhost, &exchange, if_unused, out),
            Command::ExchangeBind {
                vhost,
                destination,
                source,
                routing_key,
                arguments,
                bind,
            } => self.bind_exchange(
                &vhost,
                &destination,
                &source,
                routing_key,
                arguments,
                bind,
                out,
            ),
            Command::QueueDeclare(d) => self.declare_queue(d, now, out),
            Command::QueueBind {
                vhost,
                queue,
                exchange,
                routing_key,
                arguments,
                bind,
                owner,
            } => self.bind_queue(
                &vhost,
                &queue,
                &exchange,
                routing_key,
                arguments,
                bind,
                owner,
                out,
            ),
            Command::QueuePurge {
                vhost,
                queue,
                owner,
            } => self.purge_queue(&vhost, &queue, owner, out),
            Command::QueueDelete {
                vhost,
                queue,
                if_unused,
                if_empty,
                owner,
            } => self.delete_queue_cmd(&vhost, &queue, if_unused, if_empty, owner, now, out),
            Command::PolicySet {
                vhost,
                policy,
                operator,
            } => self.set_policy(&vhost, policy, operator, now, out),
            Command::PolicyClear {
                vhost,
                name,
                operator,
            } => self.clear_policy(&vhost, &name, operator, now, out),
            Command::UserPut {
                name,
                password_hash,
                tags,
            } => self.put_user(
                crate::access::UserInfo {
                    name,
                    password_hash,
                    tags,
                },
                out,
            ),
            Command::UserDelete { name } => self.delete_user(&name, out),
            Command::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read,
            } => self.set_permission(
                crate::access::PermissionInfo {
                    user,
                    vhost,
                    configure,
                    write,
                    read,
                },
                out,
            ),
            Command::PermissionClear { user, vhost } => self.clear_permission(&user, &vhost, out),
            other => self.dispatch_flow(other, now, out),
        }
    }

    // ----- lookups -----

    pub(crate) fn vhost(&self, name: &str) -> Result<&Vhost, BrokerError> {
        self.vhosts.get(name).ok_or_else(|| {
            BrokerError::new(ErrorKind::NotAllowed, format!("vhost '{name}' not found"))
        })
    }

    pub(crate) fn channel_mut(&mut self, chan: ChanRef) -> Result<&mut Channel, BrokerError> {
        self.channels.get_mut(&chan).ok_or_else(|| {
            BrokerError::new(
                ErrorKind::ChannelError,
                format!("channel {} is not open", chan.channel.0),
            )
        })
    }

    pub(crate) fn chan_vhost(&self, chan: ChanRef) -> Result<String, BrokerError> {
        if !self.channels.contains_key(&chan) {
            return Err(BrokerError::new(
                ErrorKind::ChannelError,
                format!("channel {} is not open", chan.channel.0),
            ));
        }
        self.conns
            .get(&chan.conn)
            .map(|c| c.vhost.clone())
            .ok_or_else(|| BrokerError::new(ErrorKind::ChannelError, "connection is not open"))
    }

    /// The queue `name`, checking exclusive ownership against `accessor` (None = the admin
    /// API, which may touch any queue).
    pub(crate) fn find_queue(
        &self,
        vhost: &str,
        name: &str,
        accessor: Option<ConnId>,
    ) -> Result<QueueId, BrokerError> {
        let id = *self
            .vhost(vhost)?
            .queues
            .get(name)
            .ok_or_else(|| no_queue(vhost, name))?;
        let q = &self.queues[&id];
        if let (Some(owner), Some(who)) = (q.owner, accessor)
            && owner != who
        {
            return Err(locked(vhost, name));
        }
        Ok(id)
    }

    pub(crate) fn find_exchange(&self, vhost: &str, name: &str) -> Result<ExchangeId, BrokerError> {
        self.vhost(vhost)?
            .exchanges
            .get(name)
            .copied()
            .ok_or_else(|| no_exchange(vhost, name))
    }

    pub(crate) fn mark_dirty(&mut self, qid: QueueId) {
        if let Some(q) = self.queues.get_mut(&qid)
            && !q.dirty
        {
            q.dirty = true;
            self.dirty.push(qid);
        }
    }

    /// Lowers the cap on unacknowledged deliveries per channel (consumers with prefetch 0
    /// included) from `limits::UNACKED_PER_CHANNEL_MAX`; values above it, or 0, are clamped.
    pub fn set_unacked_per_channel_max(&mut self, max: u32) {
        self.unacked_per_channel_max = max.clamp(1, wharf_base::limits::UNACKED_PER_CHANNEL_MAX);
    }

    /// Deliveries a channel holds unacknowledged (0 for an unknown channel). The server counts
    /// the messages one `basic.ack` settles as the difference (a `multiple` ack settles many).
    pub fn channel_unacked(&self, chan: ChanRef) -> usize {
        self.channels.get(&chan).map_or(0, |c| c.unacked.len())
    }

    pub(crate) fn mark_channel_queues(&mut self, chan: ChanRef) {
        let qs: Vec<QueueId> = self
            .channels
            .get(&chan)
            .map(|c| c.consumers.values().copied().collect())
            .unwrap_or_default();
        for q in qs {
            self.mark_dirty(q);
        }
    }

    fn gen_name(&mut self, prefix: &str, taken: impl Fn(&str) -> bool) -> String {
        loop {
            self.name_seq += 1;
            let name = format!("{prefix}{:016x}", mix(self.name_seq));
            if !taken(&name) {
                return name;
            }
        }
    }

    pub(crate) fn gen_consumer_tag(&mut self, chan: ChanRef) -> String {
        let existing: Vec<Arc<str>> = self
            .channels
            .get(&chan)
            .map(|c| c.consumers.keys().cloned().collect())
            .unwrap_or_default();
        self.gen_name("amq.ctag-", |n| existing.iter().any(|e| &**e == n))
    }

    // ----- vhosts, connections, channels -----

    pub(crate) fn add_vhost(&mut self, name: &str) {
        if self.vhosts.contains_key(name) {
            return;
        }
        self.vhosts.insert(name.to_owned(), Vhost::default());
        for (x, kind) in PREDECLARED {
            self.create_exchange(name, x, kind, true, false, false, FieldTable::new());
        }
    }

    pub(crate) fn delete_vhost(&mut self, name: &str, now: u64, out: &mut Outcome) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.vhost == name)
            .map(|(id, _)| *id)
            .collect();
        for c in conns {
            self.close_connection(c, now, out);
        }
        let Some(v) = self.vhosts.get(name) else {
            return;
        };
        let queues: Vec<QueueId> = v.queues.values().copied().collect();
        for q in queues {
            self.delete_queue(q, QueueDeletedReason::Deleted, false, now, out);
        }
        let xs: Vec<ExchangeId> = self
            .vhosts
            .get(name)
            .map(|v| v.exchanges.values().copied().collect())
            .unwrap_or_default();
        for x in xs {
            self.exchanges.remove(&x);
        }
        self.scheduled.retain(|_, s| s.vhost != name);
        let sched: BTreeSet<MessageId> = self.scheduled.keys().copied().collect();
        self.timers
            .retain(|(_, t)| !matches!(t, Timer::Scheduled(id) if !sched.contains(id)));
        self.vhosts.remove(name);
        self.forget_vhost_permissions(name);
    }

    fn open_connection(&mut self, conn: ConnId, vhost: String) -> Result<(), BrokerError> {
        self.vhost(&vhost)?;
        if self.conns.contains_key(&conn) {
            return Err(BrokerError::new(
                ErrorKind::CommandInvalid,
                format!("connection {} is already open", conn.0),
            ));
        }
        self.conns.insert(
            conn,
            Conn {
                vhost,
                channels: BTreeSet::new(),
                exclusive: BTreeSet::new(),
            },
        );
        Ok(())
    }

    pub(crate) fn close_connection(&mut self, conn: ConnId, now: u64, out: &mut Outcome) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let channels: Vec<ChannelId> = c.channels.iter().copied().collect();
        for ch in channels {
            self.close_channel(ChanRef { conn, channel: ch }, now, out);
        }
        let exclusive: Vec<QueueId> = self
            .conns
            .get(&conn)
            .map(|c| c.exclusive.iter().copied().collect())
            .unwrap_or_default();
        for q in exclusive {
            self.delete_queue(q, QueueDeletedReason::OwnerClosed, true, now, out);
        }
        self.conns.remove(&conn);
    }

    fn open_channel(&mut self, chan: ChanRef) -> Result<(), BrokerError> {
        let Some(c) = self.conns.get_mut(&chan.conn) else {
            return Err(BrokerError::new(
                ErrorKind::ChannelError,
                "connection is not open",
            ));
        };
        if !c.channels.insert(chan.channel) {
            return Err(BrokerError::new(
                ErrorKind::ChannelError,
                "second 'channel.open' seen",
            ));
        }
        self.channels.insert(
            chan,
            Channel {
                flow: true,
                prefetch: 0,
                global_prefetch: 0,
                next_tag: 1,
                unacked: BTreeMap::new(),
                consumer_unacked: 0,
                consumers: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// Closes a channel: cancels its consumers, then requeues its unacked messages in their
    /// original positions with their original deadlines (S-TTL-7).
    pub(crate) fn close_channel(&mut self, chan: ChanRef, now: u64, out: &mut Outcome) {
        let Some(ch) = self.channels.remove(&chan) else {
            return;
        };
        if let Some(c) = self.conns.get_mut(&chan.conn) {
            c.channels.remove(&chan.channel);
        }
        for (tag, qid) in &ch.consumers {
            self.remove_consumer(*qid, chan, tag, now, out);
        }
        for (_, u) in ch.unacked {
            self.unacked_released(&u, None);
            self.requeue(u.queue, u.taken, now, out);
        }
    }

    // ----- exchanges -----

    #[expect(clippy::too_many_arguments, reason = "the fields of an exchange")]
    pub(crate) fn create_exchange(
        &mut self,
        vhost: &str,
        name: &str,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> ExchangeId {
        let id = ExchangeId(self.next_exchange);
        self.next_exchange += 1;
        let alternate = arguments
            .get("alternate-exchange")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.exchanges.insert(
            id,
            Exchange {
                id,
                vhost: vhost.into(),
                name: name.into(),
                kind,
                durable,
                auto_delete,
                internal,
                arguments,
                alternate,
                bindings: Vec::new(),
                direct: HashMap::new(),
                topic: TopicIndex::new(),
            },
        );
        if let Some(v) = self.vhosts.get_mut(vhost) {
            v.exchanges.insert(name.to_owned(), id);
        }
        id
    }

    fn declare_exchange(
        &mut self,
        d: ExchangeDeclare,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.vhost(&d.vhost)?;
        if d.exchange.is_empty() {
            return Err(default_exchange_refused());
        }
        let what = rs_exchange(&d.vhost, &d.exchange);
        if let Some(&id) = vhost.exchanges.get(&d.exchange) {
            if d.passive {
                return Ok(());
            }
            let x = &self.exchanges[&id];
            let kind = parse_kind(&d.kind, &d.arguments, &what)?;
            assert_field_equivalence(&what, "type", x.kind.name(), kind.name())?;
            if let (ExchangeKind::Delayed(a), ExchangeKind::Delayed(b)) = (x.kind, kind)
                && a != b
            {
                return Err(BrokerError::precondition(format!(
                    "inequivalent arg 'x-delayed-type' for {what}"
                )));
            }
            let b = |v: bool| if v { "true" } else { "false" };
            assert_field_equivalence(&what, "durable", b(x.durable), b(d.durable))?;
            assert_field_equivalence(&what, "auto_delete", b(x.auto_delete), b(d.auto_delete))?;
            assert_field_equivalence(&what, "internal", b(x.internal), b(d.internal))?;
            assert_args_equivalence(&what, &x.arguments, &d.arguments, &["alternate-exchange"])?;
            return Ok(());
        }
        if d.passive {
            return Err(no_exchange(&d.vhost, &d.exchange));
        }
        if d.exchange.starts_with("amq.") {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!(
                    "exchange name '{}' contains reserved prefix 'amq.*'",
                    d.exchange
                ),
            ));
        }
        let kind = parse_kind(&d.kind, &d.arguments, &what)?;
        if let Some(ae) = d.arguments.get("alternate-exchange")
            && ae.as_str().is_none()
        {
            return Err(BrokerError::precondition(format!(
                "invalid arg 'alternate-exchange' for {what}: {{unacceptable_type,{}}}",
                args::type_name(ae)
            )));
        }
        self.create_exchange(
            &d.vhost,
            &d.exchange,
            kind,
            d.durable,
            d.auto_delete,
            d.internal,
            d.arguments.clone(),
        );
        if d.durable {
            out.events.push(Event::ExchangeDeclared {
                vhost: d.vhost,
                exchange: d.exchange,
                kind,
                auto_delete: d.auto_delete,
                internal: d.internal,
                arguments: d.arguments,
            });
        }
        Ok(())
    }

    fn delete_exchange_cmd(
        &mut self,
        vhost: &str,
        name: &str,
        if_unused: bool,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let v = self.vhost(vhost)?;
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        let Some(&id) = v.exchanges.get(name) else {
            return Ok(());
        };
        if name.starts_with("amq.") {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!(
                    "deletion of system {} not allowed",
                    rs_exchange(vhost, name)
                ),
            ));
        }
        if if_unused && !self.exchanges[&id].bindings.is_empty() {
            return Err(BrokerError::precondition(format!(
                "{} in use",
                rs_exchange(vhost, name)
            )));
        }
        self.delete_exchange(id, true, out);
        Ok(())
    }

    /// Deletes an exchange with the bindings from and to it; cascades to auto-delete
    /// exchanges that lose their last binding.
    pub(crate) fn delete_exchange(&mut self, id: ExchangeId, log: bool, out: &mut Outcome) {
        let Some(x) = self.exchanges.remove(&id) else {
            return;
        };
        if let Some(v) = self.vhosts.get_mut(&*x.vhost) {
            v.exchanges.remove(&*x.name);
        }
        if log && x.durable {
            out.events.push(Event::ExchangeDeleted {
                vhost: x.vhost.to_string(),
                exchange: x.name.to_string(),
            });
        }
        out.effects.push(Effect::ExchangeDeleted {
            vhost: x.vhost.to_string(),
            exchange: x.name.to_string(),
        });
        self.remove_bindings_to(&x.vhost, Dest::Exchange(id), log, out);
    }

    /// Removes every binding whose destination is `dest`; auto-delete sources left without
    /// bindings are deleted.
    pub(crate) fn remove_bindings_to(
        &mut self,
        vhost: &str,
        dest: Dest,
        log: bool,
        out: &mut Outcome,
    ) {
        let Some(v) = self.vhosts.get(vhost) else {
            return;
        };
        let sources: Vec<ExchangeId> = v.exchanges.values().copied().collect();
        let mut emptied = Vec::new();
        for sid in sources {
            let Some(x) = self.exchanges.get_mut(&sid) else {
                continue;
            };
            let doomed: Vec<Binding> = x
                .bindings
                .iter()
                .filter(|b| b.dest == dest)
                .cloned()
                .collect();
            if doomed.is_empty() {
                continue;
            }
            for b in &doomed {
                x.remove_binding(b);
            }
            if x.auto_delete && x.bindings.is_empty() {
                emptied.push(sid);
            }
        }
        for sid in emptied {
            self.delete_exchange(sid, log, out);
        }
    }

    pub(crate) fn dest_name(&self, dest: Dest) -> Option<(DestName, bool)> {
        match dest {
            Dest::Queue(q) => self
                .queues
                .get(&q)
                .map(|q| (DestName::Queue(q.name.to_string()), q.logged())),
            Dest::Exchange(x) => self
                .exchanges
                .get(&x)
                .map(|x| (DestName::Exchange(x.name.to_string()), x.durable)),
        }
    }

    /// Adds or removes a binding; logs it when both ends are durable.
    #[expect(clippy::too_many_arguments, reason = "the fields of a binding")]
    pub(crate) fn set_binding(
        &mut self,
        vhost: &str,
        source: ExchangeId,
        dest: Dest,
        key: String,
        arguments: FieldTable,
        bind: bool,
        log: bool,
        out: &mut Outcome,
    ) {
        let Some((dest_name, dest_durable)) = self.dest_name(dest) else {
            return;
        };
        let Some(x) = self.exchanges.get_mut(&source) else {
            return;
        };
        let b = Binding {
            key,
            dest,
            args: arguments,
        };
        let changed = if bind {
            x.add_binding(b.clone())
        } else {
            x.remove_binding(&b)
        };
        let source_name = x.name.to_string();
        let durable = x.durable && dest_durable;
        let emptied = !bind && x.auto_delete && x.bindings.is_empty();
        if changed && log && durable {
            let (routing_key, arguments) = (b.key, b.args);
            out.events.push(if bind {
                Event::Bound {
                    vhost: vhost.to_owned(),
                    source: source_name,
                    destination: dest_name,
                    routing_key,
                    arguments,
                }
            } else {
                Event::Unbound {
                    vhost: vhost.to_owned(),
                    source: source_name,
                    destination: dest_name,
                    routing_key,
                    arguments,
                }
            });
        }
        if changed && emptied {
            self.delete_exchange(source, log, out);
        }
    }

    fn check_bindable(&self, vhost: &str, exchange: &str) -> Result<ExchangeId, BrokerError> {
        if exchange.is_empty() {
            return Err(default_exchange_refused());
        }
        self.find_exchange(vhost, exchange)
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of exchange.bind")]
    fn bind_exchange(
        &mut self,
        vhost: &str,
        destination: &str,
        source: &str,
        key: String,
        arguments: FieldTable,
        bind: bool,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let src = self.check_bindable(vhost, source)?;
        let dst = self.check_bindable(vhost, destination)?;
        if bind && self.exchanges[&src].routing_kind() == DelayedType::Headers {
            validate_binding_args(&arguments)?;
        }
        self.set_binding(
            vhost,
            src,
            Dest::Exchange(dst),
            key,
            arguments,
            bind,
            true,
            out,
        );
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of queue.bind")]
    fn bind_queue(
        &mut self,
        vhost: &str,
        queue: &str,
        exchange: &str,
        key: String,
        arguments: FieldTable,
        bind: bool,
        owner: Option<ConnId>,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let qid = self.find_queue(vhost, queue, owner)?;
        let src = self.check_bindable(vhost, exchange)?;
        if bind && self.exchanges[&src].routing_kind() == DelayedType::Headers {
            validate_binding_args(&arguments)?;
        }
        self.set_binding(
            vhost,
            src,
            Dest::Queue(qid),
            key,
            arguments,
            bind,
            true,
            out,
        );
        Ok(())
    }

    // ----- queues -----

    fn declare_queue(
        &mut self,
        d: QueueDeclare,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.vhost(&d.vhost)?;
        if let Some(&id) = vhost.queues.get(&d.queue) {
            return self.redeclare_queue(id, &d, now, out);
        }
        if d.passive {
            return Err(no_queue(&d.vhost, &d.queue));
        }
        if d.queue.starts_with("amq.") {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!("queue name '{}' contains reserved prefix 'amq.*'", d.queue),
            ));
        }
        if d.exclusive && !d.owner.is_some_and(|o| self.conns.contains_key(&o)) {
            return Err(BrokerError::precondition(
                "an exclusive queue needs an open owning connection",
            ));
        }
        let name = if d.queue.is_empty() {
            let names: BTreeSet<String> = vhost.queues.keys().cloned().collect();
            self.gen_name("amq.gen-", |n| names.contains(n))
        } else {
            d.queue.clone()
        };
        let settings = parse_queue_args(&d.vhost, &name, &d.arguments)?;
        let owner = if d.exclusive { d.owner } else { None };
        let qid = self.create_queue(
            &d.vhost,
            &name,
            d.durable,
            owner,
            d.auto_delete,
            d.arguments.clone(),
            settings,
            now,
        );
        if let Some(o) = owner
            && let Some(c) = self.conns.get_mut(&o)
        {
            c.exclusive.insert(qid);
        }
        if d.durable && owner.is_none() {
            out.events.push(Event::QueueDeclared {
                vhost: d.vhost,
                queue: name.clone(),
                auto_delete: d.auto_delete,
                arguments: d.arguments,
            });
        }
        out.reply = Reply::QueueDeclareOk {
            queue: name,
            message_count: 0,
            consumer_count: 0,
        };
        Ok(())
    }

    fn redeclare_queue(
        &mut self,
        id: QueueId,
        d: &QueueDeclare,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let q = &self.queues[&id];
        let what = rs_queue(&d.vhost, &d.queue);
        if let Some(owner) = q.owner
            && d.owner != Some(owner)
        {
            return Err(locked(&d.vhost, &d.queue));
        }
        if !d.passive {
            if q.owner.is_some() != d.exclusive {
                return Err(locked(&d.vhost, &d.queue));
            }
            let b = |v: bool| if v { "true" } else { "false" };
            assert_field_equivalence(&what, "durable", b(q.durable), b(d.durable))?;
            assert_field_equivalence(&what, "auto_delete", b(q.auto_delete), b(d.auto_delete))?;
            assert_args_equivalence(&what, &q.arguments, &d.arguments, &QUEUE_ARGS)?;
        }
        // S-QEXP-2: a declare renews the lease.
        let q = self
            .queues
            .get_mut(&id)
            .expect("id came from the vhost map");
        q.last_used_ms = now;
        out.reply = Reply::QueueDeclareOk {
            queue: q.name.to_string(),
            message_count: u32::try_from(q.ready.len()).unwrap_or(u32::MAX),
            consumer_count: u32::try_from(q.consumers.len()).unwrap_or(u32::MAX),
        };
        self.mark_dirty(id);
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of a queue")]
    pub(crate) fn create_queue(
        &mut self,
        vhost: &str,
        name: &str,
        durable: bool,
        owner: Option<ConnId>,
        auto_delete: bool,
        arguments: FieldTable,
        settings: QueueSettings,
        now: u64,
    ) -> QueueId {
        let id = QueueId(self.next_queue);
        self.next_queue += 1;
        self.queues.insert(
            id,
            Queue {
                id,
                vhost: vhost.into(),
                name: name.into(),
                durable,
                owner,
                auto_delete,
                arguments,
                args: settings,
                policy: None,
                operator_policy: None,
                eff: QueueSettings::default(),
                ready: Ready::counting_into(Arc::clone(&self.loaded_total)),
                unacked: 0,
                consumers: Vec::new(),
                rr: 0,
                had_consumer: false,
                last_used_ms: now,
                armed_msg: None,
                armed_lease: None,
                dirty: false,
            },
        );
        if let Some(v) = self.vhosts.get_mut(vhost) {
            v.queues.insert(name.to_owned(), id);
        }
        self.apply_policies(id, false, now, &mut Outcome::default());
        self.mark_dirty(id);
        id
    }

    fn purge_queue(
        &mut self,
        vhost: &str,
        queue: &str,
        owner: Option<ConnId>,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let qid = self.find_queue(vhost, queue, owner)?;
        let q = self.queues.get_mut(&qid).expect("found above");
        let taken = q.ready.drain_all();
        let logged = q.logged();
        let ids: Vec<MessageId> = taken
            .iter()
            .filter(|t| logged && t.msg.is_persistent())
            .map(|t| t.msg.id())
            .collect();
        if !ids.is_empty() {
            out.events.push(Event::Purged {
                vhost: vhost.to_owned(),
                queue: queue.to_owned(),
                ids,
            });
        }
        out.reply = Reply::PurgeOk {
            message_count: u32::try_from(taken.len()).unwrap_or(u32::MAX),
        };
        self.mark_dirty(qid);
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of queue.delete")]
    fn delete_queue_cmd(
        &mut self,
        vhost: &str,
        queue: &str,
        if_unused: bool,
        if_empty: bool,
        owner: Option<ConnId>,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        // Deleting a queue that does not exist succeeds, as in RabbitMQ.
        if !self.vhost(vhost)?.queues.contains_key(queue) {
            out.reply = Reply::DeleteOk { message_count: 0 };
            return Ok(());
        }
        let qid = self.find_queue(vhost, queue, owner)?;
        let q = &self.queues[&qid];
        if if_unused && !q.consumers.is_empty() {
            return Err(BrokerError::precondition(format!(
                "{} in use",
                rs_queue(vhost, queue)
            )));
        }
        if if_empty && !q.ready.is_empty() {
            return Err(BrokerError::precondition(format!(
                "{} not empty",
                rs_queue(vhost, queue)
            )));
        }
        let count = u32::try_from(q.ready.len()).unwrap_or(u32::MAX);
        self.delete_queue(qid, QueueDeletedReason::Deleted, true, now, out);
        out.reply = Reply::DeleteOk {
            message_count: count,
        };
        Ok(())
    }

    /// Deletes a queue with its ready messages (discarded, not dead-lettered: S-QEXP-5),
    /// cancels its consumers (notifying them) and removes its bindings.
    pub(crate) fn delete_queue(
        &mut self,
        qid: QueueId,
        reason: QueueDeletedReason,
        log: bool,
        _now: u64,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.remove(&qid) else {
            return;
        };
        if let Some(v) = self.vhosts.get_mut(&*q.vhost) {
            v.queues.remove(&*q.name);
        }
        if let Some(t) = q.armed_msg {
            self.timers.remove(&(t, Timer::Messages(qid)));
        }
        if let Some(t) = q.armed_lease {
            self.timers.remove(&(t, Timer::Lease(qid)));
        }
        for c in &q.consumers {
            if let Some(ch) = self.channels.get_mut(&c.chan) {
                ch.consumers.remove(&c.tag);
            }
            out.effects.push(Effect::ConsumerCancelled {
                chan: c.chan,
                consumer_tag: c.tag.clone(),
            });
        }
        if let Some(owner) = q.owner
            && let Some(c) = self.conns.get_mut(&owner)
        {
            c.exclusive.remove(&qid);
        }
        if log && q.logged() {
            out.events.push(Event::QueueDeleted {
                vhost: q.vhost.to_string(),
                queue: q.name.to_string(),
            });
        }
        out.effects.push(Effect::QueueDeleted {
            vhost: q.vhost.to_string(),
            queue: q.name.to_string(),
            reason,
        });
        self.remove_bindings_to(&q.vhost, Dest::Queue(qid), log, out);
    }

    // ----- policies -----

    fn set_policy(
        &mut self,
        vhost: &str,
        spec: PolicySpec,
        operator: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        self.vhost(vhost)?;
        let policy = parse_policy(&spec, operator)?;
        self.install_policy(vhost, policy, operator);
        out.events.push(Event::PolicySet {
            vhost: vhost.to_owned(),
            policy: spec,
            operator,
        });
        self.reapply_policies(vhost, true, now, out);
        Ok(())
    }

    pub(crate) fn install_policy(&mut self, vhost: &str, policy: Policy, operator: bool) {
        if let Some(v) = self.vhosts.get_mut(vhost) {
            let map = if operator {
                &mut v.operator_policies
            } else {
                &mut v.policies
            };
            map.insert(policy.spec.name.clone(), policy);
        }
    }

    fn clear_policy(
        &mut self,
        vhost: &str,
        name: &str,
        operator: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let v = self.vhosts.get_mut(vhost).ok_or_else(|| {
            BrokerError::new(ErrorKind::NotAllowed, format!("vhost '{vhost}' not found"))
        })?;
        let map = if operator {
            &mut v.operator_policies
        } else {
            &mut v.policies
        };
        if map.remove(name).is_none() {
            return Err(BrokerError::not_found(format!(
                "no policy '{name}' in vhost '{vhost}'"
            )));
        }
        out.events.push(Event::PolicyCleared {
            vhost: vhost.to_owned(),
            name: name.to_owned(),
            operator,
        });
        self.reapply_policies(vhost, true, now, out);
        Ok(())
    }

    /// S-POL-3: recomputes every queue of the vhost at once.
    pub(crate) fn reapply_policies(
        &mut self,
        vhost: &str,
        enforce: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let ids: Vec<QueueId> = self
            .vhosts
            .get(vhost)
            .map(|v| v.queues.values().copied().collect())
            .unwrap_or_default();
        for id in ids {
            self.apply_policies(id, enforce, now, out);
        }
    }

    /// Recomputes a queue's effective settings (S-POL-2). A TTL change re-derives every ready
    /// message's deadline from its enqueue time (S-TTL-11); with `enforce` a lowered length
    /// limit drops from the head at once (replay leaves that to the logged events).
    pub(crate) fn apply_policies(
        &mut self,
        qid: QueueId,
        enforce: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.get(&qid) else {
            return;
        };
        let Some(v) = self.vhosts.get(&*q.vhost) else {
            return;
        };
        let p = select_policy(v.policies.values(), &q.name);
        let o = select_policy(v.operator_policies.values(), &q.name);
        let eff = QueueSettings::effective(&q.args, p.map(|p| &p.settings), o.map(|p| &p.settings));
        let (pn, on) = (
            p.map(|p| p.spec.name.clone()),
            o.map(|p| p.spec.name.clone()),
        );
        let q = self.queues.get_mut(&qid).expect("looked up above");
        q.policy = pn;
        q.operator_policy = on;
        if q.eff != eff {
            q.ready.set_ttl(eff.message_ttl_ms);
            q.eff = eff;
            self.mark_dirty(qid);
            if enforce {
                self.enforce_length(qid, now, out);
            }
        }
    }
}

pub(crate) fn locked(vhost: &str, name: &str) -> BrokerError {
    BrokerError::new(
        ErrorKind::ResourceLocked,
        format!(
            "cannot obtain exclusive access to locked {}. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
            rs_queue(vhost, name)
        ),
    )
}
