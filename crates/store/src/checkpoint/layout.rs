//! The checkpoint header (storage-format.md, "Checkpoints"): its magic, field offsets (each
//! derived from the one before) and what it says.

use wharf_wal::Lsn;

/// First bytes of a checkpoint file: PNG-style, as the segment magic, with `WHC` ("wharf
/// checkpoint") so a hex dump names the file.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"\x89WHC\r\n\x1a\n";

pub(super) const MAGIC_OFFSET: usize = 0;
pub(super) const VERSION_OFFSET: usize = MAGIC_OFFSET + CHECKPOINT_MAGIC.len();
pub(super) const FLAGS_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
pub(super) const LSN_OFFSET: usize = FLAGS_OFFSET + size_of::<u16>();
pub(super) const NEXT_ID_OFFSET: usize = LSN_OFFSET + size_of::<u64>();
pub(super) const RECORDS_OFFSET: usize = NEXT_ID_OFFSET + size_of::<u64>();
pub(super) const HEADER_CRC_OFFSET: usize = RECORDS_OFFSET + size_of::<u64>();
/// Bytes of the checkpoint header.
pub const CHECKPOINT_HEADER_BYTES: usize = HEADER_CRC_OFFSET + size_of::<u32>();

/// Bytes gathered before one positional write (and read ahead when loading).
pub(super) const CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// What a checkpoint's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointHeader {
    /// Store format version of the records inside.
    pub version: u16,
    /// Every log record up to and including this Lsn is reflected in the checkpoint.
    pub lsn: Lsn,
    /// The id the broker gives its next new message.
    pub next_message_id: u64,
    /// Number of records after the header.
    pub records: u64,
}
