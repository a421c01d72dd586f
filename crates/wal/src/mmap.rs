//! The one audited `unsafe` of wharf: read-only memory maps of sealed segment files (memmap2).
//! Everything else reads through safe slices of a [`ReadOnlyMap`]. Depends only on std and
//! `memmap2`; must not be used for a file that is still being written (sealed segments, and
//! finished spooled bodies, S-BIG-3).
#![allow(
    unsafe_code,
    reason = "memmap2::Mmap::map is unsafe; this module is the audited place"
)]

use std::fs::File;
use std::io;

/// A read-only memory map of a whole sealed segment file.
#[derive(Debug)]
pub struct ReadOnlyMap {
    map: memmap2::Mmap,
}

impl ReadOnlyMap {
    /// Maps all of `file` read-only.
    ///
    /// Callers must only pass sealed segments (see SAFETY below).
    pub(crate) fn of_sealed_segment(file: &File) -> io::Result<Self> {
        // SAFETY: memmap2 requires that the mapped file is not modified or truncated while the
        // map lives, or reads may see changing bytes or fault (SIGBUS). wharf only maps sealed
        // segments: after sealing, nothing in wharf writes, truncates or resizes them; deleting
        // one only unlinks the name and the map stays valid until dropped. The log directory is
        // wharf's own (documented in the module doc of `wal`); another process changing its
        // files is outside that contract, as for every database. A finished spooled body
        // (`writer::spool`) is mapped the same way: once finished, nothing writes, truncates
        // or resizes it; it is removed only when the map is dropped.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Self { map })
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }
}

impl AsRef<[u8]> for ReadOnlyMap {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}
