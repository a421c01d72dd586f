//! [`WalLogStore`]: openraft's `RaftLogStorage` on wharf's WAL (DESIGN "Replication", "The
//! Raft log is the WAL"). Every change is a record (`record.rs`): entries, votes, truncations
//! and purges, appended in the order openraft asks for them; reopening replays them in Lsn
//! order to rebuild the log. `append` does not wait for the disk: a flusher task awaits the
//! WAL's durability of the last record and only then fires openraft's flush callback, so the
//! WAL's group commit (one `fdatasync` for everything pending) is what confirms entries
//! (S-CLU-1). A vote waits for its own fsync before `save_vote` returns, as openraft requires.
//!
//! The committed log id is a record too (`save_committed`), so a restarted member re-applies
//! its committed entries on top of its snapshot file (`state_machine.rs`) before it hears from
//! a leader. It is appended lazily (`Appender::append_lazy`): it never wakes the WAL's writer,
//! and is synced with the next entries. openraft saves the committed id once per commit, on
//! the leader and on every follower (through the append that tells it): appended like an
//! entry, it took an `fdatasync` of its own, so each entry cost every member two syncs in a
//! row, the second in the way of the next entry's.
//!
//! After a purge, the segments wholly before the first entry still held are deleted (the
//! vote and committed mark are logged again first, so nothing in them is needed).
//!
//! **wharf today:** the store owns its WAL (one group per WAL) and keeps the entries it holds
//! in memory until they are purged.

#![expect(
    clippy::result_large_err,
    reason = "openraft's StorageError is the error its storage traits require; helpers return it as is"
)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::raft::AppendEntriesRequest;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError};
use tokio::sync::mpsc;
use wharf_base::limits;
use wharf_wal::{Appender, Lsn, Position, Reader, RecordRef, Storage, Wal, WalConfig, WalError};

use crate::paging::stamp;

use crate::record::{self, RAFT_FORMAT_VERSION, RaftRecord};
use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig, Vote};

/// What reopening a log found, and why it could not.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The WAL itself would not open (damage, I/O).
    #[error("the Raft log's WAL did not open")]
    Wal(#[from] wharf_wal::RecoveryError),
    /// A record of this group does not decode, or announces a newer format.
    #[error("Raft record at {lsn:?} of group {group}: {reason}")]
    Record {
        /// The group.
        group: u64,
        /// Where.
        lsn: Lsn,
        /// What is wrong.
        reason: String,
    },
    /// The format marker could not be written.
    #[error("writing the Raft format marker")]
    Append(#[from] WalError),
}

/// The log as memory holds it: what the records replayed so far say.
#[derive(Debug, Default)]
struct Log {
    /// The entries whose events memory holds: the newest of `held` (those after the ones
    /// [`WalLogReader::release`] let go).
    entries: BTreeMap<u64, Entry>,
    /// Every entry the log holds, by index: where its record is in the WAL (what a
    /// reclamation must keep, and where an entry no longer in memory is read back from).
    held: BTreeMap<u64, Held>,
    vote: Option<Vote>,
    last_purged: Option<LogId>,
    committed: Option<LogId>,
    /// Entries a purge removed, not yet freed: freeing the last copies of a deep queue's
    /// bodies takes long (a second for a million messages), and openraft purges from its
    /// core task, which answers nothing meanwhile; `purge` frees them on a blocking thread.
    purged: Vec<BTreeMap<u64, Entry>>,
}

/// Where an entry the log holds is: its log id, its record's Lsn and position; and about
/// the bytes its events take in memory ([`entry_bytes`], counted once as it is appended).
#[derive(Debug, Clone, Copy)]
struct Held {
    log_id: LogId,
    lsn: Lsn,
    position: Position,
    bytes: usize,
}

impl Log {
    /// Applies one record at `lsn` and `position`, as `append`, `truncate`, `purge` and
    /// `save_vote` did when they wrote it (and as reopening replays it).
    fn replay(&mut self, record: RaftRecord, lsn: Lsn, position: Position) {
        match record {
            RaftRecord::Format { .. } => {}
            RaftRecord::Vote { vote, .. } => self.vote = Some(vote),
            RaftRecord::Entry { entry, .. } => {
                // openraft truncates before it appends over a conflict; an entry at or below
                // the last one can only follow a truncation record, so this removes nothing
                // on a log openraft wrote. It keeps the log free of holes if it ever did.
                let index = entry.log_id.index;
                self.entries.split_off(&index);
                self.held.split_off(&index);
                self.held.insert(
                    index,
                    Held {
                        log_id: entry.log_id,
                        lsn,
                        position,
                        bytes: entry_bytes(&entry),
                    },
                );
                self.entries.insert(index, entry);
            }
            RaftRecord::Truncate { index, .. } => {
                self.entries.split_off(&index);
                self.held.split_off(&index);
            }
            RaftRecord::Purge { log_id, .. } => {
                let kept = self.entries.split_off(&(log_id.index + 1));
                self.purged.push(std::mem::replace(&mut self.entries, kept));
                self.held = self.held.split_off(&(log_id.index + 1));
                if self.last_purged.is_none_or(|p| p < log_id) {
                    self.last_purged = Some(log_id);
                }
            }
            RaftRecord::Committed { log_id, .. } => {
                if log_id > self.committed {
                    self.committed = log_id;
                }
            }
        }
    }

    fn state(&self) -> LogState<TypeConfig> {
        let last = self.held.values().next_back().map(|h| h.log_id);
        LogState {
            last_purged_log_id: self.last_purged,
            last_log_id: last.or(self.last_purged),
        }
    }

    /// The entries of `range`: those memory let go as where to read them back, then those it
    /// holds, in index order.
    fn range(&self, range: impl RangeBounds<u64> + Clone) -> (Vec<Held>, Vec<Entry>) {
        let first_in_memory = self.entries.keys().next().copied().unwrap_or(u64::MAX);
        let on_disk = self
            .held
            .range(range.clone())
            .take_while(|(i, _)| **i < first_in_memory)
            .map(|(_, h)| *h)
            .collect();
        let in_memory = self.entries.range(range).map(|(_, e)| e.clone()).collect();
        (on_disk, in_memory)
    }
}

fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    // A panic while holding the lock left a log we cannot trust; stopping is right (STYLE 3.1).
    #[expect(
        clippy::expect_used,
        reason = "a poisoned lock means a panic mid-update: fail-stop"
    )]
    log.lock().expect("Raft log lock poisoned")
}

