//! [`Model`]: the reference model a run is checked against. It knows, for every message a
//! client published (named by a key carried in its body), where the log may hold it and where
//! it must hold it, from what clients did and what the clock says, and it judges every step
//! the node takes:
//!
//! - never lost (S-DUR-3): a message whose publish batch was durable is, after any crash,
//!   where the durable log last put it (its queue, or the dead-letter queue);
//! - never duplicated: a key is held at most once across all queues, and a message whose
//!   removal was durable is never delivered again;
//! - expired on time (S-TTL-4, S-TTL-7, S-TTL-11, S-DUR-5): never before its deadline
//!   (enqueue time plus the lowest TTL that applies), and no ready message is left past it
//!   once the timer has fired; a queue lease ends at its period (S-QEXP-2, S-QEXP-4);
//! - dead-lettered exactly once (S-DLX-7): a message moves to the dead-letter queue only when
//!   rejected without requeue or expired, and is never in both queues after a crash.
//!
//! It reads the node's logged events only to learn which step the node took, each of which it
//! checks against its own account before believing it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use wharf_broker::{Broker, Event, MessageId, SettleKind};

use crate::Violation;

/// The queues of the run's topology.
pub const WORK: &str = "work";
/// A queue with a message TTL (2 s) and a dead-letter exchange; nobody consumes it.
pub const TTL: &str = "ttl";
/// Where `work` and `ttl` dead-letter to (through the fanout exchange `dead`).
pub const DEAD: &str = "dead";
/// A queue with a lease (`x-expires`), only ever published to.
pub const LEASE: &str = "lease";
/// `ttl`'s `x-message-ttl`.
pub const TTL_QUEUE_MS: u64 = 2000;
/// `lease`'s `x-expires`.
pub const LEASE_MS: u64 = 3000;

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// In the queue it was published to.
    Origin,
    /// In `dead`.
    Dead,
    /// In no queue (never logged, acked, dropped, or its queue is gone).
    Gone,
}

/// One published message.
#[derive(Debug, Clone)]
pub struct Msg {
    /// The queue it was published to.
    pub queue: &'static str,
    /// Its enqueue time (ms).
    pub enqueued_ms: u64,
    /// Its own TTL (`expiration`).
    pub own_ttl_ms: Option<u64>,
    /// Where the durable log puts it.
    pub sure: Place,
    /// Places logged but not yet known durable, oldest first.
    pub pending: Vec<Place>,
    /// A client asked for its removal (ack, or reject without requeue), not yet seen done.
    pub removal_asked: Option<Removal>,
    /// The publisher saw its confirm.
    pub confirmed: bool,
    /// Its publish is known durable.
    pub publish_durable: bool,
}

/// What a client asked for a message it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// `basic.ack`.
    Ack,
    /// `basic.reject` without requeue.
    Reject,
}

impl Msg {
    fn latest(&self) -> Place {
        self.pending.last().copied().unwrap_or(self.sure)
    }
}

/// The reference model.
#[derive(Debug, Default)]
pub struct Model {
    /// Every message by key.
    pub msgs: BTreeMap<u64, Msg>,
    /// Message ids (as the node numbers them) to keys, from the logged events.
    ids: HashMap<MessageId, u64>,
    /// The `message-ttl` of the policy on `ttl`: durable, and pending changes.
    policy_ttl_sure: Option<u64>,
    policy_ttl_pending: Vec<Option<u64>>,
    /// When `lease`'s lease ends (it exists), or `None` (it does not, as far as is durable).
    pub lease_end_ms: Option<u64>,
}

fn violation(what: impl Into<String>) -> Result<(), Violation> {
    Err(Violation(what.into()))
}

