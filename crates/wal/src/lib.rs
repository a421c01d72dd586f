//! The write-ahead log: append-only segment files of opaque, checksummed records, group commit,
//! and the recovery scan. Knows nothing of AMQP or queues; depends only on std, `crc32fast`,
//! `memmap2`, `thiserror` and `limits`.
//!
//! # Public API
//!
//! ```text
//! Wal::open(dir, storage, config, &mut visit) -> (Wal, RecoveryReport)
//!     recovery: every intact record, in Lsn order, streamed to `visit(RecordRef)`;
//!     a torn tail of the last segment is truncated and reported; corruption elsewhere is
//!     RecoveryError::Corrupt { path, offset } unless config.recovery_mode is Salvage.
//! wal.appender() -> Appender            Clone + Send + Sync, one per producer
//!     append(kind, payload) -> Appended { lsn, position }      does not wait
//!     append_durable(kind, payload)                             blocks until fsync'd
//!     wait_durable(lsn)   durable(lsn) -> impl Future           blocking / async (no tokio)
//!     durable_lsn() -> Lsn                                      the durable watermark
//!     stats() -> WalStats                                       writes, fsyncs, records
//! wal.reader() -> Reader                read_at(position) -> Record { lsn, kind, payload }
//! wal.delete_segment(id)                drop a sealed segment (durable: directory fsync)
//! wal.reclaimer() -> Reclaimer          segments_through(lsn), delete_segment(id), any thread
//! wal.close()                           drain, stop the writer, report a latched failure
//! scan(storage, dir, mode, &mut visit)  read-only recovery scan (the log inspector)
//! ```
//!
//! The files are behind [`Storage`]: [`FileStorage`] for real directories, [`SimStorage`] for
//! a simulated disk that can lose power or fail the N-th write/sync (a product feature too).
//! The byte layout is `storage-format.md`; `record.rs` is its only encoder and decoder.
//!
//! Contract with the operator: the log directory belongs to wharf. Sealed segments are
//! memory-mapped, so nothing else may modify or truncate them while wharf runs.
//!
//! After an I/O failure the log is fail-stop: [`WalError::Failed`] for every waiter of a record
//! not yet durable and every later append. Reopening (which runs recovery) is the only way on.

// Segment bytes are untrusted input (STYLE 3.4): no unchecked indexing anywhere in the layer.
#![warn(clippy::indexing_slicing)]

mod error;
mod mmap;
mod reader;
mod record;
mod recovery;
mod storage;
mod sync_stats;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

pub use error::{CorruptReason, IoOp, RecoveryError, WalError};
pub use mmap::ReadOnlyMap;
pub use reader::{Reader, Record, read_frame_at};
pub use record::{
    FRAME_HEADER_BYTES, Frame, FrameCheck, FrameFields, HeaderCheck, SegmentHeader,
    check_segment_header, decode_frame, encode_frame, encode_segment_header, frame_bytes, le,
    peek_payload_len,
};
pub use recovery::{
    RecordRef, RecoveryMode, RecoveryReport, SalvageLoss, TornTail, Visitor, list_segments,
    parse_segment_file_name, scan, segment_file_name,
};
pub use storage::{FileStorage, SimStorage, Storage, StorageFile};
pub use sync_stats::{SYNC_LATENCY_BOUNDS_US, SYNC_RECORDS_BOUNDS, SyncSnapshot};
pub use writer::{Appended, Appender, Durable, WalStats};

use record::SEGMENT_HEADER_BYTES;
use wharf_base::limits;
use writer::{ActiveSegment, Shared, Start, Writer};

/// Log sequence number: the position of a record in the log's total order. The first record
/// is `Lsn(1)`; `Lsn(0)` means "none" (e.g. nothing durable yet). Strictly increasing by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The Lsn after this one.
    #[must_use]
    pub fn next(self) -> Lsn {
        Lsn(self.0 + 1)
    }
}

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies a segment file (`{id:020}.wal`). Increasing with time; ids of deleted segments
/// are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SegmentId(pub u64);

