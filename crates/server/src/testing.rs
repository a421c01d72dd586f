//! The embeddable test broker: [`TestBroker`] (a manual clock, crash and power-loss
//! simulation, restart through the real recovery) and the fixture binary's protocol
//! ([`ClockCommand`], [`TempDataDir`]). Services depend on it as `wharf::testing`, whose page
//! (the root crate's `src/testing.rs`) holds the guide and its examples; this module holds the
//! code. It is the server layer's public face for tests: it holds no rule, and no layer below
//! the server depends on it.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock_control::ClockControlError;
use crate::error::ServerError;
use crate::handle::ServerHandle;
use crate::server_config::ServerConfig;
use crate::start::Server;
pub use wharf_base::{DurationError, parse_duration};
use wharf_clock::{Clock, ManualClock, SystemClock};
use wharf_wal::mmap::ReadOnlyMap;
use wharf_wal::{FileStorage, SimStorage, Storage, StorageFile};

/// Where the simulated disk keeps the log (a path inside [`SimStorage`], not on the real disk).
const SIM_DATA_DIR: &str = "/wharf-test/data";

/// How long [`TestBroker::stop`] and the crash operations wait for the broker's tasks to end.
const RUNTIME_SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Errors of the test broker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestBrokerError {
    /// The server failed to start (recovery refused the log, the address is taken) or to stop.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A clock operation was refused (no manual clock, or a time in the past).
    #[error(transparent)]
    Clock(#[from] ClockControlError),
    /// The operation needs a running broker, and it is stopped (call `restart`).
    #[error("the test broker is not running")]
    NotRunning,
    /// The broker's runtime or a directory could not be set up.
    #[error("test broker setup failed: {0}")]
    Setup(#[from] io::Error),
    /// A task of the broker panicked or was cancelled.
    #[error("test broker task failed: {0}")]
    Task(String),
}

/// The disk a test broker's log lives on.
#[derive(Debug, Clone)]
enum Disk {
    /// In memory; can lose power. The instance is replaced by the one
    /// [`SimStorage::power_loss`] returns.
    Simulated(SimStorage),
    /// Real files in the configured data directory, with what a power cut would undo.
    Files(PowerCut),
}

/// Builds a [`TestBroker`]: disk, clock and server settings.
#[derive(Debug)]
pub struct TestBrokerBuilder {
    config: ServerConfig,
    disk: Disk,
    temp_dir: bool,
}

impl TestBrokerBuilder {
    /// Keeps the log in real files in `dir` (created if missing, kept afterwards), so it
    /// survives the test and can be inspected (`wharf-inspect`). [`TestBroker::power_loss`]
    /// then undoes every write not yet synced, exactly (the files are journaled for it).
    #[must_use]
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.data_dir = dir.into();
        self.disk = Disk::Files(PowerCut::default());
        self.temp_dir = false;
        self
    }

    /// Keeps the log in real files in a fresh temporary directory, removed when the
    /// [`TestBroker`] is dropped.
    #[must_use]
    pub fn temp_data_dir(mut self) -> Self {
        self.disk = Disk::Files(PowerCut::default());
        self.temp_dir = true;
        self
    }

    /// Runs the broker on a manual clock standing at `start_ms` (ms since the Unix epoch),
    /// moved only by [`TestBroker::clock`]. The clock is kept across restarts.
    #[must_use]
    pub fn manual_clock(mut self, start_ms: u64) -> Self {
        self.config.clock_control = Some(ManualClock::new(start_ms));
        self
    }

    /// Seeds the simulated disk: which part of the unsynced writes a power loss keeps (and
    /// garbles) follows from it. The default seed is 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        if matches!(self.disk, Disk::Simulated(_)) {
            self.disk = Disk::Simulated(SimStorage::new(seed));
        }
        self
    }

    /// Changes any other server setting (users, vhosts, heartbeats, the address to listen on)
    /// before the first start; restarts reuse it.
    #[must_use]
    pub fn configure(mut self, adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        adjust(&mut self.config);
        self
    }

    /// Starts the broker (recovery first, if the data directory holds a log).
    ///
    /// # Errors
    /// The log cannot be recovered; the address is taken; the runtime cannot start.
    pub async fn start(self) -> Result<TestBroker, TestBrokerError> {
        let TestBrokerBuilder {
            mut config,
            disk,
            temp_dir,
        } = self;
        let temp_dir = if temp_dir {
            let dir = TempDataDir::create()?;
            dir.path().clone_into(&mut config.data_dir);
            Some(dir)
        } else {
            None
        };
        let running = Running::start(&config, &disk).await?;
        let local_addr = running.server.local_addr();
        // Restarts listen on the same address, so clients configured with the URL reconnect.
        config.bind = local_addr.to_string();
        Ok(TestBroker {
            config,
            disk,
            running: Some(running),
            local_addr,
            _temp_dir: temp_dir,
        })
    }
}

