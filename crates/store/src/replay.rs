//! Recovery's log visitor: every intact record after the checkpoint, decoded and applied to
//! the broker being rebuilt at once (memory holds one segment's bytes and the model, never
//! the list of records), and what it met counted in a [`RecoverySummary`]. A record that does
//! not decode or that the model refuses stops recovery with its file and offset (S-DUR-7),
//! unless salvage mode skips and counts it.

use std::path::{Path, PathBuf};

use crate::codec::{self, DecodeError, RecordKind, STORE_FORMAT_VERSION, StoreRecord};
use crate::error::{LogDamage, StoreError};
use crate::stored;
use wharf_broker::Broker;
use wharf_wal::{Lsn, RecordRef, RecoveryReport, segment_file_name};

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

/// The recovery visitor's state: the broker being rebuilt and what it met.
pub(crate) struct Replay<'a> {
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

impl<'a> Replay<'a> {
    /// A visitor applying to `broker` (fresh, or loaded from the checkpoint at `checkpoint`
    /// carrying `checkpoint_messages` messages) the records of the log in `dir`.
    pub(crate) fn new(
        broker: Broker,
        dir: &'a Path,
        salvage: bool,
        checkpoint: Option<Lsn>,
        checkpoint_messages: u64,
    ) -> Self {
        Replay {
            broker,
            dir,
            salvage,
            summary: RecoverySummary {
                checkpoint_lsn: checkpoint.map(|l| l.0),
                checkpoint_messages,
                ..RecoverySummary::default()
            },
            last_lsn: None,
            covered_through: checkpoint.unwrap_or_default(),
            tail_first: None,
            failure: None,
        }
    }

    /// The store's own error that stopped the scan, if the visitor stopped it.
    pub(crate) fn take_failure(&mut self) -> Option<StoreError> {
        self.failure.take()
    }

    /// The first record after the checkpoint, if any was read.
    pub(crate) fn tail_first(&self) -> Option<Lsn> {
        self.tail_first
    }

    /// The rebuilt broker and the summary, completed from the WAL's report.
    pub(crate) fn finish(self, report: &RecoveryReport) -> (Broker, RecoverySummary) {
        let Replay {
            broker,
            mut summary,
            ..
        } = self;
        summarise(report, &mut summary);
        (broker, summary)
    }

    /// Applies one record (see the module doc); its error stops the WAL's scan, the real
    /// error left in `failure`.
    pub(crate) fn visit(
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
        if record.kind == RecordKind::Copied.byte() {
            // A copy compaction made: the checkpoint that refers to it has it already, and
            // without one it is nothing (its original is still where the log put it).
            return Ok(());
        }
        // Messages are applied as stored references: their content stays in the segment.
        let stored = stored::pack_log(record.position)
            .map(|at| codec::decode_stored(record.kind, record.payload, at));
        match stored {
            Some(Ok(Some(event))) => {
                let applied = self.broker.apply_stored(&event);
                return self.applied(&record, applied);
            }
            Some(Err(err)) => {
                let failure = self.undecodable(&record, err);
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
            Ok(StoreRecord::Format { .. } | StoreRecord::Copied { .. }) => return Ok(()),
            Ok(StoreRecord::Event(event)) => {
                let applied = self.broker.apply(&event);
                return self.applied(&record, applied);
            }
            Err(err) => self.undecodable(&record, err),
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
                reason: err,
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

    fn undecodable(&self, record: &RecordRef<'_>, err: DecodeError) -> StoreError {
        StoreError::Corrupt {
            path: self.path_of(record),
            offset: record.position.offset,
            lsn: Some(record.lsn.0),
            reason: LogDamage::Record(err),
        }
    }

    fn path_of(&self, record: &RecordRef<'_>) -> PathBuf {
        self.dir.join(segment_file_name(record.position.segment))
    }
}

/// Fills in what the WAL's report says (segments, torn tail, salvaged stretches), logging
/// each loss once.
fn summarise(report: &RecoveryReport, summary: &mut RecoverySummary) {
    summary.segments = report.segments.len() as u64;
    if let Some(torn) = &report.torn_tail {
        tracing::warn!(
            path = %torn.path.display(),
            offset = torn.offset,
            bytes = torn.bytes,
            reason = %torn.reason,
            "torn tail of the log cut: a write the crash interrupted, nothing confirmed was in it"
        );
        summary.torn_tail_bytes = torn.bytes;
    }
    for loss in &report.salvaged {
        // Lsns lost at the end of the log (S-DISK-6: durable records missing there) were
        // never seen by the replay's gap count; the ones in the middle were.
        let lost_at_end = if loss.lsns.start >= report.next_lsn {
            loss.lsns.end.0.saturating_sub(loss.lsns.start.0)
        } else {
            0
        };
        tracing::warn!(
            path = %loss.path.display(),
            offset = loss.offset,
            bytes = loss.bytes,
            reason = %loss.reason,
            first_lsn = loss.lsns.start.0,
            lsns_lost = loss.lsns.end.0.saturating_sub(loss.lsns.start.0),
            "salvage: damaged stretch of the log skipped, its records are lost"
        );
        summary.salvaged_bytes += loss.bytes;
        summary.salvaged_records += lost_at_end;
    }
}
