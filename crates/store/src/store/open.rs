//! Opening a store (recovery) and closing it.
//!
//! [`Store::open`] removes temporary checkpoint files, loads the newest checkpoint into a
//! fresh broker, then opens the log, and the WAL streams every intact record, in Lsn order,
//! to the replay visitor (`replay.rs`), which skips those the checkpoint covers and applies
//! the others. A torn tail is cut and reported; damage in the middle of the log, a record
//! that does not decode and a record the model refuses stop recovery with the file and offset
//! named (S-DUR-7), unless `salvage` is set, which skips and counts them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Checkpoints, Store, StoreConfig};
use crate::batch::Scratch;
use crate::checkpoint;
use crate::codec;
use crate::disk_demand::DiskDemand;
use crate::error::{CheckpointDamage, LogGap, StoreError};
use crate::replay::{RecoverySummary, Replay};
use crate::segment_index::{
    self,
    writer::{self, Collector},
};
use crate::stored::{CheckpointView, StoredReader};
use wharf_broker::{Broker, Event, MessageId, MessageLoader, MessageRef};
use wharf_wal::{FileStorage, Lsn, RecoveryMode, RecoveryReport, Storage, Wal, WalConfig};

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
        let start = load_checkpoint(&*storage, &config.dir, config.salvage)?;
        // Segments the checkpoint covers whole are kept only for the messages it refers to:
        // not read now (their records are checked when a message is read back).
        wal_config.covered_through = start.lsn.unwrap_or(Lsn(0));
        let mut replay = Replay::new(
            start.broker,
            &config.dir,
            config.salvage,
            start.lsn,
            start.messages,
        );
        let opened = Wal::open(
            &config.dir,
            Arc::clone(&storage),
            &wal_config,
            &mut |record| replay.visit(record),
        );
        let (wal, report) = match opened {
            Ok(opened) => opened,
            Err(err) => return Err(replay.take_failure().unwrap_or_else(|| err.into())),
        };
        if let (Some(lsn), Some(path)) = (start.lsn, &start.path) {
            check_continues(&report, replay.tail_first(), lsn, path, config.salvage)?;
        }
        let (mut broker, summary) = replay.finish(&report);
        let reader = Arc::new(StoredReader::new(wal.reader(), start.view));
        broker.set_loader(Arc::clone(&reader) as Arc<dyn MessageLoader>);
        broker.set_record_size(Arc::new(crate::record_size::MessageRecordSize));
        let demand = Arc::new(DiskDemand::new(wal_config.segment_bytes_max));
        // The room the next checkpoint needs from the start (S-DISK-10), before any estimate:
        // the newest checkpoint's size, or the allowance of the recovered messages if more.
        let totals = broker.totals();
        demand.set_reclaim(start.bytes.max(
            totals.ready.saturating_add(totals.unacked) * super::checkpoints::PER_MESSAGE_BYTES,
        ));
        let (index_writer, scratch) = index_writer(
            &storage,
            &config.dir,
            &wal,
            &report,
            &demand,
            wal_config.inline_writer,
        );
        let store = Store {
            appender: wal.appender(),
            wal,
            storage,
            scratch: Mutex::new(scratch),
            index_writer,
            last_lsn: AtomicU64::new(report.next_lsn.0.saturating_sub(1)),
            logged_bytes: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            last_segment: AtomicU64::new(0),
            segment_bytes: wal_config.segment_bytes_max,
            checkpoints: Checkpoints {
                newest: start.lsn.map(|l| l.0),
                live_bytes: start.bytes,
                inline: wal_config.inline_writer,
                ..Checkpoints::default()
            },
            reader,
            demand,
        };
        store.log_format()?;
        let mut summary = summary;
        if config.salvage {
            if let Some(lsn) = start.lsn {
                store.continue_after(lsn)?;
            }
            summary.salvaged_records += store.drop_unreadable(&mut broker)?;
        }
        Ok((store, broker, summary))
    }

    /// Salvage mode: when salvage cut the log before the checkpoint's Lsn (damage in records
    /// the checkpoint covers), format markers (no-ops) fill the log up to it, so what is
    /// logged from now on has Lsns above the checkpoint's and is replayed after it, and the
    /// next start finds the log continuing the checkpoint.
    fn continue_after(&self, lsn: Lsn) -> Result<(), StoreError> {
        while self.last_lsn.load(Ordering::Acquire) < lsn.0 {
            self.log_format()?;
        }
        self.wait_durable(self.last_lsn.load(Ordering::Acquire))
    }

    /// Salvage mode: the checkpoint refers to messages in the log, and salvage gave up damaged
    /// stretches of it, so every stored message is read back once and those that cannot be
    /// (their record was damaged or cut) are taken out of their queues, durably (a `Purged`
    /// record each queue), and counted as lost. Salvage is the operator's explicit choice to
    /// lose what is damaged (S-DISK-8); reading every stored message is its price.
    fn drop_unreadable(&self, broker: &mut Broker) -> Result<u64, StoreError> {
        let snapshot = broker.snapshot();
        let mut events = Vec::new();
        let mut lost = 0u64;
        for q in &snapshot.queues {
            let ids: Vec<MessageId> = q
                .messages
                .iter()
                .filter_map(|m| match &m.message {
                    MessageRef::Stored(s) if self.reader.message_part(s).is_err() => Some(s.id),
                    _ => None,
                })
                .collect();
            if ids.is_empty() {
                continue;
            }
            lost += ids.len() as u64;
            tracing::warn!(
                vhost = %q.vhost,
                queue = %q.queue,
                messages = ids.len(),
                "--salvage: messages whose log records were damaged are lost"
            );
            events.push(Event::Purged {
                vhost: q.vhost.clone(),
                queue: q.queue.clone(),
                ids,
            });
        }
        for event in &events {
            broker
                .apply(event)
                .map_err(|e| StoreError::Log(format!("salvage: {e}")))?;
        }
        if !events.is_empty() {
            let ticket = self.log(&events, &mut Vec::new())?;
            if let Some(ticket) = ticket {
                self.wait_durable(ticket)?;
            }
        }
        Ok(lost)
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

    /// Drains what is pending, makes it durable and closes the log (after waiting for a
    /// checkpoint in flight).
    ///
    /// # Errors
    /// The log's latched failure (a write or sync failed at some point).
    pub fn close(mut self) -> Result<(), StoreError> {
        self.collect_checkpoint(true);
        // The index writer finishes what was sent (it waits on the log, still open).
        self.scratch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .index
            .stop();
        if let Some(writer) = self.index_writer.take() {
            let _ = writer.join();
        }
        Ok(self.wal.close()?)
    }
}