/// A wharf broker started in-process for a test, on 127.0.0.1 (a free port) with the default
/// user `guest`/`guest`.
///
/// By default it runs on the real clock and on a simulated in-memory disk (nothing is written
/// to the real disk). [`TestBroker::builder`] chooses a manual
/// clock, real files, or other settings. Each broker runs on its own small tokio runtime, so
/// [`TestBroker::crash`] can drop every task and connection at once, as a killed process
/// would; the methods may be called from any tokio runtime (`#[tokio::test]` included).
///
/// Dropping a running broker ends it as [`TestBroker::crash`] would.
pub struct TestBroker {
    /// The settings every (re)start uses: `bind` is the first start's address.
    config: ServerConfig,
    disk: Disk,
    running: Option<Running>,
    local_addr: SocketAddr,
    _temp_dir: Option<TempDataDir>,
}

impl fmt::Debug for TestBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestBroker")
            .field("local_addr", &self.local_addr)
            .field("data_dir", &self.config.data_dir)
            .field("simulated_disk", &matches!(self.disk, Disk::Simulated(_)))
            .field("manual_clock", &self.config.clock_control.is_some())
            .field("running", &self.running.is_some())
            .finish_non_exhaustive()
    }
}

impl TestBroker {
    /// A broker with the defaults: real clock, simulated disk.
    ///
    /// # Errors
    /// As [`TestBrokerBuilder::start`].
    pub async fn start() -> Result<TestBroker, TestBrokerError> {
        Self::builder().start().await
    }

    /// A builder, to choose a manual clock, real files or other settings.
    pub fn builder() -> TestBrokerBuilder {
        TestBrokerBuilder {
            config: ServerConfig::new("127.0.0.1:0", SIM_DATA_DIR),
            disk: Disk::Simulated(SimStorage::new(0)),
            temp_dir: false,
        }
    }

