//! Where the segment index is built: the store's logging thread notes each record's ids and,
//! for the kinds every trace reads, its offset, as it appends ([`Collector`]); when the log
//! rolls to the next segment the notes of the sealed one go to a thread of their own
//! ([`spawn`]), which waits until the record that showed the roll is durable (so the next
//! segment's header is on disk and the sealed one is never appended to again), reads the
//! next segment's first Lsn and writes the index. The publish path pays a few pushes per
//! record; sorting, encoding and the file are off it. A failure costs only the index
//! (logged): never a publish.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use wharf_wal::{Appender, Lsn, Position, SegmentId, Storage};

use super::SegmentIndex;
use crate::disk_demand::DiskDemand;
use crate::trace::Tracer;

/// The notes of one sealed segment, on their way to the index writer.
#[derive(Debug)]
pub(crate) struct Sealed {
    segment: SegmentId,
    ids: Vec<u64>,
    definitions: Vec<u64>,
    /// The first record the store appended after the roll.
    roll_lsn: Lsn,
}

/// What the logging thread notes of the segment being written.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    /// The segment of the last record noted.
    segment: Option<SegmentId>,
    /// Whether every store record of `segment` was noted: false for the segment the store
    /// opened into (records from before the open are in it).
    complete: bool,
    ids: Vec<u64>,
    definitions: Vec<u64>,
    /// Where sealed segments' notes go; `None`: no index is written (the deterministic
    /// simulation's inline log, which runs no thread).
    sink: Option<Sender<Sealed>>,
}

impl Collector {
    /// A collector handing sealed segments to `sink`, for a log that appends to `appending`
    /// next: `empty` when that segment holds no record yet (all its records will be noted).
    pub(crate) fn new(sink: Option<Sender<Sealed>>, appending: SegmentId, empty: bool) -> Self {
        Collector {
            sink,
            segment: Some(appending),
            complete: empty,
            ..Collector::default()
        }
    }

    /// Stops sending: the writer ends once it has written what it was sent.
    pub(crate) fn stop(&mut self) {
        self.sink = None;
    }

    /// Notes a record appended at `position` with `lsn`, of `kind`, concerning `ids`.
    pub(crate) fn note(&mut self, position: Position, lsn: Lsn, kind: u8, ids: &[u64]) {
        if self.sink.is_none() {
            return;
        }
        if self.segment != Some(position.segment) {
            self.roll(position.segment, lsn);
        }
        // A message's records often follow each other (published, delivered, acked): an id
        // repeating the last one noted is not noted again.
        for &id in ids {
            if self.ids.last() != Some(&id) {
                self.ids.push(id);
            }
        }
        if Tracer::always_concerns(kind) {
            self.definitions.push(position.offset);
        }
    }

    /// The log moved to `segment`: the notes of the one before go to the writer, if complete.
    fn roll(&mut self, segment: SegmentId, roll_lsn: Lsn) {
        let ids = std::mem::take(&mut self.ids);
        let definitions = std::mem::take(&mut self.definitions);
        let previous = self.segment.replace(segment);
        // A segment entered by a roll was noted from its first record.
        let complete = std::mem::replace(&mut self.complete, previous.is_some());
        let (Some(previous), true, Some(sink)) = (previous, complete, &self.sink) else {
            return;
        };
        let sealed = Sealed {
            segment: previous,
            ids,
            definitions,
            roll_lsn,
        };
        // A writer gone (it could not start a file) only costs the index.
        let _ = sink.send(sealed);
    }
}

/// Starts the index writer of the log in `dir`: its handle, and where to send sealed
/// segments. It stops once every sender is dropped and what was sent is written.
pub(crate) fn spawn(
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    appender: Appender,
    demand: Arc<DiskDemand>,
) -> std::io::Result<(JoinHandle<()>, Sender<Sealed>)> {
    let (tx, rx) = channel();
    let handle = std::thread::Builder::new()
        .name("wharf-segment-index".into())
        .spawn(move || run(&*storage, &dir, &appender, &demand, &rx))?;
    Ok((handle, tx))
}

fn run(
    storage: &dyn Storage,
    dir: &std::path::Path,
    appender: &Appender,
    demand: &DiskDemand,
    rx: &Receiver<Sealed>,
) {
    for sealed in rx {
        let segment = sealed.segment;
        match write(storage, dir, appender, demand, sealed) {
            Ok(bytes) => tracing::trace!(segment = segment.0, bytes, "segment index written"),
            Err(reason) => tracing::debug!(
                segment = segment.0,
                reason,
                "segment index not written: the segment will be searched"
            ),
        }
    }
}

fn write(
    storage: &dyn Storage,
    dir: &std::path::Path,
    appender: &Appender,
    demand: &DiskDemand,
    sealed: Sealed,
) -> Result<u64, String> {
    let segment = sealed.segment;
    appender
        .wait_durable(sealed.roll_lsn)
        .map_err(|e| e.to_string())?;
    let next = SegmentId(segment.0 + 1);
    let next_first = wharf_wal::read_segment_header(storage, dir, next)
        .ok_or("the next segment's header does not check")?
        .first_lsn;
    if storage
        .open(&dir.join(wharf_wal::segment_file_name(segment)), false)
        .is_err()
    {
        return Err("the segment was deleted".into());
    }
    let index = SegmentIndex::new(segment, next_first, sealed.ids, sealed.definitions);
    let bytes = index.encode();
    // Counted as taken before it is (S-DISK-1), until the file system shows it.
    demand.index_started(bytes.len() as u64);
    let written = super::store(storage, dir, segment, &bytes).map_err(|e| e.to_string());
    demand.index_done(bytes.len() as u64);
    written
}
