//! Forwarding a channel to the quorum queues' leader (S-CLU-70..75; DESIGN "Replication",
//! "Forwarding"). On a member that does not lead the group, the first method of a channel that
//! needs a quorum queue (a publish the group's committed routing sends into one; a declare,
//! bind, purge, delete, get or consume of one) moves the whole channel to the leader: the
//! broker task hands the channel over (it leaves this node's broker, S-CLU-71), the
//! connection's relay (one AMQP connection on the leader's server per client connection,
//! opened through [`wharf_cluster::Relay`] and logged in as the client's user) opens a channel
//! of its own there, and from then on every frame the client sends on the channel goes to the
//! leader's channel and every frame the leader sends on it comes back, byte for byte but for
//! the channel number and the publisher-confirm sequence numbers (the leader's channel counts
//! from 1; the client's from where it was). So the leader's broker, gate, confirms (S-CLU-1)
//! and delivery tags work unchanged.
//!
//! Bounds: the client's frames go to the relay stream as they are read, so a leader that
//! reads no further (its broker task's queue is full, its outbox over its hard mark) stops this
//! reader, which stops reading the client's socket; the leader's frames are read from the
//! stream only while the client's outbox is under its high mark, so a slow client holds the
//! leader's outbox, whose bounds pause its deliveries (S-CLU-73).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection};
use amq_protocol::types::{AMQPValue, FieldTable as WireTable, LongString};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::convert::short;
use crate::outbox::{OUTBOX_HIGH_BYTES, Outbox};
use wharf_base::limits;
use wharf_cluster::{NodeId, QueueGroup, Relay, RelayStream, Role};
use wharf_protocol::{self as protocol, ChannelId, Frame, reply_code};

/// How long opening a relay (the stream and its AMQP handshake) may take.
const OPEN_WAIT: Duration = Duration::from_secs(5);
/// A frame's header: type, channel, size.
const HEADER_BYTES: usize = 7;
/// The reply text of a forwarded channel closed because its relay ended (S-CLU-74).
const RELAY_LOST: &str = "the quorum queues' leader this channel was forwarded to is gone \
     (it stopped leading or is unreachable); publishes not confirmed on this channel never \
     will be; open a new channel";
/// The reply text of a forwarded channel closed because its relay ended while acks, rejects
/// or nacks it sent were not followed by a reply of the leader (S-CLU-75).
const RELAY_LOST_SETTLING: &str = "the quorum queues' leader this channel was forwarded to \
     is gone (it stopped leading or is unreachable); acknowledgements sent since its last \
     reply may not have taken effect, their messages will be delivered again; open a new \
     channel";

/// What a connection needs to forward: the group (who leads, what its committed state holds)
/// and the way to the leader's server.
#[derive(Clone)]
pub struct ForwardCtx {
    group: QueueGroup,
    relay: Arc<dyn Relay>,
}

impl ForwardCtx {
    /// Forwarding for a server configured as a member with a relay.
    pub(crate) fn of(config: &crate::ServerConfig) -> Option<ForwardCtx> {
        Some(ForwardCtx {
            group: config.cluster.clone()?,
            relay: Arc::clone(&config.relay.as_ref()?.0),
        })
    }

    /// The member leading the group when it is not this one.
    fn leader(&self) -> Option<NodeId> {
        match self.group.role() {
            Role::Follower(Some(l)) if l != self.group.node => Some(l),
            _ => None,
        }
    }

    /// The quorum queue `cmd` needs, as the group's committed state knows it.
    fn needs(&self, vhost: &str, cmd: &wharf_broker::Command) -> Option<String> {
        self.group.needs_leader(vhost, cmd)
    }

    /// The quorum queue a publish to `exchange` with `key` goes to, by the committed
    /// routing (a headers exchange is routed without headers here).
    fn publish_needs(&self, vhost: &str, exchange: &str, key: &str) -> Option<String> {
        self.group.machine.with(|m| {
            let b = m.broker();
            b.routed_queue_names(vhost, exchange, key, None)
                .into_iter()
                .find(|q| b.queue_kind(vhost, q) == Some(wharf_broker::QueueKind::Quorum))
        })
    }
}

impl std::fmt::Debug for ForwardCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForwardCtx")
    }
}

/// A client channel's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Local {
    /// Forwarded to this channel of the relay.
    Forwarded(u16),
    /// Closed here (its relay ended, or it named a queue the leader does not hold): everything
    /// but `close-ok` is dropped.
    Closing,
}

