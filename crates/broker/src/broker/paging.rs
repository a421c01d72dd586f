//! Paging (DESIGN "Memory"): the content of durable queued messages beyond a memory budget
//! is left on disk as stored references, and read back through the store's
//! [`MessageLoader`] when a message is delivered or dead-lettered; a failure to read is kept
//! for the server, which stops (S-DUR-7).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Broker;
use crate::types::{LoggedMessage, Message, MessageLoader, MessageRef};

impl Broker {
    /// Hands the broker the store's reader of stored messages (before `recovered`, which may
    /// dead-letter stored messages).
    pub fn set_loader(&mut self, loader: Arc<dyn MessageLoader>) {
        self.loader = Some(loader);
    }

    /// The reader of stored messages set by [`Broker::set_loader`], if any (so a server can
    /// wrap it, to time it).
    pub fn loader(&self) -> Option<Arc<dyn MessageLoader>> {
        self.loader.clone()
    }

    /// Records where the store wrote the records of the messages it just logged (what
    /// `Store::log` reported): once a record's Lsn is durable, [`Broker::page_out`] may leave
    /// that message's content on disk.
    pub fn messages_logged(&mut self, logged: &[LoggedMessage]) {
        for l in logged {
            l.message.set_stored(l.lsn, l.at);
        }
    }

    /// The first failure to read a stored message back, if any: the store is damaged and the
    /// server must stop (S-DUR-7). Nothing about that message was logged.
    pub fn storage_failure(&self) -> Option<&str> {
        self.storage_failure.as_deref()
    }

    /// Memory the content of queued messages held in memory takes (bodies plus about 512
    /// bytes each), over every queue.
    pub fn loaded_bytes(&self) -> u64 {
        self.loaded_total.load(Ordering::Relaxed)
    }

    /// Keeps memory bounded (DESIGN "Memory"): when the content of queued messages in memory
    /// exceeds `budget` bytes, the oldest whose record is durable (Lsn at most `durable_lsn`)
    /// in logged queues are replaced by stored references until a quarter of the budget is
    /// free again. Returns the body bytes released from the queues (a message still held
    /// elsewhere, unacked or in another queue, is freed when the last holder lets go).
    pub fn page_out(&mut self, durable_lsn: u64, budget: u64) -> u64 {
        let loaded = self.loaded_bytes();
        if loaded <= budget {
            return 0;
        }
        let mut want = loaded - budget / 4 * 3;
        let mut freed = 0;
        for q in self.queues.values_mut().filter(|q| q.logged()) {
            if want == 0 {
                break;
            }
            let got = q.ready.page_out(durable_lsn, want);
            want = want.saturating_sub(got);
            freed += got;
        }
        freed
    }

    /// The content of `m`: shared when in memory, else read back through the loader. A
    /// message that cannot be read back is a damaged store: the failure is kept for the
    /// server, which stops (S-DUR-7), and `None` is returned (the message stays in the log).
    pub(super) fn loaded(&mut self, m: &MessageRef) -> Option<Arc<Message>> {
        match self.read(m) {
            Ok(msg) => Some(msg),
            Err(e) => {
                self.storage_failure.get_or_insert(e);
                None
            }
        }
    }

    /// The content of `m`, read back through the loader when stored.
    pub(super) fn read(&self, m: &MessageRef) -> Result<Arc<Message>, String> {
        let s = match m {
            MessageRef::Loaded(m) => return Ok(Arc::clone(m)),
            MessageRef::Stored(s) => s,
        };
        let loader = self.loader.as_ref().ok_or("no store to read it from")?;
        loader
            .load(s)
            .map(Arc::new)
            .map_err(|e| format!("stored message {} unreadable: {e}", s.id.0))
    }
}