/// The `message-ttl` a policy definition sets.
#[must_use]
pub fn policy_ttl(definition: &str) -> Option<u64> {
    let rest = definition.split("\"message-ttl\":").nth(1)?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The key a body carries (its first eight bytes).
#[must_use]
pub fn key_of(body: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// A published body's length: 8 to 307 bytes, and one time in ten 3,000 bytes (several frames
/// at the simulation's frame size).
#[must_use]
pub fn body_len(rng: &mut crate::rng::Rng) -> usize {
    if rng.chance(100) {
        3000
    } else {
        8 + rng.index(300)
    }
}

/// The body of message `key`, `len` bytes (at least 8): the key, then bytes derived from it.
#[must_use]
pub fn body_of(key: u64, len: usize) -> Vec<u8> {
    let mut body = key.to_le_bytes().to_vec();
    let mut x = key | 1;
    while body.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        body.push(x.to_le_bytes()[0]);
    }
    body
}

impl Model {
    /// A client published `key` (its batch is logged, not yet durable).
    pub fn published(&mut self, key: u64, queue: &'static str, now_ms: u64, own: Option<u64>) {
        self.msgs.insert(
            key,
            Msg {
                queue,
                enqueued_ms: now_ms,
                own_ttl_ms: own,
                sure: Place::Gone,
                pending: vec![Place::Origin],
                removal_asked: None,
                confirmed: false,
                publish_durable: false,
            },
        );
    }

    /// A policy change on `ttl` was sent.
    pub fn policy_changed(&mut self, ttl_ms: Option<u64>) {
        self.policy_ttl_pending.push(ttl_ms);
    }

    /// The deadline of `key` in its queue, as S-TTL-3/4/11 fix it.
    #[must_use]
    pub fn deadline(&self, key: u64, place: Place) -> Option<u64> {
        let m = self.msgs.get(&key)?;
        if place != Place::Origin {
            return None;
        }
        let policy = self
            .policy_ttl_pending
            .last()
            .copied()
            .unwrap_or(self.policy_ttl_sure);
        let queue_ttl = match m.queue {
            TTL => Some(policy.map_or(TTL_QUEUE_MS, |p| p.min(TTL_QUEUE_MS))),
            _ => None,
        };
        let ttl = [queue_ttl, m.own_ttl_ms].into_iter().flatten().min()?;
        Some(m.enqueued_ms + ttl)
    }

    fn key(&self, id: MessageId) -> Result<u64, Violation> {
        self.ids
            .get(&id)
            .copied()
            .ok_or_else(|| Violation(format!("message id {id:?} was never logged")))
    }

    /// Judges one logged batch (events the node handed to the store at `now_ms`) and records
    /// the places it gives, as pending until the batch is known durable.
    ///
    /// # Errors
    /// The first step the model does not allow.
    pub fn logged(&mut self, events: &[Event], now_ms: u64) -> Result<(), Violation> {
        if std::env::var("WHARF_SIM_DEBUG").is_ok() {
            for e in events {
                eprintln!("EV {now_ms} {e:?}");
            }
        }
        for event in events {
            self.event(event, now_ms)?;
        }
        Ok(())
    }

    fn event(&mut self, event: &Event, now_ms: u64) -> Result<(), Violation> {
        match event {
            Event::Published { message, .. } => {
                let m = &message.message;
                let Some(key) = key_of(&m.body) else {
                    return violation("a published body lost its key");
                };
                self.ids.insert(m.id, key);
            }
            Event::DeadLettered {
                from, id, message, ..
            } => {
                let key = self.key(*id)?;
                self.dead_lettered(key, from.as_deref(), now_ms)?;
                if let Some(copy) = message {
                    if key_of(&copy.message.body) != Some(key) {
                        return violation(format!("key {key}: the dead-lettered copy changed"));
                    }
                    self.ids.insert(copy.message.id, key);
                }
            }
            Event::Settled {
                queue, ids, kind, ..
            } => {
                for id in ids {
                    let key = self.key(*id)?;
                    self.settled(key, queue, *kind, now_ms)?;
                }
            }
            Event::QueueDeleted { queue, .. } => self.queue_deleted(queue, now_ms)?,
            Event::Purged { .. } => return violation("nobody purges in this run"),
            _ => {}
        }
        Ok(())
    }

    fn dead_lettered(
        &mut self,
        key: u64,
        from: Option<&str>,
        now_ms: u64,
    ) -> Result<(), Violation> {
        let deadline = self.deadline(key, Place::Origin);
        let Some(m) = self.msgs.get_mut(&key) else {
            return violation(format!("key {key}: dead-lettered but never published"));
        };
        if from != Some(m.queue) || m.latest() != Place::Origin {
            return violation(format!(
                "key {key}: dead-lettered from {from:?} while at {:?} of {} (S-DLX-7: once)",
                m.latest(),
                m.queue
            ));
        }
        let rejected = m.removal_asked == Some(Removal::Reject);
        let expired = deadline.is_some_and(|d| d <= now_ms);
        if !rejected && !expired {
            return violation(format!(
                "key {key}: dead-lettered at {now_ms} though not rejected and due at {deadline:?}"
            ));
        }
        m.removal_asked = None;
        m.pending.push(Place::Dead);
        Ok(())
    }

    fn settled(
        &mut self,
        key: u64,
        queue: &str,
        kind: SettleKind,
        now_ms: u64,
    ) -> Result<(), Violation> {
        let place = if queue == DEAD {
            Place::Dead
        } else {
            Place::Origin
        };
        let deadline = self.deadline(key, place);
        let Some(m) = self.msgs.get_mut(&key) else {
            return violation(format!("key {key}: settled but never published"));
        };
        if m.latest() != place {
            return violation(format!(
                "key {key}: settled in {queue} while at {:?}",
                m.latest()
            ));
        }
        let allowed = match kind {
            SettleKind::Ack => m.removal_asked == Some(Removal::Ack),
            // Without a dead-letter exchange (`dead` itself), a reject drops the message.
            SettleKind::Discard => place == Place::Dead && m.removal_asked == Some(Removal::Reject),
            SettleKind::Expire => deadline.is_some_and(|d| d <= now_ms),
        };
        if !allowed {
            return violation(format!(
                "key {key}: settled ({kind:?}) in {queue} at {now_ms} without cause (deadline {deadline:?})"
            ));
        }
        m.removal_asked = None;
        m.pending.push(Place::Gone);
        Ok(())
    }

    fn queue_deleted(&mut self, queue: &str, now_ms: u64) -> Result<(), Violation> {
        if queue != LEASE {
            return violation(format!("queue {queue} deleted"));
        }
        match self.lease_end_ms {
            Some(end) if end <= now_ms => {}
            other => {
                return violation(format!(
                    "lease deleted at {now_ms}, its lease ends at {other:?} (S-QEXP-2)"
                ));
            }
        }
        self.lease_end_ms = None;
        for m in self.msgs.values_mut().filter(|m| m.queue == LEASE) {
            if m.latest() == Place::Origin {
                m.pending.push(Place::Gone);
            }
        }
        Ok(())
    }

    /// Everything logged so far is durable.
    pub fn all_durable(&mut self) {
        for m in self.msgs.values_mut() {
            if let Some(last) = m.pending.pop() {
                m.sure = last;
                m.pending.clear();
                m.publish_durable = true;
            }
        }
        if let Some(p) = self.policy_ttl_pending.pop() {
            self.policy_ttl_sure = p;
            self.policy_ttl_pending.clear();
        }
    }

    /// A client asked to remove `key` (the request may be lost in a crash).
    pub fn removal_asked(&mut self, key: u64, how: Removal) {
        if let Some(m) = self.msgs.get_mut(&key) {
            m.removal_asked = Some(how);
        }
    }

    /// A client's request died with the connection (crash): it was never made.
    pub fn forget_requests(&mut self) {
        for m in self.msgs.values_mut() {
            m.removal_asked = None;
        }
    }

    /// A delivery of `key` from `queue` with id `id` reached a client.
    ///
    /// # Errors
    /// A delivery of a message the log no longer holds there, or of a changed body.
    pub fn delivered(&self, queue: &str, id: MessageId, body: &[u8]) -> Result<u64, Violation> {
        let key = self.key(id)?;
        let Some(m) = self.msgs.get(&key) else {
            return Err(Violation(format!("key {key} delivered, never published")));
        };
        if body != body_of(key, body.len()) || key_of(body) != Some(key) {
            return Err(Violation(format!(
                "key {key}: delivered body differs from the published one"
            )));
        }
        let place = if queue == DEAD {
            Place::Dead
        } else {
            Place::Origin
        };
        if m.latest() != place {
            return Err(Violation(format!(
                "key {key} delivered from {queue} while at {:?} (duplicate)",
                m.latest()
            )));
        }
        Ok(key)
    }

    /// The publisher got the confirm of `key`.
    ///
    /// # Errors
    /// A confirm for a message whose publish is not durable (S-DUR-3).
    pub fn confirmed(&mut self, key: u64) -> Result<(), Violation> {
        let Some(m) = self.msgs.get_mut(&key) else {
            return violation(format!("confirm for unknown key {key}"));
        };
        if !m.publish_durable {
            return violation(format!("key {key}: confirmed but not durable (S-DUR-3)"));
        }
        m.confirmed = true;
        Ok(())
    }

    /// Checks the node's state after it fired its timers at `now_ms`: no ready message past
    /// its deadline (S-TTL-4: expired on time), the lease ended on time (S-QEXP-3).
    ///
    /// # Errors
    /// The first message or queue found late.
    pub fn check_on_time(&self, broker: &Broker, now_ms: u64) -> Result<(), Violation> {
        for queue in [WORK, TTL] {
            for (message, _) in broker.ready_messages("/", queue) {
                let key = self.key(message.id)?;
                if let Some(d) = self.deadline(key, Place::Origin)
                    && d <= now_ms
                {
                    return violation(format!(
                        "key {key} still ready in {queue} at {now_ms}, due at {d} (S-TTL-4)"
                    ));
                }
            }
        }
        let lease_exists = broker.queues("/").iter().any(|q| q.name == LEASE);
        if let Some(end) = self.lease_end_ms
            && lease_exists
            && end <= now_ms
        {
            return violation(format!("lease alive at {now_ms}, its lease ended at {end}"));
        }
        Ok(())
    }

    /// After a restart: every message is in exactly one place the log may hold it in, where
    /// the durable log put it if that is known (never lost, never duplicated, dead-lettered
    /// once). Then the observed places become the durable ones.
    ///
    /// # Errors
    /// The first message out of place.
    pub fn check_recovered(&mut self, broker: &Broker) -> Result<(), Violation> {
        let mut seen: BTreeMap<u64, Vec<Place>> = BTreeMap::new();
        for (info, msgs) in broker.durable_state().queues {
            for dm in msgs {
                let key = self.key(dm.id)?;
                let place = if info.name == DEAD {
                    Place::Dead
                } else {
                    Place::Origin
                };
                seen.entry(key).or_default().push(place);
                if let Some(m) = self.msgs.get(&key)
                    && info.name != DEAD
                    && info.name != m.queue
                {
                    return violation(format!("key {key} found in {}", info.name));
                }
            }
        }
        for (key, places) in &seen {
            if places.len() > 1 {
                return violation(format!(
                    "key {key} held {places:?} after recovery (duplicated)"
                ));
            }
        }
        for (key, m) in &mut self.msgs {
            let found = seen
                .get(key)
                .and_then(|p| p.first())
                .copied()
                .unwrap_or(Place::Gone);
            let allowed: BTreeSet<Place> = std::iter::once(m.sure)
                .chain(m.pending.iter().copied())
                .collect();
            if !allowed.contains(&found) {
                let what = if found == Place::Gone && m.confirmed {
                    "lost a confirmed message"
                } else {
                    "out of place"
                };
                return violation(format!(
                    "key {key} of {}: {what}: found {found:?}, the log allows {allowed:?} (S-DUR-3, S-DLX-7)",
                    m.queue
                ));
            }
            m.publish_durable |= found != Place::Gone || m.sure != Place::Gone;
            m.sure = found;
            m.pending.clear();
            m.removal_asked = None;
        }
        self.policy_recovered(broker)?;
        Ok(())
    }

    /// The lease restarts at recovery (S-QEXP-4), or was declared now.
    pub fn lease_started(&mut self, now_ms: u64) {
        self.lease_end_ms = Some(now_ms + LEASE_MS);
    }

    fn policy_recovered(&mut self, broker: &Broker) -> Result<(), Violation> {
        let found = broker
            .policies("/")
            .into_iter()
            .find(|p| p.policy.name == "p")
            .map(|p| policy_ttl(&p.policy.definition));
        let found = found.flatten();
        let allowed: Vec<Option<u64>> = std::iter::once(self.policy_ttl_sure)
            .chain(self.policy_ttl_pending.iter().copied())
            .collect();
        if !allowed.contains(&found) {
            return violation(format!(
                "policy ttl {found:?} after recovery, allowed {allowed:?}"
            ));
        }
        self.policy_ttl_sure = found;
        self.policy_ttl_pending.clear();
        Ok(())
    }
}
