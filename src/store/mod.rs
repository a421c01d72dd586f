//! The store: broker events <-> write-ahead log records, and replay on start (checkpoints and
//! compaction come later). Depends on `broker` (the events and `Broker::apply`) and `wal`;
//! knows nothing of AMQP or tokio. The record layout is `codec.rs` and `storage-format.md`
//! ("Store records").
//!
//! # Contract with the server
//!
//! The broker task owns the [`Store`]. After each `broker.handle(..)` it passes the outcome's
//! events to [`Store::log`], which appends them without waiting and returns a ticket (the Lsn
//! of the last record). Publisher confirms, acks and declares that need durability wait for
//! [`Store::durable`] of that ticket (S-DUR-3, S-DUR-4); [`Store::durable_watermark`] is the
//! highest ticket known durable, so confirms can be released in bulk.
//!
//! Any error from [`Store::log`] or [`Store::durable`] is fail-stop: the broker has already
//! applied the events in memory, so the log and the model may differ from then on. The server
//! stops confirming and exits; reopening (recovery) is the way on (STYLE 3.3).
//!
//! # Recovery
//!
//! [`Store::open`] opens the log, and the WAL streams every intact record, in Lsn order, to a
//! visitor that decodes it and hands it to `Broker::apply` at once: memory holds one segment's
//! bytes and the model, never the list of records. A torn tail is cut and reported; damage in
//! the middle of the log, a record that does not decode and a record the model refuses (an
//! event naming an entity that does not exist) stop recovery with the file and offset named
//! (S-DUR-7), unless `salvage` is set, which skips and counts them.

pub mod codec;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::broker::{Broker, Event};
use crate::limits;
use crate::wal::{
    Appender, FileStorage, Lsn, RecordRef, RecoveryError, RecoveryMode, RecoveryReport, Storage,
    Wal, WalConfig, WalError, segment_file_name,
};
use codec::{DecodeError, EncodeError, STORE_FORMAT_VERSION, StoreRecord};

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// Skip corrupt records in the middle of the log and report them, instead of refusing to
    /// start (S-DUR-7). Off by default.
    pub salvage: bool,
}