/// A flush to report once the WAL is durable through `lsn`.
type Pending = (Lsn, LogFlushed<TypeConfig>);

/// Sends a leader's entries to the group's other members as its log takes them, before they
/// are durable on it ([`WalLogStore::sending_early`]). Must not block.
pub type EarlySend = Arc<dyn Fn(AppendEntriesRequest<TypeConfig>) + Send + Sync>;

/// A Raft group's log on a WAL. Cheap to read from several replication tasks
/// ([`WalLogReader`]); written only by openraft's storage task.
pub struct WalLogStore {
    group: u64,
    /// The tag of its stamps (`paging::next_log_tag`).
    tag: u64,
    log: Arc<Mutex<Log>>,
    keep_segment: Arc<AtomicU64>,
    appender: Appender,
    wal_reader: Reader,
    flushes: mpsc::Sender<Pending>,
    wal: Option<Wal>,
    /// The thread of the last reclamation's segment deletions ([`WalLogStore::reclaim`]),
    /// joined before the WAL closes.
    deleting: Option<std::thread::JoinHandle<()>>,
    /// This member's id and where its entries go early while it leads
    /// ([`WalLogStore::sending_early`]).
    early: Option<(NodeId, EarlySend)>,
}

/// Reads entries of a [`WalLogStore`] (openraft's replication tasks hold one each).
#[derive(Clone)]
pub struct WalLogReader {
    group: u64,
    tag: u64,
    log: Arc<Mutex<Log>>,
    /// The oldest segment a message of the committed broker may be read back from
    /// ([`WalLogReader::keep_segments_from`]): a reclamation keeps it and every later one,
    /// and a page-out leaves only messages of those on disk. 0 until a snapshot sets it.
    keep_segment: Arc<AtomicU64>,
    appender: Appender,
    wal_reader: Reader,
}

