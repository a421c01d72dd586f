//! Crash storage: a fence cut when a run crashes, so a crashed run's log writer cannot write
//! after the crash (as a killed process's file descriptors are gone).

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wharf_wal::ReadOnlyMap;
use wharf_wal::{Storage, StorageFile};

/// A switch shared by a run's storage and files: once cut, every operation fails, as a killed
/// process's file descriptors are gone. Keeps a crashed run's log writer (a thread that may
/// outlive its tasks for a moment) from writing after the crash.
#[derive(Debug, Clone, Default)]
pub(super) struct Fence(Arc<AtomicBool>);

impl Fence {
    pub(super) fn cut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub(super) fn check(&self) -> io::Result<()> {
        if self.0.load(Ordering::SeqCst) {
            Err(io::Error::other("test broker: the process crashed"))
        } else {
            Ok(())
        }
    }
}

/// A [`Storage`] that works until its [`Fence`] is cut.
#[derive(Debug)]
pub(super) struct FencedStorage {
    /// The storage it guards.
    pub(super) inner: Arc<dyn Storage>,
    /// Cut when the run crashes.
    pub(super) fence: Fence,
}

impl Storage for FencedStorage {
    fn keeps_optional_files(&self) -> bool {
        self.inner.keeps_optional_files()
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.fence.check()?;
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.fence.check()?;
        self.inner.list(dir)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.fence.check()?;
        let inner = self.inner.create_new(path)?;
        Ok(Box::new(FencedFile {
            inner,
            fence: self.fence.clone(),
        }))
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>> {
        self.fence.check()?;
        let inner = self.inner.open(path, writable)?;
        Ok(Box::new(FencedFile {
            inner,
            fence: self.fence.clone(),
        }))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.fence.check()?;
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.fence.check()?;
        self.inner.sync_dir(dir)
    }
}

/// A file of a [`FencedStorage`].
#[derive(Debug)]
pub(super) struct FencedFile {
    inner: Box<dyn StorageFile>,
    fence: Fence,
}

impl StorageFile for FencedFile {
    fn len_bytes(&self) -> io::Result<u64> {
        self.fence.check()?;
        self.inner.len_bytes()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.fence.check()?;
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.fence.check()?;
        self.inner.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.fence.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.fence.check()?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.fence.check()?;
        self.inner.sync_all()
    }
    fn map_sealed(&self) -> io::Result<Option<ReadOnlyMap>> {
        self.fence.check()?;
        self.inner.map_sealed()
    }
}
