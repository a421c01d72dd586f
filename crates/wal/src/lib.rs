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
//!     append_lazy(kind, payload)        does not wake the writer: synced with the next batch
//!     wait_durable(lsn)   durable(lsn) -> impl Future           blocking / async (no tokio)
//!     durable_lsn() -> Lsn                                      the durable watermark
//!     spooler() -> Spooler   open(len) -> Spool: a large body written to a file as it arrives
//!     stats() -> WalStats                                       writes, fsyncs, records
//! wal.reader() -> Reader                read_at(position) -> Record { lsn, kind, payload }
//! wal.delete_segment(id)                drop a sealed segment (durable: directory fsync)
//! wal.reclaimer() -> Reclaimer          segments_through(lsn), delete_segment(id), any thread
//! wal.close()                           drain, stop the writer, report a latched failure
//! scan(storage, dir, mode, &mut visit)  read-only recovery scan (the log inspector)
//! scan_selective(.., &mut Selective, ..) the same, skipping segments the reader has no use
//!                                       for but for records of a few kinds (the timeline),
//!                                       or reading only frames it knows (SegmentPlan::Only)
//! ```
//!
//! The files are behind [`Storage`]: [`FileStorage`] for real directories, [`SimStorage`] for
//! a simulated disk that can lose power or fail the N-th write/sync (a product feature too).
//! The byte layout is `storage-format.md`; `record.rs` is its only encoder and decoder.
//!
//! # Layout
//!
//! - `ids`: [`Lsn`], [`SegmentId`], [`Position`].
//! - `config`: [`WalConfig`].
//! - `wal`: [`Wal`], the open log.
//! - `writer`: group commit: the shared state, [`Appender`], the writer thread, segment files.
//! - `reader`: [`Reader`], records read back by position.
//! - `frame_at`: [`read_frame_at`], one frame read alone and checked.
//! - `mark`: the durable mark (`durable.mark`): how far an fsync covered the log.
//! - `reclaimer`: [`Reclaimer`], deleting segments a checkpoint covers.
//! - `recovery`: the recovery scan ([`scan`]) and its [`RecoveryReport`].
//! - `known`: [`Selective`] and [`SegmentPlan`], what a selective scan asks its reader, and a
//!   sealed segment read through what its reader knows of it.
//! - `record`: the frame and segment header layout, and `le`, the one little-endian helper.
//! - `storage`: [`Storage`], [`FileStorage`], [`SimStorage`].
//! - `mmap`: [`ReadOnlyMap`], sealed segments mapped read-only.
//! - `sync_stats`: fsync latency and batch-size histograms.
//! - `error`: [`WalError`], [`RecoveryError`].
//!
//! Contract with the operator: the log directory belongs to wharf. Sealed segments are
//! memory-mapped, so nothing else may modify or truncate them while wharf runs.
//!
//! After an I/O failure the log is fail-stop: [`WalError::Failed`] for every waiter of a record
//! not yet durable and every later append. Reopening (which runs recovery) is the only way on.

// Segment bytes are untrusted input (STYLE 3.4): no unchecked indexing anywhere in the layer.
#![warn(clippy::indexing_slicing)]

mod config;
mod error;
mod frame_at;
mod ids;
mod known;
mod mark;
mod mmap;
mod reader;
mod reclaimer;
mod record;
mod recovery;
mod storage;
mod sync_stats;
mod wal;
mod writer;

pub use config::{SEGMENT_BYTES_MIN, WalConfig};
pub use error::{CorruptReason, IoOp, RecoveryError, WalError};
pub use frame_at::{Record, read_frame_at};
pub use ids::{Lsn, Position, SegmentId};
pub use known::{SegmentPlan, Selective, WindowFilter};
pub use mark::{
    DurableMark, MARK_FILE_NAME, MarkState, SlotCheck, decode_mark, encode_mark, read_mark,
};
pub use mmap::ReadOnlyMap;
pub use reader::Reader;
pub use reclaimer::Reclaimer;
pub use record::{
    FRAME_HEADER_BYTES, Frame, FrameCheck, FrameFields, HeaderCheck, SegmentHeader,
    check_segment_header, decode_frame, encode_frame, encode_frame_header, encode_segment_header,
    frame_bytes, le, peek_payload_len, seal_frame, segment_header_version,
};
pub use recovery::{
    RecordRef, RecoveryMode, RecoveryReport, SalvageLoss, TornTail, Visitor, list_segments,
    parse_segment_file_name, read_segment_header, scan, scan_selective, segment_file_name,
};
pub use storage::{FileStorage, SimStorage, Storage, StorageFile};
pub use sync_stats::{SYNC_LATENCY_BOUNDS_US, SYNC_RECORDS_BOUNDS, SyncSnapshot};
pub use wal::Wal;
pub use writer::{
    Appended, Appender, Durable, SPOOL_COPY_BYTES, SPOOL_FILE_SUFFIX, Spool, Spooler, WalStats,
    is_spool_file_name,
};