impl WalLogStore {
    /// Opens (or creates) group `group`'s log in `dir`: replays every Raft record of the group
    /// in Lsn order, writes a format marker, and starts the flusher task (on the current tokio
    /// runtime). Records of other groups and of the store are skipped.
    ///
    /// # Errors
    /// [`OpenError`]: the WAL's own recovery errors, or a record of this group that does not
    /// decode or is of a newer format.
    pub fn open(
        dir: &Path,
        storage: Arc<dyn Storage>,
        config: &WalConfig,
        group: u64,
    ) -> Result<WalLogStore, OpenError> {
        let mut log = Log::default();
        let tag = crate::paging::next_log_tag();
        let mut bad: Option<OpenError> = None;
        let mut visit = |r: RecordRef<'_>| {
            if record::RaftKind::from_byte(r.kind).is_none() || bad.is_some() {
                return Ok(());
            }
            match record::decode(r.kind, r.payload) {
                Ok(rec) if rec.group() != group => {}
                Ok(RaftRecord::Format { version, .. }) if version > RAFT_FORMAT_VERSION => {
                    bad = Some(OpenError::Record {
                        group,
                        lsn: r.lsn,
                        reason: format!("format version {version} is newer than this build's"),
                    });
                }
                Ok(rec) => {
                    if let RaftRecord::Entry { entry, .. } = &rec {
                        stamp(entry, tag, r.lsn, r.position);
                    }
                    log.replay(rec, r.lsn, r.position);
                }
                Err(e) => {
                    bad = Some(OpenError::Record {
                        group,
                        lsn: r.lsn,
                        reason: e.to_string(),
                    });
                }
            }
            Ok(())
        };
        let (wal, _report) = Wal::open(dir, storage, config, &mut visit)?;
        if let Some(e) = bad {
            return Err(e);
        }
        log.purged.clear();
        let appender = wal.appender();
        let wal_reader = wal.reader();
        let (kind, payload) = record::encode(&RaftRecord::Format {
            group,
            version: RAFT_FORMAT_VERSION,
        })
        .map_err(|e| OpenError::Record {
            group,
            lsn: Lsn(0),
            reason: e.to_string(),
        })?;
        appender.append(kind, &payload)?;
        let (flushes, pending) = mpsc::channel(limits::RAFT_FLUSH_PENDING_MAX);
        tokio::spawn(flusher(appender.clone(), pending));
        Ok(WalLogStore {
            group,
            tag,
            log: Arc::new(Mutex::new(log)),
            keep_segment: Arc::default(),
            appender,
            wal_reader,
            flushes,
            wal: Some(wal),
            deleting: None,
            early: None,
        })
    }

    /// Hands the entries member `me` appends while it leads to `send` as soon as they are in
    /// the log, before its own fsync (S-CLU-90). openraft 0.9 waits for a leader's fsync before
    /// it replicates an entry, so a confirm waited for the leader's fsync and then a
    /// follower's; sent early, the followers write and sync theirs meanwhile, and openraft's
    /// own append, once the leader's copy is durable, finds them there and is answered at once.
    /// Safe as Raft allows a leader to replicate before it persists (Ongaro's thesis, 10.2.1):
    /// an entry still commits only once openraft counts a majority durable, the leader's own
    /// copy counted only after its fsync; the early request is an ordinary `AppendEntries` of
    /// the leader's committed vote, which a follower refuses, or applies as it would
    /// openraft's, whatever order the two arrive in.
    ///
    /// A leader restarted with its committed vote would lead the same term again (openraft
    /// 0.9's startup), and could then make a different entry under a log id it sent early
    /// before it crashed, which a follower may hold: so this member's own committed vote is
    /// read back uncommitted, and it campaigns for a new term instead.
    #[must_use]
    pub fn sending_early(mut self, me: NodeId, send: EarlySend) -> WalLogStore {
        if let Some(vote) = &mut lock(&self.log).vote
            && vote.leader_id.node_id == me
        {
            vote.committed = false;
        }
        self.early = Some((me, send));
        self
    }

    /// The request that sends `entries` early, when this member leads them: its vote is
    /// committed and theirs, and they follow the log's last entry.
    fn early_request(
        &self,
        me: NodeId,
        entries: &[Entry],
    ) -> Option<AppendEntriesRequest<TypeConfig>> {
        let log = lock(&self.log);
        let vote = log.vote?;
        let first = entries.first()?;
        let ours = |e: &Entry| {
            e.log_id.leader_id.term == vote.leader_id.term && e.log_id.leader_id.node_id == me
        };
        if !vote.committed || vote.leader_id.node_id != me || !entries.iter().all(ours) {
            return None;
        }
        let prev_log_id = log.state().last_log_id;
        if prev_log_id.map_or(0, |p| p.index + 1) != first.log_id.index {
            return None;
        }
        Some(AppendEntriesRequest {
            vote,
            prev_log_id,
            entries: entries.to_vec(),
            leader_commit: log.committed,
        })
    }

    /// The group this log belongs to.
    pub fn group(&self) -> u64 {
        self.group
    }

    /// A reader of this log (for tests and inspection, as openraft's replication uses).
    pub fn reader(&self) -> WalLogReader {
        WalLogReader {
            group: self.group,
            tag: self.tag,
            log: Arc::clone(&self.log),
            keep_segment: Arc::clone(&self.keep_segment),
            appender: self.appender.clone(),
            wal_reader: self.wal_reader.clone(),
        }
    }

    /// Appends `record` to the WAL without waiting, and applies it to the log in memory.
    fn write(&self, record: RaftRecord) -> Result<Lsn, StorageError> {
        self.write_with(record, Appender::append)
    }

    /// [`WalLogStore::write`] through `append` (`Appender::append`, or `append_lazy` for a
    /// record that must not cost a sync of its own).
    fn write_with(
        &self,
        record: RaftRecord,
        append: fn(&Appender, u8, &[u8]) -> Result<wharf_wal::Appended, WalError>,
    ) -> Result<Lsn, StorageError> {
        let (kind, payload) =
            record::encode(&record).map_err(|e| StorageIOError::write_logs(&e))?;
        let appended =
            append(&self.appender, kind, &payload).map_err(|e| StorageIOError::write_logs(&e))?;
        if let RaftRecord::Entry { entry, .. } = &record
            && !self.leads(entry)
        {
            stamp(entry, self.tag, appended.lsn, appended.position);
        }
        lock(&self.log).replay(record, appended.lsn, appended.position);
        Ok(appended.lsn)
    }

    /// Whether this member appends `entry` as its leader: its messages are its live broker's,
    /// which holds them in memory whatever the committed broker does, so they are not
    /// stamped with their place in this log.
    fn leads(&self, entry: &Entry) -> bool {
        self.early
            .as_ref()
            .is_some_and(|(me, _)| entry.log_id.leader_id.node_id == *me)
    }
}

