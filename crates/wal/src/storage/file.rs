//! [`FileStorage`]: the log's files as real files through `std::fs`.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{Storage, StorageFile};
use crate::mmap::ReadOnlyMap;

/// Real files through `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FileStorage;

#[derive(Debug)]
struct RealFile(File);

impl Storage for FileStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(RealFile(file)))
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().read(true).write(writable).open(path)?;
        Ok(Box::new(RealFile(file)))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn available_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        let st = rustix::fs::statvfs(dir)?;
        Ok(Some(st.f_bavail.saturating_mul(st.f_frsize)))
    }
}

impl StorageFile for RealFile {
    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn reserve(&self, len: u64) -> io::Result<()> {
        use rustix::fs::{FallocateFlags, fallocate};
        match fallocate(&self.0, FallocateFlags::KEEP_SIZE, 0, len) {
            Ok(()) => Ok(()),
            // No fallocate here (some network or FUSE file systems): nothing is reserved, and
            // a full disk shows up as a write error instead (fail-stop, as before).
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
    fn map_sealed(&self) -> io::Result<Option<ReadOnlyMap>> {
        if self.len_bytes()? == 0 {
            return Ok(None);
        }
        ReadOnlyMap::of_sealed_segment(&self.0).map(Some)
    }
}
