//! Connection and channel operations: opening and dropping connections, the channel state
//! machine (open, close, flow, confirm and transaction modes), publishes and commands applied
//! to the broker, and the closes a refusal causes (S-ERR-1).

use amq_protocol::protocol::{AMQPClass, channel, confirm, connection, tx};
use tracing::debug;

use super::frames::method_channel;
use super::msg::{Op, OpenConn};
use super::{ChanState, ConnState, Core, TxOp};
use crate::convert::{Close, broker_error_close, short};
use crate::methods::MethodId;
use wharf_broker::{ChanRef, Command, Publish, QueueKind, Reply};
use wharf_protocol::{self as protocol, ChannelId, reply_code};

impl Core {
    pub(super) fn open_conn(&mut self, open: OpenConn) {
        let state = ConnState::new(&open, self.now());
        let cmd = Command::ConnectionOpen {
            conn: wharf_broker::ConnId(open.conn),
            vhost: open.vhost.clone(),
        };
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                self.counters.connections_opened += 1;
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

    pub(super) fn drop_conn(&mut self, conn: u64) {
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

    pub(super) fn shutdown(&mut self) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for conn in ids {
            let close = Close {
                code: reply_code::CONNECTION_FORCED,
                text: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
                    .to_owned(),
                connection: true,
            };
            self.close_connection(conn, &close, MethodId::NONE);
        }
        self.stopping = true;
    }

    /// The log failed (or, in a cluster, the group failed this member: `why`): nothing held
    /// will ever be durable, so it is dropped, and every connection gets only its 541 close
    /// (fail-stop, STYLE 3.3).
    pub(super) fn fail_all(&mut self, why: &str) {
        self.close_all_now(&Close::new(reply_code::INTERNAL_ERROR, why));
    }

    /// Closes every connection with `close`, discarding every frame not released yet: only
    /// the closes go out, at once.
    pub(super) fn close_all_now(&mut self, close: &Close) {
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
            self.close_connection(conn, close, MethodId::NONE);
        }
        for (_, outbox) in self.dropped_dirty.drain(..) {
            // Nothing is held any more: the close is released at once.
            outbox.seal(0, 0);
            outbox.flush();
        }
        self.dirty.clear();
    }

    pub(super) fn flow(&mut self, conn: u64, ch: u16, active: bool) {
        let cmd = Command::ChannelFlow {
            chan: ChanRef::new(conn, ch),
            active,
        };
        if let Ok(out) = self.broker.handle(cmd, self.now()) {
            self.apply_outcome(out, None);
        }
    }

    pub(super) fn on_op(&mut self, conn: u64, ch: u16, op: Op) {
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
        if let Op::LocalUse { probe, done } = op {
            let _ = done.send(self.local_use(conn, &probe));
            return;
        }
        if let Op::TakeBack { confirm_next, done } = op {
            self.take_back(conn, ch, confirm_next);
            let _ = done.send(());
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
            Op::Open
            | Op::CloseOk
            | Op::ClientClose
            | Op::LocalUse { .. }
            | Op::TakeBack { .. } => {}
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
            Op::Handoff {
                done,
                method,
                queue,
                leader,
            } => self.hand_off(conn, ch, (method, &queue, leader), done),
            Op::Fail(close, method) => self.fail(conn, ch, &close, method),
        }
    }

