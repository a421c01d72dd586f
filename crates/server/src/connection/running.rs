//! An open connection's frames: channel 0 (close, heartbeats), channel states and limits,
//! content assembly with its per-connection bound, and each method turned (by
//! `crate::methods`) into a channel operation or, once its permissions are checked, a broker
//! command.

use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, channel, connection};
use tracing::{debug, info};

use super::{Phase, Reader};
use crate::auth::{Need, required_permissions};
use crate::convert::Close;
use crate::core::{ChanOp, Op};
use crate::methods::{self, Method, MethodId};
use wharf_base::limits;
use wharf_broker::{ChanRef, Command, ConnId};
use wharf_protocol::{self as protocol, Assembled, ChannelId, ContentAssembler, Frame, reply_code};

impl Reader {
    pub(super) fn on_frame_running(&mut self, frame: Frame) {
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
                    let assembler = ContentAssembler::new(ChannelId(ch), body_max)
                        .with_spooler(Arc::clone(&self.ctx.spooler));
                    self.channels.insert(ch, assembler);
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
        let gathering_max =
            limits::gathering_bytes_per_connection(self.ctx.limits.message_bytes_max);
        if self.gathering_bytes > gathering_max {
            // Many channels each in the middle of a large message: refuse rather than hold
            // up to channel_max x max_message_size (STYLE 3.2).
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

    pub(super) fn on_connection_frame(&mut self, frame: Frame) {
        match frame {
            Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Close(_))) => {
                // Everything the client sent before its close goes to the broker first (in
                // `ops`); the broker task then answers close-ok and drops the connection. We
                // wait for the client to hang up (or CLOSE_OK_WAIT).
                self.push(0, Op::ClientClose);
                self.phase = Phase::Closing;
            }
            Frame::Method(_, AMQPClass::Connection(connection::AMQPMethod::UpdateSecret(u))) => {
                // S-PROTO-1: as RabbitMQ with its internal users, the new secret is not
                // checked (the login was); the update is logged and answered.
                info!(user = %self.user, reason = %u.reason, "user updated secret");
                let ok = AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(
                    connection::UpdateSecretOk {},
                ));
                self.outbox
                    .send(|b| protocol::encode_method(b, ChannelId(0), &ok));
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

    pub(super) fn forget_channel(&mut self, ch: u16) {
        self.qos.remove(&ch);
        if let Some(assembler) = self.channels.remove(&ch) {
            self.gathering_bytes = self
                .gathering_bytes
                .saturating_sub(assembler.gathering_capacity_bytes());
        }
    }

    pub(super) fn push(&mut self, channel: u16, op: Op) {
        self.ops.push(ChanOp { channel, op });
    }

    /// Checks the user's permissions for `needs` (RabbitMQ's configure/write/read regexes,
    /// re-checked per operation through the connection's cache): on refusal the channel is
    /// closed with 403 `ACCESS_REFUSED` and RabbitMQ's text, after everything sent before.
    pub(super) fn authorized(&mut self, ch: u16, needs: &[Need], method: MethodId) -> bool {
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

    pub(super) fn cmd(&mut self, ch: u16, cmd: Command, method: MethodId, nowait: bool) {
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

    pub(super) fn on_content(&mut self, ch: u16, c: protocol::Content) {
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
    pub(super) fn on_method(&mut self, ch: u16, m: AMQPClass) {
        let id = MethodId::of(&m);
        if self.ctx.forward.is_some()
            && let AMQPClass::Basic(amq_protocol::protocol::basic::AMQPMethod::Qos(_)) = &m
        {
            // Kept for the channel's move to the leader (S-CLU-70).
            self.qos.insert(ch, m.clone());
        }
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
