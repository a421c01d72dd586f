//! [`Process`]: one lifetime of the real server (`wharf_server::Server`) on the simulated disk:
//! its own current-thread tokio runtime with paused time (so time moves only when every task
//! is idle, by exactly what the run asks), the store run inline
//! (`ServerConfig::inline_store`), a [`SimClock`] that reads the runtime's time, and a resource
//! probe that reads the simulated disk's free space (so the server's own monitor raises and
//! clears the disk alarm). A crash fences the disk and drops the runtime with every
//! task on it, as a killed process loses its threads; what it wrote stays on the disk.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use wharf_clock::Clock;
use wharf_server::{IoLatency, ResourceProbe, Server, ServerConfig, ServerHandle};
use wharf_wal::{SimStorage, Storage};

use crate::disk::{Disk, Fence, Slowness};

/// The data directory on the simulated disk.
pub const DATA_DIR: &str = "/sim/data";

/// The server's wall clock: milliseconds since the epoch when the current runtime started,
/// plus the runtime's (paused) time since. Between lifetimes it stands still.
#[derive(Debug)]
pub struct SimClock(Mutex<ClockState>);

#[derive(Debug)]
struct ClockState {
    base_ms: u64,
    started: Option<tokio::time::Instant>,
}

impl SimClock {
    /// A clock at `t0_ms`, standing still until [`SimClock::start`].
    #[must_use]
    pub fn new(t0_ms: u64) -> Self {
        SimClock(Mutex::new(ClockState {
            base_ms: t0_ms,
            started: None,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows the runtime it is called in (from now on).
    #[expect(
        clippy::disallowed_methods,
        reason = "the simulated clock is the runtime's paused time, which only the run moves"
    )]
    fn start(&self) {
        let mut s = self.state();
        s.started = Some(tokio::time::Instant::now());
    }

    /// Stands still at the current time (called in the runtime about to be dropped).
    fn stop(&self) {
        let now = self.now_ms();
        let mut s = self.state();
        s.base_ms = now;
        s.started = None;
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        let s = self.state();
        let run = s.started.map_or(0, |t| {
            u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
        s.base_ms + run
    }
}

/// The simulated machine as the resource monitor sees it: free disk space is what the
/// simulated disk has left (`SimStorage::set_capacity`; plenty when unlimited), memory is
/// never short. So the disk alarm (S-DISK-1) is raised and cleared by the server's own
/// monitor, from the same numbers the log's allocations meet.
#[derive(Debug)]
struct SimProbe(SimStorage);

impl ResourceProbe for SimProbe {
    fn disk_free_bytes(&self) -> io::Result<u64> {
        Ok(self
            .0
            .available_bytes(Path::new(DATA_DIR))?
            .unwrap_or(u64::MAX / 4))
    }
    fn memory_used_bytes(&self) -> io::Result<u64> {
        Ok(0)
    }
}

/// The slow disk's time, as the server's durability waiter pays it.
#[derive(Debug)]
struct SlowDisk {
    slow: Arc<Slowness>,
    clock: Arc<SimClock>,
}

impl IoLatency for SlowDisk {
    fn take(&self) -> Duration {
        Duration::from_millis(self.slow.take_owed_ms(self.clock.now_ms()))
    }
}

/// One server process.
pub struct Process {
    runtime: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
    fence: Fence,
    clock: Arc<SimClock>,
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process").finish_non_exhaustive()
    }
}

/// How the simulated server is configured (chosen by the seed).
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Memory for message content before persistent messages are paged out.
    pub message_memory_bytes: u64,
    /// The log's segment size.
    pub segment_bytes: u64,
    /// The periodic checkpoint's threshold of log.
    pub checkpoint_log_bytes_min: u64,
    /// The disk alarm's limit of free space (0: never on for want of space; a log paused on
    /// a full disk raises it still).
    pub disk_free_limit_bytes: u64,
}

/// Virtual time a start may take (recovery, the startup batch made durable) before the run
/// calls it wedged.
const START_MS_MAX: u64 = 60_000;

impl Process {
    /// Starts the server on `disk` (recovery through the real path) in a fresh runtime.
    ///
    /// # Errors
    /// The server's start error (recovery refused), in words.
    pub fn start(disk: &Disk, clock: &Arc<SimClock>, cfg: &ProcessConfig) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let (storage, fence) = disk.mount();
        let mut config = ServerConfig::new("127.0.0.1:0", DATA_DIR);
        config.storage = Some(storage);
        config.storage_segment_bytes = Some(cfg.segment_bytes);
        config.inline_store = true;
        config.clock = Arc::clone(clock) as Arc<dyn Clock>;
        config.resource_probe = Some(Arc::new(SimProbe(disk.sim().clone())));
        config.inline_store_latency = disk.slow().map(|slow| {
            Arc::new(SlowDisk {
                slow: Arc::clone(slow),
                clock: Arc::clone(clock),
            }) as Arc<dyn IoLatency>
        });
        config.disk_free_limit_bytes = cfg.disk_free_limit_bytes;
        config.consumer_timeout_ms = None;
        config.message_memory_bytes = cfg.message_memory_bytes;
        config.checkpoint_log_bytes_min = cfg.checkpoint_log_bytes_min;
        let started = runtime.block_on(async {
            clock.start();
            tokio::time::timeout(Duration::from_millis(START_MS_MAX), Server::start(config)).await
        });
        match started {
            Err(_) => {
                // Dropped with the runtime: a start that never finished.
                runtime.block_on(async { clock.stop() });
                fence.crash();
                drop(runtime);
                Err(format!(
                    "the start took more than {START_MS_MAX} ms (wedged)"
                ))
            }
            Ok(Ok(handle)) => Ok(Process {
                runtime,
                handle: Some(handle),
                fence,
                clock: Arc::clone(clock),
            }),
            Ok(Err(e)) => {
                runtime.block_on(async { clock.stop() });
                fence.crash();
                drop(runtime);
                Err(format!("{e}: {e:?}"))
            }
        }
    }

    /// The running server.
    ///
    /// # Panics
    /// Never between [`Process::start`] and the end of the process.
    #[must_use]
    #[expect(clippy::expect_used, reason = "held from start to the end")]
    pub fn server(&self) -> &ServerHandle {
        self.handle
            .as_ref()
            .expect("a started process has a server")
    }

    /// Runs `f` on the process's runtime (its tasks run while `f` waits).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// Whether the broker task stopped on its own (a log failure: fail-stop).
    pub fn stopped(&self) -> bool {
        let server = self.server();
        self.block_on(async {
            tokio::time::timeout(std::time::Duration::ZERO, server.stopped())
                .await
                .is_ok()
        })
    }

    /// The process dies: every task with it, its disk handles fenced, its writes kept.
    pub fn crash(mut self) {
        self.runtime.block_on(async { self.clock.stop() });
        self.fence.crash();
        drop(self.handle.take());
        drop(self.runtime);
    }

    /// A graceful shutdown (the clients hung up before).
    ///
    /// # Errors
    /// The server's shutdown error (a failed final sync), in words.
    pub fn stop(mut self) -> Result<(), String> {
        let handle = self.handle.take();
        let result = self.runtime.block_on(async {
            let r = match handle {
                Some(h) => h.shutdown().await.map_err(|e| format!("{e}: {e:?}")),
                None => Ok(()),
            };
            self.clock.stop();
            r
        });
        self.fence.crash();
        drop(self.runtime);
        result
    }
}
