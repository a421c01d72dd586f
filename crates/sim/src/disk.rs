//! [`Disk`]: the simulated disk a run's node writes to ([`SimStorage`]: power loss that drops
//! or garbles unsynced writes, failing writes and syncs, a capacity), behind a fence, so that
//! a process crash can be told from a power loss: a crashed process's handles stop working
//! (as its file descriptors die with it) while everything it wrote stays (the kernel keeps
//! it), which `SimStorage` alone cannot express.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wharf_wal::{ReadOnlyMap, SimStorage, Storage, StorageFile};

use crate::Violation;

/// The disk of one simulated machine: survives the node's crashes and power losses.
#[derive(Debug)]
pub struct Disk {
    sim: SimStorage,
    slow: Option<Arc<Slowness>>,
}

/// A slow disk: every fsync (and, less, every write) takes virtual time, drawn from its own
/// seeded generator in the order the I/O happens, with now and then a long stall. The time
/// is owed, not slept: whoever waits for the I/O pays it ([`Slowness::take_owed_ms`]; the
/// whole server's durability waiter sleeps it in virtual time before it reports the batch
/// durable), so group commit, confirms, timers and the disk alarm interleave as on a slow
/// disk while the run stays a function of its seed.
#[derive(Debug)]
pub struct Slowness {
    state: std::sync::Mutex<SlowState>,
}

#[derive(Debug)]
struct SlowState {
    rng: crate::rng::Rng,
    /// An fsync takes up to this many ms.
    sync_ms_max: u64,
    /// One fsync in this many stalls.
    stall_one_in: u64,
    /// A stall takes up to this many ms.
    stall_ms_max: u64,
    owed_ms: u64,
    /// When (clock ms) the time taken so far has passed.
    busy_until_ms: u64,
    ios: u64,
    stalls: u64,
}

