//! One client connection: the protocol header, the handshake (start, SASL PLAIN / AMQPLAIN,
//! tune, open), then the reader loop that decodes frames, assembles contents per channel,
//! checks channel states and turns methods into broker operations for the broker task. Replies
//! and deliveries come back through the connection's [`Outbox`], which a writer task flushes.
//!
//! The reader sends one batch of operations per socket read; when the broker task's bounded
//! channel is full the send waits, so the reader stops reading its socket and a publisher that
//! outruns the broker is throttled by TCP, not buffered. The same holds while a resource
//! alarm is on (`alarm`): a batch holding a publish is kept back, and the socket not read,
//! until the alarm clears (RabbitMQ's "blocked" state; a connection that does not publish is
//! never held). Business rules stay in the broker;
//! this file only checks the protocol (S-ERR-1: wrong state, bad frames).

//!
//! - `mod.rs`: what a connection needs ([`ConnCtx`], [`ConnLimits`]), the reader's state,
//!   the read loop (alarms, timeouts) and the connection close.
//! - `handshake.rs`: protocol header to `connection.open` (SASL PLAIN / AMQPLAIN, tune, the
//!   vhost and connection-limit checks).
//! - `running.rs`: frames of an open connection: channel states, content assembly, methods
//!   (converted in `crate::methods`), permission checks.
//! - `admission.rs`: one place among `connection_max`.
//! - `forward.rs`, `relaying.rs`: a channel forwarded to the quorum queues' leader through
//!   the connection's relay (S-CLU-70..74), and the reader's routing of frames to it.

mod admission;
mod forward;
mod handshake;
mod relaying;
mod running;
mod spool;
mod watchdog;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, connection};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, debug, info, info_span};

use crate::auth::{PermissionCache, UserRegistry};
use crate::convert::{Close, short};
use crate::core::{ChanOp, CoreMsg, Op};
use crate::methods::MethodId;
use crate::outbox::{OUTBOX_HARD_BYTES, Outbox, WriterCtx, run_writer};
use admission::Admission;
pub use forward::ForwardCtx;
pub(crate) use spool::LogSpooler;
use watchdog::{Silence, Watchdog};
use wharf_base::limits;
use wharf_protocol::{
    self as protocol, ChannelId, ContentAssembler, Frame, ProtocolError, ProtocolHeaderCheck,
};

/// What a connection needs from the server.
#[derive(Clone)]
pub struct ConnCtx {
    /// The broker task.
    pub core: mpsc::Sender<CoreMsg>,
    /// Who may log in, and what they may do (shared with the broker task, which refreshes it).
    pub users: Arc<UserRegistry>,
    /// Connection ids, shared by every listener (AMQP and AMQPS).
    pub next_id: Arc<std::sync::atomic::AtomicU64>,
    /// The heartbeat interval we propose, in seconds (0: none).
    pub heartbeat_secs: u16,
    /// Held (never used to send) while a connection task lives, so shutdown can wait until
    /// every connection has flushed its close.
    pub alive: mpsc::Sender<()>,
    /// The resource alarm's reason while one is on (see `alarm`).
    pub alarm: crate::alarm::AlarmWatch,
    /// The configured limits.
    pub limits: ConnLimits,
    /// Connections open now (past `connection.open`), against `limits.connection_max`.
    pub open_connections: Arc<AtomicU32>,
    /// Where large bodies are written as they arrive (S-BIG-3).
    pub spooler: Arc<dyn wharf_protocol::BodySpooler>,
    /// Connections from this context were opened by another member's server for its client
    /// (S-CLU-70): the login is that member's, the password is not asked again.
    pub trusted: bool,
    /// In a cluster with forwarding: the group and the way to its leader (S-CLU-70). Shared:
    /// each frame's routing takes a reference, not a copy of its handles.
    pub forward: Option<Arc<ForwardCtx>>,
}