impl WalLogStore {
    /// Deletes the WAL segments the log no longer needs after a purge (S-CLU-7): the vote, the
    /// committed mark and the format are logged again after everything, and once those are
    /// durable every sealed segment wholly before the first entry still held goes. Replaying
    /// what is left rebuilds the same log: the purge record is among the new records, and a
    /// truncation in a deleted segment only concerned entries in deleted segments.
    ///
    /// The deletions run on a thread of their own: unlinking a 64 MB segment took ~14 ms
    /// (220 ms for the 16 a 16-publisher step left), and openraft purges from its core task,
    /// which answers nothing meanwhile. While one reclamation's deletions run, the next purge
    /// reclaims nothing (a later one does); closing the store waits for them.
    async fn reclaim(&mut self) -> Result<(), ReclaimError> {
        let Some(reclaimer) = self.wal.as_ref().map(Wal::reclaimer) else {
            return Ok(());
        };
        if self.deleting.as_ref().is_some_and(|d| !d.is_finished()) {
            return Ok(());
        }
        let (vote, committed, first_kept) = {
            let log = lock(&self.log);
            (
                log.vote,
                log.committed,
                log.held.values().next().map(|h| h.lsn),
            )
        };
        let keep_segment = self.keep_segment.load(Ordering::Acquire);
        let rewritten = self.write(RaftRecord::Format {
            group: self.group,
            version: RAFT_FORMAT_VERSION,
        })?;
        if let Some(vote) = vote {
            self.write(RaftRecord::Vote {
                group: self.group,
                vote,
            })?;
        }
        let last = self.write(RaftRecord::Committed {
            group: self.group,
            log_id: committed,
        })?;
        self.appender.durable(last).await?;
        let keep_from = first_kept.map_or(rewritten, |f| f.min(rewritten));
        let mut segments = reclaimer.segments_through(Lsn(keep_from.0.saturating_sub(1)))?;
        // A message the committed broker left on disk stays readable (S-CLU-82).
        segments.retain(|s| s.0 < keep_segment);
        let group = self.group;
        let deleting = std::thread::Builder::new()
            .name("wharf-raft-reclaim".into())
            .spawn(move || {
                for segment in segments {
                    if let Err(e) = reclaimer.delete_segment(segment) {
                        // It goes at a later purge: the log is whole either way.
                        tracing::warn!(group, error = %e, "deleting a Raft log segment");
                        return;
                    }
                }
            })
            .map_err(ReclaimError::Thread)?;
        self.deleting = Some(deleting);
        Ok(())
    }
}

