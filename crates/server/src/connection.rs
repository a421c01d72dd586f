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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, channel, connection};
use amq_protocol::types::{AMQPValue, FieldTable as WireTable, LongString};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{Instrument, debug, info, info_span};

use crate::auth::{Need, PermissionCache, UserRegistry, required_permissions};
use crate::convert::{Close, broker_error_close, short};
use crate::core::{ChanOp, CoreMsg, Op, OpenConn};
use crate::methods::{self, Method, MethodId};
use crate::outbox::{OUTBOX_HARD_BYTES, Outbox, WriterCtx, run_writer};
use wharf_base::limits;
use wharf_broker::{ChanRef, Command, ConnId};
use wharf_protocol::{
    self as protocol, Assembled, ChannelId, ContentAssembler, Frame, ProtocolError,
    ProtocolHeaderCheck, reply_code,
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
    pub alarm: watch::Receiver<Option<String>>,
    /// The configured limits.
    pub limits: ConnLimits,
    /// Connections open now (past `connection.open`), against `limits.connection_max`.
    pub open_connections: Arc<AtomicU32>,
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

/// One place among `connection_max`, given back when dropped.
struct Admission(Arc<AtomicU32>);

impl Admission {
    /// Takes a place, or `None` when all `max` are taken.
    fn take(open: &Arc<AtomicU32>, max: u32) -> Option<Admission> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Admission(open.clone()))
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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
    /// This connection's permission decisions (dropped when permissions change).
    permissions: PermissionCache,
    cancel_notify: bool,
    blocked_notify: bool,
    channels: HashMap<u16, ContentAssembler>,
    /// Bytes held by the assemblers for bodies still arriving, over all channels.
    gathering_bytes: usize,
    ops: Vec<ChanOp>,
    /// The core already knows this connection (it must be told when it goes).
    registered: bool,
    /// Its place among `connection_max` open connections, once open.
    admission: Option<Admission>,
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
            permissions: PermissionCache::default(),
            cancel_notify: false,
            blocked_notify: false,
            channels: HashMap::new(),
            gathering_bytes: 0,
            ops: Vec::new(),
            registered: false,
            admission: None,
        };
        debug!("accepted");
        let alive = reader.ctx.alive.clone();
        reader.run(read).await;
        if reader.registered {
            let _ = reader.ctx.core.send(CoreMsg::Closed(id)).await;
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
    async fn run<R: AsyncRead + Unpin>(&mut self, mut sock: R) {
        let mut buf = BytesMut::with_capacity(64 * 1024);
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
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(64 * 1024);
            }
            // A client that sends but does not read (confirms, replies pile up): stop reading
            // it until the writer catches up, so its outbox stays bounded. Deliveries alone
            // never get here (they pause at OUTBOX_HIGH_BYTES).
            self.outbox.wait_below(OUTBOX_HARD_BYTES).await;
            let wait = self.read_timeout();
            let closing = self.phase == Phase::Closing;
            tokio::select! {
                r = tokio::time::timeout(wait, sock.read_buf(&mut buf)) => match r {
                    Err(_) => {
                        if !closing {
                            info!("missed heartbeats from client, closing");
                        }
                        return;
                    }
                    Ok(Ok(0) | Err(_)) => return,
                    Ok(Ok(_)) => {}
                },
                () = self.outbox.closing(), if !closing => {
                    self.phase = Phase::Closing;
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
        let mut alarm = self.ctx.alarm.clone();
        let Some(reason) = alarm.borrow_and_update().clone() else {
            return;
        };
        info!(%reason, "publisher blocked by a resource alarm");
        if self.blocked_notify {
            let blocked =
                AMQPClass::Connection(connection::AMQPMethod::Blocked(connection::Blocked {
                    reason: short(&reason),
                }));
            self.outbox
                .send(|b| protocol::encode_method(b, ChannelId(0), &blocked));
        }
        loop {
            tokio::select! {
                changed = alarm.changed() => {
                    if changed.is_err() || alarm.borrow_and_update().is_none() {
                        break;
                    }
                }
                () = self.outbox.closing() => {
                    // The server closes this connection (shutdown): what was held was never
                    // confirmed, and now never will be.
                    self.ops.clear();
                    self.phase = Phase::Closing;
                    return;
                }
            }
        }
        info!("publisher unblocked");
        if self.blocked_notify {
            let unblocked =
                AMQPClass::Connection(connection::AMQPMethod::Unblocked(connection::Unblocked {}));
            self.outbox
                .send(|b| protocol::encode_method(b, ChannelId(0), &unblocked));
        }
    }

    /// How long the socket may stay silent: two heartbeat intervals once negotiated (the peer
    /// is closed after missed beats), a bounded handshake, a short wait for `close-ok`.
    fn read_timeout(&self) -> Duration {
        match (self.phase, self.heartbeat) {
            (Phase::Closing, _) => limits::CLOSE_OK_WAIT,
            (Phase::Running, Some(hb)) => hb * 2,
            (Phase::Running, None) => Duration::from_secs(u64::from(u32::MAX)),
            _ => limits::HANDSHAKE_WAIT,
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

    fn protocol_error(&mut self, e: &ProtocolError) {
        if self.phase == Phase::Closing {
            self.phase = Phase::Done;
            return;
        }
        debug!(error = %e, "protocol error");
        let close = Close::new(e.reply_code(), &e.to_string());
        self.close_connection(close, MethodId::NONE);
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
            Phase::Header | Phase::Done => {}
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

    // ----- handshake -----

    fn send_start(&self) {
        let mut caps = WireTable::default();
        for cap in [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "authentication_failure_close",
            "per_consumer_qos",
        ] {
            caps.insert(short(cap), AMQPValue::Boolean(true));
        }
        caps.insert(short("direct_reply_to"), AMQPValue::Boolean(false));
        let mut props = WireTable::default();
        let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
        props.insert(short("product"), text("wharf"));
        props.insert(short("version"), text(env!("CARGO_PKG_VERSION")));
        props.insert(short("platform"), text("Rust"));
        props.insert(short("information"), text("https://github.com/wharf"));
        props.insert(short("capabilities"), AMQPValue::FieldTable(caps));
        let start = AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: props,
            mechanisms: LongString::from("PLAIN AMQPLAIN"),
            locales: LongString::from("en_US"),
        }));
        self.outbox
            .send(|b| protocol::encode_method(b, ChannelId(0), &start));
    }

    async fn on_handshake(&mut self, frame: Frame) {
        let Frame::Method(ch, method) = frame else {
            if frame == Frame::Heartbeat {
                return;
            }
            let close = Close::new(reply_code::UNEXPECTED_FRAME, "expected a method frame");
            self.close_connection(close, MethodId::NONE);
            return;
        };
        if ch.0 != 0 {
            let close = Close::new(
                reply_code::CHANNEL_ERROR,
                &format!("channel {} used before the connection is open", ch.0),
            );
            self.close_connection(close, MethodId::NONE);
            return;
        }
        match (self.phase, method) {
            (Phase::StartOk, AMQPClass::Connection(connection::AMQPMethod::StartOk(s))) => {
                self.on_start_ok(&s);
            }
            (Phase::TuneOk, AMQPClass::Connection(connection::AMQPMethod::TuneOk(t))) => {
                self.on_tune_ok(&t);
            }
            (Phase::Open, AMQPClass::Connection(connection::AMQPMethod::Open(o))) => {
                self.on_open(o.virtual_host.as_str().to_owned()).await;
            }
            (_, AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                self.send_close_ok();
                self.phase = Phase::Done;
            }
            (phase, _) => {
                let expected = match phase {
                    Phase::StartOk => "connection.start_ok",
                    Phase::TuneOk => "connection.tune_ok",
                    _ => "connection.open",
                };
                let close = Close::new(
                    reply_code::COMMAND_INVALID,
                    &format!("expected '{expected}'"),
                );
                self.close_connection(close, MethodId::NONE);
            }
        }
    }

    fn on_start_ok(&mut self, s: &connection::StartOk) {
        let caps = s
            .client_properties
            .inner()
            .get("capabilities")
            .and_then(|v| match v {
                AMQPValue::FieldTable(t) => Some(t),
                _ => None,
            });
        let has = |name: &str| {
            caps.and_then(|t| t.inner().get(name))
                .is_some_and(|v| matches!(v, AMQPValue::Boolean(true)))
        };
        self.cancel_notify = has("consumer_cancel_notify");
        self.blocked_notify = has("connection.blocked");
        let mechanism = s.mechanism.as_str();
        let credentials = match mechanism {
            "PLAIN" => parse_plain(s.response.as_bytes()),
            "AMQPLAIN" => parse_amqplain(s.response.as_bytes()),
            _ => None,
        };
        let refusal = match credentials {
            None => Some(format!(
                "Login was refused using authentication mechanism {mechanism}. \
                 For details see the broker logfile."
            )),
            Some((user, password)) => {
                let refusal = self.ctx.users.check(&user, &password, self.peer).err();
                self.user = user;
                refusal
            }
        };
        if let Some(text) = refusal {
            info!(mechanism, "login refused");
            // With authentication_failure_close (RabbitMQ sends it in any case) the client
            // learns why in a 403 close.
            self.close_connection(
                Close::new(reply_code::ACCESS_REFUSED, &text),
                MethodId::CONNECTION_START_OK,
            );
            return;
        }
        let tune = AMQPClass::Connection(connection::AMQPMethod::Tune(connection::Tune {
            channel_max: self.ctx.limits.channel_max,
            frame_max: self.ctx.limits.frame_max,
            heartbeat: self.ctx.heartbeat_secs,
        }));
        self.outbox
            .send(|b| protocol::encode_method(b, ChannelId(0), &tune));
        self.phase = Phase::TuneOk;
    }

    fn on_tune_ok(&mut self, t: &connection::TuneOk) {
        self.channel_max = match t.channel_max {
            0 => self.ctx.limits.channel_max,
            n => n.min(self.ctx.limits.channel_max),
        };
        self.frame_max = protocol::effective_frame_max(t.frame_max).min(self.ctx.limits.frame_max);
        self.heartbeat = (t.heartbeat > 0).then(|| Duration::from_secs(u64::from(t.heartbeat)));
        let _ = self.heartbeat_tx.send(self.heartbeat);
        self.phase = Phase::Open;
    }

    async fn on_open(&mut self, vhost: String) {
        let snapshot = self.ctx.users.snapshot();
        if !snapshot.may_open(&self.user, &vhost) {
            // RabbitMQ's texts (`rabbit_access_control:check_vhost_access`): an unknown vhost
            // first, then "some permission on the vhost".
            let text = if snapshot.has_vhost(&vhost) {
                format!("access to vhost '{vhost}' refused for user '{}'", self.user)
            } else {
                format!("vhost {vhost} not found")
            };
            info!(%vhost, user = %self.user, "vhost access refused");
            self.close_connection(
                Close::new(reply_code::NOT_ALLOWED, &text),
                MethodId::CONNECTION_OPEN,
            );
            return;
        }
        let max = self.ctx.limits.connection_max;
        let Some(admission) = Admission::take(&self.ctx.open_connections, max) else {
            // RabbitMQ's answer to one connection over `connection_max`.
            let text = format!("connection refused: node connection limit ({max}) is reached");
            info!(max, "connection limit reached");
            self.close_connection(
                Close::new(reply_code::NOT_ALLOWED, &text),
                MethodId::CONNECTION_OPEN,
            );
            return;
        };
        self.admission = Some(admission);
        let (done, answer) = oneshot::channel();
        let open = OpenConn {
            conn: self.id,
            vhost: vhost.clone(),
            user: self.user.clone(),
            peer: self.peer,
            outbox: self.outbox.clone(),
            frame_max: self.frame_max,
            cancel_notify: self.cancel_notify,
            done,
        };
        if self
            .ctx
            .core
            .send(CoreMsg::Open(Box::new(open)))
            .await
            .is_err()
        {
            self.phase = Phase::Done;
            return;
        }
        match answer.await {
            Ok(Ok(())) => {
                // The broker task wrote open-ok (and connection.blocked if an alarm is on).
                self.registered = true;
                self.vhost = vhost;
                self.phase = Phase::Running;
                debug!(vhost = %self.vhost, "open");
            }
            Ok(Err(e)) => {
                let mut close = broker_error_close(&e);
                if close.code == reply_code::NOT_ALLOWED {
                    close.text = format!("NOT_ALLOWED - vhost {vhost} not found");
                }
                self.close_connection(close, MethodId::CONNECTION_OPEN);
            }
            Err(_) => self.phase = Phase::Done,
        }
    }

    // ----- running -----

    fn on_frame_running(&mut self, frame: Frame) {
        let ch = frame.channel().0;
        if ch == 0 {
            self.on_connection_frame(frame);
            return;
        }
        let opens = matches!(
            frame,
            Frame::Method(_, AMQPClass::Channel(channel::AMQPMethod::Open(_)))
        );
        if opens
            && !self.channels.contains_key(&ch)
            && self.channels.len() >= usize::from(self.channel_max)
        {
            // RabbitMQ's answer to one channel too many (530, a connection error). It checks
            // the count before anything else, so a client numbering its channels 1, 2, ...
            // meets this rather than the channel-number check below.
            let text = format!(
                "number of channels opened ({}) has reached the negotiated channel_max ({})",
                self.channels.len(),
                self.channel_max
            );
            self.close_connection(
                Close::new(reply_code::NOT_ALLOWED, &text),
                MethodId::CHANNEL_OPEN,
            );
            return;
        }
        if ch > self.channel_max {
            let close = Close::new(
                reply_code::CHANNEL_ERROR,
                &format!("channel id {ch} exceeds channel_max {}", self.channel_max),
            );
            self.close_connection(close, MethodId::CHANNEL_OPEN);
            return;
        }
        let Some(assembler) = self.channels.get_mut(&ch) else {
            match frame {
                Frame::Method(_, AMQPClass::Channel(channel::AMQPMethod::Open(_))) => {
                    let body_max = self.ctx.limits.message_bytes_max;
                    self.channels
                        .insert(ch, ContentAssembler::new(ChannelId(ch), body_max));
                    self.push(ch, Op::Open);
                }
                Frame::Method(_, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) => {}
                Frame::Method(_, m) => {
                    let close = Close::new(reply_code::CHANNEL_ERROR, "expected 'channel.open'");
                    self.close_connection(close, MethodId::of(&m));
                }
                _ => {
                    let close = Close::new(reply_code::CHANNEL_ERROR, "expected 'channel.open'");
                    self.close_connection(close, MethodId::NONE);
                }
            }
            return;
        };
        let held_before = assembler.gathering_capacity_bytes();
        let pushed = assembler.push(frame);
        let held_after = assembler.gathering_capacity_bytes();
        self.gathering_bytes = (self.gathering_bytes + held_after).saturating_sub(held_before);
        if self.gathering_bytes > limits::GATHERING_BYTES_PER_CONNECTION_MAX {
            // Many channels each in the middle of a large message: refuse rather than hold
            // up to channel_max x MESSAGE_BODY_BYTES_MAX (STYLE 3.2).
            let close = Close::new(
                reply_code::RESOURCE_ERROR,
                "too many partly received message bodies on this connection",
            );
            self.close_connection(close, MethodId::BASIC_PUBLISH);
            return;
        }
        match pushed {
            Ok(None) => {}
            Ok(Some(Assembled::Method(m))) => self.on_method(ch, m),
            Ok(Some(Assembled::Content(c))) => self.on_content(ch, c),
            Err(e) if e.is_connection_error() => self.protocol_error(&e),
            Err(e) => {
                let close = Close::new(e.reply_code(), &e.to_string());
                self.push(ch, Op::Fail(close, MethodId::BASIC_PUBLISH));
            }
        }
    }

    fn on_connection_frame(&mut self, frame: Frame) {
        match frame {
            Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                // Everything the client sent before its close goes to the broker first (in
                // `ops`); the broker task then answers close-ok and drops the connection. We
                // wait for the client to hang up (or CLOSE_OK_WAIT).
                self.push(0, Op::ClientClose);
                self.phase = Phase::Closing;
            }
            Frame::Heartbeat
            | Frame::Method(
                _,
                AMQPClass::Connection(
                    connection::AMQPMethod::CloseOk(_)
                    | connection::AMQPMethod::Blocked(_)
                    | connection::AMQPMethod::Unblocked(_),
                ),
            ) => {}
            Frame::Method(_, m) => {
                let close = Close::new(
                    reply_code::COMMAND_INVALID,
                    &format!(
                        "unexpected method on channel 0: {}",
                        MethodId::of(&m).label()
                    ),
                );
                self.close_connection(close, MethodId::of(&m));
            }
            _ => {
                let close = Close::new(reply_code::UNEXPECTED_FRAME, "content on channel 0");
                self.close_connection(close, MethodId::NONE);
            }
        }
    }

    fn forget_channel(&mut self, ch: u16) {
        if let Some(assembler) = self.channels.remove(&ch) {
            self.gathering_bytes = self
                .gathering_bytes
                .saturating_sub(assembler.gathering_capacity_bytes());
        }
    }

    fn push(&mut self, channel: u16, op: Op) {
        self.ops.push(ChanOp { channel, op });
    }

    /// Checks the user's permissions for `needs` (RabbitMQ's configure/write/read regexes,
    /// re-checked per operation through the connection's cache): on refusal the channel is
    /// closed with 403 `ACCESS_REFUSED` and RabbitMQ's text, after everything sent before.
    fn authorized(&mut self, ch: u16, needs: &[Need], method: MethodId) -> bool {
        match self
            .permissions
            .authorize(&self.ctx.users, &self.user, &self.vhost, needs)
        {
            Ok(()) => true,
            Err(text) => {
                debug!(user = %self.user, %text, "access refused");
                self.push(
                    ch,
                    Op::Fail(Close::new(reply_code::ACCESS_REFUSED, &text), method),
                );
                false
            }
        }
    }

    fn cmd(&mut self, ch: u16, cmd: Command, method: MethodId, nowait: bool) {
        if !self.authorized(ch, &required_permissions(&cmd), method) {
            return;
        }
        self.push(
            ch,
            Op::Cmd {
                cmd,
                method,
                nowait,
            },
        );
    }

    fn on_content(&mut self, ch: u16, c: protocol::Content) {
        let publish = match methods::publish_from_content(c, &self.vhost) {
            Ok(publish) => publish,
            Err(close) => {
                self.close_connection(close, MethodId::BASIC_PUBLISH);
                return;
            }
        };
        let allowed = self.permissions.authorize_publish(
            &self.ctx.users,
            &self.user,
            &self.vhost,
            &publish.exchange,
        );
        if let Err(text) = allowed {
            debug!(user = %self.user, %text, "access refused");
            self.push(
                ch,
                Op::Fail(
                    Close::new(reply_code::ACCESS_REFUSED, &text),
                    MethodId::BASIC_PUBLISH,
                ),
            );
            return;
        }
        self.push(ch, Op::Publish(Box::new(publish)));
    }

    /// A method on an open channel: converted by its family in `methods`, then pushed as a
    /// channel operation or (once its permissions are checked) as a broker command.
    fn on_method(&mut self, ch: u16, m: AMQPClass) {
        let id = MethodId::of(&m);
        let scope = methods::Scope {
            vhost: &self.vhost,
            chan: ChanRef::new(self.id, ch),
            owner: Some(ConnId(self.id)),
        };
        match methods::from_wire(m, &scope) {
            Method::Op(op) => {
                if matches!(op, Op::Close | Op::CloseOk) {
                    self.forget_channel(ch);
                }
                self.push(ch, op);
            }
            Method::Command { cmd, nowait } => self.cmd(ch, cmd, id, nowait),
            Method::Unimplemented => {
                // Methods only a server sends (deliver, get-ok, ...) or connection methods on
                // a channel: RabbitMQ answers "unimplemented method" with COMMAND_INVALID.
                let close = Close::new(
                    reply_code::COMMAND_INVALID,
                    &format!("unimplemented method {}", id.label()),
                );
                self.close_connection(close, id);
            }
        }
    }
}

