//! The store: broker events <-> write-ahead log records, checkpoints (`checkpoint.rs`) and the
//! segment reclamation they allow, and recovery on start. Depends on `broker` (the events,
//! `Broker::apply`, `Broker::snapshot`) and `wal`; knows nothing of AMQP or tokio. The record
//! layout is `codec.rs` and `storage-format.md` ("Store records", "Checkpoints").
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
//! # Checkpoints
//!
//! After each batch the server calls [`Store::maybe_checkpoint`]: once the log written since
//! the last checkpoint exceeds `max(limits::CHECKPOINT_LOG_BYTES_MIN, last checkpoint size)`
//! it takes `Broker::snapshot` (cheap: shared `Arc`s) and a thread of its own waits until the
//! log is durable through the snapshot's Lsn, writes the checkpoint atomically and deletes
//! the segments it covers. At a clean shutdown [`Store::checkpoint_now`] does the same
//! synchronously. A failed checkpoint is logged and retried later, never fail-stop: the log
//! still holds everything.
//!
//! # Recovery
//!
//! [`Store::open`] removes temporary checkpoint files, loads the newest checkpoint into a
//! fresh broker, then opens the log, and the WAL streams every intact record, in Lsn order,
//! to a visitor that skips those the checkpoint covers and hands the others, decoded, to
//! `Broker::apply` at once: memory holds one segment's bytes and the model, never the list of
//! records. A torn tail is cut and reported; damage in
//! the middle of the log, a record that does not decode and a record the model refuses (an
//! event naming an entity that does not exist) stop recovery with the file and offset named
//! (S-DUR-7), unless `salvage` is set, which skips and counts them.

pub mod checkpoint;
pub mod codec;
pub mod stored;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use codec::{DecodeError, EncodeError, STORE_FORMAT_VERSION, StoreRecord};
use stored::{CheckpointView, StoredReader};
use wharf_base::limits;
use wharf_broker::{Broker, Event, Message, Snapshot};
use wharf_wal::{
    Appender, FileStorage, Lsn, Reclaimer, RecordRef, RecoveryError, RecoveryMode, RecoveryReport,
    Storage, Wal, WalConfig, WalError, segment_file_name,
};

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
    /// The Lsn of the checkpoint recovery started from (`None`: the whole log was replayed).
    pub checkpoint_lsn: Option<u64>,
    /// Messages the checkpoint carried.
    pub checkpoint_messages: u64,
    /// Log records still on disk but already covered by the checkpoint (read, not applied).
    pub covered_records: u64,
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
    /// A checkpoint file is damaged (S-DUR-7): recovery refuses it rather than start from a
    /// state it cannot trust (salvage mode falls back to an older checkpoint or the log).
    #[error("corrupt checkpoint {path} at offset {offset}: {reason}")]
    CorruptCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// Byte offset of the damaged header or record.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The log does not continue the checkpoint: records right after it are missing.
    #[error("{path}: the log does not continue checkpoint at Lsn {checkpoint}: {reason}")]
    LogBehindCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// Its Lsn.
        checkpoint: u64,
        /// What is missing.
        reason: String,
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
}

/// A position in the log: records up to and including a ticket are durable once the watermark
/// reaches it. Tickets grow with every append.
pub type Ticket = u64;

/// When the store takes a checkpoint on its own ([`Store::maybe_checkpoint`]): once the log
/// written since the last one exceeds `max(log_bytes_min, size of the last checkpoint)`, so
/// that writing checkpoints costs at most about as much again as the log itself, and the disk
/// holds about twice the live data plus a few segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointTrigger {
    /// Take periodic checkpoints at all (explicit ones are always possible).
    pub enabled: bool,
    /// The floor of the threshold: `limits::CHECKPOINT_LOG_BYTES_MIN` by default.
    pub log_bytes_min: u64,
}

impl Default for CheckpointTrigger {
    fn default() -> Self {
        Self {
            enabled: true,
            log_bytes_min: limits::CHECKPOINT_LOG_BYTES_MIN,
        }
    }
}

/// A checkpoint made durable, and what it reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointDone {
    /// The Lsn it covers.
    pub lsn: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Log segments deleted after it.
    pub segments_deleted: u64,
}

