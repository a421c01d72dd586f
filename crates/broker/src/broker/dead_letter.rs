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
    DeathFate, DeathReason, Effect, Event, Message, MessageRecord, Outcome, Properties, SettleKind,
    StoredSlot,
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

impl Broker {
    /// A message dies in `qid` (S-DLX-1). Without a dead-letter exchange it is discarded;
    /// with a missing one it is dropped and counted (S-DLX-4); otherwise the copy (S-DLX-5)
    /// is routed (S-DLX-3) minus cycles (S-DLX-6), and one event removes and enqueues
    /// (S-DLX-7). `from_logged`: the message is in the log as part of `qid`.
    pub(super) fn dead_letter(
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
                let targets = self.dead_letter_targets(&vhost, xid, &copy, &keys);
                let copy = Arc::new(copy);
                let durable = self.logged_names(&copy, &targets);
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

    /// The queues a dead-lettered copy enters through the dead-letter exchange `xid`
    /// (S-DLX-3): minus cycles (S-DLX-6) and queues at a length limit that refuse (S-LEN-2).
    fn dead_letter_targets(
        &self,
        vhost: &str,
        xid: ExchangeId,
        copy: &Message,
        keys: &[String],
    ) -> Vec<QueueId> {
        let v = self.vhosts.get(vhost).expect("the queue's vhost exists");
        let mut targets = self.route(v, xid, keys, copy.properties.headers.as_ref());
        targets.retain(|t| {
            self.queues
                .get(t)
                .is_some_and(|tq| !is_cycle(copy.properties.headers.as_ref(), &tq.name))
        });
        targets.retain(|t| self.refuses(*t, copy.body.len()).is_none());
        if copy.is_persistent() && !self.record_fits(vhost, copy, &targets) {
            // Its record could not hold it (x-death grew it): it cannot be made durable, so
            // it enters only queues that are not logged.
            targets.retain(|t| self.queues.get(t).is_some_and(|q| !q.logged()));
        }
        targets
    }
}
