//! [`SimStorage`]: an in-memory, seeded disk that keeps written and synced bytes apart, can
//! lose power, fail the N-th write or sync, and run out of space.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// A small seeded generator (`SplitMix64`), so a crash is replayable from its seed without a
/// dependency.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `lo..=hi` (`lo` when `hi < lo`).
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        let Some(span) = hi.checked_sub(lo).and_then(|s| s.checked_add(1)) else {
            return lo;
        };
        let span = u64::try_from(span).unwrap_or(u64::MAX);
        lo + usize::try_from(self.next() % span).unwrap_or(0)
    }
}

/// One simulated file: what was written, what a power loss is sure to keep, and the lowest
/// offset written since the last sync (everything below it is identical in both).
#[derive(Debug, Clone, Default)]
struct SimFile {
    written: Vec<u8>,
    synced: Vec<u8>,
    dirty_from: Option<usize>,
    /// Whether the directory entry is durable (the directory was synced after creation).
    entry_durable: bool,
    /// Bytes reserved by [`StorageFile::reserve`] (beyond `written.len()` they count as used
    /// space without being part of the file).
    reserved: usize,
}

impl SimFile {
    /// Space the file takes on the simulated disk.
    fn allocated(&self) -> usize {
        self.written.len().max(self.reserved)
    }
    fn mark_dirty(&mut self, from: usize) {
        self.dirty_from = Some(self.dirty_from.map_or(from, |d| d.min(from)));
    }
    fn sync(&mut self) {
        if let Some(from) = self.dirty_from.take() {
            let from = from.min(self.written.len()).min(self.synced.len());
            self.synced.truncate(from);
            self.synced
                .extend_from_slice(self.written.get(from..).unwrap_or_default());
        }
        debug_assert_eq!(self.synced, self.written, "a sync makes both views equal");
    }
    /// What a power loss leaves: the synced bytes, overlaid with a random prefix of the
    /// unsynced writes, sometimes with part of that prefix garbled.
    fn after_power_loss(&self, rng: &mut SplitMix64) -> Vec<u8> {
        let Some(from) = self.dirty_from else {
            return self.synced.clone();
        };
        let from = from.min(self.written.len());
        let cut = rng.between(from, self.written.len());
        let mut out = self.written.get(..cut).unwrap_or_default().to_vec();
        out.extend_from_slice(self.synced.get(cut..).unwrap_or_default());
        if cut > from && rng.next().is_multiple_of(3) {
            let start = rng.between(from, cut - 1);
            let end = rng.between(start + 1, cut);
            for byte in out.get_mut(start..end).unwrap_or_default() {
                *byte = u8::try_from(rng.next() & 0xff).unwrap_or(0);
            }
        }
        out
    }
}

#[derive(Debug)]
struct SimState {
    /// Bumped by every power loss; handles from before it fail, like a dead process's fds.
    generation: u64,
    files: BTreeMap<PathBuf, SimFile>,
    /// Removed files whose directory was not synced since: a power loss may bring them back.
    removed: BTreeMap<PathBuf, SimFile>,
    rng: SplitMix64,
    writes_until_failure: Option<u64>,
    syncs_until_failure: Option<u64>,
    /// Total bytes the disk holds (`None`: unlimited); see [`SimStorage::set_capacity`].
    capacity_bytes: Option<u64>,
}

impl SimState {
    /// Bytes in use: every live file's allocation (written or reserved).
    fn used_bytes(&self) -> u64 {
        self.files.values().map(|f| f.allocated() as u64).sum()
    }
    /// Refuses to grow `path`'s allocation to `new_allocated` bytes when the disk would
    /// overflow, with the error a full disk gives.
    fn check_space(&self, path: &Path, new_allocated: usize) -> io::Result<()> {
        let Some(capacity) = self.capacity_bytes else {
            return Ok(());
        };
        let current = self.files.get(path).map_or(0, SimFile::allocated);
        let growth = new_allocated.saturating_sub(current) as u64;
        if growth > 0 && self.used_bytes().saturating_add(growth) > capacity {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "SimStorage: no space left on device",
            ));
        }
        Ok(())
    }
}