/// The checkpoint bookkeeping of an open store.
#[derive(Debug, Default)]
struct Checkpoints {
    trigger: CheckpointTrigger,
    /// The newest durable checkpoint.
    newest: Option<u64>,
    /// Its size: the estimate of the live durable bytes.
    live_bytes: u64,
    /// `logged_bytes` when the newest checkpoint's snapshot was taken, or when the last
    /// attempt failed (so a failing disk is retried after another threshold, not at once).
    base_bytes: u64,
    /// The segment being written when the newest checkpoint's snapshot was taken.
    base_segment: u64,
    in_flight: Option<InFlight>,
}

#[derive(Debug)]
struct InFlight {
    at_bytes: u64,
    at_segment: u64,
    handle: std::thread::JoinHandle<Result<CheckpointDone, StoreError>>,
}

/// What the checkpoint thread needs: everything is shared or owned, nothing borrows the store.
struct Job {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    lsn: Lsn,
    snapshot: Snapshot,
    appender: Appender,
    reclaimer: Reclaimer,
    reader: Arc<StoredReader>,
}

impl Job {
    /// Waits until the log is durable through the snapshot's Lsn (a checkpoint must never
    /// describe records a crash could lose), writes the checkpoint atomically, then deletes
    /// the segments it covers (only now: the log still held everything until the rename and
    /// the directory sync).
    fn run(self) -> Result<CheckpointDone, StoreError> {
        self.appender.wait_durable(self.lsn)?;
        let reader = &self.reader;
        let parts = |s: &wharf_broker::StoredMessage| reader.message_part(s);
        let (bytes, index) =
            checkpoint::write(&*self.storage, &self.dir, self.lsn, &self.snapshot, &parts)?;
        drop(self.snapshot);
        // Stored messages are read from the new checkpoint before any segment it covers goes.
        let path = self.dir.join(checkpoint::file_name(self.lsn));
        let file = self
            .storage
            .open(&path, false)
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        self.reader.install(CheckpointView {
            lsn: self.lsn.0,
            path,
            file: Arc::from(file),
            index,
        });
        let covered = self
            .reclaimer
            .segments_through(self.lsn)
            .map_err(from_recovery)?;
        for &id in &covered {
            self.reclaimer.delete_segment(id)?;
        }
        Ok(CheckpointDone {
            lsn: self.lsn.0,
            bytes,
            segments_deleted: covered.len() as u64,
        })
    }
}

/// The durable store of one broker: the open log, a scratch buffer for encoding, and the
/// checkpoints.
#[derive(Debug)]
pub struct Store {
    wal: Wal,
    appender: Appender,
    storage: Arc<dyn Storage>,
    /// Encoded payloads of the batch being logged, reused across calls. Behind a mutex only
    /// because `log` takes `&self`; the broker task is its one user, so it is never contended.
    scratch: Mutex<Scratch>,
    /// The Lsn of the last record appended: a snapshot taken now reflects exactly the log
    /// through it.
    last_lsn: AtomicU64,
    /// Frame bytes appended since open (the checkpoint trigger's clock).
    logged_bytes: AtomicU64,
    /// The segment the last record went to.
    last_segment: AtomicU64,
    /// The log's segment size.
    segment_bytes: u64,
    checkpoints: Checkpoints,
    /// Reads stored messages back (the broker holds it as its loader).
    reader: Arc<StoredReader>,
}

#[derive(Debug, Default)]
struct Scratch {
    bytes: Vec<u8>,
    /// (kind, end offset in `bytes`, the message the record holds) per encoded event.
    records: Vec<(u8, usize, Option<Arc<Message>>)>,
}

