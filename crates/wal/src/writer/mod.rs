//! Group commit. Producers ([`Appender`], `Clone + Send + Sync`) frame their records into a
//! shared pending buffer and get an Lsn and a position at once; one writer thread takes
//! whatever is pending, writes it with one positional write per segment, makes it durable
//! with one `fdatasync`, then advances the durable watermark, which completes every waiter of
//! the batch (blocking, or as a std [`Future`] woken by its [`Waker`]). After a failed write or
//! sync the log latches its failure (fail-stop, STYLE 3.3): waiters of records not yet durable
//! and every later append get [`WalError::Failed`], and nothing is retried.
//!
//! A full disk is the one exception, and only where it is safe: every segment reserves its
//! whole size when it is created ([`StorageFile::reserve`], `fallocate`), so the disk runs out
//! when a new segment cannot be created, before any record is written into it. The writer then
//! keeps the records it holds (their Lsns and positions are already given out), reports
//! [`Appender::disk_full`], and retries every [`limits::DISK_FULL_RETRY`] (or at
//! [`Appender::retry_now`]) until space returns; nothing confirmed is touched (S-DUR-3). A write
//! or sync error inside a segment stays fail-stop: nothing can be assumed about its bytes.
//!
//! Must not depend on tokio or any executor: the server bridges through the `Future` or the
//! watermark.
//!
//! This module holds the state the [`Wal`](crate::Wal), its appenders and the writer thread
//! share; `appender` the producers' side, `group_commit` the writer thread, `segment` creating
//! and preallocating segment files.

mod appender;
mod group_commit;
mod segment;
mod spool;

pub use appender::{Appended, Appender, Durable};
pub(crate) use group_commit::Writer;
pub(crate) use segment::prepare_active;
pub(crate) use spool::remove_stale as remove_stale_spools;
pub use spool::{SPOOL_COPY_BYTES, SPOOL_FILE_SUFFIX, Spool, Spooler, is_spool_file_name};
use spool::{SpoolFile, Spools};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use bytes::Bytes;

use crate::error::WalError;
use crate::ids::{Lsn, Position, SegmentId};
use crate::mark::{DurableMark, MarkFile};

use crate::recovery::segment_file_name;
use crate::storage::{Storage, StorageFile};
use crate::sync_stats::SyncStats;
use wharf_base::limits;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves its state consistent before anything that can
    // panic, so a poisoned lock still guards valid data; recovering keeps one panicking
    // producer from taking the whole log down with it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The bytes of consecutive records for one segment, not yet written.
#[derive(Debug)]
struct Chunk {
    segment: SegmentId,
    /// `Some(first Lsn)` when the writer must create this segment before writing.
    creates_segment: Option<Lsn>,
    /// File offset of `bytes[0]`.
    offset: u64,
    bytes: Vec<u8>,
    /// Large payload tails held by reference instead of copied into `bytes` (a message
    /// body): each goes into the file just before `bytes[at]`, in order.
    splices: Vec<(usize, Splice)>,
    /// Per record: where its frame starts in `bytes`, and its payload's CRC.
    frames: Vec<(usize, u32)>,
    first_lsn: Lsn,
    last_lsn: Lsn,
}

/// A payload tail held by reference until written.
#[derive(Debug)]
enum Splice {
    /// Bytes in memory, written from where they are.
    Memory(Bytes),
    /// A spooled body (S-BIG-3), copied from its file in bounded pieces.
    Spooled(Arc<SpoolFile>),
}

impl Splice {
    fn len(&self) -> usize {
        match self {
            Splice::Memory(b) => b.len(),
            Splice::Spooled(f) => usize::try_from(f.len).unwrap_or(usize::MAX),
        }
    }
}