/// A channel of the relay connection.
#[derive(Debug)]
struct Remote {
    /// The client's channel, or `None` once it left (the leader's frames are dropped until its
    /// `close-ok`).
    client: Option<u16>,
    /// Replies of the leader to the set-up methods (open-ok, qos-ok) still to drop.
    swallow: u32,
    /// Added to the leader's publisher-confirm sequence numbers.
    confirm_offset: u64,
    /// In confirm mode: publishes sent on, and the highest (leader's) sequence number the
    /// leader confirmed (it confirms in order).
    confirm: bool,
    published: u64,
    confirmed: u64,
    /// The tags of the channel's consumers on the leader.
    consumers: Vec<String>,
    /// The client sent an ack, reject or nack on since the leader's last synchronous reply
    /// on the channel: whether it took effect is not known (S-CLU-75).
    settling: bool,
}

#[derive(Debug, Default)]
pub(super) struct Shared {
    local: HashMap<u16, Local>,
    remote: HashMap<u16, Remote>,
    lost: bool,
}

/// One client connection's relay to the leader's server.
pub(super) struct Relayed {
    up: WriteHalf<RelayStream>,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
    channel_max: u16,
    next: u16,
    outbox: Arc<Outbox>,
    loss: Arc<Loss>,
}

/// What the end of a relay does to the client's moved channels (S-CLU-74).
pub(super) struct Loss {
    /// The client announced `consumer_cancel_notify`: its channels come back to this node
    /// (consumers cancelled, unconfirmed publishes nacked) instead of being closed.
    pub(super) cancel_notify: bool,
    /// The broker task, which takes a channel back.
    pub(super) core: tokio::sync::mpsc::Sender<crate::core::CoreMsg>,
    /// The client's connection.
    pub(super) conn: u64,
    /// Set once the end of the relay was dealt with (every moved channel taken back or
    /// closed): the reader waits for it before it routes a frame of a relay that ended.
    pub(super) settled: tokio::sync::watch::Sender<bool>,
}

impl Drop for Relayed {
    fn drop(&mut self) {
        // Both halves gone: the leader's connection sees its stream end and closes, its
        // consumers cancelled and unacked messages back in their queues.
        self.task.abort();
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the client's connection tells the relay's login.
pub(super) struct Login<'a> {
    pub(super) vhost: &'a str,
    pub(super) user: &'a str,
    pub(super) frame_max: u32,
    pub(super) cancel_notify: bool,
}

impl ForwardCtx {
    /// Opens a relay to `leader` for a client connection whose frames go to `outbox`.
    pub(super) async fn open(
        &self,
        leader: NodeId,
        login: &Login<'_>,
        outbox: Arc<Outbox>,
        loss: Loss,
    ) -> Result<Relayed, String> {
        let opening = async {
            let mut stream = self.relay.open(leader).await?;
            let (channel_max, frame_max) = handshake(&mut stream, login).await?;
            Ok::<_, String>((stream, channel_max, frame_max))
        };
        let (stream, channel_max, frame_max) = tokio::time::timeout(OPEN_WAIT, opening)
            .await
            .map_err(|_| format!("opening a relay to member {leader} timed out"))??;
        let (down, up) = tokio::io::split(stream);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let loss = Arc::new(loss);
        let task = tokio::spawn(downstream(
            down,
            Arc::clone(&shared),
            Arc::clone(&outbox),
            frame_max,
            Arc::clone(&loss),
        ));
        Ok(Relayed {
            up,
            shared,
            task,
            channel_max: channel_max.max(1),
            next: 1,
            outbox,
            loss,
        })
    }

    /// The member to forward to, when this member does not lead.
    pub(super) fn forward_to(&self) -> Option<NodeId> {
        self.leader()
    }

    /// The quorum queue `m` (a method on a channel of a connection to `vhost`) needs.
    pub(super) fn method_needs(
        &self,
        vhost: &str,
        m: &AMQPClass,
        scope: &crate::methods::Scope<'_>,
    ) -> Option<String> {
        if let AMQPClass::Basic(basic::AMQPMethod::Publish(p)) = m {
            return self.publish_needs(vhost, p.exchange.as_str(), p.routing_key.as_str());
        }
        match crate::methods::from_wire(m.clone(), scope) {
            crate::methods::Method::Command { cmd, .. } => self.needs(vhost, &cmd),
            _ => None,
        }
    }

