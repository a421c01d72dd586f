//! The broker task: the one owner of the [`Broker`] and the [`Store`] (DESIGN.md,
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection, exchange, queue, tx};
use bytes::BytesMut;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, warn};

use super::admin::{
    AdminDone, AdminRequest, AdminView, ChannelInfo, ConnectionInfo, MessageCounters,
};
use super::convert::{Close, broker_error_close, properties_to_wire, short};
use super::outbox::{OUTBOX_HIGH_BYTES, Outbox};
use wharf_broker::{
    Broker, BrokerError, ChanRef, Command, DeathFate, DeathReason, Effect, Event, GetOk, Outcome,
    Publish, QueueDeletedReason, Reply,
};
use wharf_clock::Clock;
use wharf_protocol::{self as protocol, ChannelId, DeliverRef, reply_code};
use wharf_store::{Store, StoreError, Ticket};

/// Messages from connections (and the handle) to the broker task.
#[derive(Debug)]
pub enum CoreMsg {
    /// A connection finished its handshake and asks to open `vhost`.
    Open(Box<OpenConn>),
    /// Channel operations of one connection, in the order the client sent them.
    Ops {
        /// The connection.
        conn: u64,
        /// Its operations.
        ops: Vec<ChanOp>,
    },
    /// The connection is gone (socket closed or close handshake done).
    Closed(u64),
    /// A throttled connection's outbox drained below the low mark.
    Drained(u64),
    /// Run the timer step now (tests on a manual clock); answered when done.
    Tick(oneshot::Sender<()>),
    /// Close every connection (320), make everything durable, stop.
    Shutdown,
    /// A request of the management API (`server::admin`).
    Admin(AdminRequest),
}

/// A connection asking to be opened.
#[derive(Debug)]
pub struct OpenConn {
    /// The connection id.
    pub conn: u64,
    /// The virtual host from `connection.open`.
    pub vhost: String,
    /// The user it logged in as (for the management API's listings).
    pub user: String,
    /// The client's address.
    pub peer: std::net::SocketAddr,
    /// Where its frames go.
    pub outbox: Arc<Outbox>,
    /// The negotiated `frame_max`.
    pub frame_max: u32,
    /// The client advertised `consumer_cancel_notify`.
    pub cancel_notify: bool,
    /// The answer: `Ok` once open, or the refusal (530 for an unknown vhost).
    pub done: oneshot::Sender<Result<(), BrokerError>>,
}

/// One operation on one channel.
#[derive(Debug)]
pub struct ChanOp {
    /// The channel number.
    pub channel: u16,
    /// The operation.
    pub op: Op,
}

/// What a client asked of a channel, already converted to broker terms by the reader.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "acks are the hot command; boxing them would cost an allocation each"
)]
pub enum Op {
    /// `channel.open`.
    Open,
    /// `channel.close` from the client.
    Close,
    /// `channel.close-ok`: the client's answer to our `channel.close`.
    CloseOk,
    /// `channel.flow`.
    Flow(bool),
    /// A method that maps to one broker command; `method` is its (class, method) id.
    Cmd {
        /// The command.
        cmd: Command,
        /// The method's class and method ids (for the reply and for error closes).
        method: (u16, u16),
        /// No reply wanted.
        nowait: bool,
    },
    /// `basic.publish` with its content.
    Publish(Box<Publish>),
    /// `confirm.select`.
    ConfirmSelect {
        /// No reply wanted.
        nowait: bool,
    },
    /// `tx.select`.
    TxSelect,
    /// `tx.commit`.
    TxCommit,
    /// `tx.rollback`.
    TxRollback,
    /// The reader found a channel error (e.g. a message over the size limit, 406), or with a
    /// connection-level `Close`, a connection error.
    Fail(Close, (u16, u16)),
    /// `connection.close` from the client (channel 0): answered with `close-ok` after every
    /// operation sent before it.
    ClientClose,
}

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
    Cmd(Command, (u16, u16)),
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

type DurableFuture = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

/// The broker task's state.
pub struct Core {
    broker: Broker,
    store: Option<Store>,
    clock: Arc<dyn Clock>,
    conns: HashMap<u64, ConnState>,
    /// Events of the current batch.
    events: Vec<Event>,
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
    registry: Option<Arc<super::auth::UserRegistry>>,
    /// Memory for the content of queued messages before they are paged out.
    message_memory_bytes: u64,
}

impl Core {
    /// Keeps `registry` in step with the broker's users, permissions and vhosts.
    pub fn set_registry(&mut self, registry: Arc<super::auth::UserRegistry>) {
        registry.refresh(&self.broker);
        self.registry = Some(registry);
    }