/// What recovery found, for the one summary line the server logs at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoverySummary {
    /// Intact log records read (events and format markers).
    pub records: u64,
    /// Events applied to the broker.
    pub events: u64,
    /// Payload bytes of the records read.
    pub bytes: u64,
    /// Segment files scanned.
    pub segments: u64,
    /// Bytes of a torn tail cut off the last segment (0 if none).
    pub torn_tail_bytes: u64,
    /// Records skipped in salvage mode: lost to corruption in the log (counted from the gaps
    /// in the Lsn sequence, so a loss at the very end of the log is not counted here, only in
    /// `salvaged_bytes`), or intact but undecodable or refused by the model. Always 0 without
    /// `salvage`.
    pub salvaged_records: u64,
    /// Bytes of the log skipped in salvage mode.
    pub salvaged_bytes: u64,
}

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
    /// The log refused an append or failed to make it durable (fail-stop), or could not be
    /// opened for a reason other than those below.
    #[error("write-ahead log failed: {0}")]
    Log(String),
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
        reason: String,
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
        reason: String,
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
    /// An event's record is over `limits::RECORD_PAYLOAD_BYTES_MAX`; nothing of its batch was
    /// appended.
    #[error("record of {len} bytes is over the limit of {max}")]
    RecordTooLarge {
        /// Payload bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A position in the log: records up to and including a ticket are durable once the watermark
/// reaches it. Tickets grow with every append.
pub type Ticket = u64;

/// The durable store of one broker: the open log and a scratch buffer for encoding.
#[derive(Debug)]
pub struct Store {
    wal: Wal,
    appender: Appender,
    /// Encoded payloads of the batch being logged, reused across calls. Behind a mutex only
    /// because `log` takes `&self`; the broker task is its one user, so it is never contended.
    scratch: Mutex<Scratch>,
}

#[derive(Debug, Default)]
struct Scratch {
    bytes: Vec<u8>,
    /// (kind, end offset in `bytes`) per encoded event.
    records: Vec<(u8, usize)>,
}

impl Store {
    /// Opens (or creates) the store in `config.dir` on real files and replays it into a fresh
    /// broker. The caller then runs `broker.recovered(now)` and logs its events before serving
    /// clients.
    ///
    /// # Errors
    /// The directory cannot be created or read; the log is corrupt or inconsistent (without
    /// `salvage`); the log is of a newer format.
    pub fn open(config: &StoreConfig) -> Result<(Store, Broker, RecoverySummary), StoreError> {
        Self::open_with(config, Arc::new(FileStorage), &WalConfig::default())
    }

    /// [`Store::open`] on any storage (e.g. a `wal::SimStorage` that can lose power) and with
    /// a chosen log configuration. `wal.recovery_mode` is set from `config.salvage`.
    ///
    /// # Errors
    /// As [`Store::open`]; also an invalid `wal` configuration.
    pub fn open_with(
        config: &StoreConfig,
        storage: Arc<dyn Storage>,
        wal: &WalConfig,
    ) -> Result<(Store, Broker, RecoverySummary), StoreError> {
        let mut wal_config = wal.clone();
        wal_config.recovery_mode = if config.salvage {
            RecoveryMode::Salvage
        } else {
            RecoveryMode::Strict
        };
        let mut replay = Replay {
            broker: Broker::new(),
            dir: &config.dir,
            salvage: config.salvage,
            summary: RecoverySummary::default(),
            last_lsn: None,
            failure: None,
        };
        let opened = Wal::open(&config.dir, storage, &wal_config, &mut |record| {
            replay.visit(record)
        });
        let (wal, report) = match opened {
            Ok(opened) => opened,
            Err(err) => return Err(replay.failure.take().unwrap_or_else(|| from_recovery(err))),
        };
        let Replay {
            broker,
            mut summary,
            ..
        } = replay;
        summarise(&report, &mut summary);
        let store = Store {
            appender: wal.appender(),
            wal,
            scratch: Mutex::new(Scratch::default()),
        };
        store.log_format()?;
        Ok((store, broker, summary))
    }

    /// Writes the format marker: every open says which format the records after it use.
    fn log_format(&self) -> Result<(), StoreError> {
        let mut payload = Vec::with_capacity(size_of::<u16>());
        let kind = codec::encode_format(&mut payload);
        self.appender.append(kind.byte(), &payload)?;
        Ok(())
    }

    /// Appends the records for `events` without waiting; returns the ticket of the last one,
    /// or `None` when there was nothing to log. Every event is encoded and checked first, so
    /// an event that cannot be logged leaves nothing of its batch in the log.
    ///
    /// # Errors
    /// The log has failed (fail-stop), an event does not fit the format, or a record is too
    /// large. Every error is fail-stop for the caller (see the module doc).
    pub fn log(&self, events: &[Event]) -> Result<Option<Ticket>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        let mut guard = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let scratch = &mut *guard;
        scratch.bytes.clear();
        scratch.records.clear();
        for event in events {
            let start = scratch.bytes.len();
            let kind = codec::encode_event(event, &mut scratch.bytes)?;
            let len = scratch.bytes.len() - start;
            if len > limits::RECORD_PAYLOAD_BYTES_MAX {
                return Err(StoreError::RecordTooLarge {
                    len,
                    max: limits::RECORD_PAYLOAD_BYTES_MAX,
                });
            }
            scratch.records.push((kind.byte(), scratch.bytes.len()));
        }
        let mut start = 0;
        let mut last = Lsn(0);
        for &(kind, end) in &scratch.records {
            let payload = scratch.bytes.get(start..end).unwrap_or_default();
            last = self.appender.append(kind, payload)?.lsn;
            start = end;
        }
        Ok(Some(last.0))
    }

    /// Resolves once every record up to `ticket` is on stable storage (S-DUR-3). Ticket 0 is
    /// durable at once.
    ///
    /// # Errors
    /// The future's error is the log's latched failure (fail-stop) or its closing first.
    pub fn durable(
        &self,
        ticket: Ticket,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let durable = self.appender.durable(Lsn(ticket));
        async move { durable.await.map_err(StoreError::Wal) }
    }

    /// Blocks the calling thread until `ticket` is durable (for tools and tests without an
    /// executor).
    ///
    /// # Errors
    /// As [`Store::durable`].
    pub fn wait_durable(&self, ticket: Ticket) -> Result<(), StoreError> {
        Ok(self.appender.wait_durable(Lsn(ticket))?)
    }

    /// The log's sync latency and records-per-sync histograms (for metrics).
    pub fn sync_stats(&self) -> crate::wal::sync_stats::SyncSnapshot {
        self.appender.sync_stats()
    }

    /// The highest ticket known durable.
    pub fn durable_watermark(&self) -> Ticket {
        self.appender.durable_lsn().0
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        self.wal.dir()
    }

    /// Drains what is pending, makes it durable and closes the log.
    ///
    /// # Errors
    /// The log's latched failure (a write or sync failed at some point).
    pub fn close(self) -> Result<(), StoreError> {
        Ok(self.wal.close()?)
    }
}