/// A simulated disk in memory. Cloning shares the same disk.
///
/// It keeps, per file, the bytes written and the bytes synced. [`SimStorage::power_loss`]
/// keeps the synced bytes plus a random, possibly garbled, prefix of the unsynced rest (seeded,
/// so the same seed and the same operations give the same result), and drops files whose
/// creation was never made durable by a directory sync. [`SimStorage::fail_write_after`] and
/// [`SimStorage::fail_sync_after`] make the N-th next write or sync fail.
#[derive(Debug, Clone)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
    /// The power cycle this instance belongs to: after a power loss, only the instance it
    /// returned works, as a dead process's view of the disk is gone with it.
    generation: u64,
}

impl SimStorage {
    /// An empty disk whose power losses are driven by `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(SimState {
                generation: 0,
                files: BTreeMap::new(),
                removed: BTreeMap::new(),
                rng: SplitMix64(seed),
                writes_until_failure: None,
                syncs_until_failure: None,
                capacity_bytes: None,
            })),
            generation: 0,
        }
    }

    /// The state, if this instance is of the current power cycle.
    fn live(&self) -> io::Result<MutexGuard<'_, SimState>> {
        let state = self.lock();
        if state.generation != self.generation {
            return Err(io::Error::other(
                "SimStorage: disk handle from before a power loss",
            ));
        }
        Ok(state)
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding this lock leaves plain byte vectors behind, still consistent
        // enough for a simulated disk; recover rather than cascade the panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Simulates a power loss (or a kernel crash): every file falls back to its synced bytes
    /// plus a random, possibly garbled, prefix of what was written after; files never made
    /// durable by a directory sync may vanish, removals not made durable may be undone.
    ///
    /// Pending injected faults are cleared. Returns the disk as the next boot sees it. This instance, its clones and every file
    /// opened through them fail from now on, as a dead process's file descriptors would: a
    /// log still running on them stops with an I/O error and writes nothing more.
    #[must_use = "the returned instance is the disk after the power loss"]
    pub fn power_loss(&self) -> SimStorage {
        let mut guard = self.lock();
        let state = &mut *guard;
        state.generation += 1;
        let mut survivors = BTreeMap::new();
        for (path, file) in std::mem::take(&mut state.files) {
            if !file.entry_durable && state.rng.next().is_multiple_of(2) {
                continue;
            }
            let bytes = file.after_power_loss(&mut state.rng);
            survivors.insert(path, Self::settled(bytes));
        }
        for (path, file) in std::mem::take(&mut state.removed) {
            if state.rng.next().is_multiple_of(2) {
                survivors.insert(path, Self::settled(file.synced));
            }
        }
        state.files = survivors;
        // Injected faults belong to the dead process's run.
        state.writes_until_failure = None;
        state.syncs_until_failure = None;
        SimStorage {
            state: Arc::clone(&self.state),
            generation: state.generation,
        }
    }

    fn settled(bytes: Vec<u8>) -> SimFile {
        SimFile {
            written: bytes.clone(),
            synced: bytes,
            dirty_from: None,
            entry_durable: true,
            reserved: 0,
        }
    }

    /// Makes the write after the next `n` succeed fail (`n = 0`: the very next one).
    pub fn fail_write_after(&self, n: u64) {
        self.lock().writes_until_failure = Some(n);
    }

    /// Makes the sync (file or directory) after the next `n` fail (`n = 0`: the very next).
    pub fn fail_sync_after(&self, n: u64) {
        self.lock().syncs_until_failure = Some(n);
    }

    /// Limits the disk to `capacity_bytes` in all (`None`: unlimited). Writes that would grow
    /// a file past what is free, and reservations that do not fit, then fail with
    /// [`io::ErrorKind::StorageFull`], as on a full disk. Lowering the capacity below what is
    /// used loses nothing: it only refuses growth until space is freed or the capacity raised.
    pub fn set_capacity(&self, capacity_bytes: Option<u64>) {
        self.lock().capacity_bytes = capacity_bytes;
    }

    /// Bytes in use on the simulated disk (every file's written or reserved bytes).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    /// The bytes a file holds now (written, synced or not), for tests and tools.
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        self.lock().files.get(path).map(|f| f.written.clone())
    }

    /// Replaces a file's bytes as if they had been written and synced (to plant damage).
    pub fn set_file_bytes(&self, path: &Path, bytes: Vec<u8>) {
        self.lock()
            .files
            .insert(path.to_owned(), Self::settled(bytes));
    }

    fn handle(&self, path: &Path, generation: u64) -> Box<dyn StorageFile> {
        Box::new(SimHandle {
            storage: self.clone(),
            path: path.to_owned(),
            generation,
        })
    }
}