    pub(super) fn open_channel(&mut self, conn: u64, ch: u16) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.channels.contains_key(&ch) {
            let close = Close::new(reply_code::CHANNEL_ERROR, "second 'channel.open' seen");
            self.close_connection(conn, &close, MethodId::CHANNEL_OPEN);
            return;
        }
        c.channels.insert(ch, ChanState::default());
        let cmd = Command::ChannelOpen {
            chan: ChanRef::new(conn, ch),
        };
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                self.counters.channels_opened += 1;
                self.reply(
                    conn,
                    ch,
                    &method_channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})),
                );
                self.apply_outcome(out, Some((conn, ch)));
            }
            Err(e) => self.fail(conn, ch, &broker_error_close(&e), MethodId::CHANNEL_OPEN),
        }
    }

    /// After our `channel.close`, only `close-ok` (and a crossing `close`) matter.
    pub(super) fn on_op_while_closing(&mut self, conn: u64, ch: u16, op: &Op) {
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
    pub(super) fn on_mode_op(&mut self, conn: u64, ch: u16, op: &Op) {
        let Some(state) = self.chan_mut(conn, ch) else {
            return;
        };
        let (refusal, method, reply) = match *op {
            Op::ConfirmSelect { nowait } => {
                if state.tx.is_some() {
                    (
                        Some("cannot switch from tx to confirm mode"),
                        MethodId::CONFIRM_SELECT,
                        None,
                    )
                } else {
                    state.confirm_next.get_or_insert(1);
                    let ok =
                        AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {}));
                    (None, MethodId::CONFIRM_SELECT, (!nowait).then_some(ok))
                }
            }
            Op::TxSelect => {
                if state.confirm_next.is_some() {
                    (
                        Some("cannot switch from confirm to tx mode"),
                        MethodId::TX_SELECT,
                        None,
                    )
                } else {
                    state.tx.get_or_insert_with(Vec::new);
                    let ok = AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {}));
                    (None, MethodId::TX_SELECT, Some(ok))
                }
            }
            _ => match state.tx.as_mut() {
                None => (
                    Some("channel is not transactional"),
                    MethodId::TX_ROLLBACK,
                    None,
                ),
                Some(buffer) => {
                    buffer.clear();
                    let ok = AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {}));
                    (None, MethodId::TX_ROLLBACK, Some(ok))
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

    pub(super) fn tx_commit(&mut self, conn: u64, ch: u16) {
        let ops = self
            .chan_mut(conn, ch)
            .and_then(|s| s.tx.as_mut().map(std::mem::take));
        let Some(ops) = ops else {
            let close = Close::new(
                reply_code::PRECONDITION_FAILED,
                "channel is not transactional",
            );
            self.fail(conn, ch, &close, MethodId::TX_COMMIT);
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

    pub(super) fn chan_mut(&mut self, conn: u64, ch: u16) -> Option<&mut ChanState> {
        self.conns.get_mut(&conn)?.channels.get_mut(&ch)
    }

    pub(super) fn chan_open(&self, conn: u64, ch: u16) -> bool {
        self.conns
            .get(&conn)
            .and_then(|c| c.channels.get(&ch))
            .is_some_and(|s| !s.closing)
    }

    /// S-TPERM-2/3: RabbitMQ's refusal when the connection's user has a topic permission on
    /// the topic exchange a publish goes to (write) or a binding comes from (read) that does
    /// not match its routing key. Costs one comparison while no topic permission is set.
    fn topic_refusal(&self, conn: u64, cmd: &Command) -> Option<Close> {
        let access = self.access.as_ref().filter(|a| a.has_topic_permissions())?;
        let (vhost, exchange, key, write) = crate::auth::topic_use(cmd)?;
        let user = &self.conns.get(&conn)?.user;
        if !access.restricts_topic(user, vhost, exchange)
            || !matches!(
                self.broker.exchange_kind(vhost, exchange),
                Some(wharf_broker::ExchangeKind::Topic)
            )
            || access.topic_permits(user, vhost, exchange, key, write)
        {
            return None;
        }
        Some(Close::new(
            reply_code::ACCESS_REFUSED,
            &crate::auth::topic_refusal_text(user, vhost, exchange, key),
        ))
    }

    pub(super) fn publish(&mut self, conn: u64, ch: u16, p: Publish) {
        let (body_bytes, mandatory) = (p.body.len(), p.mandatory);
        let cmd = Command::PublishOn {
            chan: ChanRef::new(conn, ch),
            publish: p,
        };
        if let Some(close) = self
            .follower_refusal(conn, &cmd)
            .or_else(|| self.topic_refusal(conn, &cmd))
        {
            self.fail(conn, ch, &close, MethodId::BASIC_PUBLISH);
            return;
        }
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                let result = out.published().unwrap_or_default();
                if result.flow
                    && let Some(c) = self.conns.get(&conn)
                {
                    // S-FLOW-1: its reader pauses after this batch.
                    c.outbox.set_flow(true);
                }
                let confirm = self.chan_mut(conn, ch).is_some_and(|s| {
                    s.publishing = true;
                    s.stats.publish += 1; // S-MGMT-8
                    // S-OPS-10
                    s.stats.returned_unroutable += u64::from(!result.routed && mandatory);
                    s.stats.dropped_unroutable += u64::from(!result.routed && !mandatory);
                    s.confirm_next.is_some()
                });
                self.counters.publish(body_bytes, confirm);
                self.counters.routing(result.routed, mandatory);
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
                    self.counters.confirmed += u64::from(!result.refused);
                    if let Some(s) = c.channels.get_mut(&ch) {
                        s.stats.confirm += u64::from(!result.refused); // S-OPS-10
                    }
                    self.dirty.insert(conn);
                }
            }
            Err(e) => self.fail(conn, ch, &broker_error_close(&e), MethodId::BASIC_PUBLISH),
        }
    }

    pub(super) fn command(
        &mut self,
        conn: u64,
        ch: u16,
        cmd: Command,
        method: MethodId,
        nowait: bool,
    ) {
        if let Some(close) = self
            .follower_refusal(conn, &cmd)
            .or_else(|| self.topic_refusal(conn, &cmd))
        {
            self.fail(conn, ch, &close, method);
            return;
        }
        // An ack settles every message it names (many with `multiple`): count those.
        let acking = match &cmd {
            Command::Ack { chan, .. } => Some((
                *chan,
                self.broker.channel_unacked(*chan),
                self.broker.acked_quorum(),
            )),
            _ => None,
        };
        let vhost = self.conns.get(&conn).map(|c| c.vhost.as_str());
        let counted = Counted::of(&cmd, vhost, &self.broker);
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => {
                if let Some((chan, before, quorum_before)) = acking {
                    let settled = before.saturating_sub(self.broker.channel_unacked(chan));
                    let settled = u64::try_from(settled).unwrap_or(u64::MAX);
                    let quorum = self.broker.acked_quorum().saturating_sub(quorum_before);
                    self.counters.ack(settled, quorum);
                    if let Some(s) = self.chan_mut(conn, ch) {
                        s.stats.ack += settled; // S-MGMT-8
                    }
                }
                self.count_reply(conn, ch, &counted, &out.reply);
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

    pub(super) fn close_channel_in_broker(&mut self, conn: u64, ch: u16) {
        let cmd = Command::ChannelClose {
            chan: ChanRef::new(conn, ch),
        };
        if let Ok(out) = self.broker.handle(cmd, self.now()) {
            self.apply_outcome(out, None);
        }
    }

    /// Closes the channel (403-406) or the whole connection (5xx) as `close` says (S-ERR-1).
    pub(super) fn fail(&mut self, conn: u64, ch: u16, close: &Close, method: MethodId) {
        if close.connection {
            self.close_connection(conn, close, method);
            return;
        }
        debug!(conn, channel = ch, code = close.code, text = %close.text, "closing channel");
        let frame = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: close.code,
            reply_text: short(&close.text),
            class_id: method.class,
            method_id: method.method,
        }));
        self.reply(conn, ch, &frame);
        if let Some(state) = self.chan_mut(conn, ch) {
            // After channel.close, everything on the channel is ignored until close-ok.
            state.closing = true;
            state.tx = None;
        }
        self.close_channel_in_broker(conn, ch);
    }

    pub(super) fn close_connection(&mut self, conn: u64, close: &Close, method: MethodId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        debug!(conn, code = close.code, text = %close.text, "closing connection");
        let frame = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: close.code,
            reply_text: short(&close.text),
            class_id: method.class,
            method_id: method.method,
        }));
        c.append(|buf| protocol::encode_method(buf, ChannelId(0), &frame));
        c.outbox.set_closing();
        self.dirty.insert(conn);
        self.drop_conn(conn);
    }
}