impl Store {
    /// Opens (or creates) the store in `config.dir` on real files and recovers it into a
    /// fresh broker: the newest checkpoint, then the log after it. The caller then runs
    /// `broker.recovered(now)` and logs its events before serving clients.
    ///
    /// # Errors
    /// The directory cannot be created or read; the log or the checkpoint is corrupt or
    /// inconsistent (without `salvage`); the log is of a newer format.
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
        storage
            .create_dir_all(&config.dir)
            .map_err(|source| StoreError::Io {
                path: config.dir.clone(),
                source,
            })?;
        let mut start = load_checkpoint(&*storage, &config.dir, config.salvage)?;
        let view = start.view.take();
        let mut replay = Replay {
            broker: start.broker,
            dir: &config.dir,
            salvage: config.salvage,
            summary: RecoverySummary {
                checkpoint_lsn: start.lsn.map(|l| l.0),
                checkpoint_messages: start.messages,
                ..RecoverySummary::default()
            },
            last_lsn: None,
            covered_through: start.lsn.unwrap_or_default(),
            tail_first: None,
            failure: None,
        };
        let opened = Wal::open(
            &config.dir,
            Arc::clone(&storage),
            &wal_config,
            &mut |record| replay.visit(record),
        );
        let (wal, report) = match opened {
            Ok(opened) => opened,
            Err(err) => return Err(replay.failure.take().unwrap_or_else(|| from_recovery(err))),
        };
        if let (Some(lsn), Some(path)) = (start.lsn, &start.path) {
            check_continues(&report, replay.tail_first, lsn, path, config.salvage)?;
        }
        let Replay {
            mut broker,
            mut summary,
            ..
        } = replay;
        summarise(&report, &mut summary);
        let reader = Arc::new(StoredReader::new(wal.reader(), view));
        broker.set_loader(Arc::clone(&reader) as Arc<dyn wharf_broker::MessageLoader>);
        let store = Store {
            appender: wal.appender(),
            wal,
            storage,
            scratch: Mutex::new(Scratch::default()),
            last_lsn: AtomicU64::new(report.next_lsn.0.saturating_sub(1)),
            logged_bytes: AtomicU64::new(0),
            last_segment: AtomicU64::new(0),
            segment_bytes: wal_config.segment_bytes_max,
            checkpoints: Checkpoints {
                newest: start.lsn.map(|l| l.0),
                live_bytes: start.bytes,
                ..Checkpoints::default()
            },
            reader,
        };
        store.log_format()?;
        Ok((store, broker, summary))
    }

    /// Writes the format marker: every open says which format the records after it use.
    fn log_format(&self) -> Result<(), StoreError> {
        let mut payload = Vec::with_capacity(size_of::<u16>());
        let kind = codec::encode_format(&mut payload);
        let appended = self.appender.append(kind.byte(), &payload)?;
        self.last_lsn.store(appended.lsn.0, Ordering::Release);
        self.last_segment
            .fetch_max(appended.position.segment.0, Ordering::Relaxed);
        Ok(())
    }

    /// Appends the records for `events` without waiting; returns the ticket of the last one,
    /// or `None` when there was nothing to log. Every event is encoded and checked first, so
    /// an event that cannot be logged leaves nothing of its batch in the log. An id-list
    /// event (settle, delivery, return, purge) longer than `limits::RECORD_IDS_MAX` is logged
    /// as several records of the same kind over consecutive parts of its ids, which replay
    /// applies to the same effect.
    ///
    /// # Errors
    /// The log has failed (fail-stop), an event does not fit the format, or a record is too
    /// large (e.g. a message routed to so many long-named queues that its one record cannot
    /// hold them); nothing of the batch was appended then. Every error is fail-stop for the
    /// caller (see the module doc).
    pub fn log(&self, events: &[Event]) -> Result<Option<Ticket>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        let mut guard = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let scratch = &mut *guard;
        scratch.bytes.clear();
        scratch.records.clear();
        for event in events {
            match split_ids(event) {
                None => scratch.encode(event)?,
                Some(parts) => {
                    for part in &parts {
                        scratch.encode(part)?;
                    }
                }
            }
        }
        let mut start = 0;
        let mut last = Lsn(0);
        let mut bytes = 0u64;
        for (kind, end, message) in scratch.records.drain(..) {
            let payload = scratch.bytes.get(start..end).unwrap_or_default();
            let appended = self.appender.append(kind, payload)?;
            last = appended.lsn;
            self.last_segment
                .fetch_max(appended.position.segment.0, Ordering::Relaxed);
            // The broker may now leave the message's content on disk once `last` is durable.
            if let Some(message) = message
                && let Some(at) = stored::pack_log(appended.position)
            {
                message.stored.set(last.0, at);
            }
            bytes += wharf_wal::record::frame_bytes(payload.len()) as u64;
            start = end;
        }
        self.last_lsn.store(last.0, Ordering::Release);
        self.logged_bytes.fetch_add(bytes, Ordering::Relaxed);
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
    pub fn sync_stats(&self) -> wharf_wal::sync_stats::SyncSnapshot {
        self.appender.sync_stats()
    }

    /// The highest ticket known durable.
    pub fn durable_watermark(&self) -> Ticket {
        self.appender.durable_lsn().0
    }

    /// A handle on the log for its state (`disk_full`, `stats`) and for nudging a writer paused
    /// on a full disk (`retry_now`); the server's resource monitor holds one.
    pub fn wal_appender(&self) -> Appender {
        self.appender.clone()
    }

    /// The reader of stored messages, for a broker that logs to this store but was not
    /// recovered from it (`Store::open` hands it to the broker it returns).
    pub fn loader(&self) -> Arc<dyn wharf_broker::MessageLoader> {
        Arc::clone(&self.reader) as Arc<dyn wharf_broker::MessageLoader>
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        self.wal.dir()
    }

    /// Sets when periodic checkpoints are taken (tests use tiny thresholds).
    pub fn set_checkpoint_trigger(&mut self, trigger: CheckpointTrigger) {
        self.checkpoints.trigger = trigger;
    }

    /// The Lsn of the newest durable checkpoint, if any.
    pub fn checkpoint_lsn(&self) -> Option<u64> {
        self.checkpoints.newest
    }

    /// Called by the broker task after each batch has been logged (so `broker` reflects the
    /// log exactly through its last record): collects a finished checkpoint, and when the log
    /// written since the last one exceeds the trigger's threshold (or the log moved to a new
    /// segment while the live data is small), takes a snapshot (one reference per message)
    /// and writes it on a thread of its own. Returns true when it started
    /// one. A failed checkpoint is logged and retried after another threshold of log; it
    /// loses nothing, since the log still holds everything.
    pub fn maybe_checkpoint(&mut self, broker: &Broker) -> bool {
        self.collect_checkpoint(false);
        let c = &self.checkpoints;
        if !c.trigger.enabled || c.in_flight.is_some() {
            return false;
        }
        let since = self.logged_since_checkpoint();
        // Also right after the log moved to a new segment while the live data is at most a
        // segment: the checkpoint then costs no more than the segment of log did, and the
        // sealed segment goes at once, so the directory holds one segment, not two, most of
        // the time.
        let segment = self.last_segment.load(Ordering::Relaxed);
        let rolled = segment > c.base_segment && c.live_bytes <= self.segment_bytes;
        if since <= c.trigger.log_bytes_min.max(c.live_bytes) && !rolled {
            return false;
        }
        let job = self.job(broker.snapshot());
        let at_bytes = self.logged_bytes.load(Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("wharf-checkpoint".to_owned())
            .spawn(move || job.run());
        match spawned {
            Ok(handle) => {
                self.checkpoints.in_flight = Some(InFlight {
                    at_bytes,
                    at_segment: segment,
                    handle,
                });
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint thread could not start; retrying later");
                self.checkpoints.base_bytes = at_bytes;
                self.checkpoints.base_segment = segment;
                false
            }
        }
    }

    /// Waits for the checkpoint being written, if any, and returns how it ended.
    pub fn wait_checkpoint(&mut self) -> Option<Result<CheckpointDone, String>> {
        self.collect_checkpoint(true)
    }

    /// Writes a checkpoint of `snapshot` now, on the calling thread (at a clean shutdown, from
    /// a blocking task; and in tests). `snapshot` must be taken after the last [`Store::log`]
    /// call. Waits for a checkpoint in flight first; does nothing when no record but the
    /// format marker was logged since the newest checkpoint.
    ///
    /// # Errors
    /// Waiting for the log, writing the checkpoint or deleting covered segments failed (the
    /// log still holds everything).
    pub fn checkpoint_now(
        &mut self,
        snapshot: Snapshot,
    ) -> Result<Option<CheckpointDone>, StoreError> {
        self.collect_checkpoint(true);
        let last = self.last_lsn.load(Ordering::Acquire);
        if self
            .checkpoints
            .newest
            .is_some_and(|n| last <= n.saturating_add(1))
        {
            return Ok(None);
        }
        let at_bytes = self.logged_bytes.load(Ordering::Relaxed);
        let at_segment = self.last_segment.load(Ordering::Relaxed);
        let done = self.job(snapshot).run()?;
        self.checkpoint_finished(done, at_bytes, at_segment);
        Ok(Some(done))
    }

    /// Log bytes written since the newest checkpoint's snapshot (the trigger's clock).
    fn logged_since_checkpoint(&self) -> u64 {
        self.logged_bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.checkpoints.base_bytes)
    }

    /// The checkpoint of a clean shutdown: written as [`Store::checkpoint_now`] when the log
    /// since the last checkpoint is over twice the periodic threshold (`max(log_bytes_min,
    /// last checkpoint size)`), skipped otherwise. A checkpoint copies every live message, and
    /// writing (with its fsync) costs more than reading: below that, writing one would make
    /// the stop slower than it makes the next start faster. (After a batch the log since the
    /// last checkpoint is at most about the threshold, so this is for a stop while one is
    /// still being written.)
    ///
    /// # Errors
    /// As [`Store::checkpoint_now`].
    pub fn checkpoint_at_shutdown(
        &mut self,
        snapshot: Snapshot,
    ) -> Result<Option<CheckpointDone>, StoreError> {
        self.collect_checkpoint(true);
        let c = &self.checkpoints;
        let since = self.logged_since_checkpoint();
        if since <= c.trigger.log_bytes_min.max(c.live_bytes).saturating_mul(2) {
            return Ok(None);
        }
        self.checkpoint_now(snapshot)
    }

    fn job(&self, snapshot: Snapshot) -> Job {
        Job {
            storage: Arc::clone(&self.storage),
            dir: self.wal.dir().to_owned(),
            lsn: Lsn(self.last_lsn.load(Ordering::Acquire)),
            snapshot,
            appender: self.appender.clone(),
            reclaimer: self.wal.reclaimer(),
            reader: Arc::clone(&self.reader),
        }
    }

    /// Joins the checkpoint thread when it is done (or at once when `wait`).
    fn collect_checkpoint(&mut self, wait: bool) -> Option<Result<CheckpointDone, String>> {
        let finished = self
            .checkpoints
            .in_flight
            .as_ref()
            .is_some_and(|f| wait || f.handle.is_finished());
        if !finished {
            return None;
        }
        let InFlight {
            at_bytes,
            at_segment,
            handle,
        } = self.checkpoints.in_flight.take()?;
        let result = match handle.join() {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("checkpoint thread panicked".to_owned()),
        };
        match &result {
            Ok(done) => self.checkpoint_finished(*done, at_bytes, at_segment),
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint failed; the log keeps everything, retrying later");
                self.checkpoints.base_bytes = self.logged_bytes.load(Ordering::Relaxed);
                self.checkpoints.base_segment = self.last_segment.load(Ordering::Relaxed);
            }
        }
        Some(result)
    }

    fn checkpoint_finished(&mut self, done: CheckpointDone, at_bytes: u64, at_segment: u64) {
        tracing::info!(
            lsn = done.lsn,
            bytes = done.bytes,
            segments_deleted = done.segments_deleted,
            "checkpoint written"
        );
        let c = &mut self.checkpoints;
        c.newest = Some(done.lsn);
        c.live_bytes = done.bytes;
        c.base_bytes = at_bytes;
        c.base_segment = at_segment;
    }

    /// Drains what is pending, makes it durable and closes the log (after waiting for a
    /// checkpoint in flight).
    ///
    /// # Errors
    /// The log's latched failure (a write or sync failed at some point).
    pub fn close(mut self) -> Result<(), StoreError> {
        self.collect_checkpoint(true);
        Ok(self.wal.close()?)
    }
}