/// A stretch of a chunk in file order.
enum Piece<'a> {
    Memory(&'a [u8]),
    Spooled(&'a SpoolFile),
}

impl Chunk {
    /// Bytes this chunk takes in its segment: `bytes` and every splice.
    fn len(&self) -> usize {
        self.bytes.len() + self.splices.iter().map(|(_, s)| s.len()).sum::<usize>()
    }

    /// The chunk in file order: stretches of `bytes` with the splices between them.
    fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        let mut from = 0;
        let mut out = Vec::with_capacity(2 * self.splices.len() + 1);
        for (at, splice) in &self.splices {
            out.push(Piece::Memory(self.bytes.get(from..*at).unwrap_or_default()));
            out.push(match splice {
                Splice::Memory(b) => Piece::Memory(&b[..]),
                Splice::Spooled(f) => Piece::Spooled(f),
            });
            from = *at;
        }
        out.push(Piece::Memory(self.bytes.get(from..).unwrap_or_default()));
        out.into_iter()
            .filter(|p| !matches!(p, Piece::Memory(b) if b.is_empty()))
    }
}

/// Payload tails at least this long are held by reference until written, not copied into the
/// pending buffer (S-BIG-3).
pub(crate) const SPLICE_BYTES_MIN: usize = 64 * 1024;
/// Emptied pending buffers larger than this are freed, not kept for reuse.
const SPARE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// What producers share with the writer thread, under one lock.
#[derive(Debug)]
struct Pending {
    next_lsn: Lsn,
    /// Where the next frame goes.
    tail: Position,
    chunks: Vec<Chunk>,
    bytes: usize,
    /// The latched failure: every append is refused once it is set.
    failed: Option<WalError>,
    closed: bool,
    /// Emptied buffers handed back by the writer, so steady state allocates nothing.
    spare: Vec<Vec<u8>>,
    /// Something pending is wanted durable: a record appended to be (`Appender::append`), a
    /// waiter's, or room an appender waits for. Until then the writer leaves pending records
    /// alone, so a lazy one (`Appender::append_lazy`) rides with the next batch even when the
    /// writer is busy as it arrives, instead of costing an fsync of its own after that batch.
    wanted: bool,
    /// The last record the writer has taken: a waiter for one up to it needs no batch more.
    taken_through: Lsn,
}

impl Pending {
    /// Whether the writer thread takes what is pending now: something is, and it is wanted
    /// durable, or the log is closing (drained whatever it holds).
    fn ready(&self) -> bool {
        !self.chunks.is_empty() && (self.wanted || self.closed)
    }
}

/// The durable watermark and everyone waiting on it.
#[derive(Debug)]
struct Durability {
    state: Mutex<DurableState>,
    changed: Condvar,
    /// Mirror of `state.durable` for lock-free reads.
    watermark: AtomicU64,
}

#[derive(Debug)]
struct DurableState {
    durable: Lsn,
    failed: Option<WalError>,
    closed: bool,
    /// Async waiters by (Lsn, registration id).
    wakers: BTreeMap<(Lsn, u64), Waker>,
    next_waker_id: u64,
}

impl Durability {
    fn check(state: &DurableState, lsn: Lsn) -> Option<Result<(), WalError>> {
        if state.durable >= lsn {
            Some(Ok(()))
        } else if let Some(err) = &state.failed {
            Some(Err(err.clone()))
        } else if state.closed {
            Some(Err(WalError::Closed))
        } else {
            None
        }
    }

    fn advance(&self, lsn: Lsn) {
        let mut state = lock(&self.state);
        assert!(
            lsn >= state.durable,
            "durable watermark moving back to {lsn}"
        );
        state.durable = lsn;
        self.watermark.store(lsn.0, Ordering::Release);
        let later = state.wakers.split_off(&(lsn.next(), 0));
        let ready = std::mem::replace(&mut state.wakers, later);
        drop(state);
        self.changed.notify_all();
        ready.into_values().for_each(Waker::wake);
    }

    /// Wakes every async waiter without changing anything (an inline writer's retry on a
    /// full disk, [`crate::Appender::retry_now`]).
    pub(crate) fn wake_all(&self) {
        let all = std::mem::take(&mut lock(&self.state).wakers);
        all.into_values().for_each(Waker::wake);
    }

