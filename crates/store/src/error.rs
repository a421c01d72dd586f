//! The store's errors: [`StoreError`], and the typed reasons it carries for damage it finds
//! ([`LogDamage`], [`CheckpointDamage`], [`LogGap`]). Each names the file and offset where
//! there is one (S-DUR-7), and wraps the error it comes from instead of its text.

use std::path::PathBuf;

use crate::codec::{DecodeError, EncodeError};
use wharf_broker::BrokerError;
use wharf_wal::{CorruptReason, RecoveryError, WalError};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory or a file in it could not be used.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The log stopped for a reason its user states (the server: the store was closed, the
    /// broker latched a storage failure), or a stored message could not be read back into a
    /// checkpoint (the broker's loader reports that as text).
    #[error("write-ahead log failed: {0}")]
    Log(String),
    /// The log could not be opened for a reason other than those below (e.g. an invalid
    /// configuration).
    /// The cause is the `source` only, not also in the message: a report of the chain
    /// (`wharf`'s exit) would print it twice.
    #[error("the write-ahead log cannot be opened")]
    Open(#[source] RecoveryError),
    /// Appending or waiting failed in the write-ahead log (fail-stop after an I/O failure).
    #[error(transparent)]
    Wal(#[from] WalError),
    /// The log is damaged where a torn tail cannot explain it, or holds a record that does not
    /// decode (S-DUR-7). `lsn` is known when the frame was intact.
    #[error("corrupt log in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the record frame.
        offset: u64,
        /// The record's Lsn, when its frame was intact.
        lsn: Option<u64>,
        /// What is wrong.
        reason: LogDamage,
    },
    /// An intact record that the model refuses (it names an entity that does not exist, or
    /// carries an invalid definition): the log is not this broker's, or was damaged before it
    /// was written.
    #[error("record {lsn} in {path} at offset {offset} does not fit the recovered state: {reason}")]
    Inconsistent {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the record frame.
        offset: u64,
        /// The record's Lsn.
        lsn: u64,
        /// The broker's reason.
        reason: BrokerError,
    },
    /// The log was written by a newer wharf, in a format this build must not guess at.
    #[error("{path}: store format version {found} is newer than this build reads ({supported})")]
    UnsupportedVersion {
        /// The segment file (of the log or of the record announcing the version).
        path: PathBuf,
        /// The version found.
        found: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// An event does not fit the record format; nothing of its batch was appended.
    #[error("event cannot be logged: {0}")]
    Encode(#[from] EncodeError),
    /// A checkpoint file is damaged (S-DUR-7): recovery refuses it rather than start from a
    /// state it cannot trust (salvage mode falls back to an older checkpoint or the log).
    #[error("corrupt checkpoint {path} at offset {offset}: {reason}")]
    CorruptCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// Byte offset of the damaged header or record.
        offset: u64,
        /// What is wrong.
        reason: CheckpointDamage,
    },
    /// The log does not continue the checkpoint: records right after it are missing.
    #[error("{path}: the log does not continue checkpoint at Lsn {checkpoint}: {reason}")]
    LogBehindCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// Its Lsn.
        checkpoint: u64,
        /// What is missing.
        reason: LogGap,
    },
    /// An event's record is over `limits::RECORD_PAYLOAD_BYTES_MAX`; nothing of its batch was
    /// appended.
    #[error("record of {len} bytes is over the limit of {max}")]
    RecordTooLarge {
        /// Payload bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The thread writing a checkpoint panicked (a bug; the log still holds everything).
    #[error("checkpoint thread panicked")]
    CheckpointPanicked,
}

impl From<RecoveryError> for StoreError {
    /// Damage and a newer format keep their file and offset; an I/O error its path.
    fn from(err: RecoveryError) -> StoreError {
        match err {
            RecoveryError::Corrupt {
                path,
                offset,
                reason,
            } => StoreError::Corrupt {
                path,
                offset,
                lsn: None,
                reason: LogDamage::Frame(reason),
            },
            RecoveryError::UnsupportedVersion {
                path,
                found,
                supported,
            } => StoreError::UnsupportedVersion {
                path,
                found,
                supported,
            },
            RecoveryError::Io { path, source } => StoreError::Io { path, source },
            other => StoreError::Open(other),
        }
    }
}

/// What is wrong with a damaged stretch of the log ([`StoreError::Corrupt`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogDamage {
    /// The frame or segment header does not check (the WAL's finding).
    #[error("{0}")]
    Frame(CorruptReason),
    /// An intact frame whose payload is not a valid store record.
    #[error("{0}")]
    Record(DecodeError),
}

/// What is wrong with a damaged checkpoint ([`StoreError::CorruptCheckpoint`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointDamage {
    /// The header or the framing does not check (bad magic or CRC, a short file, a record out
    /// of sequence, bytes after the last record).
    #[error("{0}")]
    Format(&'static str),
    /// An intact frame whose payload is not a valid record.
    #[error("{0}")]
    Record(DecodeError),
    /// A record of a kind a checkpoint never holds (log-only events, the format marker).
    #[error("record kind {0:#04x} is not allowed in a checkpoint")]
    KindNotAllowed(u8),
    /// A record the model refuses; `record` counts from 1.
    #[error("record {record} does not fit the model: {reason}")]
    Refused {
        /// The record's number in the file.
        record: u64,
        /// The broker's reason.
        reason: BrokerError,
    },
    /// It refers to messages in a log segment that is not there (format 4).
    #[error("it refers to log segment {0}, which is missing")]
    SegmentMissing(u64),
}

impl From<&'static str> for CheckpointDamage {
    fn from(what: &'static str) -> CheckpointDamage {
        CheckpointDamage::Format(what)
    }
}

/// How the log fails to continue a checkpoint ([`StoreError::LogBehindCheckpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LogGap {
    /// The log ends before the checkpoint's Lsn.
    #[error("the log ends at Lsn {0}")]
    EndsAt(u64),
    /// The first record after the checkpoint is not the next Lsn.
    #[error("the first log record after it is Lsn {0}")]
    FirstAfterIs(u64),
    /// The log holds nothing at or before the checkpoint and starts after its next Lsn.
    #[error("the log starts at Lsn {0}")]
    StartsAt(u64),
}
