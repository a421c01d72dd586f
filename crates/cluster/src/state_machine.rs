//! [`QueueStateMachine`]: openraft's `RaftStateMachine` for a quorum queue's group. Its state
//! is a whole wharf [`Broker`] holding what the group's committed entries built: each entry's
//! events are applied in order with `Broker::apply`, the replay path (nothing fires, nothing
//! is delivered), so every member holds the same committed broker (S-CLU-2). It keeps the
//! highest `now` any entry carried (S-CLU-5). Snapshots are checkpoint bytes (`snapshot.rs`).
//!
//! A state machine opened on a directory ([`QueueStateMachine::open`]) writes every snapshot
//! it builds or installs to its snapshot file (`snapshot_file.rs`) before openraft hears of
//! it, and starts from that file: so the log openraft purges behind a snapshot is never
//! needed again, and a restarted member holds its committed state at once (S-CLU-7).
//! It counts what it applies since its last snapshot and asks for the next when one is due
//! (S-CLU-80, `compaction.rs`).
//! [`QueueStateMachine::new`] keeps everything in memory (tests of the replication alone).
//!
//! An entry whose events do not fit the committed state is voided: none of its events stays
//! applied, on every member alike, and the group goes on (S-CLU-60, `void.rs`).

#![expect(
    clippy::result_large_err,
    reason = "openraft's StorageError is the error its storage traits require; helpers return it as is"
)]

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::JoinHandle;

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use wharf_broker::{Broker, DurableState};
use wharf_wal::Storage;

use crate::compaction::{self, Compaction, Sizes, SnapshotRule};
use crate::log_store::{WalLogReader, entry_bytes};
use crate::paging::{self, GroupLoader};
use crate::snapshot::{self, Sessions, SnapshotError};
use crate::snapshot_file::{self, SnapshotFileError};
use crate::types::{Applied, Entry, LogId, Origin, StorageError, StoredMembership, TypeConfig};
use crate::void::{History, Voids, apply_events};

/// The committed state of a group, shared between openraft's state machine task and readers
/// (the leader's take-over, tests, management).
pub struct Machine {
    broker: Broker,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    now_ms: u64,
    /// The highest forwarded proposal applied of each proposer session (S-CLU-50).
    sessions: Sessions,
    snapshot: Option<StoredSnapshot>,
    snapshots_built: u64,
    /// What was applied since the last snapshot: when the next is due (S-CLU-80).
    compaction: Compaction,
    disk: Option<SnapshotDisk>,
    /// The group's id, for the log lines (0 until a log is attached).
    group: u64,
    voids: Voids,
    /// Where the committed broker leaves queued bodies (S-CLU-82): a machine on a log.
    paging: Option<Paging>,
}

/// How a machine on a log pages its committed broker's messages out (S-CLU-82).
struct Paging {
    log: WalLogReader,
    loader: Arc<GroupLoader>,
    /// The content of queued messages the broker keeps in memory, at most (about).
    budget: u64,
}

/// Where the current snapshot's bytes are: a copy of those a machine without a disk keeps, or
/// its snapshot file.
enum SnapshotSource {
    Memory(SnapshotMeta<u64, openraft::BasicNode>, Vec<u8>),
    File(SnapshotDisk),
}

impl SnapshotSource {
    /// The snapshot's metadata and bytes; from a file, the file's own metadata (a build may
    /// have replaced the file and not recorded it yet: the file is still a snapshot of
    /// committed state, and its metadata is its own).
    fn read(self) -> Result<Option<(snapshot_file::Meta, Vec<u8>)>, SnapshotFileError> {
        match self {
            SnapshotSource::Memory(meta, bytes) => Ok(Some((meta, bytes))),
            SnapshotSource::File(disk) => {
                snapshot_file::read_current(disk.storage.as_ref(), &disk.dir)
            }
        }
    }
}

/// Where a state machine keeps its snapshot file.
#[derive(Clone)]
struct SnapshotDisk {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
}