    fn finish(&self, failed: Option<WalError>) {
        let mut state = lock(&self.state);
        if state.failed.is_none() {
            state.failed = failed;
        }
        state.closed = true;
        let all = std::mem::take(&mut state.wakers);
        drop(state);
        self.changed.notify_all();
        all.into_values().for_each(Waker::wake);
    }
}

/// State shared by the [`Wal`](crate::Wal), its appenders and its writer thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    segment_bytes_max: u64,
    payload_bytes_max: usize,
    pending_bytes_max: usize,
    pending: Mutex<Pending>,
    /// Wakes the writer (work or close) and producers waiting for buffer space.
    work: Condvar,
    space: Condvar,
    durability: Durability,
    /// Segments with an id below this are sealed and durably followed by a newer segment:
    /// they may be mapped and deleted.
    pub(crate) sealed_below: AtomicU64,
    /// Counters for operators and benches.
    counters: Counters,
    /// The writer is paused because a new segment found no space (see the module doc).
    disk_full: AtomicBool,
    /// Wakes a writer paused on a full disk before its retry period ends.
    retry: Condvar,
    /// Sync latency and batch-size histograms (the metrics endpoint's).
    sync_stats: SyncStats,
    /// Whether the writer runs inline (`WalConfig::inline_writer`): no thread; whoever waits
    /// for durability runs it.
    pub(crate) inline: bool,
    /// The inline writer, until it is closed or failed (always `None` with a writer thread).
    inline_writer: InlineWriter,
    /// Spooled bodies still held (S-BIG-3).
    spools: Arc<Spools>,
}

/// The slot of an inline writer. It holds an `Arc` of the [`Shared`] that holds it: the
/// cycle is broken when the log closes (`Wal::stop` takes the writer out).
#[derive(Default)]
struct InlineWriter(Mutex<Option<Writer>>);

impl std::fmt::Debug for InlineWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InlineWriter")
    }
}

#[derive(Debug, Default)]
struct Counters {
    writes: AtomicU64,
    syncs: AtomicU64,
    bytes: AtomicU64,
    records: AtomicU64,
    spooled: AtomicU64,
}

/// Counters of the writer since the log was opened: how well group commit is batching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalStats {
    /// Positional writes of record bytes (one per segment per batch).
    pub writes: u64,
    /// `fdatasync` calls after record writes (segment creation and sealing not counted).
    pub syncs: u64,
    /// Record bytes written (frames, headers included).
    pub bytes: u64,
    /// Records made durable.
    pub records: u64,
    /// Body bytes copied into records from spool files (S-BIG-3), included in `bytes`.
    pub spooled_bytes: u64,
}

/// How the writer starts: the result of recovery.
pub(crate) struct Start {
    /// The durable mark, rewritten after each batch.
    pub(crate) mark: MarkFile,
    /// What the mark says at open.
    pub(crate) recovered: DurableMark,
    pub(crate) active: ActiveSegment,
    pub(crate) next_lsn: Lsn,
    pub(crate) segment_bytes_max: u64,
    pub(crate) pending_bytes_max: usize,
    pub(crate) preallocate: bool,
    /// The resumed active segment could not reserve the rest of its size: no record goes
    /// into it any more, the first one rolls to a new segment (which waits for space).
    pub(crate) active_unreserved: bool,
}

/// The segment the writer appends to.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub(crate) id: SegmentId,
    pub(crate) file: Box<dyn StorageFile>,
    /// End of the last record written.
    pub(crate) end: u64,
    /// File length (greater than `end` when preallocated).
    pub(crate) allocated: u64,
}

