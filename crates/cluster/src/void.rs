//! Voiding a committed entry whose events do not fit the committed state (S-CLU-60). Raft
//! commits an entry before any member applies it, so an entry a leader decided on a live broker
//! that had drifted from the committed one (a bug) is committed all the same. Failing the state
//! machine would stop Raft on every member, and a restarted member would fail again on the
//! same entry, forever. Instead every member applies such an entry as nothing at all: the
//! events are applied in order, and when one is refused the broker is rebuilt as it was before
//! the entry (from the machine's snapshot and the committed entries after it, skipping those
//! voided before), so no half of an entry ever stays. The decision depends only on the
//! committed state before the entry, so every member, and a member replaying its log after a
//! restart, voids the same entries.
//!
//! The entries after the snapshot come from the group's log ([`History::Log`], attached with
//! `QueueStateMachine::with_log`), which holds them until it is purged behind a snapshot; a
//! machine without a log keeps the events it applied since its snapshot itself
//! ([`History::Memory`], tests of the replication alone).

use std::collections::BTreeMap;

use openraft::EntryPayload;
use wharf_broker::{Broker, BrokerError, Event};

use crate::log_store::WalLogReader;
use crate::snapshot::{self, SnapshotError};

/// Applies `events` to `broker` in order, stopping at the first it refuses.
///
/// # Errors
/// The first refusal; the events before it stay applied (the caller rolls back).
pub(crate) fn apply_events(broker: &mut Broker, events: &[Event]) -> Result<(), BrokerError> {
    events.iter().try_for_each(|e| broker.apply(e))
}

/// Where a machine finds the committed entries after its snapshot.
pub(crate) enum History {
    /// The group's log.
    Log(WalLogReader),
    /// The events of each entry applied since the snapshot, by index (no log attached).
    Memory(BTreeMap<u64, Vec<Event>>),
}

/// Why the broker before an entry could not be rebuilt: the committed state is unknown, and
/// the state machine fails as it did before voiding existed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RebuildError {
    /// The snapshot's bytes do not decode.
    #[error("decoding the snapshot to rebuild from")]
    Snapshot(#[from] SnapshotError),
    /// The log no longer holds an entry after the snapshot.
    #[error("the log no longer holds entry {0}, needed to rebuild the committed state")]
    Missing(u64),
    /// An entry after the snapshot could not be read back from the log.
    #[error("reading the log to rebuild the committed state: {0}")]
    Log(String),
    /// An entry that applied before does not apply again (a bug: apply is not deterministic).
    #[error("entry {index} applied before but not when rebuilding: {error}")]
    Replay {
        /// The entry.
        index: u64,
        /// The broker's refusal.
        error: BrokerError,
    },
}

/// A machine's record of voided entries, and what it rebuilds from.
pub(crate) struct Voids {
    history: History,
    /// The entries after the snapshot that applied nothing, skipped when rebuilding: `true`
    /// for one voided (a proposer asks, S-CLU-53), `false` for a forwarded proposal applied
    /// already (S-CLU-50).
    since_snapshot: BTreeMap<u64, bool>,
    /// Every entry this machine voided since it started (its restart's replay included).
    pub(crate) total: u64,
}

impl Voids {
    pub(crate) fn new(history: History) -> Voids {
        Voids {
            history,
            since_snapshot: BTreeMap::new(),
            total: 0,
        }
    }

    /// Rebuilds from the group's log from now on.
    pub(crate) fn attach_log(&mut self, log: WalLogReader) {
        self.history = History::Log(log);
    }

    /// Entry `index`'s `events` applied whole.
    pub(crate) fn applied(&mut self, index: u64, events: &[Event]) {
        if let History::Memory(kept) = &mut self.history {
            kept.insert(index, events.to_vec());
        }
    }

    /// Entry `index` voided.
    pub(crate) fn voided(&mut self, index: u64) {
        self.since_snapshot.insert(index, true);
        self.total += 1;
    }

    /// Whether entry `index`, after the snapshot, was voided (`false` once a snapshot covers
    /// it: the machine no longer knows).
    pub(crate) fn was_voided(&self, index: u64) -> bool {
        self.since_snapshot.get(&index).copied().unwrap_or(false)
    }

    /// Entry `index` applied nothing: a forwarded proposal's repeat (S-CLU-50).
    pub(crate) fn skipped(&mut self, index: u64) {
        self.since_snapshot.insert(index, false);
    }

    /// The snapshot now covers every entry through `index`: nothing before it is needed.
    pub(crate) fn snapshot_at(&mut self, index: Option<u64>) {
        let keep_from = index.map_or(0, |i| i + 1);
        self.since_snapshot = self.since_snapshot.split_off(&keep_from);
        if let History::Memory(kept) = &mut self.history {
            *kept = kept.split_off(&keep_from);
        }
    }

    /// The committed broker just before entry `before`: the snapshot `base` (the bytes of the
    /// snapshot through index `base_index`; a fresh broker when there is none), then every entry
    /// after it and before `before` that was not voided.
    pub(crate) fn rebuild(
        &self,
        base: Option<(&[u8], Option<u64>)>,
        before: u64,
    ) -> Result<Broker, RebuildError> {
        let (mut broker, from) = match base {
            Some((bytes, index)) => (snapshot::decode(bytes)?.broker, index.map_or(0, |i| i + 1)),
            None => (Broker::new(), 0),
        };
        let mut replay = |index: u64, events: &[Event]| {
            if self.since_snapshot.contains_key(&index) {
                return Ok(());
            }
            apply_events(&mut broker, events).map_err(|error| RebuildError::Replay { index, error })
        };
        match &self.history {
            History::Memory(kept) => {
                for (&index, events) in kept.range(from..before) {
                    replay(index, events)?;
                }
            }
            History::Log(log) => {
                let entries = log
                    .entries(from..before)
                    .map_err(|e| RebuildError::Log(e.to_string()))?;
                let mut expected = from;
                for entry in &entries {
                    if entry.log_id.index != expected {
                        return Err(RebuildError::Missing(expected));
                    }
                    expected += 1;
                    if let EntryPayload::Normal(p) = &entry.payload {
                        replay(entry.log_id.index, &p.events)?;
                    }
                }
                if expected < before {
                    return Err(RebuildError::Missing(expected));
                }
            }
        }
        Ok(broker)
    }
}