fn countdown(counter: &mut Option<u64>) -> bool {
    match counter {
        Some(0) => {
            *counter = None;
            true
        }
        Some(n) => {
            *n -= 1;
            false
        }
        None => false,
    }
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("SimStorage: injected {what} failure"))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("SimStorage: no file {}", path.display()),
    )
}

impl Storage for SimStorage {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.live()?;
        Ok(state
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.live()?;
        if state.files.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("SimStorage: {} exists", path.display()),
            ));
        }
        state.files.insert(path.to_owned(), SimFile::default());
        let generation = state.generation;
        drop(state);
        Ok(self.handle(path, generation))
    }
    fn open(&self, path: &Path, _writable: bool) -> io::Result<Box<dyn StorageFile>> {
        let state = self.live()?;
        if !state.files.contains_key(path) {
            return Err(not_found(path));
        }
        let generation = state.generation;
        drop(state);
        Ok(self.handle(path, generation))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.live()?;
        let file = state.files.remove(path).ok_or_else(|| not_found(path))?;
        if file.entry_durable {
            state.removed.insert(path.to_owned(), file);
        }
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.live()?;
        if countdown(&mut state.syncs_until_failure) {
            return Err(injected("directory sync"));
        }
        for (path, file) in &mut state.files {
            if path.parent() == Some(dir) {
                file.entry_durable = true;
            }
        }
        state.removed.retain(|path, _| path.parent() != Some(dir));
        Ok(())
    }
    /// Until the directory is synced, a power loss may keep the old entries (a durable `from`
    /// or a replaced durable `to` may come back) or drop the new one, as a real file system
    /// may; the file's bytes move with it, synced or not.
    fn keeps_optional_files(&self) -> bool {
        false
    }

    fn available_bytes(&self, _dir: &Path) -> io::Result<Option<u64>> {
        let state = self.live()?;
        Ok(state
            .capacity_bytes
            .map(|c| c.saturating_sub(state.used_bytes())))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.live()?;
        let file = state.files.remove(from).ok_or_else(|| not_found(from))?;
        if file.entry_durable {
            state.removed.insert(from.to_owned(), file.clone());
        }
        let moved = SimFile {
            entry_durable: false,
            ..file
        };
        if let Some(old) = state.files.insert(to.to_owned(), moved)
            && old.entry_durable
        {
            state.removed.insert(to.to_owned(), old);
        }
        Ok(())
    }
}

/// An open simulated file: a path into the shared disk, valid until the next power loss.
#[derive(Debug)]
struct SimHandle {
    storage: SimStorage,
    path: PathBuf,
    generation: u64,
}

impl SimHandle {
    fn with<T>(&self, op: impl FnOnce(&mut SimState, &Path) -> io::Result<T>) -> io::Result<T> {
        let mut state = self.storage.lock();
        if state.generation != self.generation {
            return Err(io::Error::other(
                "SimStorage: handle from before a power loss",
            ));
        }
        op(&mut state, &self.path)
    }
}

fn file_mut<'a>(state: &'a mut SimState, path: &Path) -> io::Result<&'a mut SimFile> {
    state.files.get_mut(path).ok_or_else(|| not_found(path))
}

fn to_usize(n: u64) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))
}

