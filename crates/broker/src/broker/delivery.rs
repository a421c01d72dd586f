//! Delivery and acknowledgement: consumers (consume, cancel, prefetch, channel flow), the
//! round-robin hand-out to consumers with room, `basic.get`, ack/nack/reject/recover, and the
//! requeue of a message to its original position and deadline (S-TTL-7, S-DLX-1
//! `delivery_limit`).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::Arc;

use super::Broker;
use super::consumers::ConsumeSpec;
use super::marks::{Mark, push_mark};
use super::state::{Channel, Queue, QueueId, Unacked};
use crate::args::QueueKind;
use crate::error::{BrokerError, ErrorKind};
use crate::queue::Taken;
use crate::types::{
    ChanRef, Command, DeathReason, Delivery, DeliveryTag, Effect, Event, GetOk, MessageRef,
    Outcome, Reply, SettleKind,
};

/// Unacked messages taken by one ack/nack/reject: one without allocating, or many.
type TakenUnacked = std::iter::Chain<std::option::IntoIter<Unacked>, std::vec::IntoIter<Unacked>>;

/// Who takes a message and on what terms: the consumer's serial (None for `basic.get`),
/// `no_ack`, when, and the consumer timeout that applies (S-CONS-8).
struct Taker {
    consumer: Option<u64>,
    no_ack: bool,
    now: u64,
    timeout_ms: Option<u64>,
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
    by: &Taker,
    events: &mut Vec<Event>,
) -> u64 {
    let (consumer, no_ack) = (by.consumer, by.no_ack);
    let delivery_tag = ch.next_tag;
    ch.next_tag += 1;
    q.stats.deliver_get += 1; // S-MGMT-8
    q.stats.redeliver += u64::from(taken.redelivered);
    let logged = q.logged() && taken.msg.is_persistent();
    let mark = if no_ack {
        Mark::Settle(SettleKind::Ack)
    } else {
        q.unacked += 1;
        q.unacked_bytes += taken.msg.body_len();
        ch.unacked.insert(
            delivery_tag,
            Unacked {
                queue: qid,
                taken: taken.clone(),
                consumer,
                delivered_ms: by.now,
                timeout_ms: by.timeout_ms,
            },
        );
        Mark::Delivered
    };
    if logged {
        push_mark(events, &q.vhost, &q.name, taken.msg.id(), mark);
    }
    delivery_tag
}

pub(super) fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// S-QQ-9: a quorum queue adds `x-delivery-count` once a message came back at least once
/// (RabbitMQ 4.x counts every return, requeue or channel close).
fn count_header(q: &Queue, delivery_count: u32) -> Option<u32> {
    (q.eff.kind() == QueueKind::Quorum && delivery_count > 0).then_some(delivery_count)
}

