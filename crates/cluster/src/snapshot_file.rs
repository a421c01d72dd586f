//! A member's current snapshot on disk (storage-format.md, "Raft snapshot file"): openraft's
//! metadata (last log id, membership, snapshot id) and the snapshot bytes (`snapshot.rs`), in
//! one file written whole (temporary file, fsync, rename, directory fsync) before openraft
//! hears the snapshot exists, so the log it lets openraft purge is never needed again (S-CLU-7).
//! Read back at open, checked by a CRC and then byte by byte.
#![warn(clippy::indexing_slicing)]

use std::io;
use std::path::{Path, PathBuf};

use openraft::BasicNode;
use openraft::storage::SnapshotMeta;
use wharf_wal::{Storage, le};

use crate::record::{self, Dec, RecordDecodeError, RecordEncodeError};
use crate::types::{NodeId, StoredMembership};

/// The file's magic bytes.
pub const SNAPSHOT_FILE_MAGIC: [u8; 8] = *b"wharfrsf";
/// The snapshot file format this build writes and reads.
pub const SNAPSHOT_FILE_VERSION: u16 = 1;
/// The file's name in the group's snapshot directory.
pub const SNAPSHOT_FILE_NAME: &str = "snapshot.raft";
/// The name of the file being written (removed at open when a crash left it).
const TEMPORARY_NAME: &str = "snapshot.raft.tmp";
/// Magic, version (u16), CRC (u32), metadata length (u32).
const HEADER_BYTES: usize = 8 + 2 + 4 + 4;
/// A "kind" for the decoder's errors (the file is not a WAL record).
const FILE_KIND: u8 = 0;

/// openraft's metadata of a snapshot.
pub type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Why a snapshot file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    /// The disk refused.
    #[error("snapshot file {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The metadata does not fit its fields.
    #[error("snapshot metadata")]
    Encode(#[from] RecordEncodeError),
    /// The file is not a snapshot file this build reads, or it is damaged.
    #[error("snapshot file {path} is damaged or of a newer format: {reason}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SnapshotFileError + '_ {
    move |source| SnapshotFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The metadata's bytes: the last log id, the membership's log id, the membership, the id.
/// The cluster link sends a snapshot's metadata in these bytes too.
///
/// # Errors
/// A membership or id over its length field.
pub fn encode_meta(meta: &Meta) -> Result<Vec<u8>, RecordEncodeError> {
    let mut m = Vec::new();
    record::put_opt_log_id(&mut m, meta.last_log_id.as_ref());
    record::put_opt_log_id(&mut m, meta.last_membership.log_id().as_ref());
    record::put_membership(&mut m, meta.last_membership.membership())?;
    le::put_u32(
        &mut m,
        record::count_u32(meta.snapshot_id.len(), "snapshot id")?,
    );
    m.extend_from_slice(meta.snapshot_id.as_bytes());
    Ok(m)
}

/// Decodes [`encode_meta`]'s bytes (all of them).
///
/// # Errors
/// Bytes that do not decode, or bytes after the metadata.
pub fn decode_meta(bytes: &[u8]) -> Result<Meta, RecordDecodeError> {
    let m = &mut Dec::new(FILE_KIND, bytes);
    let last_log_id = m.opt_log_id()?;
    let membership_log_id = m.opt_log_id()?;
    let membership = record::decode_membership(m)?;
    let id_len = m.len("snapshot id length")?;
    let snapshot_id = std::str::from_utf8(m.bytes(id_len, "snapshot id")?)
        .map_err(|_| m.err("snapshot id not UTF-8"))?
        .to_owned();
    m.end()?;
    Ok(Meta {
        last_log_id,
        last_membership: StoredMembership::new(membership_log_id, membership),
        snapshot_id,
    })
}

/// The file's bytes for `meta` and the snapshot `bytes`.
///
/// # Errors
/// A membership or id over its length field.
pub fn encode(meta: &Meta, bytes: &[u8]) -> Result<Vec<u8>, RecordEncodeError> {
    let mut out = encode_head(meta, bytes)?;
    out.extend_from_slice(bytes);
    Ok(out)
}

/// The file's bytes before the snapshot `bytes` (magic, version, CRC, metadata length and
/// metadata), the CRC covering `bytes` too: the file is this head, then `bytes` as they are,
/// so writing it copies no snapshot byte (a snapshot holds every queued body).
fn encode_head(meta: &Meta, bytes: &[u8]) -> Result<Vec<u8>, RecordEncodeError> {
    let m = encode_meta(meta)?;
    let mut body_head = Vec::with_capacity(4 + m.len());
    le::put_u32(
        &mut body_head,
        record::count_u32(m.len(), "snapshot metadata")?,
    );
    body_head.extend_from_slice(&m);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&body_head);
    crc.update(bytes);
    let mut out = Vec::with_capacity(HEADER_BYTES + body_head.len());
    out.extend_from_slice(&SNAPSHOT_FILE_MAGIC);
    le::put_u16(&mut out, SNAPSHOT_FILE_VERSION);
    le::put_u32(&mut out, crc.finalize());
    out.extend_from_slice(&body_head);
    Ok(out)
}

/// Decodes a snapshot file's bytes: the metadata and the snapshot bytes.
///
/// # Errors
/// A bad magic, version or CRC, or metadata that does not decode.
pub fn decode(file: &[u8]) -> Result<(Meta, Vec<u8>), RecordDecodeError> {
    let (meta, start) = decode_head(file)?;
    Ok((meta, file.get(start..).unwrap_or_default().to_vec()))
}