/// The recovery visitor's state: the broker being rebuilt and what it met.
struct Replay<'a> {
    broker: Broker,
    dir: &'a Path,
    salvage: bool,
    summary: RecoverySummary,
    /// The Lsn of the previous record, to count what salvage mode skipped in between.
    last_lsn: Option<Lsn>,
    /// The store's own error when the visitor stops the scan (the WAL only sees a marker).
    failure: Option<StoreError>,
}

/// What the visitor returns to the WAL to stop the scan; the real error is in
/// [`Replay::failure`].
#[derive(Debug, thiserror::Error)]
#[error("store replay stopped")]
struct Stopped;

impl Replay<'_> {
    fn visit(
        &mut self,
        record: RecordRef<'_>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.summary.records += 1;
        self.summary.bytes += record.payload.len() as u64;
        if let Some(last) = self.last_lsn {
            // Only salvage mode lets the WAL skip records; strict recovery is gap-free.
            let skipped = record.lsn.0.saturating_sub(last.0).saturating_sub(1);
            self.summary.salvaged_records += skipped;
        }
        self.last_lsn = Some(record.lsn);
        let failure = match codec::decode(record.kind, record.payload) {
            Ok(StoreRecord::Format { version }) if version > STORE_FORMAT_VERSION => {
                // Never salvaged: everything after it would be misread.
                self.failure = Some(StoreError::UnsupportedVersion {
                    path: self.path_of(&record),
                    found: version,
                    supported: STORE_FORMAT_VERSION,
                });
                return Err(Box::new(Stopped));
            }
            Ok(StoreRecord::Format { .. }) => return Ok(()),
            Ok(StoreRecord::Event(event)) => match self.broker.apply(&event) {
                Ok(()) => {
                    self.summary.events += 1;
                    return Ok(());
                }
                Err(err) => StoreError::Inconsistent {
                    path: self.path_of(&record),
                    offset: record.position.offset,
                    lsn: record.lsn.0,
                    reason: err.to_string(),
                },
            },
            Err(err) => self.undecodable(&record, &err),
        };
        if self.salvage {
            tracing::warn!(error = %failure, "salvage: record skipped");
            self.summary.salvaged_records += 1;
            return Ok(());
        }
        self.failure = Some(failure);
        Err(Box::new(Stopped))
    }

    fn undecodable(&self, record: &RecordRef<'_>, err: &DecodeError) -> StoreError {
        StoreError::Corrupt {
            path: self.path_of(record),
            offset: record.position.offset,
            lsn: Some(record.lsn.0),
            reason: err.to_string(),
        }
    }

    fn path_of(&self, record: &RecordRef<'_>) -> PathBuf {
        self.dir.join(segment_file_name(record.position.segment))
    }
}

fn summarise(report: &RecoveryReport, summary: &mut RecoverySummary) {
    summary.segments = report.segments.len() as u64;
    if let Some(torn) = &report.torn_tail {
        tracing::warn!(
            path = %torn.path.display(),
            offset = torn.offset,
            bytes = torn.bytes,
            reason = %torn.reason,
            "torn tail of the log cut (S-DUR-7)"
        );
        summary.torn_tail_bytes = torn.bytes;
    }
    for loss in &report.salvaged {
        tracing::warn!(
            path = %loss.path.display(),
            offset = loss.offset,
            bytes = loss.bytes,
            reason = %loss.reason,
            "salvage: damaged stretch of the log skipped"
        );
        summary.salvaged_bytes += loss.bytes;
    }
}

fn from_recovery(err: RecoveryError) -> StoreError {
    match err {
        RecoveryError::Corrupt {
            path,
            offset,
            reason,
        } => StoreError::Corrupt {
            path,
            offset,
            lsn: None,
            reason: reason.to_string(),
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
        other => StoreError::Log(other.to_string()),
    }
}