    /// Sets the memory for the content of queued messages (`ServerConfig::message_memory_bytes`).
    pub fn set_message_memory_bytes(&mut self, bytes: u64) {
        self.message_memory_bytes = bytes;
    }

    /// A broker task over a recovered broker and its store.
    pub fn new(broker: Broker, store: Store, clock: Arc<dyn Clock>) -> Self {
        let (to_waiter, from_core) = mpsc::channel(4096);
        let (durable_tx, durable) = watch::channel(Ok(0));
        tokio::spawn(durability_waiter(from_core, durable_tx));
        Core {
            broker,
            store: Some(store),
            clock,
            conns: HashMap::new(),
            events: Vec::new(),
            last_ticket: 0,
            dirty: HashSet::new(),
            dropped_dirty: Vec::new(),
            held: HashMap::new(),
            waited_ticket: 0,
            to_waiter,
            durable,
            armed: None,
            stopping: false,
            ticks: Vec::new(),
            admin_waiting: VecDeque::new(),
            counters: MessageCounters::default(),
            registry: None,
            message_memory_bytes: wharf_base::limits::MESSAGE_MEMORY_BYTES,
        }
    }

    /// Logs events produced before serving (recovery's `recovered(now)`).
    pub fn log_startup(&mut self, events: Vec<Event>) -> Result<(), StoreError> {
        self.events = events;
        self.log_batch()
    }

    /// Runs until shutdown; then makes everything durable and closes the store.
    pub async fn run(mut self, mut rx: mpsc::Receiver<CoreMsg>) -> Result<(), StoreError> {
        let mut batch = Vec::with_capacity(BATCH_MSGS_MAX);
        let mut sleep = Box::pin(tokio::time::sleep(Duration::ZERO));
        self.rearm(&mut sleep);
        loop {
            tokio::select! {
                biased;
                changed = self.durable.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = &mut sleep, if self.armed.is_some() => {
                    self.armed = None;
                    self.expire();
                }
                n = rx.recv_many(&mut batch, BATCH_MSGS_MAX) => {
                    if n == 0 {
                        break;
                    }
                    for msg in batch.drain(..) {
                        self.on_msg(msg);
                    }
                }
            }
            if let Err(e) = self.end_batch() {
                error!(error = %e, "write-ahead log failed; closing every connection");
                self.fail_all();
                break;
            }
            let durable_failure = self.durable.borrow().as_ref().err().cloned();
            if let Some(e) = durable_failure {
                error!(error = %e, "making the log durable failed; closing every connection");
                self.fail_all();
                break;
            }
            if self.stopping {
                break;
            }
            self.rearm(&mut sleep);
        }
        let store = self.store.take();
        // A clean shutdown ends with a checkpoint when the log since the last one is over the
        // periodic threshold, so the next start reads little log. Only when every event was
        // logged (the snapshot must match the log).
        let snapshot = self.events.is_empty().then(|| self.broker.snapshot());
        let closed = match store {
            Some(mut store) => tokio::task::spawn_blocking(move || {
                if let Some(snapshot) = snapshot
                    && let Err(e) = store.checkpoint_at_shutdown(snapshot)
                {
                    warn!(error = %e, "checkpoint at shutdown failed; the log keeps everything");
                }
                store.close()
            })
            .await
            .unwrap_or_else(|e| Err(StoreError::Log(format!("close task failed: {e}")))),
            None => Ok(()),
        };
        // Closing the store made everything logged durable: the last held frames (the 320
        // closes of a shutdown) may go. After a failure they were discarded (fail_all).
        if closed.is_ok() {
            for outbox in self.held.values() {
                outbox.release(Ticket::MAX);
            }
        }
        for c in self.conns.values() {
            c.outbox.flush();
        }
        closed
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn rearm(&mut self, sleep: &mut Pin<Box<tokio::time::Sleep>>) {
        let next = self.broker.next_deadline();
        if next == self.armed {
            return;
        }
        self.armed = next;
        if let Some(deadline) = next {
            let wait_ms = deadline.saturating_sub(self.now());
            sleep.set(tokio::time::sleep(Duration::from_millis(wait_ms)));
        }
    }

    fn expire(&mut self) {
        let out = self.broker.expire_due(self.now());
        self.apply_outcome(out, None);
    }

    fn on_msg(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Open(open) => self.open_conn(*open),
            CoreMsg::Ops { conn, ops } => {
                for op in ops {
                    self.on_op(conn, op.channel, op.op);
                }
            }
            CoreMsg::Closed(conn) => self.drop_conn(conn),
            CoreMsg::Drained(conn) => self.unthrottle(conn),
            CoreMsg::Tick(done) => {
                self.expire();
                // Answered after this batch's effects are flushed (end_batch).
                self.ticks.push(done);
            }
            CoreMsg::Shutdown => self.shutdown(),
            CoreMsg::Admin(req) => self.admin(req),
        }
    }

