//! [`Ledger`]: the reference model of the whole-server simulation. It sees only what the
//! clients did and saw, the clock, and (between steps) the broker's queues as a management
//! query shows them; from that it knows, for every message (named by the key in its body),
//! the places it went through (its queue, `dead`, gone) and which of them is known durable.
//! It judges:
//!
//! - every delivery (never from a place the message left: no duplicate; the redelivered flag
//!   set on a message that was requeued, or unacked when the process ended, S-DUR-6; the
//!   body intact);
//! - the queues after every step (each message exactly where the model puts it: expired on
//!   time, S-TTL-4, S-TTL-11; dead-lettered once, S-DLX-7; never in two queues);
//! - every recovery (each message in a place the log may hold it in, from the last place known
//!   durable on: a confirmed message is never lost, S-DUR-3; an expired one is not back,
//!   S-DUR-5).
//!
//! What is known durable: a publish once confirmed (S-DUR-3); everything logged before a frame
//! a client received (every frame waits for the log, S-DUR-4: a delivery, a `qos-ok` barrier,
//! a management answer).

use std::collections::{BTreeMap, VecDeque};

use crate::Violation;
use crate::model::{DEAD, Place, TTL, TTL_QUEUE_MS, WORK, body_of, key_of};

/// Who holds an unacknowledged delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// The consumer of `work` (with its delivery tag).
    Consumer(u64),
    /// The `basic.get` client of `dead` (with its delivery tag).
    Getter(u64),
}

/// One published message.
#[derive(Debug, Clone)]
pub struct Entry {
    queue: &'static str,
    /// When its publish was sent: it was enqueued no earlier.
    enqueued_ms: u64,
    /// When it was known enqueued at the latest (its confirm, the first management query
    /// showing it, or the end of the process that took it): a publish held by a resource
    /// alarm (S-DISK-2) or behind a slow disk is enqueued later than sent, so its TTL runs
    /// from a time the model knows only within these bounds.
    enqueued_by_ms: Option<u64>,
    own_ttl_ms: Option<u64>,
    /// Places it went through, oldest first; the first is `Gone` (before its publish).
    places: Vec<Place>,
    /// Index in `places` of the newest place known durable.
    durable: usize,
    holder: Option<Holder>,
    /// Requeued by a reject, or unacked when the last process ended: its next delivery is
    /// flagged redelivered.
    requeued: bool,
    confirmed: bool,
}

impl Entry {
    fn latest(&self) -> Place {
        self.places.last().copied().unwrap_or(Place::Gone)
    }
    fn enqueued_by(&mut self, ms: u64) {
        self.enqueued_by_ms = Some(self.enqueued_by_ms.map_or(ms, |b| b.min(ms)));
    }
    fn go(&mut self, place: Place) {
        if self.latest() != place {
            self.places.push(place);
            // A dead-lettered copy is a new delivery in its new queue.
            self.requeued = false;
        }
    }
}

/// Ready messages of the run's queues as the broker holds them: keys in queue order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Queues {
    /// `work`, `ttl`, `dead`.
    pub ready: BTreeMap<&'static str, Vec<u64>>,
    /// Whether the leased queue exists.
    pub lease_exists: bool,
    /// The `message-ttl` of the policy on `ttl`, if set.
    pub policy_ttl_ms: Option<u64>,
}

/// Deliveries that may be on their way to a client, by queue (see [`Ledger::check_queues`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// To the consumer of `work` (at most its free prefetch).
    pub work: usize,
    /// To the `basic.get` client of `dead` (at most its unanswered gets).
    pub dead: usize,
}

/// The reference model.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: BTreeMap<u64, Entry>,
    /// The policy's `message-ttl`: durable, and sent since (oldest first).
    policy_sure: Option<u64>,
    policy_pending: Vec<Option<u64>>,
    /// When the leased queue's lease ends, when it is known to exist.
    pub lease_end_ms: Option<u64>,
    /// `qos` barriers sent and not answered yet, oldest first: for each, where every message
    /// known enqueued was when it was sent (key, index in `places`).
    barriers: VecDeque<Vec<(u64, usize)>>,
}

