//! How a log is opened and run ([`WalConfig`]), checked against `limits` before anything is
//! touched: config may lower a limit, never raise it.

use crate::error::RecoveryError;
use crate::ids::Lsn;
use crate::recovery::RecoveryMode;
use wharf_base::limits;

/// Smallest segment size accepted (tests lower the size to exercise rolling); the bound
/// lives in `limits` with the others.
pub const SEGMENT_BYTES_MIN: u64 = limits::SEGMENT_BYTES_MIN;

/// How a log is opened and run.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// Largest segment file, header included: `limits::SEGMENT_BYTES_MAX` or lower.
    pub segment_bytes_max: u64,
    /// Keep zeros written a few MiB ahead of the write position (`PREALLOCATE_STEP_BYTES`), so
    /// that the `fdatasync` after each batch overwrites allocated blocks and does not also
    /// commit a file-size change to the file system journal (see the bench).
    pub preallocate: bool,
    /// Bytes of records appended but not yet taken by the writer before `append` blocks.
    pub pending_bytes_max: usize,
    /// Strict (default) or salvage recovery.
    pub recovery_mode: RecoveryMode,
    /// No writer thread: the writer runs on the thread of whoever waits for durability
    /// (`Appender::wait_durable`, polling `Appender::durable`) or appends into a full pending
    /// buffer, and at close. Which records share an fsync then depends only on when the caller
    /// waits, never on timing: the deterministic simulation (`wharf-sim`) runs the log so.
    /// A full disk is returned to the waiter instead of waited out. Off by default.
    pub inline_writer: bool,
    /// Records through this Lsn are covered by a checkpoint (the layer above says so): at
    /// open, a sealed segment whose records all are (the next segment starts at most one
    /// above it) is not read, only its header and the next one's are checked. Its records are
    /// checked when read back. `Lsn(0)` (the default) reads every segment.
    pub covered_through: Lsn,
}

impl Default for WalConfig {
    fn default() -> Self {
        Self {
            segment_bytes_max: limits::SEGMENT_BYTES_MAX,
            preallocate: true,
            pending_bytes_max: limits::WAL_PENDING_BYTES_MAX,
            recovery_mode: RecoveryMode::Strict,
            inline_writer: false,
            covered_through: Lsn(0),
        }
    }
}

impl WalConfig {
    pub(crate) fn validate(&self) -> Result<(), RecoveryError> {
        let bad = |what: &'static str| Err(RecoveryError::Config { what });
        if self.segment_bytes_max > limits::SEGMENT_BYTES_MAX {
            return bad("segment_bytes_max may lower limits::SEGMENT_BYTES_MAX, not raise it");
        }
        if self.segment_bytes_max < SEGMENT_BYTES_MIN {
            return bad("segment_bytes_max is below SEGMENT_BYTES_MIN");
        }
        if self.pending_bytes_max == 0 {
            return bad("pending_bytes_max must be positive");
        }
        if self.pending_bytes_max > limits::WAL_PENDING_BYTES_MAX {
            return bad("pending_bytes_max may lower limits::WAL_PENDING_BYTES_MAX, not raise it");
        }
        Ok(())
    }
}
