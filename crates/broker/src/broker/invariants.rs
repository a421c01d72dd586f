//! The invariant walk ([`Broker::check_invariants`]): tests call it after every step, and
//! `handle` / `expire_due` call it in debug builds (STYLE 3.1).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use super::Broker;
use super::state::{Channel, Dest, Exchange, ExchangeId, Queue, QueueId, Timer};
use crate::types::ChanRef;

impl Broker {
    /// Walks the whole structure and panics on a broken invariant (STYLE 3.1).
    ///
    /// # Panics
    /// When an invariant is broken: that is a bug in the broker.
    pub fn check_invariants(&self) {
        self.check_access_invariants();
        self.reply_to.check();
        assert_eq!(
            self.loaded_bytes(),
            self.queues
                .values()
                .map(|q| q.ready.loaded_bytes())
                .sum::<u64>(),
            "loaded bytes total"
        );
        let mut armed = 0usize;
        for (qid, q) in &self.queues {
            armed += self.check_queue(*qid, q);
        }
        for (id, s) in &self.scheduled {
            assert!(
                self.timers
                    .contains(&(s.msg.enqueued_at_ms, Timer::Scheduled(*id)))
            );
            armed += 1;
        }
        for (chan, ch) in &self.channels {
            self.check_channel(*chan, ch);
            if let Some(t) = ch.ack_timer {
                assert!(self.timers.contains(&(t, Timer::AckTimeout(*chan))));
                armed += 1;
            }
        }
        assert_eq!(armed, self.timers.len(), "timers without an owner");
        for (xid, x) in &self.exchanges {
            self.check_exchange(*xid, x);
        }
        for m in self.queues.values().flat_map(|q| q.ready.iter()) {
            assert!(m.0.id().0 < self.next_message, "message id from the future");
        }
    }

    /// One queue: its maps, deadline index, timers, unacked count and consumers. Returns how
    /// many timers it has armed.
    fn check_queue(&self, qid: QueueId, q: &Queue) -> usize {
        let mut armed = 0;
        assert_eq!(qid, q.id, "queue keyed under another id");
        q.ready.check_invariants();
        q.held.check_invariants();
        assert!(
            q.held.is_empty() || self.holding.contains(&qid),
            "queue {} holds messages unlisted",
            q.name
        );
        assert_eq!(
            q.ready.ttl_ms(),
            q.eff.message_ttl_ms,
            "deadline index built with a stale TTL"
        );
        assert!(!q.dirty, "queue {} left dirty", q.name);
        let v = self
            .vhosts
            .get(&*q.vhost)
            .expect("queue in a missing vhost");
        assert_eq!(
            v.queues.get(&*q.name),
            Some(&qid),
            "vhost map misses queue {}",
            q.name
        );
        assert_eq!(
            q.armed_msg,
            q.messages_deadline(),
            "message timer of {}",
            q.name
        );
        assert_eq!(
            q.armed_lease,
            q.lease_deadline(),
            "lease timer of {}",
            q.name
        );
        if let Some(t) = q.armed_msg {
            assert!(self.timers.contains(&(t, Timer::Messages(qid))));
            armed += 1;
        }
        if let Some(t) = q.armed_lease {
            assert!(self.timers.contains(&(t, Timer::Lease(qid))));
            armed += 1;
        }
        let held: Vec<u64> = self
            .channels
            .values()
            .flat_map(|c| c.unacked.values())
            .filter(|u| u.queue == qid)
            .map(|u| u.taken.msg.body_len())
            .collect();
        assert_eq!(
            u64::try_from(held.len()).unwrap_or(u64::MAX),
            q.unacked,
            "unacked count of {}",
            q.name
        );
        assert_eq!(
            held.iter().sum::<u64>(),
            q.unacked_bytes,
            "unacked bytes of {}",
            q.name
        );
        self.check_consumers(qid, q);
        // S-TTL-8: held messages are not in the deadline index (Ready checks the count).
        if let Some(owner) = q.owner {
            assert!(
                self.conns
                    .get(&owner)
                    .is_none_or(|c| c.exclusive.contains(&qid))
            );
        }
        armed
    }

    /// The consumers of queue `qid`: each on an open channel that knows it, within its
    /// prefetch.
    fn check_consumers(&self, qid: QueueId, q: &Queue) {
        assert!(
            q.consumers
                .windows(2)
                .all(|w| w[0].priority >= w[1].priority),
            "consumers of {} out of priority order",
            q.name
        );
        // S-CONS-4: with single active consumer, exactly one consumer is active while any
        // exist; without it, none is marked.
        match q.active {
            Some(serial) => assert!(
                q.eff.single_active_consumer == Some(true)
                    && q.consumers.iter().any(|c| c.serial == serial),
                "active consumer of {} is gone",
                q.name
            ),
            None => assert!(
                q.eff.single_active_consumer != Some(true) || q.consumers.is_empty(),
                "single-active queue {} without an active consumer",
                q.name
            ),
        }
        for c in &q.consumers {
            let ch = self
                .channels
                .get(&c.chan)
                .expect("consumer on a closed channel");
            assert_eq!(
                ch.consumers.get(&c.tag),
                Some(&qid),
                "channel does not know consumer"
            );
            let mine = ch
                .unacked
                .values()
                .filter(|u| u.consumer == Some(c.serial))
                .count();
            assert_eq!(
                mine,
                usize::try_from(c.unacked).unwrap_or(usize::MAX),
                "consumer unacked"
            );
            if !c.no_ack && c.prefetch > 0 {
                assert!(c.unacked <= u32::from(c.prefetch), "prefetch exceeded");
            }
        }
    }

    /// One channel: its connection, unacked counts, tags and consumers.
    fn check_channel(&self, chan: ChanRef, ch: &Channel) {
        let c = self
            .conns
            .get(&chan.conn)
            .expect("channel without a connection");
        assert!(c.channels.contains(&chan.channel));
        let by_consumers = ch.unacked.values().filter(|u| u.consumer.is_some()).count();
        assert_eq!(
            by_consumers,
            usize::try_from(ch.consumer_unacked).unwrap_or(usize::MAX)
        );
        if let Some((&last, _)) = ch.unacked.last_key_value() {
            assert!(last < ch.next_tag, "tag {last} from the future");
        }
        if ch.global_prefetch > 0 {
            assert!(
                ch.consumer_unacked <= u32::from(ch.global_prefetch),
                "global prefetch exceeded"
            );
        }
        for (tag, qid) in &ch.consumers {
            let q = self
                .queues
                .get(qid)
                .expect("channel consumer of a deleted queue");
            assert!(q.consumers.iter().any(|c| c.chan == chan && c.tag == *tag));
        }
    }

    /// One exchange: its vhost map and the ends of its bindings.
    fn check_exchange(&self, xid: ExchangeId, x: &Exchange) {
        let v = self
            .vhosts
            .get(&*x.vhost)
            .expect("exchange in a missing vhost");
        assert_eq!(v.exchanges.get(&*x.name), Some(&xid));
        for b in &x.bindings {
            match b.dest {
                Dest::Queue(q) => {
                    assert!(self.queues.contains_key(&q), "binding to a deleted queue");
                }
                Dest::Exchange(e) => assert!(
                    self.exchanges.contains_key(&e),
                    "binding to a deleted exchange"
                ),
            }
        }
    }
}
