//! The disk behind the log, as a small trait ([`Storage`], [`StorageFile`]) with two
//! implementations: [`FileStorage`] (real files through `std::fs`) and [`SimStorage`] (an
//! in-memory, seeded disk that keeps written and synced bytes apart, can lose power and can fail
//! the N-th write or sync, and can run out of space). `SimStorage` is a product feature, not test-only code: services that
//! test themselves against wharf use it to simulate a power loss (DESIGN, "Injected time and
//! disk"). Depends only on std and `wal::mmap`; knows nothing of records.

mod file;
mod sim;

pub use file::FileStorage;
pub use sim::SimStorage;

use std::fmt::Debug;
use std::io;
use std::path::Path;

use crate::mmap::ReadOnlyMap;

/// A directory of files with the few operations the log needs.
pub trait Storage: Send + Sync + Debug {
    /// Creates `dir` and its parents when missing.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the files directly in `dir`.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a new file for reading and writing; fails when it exists.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file, for writing too when `writable`.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>>;
    /// Removes a file (durable only after [`Storage::sync_dir`]).
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes creations and removals in `dir` durable (fsync of the directory).
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Bytes a writer may still allocate on the file system holding `dir` (`statvfs`'s
    /// available blocks); `None` when the storage cannot tell (the default). The store checks
    /// it before it writes a checkpoint (S-DISK-3), so that one never takes the log's space.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn available_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        let _ = dir;
        Ok(None)
    }
    /// Whether optional files, summaries nothing depends on (the store's segment indexes),
    /// are written here: yes by default. A simulated disk says no: its fault injection
    /// counts every write, and its runs must make the same writes in the same order each
    /// time, which a summary written by a thread of its own would not.
    fn keeps_optional_files(&self) -> bool {
        true
    }
    /// Renames `from` to `to` atomically, replacing `to` if it exists (durable only after
    /// [`Storage::sync_dir`]). Used to install a checkpoint written to a temporary file. The
    /// default refuses, so a storage that cannot rename simply never installs a checkpoint.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _ = (from, to);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this storage cannot rename",
        ))
    }
}

/// One open file.
pub trait StorageFile: Send + Sync + Debug {
    /// Current length in bytes.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn len_bytes(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; an error when the file ends first.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset` (one positional write; not durable until synced).
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends (with zeros) to `len` bytes.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes written data (and the length) durable: `fdatasync`.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn sync_data(&self) -> io::Result<()>;
    /// Makes data and all metadata durable: `fsync`.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn sync_all(&self) -> io::Result<()>;
    /// Reserves disk blocks for the first `len` bytes of the file without changing its length
    /// (`fallocate` with `FALLOC_FL_KEEP_SIZE`), so that later writes below `len` cannot fail
    /// for want of space. A full disk is an error of kind [`io::ErrorKind::StorageFull`]; a
    /// storage that cannot reserve (a file system without `fallocate`) returns `Ok` and
    /// reserves nothing. Truncating the file ([`StorageFile::set_len`]) drops the reservation
    /// beyond the new length.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn reserve(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// A read-only map of the whole file when the storage can map (only for sealed segments,
    /// see `wal::mmap`); `None` when it cannot, and callers then read.
    ///
    /// # Errors
    /// The operating system's (or the simulation's) I/O error.
    fn map_sealed(&self) -> io::Result<Option<ReadOnlyMap>> {
        Ok(None)
    }
}