/// SASL PLAIN: `authzid NUL authcid NUL password`.
fn parse_plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|&b| b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let password = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    if parts.next().is_some() {
        return None;
    }
    Some((user, password))
}

/// AMQPLAIN: a field table without its length prefix, holding `LOGIN` and `PASSWORD`.
fn parse_amqplain(response: &[u8]) -> Option<(String, String)> {
    let len = u32::try_from(response.len()).ok()?;
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(response);
    let table = protocol::decode_field_table(&framed).ok()?;
    let text = |key: &str| match table.inner().get(key)? {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    };
    Some((text("LOGIN")?, text("PASSWORD")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_responses_parse_and_malformed_ones_do_not() {
        assert_eq!(
            parse_plain(b"\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(parse_plain(b"guest"), None);
        assert_eq!(parse_plain(b"\0a\0b\0c"), None);
        assert_eq!(parse_plain(b"\0\xff\0x"), None);
    }

    #[test]
    fn amqplain_responses_parse() {
        let mut t = WireTable::default();
        t.insert(
            short("LOGIN"),
            AMQPValue::LongString(LongString::from("guest")),
        );
        t.insert(
            short("PASSWORD"),
            AMQPValue::LongString(LongString::from("pw")),
        );
        let mut buf = BytesMut::new();
        protocol::encode::put_table(&mut buf, &t);
        let body = &buf[4..];
        assert_eq!(parse_amqplain(body), Some(("guest".into(), "pw".into())));
        assert_eq!(parse_amqplain(b"\x01"), None);
    }
}