    /// The `amqp://` URL of the default user and vhost. It stays the same across restarts.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.local_addr)
    }

    /// The address the broker listens on (the same across restarts).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The data directory: a real one with `data_dir`/`temp_data_dir`, otherwise the path the
    /// simulated disk files the log under.
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    /// The simulated disk (`None` on real files): for injecting faults, e.g.
    /// [`SimStorage::fail_sync_after`] to make the disk stop syncing (the broker then stops
    /// confirming and stops, fail-stop), or to look at the files. After a power loss this is
    /// the disk as the next boot sees it.
    pub fn simulated_disk(&self) -> Option<&SimStorage> {
        match &self.disk {
            Disk::Simulated(sim) => Some(sim),
            Disk::Files(_) => None,
        }
    }

    /// Whether the broker is running (not stopped, crashed or powered off).
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// The running server, for operations this type does not wrap.
    pub fn server(&self) -> Option<&ServerHandle> {
        self.running.as_ref().map(|r| &r.server)
    }

    /// The broker's clock: advancing it (with a manual clock) wakes the broker at once.
    pub fn clock(&self) -> TestClock<'_> {
        TestClock { broker: self }
    }

    /// Stops the broker gracefully: connections are closed with 320 `CONNECTION_FORCED`, and
    /// everything logged is made durable.
    ///
    /// # Errors
    /// [`TestBrokerError::NotRunning`]; the final sync failed.
    pub async fn stop(&mut self) -> Result<(), TestBrokerError> {
        let running = self.running.take().ok_or(TestBrokerError::NotRunning)?;
        running.stop().await
    }

    /// Stops the broker abruptly, as SIGKILL would: every task and connection is dropped
    /// without closing or syncing; clients see their sockets close. The log keeps what it had
    /// written; nothing more is written. [`TestBroker::restart`] then runs the real recovery.
    ///
    /// # Errors
    /// [`TestBrokerError::NotRunning`].
    pub async fn crash(&mut self) -> Result<(), TestBrokerError> {
        let running = self.running.take().ok_or(TestBrokerError::NotRunning)?;
        running.kill().await
    }

    /// As [`TestBroker::crash`], and the disk also loses power: whatever the log wrote but
    /// had not made durable (synced) is lost. On the simulated disk a random (seeded) prefix
    /// of it may survive, possibly garbled, as on a real disk; on real files all of it is
    /// undone (files created since their directory's last sync are removed). Every confirmed
    /// message survives (S-DUR-3); recovery cuts a torn tail.
    ///
    /// # Errors
    /// [`TestBrokerError::NotRunning`]; on real files, an I/O error while undoing.
    pub async fn power_loss(&mut self) -> Result<(), TestBrokerError> {
        let running = self.running.take().ok_or(TestBrokerError::NotRunning)?;
        // The process is gone first (no write after this point), then the power.
        running.fence.cut();
        match &self.disk {
            Disk::Simulated(disk) => self.disk = Disk::Simulated(disk.power_loss()),
            Disk::Files(cut) => {
                let cut = cut.clone();
                tokio::task::spawn_blocking(move || cut.power_loss())
                    .await
                    .map_err(|e| TestBrokerError::Task(e.to_string()))??;
            }
        }
        running.kill().await
    }

    /// Starts the broker again on the same disk, address and clock, through the real
    /// recovery. A running broker is first stopped gracefully.
    ///
    /// # Errors
    /// The log cannot be recovered; the address was taken by someone else meanwhile.
    pub async fn restart(&mut self) -> Result<(), TestBrokerError> {
        if self.running.is_some() {
            self.stop().await?;
        }
        self.running = Some(Running::start(&self.config, &self.disk).await?);
        Ok(())
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.fence.cut();
            running.runtime.shutdown_background();
        }
    }
}

/// The clock of a [`TestBroker`]. With a manual clock ([`TestBrokerBuilder::manual_clock`]),
/// [`TestClock::advance`] and [`TestClock::set`] move it and wake the broker at once: every
/// TTL, queue lease (`x-expires`) and scheduled message (`x-delayed-message`) reacts as if that
/// time had passed, before the call returns. While the broker is stopped, the clock still
/// moves (time passes while it is down) and the restart sees the new time.
#[derive(Debug)]
pub struct TestClock<'a> {
    broker: &'a TestBroker,
}

impl TestClock<'_> {
    fn manual(&self) -> Result<&ManualClock, ClockControlError> {
        self.broker
            .config
            .clock_control
            .as_ref()
            .ok_or(ClockControlError::NotEnabled)
    }

    /// The clock's time, ms since the Unix epoch (the real time without a manual clock).
    pub fn now_ms(&self) -> u64 {
        self.manual()
            .map_or_else(|_| SystemClock.now_ms(), ManualClock::now_ms)
    }

    /// Moves the manual clock forward by `by`; resolves, with the new time, once the broker
    /// has done everything that became due and handed the resulting frames to the
    /// connections (a consumer then receives them without further waiting on the broker).
    ///
    /// # Errors
    /// [`ClockControlError::NotEnabled`] without a manual clock; an overflow.
    pub async fn advance(&self, by: Duration) -> Result<u64, TestBrokerError> {
        if let Some(server) = self.broker.server() {
            return Ok(server.clock_advance(by).await?);
        }
        let clock = self.manual()?;
        let by_ms = u64::try_from(by.as_millis())
            .ok()
            .filter(|ms| clock.now_ms().checked_add(*ms).is_some())
            .ok_or(ClockControlError::Overflow { by })?;
        clock.set(clock.now_ms() + by_ms);
        Ok(clock.now_ms())
    }

    /// Sets the manual clock to `now_ms` (not before its current time), as
    /// [`TestClock::advance`] does.
    ///
    /// # Errors
    /// [`ClockControlError::NotEnabled`]; [`ClockControlError::Backwards`].
    pub async fn set(&self, now_ms: u64) -> Result<u64, TestBrokerError> {
        if let Some(server) = self.broker.server() {
            return Ok(server.clock_set(now_ms).await?);
        }
        let clock = self.manual()?;
        if now_ms < clock.now_ms() {
            return Err(ClockControlError::Backwards {
                now_ms: clock.now_ms(),
                requested_ms: now_ms,
            }
            .into());
        }
        clock.set(now_ms);
        Ok(now_ms)
    }
}