impl Slowness {
    /// A slow disk whose latencies follow `seed`: fsyncs of up to `sync_ms_max` ms, one in
    /// `stall_one_in` a stall of up to `stall_ms_max` ms; writes a tenth of an fsync.
    #[must_use]
    pub fn new(seed: u64, sync_ms_max: u64, stall_one_in: u64, stall_ms_max: u64) -> Self {
        Slowness {
            state: std::sync::Mutex::new(SlowState {
                rng: crate::rng::Rng::new(seed),
                sync_ms_max: sync_ms_max.max(1),
                stall_one_in: stall_one_in.max(1),
                stall_ms_max: stall_ms_max.max(1),
                owed_ms: 0,
                busy_until_ms: 0,
                ios: 0,
                stalls: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SlowState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One I/O happened: an fsync (`sync`) or a write; its time is owed.
    fn io(&self, sync: bool) {
        let mut guard = self.state();
        let s = &mut *guard;
        let max = if sync {
            s.sync_ms_max
        } else {
            s.sync_ms_max / 10
        };
        let mut ms = s.rng.below(max + 1);
        if sync && s.rng.below(s.stall_one_in) == 0 {
            ms += s.rng.below(s.stall_ms_max + 1);
            s.stalls += 1;
        }
        s.ios += 1;
        s.owed_ms += ms;
    }

    /// The virtual time the I/O since the last call took, in ms, to be slept from `now_ms`
    /// (nothing is owed after).
    pub fn take_owed_ms(&self, now_ms: u64) -> u64 {
        let mut s = self.state();
        let ms = std::mem::take(&mut s.owed_ms);
        s.busy_until_ms = s.busy_until_ms.max(now_ms + ms);
        ms
    }

    /// When (clock ms) the time of the I/O paid so far has passed: until then a batch may
    /// wait for its fsync.
    #[must_use]
    pub fn busy_until_ms(&self) -> u64 {
        self.state().busy_until_ms
    }

    /// I/Os that took time, and stalls among them, so far.
    #[must_use]
    pub fn counts(&self) -> (u64, u64) {
        let s = self.state();
        (s.ios, s.stalls)
    }
}

impl Disk {
    /// An empty disk whose power losses follow `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Disk {
            sim: SimStorage::new(seed),
            slow: None,
        }
    }

    /// Makes the disk slow from now on (every process lifetime after).
    pub fn set_slow(&mut self, slow: Slowness) {
        self.slow = Some(Arc::new(slow));
    }

    /// The disk's slowness, if it is slow.
    #[must_use]
    pub fn slow(&self) -> Option<&Arc<Slowness>> {
        self.slow.as_ref()
    }

    /// The raw simulated disk, for fault injection (`fail_sync_after`, `set_capacity`).
    #[must_use]
    pub fn sim(&self) -> &SimStorage {
        &self.sim
    }

    /// A storage for one process lifetime, and the fence that ends it.
    #[must_use]
    pub fn mount(&self) -> (Arc<dyn Storage>, Fence) {
        let alive = Arc::new(AtomicBool::new(true));
        let storage = Fenced {
            inner: self.sim.clone(),
            alive: Arc::clone(&alive),
            slow: self.slow.clone(),
        };
        (Arc::new(storage), Fence(alive))
    }

    /// The power goes: unsynced writes are dropped or garbled (seeded), every handle of the
    /// old power cycle fails from now on.
    pub fn power_loss(&mut self) {
        self.sim = self.sim.power_loss();
    }

    /// The `after`-th next fsync (`sync`) or write from now fails (0: the next one), for the
    /// current process lifetime ([`Disk::process_ended`] clears it).
    pub fn fail_soon(&self, sync: bool, after: u64) {
        if sync {
            self.sim.fail_sync_after(after);
        } else {
            self.sim.fail_write_after(after);
        }
    }

    /// S-DISK-4: no partial checkpoint (a `.tmp` file) is left in `dir`, once a failed
    /// checkpoint returned (a full disk included).
    ///
    /// # Errors
    /// The partial file found, or the listing's error.
    pub fn check_no_partial_checkpoint(&self, dir: &Path) -> Result<(), Violation> {
        let names = self
            .sim
            .list(dir)
            .map_err(|e| Violation(format!("listing the data directory: {e}")))?;
        if let Some(tmp) = names
            .iter()
            .find(|n| Path::new(n).extension().is_some_and(|e| e == "tmp"))
        {
            return Err(Violation(format!(
                "partial checkpoint {tmp} left on a full disk (S-DISK-4)"
            )));
        }
        Ok(())
    }

    /// The files in `dir` and their lengths, for a violation's words.
    #[must_use]
    pub fn describe(&self, dir: &Path) -> String {
        let names = self.sim.list(dir).unwrap_or_default();
        let files: Vec<String> = names
            .iter()
            .map(|n| {
                let len = self.sim.file_bytes(&dir.join(n)).map_or(0, |b| b.len());
                format!("{n} {len}")
            })
            .collect();
        format!("{} used: {}", self.sim.used_bytes(), files.join(", "))
    }

    /// A process lifetime ended (after its crash or stop): the power goes too when
    /// `power_loss`, and the faults injected for that process are cleared (they belong to it).
    pub fn process_ended(&mut self, power_loss: bool) {
        if power_loss {
            self.power_loss();
        }
        self.sim.fail_sync_after(u64::MAX);
        self.sim.fail_write_after(u64::MAX);
    }
}

/// Ends a process lifetime: every handle of its storage fails afterwards.
#[derive(Debug)]
pub struct Fence(Arc<AtomicBool>);

impl Fence {
    /// The process dies here (its writes stay on the disk).
    pub fn crash(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct Fenced<T> {
    inner: T,
    alive: Arc<AtomicBool>,
    slow: Option<Arc<Slowness>>,
}

impl<T> Fenced<T> {
    fn check(&self) -> io::Result<()> {
        if self.alive.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(io::Error::other("simulated process crashed"))
        }
    }
    fn wrap(&self, file: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(Fenced {
            inner: file,
            alive: Arc::clone(&self.alive),
            slow: self.slow.clone(),
        })
    }
    /// An I/O that succeeded takes its time on a slow disk.
    fn took<R>(&self, sync: bool, r: io::Result<R>) -> io::Result<R> {
        if r.is_ok()
            && let Some(slow) = &self.slow
        {
            slow.io(sync);
        }
        r
    }
}

impl Storage for Fenced<SimStorage> {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check()?;
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.check()?;
        self.inner.list(dir)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.check()?;
        Ok(self.wrap(self.inner.create_new(path)?))
    }
    fn open(&self, path: &Path, writable: bool) -> io::Result<Box<dyn StorageFile>> {
        self.check()?;
        Ok(self.wrap(self.inner.open(path, writable)?))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.check()?;
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check()?;
        self.took(true, self.inner.sync_dir(dir))
    }
    fn available_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        self.check()?;
        self.inner.available_bytes(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check()?;
        self.inner.rename(from, to)
    }
}

impl StorageFile for Fenced<Box<dyn StorageFile>> {
    fn len_bytes(&self) -> io::Result<u64> {
        self.check()?;
        self.inner.len_bytes()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check()?;
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check()?;
        self.took(false, self.inner.write_all_at(buf, offset))
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.check()?;
        self.took(true, self.inner.sync_data())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.check()?;
        self.took(true, self.inner.sync_all())
    }
    fn reserve(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.reserve(len)
    }
    fn map_sealed(&self) -> io::Result<Option<ReadOnlyMap>> {
        self.check()?;
        self.inner.map_sealed()
    }
}
