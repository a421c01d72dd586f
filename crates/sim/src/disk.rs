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

/// The disk of one simulated machine: survives the node's crashes and power losses.
#[derive(Debug)]
pub struct Disk {
    sim: SimStorage,
}

impl Disk {
    /// An empty disk whose power losses follow `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Disk {
            sim: SimStorage::new(seed),
        }
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
        })
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
        self.inner.sync_dir(dir)
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
        self.inner.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.check()?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.check()?;
        self.inner.sync_all()
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
