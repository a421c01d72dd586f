//! Consumers of a queue: `basic.consume` (with its arguments) and `basic.cancel`, the choice
//! of the consumer that takes the next message (consumer priorities, round-robin within a
//! priority, single active consumer: S-CONS-1..7), and the consumer timeout (S-CONS-8..10).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::Arc;

use super::Broker;
use super::state::{Consumer, Queue, QueueId, Timer};
use crate::args::{QueueKind, parse_consumer_args};
use crate::error::{BrokerError, ErrorKind};
use crate::types::{ChanRef, Effect, Outcome, QueueDeletedReason, Reply};
use crate::value::FieldTable;

/// What `basic.consume` asks for.
pub(super) struct ConsumeSpec {
    pub(super) tag: String,
    pub(super) no_ack: bool,
    pub(super) exclusive: bool,
    pub(super) arguments: FieldTable,
}

impl Queue {
    /// Single active consumer is on (S-CONS-4).
    pub(super) fn single_active(&self) -> bool {
        self.eff.single_active_consumer == Some(true)
    }

    /// The index range of the consumers with the priority of consumer `i` (consumers are
    /// kept highest priority first).
    fn priority_group(&self, i: usize) -> std::ops::Range<usize> {
        let Some(p) = self.consumers.get(i).map(|c| c.priority) else {
            return 0..0;
        };
        let start = self.consumers.partition_point(|c| c.priority > p);
        let end = self.consumers.partition_point(|c| c.priority >= p);
        start..end
    }

    /// S-CONS-2: after consumer `i` took a message, the round-robin goes on with the next
    /// consumer of the same priority.
    pub(super) fn advance_round_robin(&mut self, i: usize) {
        let group = self.priority_group(i);
        self.rr = if i + 1 < group.end {
            i + 1
        } else {
            group.start
        };
    }

    /// The consumer that takes over when the active one goes (S-CONS-5): the highest
    /// priority, the earliest registered among equals.
    fn next_active(&self) -> Option<u64> {
        self.consumers.first().map(|c| c.serial)
    }

    /// S-CONS-5, quorum queues (RabbitMQ's `rabbit_fifo`): while a consumer of a higher
    /// priority than the active one waits, the active one is quiescing (it gets nothing
    /// more); the position of the active consumer in the (priority-ordered) list says so.
    fn quiescing(&self, active: usize) -> bool {
        self.eff.kind() == QueueKind::Quorum
            && self
                .consumers
                .first()
                .zip(self.consumers.get(active))
                .is_some_and(|(top, a)| top.priority > a.priority)
    }

    /// Hands over from a quiescing active consumer that holds nothing unacked to the
    /// highest-priority one. Returns whether it did.
    pub(super) fn hand_over_to_higher_priority(&mut self) -> bool {
        let Some(i) = self
            .consumers
            .iter()
            .position(|c| Some(c.serial) == self.active)
        else {
            return false;
        };
        let idle = self.consumers.get(i).is_some_and(|c| c.unacked == 0);
        if self.quiescing(i) && idle {
            self.active = self.next_active();
            return true;
        }
        false
    }
}

