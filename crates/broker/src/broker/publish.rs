//! Publishing: routing a message through exchanges, exchange-to-exchange bindings and
//! alternate exchanges into queues, admission against length limits (S-LEN), the one
//! `Published` event naming the durable queues it entered, and the refusal of a persistent
//! message whose log record could not hold it (S-DUR-3).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::Arc;

use super::Broker;
use super::state::{Dest, ExchangeId, QueueId, Vhost};
use crate::args::{Overflow, parse_expiration, select_exchange_policy};
use crate::error::{BrokerError, ErrorKind};
use crate::queue::Taken;
use crate::routing::headers_match;
use crate::types::{
    ConnId, DeathReason, DelayedType, Effect, Event, ExchangeKind, Message, MessageId,
    MessageRecord, MessageRef, Outcome, Publish, PublishResult, RecordSize, Reply, StoredSlot,
};
use crate::value::{FieldTable, Value};

pub(super) fn string_list(headers: Option<&FieldTable>, key: &str) -> Vec<String> {
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
pub(super) fn routing_keys(routing_key: &str, headers: Option<&FieldTable>) -> Vec<String> {
    let mut keys = vec![routing_key.to_owned()];
    keys.extend(string_list(headers, "CC"));
    keys.extend(string_list(headers, "BCC"));
    keys
}

pub(super) fn strip_bcc(msg: &mut Message) {
    if let Some(h) = msg.properties.headers.as_mut() {
        h.remove("BCC");
    }
}

impl Broker {
    /// Every queue reached from `start` with `keys`, through exchange-to-exchange bindings
    /// and alternate exchanges (an exchange whose own bindings match nothing hands over to its
    /// alternate), each exchange visited once. Sorted by id, no duplicates.
    pub(super) fn route(
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
            // S-DEFS-4: the `alternate-exchange` argument, else the exchange's policy's key;
            // looked up only for a message its bindings did not route.
            if dests.is_empty()
                && let Some(ae) = x.alternate.as_deref().or_else(|| {
                    select_exchange_policy(vhost.policies.values(), &x.name)
                        .and_then(|p| p.alternate_exchange.as_deref())
                })
                && let Some(&aid) = vhost.exchanges.get(ae)
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

    /// A publish; `from` is the publishing connection (none for the management API's), which
    /// flow control may slow (S-FLOW-1).
    pub(super) fn publish(
        &mut self,
        p: Publish,
        from: Option<ConnId>,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
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
        // `next_id` by hand: `x` stays borrowed (a field borrow) to count the publish on it.
        let id = MessageId(self.next_message);
        self.next_message += 1;
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
            // Routed later, when the delay passed: counted in only (S-MGMT-8).
            x.stats.count(false);
            self.publish_delayed(p.vhost, msg, delay, durable_x, now, out);
            return Ok(());
        }
        let targets = self.publish_targets(&p.vhost, xid, &mut msg);
        x.stats.count(!targets.is_empty());
        self.refuse_unstorable(&p.vhost, &msg, &targets)?;
        let msg = Arc::new(msg);
        self.deliver_reply(&msg, out);
        if targets.is_empty() && p.mandatory {
            out.effects.push(Effect::Return {
                reply_code: 312,
                reply_text: "NO_ROUTE".to_owned(),
                exchange: msg.exchange.clone(),
                routing_key: msg.routing_key.clone(),
                message: msg.clone(),
            });
        }
        let mut result = self.enqueue_routed(&p.vhost, &msg, &targets, None, now, out);
        result.flow = from.is_some_and(|conn| self.flow_after_publish(conn, &targets));
        out.reply = Reply::Published(result);
        Ok(())
    }

    /// The queues a fresh publish reaches (its `BCC` header is dropped on the way, S-DLX-3).
    fn publish_targets(&self, vhost: &str, xid: ExchangeId, msg: &mut Message) -> Vec<QueueId> {
        let vhost = self
            .vhosts
            .get(vhost)
            .expect("the caller checked the vhost");
        let cc = msg
            .properties
            .headers
            .as_ref()
            .is_some_and(|h| h.get("CC").is_some() || h.get("BCC").is_some());
        if msg.exchange.is_empty() && !cc {
            // The hot path: the default exchange routes by queue name, nothing to allocate.
            vhost
                .queues
                .get(&msg.routing_key)
                .map_or_else(Vec::new, |q| vec![*q])
        } else {
            let keys = routing_keys(&msg.routing_key, msg.properties.headers.as_ref());
            strip_bcc(msg);
            self.route(vhost, xid, &keys, msg.properties.headers.as_ref())
        }
    }

    /// The names of the queues among `targets` whose log `msg` enters: the logged ones, for a
    /// persistent message (S-DUR-2); none for a transient one.
    pub(super) fn logged_names(&self, msg: &Message, targets: &[QueueId]) -> Vec<String> {
        if !msg.is_persistent() {
            return Vec::new();
        }
        targets
            .iter()
            .filter_map(|t| self.queues.get(t))
            .filter(|q| q.logged())
            .map(|q| q.name.to_string())
            .collect()
    }

    /// Hands the broker the store's rule for whether a message's log record fits. A broker
    /// without one (no store, so nothing is logged) bounds nothing.
    pub fn set_record_size(&mut self, rule: Arc<dyn RecordSize>) {
        self.record_size = Some(rule);
    }

    /// Can the one record that logs `msg` into the logged queues among `targets` fit the log?
    /// The store's rule, asked so that a message that could not be made durable is refused
    /// before it changes anything, instead of failing the log after the broker applied it.
    pub(super) fn record_fits(&self, vhost: &str, msg: &Message, targets: &[QueueId]) -> bool {
        let mut names = targets
            .iter()
            .filter_map(|t| self.queues.get(t))
            .filter(|q| q.logged())
            .map(|q| &*q.name);
        self.record_size
            .as_ref()
            .is_none_or(|rule| rule.message_fits(vhost, msg, &mut names))
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

    /// Would `q` refuse a message of `len` body bytes (S-LEN-2 reject-publish)?
    pub(super) fn refuses(&self, qid: QueueId, len: usize) -> Option<Overflow> {
        let q = self.queues.get(&qid)?;
        let overflow = q.eff.overflow.unwrap_or_default();
        if overflow == Overflow::DropHead {
            return None;
        }
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        // Messages waiting to be dead-lettered count, as RabbitMQ's quorum queues count them
        // (S-QQ-10).
        let count = u64::try_from(q.ready.len() + q.held.len()).unwrap_or(u64::MAX);
        let over_count = q.eff.max_length.is_some_and(|m| count + 1 > m);
        let over_bytes = q.eff.max_length_bytes.is_some_and(|m| {
            q.ready
                .bytes()
                .saturating_add(q.held.bytes())
                .saturating_add(len)
                > m
        });
        (over_count || over_bytes).then_some(overflow)
    }

    /// Puts a freshly routed message into `targets`: admission (S-LEN-2), one `Published`
    /// event naming the durable queues it entered, then enqueue (or direct delivery).
    pub(super) fn enqueue_routed(
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
        let durable = self.logged_names(msg, &accepted);
        let sched_durable = scheduled.filter(|s| s.1).map(|s| s.0);
        if !durable.is_empty() {
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
    pub(super) fn enqueue_all(
        &mut self,
        targets: &[QueueId],
        msg: &Arc<Message>,
        now: u64,
        out: &mut Outcome,
    ) {
        let mut pushed = Vec::new();
        for &qid in targets {
            let Some(q) = self.queues.get_mut(&qid) else {
                continue;
            };
            q.stats.publish += 1; // S-MGMT-8
            let taken = Taken {
                msg: MessageRef::Loaded(msg.clone()),
                delivery_count: 0,
                redelivered: false,
            };
            if q.ready.is_empty()
                && let Some(ci) = self.can_take(qid)
            {
                // Nothing left to drain, expire or re-arm: the queue was and stays empty.
                self.deliver(qid, ci, taken, now, out);
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
    pub(super) fn enforce_length(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
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
}