/// Why a state machine could not start from its snapshot file.
#[derive(Debug, thiserror::Error)]
pub enum MachineOpenError {
    /// The file could not be read, or is damaged.
    #[error(transparent)]
    File(#[from] SnapshotFileError),
    /// The snapshot inside does not decode into a broker.
    #[error("the snapshot file's snapshot")]
    Snapshot(#[from] SnapshotError),
}

/// The current snapshot: its metadata, its size, and its bytes when the machine has no disk.
/// A machine with a disk reads them from its snapshot file when they are needed (openraft
/// sending the snapshot to a member, a void's rebuild, S-CLU-60): a snapshot holds every
/// queued body, and kept in memory besides the committed broker it nearly doubled what a
/// deep queue cost each member until the next snapshot replaced it.
#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    len: u64,
    bytes: Option<Vec<u8>>,
}

impl StoredSnapshot {
    /// The snapshot of `meta` and `bytes`, the bytes kept when `keep` (a machine without a
    /// disk) and let go otherwise (the file has them).
    fn new(meta: SnapshotMeta<u64, openraft::BasicNode>, bytes: Vec<u8>, keep: bool) -> Self {
        StoredSnapshot {
            meta,
            len: bytes.len() as u64,
            bytes: keep.then_some(bytes),
        }
    }
}

impl Machine {
    /// Nothing applied yet: a fresh broker; its snapshots kept on `disk` when given.
    fn empty(disk: Option<SnapshotDisk>) -> Machine {
        Machine {
            broker: Broker::new(),
            last_applied: None,
            membership: StoredMembership::default(),
            now_ms: 0,
            sessions: Sessions::new(),
            snapshot: None,
            snapshots_built: 0,
            compaction: Compaction::default(),
            disk,
            group: 0,
            voids: Voids::new(History::Memory(std::collections::BTreeMap::new())),
            paging: None,
        }
    }

    /// Makes `broker` the committed broker, reading messages back through the log's loader
    /// when the machine is on a log.
    fn set_broker(&mut self, mut broker: Broker) {
        if let Some(p) = &self.paging {
            broker.set_loader(Arc::clone(&p.loader) as Arc<dyn wharf_broker::MessageLoader>);
        }
        self.broker = broker;
    }

    /// Leaves the oldest queued bodies on disk when those in memory exceed the budget, and
    /// lets the log forget the events of the entries applied (S-CLU-82).
    ///
    /// # Errors
    /// A message could not be read back since the last call: the log is damaged (S-DUR-7).
    fn page_out(&mut self) -> Result<(), StorageError> {
        let Some(p) = &self.paging else {
            return Ok(());
        };
        if let Some(e) = self.broker.storage_failure() {
            return Err(StorageIOError::read_logs(&std::io::Error::other(e.to_owned())).into());
        }
        self.broker.page_out(p.log.durable_lsn(), p.budget);
        if let Some(last) = self.last_applied {
            p.log.release(last.index);
        }
        Ok(())
    }

    /// How many committed entries this machine voided since it started, its replay of its log
    /// at the start included (S-CLU-60).
    pub fn voided(&self) -> u64 {
        self.voids.total
    }

    /// Whether entry `index` was voided (S-CLU-60), as far as this machine still knows: an
    /// entry a snapshot covers answers `false`.
    pub fn was_voided(&self, index: u64) -> bool {
        self.voids.was_voided(index)
    }

    /// The committed broker.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// The highest `now` carried by an applied entry (0 before any).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The highest `seq` applied of proposer `session` (S-CLU-50).
    pub fn session_seq(&self, session: u64) -> Option<u64> {
        self.sessions.get(&session).copied()
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.last_applied
    }

    /// The current snapshot's last log id (`None`: no snapshot, or one of an empty log).
    pub fn snapshot_last_log_id(&self) -> Option<LogId> {
        self.snapshot.as_ref().and_then(|s| s.meta.last_log_id)
    }

    /// The current snapshot's size in bytes (0: none).
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot.as_ref().map_or(0, |s| s.len)
    }

