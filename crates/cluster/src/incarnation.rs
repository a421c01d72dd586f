//! A node's incarnation (DESIGN "Replication", "A wiped member"; storage-format.md, "Member
//! file"): the Raft id a node's data directory was created with, kept in `<dir>/member`.
//!
//! A node's Raft id in every group is its **member id**. The directory's first incarnation of
//! seed `slot` (the cluster formed with it) has the founding id `slot`; a directory created
//! once the cluster had formed (a wiped or a new disk) gets a new id, `slot` in the low 16
//! bits and 48 random bits above, never reused. So a member that lost its vote and its log can
//! never answer as the member that cast that vote or acknowledged those entries: every request
//! of the cluster link names its target's member id, and a node refuses requests for another.
#![warn(clippy::indexing_slicing)]

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};

use wharf_wal::{Storage, le};

use crate::record::{Dec, RecordDecodeError};
use crate::types::NodeId;

/// The file's magic bytes.
pub const MEMBER_FILE_MAGIC: [u8; 8] = *b"wharfmbr";
/// The member file format this build writes and reads.
pub const MEMBER_FILE_VERSION: u16 = 1;
/// The file's name in the node's directory.
pub const MEMBER_FILE_NAME: &str = "member";
const TEMPORARY_NAME: &str = "member.tmp";
/// Magic, version, member id, slot, CRC.
pub const MEMBER_FILE_BYTES: usize = 8 + 2 + 8 + 8 + 4;
/// The seeds a cluster may list: a slot fits the member id's low 16 bits.
pub const SLOTS_MAX: u64 = 0xFFFF;

/// The seed slot (position in the seeds, from 1) a member id belongs to.
pub fn slot_of(member: NodeId) -> u64 {
    member & SLOTS_MAX
}

/// A new incarnation's id for `slot`: the slot, and 48 random bits (never zero) above it.
pub fn new_incarnation(slot: u64) -> NodeId {
    loop {
        // std's `RandomState` is seeded from the operating system's randomness.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(slot);
        let high = h.finish() >> 16;
        if high != 0 {
            return (high << 16) | (slot & SLOTS_MAX);
        }
    }
}

/// Why the member file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MemberFileError {
    /// The disk refused.
    #[error("member file {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file is damaged or of a newer format.
    #[error("member file {path} is damaged or of a newer format: {source}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: RecordDecodeError,
    },
}

/// The file's bytes.
pub fn encode(member: NodeId, slot: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(MEMBER_FILE_BYTES);
    out.extend_from_slice(&MEMBER_FILE_MAGIC);
    le::put_u16(&mut out, MEMBER_FILE_VERSION);
    le::put_u64(&mut out, member);
    le::put_u64(&mut out, slot);
    let crc = crc32fast::hash(&out);
    le::put_u32(&mut out, crc);
    out
}

/// Decodes the file's bytes: the member id and the slot.
///
/// # Errors
/// A bad magic, version, CRC or length, or a member id not of its slot.
pub fn decode(bytes: &[u8]) -> Result<(NodeId, u64), RecordDecodeError> {
    let d = &mut Dec::new(0, bytes);
    if d.bytes(8, "magic")? != MEMBER_FILE_MAGIC {
        return Err(d.err("not a wharf member file (magic)"));
    }
    if d.u16("version")? != MEMBER_FILE_VERSION {
        return Err(d.err("unknown member file version"));
    }
    let member = d.u64("member id")?;
    let slot = d.u64("slot")?;
    let crc = d.u32("crc")?;
    d.end()?;
    let covered = bytes.get(..MEMBER_FILE_BYTES - 4).unwrap_or_default();
    if crc32fast::hash(covered) != crc {
        return Err(d.err("CRC mismatch"));
    }
    if slot == 0 || slot > SLOTS_MAX || slot_of(member) != slot {
        return Err(d.err("member id not of its slot"));
    }
    Ok((member, slot))
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> MemberFileError + '_ {
    move |source| MemberFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The member id recorded in `dir`, if the file exists.
///
/// # Errors
/// The disk's errors, or a damaged file.
pub fn read(storage: &dyn Storage, dir: &Path) -> Result<Option<(NodeId, u64)>, MemberFileError> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    let names = storage.list(dir).map_err(io_err(dir))?;
    if names.iter().any(|n| n == TEMPORARY_NAME) {
        let tmp = dir.join(TEMPORARY_NAME);
        storage.remove(&tmp).map_err(io_err(&tmp))?;
    }
    if !names.iter().any(|n| n == MEMBER_FILE_NAME) {
        return Ok(None);
    }
    let path = dir.join(MEMBER_FILE_NAME);
    let file = storage.open(&path, false).map_err(io_err(&path))?;
    let len = file.len_bytes().map_err(io_err(&path))?;
    let mut data = vec![0; usize::try_from(len.min(1024)).unwrap_or(1024)];
    file.read_exact_at(&mut data, 0).map_err(io_err(&path))?;
    decode(&data)
        .map(Some)
        .map_err(|source| MemberFileError::Damaged { path, source })
}

/// Records `member` (of `slot`) in `dir` durably: a temporary file, fsynced, renamed, and the
/// directory fsynced, before any group of the node opens.
///
/// # Errors
/// The disk's errors.
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    member: NodeId,
    slot: u64,
) -> Result<(), MemberFileError> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = dir.join(TEMPORARY_NAME);
    let file = storage.create_new(&tmp).map_err(io_err(&tmp))?;
    file.write_all_at(&encode(member, slot), 0)
        .map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    drop(file);
    let path = dir.join(MEMBER_FILE_NAME);
    storage.rename(&tmp, &path).map_err(io_err(&path))?;
    storage.sync_dir(dir).map_err(io_err(dir))
}

/// Whether `dir` holds any group's directory (a node's data from before member files: its
/// incarnation is the founding one).
///
/// # Errors
/// The disk's errors.
pub fn has_groups(storage: &dyn Storage, dir: &Path) -> Result<bool, MemberFileError> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    let names = storage.list(dir).map_err(io_err(dir))?;
    Ok(names.iter().any(|n| n.starts_with("group-")))
}