    /// What to ask this node's broker before a method on a forwarded channel goes to the
    /// leader: a method naming a queue, or a publish, that the group's committed state does
    /// not send to a quorum queue (its queue may be this node's classic queue, S-CLU-72; or the
    /// committed state may lag the leader). `None`: it goes.
    pub(super) fn suspect(
        &self,
        vhost: &str,
        m: &AMQPClass,
        scope: &crate::methods::Scope<'_>,
    ) -> Option<crate::core::LocalUse> {
        if let AMQPClass::Basic(basic::AMQPMethod::Publish(p)) = m {
            let (exchange, key) = (p.exchange.as_str(), p.routing_key.as_str());
            return self.publish_needs(vhost, exchange, key).is_none().then(|| {
                crate::core::LocalUse::Publish {
                    exchange: exchange.to_owned(),
                    key: key.to_owned(),
                }
            });
        }
        match crate::methods::from_wire(m.clone(), scope) {
            crate::methods::Method::Command { cmd, .. } => {
                let queue = names_queue(&cmd)?;
                self.needs(vhost, &cmd)
                    .is_none()
                    .then(|| crate::core::LocalUse::Queue(queue.to_owned()))
            }
            _ => None,
        }
    }

    /// The 406 text for a method on a forwarded channel that uses this node's classic queue
    /// `queue` (S-CLU-72).
    pub(super) fn refusal(&self, queue: &str) -> String {
        format!(
            "this channel was forwarded to node {}, the leader of its quorum queues; queue \
             '{queue}' is a classic queue of this node: use it from a channel that never used a \
             quorum queue",
            self.leader()
                .map_or_else(|| "?".to_owned(), |l| l.to_string())
        )
    }
}

/// The queue a command names, for the commands a forwarded channel checks.
fn names_queue(cmd: &wharf_broker::Command) -> Option<&str> {
    use wharf_broker::Command;
    match cmd {
        Command::QueueDeclare(d) => Some(&d.queue),
        Command::QueueBind { queue, .. }
        | Command::QueuePurge { queue, .. }
        | Command::QueueDelete { queue, .. }
        | Command::Consume { queue, .. }
        | Command::Get { queue, .. } => Some(queue),
        _ => None,
    }
}

impl Relayed {
    /// The client channel's side, if it was forwarded.
    pub(super) fn local(&self, ch: u16) -> Option<Local> {
        lock(&self.shared).local.get(&ch).copied()
    }

    /// Whether the relay ended.
    pub(super) fn lost(&self) -> bool {
        lock(&self.shared).lost
    }

    /// Waits until the end of the relay was dealt with (S-CLU-74): each moved channel is then
    /// this node's again, or closed here.
    pub(super) async fn settled(&self) {
        let mut settled = self.loss.settled.subscribe();
        let _ = settled.wait_for(|s| *s).await;
    }

