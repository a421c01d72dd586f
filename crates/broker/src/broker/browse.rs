//! Browsing a queue without consuming it (S-UI-1, S-UI-2): a page of its ready messages in
//! delivery order, with what the queue knows of each (position, delivery count, deadline),
//! read back from the store when their content is on disk. A read-only query: it takes
//! `&self`, so nothing it does can change a delivery state.

use std::sync::Arc;

use super::Broker;
use crate::queue::{Entry, deadline_of};
use crate::types::{Message, MessageId, MessageRef};

/// One page of a queue's ready messages ([`Broker::browse`]).
#[derive(Debug, Clone)]
pub struct QueueBrowse {
    /// The queue's ready messages when the page was read.
    pub ready: u64,
    /// The messages from the requested offset on, in delivery order.
    pub messages: Vec<BrowsedMessage>,
}

/// A ready message as [`Broker::browse`] shows it.
#[derive(Debug, Clone)]
pub struct BrowsedMessage {
    /// Its place in the queue: 0 is the next to be delivered.
    pub position: u64,
    /// The broker's id for it (the timeline's message reference, S-UI-7).
    pub id: MessageId,
    /// Its content (read back from disk when paged out), or why it could not be read.
    pub content: Result<Arc<Message>, String>,
    /// Body length in bytes (known even when the content cannot be read).
    pub body_len: u64,
    /// When it entered the queue (ms since the epoch).
    pub enqueued_at_ms: u64,
    /// When it expires in this queue (S-TTL-3), if it has a TTL.
    pub deadline_ms: Option<u64>,
    /// Times it came back to the queue (`x-delivery-count`).
    pub delivery_count: u32,
    /// Whether its next delivery is flagged `redelivered`.
    pub redelivered: bool,
    /// Whether its content was on disk (paged out) rather than in memory.
    pub paged_out: bool,
}

impl Broker {
    /// Up to `count` ready messages of a queue from position `offset` on, in delivery order,
    /// without taking, locking or loading any of them into the queue (S-UI-1): paged-out
    /// content is read through the store's loader into the answer only (S-UI-2), for the
    /// page's messages only. The position is reached without walking the queue up to it
    /// (`Ready::iter_from`). `None` when there is no such queue.
    pub fn browse(
        &self,
        vhost: &str,
        queue: &str,
        offset: u64,
        count: usize,
    ) -> Option<QueueBrowse> {
        let q = self.queue_named(vhost, queue)?;
        let ttl = q.ready.ttl_ms();
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let messages = q
            .ready
            .iter_from(skip)
            .take(count)
            .zip(offset..)
            .map(|((m, e), position)| browsed(m, e, ttl, position, self.read(m)))
            .collect();
        Some(QueueBrowse {
            ready: u64::try_from(q.ready.len()).unwrap_or(u64::MAX),
            messages,
        })
    }
}

/// A ready message at `position` of a queue whose TTL is `ttl`, as browsing shows it, with
/// its `content` as read.
pub(super) fn browsed(
    m: &MessageRef,
    e: &Entry,
    ttl: Option<u32>,
    position: u64,
    content: Result<Arc<Message>, String>,
) -> BrowsedMessage {
    let (enqueued_at_ms, _) = m.timing();
    BrowsedMessage {
        position,
        id: m.id(),
        content,
        body_len: m.body_len(),
        enqueued_at_ms,
        deadline_ms: deadline_of(m, ttl),
        delivery_count: e.delivery_count,
        redelivered: e.redelivered,
        paged_out: matches!(m, MessageRef::Stored(_)),
    }
}
