//! The reader's side of forwarding (S-CLU-70..74, `forward.rs`): before a frame is decoded
//! for this node, it is routed: a frame of a forwarded channel goes to the leader as it is; the
//! method that first needs a quorum queue on a channel of a member that does not lead moves
//! the channel to the leader; every other frame is this node's.

use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, basic, channel};
use bytes::BytesMut;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Reader;
use super::forward::{
    CHANNEL_CLOSE, CHANNEL_CLOSE_OK, ForwardCtx, Local, Login, frame_method, whole_frame,
};
use crate::convert::short;
use crate::core::{CoreMsg, LocalUse, Op};
use crate::methods::{MethodId, Scope};
use wharf_broker::{ChanRef, ConnId};
use wharf_protocol::{self as protocol, ChannelId, Frame, reply_code};

/// Whether a method frame with these ids may need a quorum queue (S-CLU-70): a queue's
/// declare, bind, purge, delete or unbind, a consume, a publish or a get. Every other frame
/// (acks above all) is this node's without a look at its body.
fn may_need_leader(ids: Option<(u16, u16)>) -> bool {
    matches!(ids, Some((50, 10 | 20 | 30 | 40 | 50) | (60, 20 | 40 | 70)))
}

impl Reader {
    /// Routes the frame at the front of `buf` (S-CLU-70): true when it was taken from the
    /// buffer (forwarded, or dropped on a channel closed here), false when it is this node's
    /// (decode it as always).
    pub(super) async fn route(&mut self, buf: &mut BytesMut) -> bool {
        let Some(fwd) = self.ctx.forward.clone() else {
            return false;
        };
        let Some(len) = whole_frame(buf) else {
            return false;
        };
        let ch = match buf.get(1..3) {
            Some(&[a, b]) => u16::from_be_bytes([a, b]),
            _ => return false,
        };
        let size_ok = u32::try_from(len).is_ok_and(|l| {
            l.saturating_sub(8) <= protocol::frame::payload_bytes_max(self.frame_max)
        });
        if ch == 0 || !size_ok {
            return false;
        }
        if let Some(r) = self.relayed.as_ref()
            && r.lost()
        {
            // Its moved channels are being taken back or closed: route by the outcome.
            r.settled().await;
        }
        match self.relayed.as_ref().and_then(|r| r.local(ch)) {
            Some(Local::Closing) => {
                let frame = buf.split_to(len);
                self.while_closed_here(ch, &frame);
                true
            }
            Some(Local::Forwarded(rch)) => {
                let frame = buf.split_to(len);
                self.forward_frame(&fwd, ch, rch, frame).await;
                true
            }
            None => {
                if !may_need_leader(frame_method(buf)) || !self.channels.contains_key(&ch) {
                    return false;
                }
                let Some(leader) = fwd.forward_to() else {
                    return false;
                };
                let mut copy = BytesMut::from(buf.get(..len).unwrap_or_default());
                let Ok(Some(Frame::Method(_, m))) = protocol::decode(&mut copy, self.frame_max)
                else {
                    return false;
                };
                let Some(queue) = fwd.method_needs(&self.vhost, &m, &self.scope(ch)) else {
                    return false;
                };
                if !self
                    .start_forward(&fwd, leader, ch, MethodId::of(&m), queue)
                    .await
                {
                    return false;
                }
                let frame = buf.split_to(len);
                // Unless the relay broke while the channel moved (it was closed towards the
                // client then).
                if let Some(Local::Forwarded(rch)) = self.relayed.as_ref().and_then(|r| r.local(ch))
                {
                    self.forward_frame(&fwd, ch, rch, frame).await;
                }
                true
            }
        }
    }

