//! Moving messages: publish and routing, delivery to consumers, acks and requeues, expiry,
//! dead-lettering, length limits, queue leases and scheduled messages. Must not depend on
//! anything outside `broker`.

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::Arc;

use crate::args::{Overflow, parse_expiration};
use crate::error::{BrokerError, ErrorKind};
use crate::model::{
    Broker, Channel, Consumer, Dest, ExchangeId, Queue, QueueId, Scheduled, Timer, Unacked, Vhost,
};
use crate::queue::{Taken, deadline_of};
use crate::routing::headers::headers_match;
use crate::types::{
    ChanRef, Command, DeathFate, DeathReason, DelayedType, Delivery, DeliveryTag, Effect, Event,
    ExchangeKind, GetOk, Message, MessageId, MessageRecord, MessageRef, Outcome, Publish,
    PublishResult, QueueDeletedReason, Reply, SettleKind, StoredSlot,
};
use crate::value::{FieldTable, Value};

/// Unacked messages taken by one ack/nack/reject: one without allocating, or many.
type TakenUnacked = std::iter::Chain<std::option::IntoIter<Unacked>, std::vec::IntoIter<Unacked>>;

/// Which batched per-queue event to extend.
#[derive(Clone, Copy)]
enum Mark {
    Settle(SettleKind),
    Delivered,
    Returned,
}

/// Hands `taken` out on `ch` (a consumer's delivery or a `basic.get`): takes the channel's next
/// delivery tag, then either settles it at once (`no_ack`: logged as an ack) or holds it as
/// unacked on the channel (logged as a delivery mark, so `redelivered` and the delivery count
/// survive a restart, S-DUR-6). Only persistent messages in logged queues leave a mark.
/// Returns the delivery tag.
fn hand_out(
    ch: &mut Channel,
    q: &mut Queue,
    qid: QueueId,
    taken: &Taken,
    consumer: Option<u64>,
    no_ack: bool,
    events: &mut Vec<Event>,
) -> u64 {
    let delivery_tag = ch.next_tag;
    ch.next_tag += 1;
    let logged = q.logged() && taken.msg.is_persistent();
    let mark = if no_ack {
        Mark::Settle(SettleKind::Ack)
    } else {
        q.unacked += 1;
        ch.unacked.insert(
            delivery_tag,
            Unacked {
                queue: qid,
                taken: taken.clone(),
                consumer,
            },
        );
        Mark::Delivered
    };
    if logged {
        push_mark(events, &q.vhost, &q.name, taken.msg.id(), mark);
    }
    delivery_tag
}

/// Appends `id` to the last event if it is the same kind for the same queue, so a step that
/// settles many messages of one queue logs one record (DESIGN: a batch per record).
fn push_mark(events: &mut Vec<Event>, vhost: &str, queue: &str, id: MessageId, mark: Mark) {
    if let Some(last) = events.last_mut() {
        let ids = match (last, mark) {
            (
                Event::Settled {
                    vhost: v,
                    queue: q,
                    ids,
                    kind,
                },
                Mark::Settle(k),
            ) if *kind == k && v == vhost && q == queue => Some(ids),
            (
                Event::Delivered {
                    vhost: v,
                    queue: q,
                    ids,
                },
                Mark::Delivered,
            )
            | (
                Event::Returned {
                    vhost: v,
                    queue: q,
                    ids,
                },
                Mark::Returned,
            ) if v == vhost && q == queue => Some(ids),
            _ => None,
        };
        if let Some(ids) = ids {
            ids.push(id);
            return;
        }
    }
    let (vhost, queue, ids) = (vhost.to_owned(), queue.to_owned(), vec![id]);
    events.push(match mark {
        Mark::Settle(kind) => Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        },
        Mark::Delivered => Event::Delivered { vhost, queue, ids },
        Mark::Returned => Event::Returned { vhost, queue, ids },
    });
}

fn string_list(headers: Option<&FieldTable>, key: &str) -> Vec<String> {
    match headers.and_then(|h| h.get(key)) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(v) => v.as_str().map(str::to_owned).into_iter().collect(),
        None => Vec::new(),
    }
}

/// Routing keys of a message: its key, then `CC`, then `BCC` (S-DLX-3 keeps CC, drops BCC).
fn routing_keys(routing_key: &str, headers: Option<&FieldTable>) -> Vec<String> {
    let mut keys = vec![routing_key.to_owned()];
    keys.extend(string_list(headers, "CC"));
    keys.extend(string_list(headers, "BCC"));
    keys
}

