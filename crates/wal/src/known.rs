//! A sealed segment read through what its reader already knows of it ([`SegmentPlan::Only`]):
//! the frames at a few offsets, read one by one and checked, the rest of the file not read at
//! all. Anything that does not check makes the caller read the segment as without the plan.
#![warn(clippy::indexing_slicing)]

use std::path::Path;

use bytes::Bytes;

use crate::ids::{Lsn, SegmentId};
use crate::reader::{Record, read_frame_at};
use crate::record::{self, HeaderCheck, SEGMENT_HEADER_BYTES, SegmentHeader};
use crate::recovery::segment_file_name;
use crate::storage::Storage;

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
    dir: &Path,
    id: SegmentId,
    offsets: &[u64],
    next_first: Lsn,
    expected: Result<Lsn, Lsn>,
) -> Option<Vec<(u64, Record)>> {
    let first = header_first_lsn(storage, dir, id)?;
    let next = SegmentId(id.0.checked_add(1)?);
    if header_first_lsn(storage, dir, next)? != next_first {
        return None;
    }
    let continues = match expected {
        Ok(lsn) => first == lsn,
        Err(at_least) => first >= at_least,
    };
    if !continues || first > next_first {
        return None;
    }
    let file = storage.open(&dir.join(segment_file_name(id)), false).ok()?;
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

/// The first Lsn segment `id`'s header names, if the header checks and names `id`.
fn header_first_lsn(storage: &dyn Storage, dir: &Path, id: SegmentId) -> Option<Lsn> {
    read_segment_header(storage, dir, id).map(|h| h.first_lsn)
}

/// The header of segment `id` in `dir`, if it can be read, checks, and names `id`.
pub fn read_segment_header(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
) -> Option<SegmentHeader> {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    storage
        .open(&dir.join(segment_file_name(id)), false)
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
