//! When an open store takes checkpoints on its own ([`CheckpointTrigger`]) and what a
//! finished one reports ([`CheckpointDone`]).

use wharf_base::limits;

/// When the store takes a checkpoint on its own ([`Store::maybe_checkpoint`]): once the log
/// written since the last one exceeds `max(log_bytes_min, size of the last checkpoint)`, so
/// that writing checkpoints costs at most about as much again as the log itself, and the disk
/// holds about twice the live data plus a few segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointTrigger {
    /// Take periodic checkpoints at all (explicit ones are always possible).
    pub enabled: bool,
    /// The floor of the threshold: `limits::CHECKPOINT_LOG_BYTES_MIN` by default.
    pub log_bytes_min: u64,
    /// Free disk space below which the store is under space pressure (S-DISK-3): it then
    /// checks, at every small step of log (acks and deliveries), whether a checkpoint would
    /// free more than it takes, and writes it if so. The server sets it from its disk alarm
    /// limit; 0 (the default) never checks.
    pub space_floor_bytes: u64,
}

impl Default for CheckpointTrigger {
    fn default() -> Self {
        Self {
            enabled: true,
            log_bytes_min: limits::CHECKPOINT_LOG_BYTES_MIN,
            space_floor_bytes: 0,
        }
    }
}

/// A checkpoint made durable, and what it reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointDone {
    /// The Lsn it covers.
    pub lsn: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Log segments deleted after it.
    pub segments_deleted: u64,
    /// Live messages copied forward in the log first (compaction of sparse segments).
    pub messages_copied: u64,
}