    // ----- the management API's requests (server::admin) -----

    fn admin(&mut self, req: AdminRequest) {
        match req {
            AdminRequest::Command { cmd, done } => match self.broker.handle(*cmd, self.now()) {
                Ok(mut out) => {
                    let reply = std::mem::take(&mut out.reply);
                    let durable = !out.events.is_empty();
                    self.apply_outcome(out, None);
                    // Users, permissions and vhosts may have changed: connections see the
                    // new definitions from their next operation on (the generation moves).
                    if let Some(registry) = &self.registry {
                        registry.refresh(&self.broker);
                    }
                    self.admin_answer(AdminDone::Command(done, reply), durable);
                }
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            },
            AdminRequest::Take {
                vhost,
                queue,
                count,
                done,
            } => match self.admin_take(&vhost, &queue, count) {
                Ok((taken, durable)) => self.admin_answer(AdminDone::Take(done, taken), durable),
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            },
            AdminRequest::Query(query) => {
                let view = AdminView {
                    broker: &self.broker,
                    connections: self.connection_infos(),
                    counters: self.counters,
                    now_ms: self.now(),
                    sync: self.store.as_ref().map(Store::sync_stats),
                };
                query(&view);
            }
        }
    }

    /// Answers now when nothing was logged, else once this batch's records are durable.
    fn admin_answer(&mut self, answer: AdminDone, durable: bool) {
        if durable || !self.admin_waiting.is_empty() {
            // Behind earlier durable answers too, so answers keep their order.
            let ticket = if durable { TICKET_THIS_BATCH } else { 0 };
            self.admin_waiting.push_back((ticket, answer));
        } else {
            answer.send();
        }
    }

    /// `basic.get` with `no_ack` on a private connection and channel (the id no client gets:
    /// the accept loop counts up from 1), closed again before returning.
    fn admin_take(
        &mut self,
        vhost: &str,
        queue: &str,
        count: u32,
    ) -> Result<(Vec<GetOk>, bool), BrokerError> {
        const ADMIN_CONN: u64 = u64::MAX;
        let now = self.now();
        let conn = wharf_broker::ConnId(ADMIN_CONN);
        let chan = ChanRef::new(ADMIN_CONN, 1);
        let opened = self.broker.handle(
            Command::ConnectionOpen {
                conn,
                vhost: vhost.to_owned(),
            },
            now,
        )?;
        self.apply_outcome(opened, None);
        let mut result = self
            .broker
            .handle(Command::ChannelOpen { chan }, now)
            .map(|out| self.apply_outcome(out, None));
        let mut taken = Vec::new();
        let mut durable = false;
        while result.is_ok() && taken.len() < count as usize {
            let get = Command::Get {
                chan,
                queue: queue.to_owned(),
                no_ack: true,
            };
            match self.broker.handle(get, now) {
                Ok(mut out) => {
                    durable |= !out.events.is_empty();
                    let reply = std::mem::take(&mut out.reply);
                    self.apply_outcome(out, None);
                    match reply {
                        Reply::GetOk(g) => {
                            self.counters.delivered += 1;
                            taken.push(g);
                        }
                        _ => break,
                    }
                }
                Err(e) => result = Err(e),
            }
        }
        if let Ok(out) = self.broker.handle(Command::ConnectionClose { conn }, now) {
            durable |= !out.events.is_empty();
            self.apply_outcome(out, None);
        }
        result.map(|()| (taken, durable))
    }

    fn connection_infos(&self) -> Vec<ConnectionInfo> {
        let mut out: Vec<ConnectionInfo> = self
            .conns
            .iter()
            .map(|(&id, c)| {
                let mut channels: Vec<ChannelInfo> = c
                    .channels
                    .iter()
                    .filter(|(_, s)| !s.closing)
                    .map(|(&number, s)| ChannelInfo {
                        number,
                        confirm: s.confirm_next.is_some(),
                        transactional: s.tx.is_some(),
                    })
                    .collect();
                channels.sort_by_key(|ch| ch.number);
                ConnectionInfo {
                    id,
                    vhost: c.vhost.clone(),
                    user: c.user.clone(),
                    peer: c.peer,
                    opened_at_ms: c.opened_at_ms,
                    frame_max: c.frame_max,
                    throttled: c.throttled,
                    channels,
                }
            })
            .collect();
        out.sort_by_key(|c| c.id);
        out
    }