    /// Entries applied since the last snapshot was taken, installed or loaded (S-CLU-80).
    pub fn entries_since_snapshot(&self) -> u64 {
        self.compaction.entries()
    }

    /// Whether a snapshot is due under `rule` (S-CLU-80): entries applied since the last one,
    /// the bytes they logged, and the content the committed queues hold (what the next
    /// snapshot writes).
    pub fn snapshot_due(&self, rule: SnapshotRule) -> bool {
        self.compaction.due(rule, self.snapshot_sizes())
    }

    /// What the next snapshot is reckoned to cost (S-CLU-80).
    fn snapshot_sizes(&self) -> Sizes {
        Sizes {
            last_snapshot: self.snapshot_bytes(),
            // All of it, whether in memory or left in the log (S-CLU-82): a snapshot writes
            // it all.
            queued: self.broker.queued_bytes(),
        }
    }

    /// Asks for a snapshot if one is due (S-CLU-80).
    fn request_snapshot_if_due(&mut self) {
        let sizes = self.snapshot_sizes();
        if self.compaction.request_if_due(sizes) {
            tracing::debug!(
                group = self.group,
                last_snapshot_bytes = sizes.last_snapshot,
                queued_bytes = sizes.queued,
                "a snapshot is due (S-CLU-80)"
            );
        }
    }