impl Scratch {
    /// Encodes one event as the next record of the batch, checking its size.
    fn encode(&mut self, event: &Event) -> Result<(), StoreError> {
        let start = self.bytes.len();
        let kind = codec::encode_event(event, &mut self.bytes)?;
        let len = self.bytes.len() - start;
        if len > limits::RECORD_PAYLOAD_BYTES_MAX {
            return Err(StoreError::RecordTooLarge {
                len,
                max: limits::RECORD_PAYLOAD_BYTES_MAX,
            });
        }
        self.records
            .push((kind.byte(), self.bytes.len(), message_of(event).cloned()));
        Ok(())
    }
}

/// The message an event's record holds, if any.
fn message_of(event: &Event) -> Option<&Arc<Message>> {
    match event {
        Event::Published { message, .. } | Event::Scheduled { message, .. } => {
            Some(&message.message)
        }
        Event::DeadLettered {
            message: Some(message),
            ..
        } => Some(&message.message),
        _ => None,
    }
}

/// An id-list event longer than `limits::RECORD_IDS_MAX`, as consecutive events of the same
/// kind over parts of its ids (in order); `None` when it fits one record.
fn split_ids(event: &Event) -> Option<Vec<Event>> {
    let max = limits::RECORD_IDS_MAX;
    let parts = |ids: &[wharf_broker::MessageId], make: &dyn Fn(Vec<_>) -> Event| {
        (ids.len() > max).then(|| ids.chunks(max).map(|c| make(c.to_vec())).collect())
    };
    match event {
        Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        } => parts(ids, &|ids| Event::Settled {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
            kind: *kind,
        }),
        Event::Delivered { vhost, queue, ids } => parts(ids, &|ids| Event::Delivered {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        }),
        Event::Returned { vhost, queue, ids } => parts(ids, &|ids| Event::Returned {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        }),
        Event::Purged { vhost, queue, ids } => parts(ids, &|ids| Event::Purged {
            vhost: vhost.clone(),
            queue: queue.clone(),
            ids,
        }),
        _ => None,
    }
}

