//! Messages as the broker holds them: [`Properties`], [`Message`] (shared once by every queue
//! it entered), the [`StoredMessage`] reference that stands for one whose content is left on
//! disk, [`MessageRef`] (either) and the [`MessageLoader`] that reads stored ones back.

use std::sync::Arc;

use bytes::Bytes;

use super::ids::MessageId;
use crate::value::FieldTable;

/// The 14 properties of AMQP 0-9-1's `basic` class.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    /// `content-type`.
    pub content_type: Option<String>,
    /// `content-encoding`.
    pub content_encoding: Option<String>,
    /// `headers`.
    pub headers: Option<FieldTable>,
    /// `delivery-mode`: 2 = persistent (S-DUR-2), anything else transient.
    pub delivery_mode: Option<u8>,
    /// `priority`: its place in a priority queue (S-PRIO-2; none counts as 0).
    pub priority: Option<u8>,
    /// `correlation-id`.
    pub correlation_id: Option<String>,
    /// `reply-to`.
    pub reply_to: Option<String>,
    /// `expiration`: the per-message TTL as a decimal string of milliseconds (S-TTL-2).
    pub expiration: Option<String>,
    /// `message-id`.
    pub message_id: Option<String>,
    /// `timestamp`: seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    /// `type`.
    pub kind: Option<String>,
    /// `user-id`.
    pub user_id: Option<String>,
    /// `app-id`.
    pub app_id: Option<String>,
    /// `cluster-id`.
    pub cluster_id: Option<String>,
}

impl Properties {
    /// True when `delivery-mode` is 2.
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(2)
    }
}

/// A message as the broker holds it: stored once and shared (`Arc`) by every queue it entered.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The broker's id for it.
    pub id: MessageId,
    /// When it entered its queues (ms since the epoch); for a scheduled message the scheduled
    /// time (S-TTL-4). The same for every queue, since routing is one step.
    pub enqueued_at_ms: u64,
    /// Its own TTL parsed from `expiration` (S-TTL-2), if any.
    pub ttl_ms: Option<u32>,
    /// The exchange it was published to (for a dead-lettered copy: the dead-letter exchange).
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its properties.
    pub properties: Properties,
    /// Its body.
    pub body: Bytes,
    /// Where the store wrote its record, once it did (the store reports it and the broker
    /// records it: [`crate::Broker::messages_logged`]): lets the broker drop the content from
    /// memory and read it back later (DESIGN "Memory"). A new message starts with
    /// `StoredSlot::default()`; one decoded from a record already on disk with
    /// [`StoredSlot::written`].
    pub stored: StoredSlot,
}

impl Message {
    /// True when `delivery-mode` is 2.
    pub fn is_persistent(&self) -> bool {
        self.properties.is_persistent()
    }

    /// Its body length.
    pub fn body_len(&self) -> u32 {
        u32::try_from(self.body.len()).unwrap_or(u32::MAX)
    }

    /// Records where the store wrote this message's record: the record's Lsn (durable once
    /// the log's watermark reaches it) and the store's opaque position of it. Only the broker
    /// writes it, from what the store reported ([`crate::Broker::messages_logged`]); a second
    /// call keeps the first. The slot lives in the shared message, so every queue and
    /// delivery holding it sees it at once, for the price of one write and no lookup.
    pub(crate) fn set_stored(&self, lsn: u64, at: StoredAt) {
        let _ = self.stored.0.set((lsn, at));
    }

    /// The reference that stands for it once its content is left on disk: `None` until the
    /// store has written its record.
    pub fn stored_ref(&self) -> Option<(u64, StoredMessage)> {
        let &(lsn, at) = self.stored.0.get()?;
        Some((lsn, self.stored_as(at)))
    }

    /// Where a log wrote it, if one did: its record's Lsn and position.
    pub fn slot(&self) -> Option<(u64, StoredAt)> {
        self.stored.0.get().copied()
    }

    /// Records where a log that is not the store's wrote it (a replicated group's, whose
    /// positions set [`GROUP_LOG_BIT`]); a second call keeps the first, as for the store's.
    pub fn set_group_stored(&self, lsn: u64, at: StoredAt) {
        debug_assert!(
            at & GROUP_LOG_BIT != 0,
            "a group's position sets GROUP_LOG_BIT"
        );
        let _ = self.stored.0.set((lsn, at));
    }

    /// The reference that stands for it with its content at `at`.
    fn stored_as(&self, at: StoredAt) -> StoredMessage {
        StoredMessage {
            id: self.id,
            enqueued_at_ms: self.enqueued_at_ms,
            ttl_ms: self.ttl_ms,
            body_len: self.body_len(),
            priority: self.properties.priority.unwrap_or(0),
            at,
        }
    }
}

/// Where a message's record is, once written: the record's Lsn (durable once the log's
/// watermark reaches it) and the store's opaque position of it. Set once, by the broker from
/// what the store reported, or when a message is decoded from a record on disk
/// ([`StoredSlot::written`]); opaque otherwise. Not part of the
/// message's value: a clone starts empty (a copy with another id is another message) and
/// equality ignores it.
#[derive(Debug, Default)]
pub struct StoredSlot(std::sync::OnceLock<(u64, StoredAt)>);

impl StoredSlot {
    /// The slot of a message decoded from a record the store knows the position of (read
    /// back from disk: durable already, Lsn 0), so that it may be left on disk again.
    pub fn written(lsn: u64, at: StoredAt) -> Self {
        let slot = Self::default();
        let _ = slot.0.set((lsn, at));
        slot
    }
}