    /// What a snapshot of the committed state at this moment needs, taken cheaply under the
    /// lock (one reference per message): the broker's snapshot, the figures and the metadata.
    fn take_snapshot(&mut self) -> Taken {
        let index = self.last_applied.map_or(0, |l| l.index);
        self.snapshots_built += 1;
        self.compaction.covered();
        let broker = self.broker.snapshot();
        if let Some(p) = &self.paging {
            // Every message it may read back later is in this snapshot, or in an entry after
            // it, which the log keeps anyway (S-CLU-82).
            p.log.keep_segments_from(paging::oldest_segment(&broker));
        }
        Taken {
            loader: self.paging.as_ref().map(|p| Arc::new(p.loader.fresh())),
            broker,
            now_ms: self.now_ms,
            sessions: self.sessions.clone(),
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id: format!("{index}-{}", self.snapshots_built),
            },
            disk: self.disk.clone(),
        }
    }

    /// Whether the current snapshot already covers `meta`'s last log id (one installed while
    /// a build of older state ran): the older one is then not kept.
    fn has_newer_snapshot(&self, meta: &SnapshotMeta<u64, openraft::BasicNode>) -> bool {
        self.snapshot_last_log_id() >= meta.last_log_id && self.snapshot.is_some()
    }

    /// Makes `meta` and `bytes` the current snapshot, on disk first when the machine has one.
    fn keep_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        bytes: Vec<u8>,
    ) -> Result<(), SnapshotFileError> {
        if let Some(disk) = &self.disk {
            snapshot_file::write(disk.storage.as_ref(), &disk.dir, meta, &bytes)?;
        }
        let current = self.stored(meta.clone(), bytes);
        self.record_snapshot(current);
        Ok(())
    }

    /// Makes `current` (on disk already, when the machine has a disk) the current snapshot.
    fn record_snapshot(&mut self, current: StoredSnapshot) {
        self.voids
            .snapshot_at(current.meta.last_log_id.map(|l| l.index));
        self.snapshot = Some(current);
    }

    /// The current snapshot of `meta` and `bytes`: the bytes are let go when the file has them.
    fn stored(
        &self,
        meta: SnapshotMeta<u64, openraft::BasicNode>,
        bytes: Vec<u8>,
    ) -> StoredSnapshot {
        StoredSnapshot::new(meta, bytes, self.disk.is_none())
    }

    /// Where the current snapshot's bytes are (`None`: no snapshot).
    fn snapshot_source(&self) -> Option<SnapshotSource> {
        let current = self.snapshot.as_ref()?;
        match (&current.bytes, &self.disk) {
            (Some(bytes), _) => Some(SnapshotSource::Memory(current.meta.clone(), bytes.clone())),
            (None, Some(disk)) => Some(SnapshotSource::File(disk.clone())),
            (None, None) => None,
        }
    }

    /// Starts from snapshot `bytes` (with its `meta`).
    fn restore(&mut self, meta: snapshot_file::Meta, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        let decoded = snapshot::decode(&bytes)?;
        self.set_broker(decoded.broker);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.now_ms = decoded.now_ms;
        self.sessions = decoded.sessions;
        self.snapshot = Some(self.stored(meta, bytes));
        self.compaction.covered();
        Ok(())
    }

    /// The committed durable state, for comparisons.
    pub fn durable_state(&self) -> DurableState {
        self.broker.durable_state()
    }

    fn apply_entry(&mut self, entry: &Entry) -> Result<Applied, StorageError> {
        let index = entry.log_id.index;
        let mut voided = false;
        if let EntryPayload::Normal(p) = &entry.payload {
            // Written and sent by now, as a rule: the log keeps one copy of its bodies.
            p.events.release_encoding();
        }
        let events = match &entry.payload {
            EntryPayload::Blank => 0,
            // A forwarded proposal applied already (a retry that committed twice) is skipped:
            // it applies once (S-CLU-50).
            // A rebuild (S-CLU-60) skips it too.
            EntryPayload::Normal(p) if p.origin.is_some_and(|o| self.applied_origin(o)) => {
                self.voids.skipped(index);
                0
            }
            EntryPayload::Normal(p) => {
                if let Some(o) = p.origin {
                    self.sessions.insert(o.session, o.seq);
                }
                // Its `now` was logged all the same: time never runs back (S-CLU-5).
                self.now_ms = self.now_ms.max(p.now_ms);
                match apply_events(&mut self.broker, &p.events) {
                    Ok(()) => {
                        self.voids.applied(index, &p.events);
                        p.events.len()
                    }
                    Err(refused) => {
                        self.void(entry.log_id, &refused)?;
                        voided = true;
                        0
                    }
                }
            }
            EntryPayload::Membership(m) => {
                self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                0
            }
        };
        self.last_applied = Some(entry.log_id);
        Ok(Applied {
            index,
            events,
            voided,
        })
    }

    /// S-CLU-60: entry `log_id` does not fit the committed state (`refused`): the broker goes
    /// back to what it was before the entry, the entry counts as voided.
    ///
    /// # Errors
    /// The broker before the entry cannot be rebuilt: the state is unknown, openraft stops.
    fn void(
        &mut self,
        log_id: LogId,
        refused: &wharf_broker::BrokerError,
    ) -> Result<(), StorageError> {
        let base = self
            .snapshot_source()
            .map_or(Ok(None), SnapshotSource::read)
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let base = base
            .as_ref()
            .map(|(meta, bytes)| (bytes.as_slice(), meta.last_log_id.map(|l| l.index)));
        let rebuilt = self
            .voids
            .rebuild(base, log_id.index)
            .map_err(|e| StorageIOError::apply(log_id, &e))?;
        self.set_broker(rebuilt);
        self.voids.voided(log_id.index);
        tracing::error!(
            group = self.group,
            log_id = %log_id,
            error = %refused,
            voided = self.voids.total,
            "voided a committed entry: its events do not fit the committed state; none of them \
             applied, on every member alike (S-CLU-60)"
        );
        Ok(())
    }

    fn applied_origin(&self, origin: Origin) -> bool {
        self.sessions
            .get(&origin.session)
            .is_some_and(|seq| *seq >= origin.seq)
    }
}

fn lock(m: &Mutex<Machine>) -> MutexGuard<'_, Machine> {
    #[expect(
        clippy::expect_used,
        reason = "a poisoned lock means a panic mid-apply: the committed state is unknown, fail-stop"
    )]
    m.lock().expect("state machine lock poisoned")
}

