//! What a selective scan ([`crate::scan_selective`]) asks its reader ([`Selective`]), and a
//! sealed segment read through what its reader already knows of it ([`SegmentPlan::Only`]):
//! the frames at a few offsets, read one by one and checked, the rest of the file not read at
//! all. Anything that does not check makes the caller read the segment as without the plan.
#![warn(clippy::indexing_slicing)]

use std::ops::Range;
use std::path::Path;

use bytes::Bytes;

use crate::frame_at::{Record, read_frame_at};
use crate::ids::{Lsn, SegmentId};
use crate::record::{self, HeaderCheck, SEGMENT_HEADER_BYTES, SegmentHeader};
use crate::storage::Storage;

/// Whether a selective scan reads a segment whole, asked about one window of its bytes
/// ([`Selective::whole`]).
pub type WindowFilter<'f> = dyn FnMut(SegmentId, &[u8], Range<usize>) -> bool + 'f;

/// What a selective scan ([`crate::scan_selective`]) reads of the log: a reader looking for a few
/// records (the management API's timeline of one message) skips what cannot hold them.
pub struct Selective<'a> {
    /// Sealed segments whose records all have an Lsn of at most this are not read, as in
    /// recovery after a checkpoint through it (0: read every segment).
    pub covered: Lsn,
    /// Asked, for each sealed segment, about its bytes (mapped: a substring search over them
    /// costs no copy) window by window: the windows are consecutive ranges of the bytes,
    /// from the start, together the whole segment, each asked just before the frames that
    /// start in it are stepped over (so a search of the window brings the frame headers into
    /// the cache). `true` reads the segment whole, every frame checked and handed over; `false`
    /// for every window hands over only its records of the kinds [`Selective::kinds`]
    /// accepts. A search for a needle that may cross into a window looks back from its start.
    pub whole: &'a mut WindowFilter<'a>,
    /// The record kinds handed over from a segment not read whole.
    pub kinds: &'a dyn Fn(u8) -> bool,
    /// Bytes of a window (a few hundred KiB: the frames stepped over are still in the cache).
    pub window: usize,
    /// Asked first about each sealed segment that has a next one, before any of its bytes
    /// are read: what the reader knows of it (from an index of its own, say) may spare the
    /// search ([`SegmentPlan::Whole`]) or the whole read ([`SegmentPlan::Only`]).
    pub plan: &'a mut dyn FnMut(SegmentId) -> SegmentPlan,
}

/// What a selective scan does with one sealed segment, decided before any of its bytes are
/// read ([`crate::Selective::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentPlan {
    /// Search it window by window ([`crate::Selective::whole`]), as without a plan.
    Search,
    /// Read it whole, every frame checked and handed over, without searching it.
    Whole,
    /// Hand over only the frames at `offsets` (ascending): the reader knows the segment holds
    /// nothing else it wants, and that the next segment starts at Lsn `next_first`. Each frame
    /// is read alone and checked (CRC, Lsn in order and below `next_first`), the segment's
    /// and the next one's headers too; when anything does not check, the segment is searched
    /// as for [`SegmentPlan::Search`].
    Only {
        /// Offsets of the frames wanted.
        offsets: Vec<u64>,
        /// The first Lsn of the next segment, as the reader knows it.
        next_first: Lsn,
    },
}

/// The frames of `offsets` in segment `id`, read alone and checked against both segment
/// headers; `None` when anything does not check (or cannot be read): the caller reads
/// the segment as without a plan. `expected`: `Ok(lsn)`, the Lsn the segment must start at
/// (it continues the one before); `Err(lsn)`, the lowest it may start at.
pub(crate) fn read_known(
    storage: &dyn Storage,
    (path, id): (&Path, SegmentId),
    next_path: &Path,
    offsets: &[u64],
    next_first: Lsn,
    expected: Result<Lsn, Lsn>,
) -> Option<Vec<(u64, Record)>> {
    let first = header_at(storage, path, id)?.first_lsn;
    let next = SegmentId(id.0.checked_add(1)?);
    if header_at(storage, next_path, next)?.first_lsn != next_first {
        return None;
    }
    let continues = match expected {
        Ok(lsn) => first == lsn,
        Err(at_least) => first >= at_least,
    };
    if !continues || first > next_first {
        return None;
    }
    let file = storage.open(path, false).ok()?;
    let mut frames = Vec::with_capacity(offsets.len());
    let mut after = first;
    for &offset in offsets {
        let record = read_frame_at(&*file, offset).ok()?.ok()?;
        if record.lsn < after || record.lsn >= next_first {
            return None;
        }
        after = record.lsn.next();
        frames.push((offset, record));
    }
    Some(frames)
}

/// The header of the segment file at `path`, if it can be read, checks, and names `id`.
pub(crate) fn header_at(
    storage: &dyn Storage,
    path: &Path,
    id: SegmentId,
) -> Option<SegmentHeader> {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    storage
        .open(path, false)
        .and_then(|f| f.read_exact_at(&mut bytes, 0))
        .ok()?;
    match record::check_segment_header(&bytes) {
        HeaderCheck::Valid(h) if h.segment_id == id => Some(h),
        _ => None,
    }
}

/// A record read alone, as the shared bytes a [`crate::RecordRef`] borrows its payload from.
pub(crate) fn payload_bytes(record: Record) -> Bytes {
    Bytes::from(record.payload)
}