fn violation<T>(what: impl Into<String>) -> Result<T, Violation> {
    Err(Violation(what.into()))
}

impl Ledger {
    /// Messages known, for the trace.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no message was published.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A publish of `key` to `queue` was written at `now_ms`.
    pub fn published(&mut self, key: u64, queue: &'static str, now_ms: u64, own: Option<u64>) {
        self.entries.insert(
            key,
            Entry {
                queue,
                enqueued_ms: now_ms,
                enqueued_by_ms: None,
                own_ttl_ms: own,
                places: vec![Place::Gone, Place::Origin],
                durable: 0,
                holder: None,
                requeued: false,
                confirmed: false,
            },
        );
    }

    /// Its publisher got the confirm of `key` at `now_ms`: the publish is durable, and was
    /// enqueued by then.
    pub fn confirmed(&mut self, key: u64, now_ms: u64) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.confirmed = true;
            e.durable = e.durable.max(1);
            e.enqueued_by(now_ms);
        }
    }

    /// The process ended at `now_ms`: whatever it enqueued, it enqueued by then.
    pub fn process_ended(&mut self, now_ms: u64) {
        for e in self.entries.values_mut() {
            e.enqueued_by(now_ms);
        }
    }

    /// A policy change was sent.
    pub fn policy_sent(&mut self, ttl_ms: Option<u64>) {
        self.policy_pending.push(ttl_ms);
    }

    /// The policy change was answered (answers wait for the log): durable.
    pub fn policy_durable(&mut self, ttl_ms: Option<u64>) {
        if let Some(i) = self.policy_pending.iter().position(|p| *p == ttl_ms) {
            self.policy_pending.drain(..=i);
        }
        self.policy_sure = ttl_ms;
    }

    /// The policy's `message-ttl` as the server holds it (the last one sent).
    #[must_use]
    pub fn policy(&self) -> Option<u64> {
        self.policy_pending
            .last()
            .copied()
            .unwrap_or(self.policy_sure)
    }

    /// When `key` dies in its own queue (S-TTL-3/4/11: the lowest TTL that applies, from its
    /// enqueue time; a policy applies to queued messages too), as bounds: not before the
    /// first, by the second (`None`: not known yet when it was enqueued).
    fn deadline(&self, e: &Entry) -> Option<(u64, Option<u64>)> {
        let queue_ttl =
            (e.queue == TTL).then(|| self.policy().map_or(TTL_QUEUE_MS, |p| p.min(TTL_QUEUE_MS)));
        let ttl = [queue_ttl, e.own_ttl_ms].into_iter().flatten().min()?;
        Some((e.enqueued_ms + ttl, e.enqueued_by_ms.map(|b| b + ttl)))
    }

    /// Whether `e` may be dead by `now_ms` (its earliest deadline passed).
    fn may_be_due(&self, e: &Entry, now_ms: u64) -> bool {
        self.deadline(e).is_some_and(|(lo, _)| lo <= now_ms)
    }

    /// Whether `e` must be dead by `now_ms` (its latest deadline passed).
    fn must_be_due(&self, e: &Entry, now_ms: u64) -> bool {
        self.deadline(e)
            .is_some_and(|(_, hi)| hi.is_some_and(|hi| hi <= now_ms))
    }

    /// A `qos` barrier was sent: what the clients asked before it, it covers (S-DUR-4: its
    /// `qos-ok`, like every frame, waits for the log through what was logged before it);
    /// except a publish not known enqueued: a resource alarm may hold it unread (S-DISK-2).
    pub fn barrier_sent(&mut self) {
        let at = self
            .entries
            .iter()
            .filter(|(_, e)| e.enqueued_by_ms.is_some())
            .map(|(&key, e)| (key, e.places.len() - 1))
            .collect();
        self.barriers.push_back(at);
    }

    /// The oldest barrier's `qos-ok` arrived: where each message was when it was sent is
    /// durable. Not what was asked after it (issue 19, seed 99755: a reject sent while a
    /// barrier waited on a paused log was logged after it, and a power loss took it).
    pub fn barrier_answered(&mut self) {
        let Some(at) = self.barriers.pop_front() else {
            return;
        };
        for (key, index) in at {
            if let Some(e) = self.entries.get_mut(&key) {
                e.durable = e.durable.max(index);
            }
        }
    }

    /// The process ended: barriers not answered never will be.
    pub fn barriers_lost(&mut self) {
        self.barriers.clear();
    }

    /// A message arrived at a client: from `work` for the consumer, from `dead` for the getter.
    ///
    /// # Errors
    /// A message delivered from a place it left (a duplicate), twice at once, unflagged after
    /// a requeue, or with a changed body.
    pub fn delivered(
        &mut self,
        holder: Holder,
        redelivered: bool,
        body: &[u8],
        now_ms: u64,
    ) -> Result<u64, Violation> {
        let Some(key) = key_of(body) else {
            return violation("a delivered body lost its key");
        };
        let Some(e) = self.entries.get(&key) else {
            return violation(format!("key {key} delivered, never published"));
        };
        // From `dead`, a message the model still has ready in its queue past its earliest
        // deadline: it expired there meanwhile and was dead-lettered (the model keeps one
        // that may be on its way to the consumer where it was, see `expire`).
        let expired = matches!(holder, Holder::Getter(_))
            && e.latest() == Place::Origin
            && e.holder.is_none()
            && self.may_be_due(e, now_ms);
        let Some(e) = self.entries.get_mut(&key) else {
            return violation(format!("key {key} delivered, never published"));
        };
        if expired {
            e.go(Place::Dead);
        }
        if body != body_of(key, body.len()) {
            return violation(format!("key {key}: the delivered body changed"));
        }
        let (from, place) = match holder {
            Holder::Consumer(_) => (e.queue, Place::Origin),
            Holder::Getter(_) => (DEAD, Place::Dead),
        };
        if e.latest() != place || e.holder.is_some() {
            return violation(format!(
                "key {key} delivered from {from} while at {:?} held by {:?} (duplicate)",
                e.latest(),
                e.holder
            ));
        }
        if e.requeued && !redelivered {
            return violation(format!("key {key}: requeued, delivered again unflagged"));
        }
        // The delivery waited for the log: where it came from is durable.
        e.durable = e.places.len() - 1;
        e.holder = Some(holder);
        Ok(key)
    }

    /// The holder of `key` acked it, or rejected it (with or without requeue).
    pub fn settled(&mut self, key: u64, ack: bool, requeue: bool) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        let in_dead = matches!(e.holder, Some(Holder::Getter(_)));
        e.holder = None;
        if requeue {
            e.requeued = true;
        } else if ack || in_dead {
            // `dead` has no dead-letter exchange: a reject there drops the message.
            e.go(Place::Gone);
        } else {
            // `work` dead-letters to `dead`.
            e.go(Place::Dead);
        }
    }

    /// The timers fired up to `now_ms` (the run let time pass), and `q` shows the queues now:
    /// every message shown was enqueued by now; every ready message past its latest deadline
    /// went to `dead` (both queues dead-letter there), and one past its earliest deadline
    /// only may be there (seen there, it went).
    ///
    /// But a message of `work` ready nowhere may be a delivery on its way to the consumer
    /// (`in_flight.work` of them at most): the broker fills a freed prefetch slot at once,
    /// and the delivery's frame waits for the log (S-DUR-4: the ack that freed the slot is
    /// durable before the next delivery is seen), which a full disk pauses. Handed out before
    /// its deadline, it is held, and a held message does not expire (S-TTL-8): it stays where
    /// the model had it until it arrives, or until it is seen in `dead`. One still ready in
    /// `work` past its deadline is late, whatever is in flight.
    pub fn expire(&mut self, now_ms: u64, q: &Queues, in_flight: InFlight) {
        for key in q.ready.values().flatten() {
            if let Some(e) = self.entries.get_mut(key) {
                e.enqueued_by(now_ms);
            }
        }
        let in_dead = |key: &u64| q.ready.get(DEAD).is_some_and(|keys| keys.contains(key));
        let ready = |key: &u64| q.ready.values().any(|keys| keys.contains(key));
        let mut delivering = in_flight.work;
        let due: Vec<u64> = self
            .entries
            .iter()
            .filter(|(key, e)| {
                e.latest() == Place::Origin
                    && e.holder.is_none()
                    && (self.must_be_due(e, now_ms) || (self.may_be_due(e, now_ms) && in_dead(key)))
            })
            .filter(|(key, e)| {
                let on_its_way = e.queue == WORK && !ready(key) && delivering > 0;
                delivering -= usize::from(on_its_way);
                !on_its_way
            })
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some(e) = self.entries.get_mut(&key) {
                e.go(Place::Dead);
            }
        }
    }

    /// Checks the broker's ready messages at `now_ms` against the model: each message ready
    /// exactly where the model puts it, nothing else; but up to `in_flight` messages may be
    /// missing from `work` and `dead` (a delivery or `get-ok` on its way: while the log is
    /// paused on a full disk, the frame waits for it).
    ///
    /// # Errors
    /// The first message out of place.
    pub fn check_queues(
        &self,
        q: &Queues,
        now_ms: u64,
        in_flight: InFlight,
    ) -> Result<(), Violation> {
        let mut in_flight = in_flight;
        let mut seen: BTreeMap<u64, &'static str> = BTreeMap::new();
        for (&queue, keys) in &q.ready {
            for &key in keys {
                if let Some(other) = seen.insert(key, queue) {
                    return violation(format!(
                        "key {key} ready in {other} and {queue} at {now_ms} (duplicated)"
                    ));
                }
            }
        }
        for (key, e) in &self.entries {
            let expected = match (e.latest(), e.holder) {
                (Place::Origin, None) => Some(e.queue),
                (Place::Dead, None) => Some(DEAD),
                _ => None,
            };
            let found = seen.remove(key);
            // A publish not yet known enqueued may still be on its way: held with its
            // connection by a resource alarm (S-DISK-2), unread.
            let on_its_way = found.is_none() && e.enqueued_by_ms.is_none();
            let delivering = found.is_none()
                && match expected {
                    Some(WORK) => in_flight.work.checked_sub(1).map(|n| in_flight.work = n),
                    Some(DEAD) => in_flight.dead.checked_sub(1).map(|n| in_flight.dead = n),
                    _ => None,
                }
                .is_some();
            if found != expected && !on_its_way && !delivering {
                let deadline = self.deadline(e);
                return violation(format!(
                    "key {key} of {} (enqueued {}, deadline {deadline:?}) ready in {found:?} at \
                     {now_ms}, the model says {expected:?} (at {:?}, held by {:?}; S-TTL-4, \
                     S-DLX-7)",
                    e.queue,
                    e.enqueued_ms,
                    e.latest(),
                    e.holder
                ));
            }
        }
        if let Some((key, queue)) = seen.into_iter().next() {
            return violation(format!("unknown key {key} ready in {queue}"));
        }
        if q.lease_exists
            && let Some(end) = self.lease_end_ms
            && end <= now_ms
        {
            return violation(format!(
                "lease alive at {now_ms}, its lease ended at {end} (S-QEXP-2)"
            ));
        }
        Ok(())
    }

    /// After a restart at `now_ms` (recovery done, no client connected): every message in a
    /// place the log may hold it in, from the last place known durable on (never lost, never
    /// duplicated, dead-lettered once), and none past its deadline in its queue (S-DUR-5).
    /// The places found become the durable ones.
    ///
    /// # Errors
    /// The first message out of place.
    pub fn check_recovered(&mut self, q: &Queues, now_ms: u64) -> Result<(), Violation> {
        let allowed: Vec<Option<u64>> = std::iter::once(self.policy_sure)
            .chain(self.policy_pending.iter().copied())
            .collect();
        if !allowed.contains(&q.policy_ttl_ms) {
            return violation(format!(
                "policy ttl {:?} after recovery, allowed {allowed:?}",
                q.policy_ttl_ms
            ));
        }
        self.policy_sure = q.policy_ttl_ms;
        self.policy_pending.clear();
        let mut found: BTreeMap<u64, Place> = BTreeMap::new();
        for (&queue, keys) in &q.ready {
            for &key in keys {
                let place = if queue == DEAD {
                    Place::Dead
                } else {
                    Place::Origin
                };
                if place == Place::Origin
                    && let Some(e) = self.entries.get(&key)
                    && e.queue != queue
                {
                    return violation(format!("key {key} of {} recovered in {queue}", e.queue));
                }
                if let Some(other) = found.insert(key, place) {
                    return violation(format!(
                        "key {key} held in {other:?} and {place:?} after recovery (duplicated)"
                    ));
                }
            }
        }
        let keys: Vec<u64> = self.entries.keys().copied().collect();
        for key in keys {
            let Some(e) = self.entries.get(&key) else {
                continue;
            };
            let place = found.remove(&key).unwrap_or(Place::Gone);
            let deadline = self.deadline(e);
            // Unacked deliveries came back; what died while it was down went to `dead`.
            let mut may: Vec<Place> = e.places.get(e.durable..).unwrap_or_default().to_vec();
            if may.contains(&Place::Origin) && self.may_be_due(e, now_ms) {
                if self.must_be_due(e, now_ms) {
                    may.retain(|p| *p != Place::Origin);
                }
                if !may.contains(&Place::Dead) {
                    may.push(Place::Dead);
                }
            }
            if !may.contains(&place) {
                let what = if place == Place::Gone && e.confirmed {
                    "lost a confirmed message"
                } else {
                    "out of place"
                };
                return violation(format!(
                    "key {key} of {} (deadline {deadline:?}): {what}: found {place:?} at \
                     {now_ms}, the log allows {may:?} of {:?} (S-DUR-3, S-DUR-5, S-DLX-7)",
                    e.queue, e.places
                ));
            }
            if let Some(e) = self.entries.get_mut(&key) {
                e.places = vec![place];
                e.durable = 0;
                // S-DUR-6: delivered and unacked when the process ended, it comes back
                // flagged (its delivery reached the client, so it was durable).
                e.requeued = matches!(
                    (e.holder, place),
                    (Some(Holder::Consumer(_)), Place::Origin)
                        | (Some(Holder::Getter(_)), Place::Dead)
                );
                e.holder = None;
            }
        }
        if let Some((key, place)) = found.into_iter().next() {
            return violation(format!("unknown key {key} recovered in {place:?}"));
        }
        Ok(())
    }

    /// Messages whose publish was confirmed and that are not gone, for the end of a run.
    #[must_use]
    pub fn confirmed_held(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.confirmed && e.latest() != Place::Gone)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues showing `work`, `ttl` and `dead` ready as given.
    fn queues(work: &[u64], dead: &[u64]) -> Queues {
        let mut q = Queues::default();
        q.ready.insert(WORK, work.to_vec());
        q.ready.insert(TTL, Vec::new());
        q.ready.insert(DEAD, dead.to_vec());
        q
    }

    /// Key 1 published to `work` at 0 with a TTL of 100 ms, confirmed at once.
    fn one_with_ttl() -> Ledger {
        let mut ledger = Ledger::default();
        ledger.published(1, WORK, 0, Some(100));
        ledger.confirmed(1, 0);
        ledger
    }

    const PAUSED: InFlight = InFlight { work: 1, dead: 0 };

    /// S-TTL-8, S-DUR-4 (seeds 1487, 4968, 9669 of a 10,000-seed run): while the log is
    /// paused, a message of `work` ready nowhere past its deadline may be the delivery that
    /// filled the consumer's freed slot before its deadline, its frame waiting for the log:
    /// held, it does not expire, so the model does not demand it in `dead`; it arrives later.
    #[test]
    fn s_ttl_8_a_delivery_waiting_for_the_log_is_held_and_does_not_expire() {
        let mut ledger = one_with_ttl();
        let q = queues(&[], &[]);
        ledger.expire(500, &q, PAUSED);
        ledger.check_queues(&q, 500, PAUSED).unwrap();
        let key = ledger
            .delivered(Holder::Consumer(1), false, &body_of(1, 16), 600)
            .unwrap();
        assert_eq!(key, 1);
        // Or it expired after all and the getter takes it from `dead`.
        let mut ledger = one_with_ttl();
        ledger.expire(500, &q, PAUSED);
        ledger
            .delivered(Holder::Getter(1), false, &body_of(1, 16), 600)
            .unwrap();
    }

    /// S-TTL-4: the allowance covers a delivery on its way, never lateness. Still ready in
    /// `work` past its deadline is late, a delivery in flight or not; ready nowhere with no
    /// delivery possibly in flight is lost.
    #[test]
    fn s_ttl_4_a_message_still_ready_past_its_deadline_is_late_whatever_is_in_flight() {
        let mut ledger = one_with_ttl();
        let q = queues(&[1], &[]);
        ledger.expire(500, &q, PAUSED);
        let late = ledger.check_queues(&q, 500, PAUSED).unwrap_err();
        assert!(late.0.contains("key 1 of work"), "{late}");
        let mut ledger = one_with_ttl();
        let q = queues(&[], &[]);
        ledger.expire(500, &q, InFlight::default());
        assert!(ledger.check_queues(&q, 500, InFlight::default()).is_err());
        // Before its deadline a getter cannot take it from `dead`.
        let mut ledger = one_with_ttl();
        assert!(
            ledger
                .delivered(Holder::Getter(1), false, &body_of(1, 16), 50)
                .is_err()
        );
    }

    /// S-DUR-4 (seed 99755, issue 19): a barrier's `qos-ok` makes durable what was asked
    /// before it was sent, not a reject sent while it waited on a paused log: after a power
    /// loss that reject may be gone (the message back in `work`), and then it may not.
    #[test]
    fn s_dur_4_a_barrier_covers_only_what_was_asked_before_it_was_sent() {
        let delivered_then_barrier = || {
            let mut ledger = Ledger::default();
            ledger.published(1, WORK, 0, None);
            ledger.confirmed(1, 0);
            ledger
                .delivered(Holder::Consumer(1), false, &body_of(1, 16), 1)
                .unwrap();
            ledger.barrier_sent();
            ledger
        };
        // Rejected after the barrier was sent: `work` or `dead` after recovery.
        for found in [queues(&[1], &[]), queues(&[], &[1])] {
            let mut ledger = delivered_then_barrier();
            ledger.settled(1, false, false);
            ledger.barrier_answered();
            ledger.check_recovered(&found, 10).unwrap();
        }
        // Rejected before a barrier was sent, which was answered: only `dead`.
        let mut ledger = delivered_then_barrier();
        ledger.barrier_answered();
        ledger.settled(1, false, false);
        ledger.barrier_sent();
        ledger.barrier_answered();
        let back = ledger.check_recovered(&queues(&[1], &[]), 10).unwrap_err();
        assert!(back.0.contains("out of place"), "{back}");
        let mut ledger = delivered_then_barrier();
        ledger.settled(1, false, false);
        ledger.barrier_sent();
        ledger.barrier_answered();
        ledger.check_recovered(&queues(&[], &[1]), 10).unwrap();
    }
}
