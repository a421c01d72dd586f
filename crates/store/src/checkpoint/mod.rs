//! Checkpoints: a snapshot of the live durable state at an Lsn, written atomically (temporary
//! file, fsync, rename, directory fsync), so that recovery reads the newest checkpoint and
//! then only the log records after it. A live message is referred to where its record is in
//! the log (format 4), so a checkpoint costs about 100 bytes per message, not its body; the
//! segments it covers are deleted unless it refers into them, and the store compacts sparse
//! ones first (their live messages copied forward in the log, `store/compaction.rs`).
//!
//! The file is a header followed by records framed exactly as in the log (the WAL's frame,
//! `wharf_wal::encode_frame`, with the record's sequence number in the Lsn field), holding the
//! store's own record payloads (`codec`) plus the checkpoint-only `Carried` and `Referenced`
//! kinds. The layout is
//! `storage-format.md`, section "Checkpoints". Depends on `broker` (the snapshot, `apply`),
//! `wal` (storage, frames) and `codec`; knows nothing of AMQP, tokio or the server.
//!
//! # Layout
//!
//! - `layout`: the header's fields and offsets, [`CheckpointHeader`].
//! - `files`: names, listing and removing checkpoint files.
//! - `write`: a snapshot encoded and written atomically.
//! - `read`: a file read back and checked, and loaded into a broker.

#![warn(clippy::indexing_slicing)]

mod files;
mod layout;
mod read;
mod write;

pub use files::{file_name, list, parse_file_name, remove_older, remove_temporaries};
pub use layout::{CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC, CheckpointHeader};
pub use read::{CheckpointRecord, FrameVisitor, Loaded, decode_record, load, read, read_frames};
pub use write::{
    Locate, PartSource, Written, encode_into, encode_streamed, encode_to_vec, held_position, write,
};
