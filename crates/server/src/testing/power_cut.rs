//! Power-loss storage over real files: what a power cut would undo (unsynced writes, files
//! created since their directory's last sync), and undoing it.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use wharf_wal::ReadOnlyMap;
use wharf_wal::{FileStorage, Storage, StorageFile};

/// What a power cut would undo in a directory of real files: per file written since its last
/// sync, the bytes it overwrote and its length at that sync; per file created since its
/// directory's last sync, that it may not exist. Shared by every run of one [`TestBroker`] (what
/// a crashed run wrote and did not sync stays undoable), and its power cut is exact: every
/// unsynced write is undone, none survives (the simulated disk keeps a random part).
///
/// Removals are taken as durable at once (the log does not remove files yet).
#[derive(Debug, Clone, Default)]
pub(super) struct PowerCut(Arc<Mutex<CutState>>);

#[derive(Debug, Default)]
pub(super) struct CutState {
    /// Bumped by every power cut: storages and files of an earlier run then fail.
    generation: u64,
    files: BTreeMap<PathBuf, Unsynced>,
}

#[derive(Debug)]
pub(super) struct Unsynced {
    /// Created since its directory was last synced: a power cut removes it.
    created: bool,
    /// Its length at the last sync.
    synced_len: u64,
    /// (offset, old bytes) of synced bytes overwritten or cut off since, oldest first.
    undo: Vec<(u64, Vec<u8>)>,
}

impl PowerCut {
    pub(super) fn lock(&self) -> MutexGuard<'_, CutState> {
        // Plain bookkeeping: consistent enough after a panic elsewhere.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A storage for the next run.
    pub(super) fn storage(&self) -> CutStorage {
        CutStorage {
            cut: self.clone(),
            generation: self.lock().generation,
        }
    }

    /// Undoes every unsynced change, and fails every storage and file handed out so far.
    pub(super) fn power_loss(&self) -> io::Result<()> {
        let mut state = self.lock();
        state.generation += 1;
        for (path, file) in std::mem::take(&mut state.files) {
            if file.created {
                std::fs::remove_file(&path)?;
                continue;
            }
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            for (offset, bytes) in file.undo.iter().rev() {
                f.write_all_at(bytes, *offset)?;
            }
            f.set_len(file.synced_len)?;
            f.sync_all()?;
        }
        Ok(())
    }
}

/// Real files, journaled for a [`PowerCut`]. Every change holds the journal's lock, so a cut
/// never races with a write.
#[derive(Debug)]
pub(super) struct CutStorage {
    cut: PowerCut,
    generation: u64,
}

impl CutStorage {
    pub(super) fn live(&self) -> io::Result<MutexGuard<'_, CutState>> {
        let state = self.cut.lock();
        if state.generation == self.generation {
            Ok(state)
        } else {
            Err(io::Error::other("test broker: the power went"))
        }
    }

    pub(super) fn file(&self, path: &Path, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(CutFile {
            inner,
            path: path.to_owned(),
            cut: self.cut.clone(),
            generation: self.generation,
        })
    }
}

impl Storage for CutStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let _state = self.live()?;
        FileStorage.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        FileStorage.list(dir)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.live()?;
        let inner = FileStorage.create_new(path)?;
        let unsynced = Unsynced {
            created: true,
            synced_len: 0,
            undo: Vec::new(),
        };
        state.files.insert(path.to_owned(), unsynced);
        Ok(self.file(path, inner))
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = FileStorage.open(path, writable)?;
        Ok(self.file(path, inner))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.live()?;
        FileStorage.remove(path)?;
        state.files.remove(path);
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.live()?;
        FileStorage.sync_dir(dir)?;
        for (path, file) in &mut state.files {
            if path.parent() == Some(dir) {
                file.created = false;
            }
        }
        Ok(())
    }
}

/// A file of a [`CutStorage`].
#[derive(Debug)]
pub(super) struct CutFile {
    inner: Box<dyn StorageFile>,
    path: PathBuf,
    cut: PowerCut,
    generation: u64,
}

impl CutFile {
    /// Runs `change` under the journal's lock, after saving the synced bytes from `from` to
    /// `to` (clamped to the synced length) that it will overwrite or cut off.
    pub(super) fn changing(
        &self,
        from: u64,
        to: u64,
        change: impl FnOnce(&dyn StorageFile) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut state = self.cut.lock();
        if state.generation != self.generation {
            return Err(io::Error::other("test broker: the power went"));
        }
        let file = match state.files.entry(self.path.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(Unsynced {
                created: false,
                synced_len: self.inner.len_bytes()?,
                undo: Vec::new(),
            }),
        };
        let to = to.min(file.synced_len);
        if from < to {
            let len = usize::try_from(to - from)
                .map_err(|_| io::Error::other("test broker: undo range too large"))?;
            let mut old = vec![0; len];
            self.inner.read_exact_at(&mut old, from)?;
            file.undo.push((from, old));
        }
        change(&*self.inner)
    }

    pub(super) fn synced(
        &self,
        sync: impl FnOnce(&dyn StorageFile) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut state = self.cut.lock();
        if state.generation != self.generation {
            return Err(io::Error::other("test broker: the power went"));
        }
        sync(&*self.inner)?;
        if let Some(file) = state.files.get_mut(&self.path) {
            file.synced_len = self.inner.len_bytes()?;
            file.undo.clear();
        }
        Ok(())
    }
}

impl StorageFile for CutFile {
    fn len_bytes(&self) -> io::Result<u64> {
        self.inner.len_bytes()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        self.changing(offset, end, |f| f.write_all_at(buf, offset))
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.changing(len, u64::MAX, |f| f.set_len(len))
    }
    fn sync_data(&self) -> io::Result<()> {
        self.synced(|f| f.sync_data())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.synced(|f| f.sync_all())
    }
    fn map_sealed(&self) -> io::Result<Option<ReadOnlyMap>> {
        self.inner.map_sealed()
    }
}