/// One run of the broker: its runtime, its server and the fence on its disk.
struct Running {
    runtime: tokio::runtime::Runtime,
    server: ServerHandle,
    fence: Fence,
}

impl Running {
    async fn start(config: &ServerConfig, disk: &Disk) -> Result<Running, TestBrokerError> {
        let inner: Arc<dyn Storage> = match disk {
            Disk::Simulated(sim) => Arc::new(sim.clone()),
            Disk::Files(cut) => Arc::new(cut.storage()),
        };
        let fence = Fence::default();
        let mut config = config.clone();
        config.storage = Some(Arc::new(FencedStorage {
            inner,
            fence: fence.clone(),
        }));
        // One worker: the broker task, its connections and timers; the log writer has its own
        // thread. Its own runtime, so that a crash can drop all of it at once.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wharf-test-broker")
            .enable_all()
            .build()?;
        let started = runtime.spawn(Server::start(config)).await;
        match started {
            Ok(Ok(server)) => Ok(Running {
                runtime,
                server,
                fence,
            }),
            Ok(Err(e)) => {
                runtime.shutdown_background();
                Err(e.into())
            }
            Err(e) => {
                runtime.shutdown_background();
                Err(TestBrokerError::Task(e.to_string()))
            }
        }
    }

    async fn stop(self) -> Result<(), TestBrokerError> {
        let Running {
            runtime,
            server,
            fence,
        } = self;
        let stopped = runtime.spawn(server.shutdown()).await;
        fence.cut();
        end_runtime(runtime).await?;
        stopped.map_err(|e| TestBrokerError::Task(e.to_string()))??;
        Ok(())
    }

    /// Cuts the disk off and drops every task: a killed process.
    async fn kill(self) -> Result<(), TestBrokerError> {
        self.fence.cut();
        drop(self.server);
        end_runtime(self.runtime).await
    }
}

/// Drops every task of `runtime` (closing their sockets) and waits until they are gone, off
/// the async threads (a runtime may not be dropped inside another one).
async fn end_runtime(runtime: tokio::runtime::Runtime) -> Result<(), TestBrokerError> {
    tokio::task::spawn_blocking(move || runtime.shutdown_timeout(RUNTIME_SHUTDOWN_WAIT))
        .await
        .map_err(|e| TestBrokerError::Task(e.to_string()))
}

/// A switch shared by a run's storage and files: once cut, every operation fails, as a killed
/// process's file descriptors are gone. Keeps a crashed run's log writer (a thread that may
/// outlive its tasks for a moment) from writing after the crash.
#[derive(Debug, Clone, Default)]
struct Fence(Arc<AtomicBool>);

impl Fence {
    fn cut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn check(&self) -> io::Result<()> {
        if self.0.load(Ordering::SeqCst) {
            Err(io::Error::other("test broker: the process crashed"))
        } else {
            Ok(())
        }
    }
}

/// A [`Storage`] that works until its [`Fence`] is cut.
#[derive(Debug)]
struct FencedStorage {
    inner: Arc<dyn Storage>,
    fence: Fence,
}