/// Checks a snapshot file's bytes (magic, version, CRC) and decodes its metadata; returns it
/// and where the snapshot bytes start.
fn decode_head(file: &[u8]) -> Result<(Meta, usize), RecordDecodeError> {
    let d = &mut Dec::new(FILE_KIND, file);
    if d.bytes(8, "magic")? != SNAPSHOT_FILE_MAGIC {
        return Err(d.err("not a wharf snapshot file (magic)"));
    }
    if d.u16("version")? != SNAPSHOT_FILE_VERSION {
        return Err(d.err("unknown snapshot file version"));
    }
    let crc = d.u32("crc")?;
    let body = d.bytes(d.remaining(), "body")?;
    if crc32fast::hash(body) != crc {
        return Err(d.err("CRC mismatch"));
    }
    let d = &mut Dec::new(FILE_KIND, body);
    let meta_len = d.len("metadata length")?;
    let meta = decode_meta(d.bytes(meta_len, "metadata")?)?;
    Ok((meta, file.len() - d.remaining()))
}

/// Writes the snapshot file in `dir` durably, replacing the previous one: a temporary file,
/// fsynced, renamed over the old one, and the directory fsynced.
///
/// # Errors
/// The disk's errors (the temporary file is then removed when possible).
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    meta: &Meta,
    bytes: &[u8],
) -> Result<(), SnapshotFileError> {
    let head = encode_head(meta, bytes)?;
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    remove_temporary(storage, dir)?;
    let written = install(storage, dir, &head, bytes);
    if written.is_err()
        && let Err(e) = remove_temporary(storage, dir)
    {
        tracing::warn!(error = %e, "cannot remove a failed snapshot file");
    }
    written
}

/// Writes `head` then `bytes` to the temporary file, syncs it, renames it over the snapshot
/// file and syncs the directory.
fn install(
    storage: &dyn Storage,
    dir: &Path,
    head: &[u8],
    bytes: &[u8],
) -> Result<(), SnapshotFileError> {
    let tmp = dir.join(TEMPORARY_NAME);
    let file = storage.create_new(&tmp).map_err(io_err(&tmp))?;
    file.write_all_at(head, 0).map_err(io_err(&tmp))?;
    file.write_all_at(bytes, head.len() as u64)
        .map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    drop(file);
    let path = dir.join(SNAPSHOT_FILE_NAME);
    storage.rename(&tmp, &path).map_err(io_err(&path))?;
    storage.sync_dir(dir).map_err(io_err(dir))
}

fn remove_temporary(storage: &dyn Storage, dir: &Path) -> Result<(), SnapshotFileError> {
    let names = storage.list(dir).map_err(io_err(dir))?;
    if names.iter().any(|n| n == TEMPORARY_NAME) {
        let tmp = dir.join(TEMPORARY_NAME);
        storage.remove(&tmp).map_err(io_err(&tmp))?;
    }
    Ok(())
}

/// Reads the snapshot file in `dir`, if there is one (a temporary file a crash left is removed).
///
/// # Errors
/// The disk's errors, or a damaged file.
pub fn read(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<Option<(Meta, Vec<u8>)>, SnapshotFileError> {
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    remove_temporary(storage, dir)?;
    let names = storage.list(dir).map_err(io_err(dir))?;
    if !names.iter().any(|n| n == SNAPSHOT_FILE_NAME) {
        return Ok(None);
    }
    let path = dir.join(SNAPSHOT_FILE_NAME);
    let file = storage.open(&path, false).map_err(io_err(&path))?;
    let len = file.len_bytes().map_err(io_err(&path))?;
    let len = usize::try_from(len).map_err(|_| SnapshotFileError::Damaged {
        path: path.clone(),
        reason: "larger than memory can address".into(),
    })?;
    let mut data = vec![0; len];
    file.read_exact_at(&mut data, 0).map_err(io_err(&path))?;
    let (meta, start) = decode_head(&data).map_err(|e| SnapshotFileError::Damaged {
        path,
        reason: e.to_string(),
    })?;
    // The snapshot bytes moved to the front, not copied: a deep queue's are hundreds of MB.
    data.drain(..start);
    Ok(Some((meta, data)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// storage-format.md, "Raft snapshot file": the file `write` leaves (its head, then the
    /// snapshot bytes as they are) is byte for byte `encode`'s, and reads back.
    #[test]
    fn a_written_file_is_the_encoded_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let storage = wharf_wal::FileStorage;
        let nodes: BTreeMap<NodeId, BasicNode> = [(1, BasicNode { addr: "a".into() })].into();
        let membership = openraft::Membership::new(vec![BTreeSet::from([1])], nodes);
        let meta = Meta {
            last_log_id: Some(crate::types::LogId::new(
                openraft::CommittedLeaderId::new(2, 1),
                9,
            )),
            last_membership: StoredMembership::new(None, membership),
            snapshot_id: "9-1".into(),
        };
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        write(&storage, dir.path(), &meta, &bytes).unwrap();
        let file = std::fs::read(dir.path().join(SNAPSHOT_FILE_NAME)).unwrap();
        assert_eq!(file, encode(&meta, &bytes).unwrap());
        let (back, read) = read(&storage, dir.path()).unwrap().unwrap();
        assert_eq!(back, meta);
        assert_eq!(read, bytes);
    }
}