fn lock_files(files: &Mutex<()>) -> MutexGuard<'_, ()> {
    // Nothing is inside to be left half-changed by a panic: a poisoned lock is still good.
    files
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A group's state machine (a handle: clones share the same [`Machine`]).
#[derive(Clone)]
pub struct QueueStateMachine {
    machine: Arc<Mutex<Machine>>,
    /// Held while the snapshot file is written (a build's and an install's), taken before
    /// `machine` when both are.
    files: Arc<Mutex<()>>,
}

impl Default for QueueStateMachine {
    fn default() -> Self {
        QueueStateMachine::new()
    }
}

impl QueueStateMachine {
    /// An empty state machine: a fresh broker (the vhost `/` and its predeclared exchanges).
    pub fn new() -> QueueStateMachine {
        QueueStateMachine::from_machine(Machine::empty(None))
    }

    /// A state machine that keeps its snapshot file in `dir` on `storage`, starting from the
    /// file's snapshot when there is one (openraft then re-applies the committed entries after
    /// it from the log).
    ///
    /// # Errors
    /// The file cannot be read, is damaged, or its snapshot does not decode.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
    ) -> Result<QueueStateMachine, MachineOpenError> {
        let found = snapshot_file::read(storage.as_ref(), dir)?;
        let mut machine = Machine::empty(Some(SnapshotDisk {
            storage,
            dir: dir.to_path_buf(),
        }));
        if let Some((meta, bytes)) = found {
            machine.restore(meta, bytes)?;
        }
        Ok(QueueStateMachine::from_machine(machine))
    }

    /// A state machine holding snapshot `bytes` (with its `meta`), kept in memory only: what a
    /// member's snapshot file says, for a reader of a data directory (`wharf-inspect raft`).
    ///
    /// # Errors
    /// The snapshot does not decode.
    pub fn restored(
        meta: snapshot_file::Meta,
        bytes: Vec<u8>,
    ) -> Result<QueueStateMachine, SnapshotError> {
        let mut machine = Machine::empty(None);
        machine.restore(meta, bytes)?;
        Ok(QueueStateMachine::from_machine(machine))
    }

    /// Applies committed `entries` in order, as openraft's apply does (S-CLU-2, S-CLU-60).
    ///
    /// # Errors
    /// An entry was voided and the state before it could not be rebuilt.
    pub fn apply_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<Vec<Applied>, StorageError> {
        let mut m = lock(&self.machine);
        let applied = entries
            .into_iter()
            .map(|e| {
                m.compaction.applied(entry_bytes(&e) as u64);
                m.apply_entry(&e)
            })
            .collect();
        m.page_out()?;
        m.request_snapshot_if_due();
        applied
    }

    /// Asks `raft` (this machine's group's) for a snapshot whenever one is due under `rule`
    /// (S-CLU-80), from a task it starts on the current runtime; the group's Raft runs with
    /// `SnapshotPolicy::Never`. The task ends when the Raft stops.
    pub fn snapshot_by(&self, rule: SnapshotRule, raft: crate::types::Raft) -> JoinHandle<()> {
        let wake = {
            let mut m = lock(&self.machine);
            let wake = m.compaction.listen(rule);
            m.request_snapshot_if_due();
            wake
        };
        tokio::spawn(compaction::trigger_task(wake, raft))
    }

    /// Rebuilds from group `group`'s log `log` when an entry is voided (S-CLU-60), instead of
    /// keeping the events applied since the snapshot in memory. Every member started on a log
    /// attaches it, before its Raft starts.
    ///
    /// Its committed broker then also leaves queued bodies on disk, in the log, beyond
    /// `limits::MESSAGE_MEMORY_BYTES` ([`QueueStateMachine::message_memory`], S-CLU-82).
    #[must_use]
    pub fn with_log(self, group: u64, log: WalLogReader) -> QueueStateMachine {
        {
            let mut m = lock(&self.machine);
            m.group = group;
            m.voids.attach_log(log.clone());
            m.paging = Some(Paging {
                loader: Arc::new(log.loader()),
                log,
                budget: wharf_base::limits::MESSAGE_MEMORY_BYTES,
            });
            let broker = std::mem::take(&mut m.broker);
            m.set_broker(broker);
        }
        self
    }

    /// The content of queued messages the committed broker keeps in memory, at most (about;
    /// the node's `message_memory_bytes`): beyond, the oldest are left in the log and read
    /// back when needed (S-CLU-82). Only for a machine on a log.
    #[must_use]
    pub fn message_memory(self, budget: u64) -> QueueStateMachine {
        if let Some(p) = &mut lock(&self.machine).paging {
            p.budget = budget;
        }
        self
    }

    fn from_machine(machine: Machine) -> QueueStateMachine {
        QueueStateMachine {
            machine: Arc::new(Mutex::new(machine)),
            files: Arc::new(Mutex::new(())),
        }
    }

    /// Runs `f` on the committed state.
    pub fn with<T>(&self, f: impl FnOnce(&Machine) -> T) -> T {
        f(&lock(&self.machine))
    }
}