impl Storage for FencedStorage {
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
struct FencedFile {
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

/// What a power cut would undo in a directory of real files: per file written since its last
/// sync, the bytes it overwrote and its length at that sync; per file created since its
/// directory's last sync, that it may not exist. Shared by every run of one [`TestBroker`] (what
/// a crashed run wrote and did not sync stays undoable), and its power cut is exact: every
/// unsynced write is undone, none survives (the simulated disk keeps a random part).
///
/// Removals are taken as durable at once (the log does not remove files yet).
#[derive(Debug, Clone, Default)]
struct PowerCut(Arc<Mutex<CutState>>);

#[derive(Debug, Default)]
struct CutState {
    /// Bumped by every power cut: storages and files of an earlier run then fail.
    generation: u64,
    files: BTreeMap<PathBuf, Unsynced>,
}

#[derive(Debug)]
struct Unsynced {
    /// Created since its directory was last synced: a power cut removes it.
    created: bool,
    /// Its length at the last sync.
    synced_len: u64,
    /// (offset, old bytes) of synced bytes overwritten or cut off since, oldest first.
    undo: Vec<(u64, Vec<u8>)>,
}

impl PowerCut {
    fn lock(&self) -> MutexGuard<'_, CutState> {
        // Plain bookkeeping: consistent enough after a panic elsewhere.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A storage for the next run.
    fn storage(&self) -> CutStorage {
        CutStorage {
            cut: self.clone(),
            generation: self.lock().generation,
        }
    }