/// Where recovery starts: a broker loaded from the newest valid checkpoint, or a fresh one.
struct Start {
    broker: Broker,
    lsn: Option<Lsn>,
    path: Option<PathBuf>,
    bytes: u64,
    messages: u64,
    /// The checkpoint, open for reading its messages back.
    view: Option<CheckpointView>,
}

/// Removes temporary checkpoints (never in use), then loads the newest checkpoint. A damaged
/// one is an error naming the file (S-DUR-7); in salvage mode the next older one is tried,
/// then the log alone.
fn load_checkpoint(storage: &dyn Storage, dir: &Path, salvage: bool) -> Result<Start, StoreError> {
    checkpoint::remove_temporaries(storage, dir)?;
    for (lsn, path) in checkpoint::list(storage, dir)? {
        let mut broker = Broker::new();
        match checkpoint::load(storage, &path, &mut broker) {
            Ok(loaded) => {
                let file = storage
                    .open(&path, false)
                    .map_err(|source| StoreError::Io {
                        path: path.clone(),
                        source,
                    })?;
                let bytes = file.len_bytes().unwrap_or(0);
                // Older ones are superseded (a crash came between installing this one and
                // removing them).
                checkpoint::remove_older(storage, dir, lsn)?;
                return Ok(Start {
                    broker,
                    lsn: Some(loaded.header.lsn),
                    path: Some(path.clone()),
                    bytes,
                    messages: loaded.messages,
                    view: Some(CheckpointView {
                        lsn: loaded.header.lsn.0,
                        path,
                        file: Arc::from(file),
                        index: loaded.index,
                    }),
                });
            }
            Err(err) if salvage && !matches!(err, StoreError::UnsupportedVersion { .. }) => {
                tracing::warn!(error = %err, "salvage: damaged checkpoint skipped");
            }
            Err(err) => return Err(err),
        }
    }
    Ok(Start {
        broker: Broker::new(),
        lsn: None,
        path: None,
        bytes: 0,
        messages: 0,
        view: None,
    })
}

