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

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::error::{IoOp, WalError};
use crate::record::{self, SEGMENT_HEADER_BYTES, SegmentHeader};
use crate::recovery::segment_file_name;
use crate::storage::{Storage, StorageFile};
use crate::{Lsn, Position, SegmentId};
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
    /// Per record: where its frame starts in `bytes`, and its payload's CRC.
    frames: Vec<(usize, u32)>,
    first_lsn: Lsn,
    last_lsn: Lsn,
}

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
    sync_stats: crate::sync_stats::SyncStats,
}

#[derive(Debug, Default)]
struct Counters {
    writes: AtomicU64,
    syncs: AtomicU64,
    bytes: AtomicU64,
    records: AtomicU64,
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
}

/// How the writer starts: the result of recovery.
pub(crate) struct Start {
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
    pub(crate) fn new(dir: PathBuf, storage: Arc<dyn Storage>, start: &Start) -> Self {
        let capacity =
            start.segment_bytes_max - (SEGMENT_HEADER_BYTES + record::FRAME_HEADER_BYTES) as u64;
        let payload_bytes_max =
            limits::RECORD_PAYLOAD_BYTES_MAX.min(usize::try_from(capacity).unwrap_or(usize::MAX));
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
            sync_stats: crate::sync_stats::SyncStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> WalStats {
        let c = &self.counters;
        WalStats {
            writes: c.writes.load(Ordering::Relaxed),
            syncs: c.syncs.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            records: c.records.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn segment_path(&self, id: SegmentId) -> PathBuf {
        self.dir.join(segment_file_name(id))
    }

    /// Asks the writer to finish what is pending and stop.
    pub(crate) fn close(&self) {
        lock(&self.pending).closed = true;
        self.work.notify_all();
        self.space.notify_all();
        self.retry.notify_all();
    }
}

/// A record's identity once appended: its Lsn and where its frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Appended {
    /// The record's Lsn.
    pub lsn: Lsn,
    /// Its position, for `Reader::read_at`.
    pub position: Position,
}

/// A producer's handle on the log: cheap to clone, `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Appender {
    pub(crate) shared: Arc<Shared>,
}

impl Appender {
    /// Appends one record without waiting: it gets its Lsn and position now and becomes
    /// durable with the writer's next batch. Blocks only while the pending buffer is full.
    ///
    /// # Errors
    /// [`WalError::RecordTooLarge`] (nothing appended), [`WalError::Failed`] after an I/O
    /// failure, [`WalError::Closed`] after close.
    ///
    /// # Panics
    /// Only when an internal invariant of the pending buffer is broken (a bug).
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Appended, WalError> {
        let shared = &*self.shared;
        if payload.len() > shared.payload_bytes_max {
            return Err(WalError::RecordTooLarge {
                len: payload.len(),
                max: shared.payload_bytes_max,
            });
        }
        // Hash outside the lock; the writer combines it into the frame CRC.
        let payload_crc = crc32fast::hash(payload);
        let frame_len = record::frame_bytes(payload.len());
        let mut pending = lock(&shared.pending);
        loop {
            if let Some(err) = &pending.failed {
                return Err(err.clone());
            }
            if pending.closed {
                return Err(WalError::Closed);
            }
            // Bounded buffer; an empty buffer always takes one record, however large.
            if pending.bytes == 0 || pending.bytes + frame_len <= shared.pending_bytes_max {
                break;
            }
            pending = shared
                .space
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let appended = place(&mut pending, shared.segment_bytes_max, frame_len);
        let chunk = pending
            .chunks
            .last_mut()
            .filter(|c| c.segment == appended.position.segment);
        let Some(chunk) = chunk else {
            unreachable!("place() always leaves a chunk for the record's segment")
        };
        let start = chunk.bytes.len();
        assert_eq!(
            chunk.offset + start as u64,
            appended.position.offset,
            "chunk bytes must end at the record's position"
        );
        record::encode_frame_header(&mut chunk.bytes, payload.len(), appended.lsn, kind);
        chunk.bytes.extend_from_slice(payload);
        chunk.frames.push((start, payload_crc));
        chunk.last_lsn = appended.lsn;
        pending.bytes += frame_len;
        drop(pending);
        shared.work.notify_one();
        Ok(appended)
    }

    /// Appends one record and blocks until it is durable (or the log fails).
    ///
    /// # Errors
    /// As [`Appender::append`] and [`Appender::wait_durable`].
    pub fn append_durable(&self, kind: u8, payload: &[u8]) -> Result<Appended, WalError> {
        let appended = self.append(kind, payload)?;
        self.wait_durable(appended.lsn)?;
        Ok(appended)
    }

    /// Blocks until `lsn` is durable.
    ///
    /// # Errors
    /// [`WalError::Failed`] when the log failed before `lsn` became durable, or
    /// [`WalError::Closed`] when it was closed first. Never reports a record durable that is
    /// not.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        let d = &self.shared.durability;
        let mut state = lock(&d.state);
        loop {
            if let Some(result) = Durability::check(&state, lsn) {
                return result;
            }
            state = d
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A `Future` that resolves when `lsn` is durable (same outcomes as
    /// [`Appender::wait_durable`]); usable from any executor, it needs none.
    pub fn durable(&self, lsn: Lsn) -> Durable {
        Durable {
            shared: Arc::clone(&self.shared),
            lsn,
            registration: None,
        }
    }

    /// The highest Lsn known durable: every record up to it is on stable storage. The server
    /// releases publisher confirms in bulk from it (S-DUR-3).
    pub fn durable_lsn(&self) -> Lsn {
        Lsn(self.shared.durability.watermark.load(Ordering::Acquire))
    }

    /// Counters of the writer since the log was opened.
    pub fn stats(&self) -> WalStats {
        self.shared.stats()
    }

    /// The histograms of sync latency and records per sync since the log was opened.
    pub fn sync_stats(&self) -> crate::sync_stats::SyncSnapshot {
        self.shared.sync_stats.snapshot()
    }

    /// The latched failure, if the log has failed.
    pub fn failure(&self) -> Option<WalError> {
        lock(&self.shared.pending).failed.clone()
    }

    /// Whether the writer is paused because the disk is full (a new segment could not be
    /// reserved). Records appended meanwhile are kept, in order, and become durable once
    /// space returns; appends block only when the pending buffer fills up.
    pub fn disk_full(&self) -> bool {
        self.shared.disk_full.load(Ordering::Acquire)
    }

    /// Asks a writer paused on a full disk to retry now (say, once the server saw free space
    /// come back) instead of at the end of its retry period. Does nothing otherwise.
    pub fn retry_now(&self) {
        let _guard = lock(&self.shared.pending);
        self.shared.retry.notify_all();
    }
}

/// Assigns the next Lsn and position for a frame of `frame_len` bytes, rolling to a new
/// segment when it does not fit, and makes sure a chunk for that segment is last.
fn place(pending: &mut Pending, segment_bytes_max: u64, frame_len: usize) -> Appended {
    let lsn = pending.next_lsn;
    let mut creates = None;
    if pending.tail.offset + frame_len as u64 > segment_bytes_max {
        // Records never span segments.
        pending.tail = Position {
            segment: pending.tail.segment.next(),
            offset: SEGMENT_HEADER_BYTES as u64,
        };
        creates = Some(lsn);
    }
    let position = pending.tail;
    let needs_chunk = pending
        .chunks
        .last()
        .is_none_or(|c| c.segment != position.segment);
    if needs_chunk {
        let bytes = pending.spare.pop().unwrap_or_default();
        pending.chunks.push(Chunk {
            segment: position.segment,
            creates_segment: creates,
            offset: position.offset,
            bytes,
            frames: Vec::new(),
            first_lsn: lsn,
            last_lsn: lsn,
        });
    }
    pending.tail.offset += frame_len as u64;
    assert!(
        pending.tail.offset <= segment_bytes_max,
        "record overflows its segment"
    );
    pending.next_lsn = lsn.next();
    Appended { lsn, position }
}

/// A `Future` resolving when its Lsn is durable: `Ok(())`, or the failure that prevents it.
#[derive(Debug)]
pub struct Durable {
    shared: Arc<Shared>,
    lsn: Lsn,
    registration: Option<u64>,
}

impl Future for Durable {
    type Output = Result<(), WalError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut state = lock(&this.shared.durability.state);
        if let Some(result) = Durability::check(&state, this.lsn) {
            if let Some(id) = this.registration.take() {
                state.wakers.remove(&(this.lsn, id));
            }
            return Poll::Ready(result);
        }
        let id = *this.registration.get_or_insert_with(|| {
            state.next_waker_id += 1;
            state.next_waker_id
        });
        state.wakers.insert((this.lsn, id), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        if let Some(id) = self.registration.take() {
            lock(&self.shared.durability.state)
                .wakers
                .remove(&(self.lsn, id));
        }
    }
}

/// The writer thread's own state.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    active: ActiveSegment,
    preallocate: bool,
    /// Smoothed size of recent write batches (see [`should_prefill`]).
    recent_batch_bytes: u64,
}

impl Writer {
    pub(crate) fn new(shared: Arc<Shared>, start: Start) -> Self {
        Self {
            shared,
            active: start.active,
            preallocate: start.preallocate,
            recent_batch_bytes: 0,
        }
    }

    /// The thread body: batch, write, sync, complete; until closed (after draining) or failed.
    /// On a full disk it keeps the batch's remaining chunks and retries them.
    pub(crate) fn run(mut self) {
        let mut held: Option<Vec<Chunk>> = None;
        let failure = loop {
            let chunks = match held.take() {
                Some(chunks) => chunks,
                None => match self.take_batch() {
                    Some(chunks) => chunks,
                    None => break None,
                },
            };
            match self.commit(chunks) {
                Ok(()) => {}
                Err(Stop::Failed(err)) => break Some(err),
                Err(Stop::DiskFull { rest, err }) => {
                    self.shared.disk_full.store(true, Ordering::Release);
                    if !self.wait_for_space() {
                        // Closing on a full disk: the held records can never be written; their
                        // waiters learn it (they were never reported durable).
                        break Some(err);
                    }
                    held = Some(rest);
                }
            }
        };
        if let Some(err) = &failure {
            lock(&self.shared.pending).failed = Some(err.clone());
            self.shared.space.notify_all();
        }
        self.shared.durability.finish(failure);
    }

    /// Waits for pending records; `None` when closed and drained.
    fn take_batch(&self) -> Option<Vec<Chunk>> {
        let shared = &*self.shared;
        let mut pending = lock(&shared.pending);
        while pending.chunks.is_empty() {
            if pending.closed {
                return None;
            }
            pending = shared
                .work
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        pending.bytes = 0;
        let chunks = std::mem::take(&mut pending.chunks);
        drop(pending);
        shared.space.notify_all();
        Some(chunks)
    }

    /// Waits for the retry period (or [`Appender::retry_now`], or close). `false` when the log
    /// was already closing: one retry after the close was asked has failed, so give up.
    fn wait_for_space(&self) -> bool {
        let shared = &*self.shared;
        let pending = lock(&shared.pending);
        if pending.closed {
            return false;
        }
        let _ = shared
            .retry
            .wait_timeout(pending, limits::DISK_FULL_RETRY)
            .unwrap_or_else(PoisonError::into_inner);
        true
    }

    fn commit(&mut self, chunks: Vec<Chunk>) -> Result<(), Stop> {
        let mut chunks = chunks.into_iter();
        while let Some(mut chunk) = chunks.next() {
            if let Some(first_lsn) = chunk.creates_segment {
                match self.roll(chunk.segment, first_lsn) {
                    // Cleared before any record of the retried batch is reported durable, so
                    // a waiter woken by it never sees the flag still set.
                    Ok(()) => self.shared.disk_full.store(false, Ordering::Release),
                    Err(err) if err.is_disk_full() => {
                        // Nothing of this chunk (or any later one) was written: keep them all.
                        let mut rest = vec![chunk];
                        rest.extend(chunks);
                        return Err(Stop::DiskFull { rest, err });
                    }
                    Err(err) => return Err(Stop::Failed(err)),
                }
            }
            assert_eq!(
                chunk.segment, self.active.id,
                "chunk for a segment not active"
            );
            assert_eq!(
                chunk.offset, self.active.end,
                "chunk not at the segment's end"
            );
            seal_frames(&mut chunk);
            let path = self.shared.segment_path(chunk.segment);
            // One write per segment per batch, then one fdatasync: the write group that
            // recovery relies on (each group is synced before the next is written).
            self.active
                .file
                .write_all_at(&chunk.bytes, chunk.offset)
                .map_err(|e| Stop::Failed(failed(&path, IoOp::Write, e)))?;
            let end = chunk.offset + chunk.bytes.len() as u64;
            self.recent_batch_bytes =
                smoothed_batch_bytes(self.recent_batch_bytes, chunk.bytes.len() as u64);
            self.preallocate_ahead(end)
                .map_err(|e| Stop::Failed(failed(&path, IoOp::Write, e)))?;
            let sync_started = wharf_clock::Stopwatch::start();
            self.active
                .file
                .sync_data()
                .map_err(|e| Stop::Failed(failed(&path, IoOp::Sync, e)))?;
            let c = &self.shared.counters;
            c.writes.fetch_add(1, Ordering::Relaxed);
            c.syncs.fetch_add(1, Ordering::Relaxed);
            c.bytes
                .fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
            c.records
                .fetch_add(chunk.frames.len() as u64, Ordering::Relaxed);
            let frames = chunk.frames.len() as u64;
            self.shared
                .sync_stats
                .record(sync_started.elapsed(), frames);
            self.active.end += chunk.bytes.len() as u64;
            self.active.allocated = self.active.allocated.max(self.active.end);
            self.shared.durability.advance(chunk.last_lsn);
            let mut bytes = chunk.bytes;
            bytes.clear();
            let mut pending = lock(&self.shared.pending);
            if pending.spare.len() < 4 {
                pending.spare.push(bytes);
            }
        }
        Ok(())
    }

    /// Keeps zeros ahead of the write position while batches are small (when preallocating):
    /// once less than half a step is left, another step is zero-filled, so the file size
    /// (journalled metadata) changes once per step instead of at every batch, and no roll
    /// waits for a whole segment of zeros. The batch's own fdatasync covers these zeros.
    /// Large batches skip it ([`should_prefill`]): they are bandwidth-bound, and zeros would
    /// double the bytes they write.
    fn preallocate_ahead(&mut self, end: u64) -> std::io::Result<()> {
        if !self.preallocate || !should_prefill(self.recent_batch_bytes, end, self.active.allocated)
        {
            return Ok(());
        }
        let to = preallocation_end(end, self.shared.segment_bytes_max);
        let from = self.active.allocated.max(end);
        if to > from {
            zero_fill(&*self.active.file, from, to)?;
        }
        self.active.allocated = self.active.allocated.max(to);
        Ok(())
    }

    /// Seals the active segment and creates its successor.
    fn roll(&mut self, id: SegmentId, first_lsn: Lsn) -> Result<(), WalError> {
        assert_eq!(id, self.active.id.next(), "segments roll one at a time");
        let old = self.shared.segment_path(self.active.id);
        // Trim preallocated zeros so a sealed segment ends at its last record (recovery then
        // treats any zeros in a sealed segment as damage), and free the space reserved beyond
        // it: always, since the reservation is invisible in the file's length. After a full
        // disk this runs again at each retry, which is harmless (nothing failed here).
        let f = &self.active.file;
        f.set_len(self.active.end)
            .map_err(|e| failed(&old, IoOp::SealSegment, e))?;
        f.sync_all()
            .map_err(|e| failed(&old, IoOp::SealSegment, e))?;
        self.active.allocated = self.active.end;
        let preallocate_to = self
            .preallocate
            .then(|| preallocation_end(SEGMENT_HEADER_BYTES as u64, self.shared.segment_bytes_max));
        self.active = create_segment(&self.shared, id, first_lsn, preallocate_to)?;
        self.shared.sealed_below.store(id.0, Ordering::Release);
        Ok(())
    }
}

/// Why [`Writer::commit`] stopped.
enum Stop {
    /// Fail-stop.
    Failed(WalError),
    /// A new segment found no space: `rest` (the chunk that needed it and every later one) was
    /// not written and is retried.
    DiskFull { rest: Vec<Chunk>, err: WalError },
}

/// Fills in every frame's group delta and CRC: the chunk is one write group.
fn seal_frames(chunk: &mut Chunk) {
    let mut next = chunk.frames.iter().skip(1).map(|&(start, _)| start);
    for (i, &(start, payload_crc)) in chunk.frames.iter().enumerate() {
        let end = next.next().unwrap_or(chunk.bytes.len());
        let delta = u32::try_from(i).unwrap_or(u32::MAX);
        let Some(frame) = chunk.bytes.get_mut(start..end) else {
            unreachable!("frame bounds come from the encoder")
        };
        record::seal_frame(frame, delta, payload_crc);
    }
    assert_eq!(
        chunk.last_lsn.0 - chunk.first_lsn.0 + 1,
        chunk.frames.len() as u64,
        "a chunk holds consecutive Lsns"
    );
}

pub(crate) fn failed(path: &Path, op: IoOp, e: std::io::Error) -> WalError {
    WalError::Failed {
        path: path.to_owned(),
        op,
        source: Arc::new(e),
    }
}

/// Creates a segment durably: space reserved for `segment_bytes_max` bytes, header, optional
/// zero-fill to `preallocate_to` bytes, fsync of the file, fsync of the directory (STYLE 3.8).
pub(crate) fn create_segment(
    shared: &Shared,
    id: SegmentId,
    first_lsn: Lsn,
    preallocate_to: Option<u64>,
) -> Result<ActiveSegment, WalError> {
    let sizes = (shared.segment_bytes_max, preallocate_to);
    create_segment_in(&*shared.storage, &shared.dir, id, first_lsn, sizes)
}

/// [`create_segment`] without a `Shared` (used while opening). `sizes` is (bytes to reserve,
/// bytes to zero-fill). A full disk met before the segment is synced removes the file again
/// and returns an error for which [`WalError::is_disk_full`] holds.
pub(crate) fn create_segment_in(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    first_lsn: Lsn,
    (reserve_to, preallocate_to): (u64, Option<u64>),
) -> Result<ActiveSegment, WalError> {
    let path = dir.join(segment_file_name(id));
    let err = |e| failed(&path, IoOp::CreateSegment, e);
    let file = storage.create_new(&path).map_err(err)?;
    let header = record::encode_segment_header(SegmentHeader {
        segment_id: id,
        first_lsn,
    });
    let end = SEGMENT_HEADER_BYTES as u64;
    let prepared = file
        .reserve(reserve_to)
        .and_then(|()| file.write_all_at(&header, 0))
        .and_then(|()| match preallocate_to {
            Some(to) => zero_fill(&*file, end, to).map(|()| to),
            None => Ok(end),
        });
    let allocated = match prepared {
        Ok(allocated) => allocated,
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            // Nothing points into this segment yet: remove it so that a retry creates it
            // afresh. Its creation was never made durable, so a crash may only leave an
            // empty or partial file, which recovery removes (`unusable_last`).
            drop(file);
            storage
                .remove(&path)
                .map_err(|e| failed(&path, IoOp::Remove, e))?;
            return Err(err(e));
        }
        Err(e) => return Err(err(e)),
    };
    file.sync_all().map_err(err)?;
    storage
        .sync_dir(dir)
        .map_err(|e| failed(dir, IoOp::SyncDir, e))?;
    Ok(ActiveSegment {
        id,
        file,
        end,
        allocated,
    })
}

/// How far ahead of the write position a preallocating log keeps zeros (in `limits`).
pub(crate) const PREALLOCATE_STEP_BYTES: u64 = limits::PREALLOCATE_STEP_BYTES;

/// Recent write batches (smoothed) larger than this are not followed by zero-fill ahead.
///
/// Zero-filling pays for itself when it saves more than it costs: it saves the journal commit
/// of a file-size change at each `fdatasync` (~50 us here: ~5,600 extending vs ~7,900
/// overwriting 100 B write+fdatasync per second), and costs writing every byte twice, which
/// only matters once batches are bandwidth-bound: batches of 64 producers of 64 KiB records
/// (several MiB) lose by it, batches of 100 B records (a few KiB) need it. A single producer
/// of 64 KiB records (one record per batch) stays below the limit: its rate is bound by the
/// fsync latency, not by bandwidth. Figures: `benches/wal_append.rs`, see the commit message.
pub(crate) const PREFILL_BATCH_BYTES_MAX: u64 = 256 * 1024;

/// Whether the writer zero-fills ahead after writing up to `end` in a file allocated (written)
/// up to `allocated`: only when less than half a step of zeros is left, and only while recent
/// batches (`recent_batch_bytes`, see [`smoothed_batch_bytes`]) are small enough that the
/// metadata commit of an extending write would be a large part of each batch's cost.
pub(crate) fn should_prefill(recent_batch_bytes: u64, end: u64, allocated: u64) -> bool {
    recent_batch_bytes <= PREFILL_BATCH_BYTES_MAX
        && end.saturating_add(PREALLOCATE_STEP_BYTES / 2) > allocated
}

/// Moving average of batch sizes (weight 1/4 on the newest), so that one small batch between
/// large ones (a lull of a few producers) does not trigger a whole step of zeros.
pub(crate) fn smoothed_batch_bytes(recent: u64, batch: u64) -> u64 {
    recent - recent / 4 + batch / 4
}

/// Where preallocation ends for a write position `end`: a step ahead, within the segment.
pub(crate) fn preallocation_end(end: u64, segment_bytes_max: u64) -> u64 {
    end.saturating_add(PREALLOCATE_STEP_BYTES)
        .min(segment_bytes_max)
}

/// Writes zeros over `from..to`: real blocks, so later overwrites followed by `fdatasync` do
/// not have to commit block allocation or size changes to the file system journal.
pub(crate) fn zero_fill(file: &dyn StorageFile, from: u64, to: u64) -> std::io::Result<()> {
    const STEP_BYTES: u64 = 1 << 20;
    let zeros = vec![0u8; usize::try_from(STEP_BYTES).unwrap_or(1 << 20)];
    let mut at = from;
    while at < to {
        let n = STEP_BYTES.min(to - at);
        let chunk = zeros
            .get(..usize::try_from(n).unwrap_or(0))
            .unwrap_or_default();
        file.write_all_at(chunk, at)?;
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn small_batches_prefill_when_less_than_half_a_step_is_left() {
        let end = 10 * KIB * KIB;
        assert!(should_prefill(100, end, end));
        assert!(should_prefill(
            64 * KIB,
            end,
            end + PREALLOCATE_STEP_BYTES / 2 - 1
        ));
        assert!(!should_prefill(100, end, end + PREALLOCATE_STEP_BYTES / 2));
        assert!(!should_prefill(100, end, end + PREALLOCATE_STEP_BYTES));
    }

    #[test]
    fn large_batches_never_prefill() {
        let end = 10 * KIB * KIB;
        assert!(should_prefill(PREFILL_BATCH_BYTES_MAX, end, end));
        assert!(!should_prefill(PREFILL_BATCH_BYTES_MAX + 1, end, end));
        assert!(!should_prefill(4 * KIB * KIB, end, 0));
        assert!(!should_prefill(u64::MAX, u64::MAX, 0));
    }

    #[test]
    fn one_small_batch_among_large_ones_does_not_prefill() {
        let mut recent = 0;
        for _ in 0..8 {
            recent = smoothed_batch_bytes(recent, 4 * KIB * KIB);
        }
        assert!(recent > PREFILL_BATCH_BYTES_MAX);
        recent = smoothed_batch_bytes(recent, 100);
        assert!(!should_prefill(recent, 0, 0), "{recent}");
        // A sustained run of small batches brings zero-fill back.
        for _ in 0..16 {
            recent = smoothed_batch_bytes(recent, 2 * KIB);
        }
        assert!(should_prefill(recent, 0, 0), "{recent}");
    }

    #[test]
    fn smoothing_converges_to_a_steady_batch_size() {
        let mut recent = 0;
        for _ in 0..64 {
            recent = smoothed_batch_bytes(recent, 64 * KIB + 21);
        }
        assert!(recent.abs_diff(64 * KIB + 21) < 8, "{recent}");
        assert_eq!(
            smoothed_batch_bytes(u64::MAX, u64::MAX),
            u64::MAX,
            "no overflow"
        );
    }
}
