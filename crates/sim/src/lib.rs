//! Deterministic simulation of wharf, at two depths, each run named by its seed (the same
//! seed runs the same steps):
//!
//! - **The broker and the store** ([`World`], [`run`]): the real broker (`wharf-broker`) and
//!   store (`wharf-store`, with the real write-ahead log and recovery) driven as the server's
//!   broker task drives them, on the simulated disk (`wharf_wal::SimStorage`) and a manual
//!   clock, by simulated clients, with faults (crash, power loss, failing fsyncs and writes,
//!   a full disk), checked against a reference model ([`Model`]) at every step. It reaches
//!   the broker task's batch/log/release cycle, the expiry timer, paging, explicit
//!   checkpoints, segment reclamation and recovery, with the log's writer run inline
//!   (`WalConfig::inline_writer`), so a seed reproduces its run exactly, fsync grouping and
//!   injected faults included.
//! - **The whole server** ([`srv::ServerWorld`], [`srv::run`]): the real server
//!   (`wharf-server`: connections, channels, the broker task, group commit, confirms,
//!   outboxes, periodic checkpoints) on the same simulated disk, in a current-thread tokio
//!   runtime with paused time, its store run inline (`ServerConfig::inline_store`), reached by
//!   simulated AMQP clients speaking real frames through the socket-free door
//!   (`ServerHandle::connect_in_memory`, S-NET-2), with crashes, power losses, failing
//!   fsyncs and writes, a full disk (the server's own disk alarm reads the simulated disk's
//!   free space) and a slow disk, checked against a black-box model ([`srv::Ledger`]) of
//!   what the clients saw and the queues a management query shows.
//!
//! The network is a seam in both ([`Network`]; the door's stream in `srv`) where a simulated
//! network for the cluster work plugs in.
//!
//! # Layout
//!
//! - `rng`: [`Rng`], the seeded generator every decision comes from.
//! - `disk`: [`Disk`], the simulated disk, fenced per process lifetime (crash vs power loss).
//! - `node`: [`Node`], one broker process: batches, the durability gate, timers, checkpoints.
//! - `net`: [`Network`], outputs on their way to the clients.
//! - `clients`: the simulated clients' commands.
//! - `model`: [`Model`], the reference model and its checks.
//! - `world`: [`World`], one run: steps, faults, restarts.
//! - `srv`: the whole server under simulation ([`srv::ServerWorld`]).

mod clients;
mod disk;
mod model;
mod net;
mod node;
mod rng;
pub mod srv;
mod world;

pub use disk::{Disk, Fence, Slowness};
pub use model::{Model, Place};
pub use net::Network;
pub use node::{Logged, Node, NodeConfig, Output};
pub use rng::Rng;
pub use world::World;

/// A broken rule: what the model saw, in words (the seed is added by [`run`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a run did, and a hash of all of it (equal for equal seeds: a seed names a run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steps taken.
    pub steps: u64,
    /// Messages routed to a queue.
    pub published: u64,
    /// Confirms received.
    pub confirmed: u64,
    /// Deliveries received.
    pub delivered: u64,
    /// Checkpoints attempted, and how many failed.
    pub checkpoints: u64,
    /// Checkpoints that failed (a full disk, an injected fault).
    pub checkpoints_failed: u64,
    /// Process crashes (each one followed by recovery).
    pub crashes: u64,
    /// Power losses.
    pub power_losses: u64,
    /// Injected fsync failures, write failures.
    pub sync_faults: u64,
    /// Injected write failures.
    pub write_faults: u64,
    /// Times the log failed and the process stopped (fail-stop).
    pub fail_stops: u64,
    /// Full-disk episodes.
    pub disk_full: u64,
    /// Publishers told `connection.blocked` (the whole server).
    pub blocked: u64,
    /// Fsyncs and writes that took virtual time, and long stalls among them (the whole
    /// server's slow disk).
    pub slow_ios: u64,
    /// Long stalls of the slow disk.
    pub stalls: u64,
    /// Clean stops and starts.
    pub clean_restarts: u64,
    /// Recoveries checked against the model.
    pub recoveries: u64,
    /// A hash of the whole run: every choice, every batch of events logged, every output the
    /// clients saw, and every byte left on the disk at the end.
    pub trace: u64,
}

/// Runs seed `seed` for `steps` steps, then a clean stop and a final checked recovery.
///
/// # Errors
/// The first violation, prefixed with the seed and step.
pub fn run(seed: u64, steps: u64) -> Result<Stats, Violation> {
    let at = |step: u64, v: Violation| {
        Violation(format!(
            "seed {seed} step {step}: {v} (rerun: WHARF_SIM_SEED={seed} cargo test -p wharf-sim)"
        ))
    };
    let mut world = World::new(seed).map_err(|v| at(0, v))?;
    for step in 1..=steps {
        world.step().map_err(|v| at(step, v))?;
    }
    world.finish().map_err(|v| at(steps + 1, v))
}