/// The log must hold every record after the checkpoint: its first record after `lsn` must
/// be `lsn + 1`, and it must not end before `lsn`.
fn check_continues(
    report: &RecoveryReport,
    tail_first: Option<Lsn>,
    lsn: Lsn,
    path: &Path,
    salvage: bool,
) -> Result<(), StoreError> {
    let reason = if report.next_lsn.0 <= lsn.0 {
        format!(
            "the log ends at Lsn {}",
            report.next_lsn.0.saturating_sub(1)
        )
    } else if tail_first.is_some_and(|first| first.0 != lsn.0 + 1) {
        format!(
            "the first log record after it is Lsn {}",
            tail_first.map_or(0, |l| l.0)
        )
    } else if tail_first.is_none() && report.next_lsn.0 != lsn.0 + 1 {
        format!("the log starts at Lsn {}", report.next_lsn.0)
    } else {
        return Ok(());
    };
    let err = StoreError::LogBehindCheckpoint {
        path: path.to_owned(),
        checkpoint: lsn.0,
        reason,
    };
    if salvage {
        tracing::warn!(error = %err, "salvage: continuing anyway");
        return Ok(());
    }
    Err(err)
}

/// The recovery visitor's state: the broker being rebuilt and what it met.
struct Replay<'a> {
    broker: Broker,
    dir: &'a Path,
    salvage: bool,
    summary: RecoverySummary,
    /// The Lsn of the previous record, to count what salvage mode skipped in between.
    last_lsn: Option<Lsn>,
    /// Records through this Lsn are in the checkpoint recovery started from: skipped.
    covered_through: Lsn,
    /// The first record after `covered_through`.
    tail_first: Option<Lsn>,
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
        if record.lsn <= self.covered_through {
            self.summary.covered_records += 1;
            return Ok(());
        }
        self.tail_first.get_or_insert(record.lsn);
        self.summary.records += 1;
        self.summary.bytes += record.payload.len() as u64;
        if let Some(last) = self.last_lsn {
            // Only salvage mode lets the WAL skip records; strict recovery is gap-free.
            let skipped = record.lsn.0.saturating_sub(last.0).saturating_sub(1);
            self.summary.salvaged_records += skipped;
        }
        self.last_lsn = Some(record.lsn);
        // Messages are applied as stored references: their content stays in the segment.
        let stored = stored::pack_log(record.position)
            .map(|at| codec::decode_stored(record.kind, record.payload, at));
        match stored {
            Some(Ok(Some(event))) => {
                let applied = self.broker.apply_stored(&event);
                return self.applied(&record, applied);
            }
            Some(Err(err)) => {
                let failure = self.undecodable(&record, &err);
                return self.refuse(failure);
            }
            // Not a message record (or a position that does not pack): decoded whole.
            Some(Ok(None)) | None => {}
        }
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
            Ok(StoreRecord::Event(event)) => {
                let applied = self.broker.apply(&event);
                return self.applied(&record, applied);
            }
            Err(err) => self.undecodable(&record, &err),
        };
        self.refuse(failure)
    }

    /// Counts an event the broker applied, or refuses one it did not fit.
    fn applied(
        &mut self,
        record: &RecordRef<'_>,
        applied: Result<(), wharf_broker::BrokerError>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match applied {
            Ok(()) => {
                self.summary.events += 1;
                Ok(())
            }
            Err(err) => self.refuse(StoreError::Inconsistent {
                path: self.path_of(record),
                offset: record.position.offset,
                lsn: record.lsn.0,
                reason: err.to_string(),
            }),
        }
    }

    /// A record recovery cannot apply: skipped and counted in salvage mode, else the end.
    fn refuse(
        &mut self,
        failure: StoreError,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
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

mod appender;
pub use appender::LogHealth;

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_broker::{MessageId, SettleKind};

    #[test]
    fn long_id_lists_are_split_in_order_and_short_ones_kept() {
        let max = limits::RECORD_IDS_MAX;
        let ids: Vec<MessageId> = (0..(max as u64 * 2 + 5)).map(MessageId).collect();
        let settled = Event::Settled {
            vhost: "/".into(),
            queue: "q".into(),
            ids: ids.clone(),
            kind: SettleKind::Ack,
        };
        let parts = split_ids(&settled).expect("longer than the limit");
        assert_eq!(parts.len(), 3);
        let mut rejoined = Vec::new();
        for e in &parts {
            let Event::Settled { ids, kind, .. } = e else {
                panic!("{e:?}");
            };
            assert!(ids.len() <= max);
            assert_eq!(*kind, SettleKind::Ack);
            rejoined.extend_from_slice(ids);
        }
        assert_eq!(rejoined, ids);
        let short = Event::Purged {
            vhost: "/".into(),
            queue: "q".into(),
            ids: ids[..max].to_vec(),
        };
        assert!(split_ids(&short).is_none());
    }
}