/// Why a reclamation stopped (the log stays whole; the next purge tries again).
#[derive(Debug, thiserror::Error)]
enum ReclaimError {
    #[error("logging the log's state again")]
    Storage(#[from] StorageError),
    #[error("waiting for the log to be durable")]
    Wal(#[from] WalError),
    #[error("listing the log's segments")]
    Segments(#[from] wharf_wal::RecoveryError),
    #[error("starting the thread that deletes segments")]
    Thread(#[source] std::io::Error),
}

impl Drop for WalLogStore {
    fn drop(&mut self) {
        if let Some(deleting) = self.deleting.take()
            && deleting.join().is_err()
        {
            tracing::error!(
                group = self.group,
                "the Raft log's segment deletions panicked"
            );
        }
        if let Some(wal) = self.wal.take()
            && let Err(e) = wal.close()
        {
            tracing::error!(group = self.group, error = %e, "closing a Raft log's WAL failed");
        }
    }
}

/// Fires each flush callback, in append order, once the WAL's group commit has made its last
/// record durable. Ends when the store is dropped.
async fn flusher(appender: Appender, mut pending: mpsc::Receiver<Pending>) {
    while let Some((lsn, callback)) = pending.recv().await {
        let result = appender.durable(lsn).await.map_err(std::io::Error::other);
        callback.log_io_completed(result);
    }
}

impl WalLogReader {
    /// The log's WAL counters (writes, `fdatasync`s, records) since it was opened: what an
    /// entry costs the disk.
    pub fn wal_stats(&self) -> wharf_wal::WalStats {
        self.appender.stats()
    }

    /// The entries held in `range` of indexes: a state machine rebuilding its broker reads
    /// them while it holds its own lock (those memory let go are read back from the WAL).
    ///
    /// # Errors
    /// An entry let go cannot be read back (I/O, damage).
    pub fn entries(&self, range: std::ops::Range<u64>) -> Result<Vec<Entry>, StorageError> {
        self.read(range)
    }

    /// The entries held in `range`, those memory let go read back first.
    fn read(&self, range: impl RangeBounds<u64> + Clone) -> Result<Vec<Entry>, StorageError> {
        let (on_disk, in_memory) = lock(&self.log).range(range);
        let mut entries = self.read_back(&on_disk, usize::MAX)?;
        entries.extend(in_memory);
        Ok(entries)
    }

    /// The entries of `on_disk`, read back from the WAL in order, until their sizes (about:
    /// `entry_bytes`) pass `budget` (at least the first).
    fn read_back(&self, on_disk: &[Held], budget: usize) -> Result<Vec<Entry>, StorageError> {
        let mut entries = Vec::with_capacity(on_disk.len().min(64));
        let mut bytes = 0usize;
        for held in on_disk {
            // Its size was counted as it was appended: an entry past the budget is not read.
            bytes = bytes.saturating_add(held.bytes);
            if bytes > budget && !entries.is_empty() {
                break;
            }
            entries.push(read_entry(&self.wal_reader, (self.group, self.tag), held)?);
        }
        Ok(entries)
    }

    /// Lets memory go of the events of every entry through index `through` that the WAL has
    /// made durable, but the newest ones (`RELEASE_KEEP_ENTRIES`, or `RELEASE_KEEP_BYTES` of
    /// them): each entry's record is read back when it is wanted again (a lagging member's
    /// append, a void's rebuild). The committed broker has applied them, and leaves their
    /// messages on disk too (S-CLU-82); the newest stay for a member a little behind.
    pub fn release(&self, through: u64) {
        let durable = self.appender.durable_lsn();
        let released = {
            let mut log = lock(&self.log);
            // Sizes counted at append: summing the events of 64 entries after every apply
            // batch was an eighth of a member's CPU.
            let mut kept_bytes = 0usize;
            let tail = log
                .held
                .iter()
                .rev()
                .take(RELEASE_KEEP_ENTRIES)
                .take_while(|(_, h)| {
                    kept_bytes = kept_bytes.saturating_add(h.bytes);
                    kept_bytes <= RELEASE_KEEP_BYTES
                })
                .last()
                .map_or(u64::MAX, |(i, _)| *i);
            let Some(cut) = log
                .held
                .range(..=through.min(tail.saturating_sub(1)))
                .rev()
                .find(|(_, h)| h.lsn <= durable)
                .map(|(i, _)| *i)
            else {
                return;
            };
            let kept = log.entries.split_off(&(cut + 1));
            std::mem::replace(&mut log.entries, kept)
        };
        drop(released);
    }

    /// Keeps the WAL segments from `oldest` (the oldest a message the committed broker left
    /// on disk is in; `None`: none is), or from the one the log's newest entry is in if that
    /// is older, through the next reclamations; and from now on lets the committed broker
    /// leave on disk only messages of those segments (S-CLU-82). The caller holds the
    /// committed broker still meanwhile: whatever it pages out later is in a segment kept.
    pub fn keep_segments_from(&self, oldest: Option<u64>) {
        let newest = lock(&self.log)
            .held
            .values()
            .next_back()
            .map(|h| h.position.segment.0);
        let keep = match (oldest, newest) {
            (Some(o), Some(n)) => o.min(n),
            (o, n) => o.or(n).unwrap_or(0),
        };
        self.keep_segment.store(keep, Ordering::Release);
    }

    /// The WAL's Lsn durable so far: a message whose record is at or below it may be left
    /// on disk.
    pub fn durable_lsn(&self) -> u64 {
        self.appender.durable_lsn().0
    }

    /// A reader of the messages this log stamped ([`crate::paging`]), with a cache of its own.
    pub fn loader(&self) -> crate::paging::GroupLoader {
        crate::paging::GroupLoader::new(
            self.group,
            self.tag,
            self.wal_reader.clone(),
            Arc::clone(&self.keep_segment),
        )
    }
}

/// The newest entries [`WalLogReader::release`] keeps in memory, at most.
const RELEASE_KEEP_ENTRIES: usize = 64;
/// ... and at most this many bytes of them.
const RELEASE_KEEP_BYTES: usize = 8 << 20;

/// Reads the entry `held` says where to find back from the WAL, and checks it is that entry.
/// `log` is the group and the log's stamp tag.
fn read_entry(reader: &Reader, log: (u64, u64), held: &Held) -> Result<Entry, StorageError> {
    let (group, tag) = log;
    let record = reader
        .read_at(held.position)
        .map_err(|e| StorageIOError::read_logs(&e))?;
    match record::decode(record.kind, &record.payload) {
        Ok(RaftRecord::Entry { group: g, entry }) if g == group && entry.log_id == held.log_id => {
            // Its messages are new copies: a committed broker rebuilt from them may leave
            // them on disk again (S-CLU-82).
            stamp(&entry, tag, held.lsn, held.position);
            Ok(entry)
        }
        Ok(_) => Err(StorageIOError::read_logs(&NotTheEntry(format!(
            "the record at {:?} is not entry {} of group {group}",
            held.position, held.log_id
        )))
        .into()),
        Err(e) => Err(StorageIOError::read_logs(&e).into()),
    }
}

/// A record read back is not the entry the log said was there.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotTheEntry(String);

impl RaftLogReader<TypeConfig> for WalLogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read(range)
    }

    /// What one append to a follower carries: the entries from `start`, up to about
    /// `limits::RAFT_APPEND_BYTES_MAX` bytes (at least one entry).
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        let (on_disk, in_memory) = lock(&self.log).range(start..end);
        if !on_disk.is_empty() {
            return self.read_back(&on_disk, limits::RAFT_APPEND_BYTES_MAX);
        }
        Ok(within_bytes(
            in_memory.iter(),
            limits::RAFT_APPEND_BYTES_MAX,
        ))
    }
}

/// The first of `entries` whose sizes (about: `entry_bytes`) add up to at most `budget`, and
/// at least the first one.
fn within_bytes<'a>(entries: impl Iterator<Item = &'a Entry>, budget: usize) -> Vec<Entry> {
    let mut taken = Vec::new();
    let mut bytes = 0usize;
    for entry in entries {
        bytes = bytes.saturating_add(entry_bytes(entry));
        if bytes > budget && !taken.is_empty() {
            break;
        }
        taken.push(entry.clone());
    }
    taken
}

/// About the bytes `entry` takes in an append (and in the log): its message bodies, 8 bytes
/// per message id an event lists (a settle, a purge, a delivery), and a little per event.
pub(crate) fn entry_bytes(entry: &Entry) -> usize {
    match &entry.payload {
        openraft::EntryPayload::Normal(proposal) => events_bytes(&proposal.events),
        _ => PER_EVENT,
    }
}