/// What [`Machine::take_snapshot`] took under the lock.
struct Taken {
    broker: wharf_broker::Snapshot,
    /// Reads back the messages the broker left on disk.
    loader: Option<Arc<GroupLoader>>,
    now_ms: u64,
    sessions: Sessions,
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    disk: Option<SnapshotDisk>,
}

/// Encodes what [`Machine::take_snapshot`] took and makes it the current snapshot, unless a
/// newer one was installed meanwhile (then nothing is built). With a disk, the encoding goes
/// to the snapshot file as it is made (`snapshot_file::write_streamed`), under `files`: no
/// buffer holds every queued body, which took a deep queue's size in fresh memory each build.
/// Without one, the bytes are kept. Holds `machine`'s lock only to look and to record. Returns
/// the build's metadata.
fn finish_build(
    machine: &Mutex<Machine>,
    files: &Mutex<()>,
    taken: Taken,
) -> Result<SnapshotMeta<u64, openraft::BasicNode>, StorageError> {
    let meta = taken.meta;
    let index = meta.last_log_id.map_or(0, |l| l.index);
    let _files = lock_files(files);
    if lock(machine).has_newer_snapshot(&meta) {
        return Ok(meta);
    }
    let failed = |e: SnapshotError| StorageIOError::write_snapshot(Some(meta.signature()), &e);
    let loader = taken
        .loader
        .as_deref()
        .map(|l| l as &dyn wharf_broker::MessageLoader);
    let current = if let Some(disk) = &taken.disk {
        let len = snapshot_file::write_streamed(disk.storage.as_ref(), &disk.dir, &meta, |out| {
            snapshot::encode_to_stream(
                &taken.broker,
                index,
                taken.now_ms,
                &taken.sessions,
                loader,
                out,
            )
        })
        .map_err(failed)?;
        StoredSnapshot {
            meta: meta.clone(),
            len,
            bytes: None,
        }
    } else {
        let bytes =
            snapshot::encode_taken(&taken.broker, index, taken.now_ms, &taken.sessions, loader)
                .map_err(failed)?;
        StoredSnapshot::new(meta.clone(), bytes, true)
    };
    lock(machine).record_snapshot(current);
    Ok(meta)
}

/// Builds a snapshot of the committed state at the moment it is asked.
pub struct MachineSnapshotBuilder {
    machine: Arc<Mutex<Machine>>,
    files: Arc<Mutex<()>>,
}

