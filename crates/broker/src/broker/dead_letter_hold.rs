//! At-least-once dead-lettering (S-QQ-10): a message that dies in a quorum queue with
//! `x-dead-letter-strategy: at-least-once` (and overflow `reject-publish`) and cannot be
//! dead-lettered everywhere it routes to now waits in its queue (`held.rs`), and is tried
//! again after every change of definitions in its vhost and every
//! `limits::DEAD_LETTER_RETRY_MS`, until it goes. Holding is logged (`DeadLetterHeld`);
//! leaving the hold is the `DeadLettered` event that also enqueues the copy (S-DLX-7), so the
//! message is never lost and never in two places.

use wharf_base::limits::DEAD_LETTER_RETRY_MS;

use super::Broker;
use super::marks::push_held;
use super::state::QueueId;
use crate::queue::Taken;
use crate::types::{DeathFate, HeldDeath, Outcome};

impl Broker {
    /// Holds `taken`, dead in `qid` as `death` (S-QQ-10); logged when the message is.
    pub(super) fn hold(
        &mut self,
        qid: QueueId,
        taken: Taken,
        death: HeldDeath,
        from_logged: bool,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.get_mut(&qid) else {
            return;
        };
        if from_logged {
            push_held(&mut out.events, &q.vhost, &q.name, death, taken.msg.id());
        }
        q.held.insert(taken, death, DEAD_LETTER_RETRY_MS);
        self.holding.insert(qid);
        self.mark_dirty(qid);
    }

    /// Holds a message replay or a checkpoint found held (nothing is logged).
    pub(super) fn restore_held(&mut self, qid: QueueId, taken: Taken, death: HeldDeath) {
        if let Some(q) = self.queues.get_mut(&qid) {
            q.held.insert(taken, death, DEAD_LETTER_RETRY_MS);
            self.holding.insert(qid);
            self.mark_dirty(qid);
        }
    }

    /// Tries again every message held in the queues of `vhost`: its definitions changed, so
    /// a dead-letter route may exist now.
    pub(super) fn retry_held_in(&mut self, vhost: &str, now: u64, out: &mut Outcome) {
        let qids: Vec<QueueId> = self
            .holding
            .iter()
            .copied()
            .filter(|q| self.queues.get(q).is_some_and(|q| &*q.vhost == vhost))
            .collect();
        for qid in qids {
            self.retry_held(qid, now, out);
        }
    }

    /// Tries again every message held in `qid`, in the order they died: each goes where it
    /// routes now, or stays. A queue no longer at-least-once (its policy changed) lets them
    /// go as at-most-once would, as RabbitMQ does. The next retry is due
    /// `DEAD_LETTER_RETRY_MS` from now.
    pub(super) fn retry_held(&mut self, qid: QueueId, now: u64, out: &mut Outcome) {
        let Some(q) = self.queues.get(&qid) else {
            self.holding.remove(&qid);
            return;
        };
        let logged = q.logged();
        let stuck = q.eff.at_least_once() && self.dead_letter_exchange_missing(qid);
        let ids = if stuck { Vec::new() } else { q.held.ids() };
        for id in ids {
            let Some((taken, death)) = self.queues.get_mut(&qid).and_then(|q| q.held.remove(id))
            else {
                continue;
            };
            let from_logged = logged && taken.msg.is_persistent();
            match self.dead_letter_as(qid, &taken, death, from_logged, now, out) {
                // Unreadable: the server stops; it stays for the next start.
                None => {
                    self.restore_held(qid, taken, death);
                    break;
                }
                Some(DeathFate::Held) => self.restore_held(qid, taken, death),
                Some(fate) => self.report_death(qid, id, death.reason, fate, out),
            }
        }
        if let Some(q) = self.queues.get_mut(&qid) {
            q.held.arm_retry(now.saturating_add(DEAD_LETTER_RETRY_MS));
            if q.held.is_empty() {
                self.holding.remove(&qid);
            }
        }
        self.mark_dirty(qid);
    }
}
