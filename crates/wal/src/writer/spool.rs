//! Spooled bodies (S-BIG-3): a large message body written to a file of its own in the log
//! directory as it arrives, in the pieces it arrives in, so that it is never held whole in
//! memory on its way to the log.
//!
//! A [`Spool`] is opened when a content header announces a large body ([`Spooler::open`]
//! reserves the whole announced size, so a full disk is known before the first octet and the
//! caller gathers in memory instead); each body frame is written at its place with a running
//! CRC; [`Spool::finish`] maps the finished file read-only and hands out the body as a
//! [`Bytes`] backed by that map, which costs no anonymous memory. When that body is appended
//! as a record's tail ([`crate::Appender::append_parts`]), the appender recognises it, takes
//! its CRC from the spool (combined into the frame CRC, without reading the body), and the
//! writer copies the file into the segment in bounded pieces ([`SPOOL_COPY_BYTES`]) through a
//! buffer of its own, never through the map.
//!
//! A spool file is never log data (`storage-format.md`, "Spooled bodies"): the record in its
//! segment is. It is removed when the last holder of its body lets go (the log write, the
//! queues, a channel), when a spool is dropped unfinished (a channel closed, a refused
//! message), and at every open of the log, which removes whatever a crash left.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use bytes::Bytes;

use crate::mmap::ReadOnlyMap;
use crate::storage::{Storage, StorageFile};

/// What a spool file's name ends with: `{n:020}.body`.
pub const SPOOL_FILE_SUFFIX: &str = ".body";

/// The writer copies a spooled body into its segment through a buffer of this size.
pub const SPOOL_COPY_BYTES: usize = 1024 * 1024;

/// The file name of spool `n`.
pub(crate) fn spool_file_name(n: u64) -> String {
    format!("{n:020}{SPOOL_FILE_SUFFIX}")
}

/// Whether `name` is a spool file's name (twenty digits, then [`SPOOL_FILE_SUFFIX`]).
pub fn is_spool_file_name(name: &str) -> bool {
    name.strip_suffix(SPOOL_FILE_SUFFIX)
        .is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes every spool file in `dir` (at open: a spool is never log data, and none is in
/// use before the log is open). Returns how many were removed.
pub(crate) fn remove_stale(storage: &dyn Storage, dir: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for name in storage.list(dir)? {
        if is_spool_file_name(&name) {
            storage.remove(&dir.join(&name))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A map of weak references, consistent after any panic: a poisoned lock still guards it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The finished spooled bodies still held, by the address of their mapped bytes, so that the
/// appender knows a body it is given is one (and where its file is).
#[derive(Debug, Default)]
pub(crate) struct Spools {
    next: AtomicU64,
    live: Mutex<HashMap<usize, Weak<SpoolFile>>>,
}

impl Spools {
    /// The spooled file whose mapped bytes are exactly `body`, if `body` is one.
    pub(crate) fn find(&self, body: &Bytes) -> Option<Arc<SpoolFile>> {
        let live = lock(&self.live);
        let file = live.get(&(body.as_ptr() as usize))?.upgrade()?;
        (file.len == body.len() as u64).then_some(file)
    }
}

/// Opens spools in the log's directory (cheap to clone; shares the log).
#[derive(Debug, Clone)]
pub struct Spooler {
    pub(crate) dir: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) spools: Arc<Spools>,
}

impl Spooler {
    /// A spool for a body of `len` octets: a new file in the log directory with its whole
    /// size reserved.
    ///
    /// # Errors
    /// The file cannot be created or its size reserved (a full disk:
    /// [`io::ErrorKind::StorageFull`]); nothing is left behind.
    pub fn open(&self, len: u64) -> io::Result<Spool> {
        let n = self.spools.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(spool_file_name(n));
        let file = self.storage.create_new(&path)?;
        let spool = Spool {
            spooler: self.clone(),
            path,
            file: Some(file),
            len,
            written: 0,
            crc: crc32fast::Hasher::new(),
        };
        // Dropping the spool on failure removes the file.
        spool.file()?.reserve(len)?;
        Ok(spool)
    }
}

/// A body being written to its spool file.
#[derive(Debug)]
pub struct Spool {
    spooler: Spooler,
    path: PathBuf,
    /// `None` once handed to the finished body.
    file: Option<Box<dyn StorageFile>>,
    len: u64,
    written: u64,
    crc: crc32fast::Hasher,
}

impl Spool {
    fn file(&self) -> io::Result<&dyn StorageFile> {
        self.file
            .as_deref()
            .ok_or_else(|| io::Error::other("spool already finished"))
    }

    /// Octets written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes the next piece of the body.
    ///
    /// # Errors
    /// The write fails, or `piece` would take the body past its announced size.
    pub fn write(&mut self, piece: &[u8]) -> io::Result<()> {
        let end = self.written + piece.len() as u64;
        if end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "spooled body longer than announced",
            ));
        }
        self.file()?.write_all_at(piece, self.written)?;
        self.crc.update(piece);
        self.written = end;
        Ok(())
    }

    /// The whole body, once every octet is written: backed by a read-only map of the file
    /// (no anonymous memory), or read into memory where the storage cannot map.
    ///
    /// # Errors
    /// The body is not complete, or the file cannot be read (when it cannot be mapped).
    pub fn finish(mut self) -> io::Result<Bytes> {
        if self.written != self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "spooled body shorter than announced",
            ));
        }
        let mapped = self.file()?.map_sealed();
        let map = match mapped {
            Ok(Some(map)) => map,
            // A storage without maps (the simulation): memory it is.
            Ok(None) => return self.read_back().map(Bytes::from),
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error,
                    "cannot map a spooled body; it is read into memory");
                return self.read_back().map(Bytes::from);
            }
        };
        let Some(file) = self.file.take() else {
            unreachable!("file() checked it is there")
        };
        let spools = Arc::clone(&self.spooler.spools);
        let spooled = Arc::new(SpoolFile {
            spooler: self.spooler.clone(),
            path: std::mem::take(&mut self.path),
            file,
            len: self.len,
            crc: self.crc.clone(),
            map,
        });
        let key = spooled.map.as_slice().as_ptr() as usize;
        lock(&spools.live).insert(key, Arc::downgrade(&spooled));
        Ok(Bytes::from_owner(SpooledBody(spooled)))
    }

    /// What was written so far, read back into memory; the file is removed. For a caller that
    /// must carry on without the spool (a failed write or map).
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn read_back(self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.written).map_err(io::Error::other)?;
        let mut body = vec![0; len];
        self.file()?.read_exact_at(&mut body, 0)?;
        Ok(body)
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            remove(&self.spooler, &self.path);
        }
    }
}

