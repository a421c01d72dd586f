//! Finding and deleting the sealed segments a checkpoint made redundant ([`Reclaimer`]), from
//! any thread while the log runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{CorruptReason, RecoveryError, WalError};
use crate::ids::{Lsn, SegmentId};
use crate::reader::Reader;
use crate::record::{self, SEGMENT_HEADER_BYTES};
use crate::recovery;
use crate::writer::Shared;

/// Finds and deletes sealed segments (see [`Wal::reclaimer`]). Never touches the segment being
/// written: only segments below the writer's sealed mark are candidates.
#[derive(Debug, Clone)]
pub struct Reclaimer {
    shared: Arc<Shared>,
    reader: Reader,
}

impl Reclaimer {
    pub(crate) fn new(shared: Arc<Shared>, reader: Reader) -> Self {
        Reclaimer { shared, reader }
    }

    /// The sealed segments every record of which has an Lsn of at most `lsn`, in order: a
    /// segment qualifies when the segment after it starts at `lsn + 1` or earlier. Reads the
    /// 32-byte header of each segment after the first.
    ///
    /// # Errors
    /// I/O errors listing the directory or reading a header; a header that does not check.
    pub fn segments_through(&self, lsn: Lsn) -> Result<Vec<SegmentId>, RecoveryError> {
        let below = self.shared.sealed_below.load(Ordering::Acquire);
        let storage = &*self.shared.storage;
        let ids = recovery::list_segments(storage, &self.shared.dir)?;
        let mut out = Vec::new();
        for pair in ids.windows(2) {
            let &[id, next] = pair else {
                break; // windows(2) yields pairs only
            };
            if id.0 >= below {
                break;
            }
            let path = self.shared.segment_path(next);
            let io = |source| RecoveryError::Io {
                path: path.clone(),
                source,
            };
            let mut header = [0u8; SEGMENT_HEADER_BYTES];
            storage
                .open(&path, false)
                .and_then(|f| f.read_exact_at(&mut header, 0))
                .map_err(io)?;
            let record::HeaderCheck::Valid(h) = record::check_segment_header(&header) else {
                return Err(RecoveryError::Corrupt {
                    path: path.clone(),
                    offset: 0,
                    reason: CorruptReason::BadHeader,
                });
            };
            if h.first_lsn.0 > lsn.0.saturating_add(1) {
                break;
            }
            out.push(id);
        }
        Ok(out)
    }

    /// Deletes a whole sealed segment, durably; see [`Wal::delete_segment`].
    ///
    /// # Errors
    /// As [`Wal::delete_segment`].
    pub fn delete_segment(&self, id: SegmentId) -> Result<(), WalError> {
        if id.0 >= self.shared.sealed_below.load(Ordering::Acquire) {
            return Err(WalError::SegmentNotSealed { segment: id });
        }
        self.reader.forget(id);
        let path = self.shared.segment_path(id);
        let storage = &self.shared.storage;
        let remove_err = |e| WalError::Remove {
            path: path.clone(),
            source: Arc::new(e),
        };
        storage.remove(&path).map_err(remove_err)?;
        storage.sync_dir(&self.shared.dir).map_err(remove_err)
    }
}
