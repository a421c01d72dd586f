//! The log's health as the server's resource monitor sees it: whether the writer is paused on
//! a full disk, a nudge to retry once space is back, and the disk space the store is about to
//! take ([`DiskDemand`], S-DISK-1). The monitor needs these things only, so it gets a handle
//! that offers them, not the WAL's `Appender` (which could append around the store).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use wharf_wal::Appender;

use crate::Store;

/// Disk space the store is about to take and that `statvfs` does not show yet (S-DISK-1): the
/// reservation of the log's next segment, and the checkpoint being written or waiting for
/// space. The resource monitor counts it as used, so the disk alarm goes on before the log
/// could run out of space.
#[derive(Default)]
pub struct DiskDemand {
    /// The next segment's reservation (the log's segment size).
    segment_bytes: AtomicU64,
    /// The checkpoint in flight, or deferred for want of space: its estimated size.
    checkpoint_bytes: AtomicU64,
    /// Called at each allocation (a segment roll, a checkpoint started or deferred), so the
    /// disk alarm is checked then and not only once a second (S-DISK-1).
    wake: Mutex<Option<Waker>>,
}

type Waker = Box<dyn Fn() + Send + Sync>;

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
            wake: Mutex::new(None),
        }
    }

    pub(crate) fn set_checkpoint(&self, bytes: u64) {
        let was = self.checkpoint_bytes.swap(bytes, Ordering::Relaxed);
        if bytes > was {
            self.allocated();
        }
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

    /// Sets what is called at each allocation of disk space by the store (a segment roll, a
    /// checkpoint started or deferred): the monitor checks the disk alarm then (S-DISK-1). It
    /// runs on the store's threads, so it must only signal (e.g. `try_send`).
    pub fn on_allocation(&self, wake: impl Fn() + Send + Sync + 'static) {
        *self
            .demand
            .wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(wake));
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
