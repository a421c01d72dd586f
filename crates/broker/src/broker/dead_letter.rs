//! Dead-lettering (S-DLX): a message that dies (rejected, expired, over a length limit, past
//! its delivery limit) is discarded, dropped and counted (missing exchange), or copied with
//! its `x-death` history and routed again, minus cycles, in one logged event (S-DLX-7).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::Arc;

use super::Broker;
use super::delivery::count_u32;
use super::marks::{Mark, push_mark};
use super::publish::string_list;
use super::state::{ExchangeId, QueueId};
use crate::queue::Taken;
use crate::types::{
    DeathFate, DeathReason, Effect, Event, HeldDeath, Message, MessageRecord, MessageRef, Outcome,
    Properties, SettleKind, StoredSlot,
};
use crate::value::{FieldTable, Value};

/// Builds the dead-lettered copy's properties and routing keys (S-DLX-3, S-DLX-5).
fn dead_letter_copy(
    msg: &Message,
    queue: &str,
    reason: DeathReason,
    now: u64,
    dlrk: Option<&str>,
) -> (Properties, Vec<String>) {
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

/// Where a dead-lettered message can go now (S-DLX-2..6).
pub(super) enum Route {
    /// The queue has no dead-letter exchange.
    Nowhere,
    /// Its dead-letter exchange does not exist (S-DLX-4).
    ExchangeMissing,
    /// The copy (S-DLX-5), the queues it enters (S-DLX-3, minus cycles, S-DLX-6), and
    /// whether a queue it routed to refused it (S-LEN-2).
    To {
        copy: Box<Message>,
        targets: Vec<QueueId>,
        refused: bool,
    },
    /// The message could not be read back: the server stops (S-DUR-7).
    Unreadable,
}

impl Broker {
    /// A message dies in `qid` (S-DLX-1). Without a dead-letter exchange it is discarded;
    /// with a missing one it is dropped and counted (S-DLX-4); otherwise the copy (S-DLX-5)
    /// is routed (S-DLX-3) minus cycles (S-DLX-6), and one event removes and enqueues
    /// (S-DLX-7). Under at-least-once (S-QQ-10) a message that cannot go everywhere it
    /// routes to now is held in its queue instead. `from_logged`: the message is in the log
    /// as part of `qid`.
    pub(super) fn dead_letter(
        &mut self,
        qid: QueueId,
        taken: &Taken,
        reason: DeathReason,
        from_logged: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let death = HeldDeath { reason, at_ms: now };
        if let Some(fate) = self.dead_letter_as(qid, taken, death, from_logged, now, out) {
            if fate == DeathFate::Held {
                self.hold(qid, taken.clone(), death, from_logged, out);
            }
            self.report_death(qid, taken.msg.id(), reason, fate, out);
        }
    }

    /// Dead-letters `taken`, which died in `qid` as `death`, if its queue's strategy lets it
    /// go now; returns its fate (`Held`: the caller holds it), `None` when it could not be
    /// read back.
    pub(super) fn dead_letter_as(
        &mut self,
        qid: QueueId,
        taken: &Taken,
        death: HeldDeath,
        from_logged: bool,
        now: u64,
        out: &mut Outcome,
    ) -> Option<DeathFate> {
        let at_least_once = self.queues.get(&qid)?.eff.at_least_once();
        let settle_kind = if death.reason == DeathReason::Expired {
            SettleKind::Expire
        } else {
            SettleKind::Discard
        };
        let fate = match self.dead_letter_route(qid, &taken.msg, death) {
            Route::Unreadable => return None,
            Route::To {
                copy,
                targets,
                refused,
            } if !at_least_once || (!refused && !targets.is_empty()) => {
                self.move_dead(qid, taken.msg.id(), copy, &targets, from_logged, now, out);
                DeathFate::DeadLettered {
                    targets: count_u32(targets.len()),
                }
            }
            r @ (Route::Nowhere | Route::ExchangeMissing) if !at_least_once => {
                if from_logged {
                    let q = &self.queues[&qid];
                    let (vhost, qname) = (q.vhost.clone(), q.name.clone());
                    push_mark(
                        &mut out.events,
                        &vhost,
                        &qname,
                        taken.msg.id(),
                        Mark::Settle(settle_kind),
                    );
                }
                if matches!(r, Route::ExchangeMissing) {
                    self.dead_letter_dropped += 1;
                    DeathFate::ExchangeMissing
                } else {
                    DeathFate::Discarded
                }
            }
            _ => DeathFate::Held,
        };
        Some(fate)
    }

    /// Reports a death to the server (counted, logged).
    pub(super) fn report_death(
        &self,
        qid: QueueId,
        id: crate::types::MessageId,
        reason: DeathReason,
        fate: DeathFate,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.get(&qid) else {
            return;
        };
        out.effects.push(Effect::MessageDied {
            vhost: q.vhost.to_string(),
            queue: q.name.to_string(),
            id,
            reason,
            fate,
        });
    }

    /// The queue's dead-letter exchange is set and does not exist (S-DLX-4).
    pub(super) fn dead_letter_exchange_missing(&self, qid: QueueId) -> bool {
        matches!(
            self.dead_letter_route_kind(qid),
            Some(Route::ExchangeMissing)
        )
    }

    /// `Nowhere` or `ExchangeMissing` for a queue whose dead-letter exchange does not take
    /// messages; `None` when it does (its routes are the message's).
    fn dead_letter_route_kind(&self, qid: QueueId) -> Option<Route> {
        let q = self.queues.get(&qid)?;
        let Some(x) = q.eff.dead_letter_exchange.as_ref() else {
            return Some(Route::Nowhere);
        };
        let exists = self
            .vhosts
            .get(&*q.vhost)
            .is_some_and(|v| v.exchanges.contains_key(x.as_str()));
        (!exists).then_some(Route::ExchangeMissing)
    }

    /// Where the message `msg`, dead in `qid` as `death`, would go now.
    fn dead_letter_route(&mut self, qid: QueueId, msg: &MessageRef, death: HeldDeath) -> Route {
        if let Some(r) = self.dead_letter_route_kind(qid) {
            return r;
        }
        let q = &self.queues[&qid];
        let (vhost, qname) = (q.vhost.clone(), q.name.clone());
        let x = q.eff.dead_letter_exchange.clone().unwrap_or_default();
        let dlrk = q.eff.dead_letter_routing_key.clone();
        let xid = self.vhosts[&*vhost].exchanges[x.as_str()];
        let Some(original) = self.loaded(msg) else {
            return Route::Unreadable;
        };
        let (properties, keys) = dead_letter_copy(
            &original,
            &qname,
            death.reason,
            death.at_ms,
            dlrk.as_deref(),
        );
        let copy = Message {
            id: crate::types::MessageId(0),
            enqueued_at_ms: death.at_ms,
            ttl_ms: None,
            exchange: x,
            routing_key: keys.first().cloned().unwrap_or_default(),
            properties,
            body: original.body.clone(),
            stored: StoredSlot::default(),
        };
        let (targets, refused) = self.dead_letter_targets(&vhost, xid, &copy, &keys);
        Route::To {
            copy: Box::new(copy),
            targets,
            refused,
        }
    }

    /// Moves the dead message `old` out of `qid` and its copy into `targets`: one event
    /// (S-DLX-7), then the enqueue. The copy gets its id here, so ids stay in queue order.
    #[expect(clippy::too_many_arguments, reason = "one dead-lettering's parts")]
    fn move_dead(
        &mut self,
        qid: QueueId,
        old: crate::types::MessageId,
        mut copy: Box<Message>,
        targets: &[QueueId],
        from_logged: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        let q = &self.queues[&qid];
        let (vhost, qname) = (q.vhost.clone(), q.name.clone());
        copy.id = self.next_id();
        copy.enqueued_at_ms = now;
        let copy = Arc::new(*copy);
        let durable = self.logged_names(&copy, targets);
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
        self.enqueue_all(targets, &copy, now, out);
    }

    /// The queues a dead-lettered copy enters through the dead-letter exchange `xid`
    /// (S-DLX-3): minus cycles (S-DLX-6) and queues at a length limit that refuse (S-LEN-2);
    /// and whether any queue it routed to refused it.
    fn dead_letter_targets(
        &self,
        vhost: &str,
        xid: ExchangeId,
        copy: &Message,
        keys: &[String],
    ) -> (Vec<QueueId>, bool) {
        let v = self.vhosts.get(vhost).expect("the queue's vhost exists");
        let mut targets = self.route(v, xid, keys, copy.properties.headers.as_ref());
        targets.retain(|t| {
            self.queues
                .get(t)
                .is_some_and(|tq| !is_cycle(copy.properties.headers.as_ref(), &tq.name))
        });
        let routed = targets.len();
        targets.retain(|t| self.refuses(*t, copy.body.len()).is_none());
        if copy.is_persistent() && !self.record_fits(vhost, copy, &targets) {
            // Its record could not hold it (x-death grew it): it cannot be made durable, so
            // it enters only queues that are not logged.
            targets.retain(|t| self.queues.get(t).is_some_and(|q| !q.logged()));
        }
        let refused = targets.len() < routed;
        (targets, refused)
    }
}