/// What [`entry_bytes`] counts for each event besides the bytes it carries.
const PER_EVENT: usize = 64;

/// About the bytes `events` take in an entry (see [`entry_bytes`]).
pub fn events_bytes(events: &[wharf_broker::Event]) -> usize {
    use wharf_broker::Event;
    events
        .iter()
        .map(|event| {
            PER_EVENT
                + match event {
                    Event::Published { message, .. } | Event::Scheduled { message, .. } => {
                        message.message.body.len()
                    }
                    Event::DeadLettered {
                        message: Some(message),
                        ..
                    } => message.message.body.len(),
                    Event::Settled { ids, .. }
                    | Event::Purged { ids, .. }
                    | Event::Delivered { ids, .. }
                    | Event::Returned { ids, .. }
                    | Event::DeadLetterHeld { ids, .. } => 8 * ids.len(),
                    _ => 0,
                }
        })
        .sum()
}

impl RaftLogReader<TypeConfig> for WalLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.reader().try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for WalLogStore {
    type LogReader = WalLogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(lock(&self.log).state())
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let lsn = self.write(RaftRecord::Vote {
            group: self.group,
            vote: *vote,
        })?;
        self.appender
            .durable(lsn)
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(lock(&self.log).vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let early = self
            .early
            .as_ref()
            .and_then(|(me, send)| Some((send, self.early_request(*me, &entries)?)));
        let mut last = self.appender.durable_lsn();
        for entry in entries {
            if let openraft::EntryPayload::Normal(p) = &entry.payload {
                p.events.mark_appended();
            }
            last = self.write(RaftRecord::Entry {
                group: self.group,
                entry,
            })?;
        }
        if let Some((send, request)) = early {
            send(request);
        }
        self.flushes
            .send((last, callback))
            .await
            .map_err(|_| StorageIOError::write_logs(&FlusherGone).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not waited for, and lazy (see the module's doc): losing it in a crash only means
        // re-applying fewer entries at the start; the leader's next append or heartbeat says
        // they are committed (a leader that sends neither leaves them unapplied: issue 17's
        // hang was a test cluster without heartbeats).
        self.write_with(
            RaftRecord::Committed {
                group: self.group,
                log_id: committed,
            },
            Appender::append_lazy,
        )
        .map(|_| ())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(lock(&self.log).committed)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Not waited for: a later append's fsync covers it (the WAL is ordered), and openraft
        // only relies on it once entries after it are flushed.
        self.write(RaftRecord::Truncate {
            group: self.group,
            index: log_id.index,
        })
        .map(|_| ())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write(RaftRecord::Purge {
            group: self.group,
            log_id,
        })?;
        let purged = std::mem::take(&mut lock(&self.log).purged);
        tokio::task::spawn_blocking(move || drop(purged));
        // A segment that cannot go now goes at a later purge: the log is whole either way.
        if let Err(e) = self.reclaim().await {
            tracing::warn!(group = self.group, error = %e, "reclaiming Raft log segments");
        }
        Ok(())
    }
}

/// The flusher task ended (its runtime shut down) while the store was still in use.
#[derive(Debug, thiserror::Error)]
#[error("the Raft log's flusher task has stopped")]
struct FlusherGone;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::{CommittedLeaderId, EntryPayload};
    use wharf_broker::{Event, Message, MessageId, MessageRecord, Properties, StoredSlot};

    use super::*;
    use crate::types::Proposal;

    /// Entry `index`, publishing one message of `body` bytes.
    fn publish(index: u64, body: usize) -> Entry {
        let message = Message {
            id: MessageId(index),
            enqueued_at_ms: 0,
            ttl_ms: None,
            exchange: String::new(),
            routing_key: "q".into(),
            properties: Properties::default(),
            body: bytes::Bytes::from(vec![0u8; body]),
            stored: StoredSlot::default(),
        };
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposal {
                now_ms: 0,
                events: vec![Event::Published {
                    vhost: "/".into(),
                    message: MessageRecord {
                        message: Arc::new(message),
                    },
                    queues: vec!["q".into()],
                    scheduled: None,
                }]
                .into(),
                origin: None,
            }),
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    /// A purge takes the entries up to its index out of the log and hands them over to be
    /// freed off openraft's core task: none is left behind in memory.
    /// S-CLU-82: once applied and durable, a log lets the events of its entries go but the
    /// newest `RELEASE_KEEP_ENTRIES`, and reads the others back from its WAL, the same.
    #[tokio::test]
    async fn s_clu_82_a_log_lets_applied_entries_go_and_reads_them_back() {
        let store = WalLogStore::open(
            std::path::Path::new("/raft"),
            Arc::new(wharf_wal::SimStorage::new(1)),
            // Nothing is durable until the test waits for it: with a writer thread, the
            // entries could be synced before the first release, which must find none durable.
            &WalConfig {
                inline_writer: true,
                ..WalConfig::default()
            },
            1,
        )
        .unwrap();
        let held = RELEASE_KEEP_ENTRIES + 36;
        let count = u64::try_from(held).unwrap();
        let mut last = Lsn(0);
        for i in 1..=count {
            let entry = publish(i, 100);
            last = store.write(RaftRecord::Entry { group: 1, entry }).unwrap();
        }
        let mut reader = store.reader();
        let before = reader.try_get_log_entries(1..=count).await.unwrap();
        reader.release(count);
        assert_eq!(lock(&store.log).entries.len(), held, "nothing durable yet");
        store.appender.durable(last).await.unwrap();
        reader.release(count);
        assert_eq!(lock(&store.log).entries.len(), RELEASE_KEEP_ENTRIES);
        assert_eq!(lock(&store.log).held.len(), held);
        let after = reader.try_get_log_entries(1..=count).await.unwrap();
        assert_eq!(format!("{before:?}"), format!("{after:?}"));
        // Read back within a budget, by the sizes counted at append: at least the first.
        let (on_disk_held, _) = lock(&store.log).range(1..=count);
        let two = on_disk_held[0].bytes + on_disk_held[1].bytes;
        assert_eq!(reader.read_back(&on_disk_held, two).unwrap().len(), 2);
        assert_eq!(reader.read_back(&on_disk_held, two - 1).unwrap().len(), 1);
        assert_eq!(reader.read_back(&on_disk_held, 0).unwrap().len(), 1);
        // An append carries those read back, then (the next one) those in memory.
        let on_disk = count - u64::try_from(RELEASE_KEEP_ENTRIES).unwrap();
        let limited = reader.limited_get_log_entries(1, count + 1).await.unwrap();
        assert_eq!(indexes(&limited), (1..=on_disk).collect::<Vec<_>>());
        let rest = reader
            .limited_get_log_entries(on_disk + 1, count + 1)
            .await
            .unwrap();
        assert_eq!(indexes(&rest), (on_disk + 1..=count).collect::<Vec<_>>());
        assert_eq!(reader.entries(5..9).unwrap().len(), 4);
    }

    /// S-CLU-82: a log stamps the messages of the entries it appends with their place in its
    /// WAL, and its loader reads one back once durable; a message another log stamped first
    /// (one `Arc` two logs of a process took) is left to that log: never paged out, never
    /// read back from this log's WAL.
    #[tokio::test]
    async fn s_clu_82_a_log_reads_back_only_the_messages_it_stamped() {
        use wharf_broker::{MessageLoader, PageOut};
        let open = |id| {
            WalLogStore::open(
                std::path::Path::new("/raft"),
                Arc::new(wharf_wal::SimStorage::new(id)),
                &WalConfig::default(),
                1,
            )
            .unwrap()
        };
        let (ours, theirs) = (open(1), open(2));
        // The other log holds another entry where ours holds this one.
        theirs
            .write(RaftRecord::Entry {
                group: 1,
                entry: publish(7, 1_000),
            })
            .unwrap();
        let entry = publish(1, 1_000);
        let message = entry_message(&entry);
        let lsn = ours
            .write(RaftRecord::Entry {
                group: 1,
                entry: entry.clone(),
            })
            .unwrap();
        theirs
            .write(RaftRecord::Truncate { group: 1, index: 1 })
            .unwrap();
        theirs.write(RaftRecord::Entry { group: 1, entry }).unwrap();
        let (loader, other) = (ours.reader().loader(), theirs.reader().loader());
        let slot = message.slot();
        assert!(slot.is_some(), "stamped");
        assert_eq!(
            loader.pages(slot, lsn.0 - 1),
            PageOut::Stop,
            "not durable yet"
        );
        ours.appender.durable(lsn).await.unwrap();
        assert_eq!(loader.pages(slot, lsn.0), PageOut::Page);
        assert_eq!(
            other.pages(slot, u64::MAX),
            PageOut::Skip,
            "the other log's"
        );
        assert_eq!(
            loader.pages(None, u64::MAX),
            PageOut::Skip,
            "a leader's own"
        );
        let (_, stored) = message.stored_ref().unwrap();
        let back = loader.load(&stored).unwrap();
        assert_eq!(back, *message);
        assert!(
            other.load(&stored).is_err(),
            "not in the other log's record"
        );
        // Kept segments only: once the log keeps from a later segment, the message stays.
        ours.reader().keep_segments_from(Some(u64::MAX - 1));
        let newest = lock(&ours.log)
            .held
            .values()
            .next_back()
            .unwrap()
            .position
            .segment
            .0;
        assert_eq!(ours.keep_segment.load(Ordering::Acquire), newest);
        ours.keep_segment.store(newest + 1, Ordering::Release);
        assert_eq!(loader.pages(slot, u64::MAX), PageOut::Skip);
    }

    #[tokio::test]
    async fn a_purge_hands_the_purged_entries_over_to_be_freed() {
        let disk = wharf_wal::SimStorage::new(1);
        let mut store = WalLogStore::open(
            std::path::Path::new("/raft"),
            Arc::new(disk),
            &WalConfig::default(),
            1,
        )
        .unwrap();
        for i in 1..=5 {
            let entry = publish(i, 1_000);
            store.write(RaftRecord::Entry { group: 1, entry }).unwrap();
        }
        let purged_message = {
            let log = lock(&store.log);
            Arc::downgrade(&entry_message(log.entries.get(&2).unwrap()))
        };
        store.purge(log_id_at(3)).await.unwrap();
        assert_eq!(
            lock(&store.log).entries.keys().copied().collect::<Vec<_>>(),
            [4, 5]
        );
        assert!(lock(&store.log).purged.is_empty(), "handed over, not kept");
        for _ in 0..200 {
            if purged_message.upgrade().is_none() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(
            purged_message.upgrade().is_none(),
            "a purged entry is freed"
        );
    }

    /// S-CLU-90: a member sends early only the entries it appends as the leader of its
    /// committed vote, right after its log's last entry; and a member opened to send early
    /// reads its own committed vote back uncommitted, so that it never leads a term again
    /// after a restart (and never makes a second entry under a log id it sent early).
    #[tokio::test]
    async fn only_a_leaders_own_next_entries_go_early_and_its_vote_is_read_back_uncommitted() {
        let open = || {
            WalLogStore::open(
                std::path::Path::new("/raft"),
                Arc::new(wharf_wal::SimStorage::new(1)),
                &WalConfig::default(),
                1,
            )
            .unwrap()
        };
        let noop: EarlySend = Arc::new(|_| {});
        let store = open().sending_early(1, Arc::clone(&noop));
        let mut leads = Vote::new(1, 1);
        leads.commit();
        // No vote yet: nothing goes early.
        assert!(store.early_request(1, &[publish(1, 10)]).is_none());
        store
            .write(RaftRecord::Vote {
                group: 1,
                vote: leads,
            })
            .unwrap();
        let sent = store
            .early_request(1, &[publish(0, 10), publish(1, 10)])
            .unwrap();
        assert_eq!(sent.vote, leads);
        assert_eq!(sent.prev_log_id, None);
        assert_eq!(indexes(&sent.entries), [0, 1]);
        store
            .write(RaftRecord::Entry {
                group: 1,
                entry: publish(0, 10),
            })
            .unwrap();
        store
            .write(RaftRecord::Committed {
                group: 1,
                log_id: Some(log_id_at(0)),
            })
            .unwrap();
        let sent = store.early_request(1, &[publish(1, 10)]).unwrap();
        assert_eq!(sent.prev_log_id, Some(log_id_at(0)));
        assert_eq!(sent.leader_commit, Some(log_id_at(0)));
        // Not after the last entry (a gap, or over it): not sent.
        assert!(store.early_request(1, &[publish(2, 10)]).is_none());
        assert!(store.early_request(1, &[publish(0, 10)]).is_none());
        // Another member's entries, or this member's under a vote not committed or not its own.
        assert!(store.early_request(2, &[publish(1, 10)]).is_none());
        let mut other = Vote::new(2, 2);
        other.commit();
        store
            .write(RaftRecord::Vote {
                group: 1,
                vote: other,
            })
            .unwrap();
        assert!(store.early_request(1, &[publish(1, 10)]).is_none());
        store
            .write(RaftRecord::Vote {
                group: 1,
                vote: Vote::new(1, 1),
            })
            .unwrap();
        assert!(store.early_request(1, &[publish(1, 10)]).is_none());

        // Reopened on the same disk with its own committed vote.
        let disk = wharf_wal::SimStorage::new(1);
        let dir = std::path::Path::new("/raft");
        let reopen = || WalLogStore::open(dir, Arc::new(disk.clone()), &WalConfig::default(), 1);
        let store = reopen().unwrap();
        store
            .write(RaftRecord::Vote {
                group: 1,
                vote: leads,
            })
            .unwrap();
        let last = store.write(RaftRecord::Format {
            group: 1,
            version: RAFT_FORMAT_VERSION,
        });
        store.appender.wait_durable(last.unwrap()).unwrap();
        drop(store);
        assert_eq!(lock(&reopen().unwrap().log).vote, Some(leads), "as saved");
        let store = reopen().unwrap().sending_early(1, Arc::clone(&noop));
        assert_eq!(lock(&store.log).vote, Some(Vote::new(1, 1)), "uncommitted");
        let store = reopen().unwrap().sending_early(2, noop);
        assert_eq!(lock(&store.log).vote, Some(leads), "another member's stays");
    }

    fn log_id_at(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn entry_message(entry: &Entry) -> Arc<Message> {
        match &entry.payload {
            EntryPayload::Normal(p) => match p.events.first() {
                Some(Event::Published { message, .. }) => Arc::clone(&message.message),
                _ => panic!("a publish"),
            },
            _ => panic!("a normal entry"),
        }
    }

    /// An append carries entries up to the byte budget, and always the first one.
    #[test]
    fn an_append_carries_entries_up_to_its_byte_budget() {
        let entries: Vec<Entry> = (1..=10).map(|i| publish(i, 300 * 1024)).collect();
        let taken = within_bytes(entries.iter(), limits::RAFT_APPEND_BYTES_MAX);
        assert_eq!(indexes(&taken), [1, 2, 3]);
        let huge = [publish(1, 3 * 1024 * 1024), publish(2, 10)];
        assert_eq!(
            indexes(&within_bytes(huge.iter(), limits::RAFT_APPEND_BYTES_MAX)),
            [1]
        );
        let small: Vec<Entry> = (1..=300).map(|i| publish(i, 100)).collect();
        assert_eq!(
            within_bytes(small.iter(), limits::RAFT_APPEND_BYTES_MAX).len(),
            300
        );
    }
}
