//! Where the broker task's time goes, as histograms for the metrics endpoint (issue 18): each
//! batch (drain, apply, log, seal and release), its size in messages, and the work a batch may
//! carry beyond its messages: starting a checkpoint (the broker's snapshot), paging bodies
//! out, and reading stored messages back. Measured with [`Stopwatch`] (monotonic, never the
//! injected clock: no rule depends on these).

use std::sync::Arc;

use wharf_base::{Histogram, HistogramSnapshot};
use wharf_broker::{Message, MessageLoader, PageOut, StoredAt, StoredMessage};
use wharf_clock::Stopwatch;

/// The broker task's histograms.
#[derive(Debug)]
pub(crate) struct CoreTimings {
    pub(crate) batch: Histogram,
    pub(crate) batch_messages: Histogram,
    pub(crate) checkpoint_start: Histogram,
    pub(crate) page_out: Histogram,
    /// Shared with the [`TimedLoader`] the broker reads stored messages through.
    pub(crate) read_back: Arc<Histogram>,
}

impl Default for CoreTimings {
    fn default() -> Self {
        CoreTimings {
            batch: Histogram::latency(),
            batch_messages: Histogram::counts(),
            checkpoint_start: Histogram::latency(),
            page_out: Histogram::latency(),
            read_back: Arc::new(Histogram::latency()),
        }
    }
}

/// A copy of [`CoreTimings`] for a scrape.
#[derive(Debug, Clone, Default)]
pub struct CoreTimingsSnapshot {
    /// Broker task batches, microseconds.
    pub batch: HistogramSnapshot,
    /// Messages (from connections, the timer, the management API) per batch.
    pub batch_messages: HistogramSnapshot,
    /// Starting a checkpoint on the broker task (snapshot included), microseconds.
    pub checkpoint_start: HistogramSnapshot,
    /// Page-outs that released something, microseconds.
    pub page_out: HistogramSnapshot,
    /// Stored messages read back on the broker task, microseconds.
    pub read_back: HistogramSnapshot,
}

impl CoreTimings {
    pub(crate) fn snapshot(&self) -> CoreTimingsSnapshot {
        CoreTimingsSnapshot {
            batch: self.batch.snapshot(),
            batch_messages: self.batch_messages.snapshot(),
            checkpoint_start: self.checkpoint_start.snapshot(),
            page_out: self.page_out.snapshot(),
            read_back: self.read_back.snapshot(),
        }
    }
}

/// The store's reader of stored messages, timed.
#[derive(Debug)]
pub(crate) struct TimedLoader {
    pub(crate) inner: Arc<dyn MessageLoader>,
    pub(crate) took: Arc<Histogram>,
}

impl MessageLoader for TimedLoader {
    fn load(&self, stored: &StoredMessage) -> Result<Message, String> {
        let started = Stopwatch::start();
        let loaded = self.inner.load(stored);
        self.took.record_duration(started.elapsed());
        loaded
    }

    fn pages(&self, slot: Option<(u64, StoredAt)>, durable_lsn: u64) -> PageOut {
        self.inner.pages(slot, durable_lsn)
    }
}