    /// Forwards the client's channel `ch` from now on: opens a channel of the relay in the
    /// same state (confirm mode going on from `confirm_next`, the channel's `basic.qos`).
    pub(super) async fn attach(
        &mut self,
        ch: u16,
        confirm_next: Option<u64>,
        qos: Option<&AMQPClass>,
    ) -> Result<(), String> {
        let rch = {
            let mut s = lock(&self.shared);
            let mut rch = None;
            for _ in 0..self.channel_max {
                let candidate = self.next;
                self.next = if self.next >= self.channel_max {
                    1
                } else {
                    self.next + 1
                };
                if !s.remote.contains_key(&candidate) {
                    rch = Some(candidate);
                    break;
                }
            }
            let rch = rch.ok_or("every channel of the relay is in use")?;
            s.remote.insert(
                rch,
                Remote {
                    client: Some(ch),
                    swallow: 1 + u32::from(qos.is_some()),
                    confirm_offset: confirm_next.map_or(0, |n| n.saturating_sub(1)),
                    confirm: confirm_next.is_some(),
                    published: 0,
                    confirmed: 0,
                    consumers: Vec::new(),
                    settling: false,
                },
            );
            s.local.insert(ch, Local::Forwarded(rch));
            rch
        };
        let mut frames = BytesMut::new();
        let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
        protocol::encode_method(&mut frames, ChannelId(rch), &open);
        if confirm_next.is_some() {
            let select = AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
                nowait: true,
            }));
            protocol::encode_method(&mut frames, ChannelId(rch), &select);
        }
        if let Some(qos) = qos {
            protocol::encode_method(&mut frames, ChannelId(rch), qos);
        }
        self.write(&frames).await
    }

    /// Sends a client's frame (whole, as read) on the relay's channel `rch`.
    pub(super) async fn forward(&mut self, rch: u16, frame: &mut [u8]) -> Result<(), String> {
        match method_ids(frame) {
            Some((60, 40)) => note(&self.shared, rch, |r| r.published += 1),
            Some((60, 80 | 90 | 120)) => note(&self.shared, rch, |r| r.settling = true),
            Some((85, 10)) => note(&self.shared, rch, |r| r.confirm = true),
            _ => {}
        }
        if let Some(c) = frame.get_mut(1..3) {
            c.copy_from_slice(&rch.to_be_bytes());
        }
        self.write(frame).await
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        if let Err(e) = self.up.write_all(bytes).await {
            lose(&self.shared, &self.outbox, &self.loss).await;
            self.outbox.flush();
            return Err(e.to_string());
        }
        Ok(())
    }

    /// The client closed its channel `ch` (`close` sent on, or `close-ok` to the leader's close).
    pub(super) fn detach(&self, ch: u16, leader_done: bool) {
        let mut s = lock(&self.shared);
        if let Some(Local::Forwarded(rch)) = s.local.remove(&ch)
            && leader_done
        {
            s.remote.remove(&rch);
        }
    }

    /// Closes the client's channel `ch` here (S-CLU-72) and the relay's channel behind it: the
    /// leader's frames on it are dropped until its `close-ok`; the client's, until its own.
    pub(super) async fn refuse(&mut self, ch: u16, rch: u16) {
        {
            let mut s = lock(&self.shared);
            s.local.insert(ch, Local::Closing);
            if let Some(r) = s.remote.get_mut(&rch) {
                r.client = None;
            }
        }
        let mut frames = BytesMut::new();
        let close = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: reply_code::REPLY_SUCCESS,
            reply_text: short("forwarded channel closed"),
            class_id: 0,
            method_id: 0,
        }));
        protocol::encode_method(&mut frames, ChannelId(rch), &close);
        let _ = self.write(&frames).await;
    }

    /// The client answered the close of a channel closed here.
    pub(super) fn closed_here(&self, ch: u16) {
        lock(&self.shared).local.remove(&ch);
    }
}

fn note(shared: &Mutex<Shared>, rch: u16, f: impl FnOnce(&mut Remote)) {
    if let Some(r) = lock(shared).remote.get_mut(&rch) {
        f(r);
    }
}

/// The relay ended: every moved channel comes back to its client (S-CLU-74). A client that
/// announced `consumer_cancel_notify` keeps its channels: each consumer gets `basic.cancel`,
/// the publishes not confirmed a `basic.nack`, and the channel goes back to this node's broker
/// (the next quorum queue method moves it again, to the new leader), unless it sent acks,
/// rejects or nacks on that no reply of the leader followed (S-CLU-75). Otherwise each is
/// closed with 541.
async fn lose(shared: &Mutex<Shared>, outbox: &Outbox, loss: &Loss) {
    let moved: Vec<(u16, Remote)> = {
        let mut s = lock(shared);
        if s.lost {
            // The first to see the end deals with it.
            return;
        }
        s.lost = true;
        let remote = std::mem::take(&mut s.remote);
        remote
            .into_values()
            .filter_map(|r| Some((r.client?, r)))
            .collect()
    };
    for (ch, r) in moved {
        // A channel taken back answers its next synchronous method here, which would say
        // that the settlements sent on before it took effect (S-CLU-31): closed instead.
        if loss.cancel_notify && !r.settling {
            let (done, answer) = tokio::sync::oneshot::channel();
            let confirm_next = r.confirm.then(|| r.confirm_offset + r.published + 1);
            let back = crate::core::CoreMsg::Ops {
                conn: loss.conn,
                ops: vec![crate::core::ChanOp {
                    channel: ch,
                    op: crate::core::Op::TakeBack { confirm_next, done },
                }],
            };
            if loss.core.send(back).await.is_ok() && answer.await.is_ok() {
                for tag in &r.consumers {
                    let cancel = AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                        consumer_tag: short(tag),
                        nowait: true,
                    }));
                    outbox.send(|b| protocol::encode_method(b, ChannelId(ch), &cancel));
                }
                if r.confirm && r.published > r.confirmed {
                    let nack = AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
                        delivery_tag: r.confirm_offset + r.published,
                        multiple: true,
                        requeue: false,
                    }));
                    outbox.send(|b| protocol::encode_method(b, ChannelId(ch), &nack));
                }
                lock(shared).local.remove(&ch);
                continue;
            }
        }
        lock(shared).local.insert(ch, Local::Closing);
        let close = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: reply_code::INTERNAL_ERROR,
            reply_text: short(if r.settling {
                RELAY_LOST_SETTLING
            } else {
                RELAY_LOST
            }),
            class_id: 0,
            method_id: 0,
        }));
        outbox.send(|b| protocol::encode_method(b, ChannelId(ch), &close));
    }
    loss.settled.send_replace(true);
}

