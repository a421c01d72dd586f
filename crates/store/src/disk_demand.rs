//! [`DiskDemand`]: the disk space the store is about to take, shared with the resource
//! monitor's handle (`appender::LogHealth`), S-DISK-1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Disk space the store is about to take and that `statvfs` does not show yet (S-DISK-1): the
/// reservation of the log's next segment, the segment indexes about to be written, and the
/// room the next checkpoint needs (one being written or waiting for space, or the next one the
/// log will need to give segments back, S-DISK-10). The resource monitor counts it as used, so
/// the disk alarm goes on before the log could run out of space, or take the room the
/// checkpoint that reclaims it needs.
#[derive(Default)]
pub struct DiskDemand {
    /// The next segment's reservation (the log's segment size).
    segment_bytes: AtomicU64,
    /// The checkpoint in flight, or deferred for want of space: its estimated size.
    checkpoint_bytes: AtomicU64,
    /// The room the next checkpoint needs (S-DISK-10): the last checkpoint estimate, plus an
    /// allowance for each message logged since ([`DiskDemand::messages_logged`]).
    reclaim_bytes: AtomicU64,
    /// `reclaim_bytes` when the monitor was last told it grew.
    reclaim_told: AtomicU64,
    /// Segment indexes waiting to be written: their largest size (the file system shows
    /// them once written).
    index_bytes: AtomicU64,
    /// Called at each allocation (a segment roll, a checkpoint started or deferred), so the
    /// disk alarm is checked then and not only once a second (S-DISK-1).
    wake: Mutex<Option<Waker>>,
}

pub(crate) type Waker = Box<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for DiskDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskDemand")
            .field("bytes", &self.bytes())
            .finish_non_exhaustive()
    }
}

impl DiskDemand {
    pub(crate) fn new(segment_bytes: u64) -> DiskDemand {
        DiskDemand {
            segment_bytes: AtomicU64::new(segment_bytes),
            checkpoint_bytes: AtomicU64::new(0),
            reclaim_bytes: AtomicU64::new(0),
            reclaim_told: AtomicU64::new(0),
            index_bytes: AtomicU64::new(0),
            wake: Mutex::new(None),
        }
    }

    pub(crate) fn set_checkpoint(&self, bytes: u64) {
        let was = self.checkpoint_bytes.swap(bytes, Ordering::Relaxed);
        if bytes > was {
            self.allocated();
        }
    }

    /// The next checkpoint was estimated at `bytes` (S-DISK-10).
    pub(crate) fn set_reclaim(&self, bytes: u64) {
        self.reclaim_bytes.store(bytes, Ordering::Relaxed);
        let told = self.reclaim_told.swap(bytes, Ordering::Relaxed);
        if bytes > told {
            self.allocated();
        }
    }

    /// `bytes` more of checkpoint (messages logged since its estimate, S-DISK-10). The
    /// monitor is told once the growth since it was last told reaches `step` (a check per
    /// step, not per batch).
    pub(crate) fn messages_logged(&self, bytes: u64, step: u64) {
        if bytes == 0 {
            return;
        }
        let now = self
            .reclaim_bytes
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        let told = self.reclaim_told.load(Ordering::Relaxed);
        if now.saturating_sub(told) >= step {
            self.reclaim_told.store(now, Ordering::Relaxed);
            self.allocated();
        }
    }

    /// A segment index of at most `bytes` is to be written.
    pub(crate) fn index_started(&self, bytes: u64) {
        self.index_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.allocated();
    }

    /// The index counted by [`DiskDemand::index_started`] was written (or given up).
    pub(crate) fn index_done(&self, bytes: u64) {
        let _ = self
            .index_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
    }

    pub(crate) fn set_wake(&self, wake: Waker) {
        *self.wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(wake);
    }

    /// Something was (or is about to be) allocated: tells whoever watches.
    pub(crate) fn allocated(&self) {
        if let Some(wake) = &*self.wake.lock().unwrap_or_else(PoisonError::into_inner) {
            wake();
        }
    }

    /// Bytes about to be taken.
    pub fn bytes(&self) -> u64 {
        self.segment_bytes
            .load(Ordering::Relaxed)
            .saturating_add(
                self.checkpoint_bytes
                    .load(Ordering::Relaxed)
                    .max(self.reclaim_bytes.load(Ordering::Relaxed)),
            )
            .saturating_add(self.index_bytes.load(Ordering::Relaxed))
    }
}
