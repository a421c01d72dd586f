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
pub(crate) const TEMPORARY_NAME: &str = "snapshot.raft.tmp";
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

/// The file's bytes for `meta` and the snapshot `bytes`: magic, version, CRC, metadata length
/// and metadata, then `bytes` as they are, the CRC covering all after it. (What [`write`] and
/// [`write_streamed`] leave on disk; the tests' reference.)
///
/// # Errors
/// A membership or id over its length field.
pub fn encode(meta: &Meta, bytes: &[u8]) -> Result<Vec<u8>, RecordEncodeError> {
    let body_head = encode_body_head(meta)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&body_head);
    crc.update(bytes);
    let mut out = file_head(crc.finalize(), &body_head);
    out.extend_from_slice(bytes);
    Ok(out)
}

/// The metadata's length and bytes: what the CRC covers before the snapshot bytes.
fn encode_body_head(meta: &Meta) -> Result<Vec<u8>, RecordEncodeError> {
    let m = encode_meta(meta)?;
    let mut body_head = Vec::with_capacity(4 + m.len());
    le::put_u32(
        &mut body_head,
        record::count_u32(m.len(), "snapshot metadata")?,
    );
    body_head.extend_from_slice(&m);
    Ok(body_head)
}

/// Magic, version, `crc`, then `body_head`.
fn file_head(crc: u32, body_head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES - 4 + body_head.len());
    out.extend_from_slice(&SNAPSHOT_FILE_MAGIC);
    le::put_u16(&mut out, SNAPSHOT_FILE_VERSION);
    le::put_u32(&mut out, crc);
    out.extend_from_slice(body_head);
    out
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
    write_streamed(storage, dir, meta, |out| {
        out.put(bytes)?;
        Ok::<_, SnapshotFileError>(Vec::new())
    })
    .map(|_| ())
}

/// The snapshot bytes of a file [`write_streamed`] writes, handed over in order; the CRC is
/// computed as they go. One part may be reserved and filled at the end (a checkpoint's header
/// counts its records, known only once they are all written).
pub struct Stream {
    file: Box<dyn wharf_wal::StorageFile>,
    path: PathBuf,
    /// Where the next bytes go.
    offset: u64,
    /// Where the snapshot bytes start.
    start: u64,
    /// The CRC of the bytes before the reserved part (of all of them when none is).
    before: crc32fast::Hasher,
    /// The reserved part (its offset and length) and the CRC of the bytes after it.
    reserved: Option<(u64, usize, crc32fast::Hasher)>,
}

impl Stream {
    /// Writes `bytes` next.
    ///
    /// # Errors
    /// The disk's.
    pub fn put(&mut self, bytes: &[u8]) -> Result<(), SnapshotFileError> {
        self.file
            .write_all_at(bytes, self.offset)
            .map_err(io_err(&self.path))?;
        self.offset += bytes.len() as u64;
        match &mut self.reserved {
            Some((_, _, after)) => after.update(bytes),
            None => self.before.update(bytes),
        }
        Ok(())
    }

    /// Leaves the next `len` bytes to be filled at the end, by what `write_streamed`'s
    /// `encode` returns. Once per file.
    ///
    /// # Errors
    /// A second reservation (a bug).
    pub fn reserve(&mut self, len: usize) -> Result<(), SnapshotFileError> {
        if self.reserved.is_some() {
            return Err(SnapshotFileError::Damaged {
                path: self.path.clone(),
                reason: "a second reserved part (a bug)".into(),
            });
        }
        self.reserved = Some((self.offset, len, crc32fast::Hasher::new()));
        self.offset += len as u64;
        Ok(())
    }