impl SegmentId {
    /// The id after this one.
    #[must_use]
    pub fn next(self) -> SegmentId {
        SegmentId(self.0 + 1)
    }
}

impl std::fmt::Display for SegmentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a record's frame starts: its segment and the byte offset in that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The segment.
    pub segment: SegmentId,
    /// Byte offset of the frame in the segment file.
    pub offset: u64,
}

/// Smallest segment size accepted (tests lower the size to exercise rolling); the bound
/// lives in `limits` with the others.
pub const SEGMENT_BYTES_MIN: u64 = limits::SEGMENT_BYTES_MIN;

/// How a log is opened and run.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// Largest segment file, header included: `limits::SEGMENT_BYTES_MAX` or lower.
    pub segment_bytes_max: u64,
    /// Keep zeros written a few MiB ahead of the write position (`PREALLOCATE_STEP_BYTES`), so
    /// that the `fdatasync` after each batch overwrites allocated blocks and does not also
    /// commit a file-size change to the file system journal (see the bench).
    pub preallocate: bool,
    /// Bytes of records appended but not yet taken by the writer before `append` blocks.
    pub pending_bytes_max: usize,
    /// Strict (default) or salvage recovery.
    pub recovery_mode: RecoveryMode,
}

impl Default for WalConfig {
    fn default() -> Self {
        Self {
            segment_bytes_max: limits::SEGMENT_BYTES_MAX,
            preallocate: true,
            pending_bytes_max: limits::WAL_PENDING_BYTES_MAX,
            recovery_mode: RecoveryMode::Strict,
        }
    }
}

impl WalConfig {
    fn validate(&self) -> Result<(), RecoveryError> {
        let bad = |what: &'static str| Err(RecoveryError::Config { what });
        if self.segment_bytes_max > limits::SEGMENT_BYTES_MAX {
            return bad("segment_bytes_max may lower limits::SEGMENT_BYTES_MAX, not raise it");
        }
        if self.segment_bytes_max < SEGMENT_BYTES_MIN {
            return bad("segment_bytes_max is below SEGMENT_BYTES_MIN");
        }
        if self.pending_bytes_max == 0 {
            return bad("pending_bytes_max must be positive");
        }
        if self.pending_bytes_max > limits::WAL_PENDING_BYTES_MAX {
            return bad("pending_bytes_max may lower limits::WAL_PENDING_BYTES_MAX, not raise it");
        }
        Ok(())
    }
}

/// An open write-ahead log: owns the writer thread. Dropping it closes it (draining what is
/// pending); [`Wal::close`] does the same and reports a latched failure.
#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    reader: Reader,
    writer: Option<JoinHandle<()>>,
}

impl Wal {
    /// Opens (or creates) the log in `dir`: recovery first, every intact record handed to
    /// `visit` in order; then the torn tail, if any, is truncated and the writer starts.
    ///
    /// # Errors
    /// Everything [`scan`] returns, an invalid config, and I/O errors preparing the segment to
    /// append to.
    pub fn open(
        dir: &Path,
        storage: Arc<dyn Storage>,
        config: &WalConfig,
        visit: &mut Visitor<'_>,
    ) -> Result<(Wal, RecoveryReport), RecoveryError> {
        config.validate()?;
        storage
            .create_dir_all(dir)
            .map_err(|source| RecoveryError::Io {
                path: dir.to_owned(),
                source,
            })?;
        let report = scan(&*storage, dir, config.recovery_mode, visit)?;
        let (active, active_unreserved) =
            prepare_active(&*storage, dir, config, &report).map_err(into_recovery)?;
        let start = Start {
            active,
            active_unreserved,
            next_lsn: report.next_lsn,
            segment_bytes_max: config.segment_bytes_max,
            pending_bytes_max: config.pending_bytes_max,
            preallocate: config.preallocate,
        };
        let shared = Arc::new(Shared::new(dir.to_owned(), storage, &start));
        let writer = Writer::new(Arc::clone(&shared), start);
        let handle = std::thread::Builder::new()
            .name("wharf-wal-writer".to_owned())
            .spawn(move || writer.run())
            .map_err(|source| RecoveryError::Io {
                path: dir.to_owned(),
                source,
            })?;
        let reader = Reader::new(Arc::clone(&shared));
        let wal = Wal {
            shared,
            reader,
            writer: Some(handle),
        };
        Ok((wal, report))
    }