/// What the store reports for each message whose record it appended (`Store::log`): the
/// message, its record's Lsn and the store's position of it, for
/// [`crate::Broker::messages_logged`].
#[derive(Debug, Clone)]
pub struct LoggedMessage {
    /// The message the record holds.
    pub message: std::sync::Arc<Message>,
    /// The record's Lsn.
    pub lsn: u64,
    /// The store's position of the record.
    pub at: StoredAt,
}

impl Clone for StoredSlot {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for StoredSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A position in the store, opaque to the broker: the store packs a file and an offset into it.
pub type StoredAt = u64;

/// A persistent message whose content (exchange, routing key, properties, body) is on disk:
/// what memory holds of it (40 bytes), enough for queue order (its priority included),
/// deadlines and byte counts.
/// Every stored message is persistent (only persistent messages are logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its id.
    pub id: MessageId,
    /// Enqueue time (ms since the epoch).
    pub enqueued_at_ms: u64,
    /// Its own TTL.
    pub ttl_ms: Option<u32>,
    /// Body length in bytes.
    pub body_len: u32,
    /// Its `priority` property, 0 when it has none (S-PRIO-2): a priority queue files it by
    /// this without reading it back.
    pub priority: u8,
    /// Where its record is.
    pub at: StoredAt,
}

/// A queued message: in memory, or on disk with a small reference in memory.
#[derive(Debug, Clone)]
pub enum MessageRef {
    /// Content in memory, shared by every queue it is in.
    Loaded(Arc<Message>),
    /// Content on disk (read back through the broker's [`MessageLoader`]).
    Stored(StoredMessage),
}

impl MessageRef {
    /// Its id.
    pub fn id(&self) -> MessageId {
        match self {
            MessageRef::Loaded(m) => m.id,
            MessageRef::Stored(s) => s.id,
        }
    }

    /// Persistent (every stored message is).
    pub fn is_persistent(&self) -> bool {
        match self {
            MessageRef::Loaded(m) => m.is_persistent(),
            MessageRef::Stored(_) => true,
        }
    }

    /// Body length in bytes.
    pub fn body_len(&self) -> u64 {
        u64::from(match self {
            MessageRef::Loaded(m) => m.body_len(),
            MessageRef::Stored(s) => s.body_len,
        })
    }

    /// Its `priority` property, 0 when it has none (S-PRIO-2).
    pub fn priority(&self) -> u8 {
        match self {
            MessageRef::Loaded(m) => m.properties.priority.unwrap_or(0),
            MessageRef::Stored(s) => s.priority,
        }
    }

    /// Enqueue time and own TTL: what its deadline is derived from.
    pub fn timing(&self) -> (u64, Option<u32>) {
        match self {
            MessageRef::Loaded(m) => (m.enqueued_at_ms, m.ttl_ms),
            MessageRef::Stored(s) => (s.enqueued_at_ms, s.ttl_ms),
        }
    }
}

/// Reads a stored message's content back (the store implements it and hands one to the
/// broker; the broker stays free of files).
pub trait MessageLoader: Send + Sync + std::fmt::Debug {
    /// The whole message `stored` stands for.
    ///
    /// # Errors
    /// The record cannot be read or is damaged (the caller stops: S-DUR-7).
    fn load(&self, stored: &StoredMessage) -> Result<Message, String>;

    /// What a page-out does with a message in memory whose slot is `slot` (where a log wrote
    /// it, if one did: its record's Lsn and position), its log durable through `durable_lsn`.
    /// A message is left on disk only where this loader reads it back. The default is the
    /// store's: its log writes messages in queue order, so a message not yet written, or not
    /// yet durable, stops the page-out of its lane (those after it are not either); a
    /// position in a replicated group's log ([`GROUP_LOG_BIT`]) is not the store's to read.
    fn pages(&self, slot: Option<(u64, StoredAt)>, durable_lsn: u64) -> PageOut {
        store_pages(slot, durable_lsn)
    }
}

/// The store's rule for [`MessageLoader::pages`].
pub fn store_pages(slot: Option<(u64, StoredAt)>, durable_lsn: u64) -> PageOut {
    match slot {
        None => PageOut::Stop,
        Some((_, at)) if at & GROUP_LOG_BIT != 0 => PageOut::Skip,
        Some((lsn, _)) if lsn > durable_lsn => PageOut::Stop,
        Some(_) => PageOut::Page,
    }
}

/// What [`MessageLoader::pages`] decides for one message in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageOut {
    /// Leave its content on disk.
    Page,
    /// Keep it in memory, and go on with the next.
    Skip,
    /// Keep it, and the rest of its lane, in memory for now.
    Stop,
}

/// Set in a [`StoredAt`] written by a replicated group's log (`wharf_cluster`), clear in one of
/// the store's: a message routed to a classic and a quorum queue is one message, whose slot
/// either log may fill, and each reads back only its own.
pub const GROUP_LOG_BIT: u64 = 1 << 62;

/// The store's rule for the size of the one log record that holds a published message (the
/// store implements it next to its encoder and hands one to the broker with
/// `Broker::set_record_size`), so that a persistent message whose record could not fit the log
/// is refused before it changes anything (S-DUR-3).
pub trait RecordSize: Send + Sync + std::fmt::Debug {
    /// Can one log record hold `message`, published in `vhost`, entering the logged queues
    /// named by `queues`?
    fn message_fits(
        &self,
        vhost: &str,
        message: &Message,
        queues: &mut dyn Iterator<Item = &str>,
    ) -> bool;
}