impl StorageFile for SimHandle {
    fn len_bytes(&self) -> io::Result<u64> {
        self.with(|state, path| Ok(file_mut(state, path)?.written.len() as u64))
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|state, path| {
            let file = file_mut(state, path)?;
            let start = to_usize(offset)?;
            let src = start
                .checked_add(buf.len())
                .and_then(|end| file.written.get(start..end))
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(|state, path| {
            if countdown(&mut state.writes_until_failure) {
                return Err(injected("write"));
            }
            let start = to_usize(offset)?;
            let end = start
                .checked_add(buf.len())
                .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
            let written = file_mut(state, path)?.written.len();
            state.check_space(path, end.max(written))?;
            let file = file_mut(state, path)?;
            if file.written.len() < end {
                file.written.resize(end, 0);
            }
            if let Some(dst) = file.written.get_mut(start..end) {
                dst.copy_from_slice(buf);
            }
            file.mark_dirty(start);
            Ok(())
        })
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|state, path| {
            let file = file_mut(state, path)?;
            let len = to_usize(len)?;
            let old = file.written.len();
            file.written.resize(len, 0);
            // As on ext4: a truncation frees the blocks reserved beyond the new length.
            file.reserved = file.reserved.min(len);
            file.mark_dirty(old.min(len));
            Ok(())
        })
    }
    fn sync_data(&self) -> io::Result<()> {
        self.with(|state, path| {
            if countdown(&mut state.syncs_until_failure) {
                return Err(injected("sync"));
            }
            file_mut(state, path)?.sync();
            Ok(())
        })
    }
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
    fn reserve(&self, len: u64) -> io::Result<()> {
        self.with(|state, path| {
            let len = to_usize(len)?;
            let file = file_mut(state, path)?;
            let new_allocated = file.allocated().max(len);
            state.check_space(path, new_allocated)?;
            let file = file_mut(state, path)?;
            file.reserved = file.reserved.max(len);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_loss_keeps_synced_bytes_and_drops_undurable_files() {
        let sim = SimStorage::new(1);
        let dir = Path::new("/d");
        let a = sim.create_new(&dir.join("a")).unwrap();
        a.write_all_at(b"synced", 0).unwrap();
        a.sync_data().unwrap();
        sim.sync_dir(dir).unwrap();
        a.write_all_at(b"-unsynced-tail", 6).unwrap();
        let rebooted = sim.power_loss();
        let bytes = rebooted.file_bytes(&dir.join("a")).unwrap();
        assert!(bytes.starts_with(b"synced"), "{bytes:?}");
        assert!(bytes.len() <= 20);
        assert!(
            a.len_bytes().is_err(),
            "stale handle must fail after a power loss"
        );
    }

    #[test]
    fn injected_failures_hit_the_nth_operation() {
        let sim = SimStorage::new(2);
        let f = sim.create_new(Path::new("/d/f")).unwrap();
        sim.fail_write_after(1);
        f.write_all_at(b"a", 0).unwrap();
        assert!(f.write_all_at(b"b", 1).is_err());
        f.write_all_at(b"c", 1).unwrap();
        sim.fail_sync_after(0);
        assert!(f.sync_data().is_err());
        f.sync_data().unwrap();
    }

    #[test]
    fn a_full_disk_refuses_growth_and_reservations_but_not_overwrites() {
        let sim = SimStorage::new(3);
        sim.set_capacity(Some(100));
        let f = sim.create_new(Path::new("/d/f")).unwrap();
        f.reserve(60).unwrap();
        assert_eq!(sim.used_bytes(), 60);
        f.write_all_at(&[1; 60], 0).unwrap();
        assert_eq!(
            sim.used_bytes(),
            60,
            "writes into reserved space take nothing more"
        );
        let g = sim.create_new(Path::new("/d/g")).unwrap();
        let full = g.reserve(41).unwrap_err();
        assert_eq!(full.kind(), io::ErrorKind::StorageFull);
        assert_eq!(
            g.write_all_at(&[2; 41], 0).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        g.write_all_at(&[2; 40], 0).unwrap();
        f.write_all_at(&[3; 10], 50).unwrap();
        f.set_len(10).unwrap();
        assert_eq!(
            sim.used_bytes(),
            50,
            "truncation frees the reservation beyond it"
        );
        g.reserve(90).unwrap();
        sim.set_capacity(None);
        f.reserve(1 << 20).unwrap();
    }
}