/// The configured limits a connection applies (each at most its bound in `wharf_base::limits`).
#[derive(Debug, Clone, Copy)]
#[expect(
    clippy::struct_field_names,
    reason = "named as the configuration keys they come from"
)]
pub struct ConnLimits {
    /// Open connections at most.
    pub connection_max: u32,
    /// `channel_max` offered in `connection.tune`.
    pub channel_max: u16,
    /// `frame_max` offered in `connection.tune`.
    pub frame_max: u32,
    /// Largest message body accepted.
    pub message_bytes_max: u32,
}

impl ConnLimits {
    /// The limits of `config`, clamped to the hard bounds (config may lower them only).
    pub fn from_config(config: &crate::server_config::ServerConfig) -> Self {
        ConnLimits {
            connection_max: config.connection_max.min(limits::CONNECTIONS_MAX),
            channel_max: config
                .channel_max
                .clamp(1, limits::CHANNELS_PER_CONNECTION_MAX),
            frame_max: config
                .frame_max
                .clamp(limits::FRAME_BYTES_MIN, limits::FRAME_BYTES_MAX),
            message_bytes_max: config.message_bytes_max.min(limits::MESSAGE_BODY_BYTES_MAX),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Header,
    StartOk,
    TuneOk,
    Open,
    Running,
    /// We sent `connection.close`: only `close-ok` (or `close`) matters now.
    Closing,
    /// A frame could not be decoded, so the byte stream cannot be trusted: we sent (or are
    /// sending) `connection.close` and decode nothing more. What arrives is read and dropped
    /// until the client hangs up or the close wait ends, so that the close frame reaches it
    /// (S-PROTO-5).
    Draining,
    Done,
}

struct Reader {
    id: u64,
    peer: SocketAddr,
    ctx: ConnCtx,
    outbox: Arc<Outbox>,
    heartbeat_tx: watch::Sender<Option<Duration>>,
    heartbeat: Option<Duration>,
    phase: Phase,
    frame_max: u32,
    channel_max: u16,
    vhost: String,
    /// The user who logged in (checked against each `connection.open`'s vhost).
    user: String,
    /// The client's `connection_name` property, for the log lines (S-OPS-4).
    client_name: Option<String>,
    /// This connection's permission decisions (dropped when permissions change).
    permissions: PermissionCache,
    cancel_notify: bool,
    /// The client's `client-properties` from `connection.start-ok` (for the management API).
    client_properties: wharf_broker::FieldTable,
    blocked_notify: bool,
    channels: HashMap<u16, ContentAssembler>,
    /// Bytes held by the assemblers for bodies still arriving, over all channels.
    gathering_bytes: usize,
    ops: Vec<ChanOp>,
    /// The core already knows this connection (it must be told when it goes).
    registered: bool,
    /// Its place among `connection_max` open connections, once open.
    admission: Option<Admission>,
    /// Its relay to the quorum queues' leader, once a channel was forwarded (S-CLU-70).
    relayed: Option<forward::Relayed>,
    /// Each channel's last `basic.qos`, for a channel moving to the leader.
    qos: HashMap<u16, AMQPClass>,
}

/// A connection's read buffer starts this large (an idle connection holds little)...
const READ_BYTES_MIN: usize = 4 * 1024;
/// ...and doubles while reads fill it, up to this (a busy publisher reads in large chunks).
const READ_BYTES_MAX: usize = 64 * 1024;

/// The in-memory door (S-NET-2): connections without a socket, served as an accepted TCP
/// socket from `127.0.0.1` is (the same task, handshake, limits and timeouts). Held by the
/// [`crate::ServerHandle`] and closed when the server shuts down, as the listeners are.
pub(crate) struct Door(std::sync::Mutex<Option<ConnCtx>>);

/// Bytes an in-memory connection buffers each way before a writer waits for its reader (a
/// socket's buffer, about).
const DOOR_BUFFER_BYTES: usize = 64 * 1024;

impl Door {
    pub(crate) fn new(ctx: ConnCtx) -> Self {
        Door(std::sync::Mutex::new(Some(ctx)))
    }

    /// A new connection: the server serves one end (spawned on the current runtime), the
    /// caller gets the other. `None` once closed.
    pub(crate) fn open(&self) -> Option<tokio::io::DuplexStream> {
        let ctx = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()?;
        let (client, server) = tokio::io::duplex(DOOR_BUFFER_BYTES);
        let id = ctx
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let peer = SocketAddr::from(([127, 0, 0, 1], 0));
        tokio::spawn(serve_stream(server, peer, id, ctx));
        Some(client)
    }

    /// No more connections (the server is shutting down); those open carry on.
    pub(crate) fn close(&self) {
        let ctx = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(ctx);
    }
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Door")
    }
}

/// Serves one accepted TCP socket until it closes.
pub async fn serve(stream: TcpStream, peer: SocketAddr, id: u64, ctx: ConnCtx) {
    let _ = stream.set_nodelay(true);
    let (read, write) = stream.into_split();
    serve_halves(read, write, peer, id, ctx).await;
}

/// Serves any byte stream (a TLS session over TCP) until it closes.
pub async fn serve_stream<S>(stream: S, peer: SocketAddr, id: u64, ctx: ConnCtx)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(stream);
    serve_halves(read, write, peer, id, ctx).await;
}

