//! One frame read alone from a file at an offset (a segment, or a checkpoint, whose records are
//! framed alike), checked: what the reader reads records back with, and what a selective scan
//! reads the frames a reader names with ([`crate::SegmentPlan::Only`]). Depends only on the
//! frame layout and the storage.
#![warn(clippy::indexing_slicing)]

use crate::error::CorruptReason;
use crate::ids::Lsn;
use crate::record::{self, FRAME_HEADER_BYTES, FrameCheck};
use crate::storage::StorageFile;

/// A record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its Lsn.
    pub lsn: Lsn,
    /// Its kind (assigned by the layer above).
    pub kind: u8,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Reads the frame at `offset` of `file` (a segment, or a checkpoint, whose records are
/// framed alike): the record, or why the bytes there are not an intact one. The length is
/// distrusted: checked against the limit before anything is allocated.
///
/// # Errors
/// I/O errors (an offset past the end included).
pub fn read_frame_at(
    file: &dyn StorageFile,
    offset: u64,
) -> std::io::Result<Result<Record, CorruptReason>> {
    let check = |buf: &[u8]| match record::decode_frame(buf) {
        FrameCheck::Valid(f) => Ok((f.lsn, f.kind)),
        FrameCheck::Zeros | FrameCheck::Truncated => Err(CorruptReason::Truncated),
        FrameCheck::LengthTooLarge(n) => Err(CorruptReason::LengthTooLarge(n)),
        FrameCheck::BadCrc => Err(CorruptReason::BadCrc),
    };
    let mut header = [0u8; FRAME_HEADER_BYTES];
    file.read_exact_at(&mut header, offset)?;
    let Some(payload_len) = record::peek_payload_len(&header) else {
        // No usable length (over the limit): never an intact record.
        return Ok(Err(check(&header)
            .err()
            .unwrap_or(CorruptReason::Truncated)));
    };
    // A length is trusted only as far as the file goes: nothing is allocated for bytes that
    // are not there (a record may be as large as a message body, S-BIG-3).
    let frame_len = record::frame_bytes(payload_len);
    if offset.saturating_add(frame_len as u64) > file.len_bytes()? {
        return Ok(Err(CorruptReason::Truncated));
    }
    let mut frame = vec![0u8; frame_len];
    file.read_exact_at(&mut frame, offset)?;
    Ok(check(&frame).map(|(lsn, kind)| {
        // The payload is the frame without its header: moved down, not copied elsewhere.
        frame.drain(..FRAME_HEADER_BYTES);
        Record {
            lsn,
            kind,
            payload: frame,
        }
    }))
}