    /// A handle for producers.
    pub fn appender(&self) -> Appender {
        Appender {
            shared: Arc::clone(&self.shared),
        }
    }

    /// A handle for reading records back by position.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Segments that are sealed (and so may be deleted), in order.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn sealed_segments(&self) -> Result<Vec<SegmentId>, RecoveryError> {
        let below = self.shared.sealed_below.load(Ordering::Acquire);
        let mut ids = recovery::list_segments(&*self.shared.storage, &self.shared.dir)?;
        ids.retain(|id| id.0 < below);
        Ok(ids)
    }

    /// Deletes a whole sealed segment, durably (file removed, directory fsynced). The layer
    /// above calls it when nothing in the segment is live any more; the active segment (and
    /// one not yet durably followed by a newer one) is refused.
    ///
    /// # Errors
    /// [`WalError::SegmentNotSealed`], or [`WalError::Remove`] when the removal or the
    /// directory sync fails (the log keeps running; the file may come back after a crash,
    /// which recovery accepts).
    pub fn delete_segment(&self, id: SegmentId) -> Result<(), WalError> {
        self.reclaimer().delete_segment(id)
    }

    /// A handle that finds and deletes segments a checkpoint made redundant, usable from
    /// another thread while the log runs.
    pub fn reclaimer(&self) -> Reclaimer {
        Reclaimer {
            shared: Arc::clone(&self.shared),
            reader: self.reader.clone(),
        }
    }

    /// Drains what is pending, stops the writer and returns the latched failure, if any.
    ///
    /// # Errors
    /// The [`WalError::Failed`] the log latched.
    pub fn close(mut self) -> Result<(), WalError> {
        self.stop();
        match self.appender().failure() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    fn stop(&mut self) {
        self.shared.close();
        if let Some(handle) = self.writer.take() {
            // A panic in the writer is a bug that has already been reported by the panic
            // hook; waiters were not told "durable", which is what matters here.
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Finds and deletes sealed segments (see [`Wal::reclaimer`]). Never touches the segment being
/// written: only segments below the writer's sealed mark are candidates.
#[derive(Debug, Clone)]
pub struct Reclaimer {
    shared: Arc<Shared>,
    reader: Reader,
}

impl Reclaimer {
    /// The sealed segments every record of which has an Lsn of at most `lsn`, in order: a
    /// segment qualifies when the segment after it starts at `lsn + 1` or earlier. Reads the
    /// 32-byte header of each segment after the first.
    ///
    /// # Errors
    /// I/O errors listing the directory or reading a header; a header that does not check.
    pub fn segments_through(&self, lsn: Lsn) -> Result<Vec<SegmentId>, RecoveryError> {
        let below = self.shared.sealed_below.load(Ordering::Acquire);
        let storage = &*self.shared.storage;
        let ids = recovery::list_segments(storage, &self.shared.dir)?;
        let mut out = Vec::new();
        for pair in ids.windows(2) {
            let &[id, next] = pair else {
                break; // windows(2) yields pairs only
            };
            if id.0 >= below {
                break;
            }
            let path = self.shared.segment_path(next);
            let io = |source| RecoveryError::Io {
                path: path.clone(),
                source,
            };
            let mut header = [0u8; SEGMENT_HEADER_BYTES];
            storage
                .open(&path, false)
                .and_then(|f| f.read_exact_at(&mut header, 0))
                .map_err(io)?;
            let record::HeaderCheck::Valid(h) = record::check_segment_header(&header) else {
                return Err(RecoveryError::Corrupt {
                    path: path.clone(),
                    offset: 0,
                    reason: CorruptReason::BadHeader,
                });
            };
            if h.first_lsn.0 > lsn.0.saturating_add(1) {
                break;
            }
            out.push(id);
        }
        Ok(out)
    }

    /// Deletes a whole sealed segment, durably; see [`Wal::delete_segment`].
    ///
    /// # Errors
    /// As [`Wal::delete_segment`].
    pub fn delete_segment(&self, id: SegmentId) -> Result<(), WalError> {
        if id.0 >= self.shared.sealed_below.load(Ordering::Acquire) {
            return Err(WalError::SegmentNotSealed { segment: id });
        }
        self.reader.forget(id);
        let path = self.shared.segment_path(id);
        let storage = &self.shared.storage;
        let remove_err = |e| WalError::Remove {
            path: path.clone(),
            source: Arc::new(e),
        };
        storage.remove(&path).map_err(remove_err)?;
        storage.sync_dir(&self.shared.dir).map_err(remove_err)
    }
}

fn into_recovery(err: WalError) -> RecoveryError {
    match err {
        WalError::Failed { path, source, .. } => RecoveryError::Io {
            path,
            source: Arc::try_unwrap(source)
                .unwrap_or_else(|shared| std::io::Error::new(shared.kind(), shared.to_string())),
        },
        other => RecoveryError::Io {
            path: PathBuf::new(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// Readies the segment to append to: the last one, its torn tail truncated, the rest of its
/// size reserved (and re-zeroed when preallocating), or a new one. The flag is set when the
/// last one could not reserve its space (a full disk): nothing more is written into it.
fn prepare_active(
    storage: &dyn Storage,
    dir: &Path,
    config: &WalConfig,
    report: &RecoveryReport,
) -> Result<(ActiveSegment, bool), WalError> {
    let max = config.segment_bytes_max;
    let Some(at) = report.append_at else {
        let id = match (report.unusable_last, report.segments.last()) {
            (Some(unusable), _) => {
                // Its creation never became durable and nothing in it was acknowledged.
                let path = dir.join(segment_file_name(unusable));
                storage
                    .remove(&path)
                    .map_err(|e| writer::failed(&path, IoOp::Remove, e))?;
                storage
                    .sync_dir(dir)
                    .map_err(|e| writer::failed(dir, IoOp::SyncDir, e))?;
                unusable
            }
            (None, Some(last)) => last.next(),
            (None, None) => SegmentId(0),
        };
        let preallocate_to = config
            .preallocate
            .then(|| writer::preallocation_end(SEGMENT_HEADER_BYTES as u64, max));
        let sizes = (max, preallocate_to);
        return writer::create_segment_in(storage, dir, id, report.next_lsn, sizes)
            .map(|active| (active, false));
    };
    let path = dir.join(segment_file_name(at.segment));
    let err = |e| writer::failed(&path, IoOp::Write, e);
    let file = storage.open(&path, true).map_err(err)?;
    let mut allocated = file.len_bytes().map_err(err)?;
    if report.torn_tail.is_some() {
        // S-DUR-7: the torn tail is cut before anything is appended after it.
        file.set_len(at.offset).map_err(err)?;
        allocated = at.offset;
    }
    // Always sync once: the records recovery just handed out may have been read from the page
    // cache after a process crash; they must not vanish in a later power loss, since the layer
    // above has acted on them.
    file.sync_all().map_err(err)?;
    assert!(
        at.offset >= SEGMENT_HEADER_BYTES as u64,
        "append position inside the header"
    );
    // The segment was reserved when created, but not necessarily by this build, and the
    // reservation may not have survived a crash: reserve again (a no-op when it is there).
    let unreserved = match file.reserve(max) {
        Ok(()) => false,
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => true,
        Err(e) => return Err(err(e)),
    };
    let preallocate_to = config
        .preallocate
        .then(|| writer::preallocation_end(at.offset, max))
        .filter(|_| !unreserved);
    if let Some(to) = preallocate_to.filter(|&to| to > allocated) {
        writer::zero_fill(&*file, allocated, to).map_err(err)?;
        file.sync_all().map_err(err)?;
        allocated = to;
    }
    let active = ActiveSegment {
        id: at.segment,
        file,
        end: at.offset,
        allocated,
    };
    Ok((active, unreserved))
}