async fn serve_halves<R, W>(read: R, write: W, peer: SocketAddr, id: u64, ctx: ConnCtx)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let span = info_span!("conn", id, peer = %peer);
    async move {
        let outbox = Arc::new(Outbox::default());
        let (heartbeat_tx, heartbeat_rx) = watch::channel(None);
        let writer = tokio::spawn(
            run_writer(
                outbox.clone(),
                write,
                WriterCtx {
                    conn: id,
                    notify: ctx.core.clone(),
                    drained: CoreMsg::Drained,
                    heartbeat: heartbeat_rx,
                },
            )
            .in_current_span(),
        );
        let mut reader = Reader {
            id,
            peer,
            ctx,
            outbox: outbox.clone(),
            heartbeat_tx,
            heartbeat: None,
            phase: Phase::Header,
            frame_max: limits::FRAME_BYTES_MAX,
            channel_max: limits::CHANNELS_PER_CONNECTION_MAX,
            vhost: String::new(),
            user: String::new(),
            client_name: None,
            permissions: PermissionCache::default(),
            cancel_notify: false,
            client_properties: wharf_broker::FieldTable::new(),
            blocked_notify: false,
            channels: HashMap::new(),
            gathering_bytes: 0,
            ops: Vec::new(),
            registered: false,
            admission: None,
            relayed: None,
            qos: HashMap::new(),
        };
        // S-OPS-4: RabbitMQ's lines, with its words.
        info!("accepting AMQP connection ({peer})");
        let alive = reader.ctx.alive.clone();
        reader.run(read).await;
        if reader.registered {
            let _ = reader.ctx.core.send(CoreMsg::Closed(id)).await;
            info!(
                "closing AMQP connection ({}, vhost: '{}', user: '{}')",
                reader.describe(),
                reader.vhost,
                reader.user
            );
        } else {
            info!("closing AMQP connection ({})", reader.describe());
        }
        outbox.finish();
        let _ = writer.await;
        drop(alive);
        debug!("closed");
    }
    .instrument(span)
    .await;
}

impl Reader {
    /// The connection as RabbitMQ's log lines name it: the peer, and the client's
    /// `connection_name` when it gave one.
    pub(super) fn describe(&self) -> String {
        match &self.client_name {
            Some(name) => format!("{} - {name}", self.peer),
            None => self.peer.to_string(),
        }
    }