    /// The snapshot bytes written so far, the reserved part included.
    pub fn len(&self) -> u64 {
        self.offset - self.start
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// As [`write`], the snapshot bytes written as `encode` makes them, through a [`Stream`],
/// rather than from one buffer holding them all (a deep queue's are hundreds of megabytes):
/// `encode` returns the bytes of the part it reserved (empty when none). Returns the
/// snapshot bytes' length. The file is the same, byte for byte, as `write` of those bytes.
///
/// # Errors
/// `encode`'s, and the disk's (the temporary file is then removed when possible).
pub fn write_streamed<E: From<SnapshotFileError>>(
    storage: &dyn Storage,
    dir: &Path,
    meta: &Meta,
    encode: impl FnOnce(&mut Stream) -> Result<Vec<u8>, E>,
) -> Result<u64, E> {
    let body_head = encode_body_head(meta).map_err(SnapshotFileError::from)?;
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    remove_temporary(storage, dir)?;
    let written = stream_and_install(storage, dir, &body_head, encode);
    if written.is_err()
        && let Err(e) = remove_temporary(storage, dir)
    {
        tracing::warn!(error = %e, "cannot remove a failed snapshot file");
    }
    written
}

fn stream_and_install<E: From<SnapshotFileError>>(
    storage: &dyn Storage,
    dir: &Path,
    body_head: &[u8],
    encode: impl FnOnce(&mut Stream) -> Result<Vec<u8>, E>,
) -> Result<u64, E> {
    let tmp = dir.join(TEMPORARY_NAME);
    let file = storage.create_new(&tmp).map_err(io_err(&tmp))?;
    // The head's length does not depend on the CRC it holds.
    let start = file_head(0, body_head).len() as u64;
    let mut before = crc32fast::Hasher::new();
    before.update(body_head);
    let mut stream = Stream {
        file,
        path: tmp.clone(),
        offset: start,
        start,
        before,
        reserved: None,
    };
    let part = encode(&mut stream)?;
    let len = stream.len();
    let Stream {
        file,
        before: mut crc,
        reserved,
        ..
    } = stream;
    if let Some((offset, reserved, after)) = reserved {
        if part.len() != reserved {
            return Err(SnapshotFileError::Damaged {
                path: tmp,
                reason: format!(
                    "{} bytes for a reserved part of {reserved} (a bug)",
                    part.len()
                ),
            }
            .into());
        }
        file.write_all_at(&part, offset).map_err(io_err(&tmp))?;
        let mut filled = crc32fast::Hasher::new();
        filled.update(&part);
        crc.combine(&filled);
        crc.combine(&after);
    }
    let head = file_head(crc.finalize(), body_head);
    file.write_all_at(&head, 0).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    drop(file);
    let path = dir.join(SNAPSHOT_FILE_NAME);
    storage.rename(&tmp, &path).map_err(io_err(&path))?;
    storage.sync_dir(dir).map_err(io_err(dir))?;
    Ok(len)
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
    read_current(storage, dir)
}

/// As [`read`], for a running member: a temporary file is left alone (a build or an install
/// may be writing it, and replaces the file by a rename, so what is read is one whole file).
///
/// # Errors
/// The disk's errors, or a damaged file.
pub fn read_current(
    storage: &dyn Storage,
    dir: &Path,
) -> Result<Option<(Meta, Vec<u8>)>, SnapshotFileError> {
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

    /// A file written as a stream, a part reserved and filled at the end, is byte for byte the
    /// file `write` makes of the same bytes (the CRC combined around the part). An encoding
    /// that fails, or fills its part with the wrong length, leaves the previous file as it was
    /// and no temporary file.
    #[test]
    fn a_streamed_file_is_the_file_of_its_bytes_and_a_failed_one_leaves_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let storage = wharf_wal::FileStorage;
        let meta = Meta {
            last_log_id: Some(crate::types::LogId::new(
                openraft::CommittedLeaderId::new(3, 2),
                41,
            )),
            last_membership: StoredMembership::default(),
            snapshot_id: "41-2".into(),
        };
        let bytes: Vec<u8> = (0..=250u8).cycle().take(100_000).collect();
        let len = write_streamed(&storage, dir.path(), &meta, |out| {
            out.put(&bytes[..100])?;
            out.reserve(28)?;
            for chunk in bytes[128..].chunks(7_000) {
                out.put(chunk)?;
            }
            assert_eq!(out.len(), bytes.len() as u64);
            Ok::<_, SnapshotFileError>(bytes[100..128].to_vec())
        })
        .unwrap();
        assert_eq!(len, bytes.len() as u64);
        let path = dir.path().join(SNAPSHOT_FILE_NAME);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file, encode(&meta, &bytes).unwrap());
        assert_eq!(
            read(&storage, dir.path()).unwrap().unwrap(),
            (meta.clone(), bytes)
        );

        let nothing_reserved = write_streamed(&storage, dir.path(), &meta, |out| {
            out.put(b"whole")?;
            Ok::<_, SnapshotFileError>(Vec::new())
        });
        assert_eq!(nothing_reserved.unwrap(), 5);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            encode(&meta, b"whole").unwrap()
        );

        let before = std::fs::read(&path).unwrap();
        let failed = write_streamed(&storage, dir.path(), &meta, |out| {
            out.put(b"half of it")?;
            Err::<Vec<u8>, _>(SnapshotFileError::Damaged {
                path: "encoder".into(),
                reason: "stopped".into(),
            })
        });
        assert!(failed.is_err());
        let wrong_part = write_streamed(&storage, dir.path(), &meta, |out| {
            out.reserve(4)?;
            out.put(b"rest")?;
            Ok::<_, SnapshotFileError>(vec![1, 2, 3])
        });
        assert!(wrong_part.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [SNAPSHOT_FILE_NAME], "no temporary file left");
    }
}
