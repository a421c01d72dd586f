//! The end of recovery ([`Broker::recovered`]): transient state goes, unacked messages come
//! back ready and redelivered (S-DUR-6), leases restart (S-QEXP-4), and what died while the
//! broker was down expires before any consumer can see it (S-DUR-5).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::collections::BTreeSet;

use super::Broker;
use super::state::Timer;
use crate::types::{MessageId, Outcome, QueueDeletedReason};

impl Broker {
    /// Ends recovery at `now_ms`: transient state is dropped (connections, channels,
    /// consumers, transient queues, exchanges and messages), unacked messages come back ready
    /// and redelivered (S-DUR-6), every lease restarts from now (S-QEXP-4), and what died
    /// while the broker was down expires now, before any consumer can see it (S-DUR-5).
    ///
    /// # Panics
    /// Only on a broken internal invariant (a bug).
    pub fn recovered(&mut self, now_ms: u64) -> Outcome {
        let mut out = Outcome::default();
        let chans: Vec<_> = self.channels.keys().copied().collect();
        for chan in chans {
            if let Some(ch) = self.channels.remove(&chan) {
                for (_, u) in ch.unacked {
                    self.unacked_released(&u, None);
                    if let Some(q) = self.queues.get_mut(&u.queue) {
                        q.ready.insert(u.taken.msg, u.taken.delivery_count, true);
                    }
                }
            }
        }
        self.conns.clear();
        let transient: Vec<_> = self
            .queues
            .values()
            .filter(|q| !q.logged())
            .map(|q| q.id)
            .collect();
        for q in transient {
            self.delete_queue(q, QueueDeletedReason::Deleted, false, now_ms, &mut out);
        }
        let transient_x: Vec<_> = self
            .exchanges
            .values()
            .filter(|x| !x.durable)
            .map(|x| x.id)
            .collect();
        for x in transient_x {
            self.delete_exchange(x, false, &mut out);
        }
        self.scheduled.retain(|_, s| s.durable);
        let live: BTreeSet<MessageId> = self.scheduled.keys().copied().collect();
        self.timers
            .retain(|(_, t)| !matches!(t, Timer::Scheduled(id) if !live.contains(id)));
        let ids: Vec<_> = self.queues.keys().copied().collect();
        for qid in ids {
            let q = self.queues.get_mut(&qid).expect("listed above");
            q.consumers.clear();
            q.rr = 0;
            q.active = None;
            q.unacked = 0;
            q.unacked_bytes = 0;
            q.last_used_ms = now_ms;
            let transient_msgs: Vec<MessageId> = q
                .ready
                .iter()
                .filter(|(m, _)| !m.is_persistent())
                .map(|(m, _)| m.id())
                .collect();
            for id in transient_msgs {
                q.ready.remove(id);
            }
            q.ready.shrink_to_fit();
            self.mark_dirty(qid);
        }
        // S-QQ-10: what waits to be dead-lettered is tried at once, as RabbitMQ's worker does
        // when its queue starts.
        let holding: Vec<_> = self.holding.iter().copied().collect();
        for qid in holding {
            self.retry_held(qid, now_ms, &mut out);
        }
        self.rearm_dirty();
        let expired = self.expire_due(now_ms);
        out.events.extend(expired.events);
        out.effects.extend(expired.effects);
        out
    }
}
