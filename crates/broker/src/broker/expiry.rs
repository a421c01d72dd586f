//! Time: message expiry (S-TTL-5, S-TTL-9), queue leases (S-QEXP), the timers behind
//! [`Broker::next_deadline`] / [`Broker::expire_due`], and the end-of-step pass over the
//! queues a step touched (deliver what can be, expire what is due, re-arm their timers).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use super::Broker;
use super::state::{QueueId, Timer};
use crate::queue::deadline_of;
use crate::types::{DeathReason, Outcome, QueueDeletedReason};

impl Broker {
    /// S-TTL-5: the head is never handed out past its deadline.
    pub(super) fn expire_head(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
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
    fn expire_queue(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
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

    /// Delivers what can be delivered and expires what is due in every queue touched by this
    /// step, then re-arms their timers.
    pub(super) fn process_dirty(&mut self, now: u64, out: &mut Outcome) {
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
    pub(super) fn rearm_dirty(&mut self) {
        while let Some(qid) = self.dirty.pop() {
            if let Some(q) = self.queues.get_mut(&qid) {
                q.dirty = false;
                self.rearm(qid);
            }
        }
    }

    pub(super) fn drain(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
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
            self.deliver(qid, ci, taken, now, out);
        }
    }

    fn rearm(&mut self, qid: QueueId) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        let want = q.messages_deadline();
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
                    if self
                        .queues
                        .get(&qid)
                        .and_then(|q| q.held.retry_at())
                        .is_some_and(|t| t <= now_ms)
                    {
                        self.retry_held(qid, now_ms, &mut out);
                    }
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
                Timer::AckTimeout(chan) => self.fire_ack_timeout(chan, now_ms, &mut out),
            }
        }
        self.process_dirty(now_ms, &mut out);
        #[cfg(debug_assertions)]
        self.check_invariants();
        out
    }
}