/// The length of the whole frame at the front of `buf`, once it is all there.
pub(super) fn whole_frame(buf: &[u8]) -> Option<usize> {
    let header = buf.first_chunk::<HEADER_BYTES>()?;
    let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]);
    let len = HEADER_BYTES + usize::try_from(size).ok()? + 1;
    (buf.len() >= len).then_some(len)
}

/// A method frame's class and method ids.
fn method_ids(frame: &[u8]) -> Option<(u16, u16)> {
    if frame.first() != Some(&1) {
        return None;
    }
    let ids = frame.get(7..11)?;
    Some((
        u16::from_be_bytes([ids[0], ids[1]]),
        u16::from_be_bytes([ids[2], ids[3]]),
    ))
}

/// The consumer tag a `basic.consume-ok`, `basic.cancel` or `basic.cancel-ok` frame starts with.
fn consumer_tag(frame: &[u8]) -> Option<String> {
    let len = usize::from(*frame.get(11)?);
    let tag = frame.get(12..12 + len)?;
    Some(String::from_utf8_lossy(tag).into_owned())
}

/// `channel.close-ok`.
pub(super) const CHANNEL_CLOSE_OK: (u16, u16) = (20, 41);
/// `channel.close`.
pub(super) const CHANNEL_CLOSE: (u16, u16) = (20, 40);

/// The frame's class and method ids (for the reader).
pub(super) fn frame_method(frame: &[u8]) -> Option<(u16, u16)> {
    method_ids(frame)
}

/// Reads the leader's frames and hands each to its client channel, while the client's outbox
/// is under its high mark; closes the forwarded channels when the stream ends.
async fn downstream(
    mut down: ReadHalf<RelayStream>,
    shared: Arc<Mutex<Shared>>,
    outbox: Arc<Outbox>,
    frame_max: u32,
    loss: Arc<Loss>,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let why = 'read: loop {
        while let Some(len) = whole_frame(&buf) {
            let mut frame = buf.split_to(len);
            if frame.get(1..3) == Some(&[0, 0]) {
                let mut copy = frame.clone();
                if let Ok(Some(Frame::Method(
                    _,
                    AMQPClass::Connection(connection::AMQPMethod::Close(c)),
                ))) = protocol::decode(&mut copy, frame_max)
                {
                    break 'read format!(
                        "the leader closed the relay: {} {}",
                        c.reply_code, c.reply_text
                    );
                }
                continue;
            }
            pass(&shared, &outbox, &mut frame);
        }
        outbox.wait_below(OUTBOX_HIGH_BYTES).await;
        if outbox.is_closing() {
            break "the client's connection is closing".to_owned();
        }
        match down.read_buf(&mut buf).await {
            Ok(0) => break "the relay's stream ended".to_owned(),
            Ok(_) => {}
            Err(e) => break e.to_string(),
        }
    };
    debug!(reason = %why, "relay to the quorum queues' leader ended");
    lose(&shared, &outbox, &loss).await;
    outbox.flush();
}

