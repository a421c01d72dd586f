//! The [`Store`]: the durable store of one broker, its log open and its checkpoints taken.
//! Its methods live in the child modules, by what they do: `open` (recovery on start, and
//! closing), `log` (appending events and waiting for durability), `checkpoints` (when and how
//! checkpoints are taken).
//!
//! # Contract with the server
//!
//! The broker task owns the [`Store`]. After each `broker.handle(..)` it passes the outcome's
//! events to [`Store::log`], which appends them without waiting and returns a ticket (the Lsn
//! of the last record). Publisher confirms, acks and declares that need durability wait for
//! [`Store::durable`] of that ticket (S-DUR-3, S-DUR-4); [`Store::durable_watermark`] is the
//! highest ticket known durable, so confirms can be released in bulk.
//!
//! Any error from [`Store::log`] or [`Store::durable`] is fail-stop: the broker has already
//! applied the events in memory, so the log and the model may differ from then on. The server
//! stops confirming and exits; reopening (recovery) is the way on (STYLE 3.3).

mod checkpoints;
mod compaction;
mod log;
mod open;

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::batch::Scratch;
use crate::checkpoint_trigger::{CheckpointDone, CheckpointTrigger};
use crate::disk_demand::DiskDemand;
use crate::error::StoreError;
use crate::stored::StoredReader;
use wharf_wal::{Appender, Storage, Wal};

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// Skip corrupt records in the middle of the log and report them, instead of refusing to
    /// start (S-DUR-7). Off by default.
    pub salvage: bool,
}

/// A position in the log: records up to and including a ticket are durable once the watermark
/// reaches it. Tickets grow with every append.
pub type Ticket = u64;

/// The durable store of one broker: the open log, a scratch buffer for encoding, and the
/// checkpoints.
#[derive(Debug)]
pub struct Store {
    wal: Wal,
    appender: Appender,
    storage: Arc<dyn Storage>,
    /// Encoded payloads of the batch being logged, reused across calls. Behind a mutex only
    /// because `log` takes `&self`; the broker task is its one user, so it is never contended.
    scratch: Mutex<Scratch>,
    /// Writes the index of each segment sealed (`segment_index::writer`); joined at close.
    index_writer: Option<std::thread::JoinHandle<()>>,
    /// The Lsn of the last record appended: a snapshot taken now reflects exactly the log
    /// through it.
    last_lsn: AtomicU64,
    /// Frame bytes appended since open (the checkpoint trigger's clock).
    logged_bytes: AtomicU64,
    /// Messages settled or purged since open (the space checks' second clock, S-DISK-3).
    settled: AtomicU64,
    /// The segment the last record went to.
    last_segment: AtomicU64,
    /// The log's segment size.
    segment_bytes: u64,
    checkpoints: Checkpoints,
    /// Reads stored messages back (the broker holds it as its loader).
    reader: Arc<StoredReader>,
    /// Disk space about to be taken, for the resource monitor (S-DISK-1).
    demand: Arc<DiskDemand>,
}

/// The checkpoint bookkeeping of an open store.
#[derive(Debug, Default)]
struct Checkpoints {
    trigger: CheckpointTrigger,
    /// The newest durable checkpoint.
    newest: Option<u64>,
    /// Its size: the estimate of the live durable bytes.
    live_bytes: u64,
    /// `logged_bytes` when the newest checkpoint's snapshot was taken, or when the last
    /// attempt failed (so a failing disk is retried after another threshold, not at once).
    base_bytes: u64,
    /// The segment being written when the newest checkpoint's snapshot was taken.
    base_segment: u64,
    in_flight: Option<InFlight>,
    /// Whether checkpoints wait for disk space, and why (S-DISK-3).
    waiting: SpaceWait,
    /// The next free-space check happens at the next call, whatever was logged or settled
    /// since the last one ([`Store::recheck_space`]).
    recheck: bool,
    /// `logged_bytes` at the last free-space check.
    space_checked_at: u64,
    /// `settled` at the last free-space check, and the messages the last estimate counted.
    settled_checked_at: u64,
    estimated_messages: u64,
    /// Periodic checkpoints run on the calling thread, not a thread of their own: set when the
    /// log's writer runs inline (`WalConfig::inline_writer`, the deterministic simulation),
    /// so that an open store starts no thread at all.
    inline: bool,
}

/// Why periodic checkpoints wait for disk space (S-DISK-3, [`Store::waits_for_space`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum SpaceWait {
    /// They do not.
    #[default]
    No,
    /// A checkpoint was wanted but did not fit in the free space: retried at every space
    /// step of log, as acks shrink it.
    Deferred,
    /// The last periodic checkpoint failed while the store has a space floor: retried at the
    /// next free-space check.
    Failed,
}

#[derive(Debug)]
struct InFlight {
    at_bytes: u64,
    at_segment: u64,
    running: Running,
}

/// A periodic checkpoint being written: on its thread, or (inline) already done.
#[derive(Debug)]
enum Running {
    Thread(std::thread::JoinHandle<Result<CheckpointDone, StoreError>>),
    Done(Result<CheckpointDone, StoreError>),
}