impl Shared {
    pub(crate) fn new(
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        start: &Start,
        inline: bool,
    ) -> Self {
        // A record larger than a segment's room gets a segment of its own (format 3).
        let payload_bytes_max = limits::RECORD_PAYLOAD_BYTES_MAX;
        let durable = Lsn(start.next_lsn.0 - 1);
        // An unreserved active segment counts as full, so that the next record rolls.
        let tail_offset = if start.active_unreserved {
            start.segment_bytes_max
        } else {
            start.active.end
        };
        Self {
            dir,
            storage,
            segment_bytes_max: start.segment_bytes_max,
            payload_bytes_max,
            pending_bytes_max: start.pending_bytes_max,
            pending: Mutex::new(Pending {
                next_lsn: start.next_lsn,
                tail: Position {
                    segment: start.active.id,
                    offset: tail_offset,
                },
                chunks: Vec::new(),
                bytes: 0,
                failed: None,
                closed: false,
                spare: Vec::new(),
                wanted: false,
                taken_through: durable,
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            durability: Durability {
                state: Mutex::new(DurableState {
                    durable,
                    failed: None,
                    closed: false,
                    wakers: BTreeMap::new(),
                    next_waker_id: 0,
                }),
                changed: Condvar::new(),
                watermark: AtomicU64::new(durable.0),
            },
            sealed_below: AtomicU64::new(start.active.id.0),
            counters: Counters::default(),
            disk_full: AtomicBool::new(false),
            retry: Condvar::new(),
            sync_stats: SyncStats::default(),
            inline,
            inline_writer: InlineWriter::default(),
            spools: Arc::default(),
        }
    }

    /// A handle opening spools in the log's directory.
    pub(crate) fn spooler(&self) -> Spooler {
        Spooler {
            dir: self.dir.clone(),
            storage: Arc::clone(&self.storage),
            spools: Arc::clone(&self.spools),
        }
    }

    /// Installs the writer of an inline log (`Wal::open`).
    pub(crate) fn set_inline_writer(&self, writer: Writer) {
        *lock(&self.inline_writer.0) = Some(writer);
    }

    /// Runs one step of the inline writer on this thread for a waiter of `lsn`: everything
    /// pending is written and synced as one batch. `Ok` when the waiter should look at the
    /// watermark again (a step was taken, or the writer is done and the outcome latched);
    /// a full disk (not latched: the next step retries), a failure, or a wait for a record
    /// never appended (nothing could ever make it durable) as an error.
    pub(crate) fn step_inline(&self, lsn: Lsn) -> Result<(), WalError> {
        let mut slot = lock(&self.inline_writer.0);
        let Some(writer) = slot.as_mut() else {
            return Ok(());
        };
        match writer.step() {
            Ok(true) => Ok(()),
            Ok(false) => Err(WalError::NotAppended { lsn }),
            Err((err, done)) => {
                if done {
                    *slot = None;
                }
                Err(err)
            }
        }
    }

    /// Closes an inline writer (drains what is pending); nothing with a writer thread.
    pub(crate) fn close_inline(&self) {
        let writer = lock(&self.inline_writer.0).take();
        if let Some(writer) = writer {
            writer.close_inline();
        }
    }

    pub(crate) fn stats(&self) -> WalStats {
        let c = &self.counters;
        WalStats {
            writes: c.writes.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            records: c.records.load(Ordering::Relaxed),
            spooled_bytes: c.spooled.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn segment_path(&self, id: SegmentId) -> PathBuf {
        self.dir.join(segment_file_name(id))
    }

    /// A waiter wants `lsn` durable: if it is still pending, the writer takes it even if it
    /// was appended lazily (a waiter of a lazy record is then not left waiting for another
    /// one). A record the writer has taken already asks for nothing: a lazy one pending
    /// meanwhile keeps waiting for a batch of its own kind to ride with.
    pub(crate) fn want(&self, lsn: Lsn) {
        let mut pending = lock(&self.pending);
        if pending.wanted || pending.chunks.is_empty() || lsn <= pending.taken_through {
            return;
        }
        pending.wanted = true;
        drop(pending);
        self.work.notify_one();
    }

    /// Asks the writer to finish what is pending and stop.
    pub(crate) fn close(&self) {
        lock(&self.pending).closed = true;
        self.work.notify_all();
        self.space.notify_all();
        self.retry.notify_all();
    }
}
