//! The store's record kinds and format version, and [`StoreRecord`], what one log record
//! decodes to. The kind bytes and the version are part of the format (storage-format.md,
//! "Store records").

use wharf_broker::Event;

/// The store record format this build writes and the newest it reads. Written in a
/// [`RecordKind::Format`] record each time a store is opened; a log announcing a newer
/// version is refused rather than guessed at.
pub const STORE_FORMAT_VERSION: u16 = 4;

/// The WAL record kind of each store record (the frame's `kind` byte). Values are part of the
/// format: never reuse or renumber one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordKind {
    /// The store format version, written at every open.
    Format = 0x01,
    /// [`Event::VhostAdded`].
    VhostAdded = 0x10,
    /// [`Event::VhostDeleted`].
    VhostDeleted = 0x11,
    /// [`Event::ExchangeDeclared`].
    ExchangeDeclared = 0x12,
    /// [`Event::ExchangeDeleted`].
    ExchangeDeleted = 0x13,
    /// [`Event::QueueDeclared`].
    QueueDeclared = 0x14,
    /// [`Event::QueueDeleted`].
    QueueDeleted = 0x15,
    /// [`Event::Bound`].
    Bound = 0x16,
    /// [`Event::Unbound`].
    Unbound = 0x17,
    /// [`Event::PolicySet`].
    PolicySet = 0x18,
    /// [`Event::PolicyCleared`].
    PolicyCleared = 0x19,
    /// [`Event::UserPut`] (format 2).
    UserPut = 0x1A,
    /// [`Event::UserDeleted`] (format 2).
    UserDeleted = 0x1B,
    /// [`Event::PermissionSet`] (format 2).
    PermissionSet = 0x1C,
    /// [`Event::PermissionCleared`] (format 2).
    PermissionCleared = 0x1D,
    /// [`Event::TopicPermissionSet`] (format 3).
    TopicPermissionSet = 0x1E,
    /// [`Event::TopicPermissionCleared`] (format 3).
    TopicPermissionCleared = 0x1F,
    /// [`Event::Published`].
    Published = 0x20,
    /// [`Event::Scheduled`].
    Scheduled = 0x21,
    /// [`Event::Unscheduled`].
    Unscheduled = 0x22,
    /// [`Event::Settled`].
    Settled = 0x23,
    /// [`Event::Delivered`].
    Delivered = 0x24,
    /// [`Event::Returned`].
    Returned = 0x25,
    /// [`Event::DeadLettered`].
    DeadLettered = 0x26,
    /// [`Event::Purged`].
    Purged = 0x27,
    /// [`Event::DeadLetterHeld`] (format 4).
    DeadLetterHeld = 0x28,
    /// A live message copied forward by segment compaction (format 4): no event, replay
    /// skips it; a checkpoint refers to it (storage-format.md, "Checkpoints").
    Copied = 0x29,
}

impl RecordKind {
    /// Every kind, for tests and the inspector.
    pub const ALL: [RecordKind; 27] = [
        RecordKind::Format,
        RecordKind::VhostAdded,
        RecordKind::VhostDeleted,
        RecordKind::ExchangeDeclared,
        RecordKind::ExchangeDeleted,
        RecordKind::QueueDeclared,
        RecordKind::QueueDeleted,
        RecordKind::Bound,
        RecordKind::Unbound,
        RecordKind::PolicySet,
        RecordKind::PolicyCleared,
        RecordKind::UserPut,
        RecordKind::UserDeleted,
        RecordKind::PermissionSet,
        RecordKind::PermissionCleared,
        RecordKind::TopicPermissionSet,
        RecordKind::TopicPermissionCleared,
        RecordKind::Published,
        RecordKind::Scheduled,
        RecordKind::Unscheduled,
        RecordKind::Settled,
        RecordKind::Delivered,
        RecordKind::Returned,
        RecordKind::DeadLettered,
        RecordKind::Purged,
        RecordKind::DeadLetterHeld,
        RecordKind::Copied,
    ];

    /// The kind byte.
    pub fn byte(self) -> u8 {
        self as u8
    }

    /// The kind a byte names, if any.
    pub fn from_byte(byte: u8) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|k| k.byte() == byte)
    }

    /// The kind that records `event`.
    pub fn of(event: &Event) -> RecordKind {
        match event {
            Event::VhostAdded { .. } => RecordKind::VhostAdded,
            Event::VhostDeleted { .. } => RecordKind::VhostDeleted,
            Event::ExchangeDeclared { .. } => RecordKind::ExchangeDeclared,
            Event::ExchangeDeleted { .. } => RecordKind::ExchangeDeleted,
            Event::QueueDeclared { .. } => RecordKind::QueueDeclared,
            Event::QueueDeleted { .. } => RecordKind::QueueDeleted,
            Event::Bound { .. } => RecordKind::Bound,
            Event::Unbound { .. } => RecordKind::Unbound,
            Event::PolicySet { .. } => RecordKind::PolicySet,
            Event::PolicyCleared { .. } => RecordKind::PolicyCleared,
            Event::Published { .. } => RecordKind::Published,
            Event::Scheduled { .. } => RecordKind::Scheduled,
            Event::Unscheduled { .. } => RecordKind::Unscheduled,
            Event::Settled { .. } => RecordKind::Settled,
            Event::Delivered { .. } => RecordKind::Delivered,
            Event::Returned { .. } => RecordKind::Returned,
            Event::DeadLettered { .. } => RecordKind::DeadLettered,
            Event::Purged { .. } => RecordKind::Purged,
            Event::DeadLetterHeld { .. } => RecordKind::DeadLetterHeld,
            Event::UserPut { .. } => RecordKind::UserPut,
            Event::UserDeleted { .. } => RecordKind::UserDeleted,
            Event::PermissionSet { .. } => RecordKind::PermissionSet,
            Event::PermissionCleared { .. } => RecordKind::PermissionCleared,
            Event::TopicPermissionSet { .. } => RecordKind::TopicPermissionSet,
            Event::TopicPermissionCleared { .. } => RecordKind::TopicPermissionCleared,
        }
    }
}

/// One decoded store record.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreRecord {
    /// The format marker written at open.
    Format {
        /// The store format version of the records that follow.
        version: u16,
    },
    /// A broker event, for `Broker::apply`.
    Event(Event),
    /// A live message copied forward by segment compaction (format 4): nothing to apply.
    Copied {
        /// Its virtual host.
        vhost: String,
        /// The message, as it was published.
        message: std::sync::Arc<wharf_broker::Message>,
    },
}