/// What a command's reply tells the metrics counters, noted before the command is handed
/// to the broker.
pub(super) enum Counted {
    /// `basic.get`, with its acknowledgement mode and whether its queue is a quorum queue
    /// (for a `get-empty`, which names no queue type).
    Get { no_ack: bool, quorum: bool },
    /// `basic.consume`, with its acknowledgement mode.
    Consume { no_ack: bool },
    /// `basic.cancel` of this tag.
    Cancel(String),
    /// `queue.declare`.
    Declare,
    /// Nothing to count.
    Nothing,
}

impl Counted {
    /// What `cmd`, on a connection to `vhost`, will count.
    fn of(cmd: &Command, vhost: Option<&str>, broker: &wharf_broker::Broker) -> Counted {
        match cmd {
            Command::Get { no_ack, queue, .. } => Counted::Get {
                no_ack: *no_ack,
                quorum: vhost.and_then(|v| broker.queue_kind(v, queue)) == Some(QueueKind::Quorum),
            },
            Command::Consume { no_ack, .. } => Counted::Consume { no_ack: *no_ack },
            Command::Cancel { consumer_tag, .. } => Counted::Cancel(consumer_tag.clone()),
            Command::QueueDeclare(_) => Counted::Declare,
            _ => Counted::Nothing,
        }
    }
}

impl Core {
    /// Bumps the counters a successful command's reply stands for, and keeps the channel's
    /// set of auto-ack consumers (their deliveries are counted apart).
    fn count_reply(&mut self, conn: u64, ch: u16, counted: &Counted, reply: &Reply) {
        match (counted, reply) {
            (Counted::Get { no_ack, .. }, Reply::GetOk(g)) => {
                self.counters
                    .get(*no_ack, g.redelivered, g.queue_kind == QueueKind::Quorum);
                if let Some(s) = self.chan_mut(conn, ch) {
                    s.stats.deliver_get += 1; // S-MGMT-8
                    s.stats.redeliver += u64::from(g.redelivered);
                    if *no_ack {
                        s.stats.get_no_ack += 1; // S-OPS-10
                    } else {
                        s.stats.get_manual += 1;
                    }
                }
            }
            (Counted::Get { quorum, .. }, Reply::GetEmpty) => {
                self.counters.get_empty(*quorum);
                if let Some(s) = self.chan_mut(conn, ch) {
                    s.stats.get_empty += 1; // S-OPS-10
                }
            }
            (Counted::Consume { no_ack: true }, Reply::ConsumeOk { consumer_tag }) => {
                if let Some(s) = self.chan_mut(conn, ch) {
                    s.auto_ack_consumers.insert(consumer_tag.clone());
                }
            }
            (Counted::Cancel(tag), _) => {
                if let Some(s) = self.chan_mut(conn, ch) {
                    s.auto_ack_consumers.remove(tag);
                }
            }
            (Counted::Declare, _) => self.counters.queues_declared += 1,
            _ => {}
        }
    }
}