/// A finished spool file, mapped, and what the writer needs to copy it into a segment.
#[derive(Debug)]
pub(crate) struct SpoolFile {
    spooler: Spooler,
    pub(crate) path: PathBuf,
    pub(crate) file: Box<dyn StorageFile>,
    pub(crate) len: u64,
    /// The CRC state over the whole body (combined into a frame's CRC).
    pub(crate) crc: crc32fast::Hasher,
    map: ReadOnlyMap,
}

impl Drop for SpoolFile {
    fn drop(&mut self) {
        let key = self.map.as_slice().as_ptr() as usize;
        lock(&self.spooler.spools.live).remove(&key);
        remove(&self.spooler, &self.path);
    }
}

/// The owner behind a spooled body's [`Bytes`].
struct SpooledBody(Arc<SpoolFile>);

impl AsRef<[u8]> for SpooledBody {
    fn as_ref(&self) -> &[u8] {
        self.0.map.as_slice()
    }
}

fn remove(spooler: &Spooler, path: &Path) {
    if let Err(error) = spooler.storage.remove(path) {
        // Harmless but for the disk space: the next open removes it.
        tracing::warn!(path = %path.display(), %error, "cannot remove a spooled body's file");
    }
}

/// Copies `spooled` into `to` at `at`, through `buf` (allocated at [`SPOOL_COPY_BYTES`] on
/// first use). Errors say which side failed: `Err((true, e))` reading the spool.
pub(crate) fn copy_into(
    spooled: &SpoolFile,
    to: &dyn StorageFile,
    mut at: u64,
    buf: &mut Vec<u8>,
) -> Result<(), (bool, io::Error)> {
    if buf.len() < SPOOL_COPY_BYTES {
        buf.resize(SPOOL_COPY_BYTES, 0);
    }
    let mut from = 0;
    while from < spooled.len {
        let n = usize::try_from(spooled.len - from)
            .unwrap_or(usize::MAX)
            .min(SPOOL_COPY_BYTES);
        let Some(piece) = buf.get_mut(..n) else {
            unreachable!("the buffer holds SPOOL_COPY_BYTES")
        };
        spooled
            .file
            .read_exact_at(piece, from)
            .map_err(|e| (true, e))?;
        to.write_all_at(piece, at).map_err(|e| (false, e))?;
        from += n as u64;
        at += n as u64;
    }
    Ok(())
}