    fn open_conn(&mut self, open: OpenConn) {
        let state = ConnState::new(&open, self.now());
        let cmd = Command::ConnectionOpen {
            conn: wharf_broker::ConnId(open.conn),
            vhost: open.vhost.clone(),
        };
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                self.conns.insert(open.conn, state);
                let ok =
                    AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {}));
                self.reply(open.conn, 0, &ok);
                self.apply_outcome(out, None);
                let _ = open.done.send(Ok(()));
            }
            Err(e) => {
                let _ = open.done.send(Err(e));
            }
        }
    }

    fn drop_conn(&mut self, conn: u64) {
        if let Some(mut c) = self.conns.remove(&conn) {
            if self.dirty.remove(&conn) {
                // Its last frames (a close, close-ok) are sealed with this batch.
                c.flush_acks();
                self.dropped_dirty.push((conn, c.outbox));
            }
            let cmd = Command::ConnectionClose {
                conn: wharf_broker::ConnId(conn),
            };
            if let Ok(out) = self.broker.handle(cmd, self.now()) {
                self.apply_outcome(out, None);
            }
        }
    }

    fn shutdown(&mut self) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for conn in ids {
            let close = Close {
                code: reply_code::CONNECTION_FORCED,
                text: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
                    .to_owned(),
                connection: true,
            };
            self.close_connection(conn, &close, (0, 0));
        }
        self.stopping = true;
    }

    /// The log failed: nothing held will ever be durable, so it is dropped, and every
    /// connection gets only its 541 close (fail-stop, STYLE 3.3).
    fn fail_all(&mut self) {
        for (_, outbox) in self.held.drain().chain(self.dropped_dirty.drain(..)) {
            outbox.discard_unreleased();
            outbox.flush();
        }
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for conn in ids {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.ack_run = None;
                c.outbox.discard_unreleased();
            }
            let close = Close::new(reply_code::INTERNAL_ERROR, "write-ahead log failed");
            self.close_connection(conn, &close, (0, 0));
        }
        for (_, outbox) in self.dropped_dirty.drain(..) {
            // Nothing is held any more: the close is released at once.
            outbox.seal(0, 0);
            outbox.flush();
        }
        self.dirty.clear();
    }

    fn unthrottle(&mut self, conn: u64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.throttled {
            return;
        }
        c.throttled = false;
        let chans: Vec<(u16, bool)> = c
            .channels
            .iter()
            .filter(|(_, s)| !s.closing)
            .map(|(&id, s)| (id, !s.client_flow_off))
            .collect();
        for (id, active) in chans {
            if active {
                self.flow(conn, id, true);
            }
        }
    }

    fn flow(&mut self, conn: u64, ch: u16, active: bool) {
        let cmd = Command::ChannelFlow {
            chan: ChanRef::new(conn, ch),
            active,
        };
        if let Ok(out) = self.broker.handle(cmd, self.now()) {
            self.apply_outcome(out, None);
        }
    }

    // ----- channel operations -----

    fn on_op(&mut self, conn: u64, ch: u16, op: Op) {
        if let Op::ClientClose = op {
            if let Some(c) = self.conns.get_mut(&conn) {
                let ok =
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}));
                c.append(|buf| protocol::encode_method(buf, ChannelId(0), &ok));
                c.outbox.set_closing();
                self.dirty.insert(conn);
                self.drop_conn(conn);
            }
            return;
        }
        if let Op::Fail(close, method) = &op
            && close.connection
        {
            self.close_connection(conn, close, *method);
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if let Op::Open = op {
            self.open_channel(conn, ch);
            return;
        }
        let Some(state) = c.channels.get_mut(&ch) else {
            // The reader checks that channels are open; this is a channel we already dropped
            // after a connection-level failure. Nothing to do.
            return;
        };
        if state.closing {
            self.on_op_while_closing(conn, ch, &op);
            return;
        }
        match op {
            Op::Open | Op::CloseOk | Op::ClientClose => {}
            Op::Close => {
                c.channels.remove(&ch);
                self.close_channel_in_broker(conn, ch);
                let close_ok = method_channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}));
                self.reply(conn, ch, &close_ok);
            }
            Op::Flow(active) => {
                state.client_flow_off = !active;
                let throttled = c.throttled;
                self.flow(conn, ch, active && !throttled);
                let ok = method_channel(channel::AMQPMethod::FlowOk(channel::FlowOk { active }));
                self.reply(conn, ch, &ok);
            }
            Op::Cmd {
                cmd,
                method,
                nowait,
            } => {
                if let Some(buffer) = state.tx.as_mut()
                    && matches!(
                        cmd,
                        Command::Ack { .. } | Command::Nack { .. } | Command::Reject { .. }
                    )
                {
                    buffer.push(TxOp::Cmd(cmd, method));
                    return;
                }
                self.command(conn, ch, cmd, method, nowait);
            }
            Op::Publish(p) => {
                if let Some(buffer) = state.tx.as_mut() {
                    buffer.push(TxOp::Publish(p));
                    return;
                }
                self.publish(conn, ch, *p);
            }
            Op::ConfirmSelect { .. } | Op::TxSelect | Op::TxRollback => {
                self.on_mode_op(conn, ch, &op);
            }
            Op::TxCommit => self.tx_commit(conn, ch),
            Op::Fail(close, method) => self.fail(conn, ch, &close, method),
        }
    }

    fn open_channel(&mut self, conn: u64, ch: u16) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.channels.contains_key(&ch) {
            let close = Close::new(reply_code::CHANNEL_ERROR, "second 'channel.open' seen");
            self.close_connection(conn, &close, (20, 10));
            return;
        }
        c.channels.insert(ch, ChanState::default());
        let cmd = Command::ChannelOpen {
            chan: ChanRef::new(conn, ch),
        };
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                self.reply(
                    conn,
                    ch,
                    &method_channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})),
                );
                self.apply_outcome(out, Some((conn, ch)));
            }
            Err(e) => self.fail(conn, ch, &broker_error_close(&e), (20, 10)),
        }
    }

    /// After our `channel.close`, only `close-ok` (and a crossing `close`) matter.
    fn on_op_while_closing(&mut self, conn: u64, ch: u16, op: &Op) {
        match op {
            Op::CloseOk => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.channels.remove(&ch);
                }
            }
            Op::Close => {
                let close_ok = method_channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}));
                self.reply(conn, ch, &close_ok);
            }
            _ => {}
        }
    }

    /// `confirm.select`, `tx.select`, `tx.rollback`: channel mode changes, refused with
    /// RabbitMQ's 406 texts when they conflict.
    fn on_mode_op(&mut self, conn: u64, ch: u16, op: &Op) {
        let Some(state) = self.chan_mut(conn, ch) else {
            return;
        };
        let (refusal, method, reply) = match *op {
            Op::ConfirmSelect { nowait } => {
                if state.tx.is_some() {
                    (
                        Some("cannot switch from tx to confirm mode"),
                        (85, 10),
                        None,
                    )
                } else {
                    state.confirm_next.get_or_insert(1);
                    let ok =
                        AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {}));
                    (None, (85, 10), (!nowait).then_some(ok))
                }
            }
            Op::TxSelect => {
                if state.confirm_next.is_some() {
                    (
                        Some("cannot switch from confirm to tx mode"),
                        (90, 10),
                        None,
                    )
                } else {
                    state.tx.get_or_insert_with(Vec::new);
                    let ok = AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {}));
                    (None, (90, 10), Some(ok))
                }
            }
            _ => match state.tx.as_mut() {
                None => (Some("channel is not transactional"), (90, 30), None),
                Some(buffer) => {
                    buffer.clear();
                    let ok = AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {}));
                    (None, (90, 30), Some(ok))
                }
            },
        };
        if let Some(text) = refusal {
            let close = Close::new(reply_code::PRECONDITION_FAILED, text);
            self.fail(conn, ch, &close, method);
        } else if let Some(ok) = reply {
            self.reply(conn, ch, &ok);
        }
    }

    fn tx_commit(&mut self, conn: u64, ch: u16) {
        let ops = self
            .chan_mut(conn, ch)
            .and_then(|s| s.tx.as_mut().map(std::mem::take));
        let Some(ops) = ops else {
            let close = Close::new(
                reply_code::PRECONDITION_FAILED,
                "channel is not transactional",
            );
            self.fail(conn, ch, &close, (90, 20));
            return;
        };
        for op in ops {
            match op {
                TxOp::Publish(p) => self.publish(conn, ch, *p),
                TxOp::Cmd(cmd, method) => self.command(conn, ch, cmd, method, true),
            }
            if !self.chan_open(conn, ch) {
                return;
            }
        }
        // tx.commit-ok promises that the transaction's work is durable: like every frame,
        // it is released only once this batch's records are.
        let ok = AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {}));
        self.reply(conn, ch, &ok);
    }

    fn chan_mut(&mut self, conn: u64, ch: u16) -> Option<&mut ChanState> {
        self.conns.get_mut(&conn)?.channels.get_mut(&ch)
    }

    fn chan_open(&self, conn: u64, ch: u16) -> bool {
        self.conns
            .get(&conn)
            .and_then(|c| c.channels.get(&ch))
            .is_some_and(|s| !s.closing)
    }

    fn publish(&mut self, conn: u64, ch: u16, p: Publish) {
        match self.broker.handle(Command::Publish(p), self.now()) {
            Ok(out) => {
                self.counters.published += 1;
                let result = out.published().unwrap_or_default();
                self.apply_outcome(out, Some((conn, ch)));
                let seq = self.chan_mut(conn, ch).and_then(|s| {
                    let seq = s.confirm_next?;
                    s.confirm_next = Some(seq + 1);
                    Some(seq)
                });
                if let Some(seq) = seq
                    && let Some(c) = self.conns.get_mut(&conn)
                {
                    c.confirm(ch, seq, !result.refused);
                    self.dirty.insert(conn);
                }
            }
            Err(e) => self.fail(conn, ch, &broker_error_close(&e), (60, 40)),
        }
    }

    fn command(&mut self, conn: u64, ch: u16, cmd: Command, method: (u16, u16), nowait: bool) {
        // An ack settles every message it names (many with `multiple`): count those.
        let acking = match &cmd {
            Command::Ack { chan, .. } => Some((*chan, self.broker.channel_unacked(*chan))),
            _ => None,
        };
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                if let Some((chan, before)) = acking {
                    let settled = before.saturating_sub(self.broker.channel_unacked(chan));
                    self.counters.acked += u64::try_from(settled).unwrap_or(u64::MAX);
                }
                // The reply comes before the effects (consume-ok before the first delivery);
                // a definition's reply is released, like everything, once its records are
                // durable (S-DUR-1).
                if !nowait {
                    self.send_reply(conn, ch, method, &out.reply);
                }
                self.apply_outcome(out, Some((conn, ch)));
            }
            Err(e) => self.fail(conn, ch, &broker_error_close(&e), method),
        }
    }

    /// Writes the reply of a successful command (before its effects: consume-ok before the
    /// first delivery, get-ok with its content).
    fn send_reply(&mut self, conn: u64, ch: u16, method: (u16, u16), reply: &Reply) {
        if let Reply::GetOk(g) = reply {
            self.counters.delivered += 1;
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let m = &g.message;
            let get_ok = AMQPClass::Basic(basic::AMQPMethod::GetOk(basic::GetOk {
                delivery_tag: g.delivery_tag.0,
                redelivered: g.redelivered,
                exchange: short(&m.exchange),
                routing_key: short(&m.routing_key),
                message_count: g.message_count,
            }));
            let props = properties_to_wire(&m.properties);
            let frame_max = c.frame_max;
            c.append(|buf| {
                protocol::encode_method(buf, ChannelId(ch), &get_ok);
                protocol::encode_content(buf, ChannelId(ch), &props, &m.body, frame_max);
            });
            self.dirty.insert(conn);
            return;
        }
        if let Some(frame) = reply_method(method, reply) {
            self.reply(conn, ch, &frame);
        }
    }

    fn reply(&mut self, conn: u64, ch: u16, method: &AMQPClass) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.append(|buf| protocol::encode_method(buf, ChannelId(ch), method));
            self.dirty.insert(conn);
        }
    }

    fn close_channel_in_broker(&mut self, conn: u64, ch: u16) {
        let cmd = Command::ChannelClose {
            chan: ChanRef::new(conn, ch),
        };
        if let Ok(out) = self.broker.handle(cmd, self.now()) {
            self.apply_outcome(out, None);
        }
    }

    /// Closes the channel (403-406) or the whole connection (5xx) as `close` says (S-ERR-1).
    fn fail(&mut self, conn: u64, ch: u16, close: &Close, method: (u16, u16)) {
        if close.connection {
            self.close_connection(conn, close, method);
            return;
        }
        debug!(conn, channel = ch, code = close.code, text = %close.text, "closing channel");
        let frame = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: close.code,
            reply_text: short(&close.text),
            class_id: method.0,
            method_id: method.1,
        }));
        self.reply(conn, ch, &frame);
        if let Some(state) = self.chan_mut(conn, ch) {
            // After channel.close, everything on the channel is ignored until close-ok.
            state.closing = true;
            state.tx = None;
        }
        self.close_channel_in_broker(conn, ch);
    }

    fn close_connection(&mut self, conn: u64, close: &Close, method: (u16, u16)) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        debug!(conn, code = close.code, text = %close.text, "closing connection");
        let frame = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: close.code,
            reply_text: short(&close.text),
            class_id: method.0,
            method_id: method.1,
        }));
        c.append(|buf| protocol::encode_method(buf, ChannelId(0), &frame));
        c.outbox.set_closing();
        self.dirty.insert(conn);
        self.drop_conn(conn);
    }

    // ----- effects -----

    fn apply_outcome(&mut self, out: Outcome, origin: Option<(u64, u16)>) {
        let Outcome {
            events, effects, ..
        } = out;
        self.events.extend(events);
        for effect in effects {
            self.effect(effect, origin);
        }
    }

    /// Bumps the metrics counters an effect stands for.
    fn count(&mut self, effect: &Effect) {
        match effect {
            Effect::Deliver(_) => self.counters.delivered += 1,
            Effect::MessageDied { reason, fate, .. } => {
                if *reason == DeathReason::Expired {
                    self.counters.expired += 1;
                }
                if matches!(fate, DeathFate::DeadLettered { targets } if *targets > 0) {
                    self.counters.dead_lettered += 1;
                }
            }
            _ => {}
        }
    }

    fn effect(&mut self, effect: Effect, origin: Option<(u64, u16)>) {
        self.count(&effect);
        match effect {
            Effect::Deliver(d) => {
                let conn = d.chan.conn.0;
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let m = &d.message;
                let tag = short(&d.consumer_tag);
                let exchange = short(&m.exchange);
                let key = short(&m.routing_key);
                let props = properties_to_wire(&m.properties);
                let frame_max = c.frame_max;
                let ch = ChannelId(d.chan.channel.0);
                let queued = c.append(|buf| {
                    let deliver = DeliverRef {
                        consumer_tag: &tag,
                        delivery_tag: d.delivery_tag.0,
                        redelivered: d.redelivered,
                        exchange: &exchange,
                        routing_key: &key,
                    };
                    protocol::encode_deliver(buf, ch, deliver, &props, &m.body, frame_max);
                });
                self.dirty.insert(conn);
                if queued > OUTBOX_HIGH_BYTES {
                    self.throttle(conn);
                }
            }
            Effect::Return {
                reply_code,
                reply_text,
                exchange,
                routing_key,
                message,
            } => {
                let Some((conn, ch)) = origin else {
                    return;
                };
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let ret = AMQPClass::Basic(basic::AMQPMethod::Return(basic::Return {
                    reply_code,
                    reply_text: short(&reply_text),
                    exchange: short(&exchange),
                    routing_key: short(&routing_key),
                }));
                let props = properties_to_wire(&message.properties);
                let frame_max = c.frame_max;
                c.append(|buf| {
                    protocol::encode_method(buf, ChannelId(ch), &ret);
                    protocol::encode_content(buf, ChannelId(ch), &props, &message.body, frame_max);
                });
                self.dirty.insert(conn);
            }
            Effect::ConsumerCancelled { chan, consumer_tag } => {
                let conn = chan.conn.0;
                let notify = self.conns.get(&conn).is_some_and(|c| c.cancel_notify);
                if notify {
                    let cancel = AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                        consumer_tag: short(&consumer_tag),
                        nowait: true,
                    }));
                    self.reply(conn, chan.channel.0, &cancel);
                }
            }
            Effect::QueueDeleted {
                vhost,
                queue,
                reason,
            } => {
                if reason == QueueDeletedReason::Expired {
                    info!(%vhost, %queue, "queue expired (S-QEXP-5)");
                } else {
                    debug!(%vhost, %queue, ?reason, "queue deleted");
                }
            }
            Effect::ExchangeDeleted { vhost, exchange } => {
                debug!(%vhost, %exchange, "exchange deleted");
            }
            Effect::MessageDied {
                vhost,
                queue,
                id,
                reason,
                fate,
            } => {
                if fate == DeathFate::ExchangeMissing {
                    warn!(%vhost, %queue, id = id.0, reason = reason.name(),
                        "dead-letter exchange missing; message dropped (S-DLX-4)");
                } else {
                    debug!(%vhost, %queue, id = id.0, reason = reason.name(), ?fate, "message died");
                }
            }
        }
    }

    /// The connection's outbox is over the high mark: pause deliveries to all its channels
    /// until the writer reports it drained, so a slow consumer never makes us hold unbounded
    /// memory (messages wait in their queues instead).
    fn throttle(&mut self, conn: u64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.throttled {
            return;
        }
        c.throttled = true;
        c.outbox.set_throttled();
        let chans: Vec<u16> = c.channels.keys().copied().collect();
        debug!(conn, "outbox over its bound; pausing deliveries");
        for ch in chans {
            self.flow(conn, ch, false);
        }
    }

    // ----- end of batch: log, durability, confirms, flush -----

    fn log_batch(&mut self) -> Result<(), StoreError> {
        if !self.events.is_empty() {
            let store = self
                .store
                .as_ref()
                .ok_or_else(|| StoreError::Log("store closed".to_owned()))?;
            if let Some(ticket) = store.log(&self.events)? {
                self.last_ticket = ticket;
            }
            self.events.clear();
        }
        Ok(())
    }

    /// Seals every outbox that got frames in this batch with the store's latest ticket,
    /// releases what is durable, and asks the durability waiter about the rest.
    fn end_batch(&mut self) -> Result<(), StoreError> {
        self.log_batch()?;
        if let Some(failure) = self.broker.storage_failure() {
            return Err(StoreError::Log(failure.to_owned()));
        }
        // The broker now reflects the log exactly: a snapshot for a checkpoint fits here.
        if let Some(store) = self.store.as_mut() {
            store.maybe_checkpoint(&self.broker);
        }
        let ticket = self.last_ticket;
        let watermark = self.watermark();
        // Bodies of durable queued messages beyond the budget go back to disk (DESIGN
        // "Memory"); only when there is a store to read them back from.
        if self.store.is_some() {
            self.broker.page_out(watermark, self.message_memory_bytes);
        }
        self.held.retain(|_, outbox| outbox.release(watermark));
        for conn in std::mem::take(&mut self.dirty) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.flush_acks();
                if c.outbox.seal(ticket, watermark) {
                    self.held.insert(conn, c.outbox.clone());
                }
            }
        }
        for (conn, outbox) in std::mem::take(&mut self.dropped_dirty) {
            if outbox.seal(ticket, watermark) {
                self.held.insert(conn, outbox);
            }
        }
        // Management answers of this batch wait for its ticket, like frames.
        let mut admin_holds = false;
        for entry in self.admin_waiting.iter_mut().rev() {
            match entry.0 {
                0 => {}
                TICKET_THIS_BATCH => {
                    entry.0 = ticket;
                    admin_holds = true;
                }
                _ => break,
            }
        }
        if (!self.held.is_empty() || admin_holds)
            && ticket > watermark
            && ticket > self.waited_ticket
            && let Some(store) = self.store.as_ref()
        {
            let fut: DurableFuture = Box::pin(store.durable(ticket));
            self.waited_ticket = ticket;
            if self.to_waiter.try_send((ticket, fut)).is_err() {
                warn!("durability waiter is behind; frames wait for the next batch");
                self.waited_ticket = watermark;
            }
        }
        while self
            .admin_waiting
            .front()
            .is_some_and(|&(t, _)| t <= watermark)
        {
            if let Some((_, answer)) = self.admin_waiting.pop_front() {
                answer.send();
            }
        }
        for done in self.ticks.drain(..) {
            let _ = done.send(());
        }
        Ok(())
    }

    fn watermark(&self) -> Ticket {
        let from_waiter = self.durable.borrow().as_ref().copied().unwrap_or(0);
        let from_store = self.store.as_ref().map_or(0, Store::durable_watermark);
        from_waiter.max(from_store)
    }
}

