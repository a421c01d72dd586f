//! Logging: events appended as records without waiting, tickets, and waiting for them to be
//! durable (S-DUR-3, S-DUR-4).

use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::{Store, Ticket};
use crate::disk_demand::DiskDemand;
use crate::error::StoreError;
use crate::stored;
use wharf_broker::{Event, LoggedMessage, MessageLoader};
use wharf_wal::{Appender, Lsn, SyncSnapshot};

impl Store {
    /// Appends the records for `events` without waiting; returns the ticket of the last one,
    /// or `None` when there was nothing to log. Every event is encoded and checked first, so
    /// an event that cannot be logged leaves nothing of its batch in the log. An id-list
    /// event (settle, delivery, return, purge) longer than `limits::RECORD_IDS_MAX` is logged
    /// as several records of the same kind over consecutive parts of its ids, which replay
    /// applies to the same effect.
    ///
    /// For each message whose record it appended, pushes where it went onto `logged`: the
    /// caller hands that to the broker (`Broker::messages_logged`), which may then leave the
    /// message's content on disk once the record is durable. The store itself writes nothing
    /// into the broker's state.
    ///
    /// # Errors
    /// The log has failed (fail-stop), an event does not fit the format, or a record is too
    /// large (e.g. a message routed to so many long-named queues that its one record cannot
    /// hold them); nothing of the batch was appended then. Every error is fail-stop for the
    /// caller (see the module doc).
    pub fn log(
        &self,
        events: &[Event],
        logged: &mut Vec<LoggedMessage>,
    ) -> Result<Option<Ticket>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        let mut guard = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let scratch = &mut *guard;
        scratch.encode_batch(events)?;
        let mut start = 0;
        let mut ids_start = 0;
        let mut last = Lsn(0);
        let mut bytes = 0u64;
        let logged_before = logged.len();
        for (kind, end, body, message, ids_end) in scratch.records.drain(..) {
            let head = scratch.bytes.get(start..end).unwrap_or_default();
            let appended = self.appender.append_parts(kind, head, &body)?;
            last = appended.lsn;
            let ids = scratch.ids.get(ids_start..ids_end).unwrap_or_default();
            scratch.index.note(appended.position, last, kind, ids);
            ids_start = ids_end;
            let segment = appended.position.segment.0;
            if self.last_segment.fetch_max(segment, Ordering::Relaxed) < segment {
                // A roll: the next segment's reservation is due (S-DISK-1).
                self.demand.allocated();
            }
            // The broker may leave the message's content on disk once `last` is durable.
            if let Some(message) = message
                && let Some(at) = stored::pack_log(appended.position)
            {
                logged.push(LoggedMessage {
                    message,
                    lsn: last.0,
                    at,
                });
            }
            bytes += wharf_wal::frame_bytes(head.len() + body.len()) as u64;
            start = end;
        }
        self.last_lsn.store(last.0, Ordering::Release);
        self.logged_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.settled
            .fetch_add(settled_messages(events), Ordering::Relaxed);
        // Each message logged grows the next checkpoint (S-DISK-10).
        let messages = (logged.len() - logged_before) as u64;
        self.demand.messages_logged(
            messages * super::checkpoints::PER_MESSAGE_BYTES,
            self.segment_bytes / super::checkpoints::SPACE_STEP_DIVISOR,
        );
        Ok(Some(last.0))
    }

    /// Resolves once every record up to `ticket` is on stable storage (S-DUR-3). Ticket 0 is
    /// durable at once.
    ///
    /// # Errors
    /// The future's error is the log's latched failure (fail-stop) or its closing first.
    pub fn durable(
        &self,
        ticket: Ticket,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let durable = self.appender.durable(Lsn(ticket));
        async move { durable.await.map_err(StoreError::Wal) }
    }

    /// Blocks the calling thread until `ticket` is durable (for tools and tests without an
    /// executor).
    ///
    /// # Errors
    /// As [`Store::durable`].
    pub fn wait_durable(&self, ticket: Ticket) -> Result<(), StoreError> {
        Ok(self.appender.wait_durable(Lsn(ticket))?)
    }

    /// The log's sync latency and records-per-sync histograms (for metrics).
    pub fn sync_stats(&self) -> SyncSnapshot {
        self.appender.sync_stats()
    }

    /// The highest ticket known durable.
    pub fn durable_watermark(&self) -> Ticket {
        self.appender.durable_lsn().0
    }

    /// The failure the log latched, if any (fail-stop, STYLE 3.3): a write or sync failed,
    /// also one of a checkpoint's compaction copies, which go through the log.
    pub fn log_failure(&self) -> Option<StoreError> {
        self.appender.failure().map(StoreError::from)
    }

    /// The log's appender, for [`crate::LogHealth`] (the server's resource monitor gets that
    /// handle, not this one: nothing outside the store appends around it).
    pub(crate) fn wal_appender(&self) -> Appender {
        self.appender.clone()
    }

    /// Opens spools for large message bodies in the log's directory (S-BIG-3): a body read
    /// into a spool as it arrives and published is copied from there into its record, never
    /// held whole in memory.
    pub fn body_spooler(&self) -> wharf_wal::Spooler {
        self.appender.spooler()
    }

    /// What the store is about to take on disk, for [`crate::LogHealth`] (S-DISK-1).
    pub(crate) fn disk_demand(&self) -> Arc<DiskDemand> {
        Arc::clone(&self.demand)
    }

    /// The reader of stored messages, for a broker that logs to this store but was not
    /// recovered from it (`Store::open` hands it to the broker it returns).
    pub fn loader(&self) -> Arc<dyn MessageLoader> {
        Arc::clone(&self.reader) as Arc<dyn MessageLoader>
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        self.wal.dir()
    }
}

/// Messages `events` take out of their queues for good (acks, purges): what shrinks the next
/// checkpoint, so the space checks under pressure count them (S-DISK-3).
fn settled_messages(events: &[Event]) -> u64 {
    events
        .iter()
        .map(|e| match e {
            Event::Settled { ids, .. } | Event::Purged { ids, .. } => ids.len() as u64,
            _ => 0,
        })
        .sum()
}
