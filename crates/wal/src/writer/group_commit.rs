//! The writer thread: takes whatever producers left pending, writes it with one positional
//! write per segment, makes it durable with one `fdatasync`, then advances the durable
//! watermark; rolls to a new segment when one is full and waits for space on a full disk.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::segment::failed;
use super::segment::{
    create_segment, preallocation_end, should_prefill, smoothed_batch_bytes, zero_fill,
};
use super::spool::copy_into;
use super::{ActiveSegment, Chunk, Piece, SPARE_BYTES_MAX, Shared, Start, lock};
use crate::error::{IoOp, WalError};
use crate::ids::{Lsn, SegmentId};
use crate::mark::{DurableMark, MarkFile};
use crate::record::{self, SEGMENT_HEADER_BYTES};
use wharf_base::limits;

/// The writer thread's own state.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    active: ActiveSegment,
    preallocate: bool,
    /// Smoothed size of recent write batches (see [`should_prefill`]).
    recent_batch_bytes: u64,
    /// The durable mark file and what it last said (S-DISK-6).
    mark: MarkFile,
    last_mark: DurableMark,
    /// A mark write failed: no more are tried in this run.
    mark_failed: bool,
    /// Records taken but not written yet: a batch, or what a full disk left of one (retried
    /// first, in order).
    held: Option<Vec<Chunk>>,
    /// The buffer spooled bodies are copied through (S-BIG-3), allocated at the first.
    copy_buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn new(shared: Arc<Shared>, start: Start) -> Self {
        Self {
            shared,
            active: start.active,
            preallocate: start.preallocate,
            recent_batch_bytes: 0,
            mark: start.mark,
            last_mark: start.recovered,
            mark_failed: false,
            held: None,
            copy_buf: Vec::new(),
        }
    }

    /// The thread body: batch, write, sync, complete; until closed (after draining) or failed.
    /// On a full disk it keeps the batch's remaining chunks and retries them.
    pub(crate) fn run(mut self) {
        let failure = loop {
            if self.held.is_none() {
                match self.take_batch() {
                    Some(chunks) => self.held = Some(chunks),
                    None => break None,
                }
            }
            match self.commit_held() {
                Ok(()) => {}
                Err(Stop::Failed(err)) => break Some(err),
                Err(Stop::DiskFull(err)) => {
                    if !self.wait_for_space() {
                        // Closing on a full disk: the held records can never be written; their
                        // waiters learn it (they were never reported durable).
                        break Some(err);
                    }
                }
            }
        };
        self.finish(failure);
    }

    /// One step of an inline writer (`WalConfig::inline_writer`), on the caller's thread:
    /// what a full disk held back, then everything pending, written and synced as one batch.
    /// Returns whether there was anything to write. A full disk is returned, not waited
    /// for, and not latched (the next step retries); any other failure is latched as the
    /// writer thread latches it, and the writer is done (`Err` with `true`).
    pub(crate) fn step(&mut self) -> Result<bool, (WalError, bool)> {
        if self.held.is_none() {
            self.held = self.take_pending();
        }
        if self.held.is_none() {
            return Ok(false);
        }
        match self.commit_held() {
            Ok(()) => Ok(true),
            Err(Stop::DiskFull(err)) => Err((err, false)),
            Err(Stop::Failed(err)) => {
                self.finish(Some(err.clone()));
                Err((err, true))
            }
        }
    }

    /// Closes an inline writer: drains what is pending (a full disk now is given up, as the
    /// writer thread gives up after its last retry), then ends as the thread ends.
    pub(crate) fn close_inline(mut self) {
        let failure = loop {
            match self.step() {
                Ok(true) => {}
                Ok(false) => break None,
                Err((_, true)) => return,
                Err((err, false)) => break Some(err),
            }
        };
        self.finish(failure);
    }

    /// Commits what is held (a batch taken, or what a full disk left of one); on a full disk
    /// the rest stays held and the disk-full flag is raised.
    fn commit_held(&mut self) -> Result<(), Stop> {
        let Some(chunks) = self.held.take() else {
            return Ok(());
        };
        let result = self.commit(chunks);
        if matches!(result, Err(Stop::DiskFull(_))) {
            self.shared.disk_full.store(true, Ordering::Release);
        }
        result
    }

    /// The end of the writer: a failure is latched for appenders, a clean end is recorded in
    /// the durable mark; every waiter learns how it ended.
    fn finish(&mut self, failure: Option<WalError>) {
        if let Some(err) = &failure {
            lock(&self.shared.pending).failed = Some(err.clone());
            self.shared.space.notify_all();
        } else {
            self.mark_clean_stop();
        }
        self.shared.durability.finish(failure);
    }

    /// Waits for pending records someone wants durable ([`Pending::ready`]); `None` when
    /// closed and drained.
    fn take_batch(&self) -> Option<Vec<Chunk>> {
        let shared = &*self.shared;
        let mut pending = lock(&shared.pending);
        while !pending.ready() {
            if pending.closed {
                return None;
            }
            pending = shared
                .work
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(pending);
        self.take_pending()
    }

    /// Takes every pending record, without waiting; `None` when there is none.
    fn take_pending(&self) -> Option<Vec<Chunk>> {
        let shared = &*self.shared;
        let mut pending = lock(&shared.pending);
        if pending.chunks.is_empty() {
            return None;
        }
        pending.bytes = 0;
        pending.wanted = false;
        if let Some(last) = pending.chunks.last() {
            pending.taken_through = last.last_lsn;
        }
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
                // A segment holding one record larger than a segment's room reserves its size.
                let reserve = (SEGMENT_HEADER_BYTES + chunk.len()) as u64;
                match self.roll(chunk.segment, first_lsn, reserve) {
                    // Cleared before any record of the retried batch is reported durable, so
                    // a waiter woken by it never sees the flag still set.
                    Ok(()) => self.shared.disk_full.store(false, Ordering::Release),
                    Err(err) if err.is_disk_full() => {
                        // Nothing of this chunk (or any later one) was written: keep them all.
                        let mut rest = vec![chunk];
                        rest.extend(chunks);
                        self.held = Some(rest);
                        return Err(Stop::DiskFull(err));
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
            // (A chunk holding spliced bodies takes one write per piece, still before the sync.)
            let len = chunk.len() as u64;
            let mut at = chunk.offset;
            for piece in chunk.pieces() {
                let file = &*self.active.file;
                at += match piece {
                    Piece::Memory(bytes) => {
                        file.write_all_at(bytes, at)
                            .map_err(|e| Stop::Failed(failed(&path, IoOp::Write, e)))?;
                        bytes.len() as u64
                    }
                    Piece::Spooled(spooled) => {
                        copy_into(spooled, file, at, &mut self.copy_buf).map_err(
                            |(reading, e)| {
                                if reading {
                                    Stop::Failed(failed(&spooled.path, IoOp::Read, e))
                                } else {
                                    Stop::Failed(failed(&path, IoOp::Write, e))
                                }
                            },
                        )?;
                        let c = &self.shared.counters;
                        c.spooled.fetch_add(spooled.len, Ordering::Relaxed);
                        spooled.len
                    }
                };
            }
            let end = chunk.offset + len;
            self.recent_batch_bytes = smoothed_batch_bytes(self.recent_batch_bytes, len);
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
            c.bytes.fetch_add(len, Ordering::Relaxed);
            c.records
                .fetch_add(chunk.frames.len() as u64, Ordering::Relaxed);
            let frames = chunk.frames.len() as u64;
            self.shared
                .sync_stats
                .record(sync_started.elapsed(), frames);
            self.active.end += len;
            self.active.allocated = self.active.allocated.max(self.active.end);
            self.note_durable(chunk.last_lsn);
            // The spliced bodies are let go before their records are reported durable, so a
            // waiter woken by it knows the log holds none of them any more (a spool file then
            // goes with its body's last holder, S-BIG-3).
            chunk.splices.clear();
            self.shared.durability.advance(chunk.last_lsn);
            // A buffer grown large is freed, not kept.
            let mut bytes = chunk.bytes;
            bytes.clear();
            let mut pending = lock(&self.shared.pending);
            if pending.spare.len() < 4 && bytes.capacity() <= SPARE_BYTES_MAX {
                pending.spare.push(bytes);
            }
        }
        Ok(())
    }

    /// Rewrites the durable mark after a batch's fsync: one positional write, never synced
    /// here (S-DISK-6). Whatever of it reaches the disk is at most what was durable, so it
    /// costs the group-commit path no second fsync, only a `pwrite` of 40 bytes into the page
    /// cache before the watermark advances (so a waiter woken as durable finds the mark
    /// written: what a crash right after its confirm leaves vouches for it). A failed write is not fail-stop (nothing confirmed
    /// depends on the mark, and a torn slot fails its CRC): it is logged once and the mark is
    /// left where it was, which only means the next recovery vouches for less.
    fn note_durable(&mut self, lsn: Lsn) {
        self.last_mark = DurableMark {
            lsn,
            segment: self.active.id,
            end: self.active.end,
            clean: false,
        };
        if self.mark_failed {
            return;
        }
        if let Err(error) = self.mark.write(self.last_mark) {
            self.mark_failed = true;
            let path = crate::mark::mark_path(&self.shared.dir);
            tracing::warn!(
                path = %path.display(),
                %error,
                "cannot update the durable mark; it stays where it was until the next start"
            );
        }
    }

    /// A clean stop: everything was drained and synced, so the mark says exactly where the log
    /// ends, durably. A failure here loses nothing (the unsynced mark is still at most what
    /// was durable); the next start then knows less.
    fn mark_clean_stop(&mut self) {
        if self.mark_failed {
            return;
        }
        let clean = DurableMark {
            clean: true,
            ..self.last_mark
        };
        if let Err(error) = self.mark.write_durably(clean) {
            tracing::warn!(%error, "could not record the clean stop in the durable mark");
        }
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
            let started = wharf_clock::Stopwatch::start();
            zero_fill(&*self.active.file, from, to)?;
            self.shared.sync_stats.record_prefill(started.elapsed());
        }
        self.active.allocated = self.active.allocated.max(to);
        Ok(())
    }

    /// Seals the active segment and creates its successor.
    fn roll(&mut self, id: SegmentId, first_lsn: Lsn, reserve: u64) -> Result<(), WalError> {
        assert_eq!(id, self.active.id.next(), "segments roll one at a time");
        let started = wharf_clock::Stopwatch::start();
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
        self.active = create_segment(&self.shared, id, first_lsn, reserve, preallocate_to)?;
        self.shared.sealed_below.store(id.0, Ordering::Release);
        self.shared.sync_stats.record_roll(started.elapsed());
        Ok(())
    }
}

/// Why [`Writer::commit`] stopped.
enum Stop {
    /// Fail-stop.
    Failed(WalError),
    /// A new segment found no space: the chunk that needed it and every later one were not
    /// written; they are held ([`Writer::held`]) and retried.
    DiskFull(WalError),
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
