//! The producers' side of group commit: [`Appender::append`] frames a record into the
//! pending buffer and returns its Lsn and position at once; [`Durable`] and
//! [`Appender::wait_durable`] wait for the writer to make it durable.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;

use super::{
    Chunk, Durability, Pending, SPLICE_BYTES_MIN, Shared, Splice, Spooler, WalStats, lock,
};
use crate::error::WalError;
use crate::ids::{Lsn, Position};
use crate::record::{self, SEGMENT_HEADER_BYTES};
use crate::sync_stats::SyncSnapshot;

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
        self.append_parts(kind, payload, &Bytes::new())
    }

    /// Appends one record whose payload is `head` followed by `tail`, as [`Appender::append`]
    /// does. A long `tail` (a message body) is not copied: the pending buffer holds it by
    /// reference until the writer has written it (S-BIG-3).
    ///
    /// # Errors
    /// As [`Appender::append`].
    ///
    /// # Panics
    /// As [`Appender::append`].
    pub fn append_parts(&self, kind: u8, head: &[u8], tail: &Bytes) -> Result<Appended, WalError> {
        self.place_record(kind, head, tail, true)
    }

    /// Appends one record as [`Appender::append`] does, without waking the writer: it is
    /// written and synced with the next batch another append (or a waiter) starts, or at
    /// close, never on its own, even when the writer is busy as it arrives. For a record
    /// nobody waits for, which is worth less than an `fdatasync`.
    ///
    /// # Errors
    /// As [`Appender::append`].
    ///
    /// # Panics
    /// As [`Appender::append`].
    pub fn append_lazy(&self, kind: u8, payload: &[u8]) -> Result<Appended, WalError> {
        self.place_record(kind, payload, &Bytes::new(), false)
    }

    fn place_record(
        &self,
        kind: u8,
        head: &[u8],
        tail: &Bytes,
        wake: bool,
    ) -> Result<Appended, WalError> {
        let shared = &*self.shared;
        let payload_len = head.len() + tail.len();
        if payload_len > shared.payload_bytes_max {
            return Err(WalError::RecordTooLarge {
                len: payload_len,
                max: shared.payload_bytes_max,
            });
        }
        // A spooled body (S-BIG-3) is copied from its file, and its CRC is the spool's: its
        // mapped bytes are not read here.
        let spooled = if tail.len() >= SPLICE_BYTES_MIN {
            shared.spools.find(tail)
        } else {
            None
        };
        // Hash outside the lock; the writer combines it into the frame CRC.
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(head);
        match &spooled {
            Some(file) => hasher.combine(&file.crc),
            None => hasher.update(tail),
        }
        let payload_crc = hasher.finalize();
        let frame_len = record::frame_bytes(payload_len);
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
            if shared.inline {
                // No thread will empty it: write what is pending now, on this thread. On a
                // full disk the record is taken over the bound (a writer thread's caller
                // would wait for space; here nothing else could make it, and the caller
                // must not wedge): memory, not the disk, holds it until a retry.
                let last = Lsn(pending.next_lsn.0.saturating_sub(1));
                drop(pending);
                let stepped = shared.step_inline(last);
                pending = lock(&shared.pending);
                match stepped {
                    Ok(()) => continue,
                    Err(err) if err.is_disk_full() => break,
                    Err(err) => return Err(err),
                }
            }
            // Room comes only from the writer: it must take what is pending, lazy or not.
            pending.wanted = true;
            shared.work.notify_one();
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
        assert_eq!(
            chunk.offset + chunk.len() as u64,
            appended.position.offset,
            "chunk bytes must end at the record's position"
        );
        let start = chunk.bytes.len();
        record::encode_frame_header(&mut chunk.bytes, payload_len, appended.lsn, kind);
        chunk.bytes.extend_from_slice(head);
        if let Some(file) = spooled {
            chunk
                .splices
                .push((chunk.bytes.len(), Splice::Spooled(file)));
        } else if tail.len() >= SPLICE_BYTES_MIN {
            chunk
                .splices
                .push((chunk.bytes.len(), Splice::Memory(tail.clone())));
        } else {
            chunk.bytes.extend_from_slice(tail);
        }
        chunk.frames.push((start, payload_crc));
        chunk.last_lsn = appended.lsn;
        pending.bytes += frame_len;
        pending.wanted |= wake;
        drop(pending);
        if wake {
            shared.work.notify_one();
        }
        Ok(appended)
    }

    /// A handle opening spools for large message bodies in the log's directory (S-BIG-3): a
    /// finished spool's body, appended as a record's tail, is copied into the log from its file.
    pub fn spooler(&self) -> Spooler {
        self.shared.spooler()
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

    /// Blocks until `lsn` is durable. With an inline writer (`WalConfig::inline_writer`) it
    /// writes and syncs everything pending on this thread instead of waiting for a writer.
    ///
    /// # Errors
    /// [`WalError::Failed`] when the log failed before `lsn` became durable, or
    /// [`WalError::Closed`] when it was closed first. Never reports a record durable that is
    /// not. With an inline writer, also a full disk (at once, not latched: the next wait
    /// retries) and [`WalError::NotAppended`].
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        let d = &self.shared.durability;
        let mut state = lock(&d.state);
        let mut wanted = false;
        loop {
            if let Some(result) = Durability::check(&state, lsn) {
                return result;
            }
            if self.shared.inline {
                drop(state);
                self.shared.step_inline(lsn)?;
                state = lock(&d.state);
                continue;
            }
            if !wanted {
                // Outside the durability lock: the writer takes the pending lock first.
                wanted = true;
                drop(state);
                self.shared.want(lsn);
                state = lock(&d.state);
                continue;
            }
            state = d
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A `Future` that resolves when `lsn` is durable (same outcomes as
    /// [`Appender::wait_durable`]); usable from any executor, it needs none. With an inline
    /// writer, polling it runs the writer, as [`Appender::wait_durable`] does.
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
    pub fn sync_stats(&self) -> SyncSnapshot {
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
    /// come back) instead of at the end of its retry period. Does nothing otherwise. With an
    /// inline writer, which has no retry period, this is the retry: every [`Durable`] future
    /// waiting is woken, and the first one polled steps the writer again.
    pub fn retry_now(&self) {
        if self.shared.inline {
            if self.disk_full() {
                self.shared.durability.wake_all();
            }
            return;
        }
        let _guard = lock(&self.shared.pending);
        self.shared.retry.notify_all();
    }
}

/// Assigns the next Lsn and position for a frame of `frame_len` bytes, rolling to a new
/// segment when it does not fit, and makes sure a chunk for that segment is last.
fn place(pending: &mut Pending, segment_bytes_max: u64, frame_len: usize) -> Appended {
    let lsn = pending.next_lsn;
    let mut creates = None;
    let empty = pending.tail.offset == SEGMENT_HEADER_BYTES as u64;
    if pending.tail.offset + frame_len as u64 > segment_bytes_max && !empty {
        // Records never span segments; one larger than a segment's room starts a segment of
        // its own (format 3), which the next record leaves at once.
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
            splices: Vec::new(),
            frames: Vec::new(),
            first_lsn: lsn,
            last_lsn: lsn,
        });
    }
    pending.tail.offset += frame_len as u64;
    assert!(
        pending.tail.offset <= segment_bytes_max || position.offset == SEGMENT_HEADER_BYTES as u64,
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
        loop {
            if let Some(result) = Durability::check(&state, this.lsn) {
                if let Some(id) = this.registration.take() {
                    state.wakers.remove(&(this.lsn, id));
                }
                return Poll::Ready(result);
            }
            if !this.shared.inline {
                break;
            }
            drop(state);
            match this.shared.step_inline(this.lsn) {
                Ok(()) => {}
                // A full disk: the future waits, as a waiter of a writer thread waits while
                // it is paused, until a retry ([`Appender::retry_now`] wakes it and its poll
                // steps the writer again).
                Err(err) if err.is_disk_full() => {
                    state = lock(&this.shared.durability.state);
                    break;
                }
                Err(err) => return Poll::Ready(Err(err)),
            }
            state = lock(&this.shared.durability.state);
        }
        let first = this.registration.is_none();
        let id = *this.registration.get_or_insert_with(|| {
            state.next_waker_id += 1;
            state.next_waker_id
        });
        state.wakers.insert((this.lsn, id), cx.waker().clone());
        drop(state);
        if first {
            // Registered first, so the batch this asks for cannot complete unseen.
            this.shared.want(this.lsn);
        }
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
