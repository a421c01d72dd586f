//! Reading one record back by its position (message bodies stay on disk and are read when
//! delivered, DESIGN "Memory"). Every segment is read with positional reads on cached file
//! handles, never through a memory map (maps serve only the recovery scan). Every record read
//! back is checked again (CRC, length limit): the pair of the writer's check (STYLE 3.1). Must
//! not depend on the writer's internals beyond the shared sealed boundary.
#![warn(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::WalError;
use crate::frame_at::{Record, read_frame_at};
use crate::ids::{Position, SegmentId};
use crate::storage::StorageFile;
use crate::writer::Shared;

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
