//! A storage that calls a hook before every sync it passes on (a file's data, a whole file, a
//! directory): tests count the syncs with it, or hold the writer inside one.

use std::path::Path;
use std::sync::Arc;

use wharf_wal::{Storage, StorageFile};

/// What runs before each sync.
pub type Hook = Arc<dyn Fn() + Send + Sync>;

/// `inner`, with `hook` run before each of its syncs.
pub struct SyncHooked<S> {
    pub inner: S,
    pub hook: Hook,
}

impl<S: std::fmt::Debug> std::fmt::Debug for SyncHooked<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncHooked")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

struct HookedFile {
    inner: Box<dyn StorageFile>,
    hook: Hook,
}

impl std::fmt::Debug for HookedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedFile")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> SyncHooked<S> {
    fn wrap(&self, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        let hook = Arc::clone(&self.hook);
        Box::new(HookedFile { inner, hook })
    }
}

impl<S: Storage> Storage for SyncHooked<S> {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        self.inner.create_new(path).map(|f| self.wrap(f))
    }
    fn open(&self, path: &Path, writable: bool) -> std::io::Result<Box<dyn StorageFile>> {
        self.inner.open(path, writable).map(|f| self.wrap(f))
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        (self.hook)();
        self.inner.sync_dir(dir)
    }
    fn available_bytes(&self, dir: &Path) -> std::io::Result<Option<u64>> {
        self.inner.available_bytes(dir)
    }
    fn keeps_optional_files(&self) -> bool {
        self.inner.keeps_optional_files()
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
}

impl StorageFile for HookedFile {
    fn len_bytes(&self) -> std::io::Result<u64> {
        self.inner.len_bytes()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        (self.hook)();
        self.inner.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        (self.hook)();
        self.inner.sync_all()
    }
    fn reserve(&self, len: u64) -> std::io::Result<()> {
        self.inner.reserve(len)
    }
}
