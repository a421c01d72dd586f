//! Scheduled messages (S-SCHED): a message published to an `x-delayed-message` exchange
//! waits, invisible, until its delay passes, then is routed by the exchange's delayed type
//! with a fresh id and its due time as enqueue time (S-SCHED-2).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::Arc;

use super::Broker;
use super::publish::{routing_keys, strip_bcc};
use super::state::{Scheduled, Timer};
use crate::types::{Event, Message, MessageId, MessageRecord, Outcome, PublishResult, Reply};

impl Broker {
    /// A publish to an `x-delayed-message` exchange with a positive `x-delay` (S-SCHED-1):
    /// invisible until due, logged when the exchange is durable and the message persistent.
    pub(super) fn publish_delayed(
        &mut self,
        vhost: String,
        mut msg: Message,
        delay: u64,
        durable_exchange: bool,
        now: u64,
        out: &mut Outcome,
    ) {
        // S-SCHED-1: invisible until due; its deadline counts from the due time (S-SCHED-2).
        msg.enqueued_at_ms = now.saturating_add(delay);
        let durable = durable_exchange && msg.is_persistent();
        let msg = Arc::new(msg);
        if durable {
            out.events.push(Event::Scheduled {
                vhost: vhost.clone(),
                exchange: msg.exchange.clone(),
                message: MessageRecord {
                    message: msg.clone(),
                },
            });
        }
        self.schedule(vhost, msg, durable);
        out.reply = Reply::Published(PublishResult {
            routed: true,
            ..PublishResult::default()
        });
    }

    pub(super) fn schedule(&mut self, vhost: String, msg: Arc<Message>, durable: bool) {
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

    /// A scheduled message is due: it is routed now by the exchange's delayed type, with a
    /// fresh id (queue order is id order) and its due time as enqueue time (S-SCHED-2).
    pub(super) fn fire_scheduled(&mut self, id: MessageId, now: u64, out: &mut Outcome) {
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

    pub(super) fn unschedule(&mut self, id: MessageId) {
        if let Some(s) = self.scheduled.remove(&id) {
            self.timers
                .remove(&(s.msg.enqueued_at_ms, Timer::Scheduled(id)));
        }
    }
}
