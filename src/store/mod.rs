//! The store: broker events <-> write-ahead log records, replay on start, checkpoints.
//! Depends on `broker` and `wal`; knows nothing of AMQP or tokio.
//!
//! # Contract with the server
//!
//! The broker task owns the [`Store`]. After each `broker.handle(..)` it passes the outcome's
//! events to [`Store::log`], which appends them without waiting and returns a ticket (the log
//! position of the last record). Publisher confirms, acks and declares that need durability wait
//! for [`Store::durable`] of that ticket (S-DUR-3, S-DUR-4); [`Store::durable_watermark`] is the
//! highest ticket known durable, so confirms can be released in bulk.
//!
//! FOUNDATION STUB: persists nothing yet (every ticket is durable at once). The store work
//! replaces the body; the signatures stay.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::broker::{Broker, Event};

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// Skip corrupt records in the middle of the log and report them, instead of refusing to
    /// start (S-DUR-7). Off by default.
    pub salvage: bool,
}

/// What recovery found, for the one summary line the server logs at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoverySummary {
    /// Log records replayed.
    pub records: u64,
    /// Bytes of a torn tail cut off the last segment (0 if none).
    pub torn_tail_bytes: u64,
    /// Corrupt records skipped in salvage mode.
    pub salvaged_records: u64,
}

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be used.
    #[error("data directory {path}: {source}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The log refused an append or failed to make it durable (fail-stop).
    #[error("write-ahead log failed: {0}")]
    Log(String),
}

/// A position in the log: records up to and including a ticket are durable once the watermark
/// reaches it. Tickets grow with every append.
pub type Ticket = u64;

/// The durable store of one broker.
#[derive(Debug)]
pub struct Store {
    next_ticket: AtomicU64,
    watermark: Arc<AtomicU64>,
}

impl Store {
    /// Opens (or creates) the store in `config.dir` and replays it into a fresh broker. The
    /// caller then runs `broker.recovered(now)` and logs its events before serving clients.
    ///
    /// # Errors
    /// The directory cannot be created or read; the log is corrupt (without `salvage`).
    pub fn open(config: &StoreConfig) -> Result<(Store, Broker, RecoverySummary), StoreError> {
        std::fs::create_dir_all(&config.dir).map_err(|source| StoreError::Io {
            path: config.dir.clone(),
            source,
        })?;
        let store = Store {
            next_ticket: AtomicU64::new(0),
            watermark: Arc::new(AtomicU64::new(0)),
        };
        Ok((store, Broker::new(), RecoverySummary::default()))
    }

    /// Appends the records for `events` without waiting; returns the ticket of the last one,
    /// or `None` when there was nothing to log.
    ///
    /// # Errors
    /// The log has failed (fail-stop) or a record is too large.
    pub fn log(&self, events: &[Event]) -> Result<Option<Ticket>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        let count = u64::try_from(events.len()).unwrap_or(u64::MAX);
        let ticket = self.next_ticket.fetch_add(count, Ordering::SeqCst) + count;
        self.watermark.fetch_max(ticket, Ordering::SeqCst);
        Ok(Some(ticket))
    }

    /// Resolves once every record up to `ticket` is on stable storage (S-DUR-3).
    pub fn durable(
        &self,
        ticket: Ticket,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let _ = ticket;
        std::future::ready(Ok(()))
    }

    /// The highest ticket known durable.
    pub fn durable_watermark(&self) -> Ticket {
        self.watermark.load(Ordering::SeqCst)
    }

    /// Drains what is pending, makes it durable and closes the log.
    ///
    /// # Errors
    /// The final sync failed.
    pub fn close(self) -> Result<(), StoreError> {
        Ok(())
    }
}
