//! The log's health as the server's resource monitor sees it: whether the writer is paused on
//! a full disk, a nudge to retry once space is back, and the disk space the store is about to
//! take ([`DiskDemand`], S-DISK-1). The monitor needs these things only, so it gets a handle
//! that offers them, not the WAL's `Appender` (which could append around the store).

use std::sync::Arc;

use wharf_wal::Appender;

use crate::Store;
use crate::disk_demand::DiskDemand;

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
        self.demand.set_wake(Box::new(wake));
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
