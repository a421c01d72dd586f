//! Reading one record back by its position (message bodies stay on disk and are read when
//! delivered, DESIGN "Memory"). Every segment is read with positional reads on cached file
//! handles, never through a memory map (maps serve only the recovery scan). Every record read
//! back is checked again (CRC, length limit): the pair of the writer's check (STYLE 3.1). Must
//! not depend on the writer's internals beyond the shared sealed boundary.
#![warn(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{CorruptReason, WalError};
use crate::ids::{Lsn, Position, SegmentId};
use crate::record::{self, FRAME_HEADER_BYTES, FrameCheck};
use crate::storage::StorageFile;
use crate::writer::Shared;

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

/// Reads records back by position. Cheap to clone, `Send + Sync`; clones share their caches.
#[derive(Debug, Clone)]
pub struct Reader {
    shared: Arc<Shared>,
    cache: Arc<Mutex<Cache>>,
}

/// Open files, one per segment read from. Bounded by the live segments: the handle of a
/// deleted segment is dropped on deletion (so its disk space is released).
#[derive(Debug, Default)]
struct Cache {
    files: HashMap<SegmentId, Arc<dyn StorageFile>>,
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

impl Reader {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            cache: Arc::new(Mutex::new(Cache::default())),
        }
    }

    /// Reads the record whose frame starts at `position`. Valid for any record appended and
    /// written (durable records certainly) and not in a deleted segment.
    ///
    /// # Errors
    /// [`WalError::Read`] on I/O errors (a position past the end included),
    /// [`WalError::Corrupt`] when the bytes there are not an intact record.
    pub fn read_at(&self, position: Position) -> Result<Record, WalError> {
        let path = self.shared.segment_path(position.segment);
        let read_err = |e: std::io::Error| WalError::Read {
            path: path.clone(),
            offset: position.offset,
            source: Arc::new(e),
        };
        let corrupt = |reason| WalError::Corrupt {
            path: path.clone(),
            offset: position.offset,
            reason,
        };
        let file = self.source(position.segment).map_err(read_err)?;
        read_frame_at(&*file, position.offset)
            .map_err(read_err)?
            .map_err(corrupt)
    }

    /// Open handles are cached per segment (sealed or not) until the segment is deleted.
    /// Reads are positional reads, never through a memory map: pages of a map that are read
    /// count towards the process's resident memory until unmapped, so delivering a backlog of
    /// stored bodies through maps would grow the broker's RSS with every segment it read.
    fn source(&self, segment: SegmentId) -> std::io::Result<Arc<dyn StorageFile>> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = cache.files.get(&segment) {
            return Ok(Arc::clone(file));
        }
        let path = self.shared.segment_path(segment);
        let file: Arc<dyn StorageFile> = Arc::from(self.shared.storage.open(&path, false)?);
        cache.files.insert(segment, Arc::clone(&file));
        Ok(file)
    }

    /// Forgets the cached handle of a segment (it is being deleted).
    pub(crate) fn forget(&self, segment: SegmentId) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.files.remove(&segment);
    }
}