    async fn run<R: AsyncRead + Unpin>(&mut self, mut sock: R) {
        // Starts small (an idle connection holds little) and grows while reads fill it.
        let mut read_bytes = READ_BYTES_MIN;
        let mut buf = BytesMut::with_capacity(read_bytes);
        // Once we sent `connection.close`: how long the client has, however much it keeps
        // sending, to answer close-ok or hang up (S-PROTO-5).
        let mut close_wait: Option<Pin<Box<tokio::time::Sleep>>> = None;
        // The handshake's deadline, then the heartbeat ticks: one timer, not one per read.
        let mut watchdog = Watchdog::new();
        loop {
            self.process(&mut buf).await;
            self.hold_while_alarm().await;
            if !self.ops.is_empty() {
                let ops = std::mem::take(&mut self.ops);
                let msg = CoreMsg::Ops { conn: self.id, ops };
                if self.ctx.core.send(msg).await.is_err() {
                    return;
                }
            }
            if self.phase == Phase::Done {
                return;
            }
            // S-FLOW-1: a queue this connection publishes into is behind its consumers; read
            // nothing more until the broker task lets it go (at most FLOW_PAUSE_MAX, S-FLOW-2).
            self.outbox.flow_pause(limits::FLOW_PAUSE_MAX).await;
            if buf.capacity() - buf.len() < read_bytes / 4 {
                buf.reserve(read_bytes);
            }
            // A client that sends but does not read (confirms, replies pile up): stop reading
            // it until the writer catches up, so its outbox stays bounded. Deliveries alone
            // never get here (they pause at OUTBOX_HIGH_BYTES).
            self.outbox.wait_below(OUTBOX_HARD_BYTES).await;
            let closing = matches!(self.phase, Phase::Closing | Phase::Draining);
            watchdog.follow(self.phase == Phase::Running, closing, self.heartbeat);
            if closing && close_wait.is_none() {
                close_wait = Some(Box::pin(tokio::time::sleep(limits::CLOSE_OK_WAIT)));
            }
            let close_waited = async {
                match close_wait.as_mut() {
                    Some(sleep) => sleep.await,
                    None => std::future::pending().await,
                }
            };
            let spare = buf.capacity() - buf.len();
            let watching = watchdog.armed();
            // Biased, in this order: the server's own close first (a client that keeps
            // sending cannot hold it back), and no random choice among ready branches (a
            // simulated run is a function of its seed).
            tokio::select! {
                biased;
                () = self.outbox.closing(), if !closing => {
                    self.phase = Phase::Closing;
                }
                () = close_waited, if closing => return,
                r = sock.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        self.outbox.count_received(n);
                        watchdog.heard();
                        if n == spare {
                            read_bytes = (read_bytes * 2).min(READ_BYTES_MAX);
                        }
                    }
                },
                () = watchdog.sleep(), if watching => {
                    if let Err(silence) = watchdog.fired() {
                        match silence {
                            Silence::Handshake => info!("handshake timed out, closing"),
                            Silence::Heartbeats => info!("missed heartbeats from client, closing"),
                        }
                        return;
                    }
                }
            }
        }
    }

    /// RabbitMQ's resource alarm rule: a batch that holds a publish is not passed on while an
    /// alarm is on, and the socket is not read meanwhile (the client's further publishes wait
    /// in TCP; nothing is refused or lost). The client is told `connection.blocked` if it
    /// advertised the capability, and `connection.unblocked` when the alarm clears. Batches
    /// without a publish (acks, consumes, declares) always pass, so consumers drain queues.
    /// Heartbeats are not awaited while held (RabbitMQ pauses its heartbeat monitor too).
    async fn hold_while_alarm(&mut self) {
        if !self.ops.iter().any(|op| matches!(op.op, Op::Publish(_))) {
            return;
        }
        let Some(reason) = self.ctx.alarm.reason() else {
            return;
        };
        info!(%reason, "publisher blocked by a resource alarm");
        self.outbox.set_blocked(true);
        if self.blocked_notify {
            let blocked =
                AMQPClass::Connection(connection::AMQPMethod::Blocked(connection::Blocked {
                    reason: short(&reason),
                }));
            self.outbox
                .send(|b| protocol::encode_method(b, ChannelId(0), &blocked));
        }
        let alarm = self.ctx.alarm.clone();
        tokio::select! {
            biased;
            () = alarm.cleared() => {}
            () = self.outbox.closing() => {
                // The server closes this connection (shutdown): what was held was never
                // confirmed, and now never will be.
                self.ops.clear();
                self.phase = Phase::Closing;
                return;
            }
        }
        self.outbox.set_blocked(false);
        info!("publisher unblocked");
        if self.blocked_notify {
            let unblocked =
                AMQPClass::Connection(connection::AMQPMethod::Unblocked(connection::Unblocked {}));
            self.outbox
                .send(|b| protocol::encode_method(b, ChannelId(0), &unblocked));
        }
    }

    async fn process(&mut self, buf: &mut BytesMut) {
        if self.phase == Phase::Header {
            match protocol::check_protocol_header(buf) {
                ProtocolHeaderCheck::Incomplete => return,
                ProtocolHeaderCheck::Refused => {
                    self.outbox.send(protocol::encode_protocol_header);
                    self.phase = Phase::Done;
                    return;
                }
                ProtocolHeaderCheck::Accepted => {
                    buf.advance(8);
                    self.send_start();
                    self.phase = Phase::StartOk;
                }
            }
        }
        while !matches!(self.phase, Phase::Done) {
            if self.phase == Phase::Draining {
                buf.clear();
                return;
            }
            if self.phase == Phase::Running && self.route(buf).await {
                continue;
            }
            match protocol::decode(buf, self.frame_max) {
                Ok(Some(frame)) => self.on_frame(frame).await,
                Ok(None) => return,
                Err(e) => {
                    self.protocol_error(&e);
                    return;
                }
            }
        }
    }

    /// A frame that could not be decoded: the connection is closed with the error's code
    /// (unless it is closing already), and nothing more is decoded (S-PROTO-5).
    fn protocol_error(&mut self, e: &ProtocolError) {
        if self.phase != Phase::Closing {
            debug!(error = %e, "protocol error");
            let close = Close::new(e.reply_code(), &e.to_string());
            self.close_connection(close, MethodId::NONE);
        }
        self.phase = Phase::Draining;
    }

    /// Closes the connection: through the broker task once it knows us (so the close comes
    /// after every reply already queued), directly before that.
    fn close_connection(&mut self, close: Close, method: MethodId) {
        if self.registered {
            self.ops.push(ChanOp {
                channel: 0,
                op: Op::Fail(close, method),
            });
        } else {
            let frame = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
                reply_code: close.code,
                reply_text: short(&close.text),
                class_id: method.class,
                method_id: method.method,
            }));
            self.outbox
                .send(|b| protocol::encode_method(b, ChannelId(0), &frame));
        }
        self.phase = Phase::Closing;
    }

    async fn on_frame(&mut self, frame: Frame) {
        match self.phase {
            Phase::Closing => self.on_frame_closing(&frame),
            Phase::Running => self.on_frame_running(frame),
            Phase::StartOk | Phase::TuneOk | Phase::Open => self.on_handshake(frame).await,
            Phase::Header | Phase::Draining | Phase::Done => {}
        }
    }

    fn on_frame_closing(&mut self, frame: &Frame) {
        match frame {
            Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))) => {
                self.phase = Phase::Done;
            }
            Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                self.send_close_ok();
                self.phase = Phase::Done;
            }
            _ => {}
        }
    }

    fn send_close_ok(&self) {
        let ok = AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}));
        self.outbox
            .send(|b| protocol::encode_method(b, ChannelId(0), &ok));
    }
}