impl RaftSnapshotBuilder<TypeConfig> for MachineSnapshotBuilder {
    /// Only taking the broker's snapshot (a reference per message) holds the committed state's
    /// lock. Encoding every body and writing the file (seconds for a queue of a few hundred
    /// megabytes) run on a blocking thread, so entries go on being applied and the runtime's
    /// workers go on answering Raft (heartbeats, appends) meanwhile: a long pause there made
    /// followers time out their leader. The file is written under `files`, as an install's is.
    ///
    /// The snapshot handed back carries its metadata only, no bytes: openraft 0.9 keeps
    /// nothing of a build but its metadata (`core::sm::worker`'s `build_snapshot`), and reads
    /// the bytes it sends to a member with [`RaftStateMachine::get_current_snapshot`]. A copy
    /// of a snapshot holding every queued body for it to drop cost hundreds of megabytes.
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let taken = lock(&self.machine).take_snapshot();
        let (machine, files) = (Arc::clone(&self.machine), Arc::clone(&self.files));
        let meta = tokio::task::spawn_blocking(move || finish_build(&machine, &files, taken))
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))??;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
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
        self.apply_entries(entries)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        MachineSnapshotBuilder {
            machine: Arc::clone(&self.machine),
            files: Arc::clone(&self.files),
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
        let _files = lock_files(&self.files);
        let mut m = lock(&self.machine);
        // On disk before the state changes: openraft purges the log behind it next.
        m.keep_snapshot(meta, bytes)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        m.set_broker(decoded.broker);
        if let Some(p) = &m.paging {
            // Nothing it holds now was stamped: a snapshot's messages stay in memory.
            p.log.keep_segments_from(None);
        }
        m.now_ms = m.now_ms.max(decoded.now_ms);
        m.sessions = decoded.sessions;
        m.last_applied = meta.last_log_id;
        m.membership = meta.last_membership.clone();
        m.compaction.covered();
        Ok(())
    }

    /// Read from the snapshot file on a blocking thread (a deep queue's snapshot is hundreds of
    /// megabytes), without `files`: a build or an install replaces the file by a rename, so a
    /// read gets one whole file, with its own metadata, and does not wait (with openraft's
    /// state machine task) for a build to end.
    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let machine = Arc::clone(&self.machine);
        let data = tokio::task::spawn_blocking(move || {
            let source = lock(&machine).snapshot_source();
            source.map_or(Ok(None), SnapshotSource::read)
        })
        .await
        .map_err(|e| StorageIOError::read_snapshot(None, &e))?
        .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(data.map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;
    use openraft::CommittedLeaderId;

    fn at(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    /// A build that took the state at index 5 finishes after a snapshot of index 9 was
    /// installed: the installed one stays current, in memory and in the file (S-CLU-4, S-CLU-7).
    #[test]
    fn a_build_finishing_after_a_newer_install_keeps_the_newer_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(wharf_wal::FileStorage);
        let sm = QueueStateMachine::open(Arc::clone(&storage), dir.path()).unwrap();
        lock(&sm.machine).last_applied = Some(at(5));
        let taken = lock(&sm.machine).take_snapshot();

        let newer = {
            let mut m = lock(&sm.machine);
            m.last_applied = Some(at(9));
            m.take_snapshot()
        };
        let installed = snapshot::encode_taken(&newer.broker, 9, 0, &newer.sessions, None).unwrap();
        {
            let _files = lock_files(&sm.files);
            lock(&sm.machine)
                .keep_snapshot(&newer.meta, installed)
                .unwrap();
        }

        let meta = finish_build(&sm.machine, &sm.files, taken).unwrap();
        assert_eq!(
            meta.last_log_id,
            Some(at(5)),
            "the build hands back what it built"
        );
        assert_eq!(sm.with(Machine::snapshot_last_log_id), Some(at(9)));
        let (on_disk, _) = snapshot_file::read(storage.as_ref(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(on_disk.last_log_id, Some(at(9)));
    }

    /// S-CLU-80, wiring: the machine counts what it applies, asks after `every` entries (an
    /// empty broker: the count alone), and a build starts the count again.
    #[tokio::test]
    async fn the_machine_asks_for_a_snapshot_after_every_entries_and_a_build_resets() {
        let sm = QueueStateMachine::new();
        let wake = lock(&sm.machine).compaction.listen(SnapshotRule {
            every: 3,
            bytes: u64::MAX,
        });
        let blank = |i| Entry {
            log_id: at(i),
            payload: EntryPayload::Blank,
        };
        let asked = || {
            let notified = wake.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable()
        };
        sm.apply_entries([blank(1), blank(2)]).unwrap();
        assert!(!asked(), "2 entries of 3");
        sm.apply_entries([blank(3)]).unwrap();
        assert!(asked(), "3 entries");

        let mut handle = sm.clone();
        let built = handle
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(built.meta.last_log_id, Some(at(3)));
        assert_eq!(sm.with(Machine::entries_since_snapshot), 0);
        assert!(sm.with(Machine::snapshot_bytes) > 0);
        sm.apply_entries([blank(4), blank(5)]).unwrap();
        assert!(!asked(), "2 entries since the build");
        sm.apply_entries([blank(6)]).unwrap();
        assert!(asked(), "3 entries since the build, nothing queued");
    }

    /// A machine with a disk keeps no snapshot bytes in memory, whether it built the snapshot,
    /// installed it or found it in its file at a restart: openraft gets the file's bytes, the
    /// very ones built (S-CLU-4, S-CLU-7). A machine without a disk keeps them.
    #[tokio::test]
    async fn a_machine_with_a_disk_hands_out_its_snapshot_from_the_file_and_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(wharf_wal::FileStorage);
        let mut sm = QueueStateMachine::open(Arc::clone(&storage), dir.path()).unwrap();
        assert!(sm.get_current_snapshot().await.unwrap().is_none());
        lock(&sm.machine).last_applied = Some(at(5));
        let built = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let kept = |sm: &QueueStateMachine| lock(&sm.machine).snapshot.clone().unwrap();
        assert!(kept(&sm).bytes.is_none(), "built: not kept in memory");
        let (_, on_disk) = snapshot_file::read(storage.as_ref(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(sm.with(Machine::snapshot_bytes), on_disk.len() as u64);
        // A build or an install writing its temporary file meanwhile is left alone.
        let tmp = dir.path().join(snapshot_file::TEMPORARY_NAME);
        std::fs::write(&tmp, b"being written").unwrap();
        let handed = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(handed.meta, built.meta);
        assert_eq!(handed.snapshot.into_inner(), on_disk);
        assert!(tmp.exists(), "the temporary file stays");
        std::fs::remove_file(&tmp).unwrap();

        let mut restarted = QueueStateMachine::open(Arc::clone(&storage), dir.path()).unwrap();
        assert!(kept(&restarted).bytes.is_none(), "restored: not kept");
        let handed = restarted.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(handed.meta, built.meta);
        assert_eq!(handed.snapshot.into_inner(), on_disk);

        let other = tempfile::tempdir().unwrap();
        let mut installed = QueueStateMachine::open(Arc::clone(&storage), other.path()).unwrap();
        installed
            .install_snapshot(&built.meta, Box::new(Cursor::new(on_disk.clone())))
            .await
            .unwrap();
        assert!(kept(&installed).bytes.is_none(), "installed: not kept");
        let handed = installed.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(handed.snapshot.into_inner(), on_disk);

        let mut memory = QueueStateMachine::new();
        lock(&memory.machine).last_applied = Some(at(5));
        memory
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let held = kept(&memory).bytes.unwrap();
        assert_eq!(memory.with(Machine::snapshot_bytes), held.len() as u64);
        let handed = memory.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(handed.snapshot.into_inner(), held);
    }

    /// Without a newer snapshot, the build becomes the current one and the file's.
    #[test]
    fn a_build_becomes_the_current_snapshot_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(wharf_wal::FileStorage);
        let sm = QueueStateMachine::open(Arc::clone(&storage), dir.path()).unwrap();
        lock(&sm.machine).last_applied = Some(at(5));
        let taken = lock(&sm.machine).take_snapshot();
        lock(&sm.machine).last_applied = Some(at(7));
        finish_build(&sm.machine, &sm.files, taken).unwrap();
        assert_eq!(sm.with(Machine::snapshot_last_log_id), Some(at(5)));
        let (on_disk, _) = snapshot_file::read(storage.as_ref(), dir.path())
            .unwrap()
            .unwrap();
        assert_eq!(on_disk.last_log_id, Some(at(5)));
    }
}
