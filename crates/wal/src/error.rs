//! The WAL's error types, one per kind of operation: [`WalError`] for appending, waiting,
//! reading back and deleting, [`RecoveryError`] for opening and scanning. Each variant carries
//! what an operator needs to act (file, offset, the failed operation). Depends only on std and
//! `thiserror`.

use std::path::PathBuf;
use std::sync::Arc;

use crate::ids::{Lsn, SegmentId};

/// The I/O operation that failed, for messages an operator can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Writing record bytes.
    Write,
    /// `fdatasync`/`fsync` of a segment file.
    Sync,
    /// Creating a new segment (open, header, preallocation, syncs).
    CreateSegment,
    /// Sealing a full segment (trimming preallocated space).
    SealSegment,
    /// `fsync` of the log directory.
    SyncDir,
    /// Removing a segment file.
    Remove,
    /// Reading.
    Read,
}

impl std::fmt::Display for IoOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            IoOp::Write => "write",
            IoOp::Sync => "fdatasync",
            IoOp::CreateSegment => "segment creation",
            IoOp::SealSegment => "segment sealing",
            IoOp::SyncDir => "directory fsync",
            IoOp::Remove => "remove",
            IoOp::Read => "read",
        };
        f.write_str(s)
    }
}

/// Why a record or header was judged corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorruptReason {
    /// The CRC does not match the bytes.
    BadCrc,
    /// A length field larger than `limits::RECORD_PAYLOAD_BYTES_MAX`.
    LengthTooLarge(u64),
    /// The file ends inside a frame.
    Truncated,
    /// A segment header with a wrong magic number, CRC or reserved field.
    BadHeader,
    /// The header names another segment id than the file name.
    SegmentIdMismatch {
        /// Id from the file name.
        named: SegmentId,
        /// Id in the header.
        header: SegmentId,
    },
    /// A valid frame with an Lsn out of sequence (a stale or misplaced write).
    LsnOutOfOrder {
        /// The Lsn the sequence called for.
        expected: Lsn,
        /// The Lsn found.
        found: Lsn,
    },
    /// Zero bytes inside a sealed segment, where only records may be.
    UnexpectedZeros,
    /// The log ends cleanly, but before the last record the durable mark says an fsync
    /// covered (S-DISK-6).
    EndsBeforeDurable,
}

impl std::fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorruptReason::BadCrc => f.write_str("checksum mismatch"),
            CorruptReason::LengthTooLarge(n) => write!(f, "record length {n} over the limit"),
            CorruptReason::Truncated => f.write_str("file ends inside a record"),
            CorruptReason::BadHeader => f.write_str("damaged segment header"),
            CorruptReason::SegmentIdMismatch { named, header } => {
                write!(
                    f,
                    "file is named segment {named} but its header says {header}"
                )
            }
            CorruptReason::LsnOutOfOrder { expected, found } => {
                write!(f, "expected lsn {expected}, found {found}")
            }
            CorruptReason::UnexpectedZeros => f.write_str("zero bytes inside a sealed segment"),
            CorruptReason::EndsBeforeDurable => {
                f.write_str("the log ends before the last record an fsync covered")
            }
        }
    }
}