fn strip_bcc(msg: &mut Message) {
    if let Some(h) = msg.properties.headers.as_mut() {
        h.remove("BCC");
    }
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Builds the dead-lettered copy's properties and routing keys (S-DLX-3, S-DLX-5).
fn dead_letter_copy(
    msg: &Message,
    queue: &str,
    reason: DeathReason,
    now: u64,
    dlrk: Option<&str>,
) -> (crate::types::Properties, Vec<String>) {
    let mut props = msg.properties.clone();
    let original_expiration = props.expiration.take();
    let mut headers = props.headers.take().unwrap_or_default();
    let mut death_keys = vec![msg.routing_key.clone()];
    death_keys.extend(string_list(Some(&headers), "CC"));
    let mut deaths = match headers.remove("x-death") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    let same = |v: &Value| match v {
        Value::Table(t) => {
            t.get("queue").and_then(Value::as_str) == Some(queue)
                && t.get("reason").and_then(Value::as_str) == Some(reason.name())
        }
        _ => false,
    };
    if let Some(i) = deaths.iter().position(same) {
        // A repeat death for the same (queue, reason): count + 1, moved to the front.
        let mut entry = deaths.remove(i);
        if let Value::Table(t) = &mut entry {
            let n = t.get("count").and_then(Value::as_integer).unwrap_or(0);
            t.insert(
                "count",
                Value::I64(i64::try_from(n + 1).unwrap_or(i64::MAX)),
            );
        }
        deaths.insert(0, entry);
    } else {
        // Keys in sorted order, as RabbitMQ writes them. `original-expiration` is recorded
        // whenever the message had an expiration (RabbitMQ's rule), since it is removed below.
        let mut t = FieldTable::new();
        t.insert("count", Value::I64(1));
        t.insert("exchange", Value::long_str(msg.exchange.as_str()));
        if let Some(e) = &original_expiration {
            t.insert("original-expiration", Value::long_str(e.as_str()));
        }
        t.insert("queue", Value::long_str(queue));
        t.insert("reason", Value::long_str(reason.name()));
        t.insert(
            "routing-keys",
            Value::Array(
                death_keys
                    .iter()
                    .map(|k| Value::long_str(k.as_str()))
                    .collect(),
            ),
        );
        t.insert("time", Value::Timestamp(now / 1000));
        deaths.insert(0, Value::Table(t));
    }
    headers.insert("x-death", Value::Array(deaths));
    if headers.get("x-first-death-reason").is_none() {
        headers.insert("x-first-death-queue", Value::long_str(queue));
        headers.insert("x-first-death-reason", Value::long_str(reason.name()));
        headers.insert(
            "x-first-death-exchange",
            Value::long_str(msg.exchange.as_str()),
        );
    }
    let keys = match dlrk {
        Some(k) => {
            // With a dead-letter routing key the CC keys no longer apply (RabbitMQ drops the
            // header too).
            headers.remove("CC");
            vec![k.to_owned()]
        }
        None => death_keys,
    };
    props.headers = Some(headers);
    (props, keys)
}

/// S-DLX-6: reaching `target` again is a cycle when no death since the last visit to it (that
/// one included) was a rejection (RabbitMQ's rule: automatic deaths only).
fn is_cycle(headers: Option<&FieldTable>, target: &str) -> bool {
    let Some(Value::Array(deaths)) = headers.and_then(|h| h.get("x-death")) else {
        return false;
    };
    for d in deaths {
        let Value::Table(t) = d else { continue };
        if t.get("reason").and_then(Value::as_str) == Some("rejected") {
            return false;
        }
        if t.get("queue").and_then(Value::as_str) == Some(target) {
            return true;
        }
    }
    false
}

impl Broker {
    pub(crate) fn dispatch_flow(
        &mut self,
        cmd: Command,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::Consume {
                chan,
                queue,
                consumer_tag,
                no_ack,
                exclusive,
            } => self.consume(chan, &queue, consumer_tag, no_ack, exclusive, now, out),
            Command::Cancel { chan, consumer_tag } => {
                self.channel_mut(chan)?;
                let qid = self
                    .channels
                    .get_mut(&chan)
                    .and_then(|c| c.consumers.remove(consumer_tag.as_str()));
                if let Some(qid) = qid {
                    self.remove_consumer(qid, chan, &consumer_tag, now, out);
                }
                out.reply = Reply::CancelOk { consumer_tag };
                Ok(())
            }
            Command::Get {
                chan,
                queue,
                no_ack,
            } => self.get(chan, &queue, no_ack, now, out),
            Command::Ack {
                chan,
                delivery_tag,
                multiple,
            } => {
                let taken = self.take_unacked(chan, delivery_tag, multiple)?;
                for u in taken {
                    self.unacked_released(&u, Some(chan));
                    if let Some(q) = self.queues.get(&u.queue)
                        && q.logged()
                        && u.taken.msg.is_persistent()
                    {
                        push_mark(
                            &mut out.events,
                            &q.vhost,
                            &q.name,
                            u.taken.msg.id(),
                            Mark::Settle(SettleKind::Ack),
                        );
                    }
                }
                self.mark_freed_channel(chan);
                Ok(())
            }
            Command::Nack {
                chan,
                delivery_tag,
                multiple,
                requeue,
            } => self.settle_negative(chan, delivery_tag, multiple, requeue, now, out),
            Command::Reject {
                chan,
                delivery_tag,
                requeue,
            } => self.settle_negative(chan, delivery_tag, false, requeue, now, out),
            Command::Recover { chan, requeue } => {
                self.channel_mut(chan)?;
                if !requeue {
                    return Err(BrokerError::new(ErrorKind::NotImplemented, "requeue=false"));
                }
                self.settle_negative(chan, 0, true, true, now, out)
            }
            Command::Publish(p) => self.publish(p, now, out),
            other => Err(BrokerError::new(
                ErrorKind::InternalError,
                format!("command not dispatched: {other:?}"),
            )),
        }
    }

    // ----- consumers -----

    #[expect(clippy::too_many_arguments, reason = "the fields of basic.consume")]
    fn consume(
        &mut self,
        chan: ChanRef,
        queue: &str,
        tag: String,
        no_ack: bool,
        exclusive: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.chan_vhost(chan)?;
        let qid = self.find_queue(&vhost, queue, Some(chan.conn))?;
        let tag = if tag.is_empty() {
            self.gen_consumer_tag(chan)
        } else {
            tag
        };
        let ch = self.channel_mut(chan)?;
        if ch.consumers.contains_key(tag.as_str()) {
            return Err(BrokerError::new(
                ErrorKind::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        let prefetch = ch.prefetch;
        let q = &self.queues[&qid];
        if (exclusive && !q.consumers.is_empty()) || q.consumers.iter().any(|c| c.exclusive) {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!("queue '{queue}' in vhost '{vhost}' in exclusive use"),
            ));
        }
        let tag_arc: Arc<str> = tag.as_str().into();
        let serial = self.next_consumer;
        self.next_consumer += 1;
        let q = self.queues.get_mut(&qid).expect("found above");
        q.consumers.push(Consumer {
            serial,
            chan,
            tag: tag_arc.clone(),
            no_ack,
            exclusive,
            prefetch,
            unacked: 0,
        });
        q.had_consumer = true;
        q.last_used_ms = now;
        if let Some(ch) = self.channels.get_mut(&chan) {
            ch.consumers.insert(tag_arc, qid);
        }
        out.reply = Reply::ConsumeOk { consumer_tag: tag };
        self.mark_dirty(qid);
        Ok(())
    }

    /// Removes a consumer from its queue (the channel's map is the caller's business). The
    /// lease restarts when the last consumer goes (S-QEXP-2); an auto-delete queue goes.
    pub(crate) fn remove_consumer(
        &mut self,
        qid: QueueId,
        chan: ChanRef,
        tag: &str,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        q.consumers.retain(|c| !(c.chan == chan && &*c.tag == tag));
        if q.rr >= q.consumers.len() {
            q.rr = 0;
        }
        if q.consumers.is_empty() {
            q.last_used_ms = now;
            if q.auto_delete && q.had_consumer {
                self.delete_queue(qid, QueueDeletedReason::AutoDelete, true, now, out);
                return;
            }
        }
        self.mark_dirty(qid);
    }

    /// After acks or rejects: a global prefetch limit freed room for every consumer of the
    /// channel. (Per-consumer limits mark their own queue in `unacked_released`; without
    /// limits nothing was waiting for room.)
    fn mark_freed_channel(&mut self, chan: ChanRef) {
        if self
            .channels
            .get(&chan)
            .is_some_and(|c| c.global_prefetch > 0)
        {
            self.mark_channel_queues(chan);
        }
    }

    /// Bookkeeping when an unacked message leaves its channel (ack, nack, close).
    pub(crate) fn unacked_released(&mut self, u: &Unacked, chan: Option<ChanRef>) {
        let mut freed = false;
        if let Some(q) = self.queues.get_mut(&u.queue) {
            q.unacked -= 1;
            if let Some(serial) = u.consumer
                && let Some(c) = q.consumers.iter_mut().find(|c| c.serial == serial)
            {
                c.unacked -= 1;
                freed = c.prefetch > 0;
            }
        }
        if freed {
            self.mark_dirty(u.queue);
        }
        if u.consumer.is_some()
            && let Some(chan) = chan
            && let Some(ch) = self.channels.get_mut(&chan)
        {
            ch.consumer_unacked -= 1;
            // Leaving the cap frees room for every consumer of the channel (exactly once per
            // crossing, however many messages one ack releases).
            if ch.consumer_unacked + 1 == self.unacked_per_channel_max {
                self.mark_channel_queues(chan);
            }
        }
    }

    fn can_take(&self, qid: QueueId) -> Option<usize> {
        let q = self.queues.get(&qid)?;
        let n = q.consumers.len();
        for k in 0..n {
            let i = (q.rr + k) % n;
            let c = q.consumers.get(i)?;
            let Some(ch) = self.channels.get(&c.chan) else {
                continue;
            };
            if !ch.flow {
                continue;
            }
            if c.no_ack {
                return Some(i);
            }
            let per_consumer = c.prefetch == 0 || c.unacked < u32::from(c.prefetch);
            let global =
                ch.global_prefetch == 0 || ch.consumer_unacked < u32::from(ch.global_prefetch);
            // The safety cap holds whatever the prefetch (prefetch 0 means "no limit" to the
            // client, not to us: STYLE 3.2).
            let capped = ch.consumer_unacked < self.unacked_per_channel_max;
            if per_consumer && global && capped {
                return Some(i);
            }
        }
        None
    }

    /// The content of `m`: shared when in memory, else read back through the loader. A
    /// message that cannot be read back is a damaged store: the failure is kept for the
    /// server, which stops (S-DUR-7), and `None` is returned (the message stays in the log).
    pub(crate) fn loaded(&mut self, m: &MessageRef) -> Option<Arc<Message>> {
        match self.read(m) {
            Ok(msg) => Some(msg),
            Err(e) => {
                self.storage_failure.get_or_insert(e);
                None
            }
        }
    }

    /// The content of `m`, read back through the loader when stored.
    pub(crate) fn read(&self, m: &MessageRef) -> Result<Arc<Message>, String> {
        let s = match m {
            MessageRef::Loaded(m) => return Ok(Arc::clone(m)),
            MessageRef::Stored(s) => s,
        };
        let loader = self.loader.as_ref().ok_or("no store to read it from")?;
        loader
            .load(s)
            .map(Arc::new)
            .map_err(|e| format!("stored message {} unreadable: {e}", s.id.0))
    }

    /// Hands `taken` to consumer `ci` of `qid`.
    fn deliver(&mut self, qid: QueueId, ci: usize, mut taken: Taken, out: &mut Outcome) {
        let Some(message) = self.loaded(&taken.msg) else {
            return;
        };
        taken.msg = MessageRef::Loaded(Arc::clone(&message));
        let q = self.queues.get_mut(&qid).expect("caller checked the queue");
        let n = q.consumers.len();
        q.rr = (ci + 1) % n;
        let c = q
            .consumers
            .get_mut(ci)
            .expect("caller picked a valid consumer");
        let (chan, tag, no_ack, serial) = (c.chan, c.tag.clone(), c.no_ack, c.serial);
        let ch = self
            .channels
            .get_mut(&chan)
            .expect("consumers only exist on open channels");
        let consumer = if no_ack {
            None
        } else {
            c.unacked += 1;
            ch.consumer_unacked += 1;
            Some(serial)
        };
        let delivery_tag = hand_out(ch, q, qid, &taken, consumer, no_ack, &mut out.events);
        out.effects.push(Effect::Deliver(Delivery {
            chan,
            consumer_tag: tag,
            delivery_tag: DeliveryTag(delivery_tag),
            redelivered: taken.redelivered,
            delivery_count: taken.delivery_count,
            queue: q.name.clone(),
            message,
        }));
    }

    fn get(
        &mut self,
        chan: ChanRef,
        queue: &str,
        no_ack: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.chan_vhost(chan)?;
        let qid = self.find_queue(&vhost, queue, Some(chan.conn))?;
        self.queues.get_mut(&qid).expect("found").last_used_ms = now; // S-QEXP-2
        self.mark_dirty(qid);
        self.expire_head(qid, now, out); // S-TTL-5
        let q = self.queues.get_mut(&qid).expect("found");
        let Some(mut taken) = q.ready.pop_front() else {
            out.reply = Reply::GetEmpty;
            return Ok(());
        };
        let Some(message) = self.loaded(&taken.msg) else {
            return Err(BrokerError::new(
                ErrorKind::InternalError,
                "message store unreadable",
            ));
        };
        taken.msg = MessageRef::Loaded(Arc::clone(&message));
        let q = self.queues.get_mut(&qid).expect("found");
        let ch = self.channels.get_mut(&chan).expect("chan_vhost checked it");
        let tag = hand_out(ch, q, qid, &taken, None, no_ack, &mut out.events);
        out.reply = Reply::GetOk(GetOk {
            delivery_tag: DeliveryTag(tag),
            redelivered: taken.redelivered,
            delivery_count: taken.delivery_count,
            message_count: count_u32(q.ready.len()),
            message,
        });
        Ok(())
    }

    /// Removes the unacked messages named by an ack/nack/reject (406 for an unknown tag).
    /// A single tag allocates nothing (the hot path of an ack).
    fn take_unacked(
        &mut self,
        chan: ChanRef,
        tag: u64,
        multiple: bool,
    ) -> Result<TakenUnacked, BrokerError> {
        let ch = self.channel_mut(chan)?;
        if multiple && tag == 0 {
            let all: Vec<Unacked> = std::mem::take(&mut ch.unacked).into_values().collect();
            return Ok(None.into_iter().chain(all));
        }
        if !ch.unacked.contains_key(&tag) {
            return Err(BrokerError::precondition(format!(
                "unknown delivery tag {tag}"
            )));
        }
        if multiple {
            let rest = ch.unacked.split_off(&tag.saturating_add(1));
            let taken = std::mem::replace(&mut ch.unacked, rest);
            let taken: Vec<Unacked> = taken.into_values().collect();
            Ok(None.into_iter().chain(taken))
        } else {
            Ok(ch.unacked.remove(&tag).into_iter().chain(Vec::new()))
        }
    }

    fn settle_negative(
        &mut self,
        chan: ChanRef,
        tag: u64,
        multiple: bool,
        requeue: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let taken = self.take_unacked(chan, tag, multiple)?;
        for u in taken {
            self.unacked_released(&u, Some(chan));
            if requeue {
                self.requeue(u.queue, u.taken, now, out);
            } else if let Some(q) = self.queues.get(&u.queue) {
                let logged = q.logged() && u.taken.msg.is_persistent();
                self.dead_letter(u.queue, &u.taken, DeathReason::Rejected, logged, now, out);
            }
        }
        self.mark_freed_channel(chan);
        Ok(())
    }

    /// A message comes back to its queue: original position, original deadline (S-TTL-7),
    /// delivery count + 1; past its deadline it expires at once (S-TTL-8, done by the dirty
    /// pass); past the delivery limit it is dead-lettered (S-DLX-1 `delivery_limit`); over a
    /// drop-head length limit the head goes (S-LEN-2).
    pub(crate) fn requeue(&mut self, qid: QueueId, taken: Taken, now: u64, out: &mut Outcome) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        let count = taken.delivery_count.saturating_add(1);
        let logged = q.logged() && taken.msg.is_persistent();
        if let Some(limit) = q.eff.delivery_limit
            && u64::from(count) > limit
        {
            self.dead_letter(qid, &taken, DeathReason::DeliveryLimit, logged, now, out);
            return;
        }
        if logged {
            push_mark(
                &mut out.events,
                &q.vhost,
                &q.name,
                taken.msg.id(),
                Mark::Returned,
            );
        }
        q.ready.insert(taken.msg, count, true);
        self.mark_dirty(qid);
        // As RabbitMQ's requeue_and_run: a requeue may push a drop-head queue over its limit.
        self.enforce_length(qid, now, out);
    }

    // ----- publish and routing -----

    /// Every queue reached from `start` with `keys`, through exchange-to-exchange bindings
    /// and alternate exchanges (an exchange whose own bindings match nothing hands over to its
    /// alternate), each exchange visited once. Sorted by id, no duplicates.
    pub(crate) fn route(
        &self,
        vhost: &Vhost,
        start: ExchangeId,
        keys: &[String],
        headers: Option<&FieldTable>,
    ) -> Vec<QueueId> {
        let mut queues = Vec::new();
        let mut work = vec![start];
        let mut seen = vec![start];
        let mut dests = Vec::new();
        while let Some(xid) = work.pop() {
            let Some(x) = self.exchanges.get(&xid) else {
                continue;
            };
            dests.clear();
            if x.name.is_empty() {
                for k in keys {
                    if let Some(&q) = vhost.queues.get(k.as_str()) {
                        dests.push(Dest::Queue(q));
                    }
                }
            } else {
                match x.routing_kind() {
                    DelayedType::Direct => {
                        for k in keys {
                            if let Some(d) = x.direct.get(k.as_str()) {
                                dests.extend_from_slice(d);
                            }
                        }
                    }
                    DelayedType::Fanout => dests.extend(x.bindings.iter().map(|b| b.dest)),
                    DelayedType::Topic => {
                        for k in keys {
                            x.topic.route(k, &mut dests);
                        }
                    }
                    DelayedType::Headers => dests.extend(
                        x.bindings
                            .iter()
                            .filter(|b| headers_match(&b.args, headers))
                            .map(|b| b.dest),
                    ),
                }
            }
            if dests.is_empty()
                && let Some(ae) = &x.alternate
                && let Some(&aid) = vhost.exchanges.get(ae.as_str())
            {
                dests.push(Dest::Exchange(aid));
            }
            for d in &dests {
                match *d {
                    Dest::Queue(q) => queues.push(q),
                    Dest::Exchange(e) => {
                        if !seen.contains(&e) {
                            seen.push(e);
                            work.push(e);
                        }
                    }
                }
            }
        }
        queues.sort_unstable();
        queues.dedup();
        queues
    }

    fn next_id(&mut self) -> MessageId {
        let id = MessageId(self.next_message);
        self.next_message += 1;
        id
    }

    fn publish(&mut self, p: Publish, now: u64, out: &mut Outcome) -> Result<(), BrokerError> {
        let vhost = self.vhost(&p.vhost)?;
        let xid = *vhost.exchanges.get(&p.exchange).ok_or_else(|| {
            BrokerError::not_found(format!(
                "no exchange '{}' in vhost '{}'",
                p.exchange, p.vhost
            ))
        })?;
        let x = &self.exchanges[&xid];
        if x.internal {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!(
                    "cannot publish to internal exchange '{}' in vhost '{}'",
                    p.exchange, p.vhost
                ),
            ));
        }
        // S-TTL-2: a bad expiration closes the channel with 406.
        let ttl_ms = p
            .properties
            .expiration
            .as_deref()
            .map(parse_expiration)
            .transpose()?;
        let delay = match x.kind {
            ExchangeKind::Delayed(_) => p
                .properties
                .headers
                .as_ref()
                .and_then(|h| h.get("x-delay"))
                .and_then(Value::as_integer)
                .filter(|d| *d > 0)
                .and_then(|d| u64::try_from(d).ok()),
            _ => None,
        };
        let durable_x = x.durable;
        let id = self.next_id();
        let mut msg = Message {
            id,
            enqueued_at_ms: now,
            ttl_ms,
            exchange: p.exchange,
            routing_key: p.routing_key,
            properties: p.properties,
            body: p.body,
            stored: StoredSlot::default(),
        };
        if let Some(delay) = delay {
            // S-SCHED-1: invisible until due; its deadline counts from the due time (S-SCHED-2).
            msg.enqueued_at_ms = now.saturating_add(delay);
            let durable = durable_x && msg.is_persistent();
            let msg = Arc::new(msg);
            if durable {
                out.events.push(Event::Scheduled {
                    vhost: p.vhost.clone(),
                    exchange: msg.exchange.clone(),
                    message: MessageRecord {
                        message: msg.clone(),
                    },
                });
            }
            self.schedule(p.vhost, msg, durable);
            out.reply = Reply::Published(PublishResult {
                routed: true,
                refused: false,
                needs_durability: durable,
            });
            return Ok(());
        }
        let vhost = self.vhosts.get(&p.vhost).expect("checked above");
        let cc = msg
            .properties
            .headers
            .as_ref()
            .is_some_and(|h| h.get("CC").is_some() || h.get("BCC").is_some());
        let targets = if msg.exchange.is_empty() && !cc {
            // The hot path: the default exchange routes by queue name, nothing to allocate.
            vhost
                .queues
                .get(&msg.routing_key)
                .map_or_else(Vec::new, |q| vec![*q])
        } else {
            let keys = routing_keys(&msg.routing_key, msg.properties.headers.as_ref());
            strip_bcc(&mut msg);
            self.route(vhost, xid, &keys, msg.properties.headers.as_ref())
        };
        self.refuse_unstorable(&p.vhost, &msg, &targets)?;
        let msg = Arc::new(msg);
        if targets.is_empty() && p.mandatory {
            out.effects.push(Effect::Return {
                reply_code: 312,
                reply_text: "NO_ROUTE".to_owned(),
                exchange: msg.exchange.clone(),
                routing_key: msg.routing_key.clone(),
                message: msg.clone(),
            });
        }
        let result = self.enqueue_routed(&p.vhost, &msg, &targets, None, now, out);
        out.reply = Reply::Published(result);
        Ok(())
    }

    /// Can the one record that logs `msg` into the logged queues among `targets` fit the log
    /// (`limits::RECORD_PAYLOAD_BYTES_MAX`)? An upper bound of its size, so that a message
    /// that could not be made durable is refused before it changes anything, instead of
    /// failing the log after the broker applied it.
    pub(crate) fn record_fits(&self, vhost: &str, msg: &Message, targets: &[QueueId]) -> bool {
        let names: usize = targets
            .iter()
            .filter_map(|t| self.queues.get(t))
            .filter(|q| q.logged())
            .map(|q| 2 + q.name.len())
            .sum();
        let bound = 64
            + vhost.len()
            + msg.exchange.len()
            + msg.routing_key.len()
            + msg.properties.stored_bytes_bound()
            + msg.body.len()
            + names;
        bound <= wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX
    }

    /// 406 for a persistent message whose one log record could not hold it: RabbitMQ closes
    /// the channel with 406 for a message over its size limit; this one is within the frame
    /// limits, but what is accepted must be made durable (S-DUR-3).
    fn refuse_unstorable(
        &self,
        vhost: &str,
        msg: &Message,
        targets: &[QueueId],
    ) -> Result<(), BrokerError> {
        if !msg.is_persistent() || self.record_fits(vhost, msg, targets) {
            return Ok(());
        }
        Err(BrokerError::precondition(format!(
            "message of {} body bytes routed to {} durable queues is too large to store",
            msg.body.len(),
            targets.len()
        )))
    }

    pub(crate) fn schedule(&mut self, vhost: String, msg: Arc<Message>, durable: bool) {
        let (id, due) = (msg.id, msg.enqueued_at_ms);
        self.scheduled.insert(
            id,
            Scheduled {
                vhost,
                exchange: msg.exchange.clone(),
                msg,
                durable,
            },
        );
        self.timers.insert((due, Timer::Scheduled(id)));
    }

    /// Would `q` refuse a message of `len` body bytes (S-LEN-2 reject-publish)?
    fn refuses(&self, qid: QueueId, len: usize) -> Option<Overflow> {
        let q = self.queues.get(&qid)?;
        let overflow = q.eff.overflow.unwrap_or_default();
        if overflow == Overflow::DropHead {
            return None;
        }
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        let count = u64::try_from(q.ready.len()).unwrap_or(u64::MAX);
        let over_count = q.eff.max_length.is_some_and(|m| count + 1 > m);
        let over_bytes = q
            .eff
            .max_length_bytes
            .is_some_and(|m| q.ready.bytes().saturating_add(len) > m);
        (over_count || over_bytes).then_some(overflow)
    }

    /// Puts a freshly routed message into `targets`: admission (S-LEN-2), one `Published`
    /// event naming the durable queues it entered, then enqueue (or direct delivery).
    fn enqueue_routed(
        &mut self,
        vhost: &str,
        msg: &Arc<Message>,
        targets: &[QueueId],
        scheduled: Option<(MessageId, bool)>,
        now: u64,
        out: &mut Outcome,
    ) -> PublishResult {
        let mut result = PublishResult {
            routed: !targets.is_empty(),
            ..PublishResult::default()
        };
        let mut accepted = Vec::with_capacity(targets.len());
        let mut refused = Vec::new();
        for &t in targets {
            match self.refuses(t, msg.body.len()) {
                None => accepted.push(t),
                Some(o) => refused.push((t, o)),
            }
        }
        let durable: Vec<String> = if msg.is_persistent() {
            accepted
                .iter()
                .filter_map(|t| self.queues.get(t))
                .filter(|q| q.logged())
                .map(|q| q.name.to_string())
                .collect()
        } else {
            Vec::new()
        };
        let sched_durable = scheduled.filter(|s| s.1).map(|s| s.0);
        if !durable.is_empty() {
            result.needs_durability = true;
            out.events.push(Event::Published {
                vhost: vhost.to_owned(),
                message: MessageRecord {
                    message: msg.clone(),
                },
                queues: durable,
                scheduled: sched_durable,
            });
        } else if let Some(id) = sched_durable {
            out.events.push(Event::Unscheduled {
                vhost: vhost.to_owned(),
                id,
            });
        }
        self.enqueue_all(&accepted, msg, now, out);
        for (t, overflow) in refused {
            result.refused = true;
            if overflow == Overflow::RejectPublishDlx {
                let taken = Taken {
                    msg: MessageRef::Loaded(msg.clone()),
                    delivery_count: 0,
                    redelivered: false,
                };
                self.dead_letter(t, &taken, DeathReason::Maxlen, false, now, out);
            }
        }
        result
    }

    /// Enqueues one message into `targets`: straight to a consumer when a queue is empty and
    /// one can take it (so a TTL-0 message is delivered if possible, S-TTL-6), else at the
    /// tail. Length limits are enforced only after every target has the message: a drop-head
    /// dead-lettering creates a newer message that may enter a later target, and queue order
    /// is id order.
    fn enqueue_all(
        &mut self,
        targets: &[QueueId],
        msg: &Arc<Message>,
        now: u64,
        out: &mut Outcome,
    ) {
        let mut pushed = Vec::new();
        for &qid in targets {
            let Some(q) = self.queues.get(&qid) else {
                continue;
            };
            let taken = Taken {
                msg: MessageRef::Loaded(msg.clone()),
                delivery_count: 0,
                redelivered: false,
            };
            if q.ready.is_empty()
                && let Some(ci) = self.can_take(qid)
            {
                // Nothing left to drain, expire or re-arm: the queue was and stays empty.
                self.deliver(qid, ci, taken, out);
                continue;
            }
            let q = self.queues.get_mut(&qid).expect("looked up above");
            q.ready.push_back(taken.msg, 0, false);
            self.mark_dirty(qid);
            pushed.push(qid);
        }
        for qid in pushed {
            self.enforce_length(qid, now, out);
        }
    }

    /// S-LEN-1/2 drop-head: while over a limit, the oldest ready message dies (`maxlen`).
    pub(crate) fn enforce_length(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
        loop {
            let Some(q) = self.queues.get_mut(&qid) else {
                return;
            };
            if q.eff.overflow.unwrap_or_default() != Overflow::DropHead {
                return;
            }
            let count = u64::try_from(q.ready.len()).unwrap_or(u64::MAX);
            let over = q.eff.max_length.is_some_and(|m| count > m)
                || q.eff.max_length_bytes.is_some_and(|m| q.ready.bytes() > m);
            if !over {
                return;
            }
            let Some(taken) = q.ready.pop_front() else {
                return;
            };
            let logged = q.logged() && taken.msg.is_persistent();
            self.dead_letter(qid, &taken, DeathReason::Maxlen, logged, now, out);
        }
    }

    // ----- expiry and dead-lettering -----

    /// S-TTL-5: the head is never handed out past its deadline.
    fn expire_head(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
        loop {
            let Some(q) = self.queues.get_mut(&qid) else {
                return;
            };
            let due = q
                .ready
                .front()
                .and_then(|e| e.msg.as_ref())
                .and_then(|m| deadline_of(m, q.ready.ttl_ms()))
                .is_some_and(|d| d <= now);
            if !due {
                return;
            }
            let taken = q.ready.pop_front().expect("front exists");
            let logged = q.logged() && taken.msg.is_persistent();
            self.dead_letter(qid, &taken, DeathReason::Expired, logged, now, out);
        }
    }

    /// S-TTL-9: every ready message due at `now`, wherever it is, through the deadline index.
    pub(crate) fn expire_queue(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
        loop {
            let Some(q) = self.queues.get_mut(&qid) else {
                return;
            };
            let Some(id) = q.ready.first_due(now) else {
                return;
            };
            let taken = q.ready.remove(id).expect("indexed messages are ready");
            let logged = q.logged() && taken.msg.is_persistent();
            self.dead_letter(qid, &taken, DeathReason::Expired, logged, now, out);
        }
    }

    /// A message dies in `qid` (S-DLX-1). Without a dead-letter exchange it is discarded;
    /// with a missing one it is dropped and counted (S-DLX-4); otherwise the copy (S-DLX-5)
    /// is routed (S-DLX-3) minus cycles (S-DLX-6), and one event removes and enqueues
    /// (S-DLX-7). `from_logged`: the message is in the log as part of `qid`.
    pub(crate) fn dead_letter(
        &mut self,
        qid: QueueId,
        taken: &Taken,
        reason: DeathReason,
        from_logged: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.get(&qid) else {
            return;
        };
        let (vhost, qname) = (q.vhost.clone(), q.name.clone());
        let dlx = q.eff.dead_letter_exchange.clone();
        let dlrk = q.eff.dead_letter_routing_key.clone();
        let old = taken.msg.id();
        let settle_kind = if reason == DeathReason::Expired {
            SettleKind::Expire
        } else {
            SettleKind::Discard
        };
        let xid = dlx.as_ref().and_then(|x| {
            self.vhosts
                .get(&*vhost)
                .and_then(|v| v.exchanges.get(x.as_str()).copied())
        });
        let fate = match (dlx, xid) {
            (None, _) | (Some(_), None) => {
                if from_logged {
                    push_mark(
                        &mut out.events,
                        &vhost,
                        &qname,
                        old,
                        Mark::Settle(settle_kind),
                    );
                }
                if xid.is_none() && q.eff.dead_letter_exchange.is_some() {
                    self.dead_letter_dropped += 1;
                    DeathFate::ExchangeMissing
                } else {
                    DeathFate::Discarded
                }
            }
            (Some(x), Some(xid)) => {
                let Some(original) = self.loaded(&taken.msg) else {
                    return;
                };
                let (properties, keys) =
                    dead_letter_copy(&original, &qname, reason, now, dlrk.as_deref());
                let copy = Message {
                    id: self.next_id(),
                    enqueued_at_ms: now,
                    ttl_ms: None,
                    exchange: x,
                    routing_key: keys.first().cloned().unwrap_or_default(),
                    properties,
                    body: original.body.clone(),
                    stored: StoredSlot::default(),
                };
                let v = self.vhosts.get(&*vhost).expect("the queue's vhost exists");
                let mut targets = self.route(v, xid, &keys, copy.properties.headers.as_ref());
                targets.retain(|t| {
                    self.queues
                        .get(t)
                        .is_some_and(|tq| !is_cycle(copy.properties.headers.as_ref(), &tq.name))
                });
                targets.retain(|t| self.refuses(*t, copy.body.len()).is_none());
                if copy.is_persistent() && !self.record_fits(&vhost, &copy, &targets) {
                    // Its record could not hold it (x-death grew it): it cannot be made
                    // durable, so it enters only queues that are not logged.
                    targets.retain(|t| self.queues.get(t).is_some_and(|q| !q.logged()));
                }
                let copy = Arc::new(copy);
                let durable: Vec<String> = if copy.is_persistent() {
                    targets
                        .iter()
                        .filter_map(|t| self.queues.get(t))
                        .filter(|q| q.logged())
                        .map(|q| q.name.to_string())
                        .collect()
                } else {
                    Vec::new()
                };
                if from_logged || !durable.is_empty() {
                    out.events.push(Event::DeadLettered {
                        vhost: vhost.to_string(),
                        from: from_logged.then(|| qname.to_string()),
                        id: old,
                        message: (!durable.is_empty()).then(|| MessageRecord {
                            message: copy.clone(),
                        }),
                        targets: durable,
                    });
                }
                self.enqueue_all(&targets, &copy, now, out);
                DeathFate::DeadLettered {
                    targets: count_u32(targets.len()),
                }
            }
        };
        out.effects.push(Effect::MessageDied {
            vhost: vhost.to_string(),
            queue: qname.to_string(),
            id: old,
            reason,
            fate,
        });
    }

    // ----- timers -----

    /// Delivers what can be delivered and expires what is due in every queue touched by this
    /// step, then re-arms their timers.
    pub(crate) fn process_dirty(&mut self, now: u64, out: &mut Outcome) {
        while let Some(qid) = self.dirty.pop() {
            let Some(q) = self.queues.get_mut(&qid) else {
                continue;
            };
            q.dirty = false;
            self.drain(qid, now, out);
            self.expire_queue(qid, now, out);
            self.rearm(qid);
        }
    }

    /// Only re-arms timers (replay: nothing fires or moves).
    pub(crate) fn rearm_dirty(&mut self) {
        while let Some(qid) = self.dirty.pop() {
            if let Some(q) = self.queues.get_mut(&qid) {
                q.dirty = false;
                self.rearm(qid);
            }
        }
    }

    fn drain(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
        // After a stored message could not be read, nothing more moves: the server stops.
        while self.storage_failure.is_none() {
            self.expire_head(qid, now, out);
            let Some(q) = self.queues.get(&qid) else {
                return;
            };
            if q.ready.is_empty() {
                return;
            }
            let Some(ci) = self.can_take(qid) else {
                return;
            };
            let taken = self
                .queues
                .get_mut(&qid)
                .and_then(|q| q.ready.pop_front())
                .expect("checked non-empty");
            self.deliver(qid, ci, taken, out);
        }
    }

    pub(crate) fn rearm(&mut self, qid: QueueId) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        let want = q.ready.first_deadline();
        if want != q.armed_msg {
            if let Some(t) = q.armed_msg {
                self.timers.remove(&(t, Timer::Messages(qid)));
            }
            if let Some(t) = want {
                self.timers.insert((t, Timer::Messages(qid)));
            }
            q.armed_msg = want;
        }
        let want = q.lease_deadline();
        if want != q.armed_lease {
            if let Some(t) = q.armed_lease {
                self.timers.remove(&(t, Timer::Lease(qid)));
            }
            if let Some(t) = want {
                self.timers.insert((t, Timer::Lease(qid)));
            }
            q.armed_lease = want;
        }
    }

    /// The earliest instant at which [`Broker::expire_due`] has work: a message deadline, a
    /// queue lease or a scheduled message.
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Does all work due at `now_ms`: expires messages (dead-lettering them), deletes queues
    /// whose lease ran out (S-QEXP), routes scheduled messages that became due (S-SCHED).
    pub fn expire_due(&mut self, now_ms: u64) -> Outcome {
        let mut out = Outcome::default();
        while let Some(&(t, timer)) = self.timers.first() {
            if t > now_ms {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Messages(qid) => {
                    if let Some(q) = self.queues.get_mut(&qid) {
                        q.armed_msg = None;
                    }
                    self.expire_queue(qid, now_ms, &mut out);
                    self.mark_dirty(qid);
                    self.rearm(qid);
                }
                Timer::Lease(qid) => {
                    let Some(q) = self.queues.get_mut(&qid) else {
                        continue;
                    };
                    q.armed_lease = None;
                    if q.lease_deadline().is_some_and(|d| d <= now_ms) {
                        // S-QEXP-5: logged; messages discarded, not dead-lettered.
                        self.delete_queue(qid, QueueDeletedReason::Expired, true, now_ms, &mut out);
                    } else {
                        self.rearm(qid);
                    }
                }
                Timer::Scheduled(id) => self.fire_scheduled(id, now_ms, &mut out),
            }
        }
        self.process_dirty(now_ms, &mut out);
        #[cfg(debug_assertions)]
        self.check_invariants();
        out
    }

    /// A scheduled message is due: it is routed now by the exchange's delayed type, with a
    /// fresh id (queue order is id order) and its due time as enqueue time (S-SCHED-2).
    fn fire_scheduled(&mut self, id: MessageId, now: u64, out: &mut Outcome) {
        let Some(s) = self.scheduled.remove(&id) else {
            return;
        };
        let xid = self
            .vhosts
            .get(&s.vhost)
            .and_then(|v| v.exchanges.get(&s.exchange).copied());
        let Some(xid) = xid else {
            if s.durable {
                out.events.push(Event::Unscheduled { vhost: s.vhost, id });
            }
            return;
        };
        let mut msg = (*s.msg).clone();
        msg.id = self.next_id();
        let keys = routing_keys(&msg.routing_key, msg.properties.headers.as_ref());
        strip_bcc(&mut msg);
        let v = self.vhosts.get(&s.vhost).expect("looked up above");
        let mut targets = self.route(v, xid, &keys, msg.properties.headers.as_ref());
        if msg.is_persistent() && !self.record_fits(&s.vhost, &msg, &targets) {
            targets.retain(|t| self.queues.get(t).is_some_and(|q| !q.logged()));
        }
        let msg = Arc::new(msg);
        self.enqueue_routed(&s.vhost, &msg, &targets, Some((id, s.durable)), now, out);
    }
}