impl Broker {
    pub(super) fn consume(
        &mut self,
        chan: ChanRef,
        queue: &str,
        spec: ConsumeSpec,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.chan_vhost(chan)?;
        let qid = self.find_queue(&vhost, queue, Some(chan.conn))?;
        let args =
            parse_consumer_args(self.queues[&qid].eff.kind(), &vhost, queue, &spec.arguments)?;
        let tag = if spec.tag.is_empty() {
            self.gen_consumer_tag(chan)
        } else {
            spec.tag
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
        // S-CONS-6: an exclusive consumer is refused on a single-active-consumer queue, as
        // RabbitMQ does (`exclusive_consume_unavailable`).
        let exclusive_refused = spec.exclusive && (q.single_active() || !q.consumers.is_empty());
        if exclusive_refused || q.consumers.iter().any(|c| c.exclusive) {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!("queue '{queue}' in vhost '{vhost}' in exclusive use"),
            ));
        }
        let tag_arc: Arc<str> = tag.as_str().into();
        let serial = self.next_consumer;
        self.next_consumer += 1;
        let q = self.queues.get_mut(&qid).expect("found above");
        // S-CONS-1: after every consumer of a higher or equal priority.
        let at = q.consumers.partition_point(|c| c.priority >= args.priority);
        q.consumers.insert(
            at,
            Consumer {
                serial,
                chan,
                tag: tag_arc.clone(),
                no_ack: spec.no_ack,
                exclusive: spec.exclusive,
                prefetch,
                unacked: 0,
                priority: args.priority,
                timeout_ms: args.timeout_ms,
                arguments: spec.arguments,
            },
        );
        if q.rr >= at && q.rr + 1 < q.consumers.len() {
            q.rr += 1; // keep pointing at the same consumer
        }
        if q.single_active() && q.active.is_none() {
            q.active = Some(serial); // S-CONS-4: the first to register
        } else if q.single_active() {
            q.hand_over_to_higher_priority();
        }
        q.had_consumer = true;
        q.last_used_ms = now;
        if let Some(ch) = self.channels.get_mut(&chan) {
            ch.consumers.insert(tag_arc, qid);
        }
        out.reply = Reply::ConsumeOk { consumer_tag: tag };
        self.mark_dirty(qid);
        Ok(())
    }

    /// `basic.cancel`: an unknown tag is not an error (RabbitMQ answers cancel-ok). The
    /// consumer's unacked messages stay on the channel (S-CONS-5).
    pub(super) fn cancel(
        &mut self,
        chan: ChanRef,
        consumer_tag: String,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
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

    /// Removes a consumer from its queue (the channel's map is the caller's business). With
    /// single active consumer the next in line becomes active (S-CONS-5). The lease restarts
    /// when the last consumer goes (S-QEXP-2); an auto-delete queue goes.
    pub(super) fn remove_consumer(
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
        let Some(i) = q
            .consumers
            .iter()
            .position(|c| c.chan == chan && &*c.tag == tag)
        else {
            return;
        };
        let gone = q.consumers.remove(i);
        if q.rr > i {
            q.rr -= 1;
        }
        if q.rr >= q.consumers.len() {
            q.rr = 0;
        }
        if q.active == Some(gone.serial) {
            q.active = q.next_active();
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

    /// Consumer `c` may take a message now: its channel is not paused and it has room under
    /// its prefetch, its channel's global prefetch and the safety cap.
    fn has_room(&self, c: &Consumer) -> bool {
        let Some(ch) = self.channels.get(&c.chan) else {
            return false;
        };
        if !ch.flow {
            return false;
        }
        if c.no_ack {
            return true;
        }
        let per_consumer = c.prefetch == 0 || c.unacked < u32::from(c.prefetch);
        let global = ch.global_prefetch == 0 || ch.consumer_unacked < u32::from(ch.global_prefetch);
        // The safety cap holds whatever the prefetch (prefetch 0 means "no limit" to the
        // client, not to us: STYLE 3.2).
        let capped = ch.consumer_unacked < self.unacked_per_channel_max;
        per_consumer && global && capped
    }

    /// The consumer that takes the next message of `qid`, if any can: the active one with
    /// single active consumer (S-CONS-4); otherwise the highest priority with room
    /// (S-CONS-1, S-CONS-3), round-robin among equals (S-CONS-2).
    pub(super) fn can_take(&self, qid: QueueId) -> Option<usize> {
        let q = self.queues.get(&qid)?;
        if q.single_active() {
            let i = q
                .consumers
                .iter()
                .position(|c| Some(c.serial) == q.active)?;
            let quiet = q.quiescing(i);
            return (!quiet && self.has_room(q.consumers.get(i)?)).then_some(i);
        }
        let mut group = q.priority_group(0);
        while !group.is_empty() {
            let len = group.len();
            let from = if group.contains(&q.rr) {
                q.rr - group.start
            } else {
                0
            };
            for k in 0..len {
                let i = group.start + (from + k) % len;
                if q.consumers.get(i).is_some_and(|c| self.has_room(c)) {
                    return Some(i);
                }
            }
            group = q.priority_group(group.end);
        }
        None
    }

    /// Arms the channel's consumer-timeout timer for a delivery due at `deadline` (S-CONS-8):
    /// the timer tracks the earliest deadline armed so far.
    pub(super) fn arm_ack_timer(&mut self, chan: ChanRef, deadline: u64) {
        let Some(ch) = self.channels.get_mut(&chan) else {
            return;
        };
        if ch.ack_timer.is_some_and(|t| t <= deadline) {
            return;
        }
        if let Some(t) = ch.ack_timer.replace(deadline) {
            self.timers.remove(&(t, Timer::AckTimeout(chan)));
        }
        self.timers.insert((deadline, Timer::AckTimeout(chan)));
    }

    /// The channel's timer ran out (S-CONS-8): if an unacked delivery is past its timeout, the
    /// channel is to be closed with RabbitMQ's 406 (the server does it, and the close
    /// requeues the messages); otherwise the timer is armed for the earliest deadline left.
    pub(super) fn fire_ack_timeout(&mut self, chan: ChanRef, now: u64, out: &mut Outcome) {
        let Some(ch) = self.channels.get_mut(&chan) else {
            return;
        };
        ch.ack_timer = None;
        let earliest = ch
            .unacked
            .values()
            .filter_map(|u| Some((u.delivered_ms.saturating_add(u.timeout_ms?), u.timeout_ms?)))
            .min();
        match earliest {
            Some((deadline, timeout)) if deadline <= now => {
                out.effects.push(Effect::ChannelTimedOut {
                    chan,
                    error: BrokerError::precondition(format!(
                        "delivery acknowledgement on channel {} timed out. Timeout value \
                         used: {timeout} ms. This timeout value can be configured, see \
                         consumers doc guide to learn more",
                        chan.channel.0
                    )),
                });
            }
            Some((deadline, _)) => self.arm_ack_timer(chan, deadline),
            None => {}
        }
    }

    /// Sets the consumer timeout that applies where neither the queue (`x-consumer-timeout`,
    /// `consumer-timeout` policy) nor the consumer sets one (S-CONS-9); `None`: no timeout.
    pub fn set_consumer_timeout(&mut self, timeout_ms: Option<u64>) {
        self.consumer_timeout_ms = timeout_ms;
    }
}
