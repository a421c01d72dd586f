//! [`TestBroker`]: a broker in-process on its own runtime, with its builder, its clock
//! ([`TestClock`]), crash and power-loss, and restart through the real recovery.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use std::{fmt, io};

use super::crash::{Fence, FencedStorage};
use super::fixture::TempDataDir;
use super::power_cut::PowerCut;
use crate::clock_control::ClockControlError;
use crate::error::ServerError;
use crate::handle::ServerHandle;
use crate::server_config::ServerConfig;
use crate::start::Server;

use wharf_clock::{Clock, ManualClock, SystemClock};
use wharf_wal::{SimStorage, Storage};

/// Where the simulated disk keeps the log (a path inside [`SimStorage`], not on the real disk).
pub(super) const SIM_DATA_DIR: &str = "/wharf-test/data";

/// How long [`TestBroker::stop`] and the crash operations wait for the broker's tasks to end.
pub(super) const RUNTIME_SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

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
    Task(tokio::task::JoinError),
}

/// The disk a test broker's log lives on.
#[derive(Debug, Clone)]
pub(super) enum Disk {
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
                    .map_err(TestBrokerError::Task)??;
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
    pub(super) fn manual(&self) -> Result<&ManualClock, ClockControlError> {
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
pub(super) struct Running {
    runtime: tokio::runtime::Runtime,
    server: ServerHandle,
    fence: Fence,
}

impl Running {
    pub(super) async fn start(
        config: &ServerConfig,
        disk: &Disk,
    ) -> Result<Running, TestBrokerError> {
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
                Err(TestBrokerError::Task(e))
            }
        }
    }

    pub(super) async fn stop(self) -> Result<(), TestBrokerError> {
        let Running {
            runtime,
            server,
            fence,
        } = self;
        let stopped = runtime.spawn(server.shutdown()).await;
        fence.cut();
        end_runtime(runtime).await?;
        stopped.map_err(TestBrokerError::Task)??;
        Ok(())
    }

    /// Cuts the disk off and drops every task: a killed process.
    pub(super) async fn kill(self) -> Result<(), TestBrokerError> {
        self.fence.cut();
        drop(self.server);
        end_runtime(self.runtime).await
    }
}

/// Drops every task of `runtime` (closing their sockets) and waits until they are gone, off
/// the async threads (a runtime may not be dropped inside another one).
pub(super) async fn end_runtime(runtime: tokio::runtime::Runtime) -> Result<(), TestBrokerError> {
    tokio::task::spawn_blocking(move || runtime.shutdown_timeout(RUNTIME_SHUTDOWN_WAIT))
        .await
        .map_err(TestBrokerError::Task)
}