/// One frame of the leader on a relay channel: dropped, or rewritten for its client channel
/// and queued on the client's outbox.
fn pass(shared: &Mutex<Shared>, outbox: &Outbox, frame: &mut BytesMut) {
    let Some(&[c0, c1]) = frame.get(1..3).and_then(|c| <&[u8; 2]>::try_from(c).ok()) else {
        return;
    };
    let rch = u16::from_be_bytes([c0, c1]);
    let ids = method_ids(frame);
    let mut s = lock(shared);
    let Some(r) = s.remote.get_mut(&rch) else {
        return;
    };
    let Some(ch) = r.client else {
        if ids == Some(CHANNEL_CLOSE_OK) {
            s.remote.remove(&rch);
        }
        return;
    };
    if ids.is_some() && r.swallow > 0 {
        r.swallow -= 1;
        return;
    }
    // A synchronous reply (not a delivery, return, confirm or the leader's cancel) leaves the
    // leader only once what the channel sent before it committed (S-CLU-10).
    if let Some(m) = ids
        && !matches!(m, (60, 30 | 50 | 60 | 80 | 120))
    {
        r.settling = false;
    }
    // basic.ack / basic.nack to a publisher: the client's sequence numbers.
    if matches!(ids, Some((60, 80 | 120)))
        && let Some(tag) = frame.get_mut(11..19)
    {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(tag);
        let seq = u64::from_be_bytes(raw);
        r.confirmed = r.confirmed.max(seq);
        let n = seq.saturating_add(r.confirm_offset);
        tag.copy_from_slice(&n.to_be_bytes());
    }
    // The channel's consumers: consume-ok adds one; cancel-ok, or the leader's cancel, ends it.
    if let Some((60, m @ (21 | 30 | 31))) = ids
        && let Some(tag) = consumer_tag(frame)
    {
        if m == 21 {
            r.consumers.push(tag);
        } else {
            r.consumers.retain(|t| *t != tag);
        }
    }
    if ids == Some(CHANNEL_CLOSE_OK) {
        s.remote.remove(&rch);
    }
    drop(s);
    if let Some(c) = frame.get_mut(1..3) {
        c.copy_from_slice(&ch.to_be_bytes());
    }
    outbox.send(|b| b.extend_from_slice(frame));
}

/// The AMQP handshake of a relay, as the client of the leader's server: the client's user
/// (PLAIN, no password: the leader's door trusts this member), its vhost, no heartbeats (the
/// relay's stream ends when either side goes). Returns the channel and frame maxima.
async fn handshake(stream: &mut RelayStream, login: &Login<'_>) -> Result<(u16, u32), String> {
    let mut buf = BytesMut::new();
    let mut out = BytesMut::new();
    protocol::encode_protocol_header(&mut out);
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    let Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Start(_))) =
        next_frame(stream, &mut buf).await?
    else {
        return Err("the leader's server did not start the handshake".into());
    };
    let mut caps = WireTable::default();
    for cap in ["publisher_confirms", "basic.nack", "per_consumer_qos"] {
        caps.insert(short(cap), AMQPValue::Boolean(true));
    }
    caps.insert(
        short("consumer_cancel_notify"),
        AMQPValue::Boolean(login.cancel_notify),
    );
    let mut props = WireTable::default();
    props.insert(short("capabilities"), AMQPValue::FieldTable(caps));
    props.insert(
        short("connection_name"),
        AMQPValue::LongString(LongString::from("relay from a cluster member")),
    );
    let mut response = vec![0u8];
    response.extend_from_slice(login.user.as_bytes());
    response.push(0);
    let start_ok = AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
        client_properties: props,
        mechanism: short("PLAIN"),
        response: LongString::from(response),
        locale: short("en_US"),
    }));
    out.clear();
    protocol::encode_method(&mut out, ChannelId(0), &start_ok);
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    let tune = match next_frame(stream, &mut buf).await? {
        Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Tune(t))) => t,
        other => return Err(refused(&other)),
    };
    let frame_max = match tune.frame_max {
        0 => login.frame_max,
        f => f.min(login.frame_max),
    };
    let channel_max = match tune.channel_max {
        0 => limits::CHANNELS_PER_CONNECTION_MAX,
        c => c,
    };
    let tune_ok = AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
        channel_max,
        frame_max,
        heartbeat: 0,
    }));
    let open = AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
        virtual_host: short(login.vhost),
    }));
    out.clear();
    protocol::encode_method(&mut out, ChannelId(0), &tune_ok);
    protocol::encode_method(&mut out, ChannelId(0), &open);
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    match next_frame(stream, &mut buf).await? {
        Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))) => {
            if !buf.is_empty() {
                warn!("the leader's server sent frames before its open-ok was read");
            }
            Ok((channel_max, frame_max))
        }
        other => Err(refused(&other)),
    }
}

fn refused(frame: &Frame) -> String {
    match frame {
        Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => {
            format!(
                "the leader's server refused: {} {}",
                c.reply_code, c.reply_text
            )
        }
        other => format!("the leader's server answered {other:?}"),
    }
}

async fn next_frame(stream: &mut RelayStream, buf: &mut BytesMut) -> Result<Frame, String> {
    loop {
        match protocol::decode(buf, limits::FRAME_BYTES_MAX) {
            Ok(Some(frame)) => return Ok(frame),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if stream.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
            return Err("the leader's server hung up".into());
        }
    }
}
