//! The log's health as the server's resource monitor sees it: whether the writer is paused on
//! a full disk, a nudge to retry once space is back, and the disk space the store is about to
//! take ([`DiskDemand`], S-DISK-1). The monitor needs these things only, so it gets a handle
//! that offers them, not the WAL's `Appender` (which could append around the store).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wharf_wal::Appender;

use crate::Store;

/// Disk space the store is about to take and that `statvfs` does not show yet (S-DISK-1): the
/// reservation of the log's next segment, and the checkpoint being written or waiting for
/// space. The resource monitor counts it as used, so the disk alarm goes on before the log
/// could run out of space.
#[derive(Debug, Default)]
pub struct DiskDemand {
    /// The next segment's reservation (the log's segment size).
    segment_bytes: AtomicU64,
    /// The checkpoint in flight, or deferred for want of space: its estimated size.
    checkpoint_bytes: AtomicU64,
}

impl DiskDemand {
    pub(crate) fn new(segment_bytes: u64) -> DiskDemand {
        DiskDemand {
            segment_bytes: AtomicU64::new(segment_bytes),
            checkpoint_bytes: AtomicU64::new(0),
        }
    }

    pub(crate) fn set_checkpoint(&self, bytes: u64) {
        self.checkpoint_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Bytes about to be taken.
    pub fn bytes(&self) -> u64 {
        self.segment_bytes
            .load(Ordering::Relaxed)
            .saturating_add(self.checkpoint_bytes.load(Ordering::Relaxed))
    }
}

/// A handle on the store's log for the resource monitor (cheap to clone; shares the log).
#[derive(Debug, Clone)]
pub struct LogHealth {
    appender: Appender,
    demand: Arc<DiskDemand>,
}

impl LogHealth {
    /// The handle of `store`'s log.
    #[must_use]
    pub fn of(store: &Store) -> Self {
        LogHealth {
            appender: store.wal_appender(),
            demand: store.disk_demand(),
        }
    }

    /// True while the log's writer is paused because the disk is full.
    #[must_use]
    pub fn disk_full(&self) -> bool {
        self.appender.disk_full()
    }

    /// Asks a writer paused on a full disk to retry now instead of at the end of its retry
    /// period; does nothing otherwise.
    pub fn retry_now(&self) {
        self.appender.retry_now();
    }

    /// Disk bytes the store is about to take (S-DISK-1, see [`DiskDemand`]).
    #[must_use]
    pub fn demand_bytes(&self) -> u64 {
        self.demand.bytes()
    }
}

impl From<Appender> for LogHealth {
    /// The handle of a bare log (tests of the monitor that run a WAL without a store): it
    /// demands nothing ahead.
    fn from(appender: Appender) -> Self {
        LogHealth {
            appender,
            demand: Arc::new(DiskDemand::default()),
        }
    }
}