/// Awaits the store's durability futures in ticket order and publishes the durable ticket
/// (or the failure) to the broker task. Never waits on the broker task, so the bounded channel
/// between them cannot deadlock.
async fn durability_waiter(
    mut from_core: mpsc::Receiver<(Ticket, DurableFuture)>,
    durable: watch::Sender<Result<Ticket, String>>,
) {
    while let Some((ticket, fut)) = from_core.recv().await {
        match fut.await {
            Ok(()) => {
                durable.send_modify(|d| {
                    if let Ok(t) = d {
                        *t = (*t).max(ticket);
                    }
                });
            }
            Err(e) => {
                let _ = durable.send(Err(e.to_string()));
                return;
            }
        }
    }
}

fn method_channel(m: channel::AMQPMethod) -> AMQPClass {
    AMQPClass::Channel(m)
}

/// The reply frame of a successful method, by its (class, method) id.
fn reply_method(method: (u16, u16), reply: &Reply) -> Option<AMQPClass> {
    use AMQPClass as C;
    Some(match (method, reply) {
        ((40, 10), _) => C::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {})),
        ((40, 20), _) => C::Exchange(exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {})),
        ((40, 30), _) => C::Exchange(exchange::AMQPMethod::BindOk(exchange::BindOk {})),
        ((40, 40), _) => C::Exchange(exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {})),
        (
            (50, 10),
            Reply::QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            },
        ) => C::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
            queue: short(queue),
            message_count: *message_count,
            consumer_count: *consumer_count,
        })),
        ((50, 20), _) => C::Queue(queue::AMQPMethod::BindOk(queue::BindOk {})),
        ((50, 50), _) => C::Queue(queue::AMQPMethod::UnbindOk(queue::UnbindOk {})),
        ((50, 30), Reply::PurgeOk { message_count }) => {
            C::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk {
                message_count: *message_count,
            }))
        }
        ((50, 40), Reply::DeleteOk { message_count }) => {
            C::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                message_count: *message_count,
            }))
        }
        ((60, 10), _) => C::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})),
        ((60, 20), Reply::ConsumeOk { consumer_tag }) => {
            C::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                consumer_tag: short(consumer_tag),
            }))
        }
        ((60, 30), Reply::CancelOk { consumer_tag }) => {
            C::Basic(basic::AMQPMethod::CancelOk(basic::CancelOk {
                consumer_tag: short(consumer_tag),
            }))
        }
        ((60, 70), Reply::GetEmpty) => C::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})),
        ((60, 110), _) => C::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})),
        _ => return None,
    })
}