    fn scope(&self, ch: u16) -> Scope<'_> {
        Scope {
            vhost: &self.vhost,
            chan: ChanRef::new(self.id, ch),
            owner: Some(ConnId(self.id)),
        }
    }

    /// Moves channel `ch` to the leader: opens the connection's relay if it has none, asks
    /// the broker task to hand the channel over, opens the relay's channel in the same state.
    /// False when the channel stays here: no relay could be opened (the broker task then
    /// refuses with 405, S-CLU-11) or the broker task refused the hand-over (it closed the
    /// channel with 406, S-CLU-71).
    async fn start_forward(
        &mut self,
        fwd: &ForwardCtx,
        leader: wharf_cluster::NodeId,
        ch: u16,
        method: MethodId,
        queue: String,
    ) -> bool {
        if self
            .relayed
            .as_ref()
            .is_some_and(super::forward::Relayed::lost)
        {
            self.relayed = None;
        }
        if self.relayed.is_none() {
            let login = Login {
                vhost: &self.vhost,
                user: &self.user,
                frame_max: self.frame_max,
                cancel_notify: self.cancel_notify,
            };
            let loss = super::forward::Loss {
                cancel_notify: self.cancel_notify,
                core: self.ctx.core.clone(),
                conn: self.id,
                settled: tokio::sync::watch::Sender::new(false),
            };
            match fwd
                .open(leader, &login, Arc::clone(&self.outbox), loss)
                .await
            {
                Ok(r) => {
                    info!(leader, "relaying quorum queue work to the group's leader");
                    self.relayed = Some(r);
                }
                Err(e) => {
                    warn!(leader, error = %e, "could not open a relay to the quorum queues' leader");
                    return false;
                }
            }
        }
        let (done, answer) = oneshot::channel();
        self.push(
            ch,
            Op::Handoff {
                done,
                method,
                queue,
                leader,
            },
        );
        let ops = std::mem::take(&mut self.ops);
        if self
            .ctx
            .core
            .send(CoreMsg::Ops { conn: self.id, ops })
            .await
            .is_err()
        {
            return false;
        }
        let Ok(Some(handoff)) = answer.await else {
            return false;
        };
        let qos = self.qos.get(&ch).cloned();
        let Some(relayed) = self.relayed.as_mut() else {
            return false;
        };
        if let Err(e) = relayed.attach(ch, handoff.confirm_next, qos.as_ref()).await {
            warn!(channel = ch, error = %e, "the relay broke while a channel moved to the leader");
        }
        true
    }

    /// A client's frame on forwarded channel `ch` (the relay's `rch`).
    async fn forward_frame(&mut self, fwd: &ForwardCtx, ch: u16, rch: u16, mut frame: BytesMut) {
        let ids = frame_method(&frame);
        if ids.is_some() && ids != Some(CHANNEL_CLOSE) && ids != Some(CHANNEL_CLOSE_OK) {
            let mut copy = frame.clone();
            if let Ok(Some(Frame::Method(_, m))) = protocol::decode(&mut copy, self.frame_max) {
                if let AMQPClass::Basic(basic::AMQPMethod::Qos(_)) = &m {
                    self.qos.insert(ch, m.clone());
                }
                let classic = match fwd.suspect(&self.vhost, &m, &self.scope(ch)) {
                    Some(probe) => self.local_use(probe).await,
                    None => None,
                };
                if let Some(queue) = classic {
                    let text = fwd.refusal(&queue);
                    warn!(channel = ch, %text, "refused on a forwarded channel");
                    let method = MethodId::of(&m);
                    let close = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                        reply_code: reply_code::PRECONDITION_FAILED,
                        reply_text: short(&text),
                        class_id: method.class,
                        method_id: method.method,
                    }));
                    self.outbox
                        .send(|b| protocol::encode_method(b, ChannelId(ch), &close));
                    if let Some(r) = self.relayed.as_mut() {
                        r.refuse(ch, rch).await;
                    }
                    return;
                }
            }
        }
        let Some(relayed) = self.relayed.as_mut() else {
            return;
        };
        if relayed.forward(rch, &mut frame).await.is_err() {
            return;
        }
        if ids == Some(CHANNEL_CLOSE) || ids == Some(CHANNEL_CLOSE_OK) {
            relayed.detach(ch, ids == Some(CHANNEL_CLOSE_OK));
            self.forget_channel(ch);
            self.qos.remove(&ch);
        }
    }

    /// Asks the broker task (after every operation sent before) which classic queue of this
    /// node `probe` uses, if any.
    async fn local_use(&mut self, probe: LocalUse) -> Option<String> {
        let (done, answer) = oneshot::channel();
        self.push(0, Op::LocalUse { probe, done });
        let ops = std::mem::take(&mut self.ops);
        self.ctx
            .core
            .send(CoreMsg::Ops { conn: self.id, ops })
            .await
            .ok()?;
        answer.await.ok().flatten()
    }

    /// A client's frame on a channel closed here: its `close-ok` (or a crossing `close`) ends
    /// it; everything else is dropped, as after any `channel.close`.
    fn while_closed_here(&mut self, ch: u16, frame: &[u8]) {
        let ids = frame_method(frame);
        if ids == Some(CHANNEL_CLOSE) {
            let ok = AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}));
            self.outbox
                .send(|b| protocol::encode_method(b, ChannelId(ch), &ok));
        }
        if ids == Some(CHANNEL_CLOSE) || ids == Some(CHANNEL_CLOSE_OK) {
            if let Some(r) = self.relayed.as_ref() {
                r.closed_here(ch);
            }
            self.forget_channel(ch);
            self.qos.remove(&ch);
        }
    }
}