impl Broker {
    /// The consumer-side commands: `ChannelFlow`, `Qos`, `Consume`, `Cancel`, `Get`, `Ack`,
    /// `Nack`, `Reject`, `Recover`.
    pub(super) fn delivery_command(
        &mut self,
        cmd: Command,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::ChannelFlow { chan, active } => {
                self.channel_mut(chan)?.flow = active;
                self.mark_channel_queues(chan);
                Ok(())
            }
            Command::Qos {
                chan,
                prefetch_count,
                global,
            } => self.qos(chan, prefetch_count, global),
            Command::Consume {
                chan,
                queue,
                consumer_tag,
                no_ack,
                exclusive,
                arguments,
            } => {
                let spec = ConsumeSpec {
                    tag: consumer_tag,
                    no_ack,
                    exclusive,
                    arguments,
                };
                self.consume(chan, &queue, spec, now, out)
            }
            Command::Cancel { chan, consumer_tag } => self.cancel(chan, consumer_tag, now, out),
            Command::Get {
                chan,
                queue,
                no_ack,
            } => self.get(chan, &queue, no_ack, now, out),
            Command::Ack {
                chan,
                delivery_tag,
                multiple,
            } => self.ack(chan, delivery_tag, multiple, out),
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
            other => unreachable!("not a delivery command: {other:?}"),
        }
    }

    /// `basic.qos`: the channel's per-consumer (for consumers started later) or global
    /// prefetch limit.
    fn qos(&mut self, chan: ChanRef, prefetch_count: u16, global: bool) -> Result<(), BrokerError> {
        let ch = self.channel_mut(chan)?;
        if global {
            ch.global_prefetch = prefetch_count;
        } else {
            ch.prefetch = prefetch_count;
        }
        self.mark_channel_queues(chan);
        Ok(())
    }

    /// Lowers the cap on unacknowledged deliveries per channel (consumers with prefetch 0
    /// included) from `limits::UNACKED_PER_CHANNEL_MAX`; values above it, or 0, are clamped.
    pub fn set_unacked_per_channel_max(&mut self, max: u32) {
        self.unacked_per_channel_max = max.clamp(1, wharf_base::limits::UNACKED_PER_CHANNEL_MAX);
    }

    /// Deliveries a channel holds unacknowledged (0 for an unknown channel). The server counts
    /// the messages one `basic.ack` settles as the difference (a `multiple` ack settles many).
    pub fn channel_unacked(&self, chan: ChanRef) -> usize {
        self.channels.get(&chan).map_or(0, |c| c.unacked.len())
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
    pub(super) fn unacked_released(&mut self, u: &Unacked, chan: Option<ChanRef>) {
        let mut freed = false;
        if let Some(q) = self.queues.get_mut(&u.queue) {
            q.unacked -= 1;
            q.unacked_bytes = q.unacked_bytes.saturating_sub(u.taken.msg.body_len());
            if let Some(serial) = u.consumer
                && let Some(c) = q.consumers.iter_mut().find(|c| c.serial == serial)
            {
                c.unacked -= 1;
                freed = c.prefetch > 0;
            }
            // S-CONS-5: a quiescing active consumer of a quorum queue hands over once idle.
            freed |= q.single_active() && q.hand_over_to_higher_priority();
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

    /// Hands `taken` to consumer `ci` of `qid`.
    pub(super) fn deliver(
        &mut self,
        qid: QueueId,
        ci: usize,
        mut taken: Taken,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(message) = self.loaded(&taken.msg) else {
            return;
        };
        taken.msg = MessageRef::Loaded(Arc::clone(&message));
        let default_timeout = self.consumer_timeout_ms;
        let q = self.queues.get_mut(&qid).expect("caller checked the queue");
        q.advance_round_robin(ci);
        let queue_timeout = q.eff.consumer_timeout_ms;
        let c = q
            .consumers
            .get_mut(ci)
            .expect("caller picked a valid consumer");
        let (chan, tag, no_ack, serial) = (c.chan, c.tag.clone(), c.no_ack, c.serial);
        let timeout_ms = c.timeout_ms.or(queue_timeout).or(default_timeout);
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
        let by = Taker {
            consumer,
            no_ack,
            now,
            timeout_ms,
        };
        let delivery_tag = hand_out(ch, q, qid, &taken, &by, &mut out.events);
        out.effects.push(Effect::Deliver(Delivery {
            chan,
            consumer_tag: tag,
            delivery_tag: DeliveryTag(delivery_tag),
            redelivered: taken.redelivered,
            delivery_count: taken.delivery_count,
            count_header: count_header(q, taken.delivery_count),
            queue: q.name.clone(),
            queue_kind: q.eff.kind(),
            message,
        }));
        if !no_ack && let Some(t) = timeout_ms {
            self.arm_ack_timer(chan, now.saturating_add(t));
        }
    }

    pub(super) fn get(
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
        let default_timeout = self.consumer_timeout_ms;
        let q = self.queues.get_mut(&qid).expect("found");
        let ch = self.channels.get_mut(&chan).expect("chan_vhost checked it");
        let by = Taker {
            consumer: None,
            no_ack,
            now,
            timeout_ms: q.eff.consumer_timeout_ms.or(default_timeout),
        };
        let tag = hand_out(ch, q, qid, &taken, &by, &mut out.events);
        if !no_ack && let Some(t) = by.timeout_ms {
            self.arm_ack_timer(chan, now.saturating_add(t));
        }
        let q = &self.queues[&qid];
        out.reply = Reply::GetOk(GetOk {
            delivery_tag: DeliveryTag(tag),
            redelivered: taken.redelivered,
            delivery_count: taken.delivery_count,
            count_header: count_header(q, taken.delivery_count),
            queue_kind: q.eff.kind(),
            message_count: count_u32(q.ready.len()),
            message,
        });
        Ok(())
    }

    /// `basic.ack`: settles the named deliveries (logged for persistent messages of logged
    /// queues).
    fn ack(
        &mut self,
        chan: ChanRef,
        delivery_tag: u64,
        multiple: bool,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let taken = self.take_unacked(chan, delivery_tag, multiple)?;
        for u in taken {
            self.unacked_released(&u, Some(chan));
            let Some(q) = self.queues.get_mut(&u.queue) else {
                continue;
            };
            q.stats.ack += 1; // S-MGMT-8
            if q.eff.kind() == QueueKind::Quorum {
                self.acked_quorum += 1;
            }
            if q.logged() && u.taken.msg.is_persistent() {
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
                // Delivered, as its logged mark says (a held message keeps it, S-QQ-10).
                let taken = Taken {
                    redelivered: true,
                    ..u.taken
                };
                self.dead_letter(u.queue, &taken, DeathReason::Rejected, logged, now, out);
            }
        }
        self.mark_freed_channel(chan);
        Ok(())
    }

    /// A message comes back to its queue: original position, original deadline (S-TTL-7),
    /// delivery count + 1; past its deadline it expires at once (S-TTL-8, done by the dirty
    /// pass); past the delivery limit it is dead-lettered (S-DLX-1 `delivery_limit`); over a
    /// drop-head length limit the head goes (S-LEN-2).
    pub(super) fn requeue(&mut self, qid: QueueId, taken: Taken, now: u64, out: &mut Outcome) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        let count = taken.delivery_count.saturating_add(1);
        let logged = q.logged() && taken.msg.is_persistent();
        if let Some(limit) = q.eff.delivery_limit
            && u64::from(count) > limit
        {
            let taken = Taken {
                redelivered: true,
                ..taken
            };
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
}