/// The segment index writer of an opened log (none for an inline log, the deterministic
/// simulation's, which runs no thread, nor on a simulated disk, which keeps no optional file), after removing the stale indexes (`segment_index::remove_stale`),
/// and the logging scratch whose collector feeds it.
fn index_writer(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    wal: &Wal,
    report: &wharf_wal::RecoveryReport,
    demand: &Arc<DiskDemand>,
    inline: bool,
) -> (Option<std::thread::JoinHandle<()>>, Scratch) {
    // The log appends to its last segment (or a new one after it).
    let appending = report.segments.last().copied().unwrap_or_default();
    segment_index::remove_stale(&**storage, dir, &report.segments, appending);
    if inline || !storage.keeps_optional_files() {
        return (None, Scratch::default());
    }
    let spawned = writer::spawn(
        Arc::clone(storage),
        dir.to_owned(),
        wal.appender(),
        Arc::clone(demand),
    );
    match spawned {
        Ok((handle, sink)) => {
            // The segment the log appends to holds nothing from before: created now, or
            // starting at the next Lsn.
            let empty = match wharf_wal::read_segment_header(&**storage, dir, appending) {
                Some(h) => h.first_lsn == report.next_lsn,
                None => report.segments.is_empty(),
            };
            let scratch = Scratch {
                index: Collector::new(Some(sink), appending, empty),
                ..Scratch::default()
            };
            (Some(handle), scratch)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no segment index writer: timelines search every segment");
            (None, Scratch::default())
        }
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
        let loaded = checkpoint::load(storage, &path, &mut broker)
            .and_then(|loaded| check_referenced(storage, dir, &path, loaded));
        match loaded {
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

/// Every log segment a checkpoint refers to must be there (it holds live messages): one that
/// is not is damage, found at the start rather than when the message is read back.
fn check_referenced(
    storage: &dyn Storage,
    dir: &Path,
    path: &Path,
    loaded: checkpoint::Loaded,
) -> Result<checkpoint::Loaded, StoreError> {
    let present = wharf_wal::list_segments(storage, dir)?;
    let missing = loaded
        .referenced
        .iter()
        .find(|&&s| present.binary_search(&wharf_wal::SegmentId(s)).is_err());
    match missing {
        Some(&segment) => Err(StoreError::CorruptCheckpoint {
            path: path.to_owned(),
            offset: 0,
            reason: CheckpointDamage::SegmentMissing(segment),
        }),
        None => Ok(loaded),
    }
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
        LogGap::EndsAt(report.next_lsn.0.saturating_sub(1))
    } else if tail_first.is_some_and(|first| first.0 != lsn.0 + 1) {
        LogGap::FirstAfterIs(tail_first.map_or(0, |l| l.0))
    } else if tail_first.is_none() && report.next_lsn.0 != lsn.0 + 1 {
        LogGap::StartsAt(report.next_lsn.0)
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
