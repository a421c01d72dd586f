//! The messages of one quorum queue waiting to be dead-lettered (S-QQ-10): a message that died
//! under at-least-once dead-lettering and could not be dead-lettered then. They are not
//! ready (never delivered, never expired), count against the queue's length limits, and are
//! tried again in the order they died (death time, then id).
//! Must not depend on anything outside `broker`.

use std::collections::{BTreeMap, HashMap};

use crate::queue::Taken;
use crate::types::{HeldDeath, MessageId};

/// The dead-letter hold of one queue. Invariant: `at` maps exactly the ids of `entries` to
/// their death time; `bytes` sums their body lengths.
#[derive(Debug, Default)]
pub(crate) struct DeadLetterHold {
    entries: BTreeMap<(u64, MessageId), (Taken, HeldDeath)>,
    at: HashMap<MessageId, u64>,
    bytes: u64,
    /// When the messages held are tried again (armed while any is held).
    retry_at: Option<u64>,
}

impl DeadLetterHold {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `id` is held here.
    pub fn contains(&self, id: MessageId) -> bool {
        self.at.contains_key(&id)
    }

    /// Body bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// When the next retry is due (`None` when nothing is held).
    pub fn retry_at(&self) -> Option<u64> {
        self.retry_at
    }

    /// Sets when the messages held are tried again (cleared when none is).
    pub fn arm_retry(&mut self, at: u64) {
        self.retry_at = (!self.is_empty()).then_some(at);
    }

    /// Holds `taken`, which died as `death`. The first message held arms a retry `retry_ms`
    /// after its death.
    pub fn insert(&mut self, taken: Taken, death: HeldDeath, retry_ms: u64) {
        let id = taken.msg.id();
        if self.retry_at.is_none() {
            self.retry_at = Some(death.at_ms.saturating_add(retry_ms));
        }
        self.bytes += taken.msg.body_len();
        let fresh = self.at.insert(id, death.at_ms).is_none();
        assert!(fresh, "message {id:?} is held already");
        self.entries.insert((death.at_ms, id), (taken, death));
    }

    /// Takes the held message `id`, if it is here.
    pub fn remove(&mut self, id: MessageId) -> Option<(Taken, HeldDeath)> {
        let at = self.at.remove(&id)?;
        let (taken, death) = self
            .entries
            .remove(&(at, id))
            .unwrap_or_else(|| panic!("held index names {id:?} at {at}"));
        self.bytes -= taken.msg.body_len();
        if self.entries.is_empty() {
            self.retry_at = None;
        }
        Some((taken, death))
    }

    /// The ids held, in the order they died.
    pub fn ids(&self) -> Vec<MessageId> {
        self.entries.keys().map(|&(_, id)| id).collect()
    }

    /// Every message held, in the order they died.
    pub fn iter(&self) -> impl Iterator<Item = (&Taken, HeldDeath)> {
        self.entries.values().map(|(t, d)| (t, *d))
    }

    /// Removes every message held (a purge).
    pub fn drain_all(&mut self) -> Vec<Taken> {
        self.at.clear();
        self.bytes = 0;
        self.retry_at = None;
        std::mem::take(&mut self.entries)
            .into_values()
            .map(|(t, _)| t)
            .collect()
    }

    /// Walks the structure (STYLE 3.1).
    pub fn check_invariants(&self) {
        assert_eq!(self.at.len(), self.entries.len(), "held index size");
        let mut bytes = 0;
        for (&(at, id), (taken, death)) in &self.entries {
            assert_eq!(taken.msg.id(), id, "held entry under another id");
            assert_eq!(death.at_ms, at, "held entry under another time");
            assert_eq!(self.at.get(&id), Some(&at), "held index differs");
            bytes += taken.msg.body_len();
        }
        assert_eq!(bytes, self.bytes, "held byte count");
        assert_eq!(
            self.retry_at.is_some(),
            !self.entries.is_empty(),
            "a retry is armed exactly while messages are held"
        );
    }
}
