//! The log's health as the server's resource monitor sees it: whether the writer is paused on
//! a full disk, and a nudge to retry once space is back. The monitor needs these two things
//! only, so it gets a handle that offers them, not the WAL's `Appender` (which could append
//! around the store).

use wharf_wal::Appender;

use crate::Store;

/// A handle on the store's log for the resource monitor (cheap to clone; shares the log).
#[derive(Debug, Clone)]
pub struct LogHealth(Appender);

impl LogHealth {
    /// The handle of `store`'s log.
    #[must_use]
    pub fn of(store: &Store) -> Self {
        LogHealth(store.wal_appender())
    }

    /// True while the log's writer is paused because the disk is full.
    #[must_use]
    pub fn disk_full(&self) -> bool {
        self.0.disk_full()
    }

    /// Asks a writer paused on a full disk to retry now instead of at the end of its retry
    /// period; does nothing otherwise.
    pub fn retry_now(&self) {
        self.0.retry_now();
    }
}

impl From<Appender> for LogHealth {
    /// The handle of a bare log (tests of the monitor that run a WAL without a store).
    fn from(appender: Appender) -> Self {
        LogHealth(appender)
    }
}