/// Errors of appending, waiting for durability, reading back and deleting.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// The payload is over `limits::RECORD_PAYLOAD_BYTES_MAX`; nothing was appended.
    #[error("record payload of {len} bytes is over the limit of {max}")]
    RecordTooLarge {
        /// Payload bytes offered.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A write or sync failed. The log is fail-stop from then on (STYLE 3.3): every record not
    /// yet durable gets this error, every later append too, until the log is reopened (which
    /// runs recovery). An fsync is never retried.
    #[error("write-ahead log stopped after a failed {op} on {path}")]
    Failed {
        /// The file (or directory) the failed operation was on.
        path: PathBuf,
        /// The operation.
        op: IoOp,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The log was closed; records not yet durable will never be reported durable.
    #[error("write-ahead log is closed")]
    Closed,
    /// A wait, on a log whose writer runs inline (`WalConfig::inline_writer`), for a record
    /// never appended: nothing could ever make it durable (a writer thread would wait).
    #[error("waiting for lsn {lsn}, which was never appended")]
    NotAppended {
        /// The Lsn waited for.
        lsn: Lsn,
    },
    /// Reading a record back failed.
    #[error("reading {path} at offset {offset} failed")]
    Read {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A record read back did not check out.
    #[error("corrupt record in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// What is wrong.
        reason: CorruptReason,
    },
    /// The segment is the one being written (or not yet sealed); it cannot be deleted.
    #[error("segment {segment} is not sealed and cannot be deleted")]
    SegmentNotSealed {
        /// The segment asked for.
        segment: SegmentId,
    },
    /// Removing a segment failed (the log keeps running; the file may still exist).
    #[error("removing {path} failed")]
    Remove {
        /// The segment file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl WalError {
    /// Whether this is a full disk met while creating a segment, before any record was
    /// written into it: the writer pauses and retries instead of failing (S-DUR-3: nothing
    /// confirmed is harmed, nothing held is dropped).
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            WalError::Failed { op: IoOp::CreateSegment, source, .. }
                if source.kind() == std::io::ErrorKind::StorageFull
        )
    }
}

/// Errors of opening a log and of the recovery scan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// A bad record or header where a torn tail cannot explain it (S-DUR-7): anywhere but the
    /// end of the last segment. Recovery stops; salvage mode skips it instead.
    #[error("corrupt record in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the bad frame or header.
        offset: u64,
        /// What is wrong.
        reason: CorruptReason,
    },
    /// A segment written by a newer wharf; this build must not guess at its layout.
    #[error("{path}: format version {found} is newer than this build reads (version {supported})")]
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// The version in its header.
        found: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// The log ends before the last record an fsync covered (the durable mark, S-DISK-6):
    /// confirmed records are damaged or missing. Not a torn tail; salvage mode cuts it and
    /// reports the loss.
    #[error(
        "{path} at offset {offset}: {reason}; the log ends before lsn {first_lost} but an \
         fsync covered it through lsn {durable}{}, so {records} durable (confirmed) record(s) \
         are damaged or missing. This is not a torn tail and wharf will not start on it: \
         restore the data directory from a backup, or start once with --salvage to cut the \
         log here and accept the loss",
        if *.clean { " (it was stopped cleanly there)" } else { "" }
    )]
    DurableDamage {
        /// The segment file (the directory when no segment is left).
        path: PathBuf,
        /// Where the intact log ends.
        offset: u64,
        /// What was found there.
        reason: CorruptReason,
        /// The first Lsn missing.
        first_lost: Lsn,
        /// The last Lsn an fsync covered, by the mark.
        durable: Lsn,
        /// Durable records lost: `durable - first_lost + 1`.
        records: u64,
        /// The mark was written by a clean stop.
        clean: bool,
    },
    /// The log's newest segment was written by a build that keeps `durable.mark`, but the file
    /// is gone: wharf cannot tell a torn tail from lost data, so it does not guess.
    #[error(
        "{path} is missing but the log was written with it: wharf cannot tell a torn tail from \
         damage without it; restore the data directory from a backup, or start once with \
         --salvage to accept whatever the log holds"
    )]
    MarkMissing {
        /// Where the mark should be.
        path: PathBuf,
    },
    /// An I/O error while scanning or preparing the log.
    #[error("i/o error during recovery on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is out of range.
    #[error("invalid write-ahead log configuration: {what}")]
    Config {
        /// What is wrong.
        what: &'static str,
    },
    /// Readying the segment to append to failed other than by an I/O error of its own.
    #[error("preparing the log for appending failed")]
    Prepare(#[source] WalError),
    /// The caller's record visitor refused a record.
    #[error("record {lsn} refused by the recovery visitor")]
    Visitor {
        /// The record's Lsn.
        lsn: Lsn,
        /// The visitor's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