    /// Undoes every unsynced change, and fails every storage and file handed out so far.
    fn power_loss(&self) -> io::Result<()> {
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
struct CutStorage {
    cut: PowerCut,
    generation: u64,
}

impl CutStorage {
    fn live(&self) -> io::Result<MutexGuard<'_, CutState>> {
        let state = self.cut.lock();
        if state.generation == self.generation {
            Ok(state)
        } else {
            Err(io::Error::other("test broker: the power went"))
        }
    }

    fn file(&self, path: &Path, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
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
struct CutFile {
    inner: Box<dyn StorageFile>,
    path: PathBuf,
    cut: PowerCut,
    generation: u64,
}

impl CutFile {
    /// Runs `change` under the journal's lock, after saving the synced bytes from `from` to
    /// `to` (clamped to the synced length) that it will overwrite or cut off.
    fn changing(
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

    fn synced(&self, sync: impl FnOnce(&dyn StorageFile) -> io::Result<()>) -> io::Result<()> {
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

/// A fresh directory under the system's temporary directory, removed (with its contents)
/// on drop. Used by [`TestBrokerBuilder::temp_data_dir`] and `wharf --test-mode`.
#[derive(Debug)]
pub struct TempDataDir {
    path: PathBuf,
}

impl TempDataDir {
    /// Creates `wharf-test-<pid>-<ms>-<n>` in the temporary directory.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn create() -> io::Result<TempDataDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = format!(
                "wharf-test-{}-{}-{n}",
                std::process::id(),
                SystemClock.now_ms()
            );
            let path = base.join(name);
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDataDir { path }),
                // Another process of the same pid (a container) or an old leftover: next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One line of the fixture binary's clock protocol (`wharf --test-mode --test-clock` reads
/// them on stdin and answers each with one JSON line on stdout):
///
/// | line | effect | answer |
/// |---|---|---|
/// | `advance 30m` | [`ServerHandle::clock_advance`] | `{"now_ms": 1767227400000}` |
/// | `set 1767225600000` | [`ServerHandle::clock_set`] (ms since the epoch) | `{"now_ms": ...}` |
/// | `now` | [`ServerHandle::clock_now`] | `{"now_ms": ...}` |
///
/// Anything else, or a refused operation (no `--test-clock`, a time in the past), is answered
/// `{"error": "..."}`. The answer to `advance` and `set` comes after the broker has done what
/// became due, so a client that reads the answer and then looks sees the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockCommand {
    /// Move the clock forward.
    Advance(Duration),
    /// Set the clock, ms since the Unix epoch.
    Set(u64),
    /// Tell the time.
    Now,
}

impl ClockCommand {
    /// Parses one protocol line (surrounding whitespace ignored).
    ///
    /// # Errors
    /// An unknown command or a bad argument, described for the `error` answer.
    pub fn parse(line: &str) -> Result<ClockCommand, String> {
        let mut words = line.split_whitespace();
        let command = match (words.next(), words.next()) {
            (Some("advance"), Some(by)) => {
                ClockCommand::Advance(parse_duration(by).map_err(|e| e.to_string())?)
            }
            (Some("set"), Some(ms)) => ClockCommand::Set(
                ms.parse()
                    .map_err(|_| format!("'{ms}' is not a time in ms since the epoch"))?,
            ),
            (Some("now"), None) => ClockCommand::Now,
            _ => {
                return Err(format!(
                    "unknown command '{}': expected 'advance <duration>', 'set <ms>' or 'now'",
                    line.trim()
                ));
            }
        };
        if words.next().is_some() {
            return Err(format!("trailing words in '{}'", line.trim()));
        }
        Ok(command)
    }

    /// Runs the command on `server`: the new (or current) time in ms.
    ///
    /// # Errors
    /// As the [`ServerHandle`] clock operations.
    pub async fn run(self, server: &ServerHandle) -> Result<u64, ClockControlError> {
        match self {
            ClockCommand::Advance(by) => server.clock_advance(by).await,
            ClockCommand::Set(ms) => server.clock_set(ms).await,
            ClockCommand::Now => server.clock_now(),
        }
    }

    /// Parses and runs one protocol line; returns the JSON answer line (without newline).
    pub async fn answer(server: &ServerHandle, line: &str) -> String {
        let result = match ClockCommand::parse(line) {
            Ok(command) => command.run(server).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match result {
            Ok(now_ms) => serde_json::json!({ "now_ms": now_ms }).to_string(),
            Err(error) => serde_json::json!({ "error": error }).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::*;

    #[test]
    fn durations_of_the_fixture_protocol() {
        let ms = |t: &str| parse_duration(t).map(|d| d.as_millis());
        assert_eq!(ms("250ms"), Ok(250));
        assert_eq!(ms("10s"), Ok(10_000));
        assert_eq!(ms("30m"), Ok(1_800_000));
        assert_eq!(ms("1h"), Ok(3_600_000));
        assert_eq!(ms("2d"), Ok(172_800_000));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms(" 5s "), Ok(5_000));
        for bad in [
            "",
            "30",
            "m",
            "5x",
            "1.5h",
            "-1s",
            "5 s",
            "99999999999999999999d",
            "1h h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn clock_commands_parse_and_refuse_garbage() {
        assert_eq!(
            ClockCommand::parse("advance 30m"),
            Ok(ClockCommand::Advance(Duration::from_secs(1800)))
        );
        assert_eq!(
            ClockCommand::parse("set 1767225600000\n"),
            Ok(ClockCommand::Set(1_767_225_600_000))
        );
        assert_eq!(ClockCommand::parse("  now "), Ok(ClockCommand::Now));
        for bad in [
            "",
            "advance",
            "advance 30",
            "set soon",
            "now please",
            "rewind 5s",
        ] {
            assert!(ClockCommand::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn power_cut_on_real_files_undoes_exactly_what_was_not_synced() {
        let dir = TempDataDir::create().unwrap();
        let cut = PowerCut::default();
        let disk = cut.storage();
        let kept = dir.path().join("kept");
        let f = disk.create_new(&kept).unwrap();
        f.write_all_at(b"synced--", 0).unwrap();
        f.sync_data().unwrap();
        disk.sync_dir(dir.path()).unwrap();
        f.write_all_at(b"SYNCED", 0).unwrap(); // overwrites synced bytes
        f.write_all_at(b"+tail", 8).unwrap(); // grows the file
        let fresh = dir.path().join("fresh"); // its directory entry is never synced
        disk.create_new(&fresh)
            .unwrap()
            .write_all_at(b"x", 0)
            .unwrap();
        cut.power_loss().unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"synced--");
        assert!(!fresh.exists());
        assert!(
            f.write_all_at(b"late", 0).is_err(),
            "the dead run cannot write"
        );
        assert!(disk.create_new(&fresh).is_err());
        // The next run works, and a second cut keeps what it synced.
        let next = cut.storage();
        let g = next.open(&kept, true).unwrap();
        g.set_len(4).unwrap();
        g.sync_all().unwrap();
        g.write_all_at(b"more", 4).unwrap();
        cut.power_loss().unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"sync");
    }

    #[test]
    fn temp_data_dir_is_removed_on_drop() {
        let dir = TempDataDir::create().unwrap();
        let path = dir.path().to_owned();
        std::fs::write(path.join("f"), b"x").unwrap();
        let other = TempDataDir::create().unwrap();
        assert_ne!(other.path(), path);
        drop(dir);
        assert!(!path.exists());
    }
}
