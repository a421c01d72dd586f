//! [`QueueStateMachine`]: openraft's `RaftStateMachine` for a quorum queue's group. Its state
//! is a whole wharf [`Broker`] holding what the group's committed entries built: each entry's
//! events are applied in order with `Broker::apply`, the replay path (nothing fires, nothing
//! is delivered), so every member holds the same committed broker (S-CLU-2). It keeps the
//! highest `now` any entry carried (S-CLU-5). Snapshots are checkpoint bytes (`snapshot.rs`).
//!
//! **wharf today:** the state machine and its current snapshot live in memory; a member
//! rebuilds them from its log, or from the leader's snapshot once the log is purged.

#![expect(
    clippy::result_large_err,
    reason = "openraft's StorageError is the error its storage traits require; helpers return it as is"
)]

use std::io::Cursor;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use wharf_broker::{Broker, DurableState};

use crate::snapshot;
use crate::types::{Applied, Entry, LogId, StorageError, StoredMembership, TypeConfig};

/// The committed state of a group, shared between openraft's state machine task and readers
/// (the leader's take-over, tests, management).
pub struct Machine {
    broker: Broker,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    now_ms: u64,
    snapshot: Option<StoredSnapshot>,
    snapshots_built: u64,
}

/// The current snapshot: its metadata and bytes.
#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    bytes: Vec<u8>,
}

impl Machine {
    /// The committed broker.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// The highest `now` carried by an applied entry (0 before any).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.last_applied
    }

    /// The committed durable state, for comparisons.
    pub fn durable_state(&self) -> DurableState {
        self.broker.durable_state()
    }

    fn apply_entry(&mut self, entry: &Entry) -> Result<Applied, StorageError> {
        let index = entry.log_id.index;
        let events = match &entry.payload {
            EntryPayload::Blank => 0,
            EntryPayload::Normal(p) => {
                for event in &p.events {
                    // A committed event the broker refuses means the members' brokers have
                    // diverged: a bug, reported as a state machine failure (openraft stops).
                    self.broker
                        .apply(event)
                        .map_err(|e| StorageIOError::apply(entry.log_id, &e))?;
                }
                self.now_ms = self.now_ms.max(p.now_ms);
                p.events.len()
            }
            EntryPayload::Membership(m) => {
                self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                0
            }
        };
        self.last_applied = Some(entry.log_id);
        Ok(Applied { index, events })
    }
}

fn lock(m: &Mutex<Machine>) -> MutexGuard<'_, Machine> {
    #[expect(
        clippy::expect_used,
        reason = "a poisoned lock means a panic mid-apply: the committed state is unknown, fail-stop"
    )]
    m.lock().expect("state machine lock poisoned")
}

/// A group's state machine (a handle: clones share the same [`Machine`]).
#[derive(Clone)]
pub struct QueueStateMachine {
    machine: Arc<Mutex<Machine>>,
}

impl Default for QueueStateMachine {
    fn default() -> Self {
        QueueStateMachine::new()
    }
}

impl QueueStateMachine {
    /// An empty state machine: a fresh broker (the vhost `/` and its predeclared exchanges).
    pub fn new() -> QueueStateMachine {
        QueueStateMachine {
            machine: Arc::new(Mutex::new(Machine {
                broker: Broker::new(),
                last_applied: None,
                membership: StoredMembership::default(),
                now_ms: 0,
                snapshot: None,
                snapshots_built: 0,
            })),
        }
    }

    /// Runs `f` on the committed state.
    pub fn with<T>(&self, f: impl FnOnce(&Machine) -> T) -> T {
        f(&lock(&self.machine))
    }
}

/// Builds a snapshot of the committed state at the moment it is asked.
pub struct MachineSnapshotBuilder {
    machine: Arc<Mutex<Machine>>,
}

impl RaftSnapshotBuilder<TypeConfig> for MachineSnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let mut m = lock(&self.machine);
        let index = m.last_applied.map_or(0, |l| l.index);
        let bytes = snapshot::encode(&m.broker, index, m.now_ms)
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        m.snapshots_built += 1;
        let snapshot_id = format!("{index}-{}", m.snapshots_built);
        let meta = SnapshotMeta {
            last_log_id: m.last_applied,
            last_membership: m.membership.clone(),
            snapshot_id,
        };
        m.snapshot = Some(StoredSnapshot {
            meta: meta.clone(),
            bytes: bytes.clone(),
        });
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for QueueStateMachine {
    type SnapshotBuilder = MachineSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let m = lock(&self.machine);
        Ok((m.last_applied, m.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut m = lock(&self.machine);
        entries.into_iter().map(|e| m.apply_entry(&e)).collect()
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        MachineSnapshotBuilder {
            machine: Arc::clone(&self.machine),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let decoded = snapshot::decode(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut m = lock(&self.machine);
        m.broker = decoded.broker;
        m.now_ms = m.now_ms.max(decoded.now_ms);
        m.last_applied = meta.last_log_id;
        m.membership = meta.last_membership.clone();
        m.snapshot = Some(StoredSnapshot {
            meta: meta.clone(),
            bytes,
        });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let m = lock(&self.machine);
        Ok(m.snapshot.clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.bytes)),
        }))
    }
}
