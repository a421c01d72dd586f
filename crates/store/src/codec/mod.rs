//! Broker events <-> write-ahead log records, by hand, byte for byte as `storage-format.md`
//! ("Store records") describes them. One WAL record kind per event type; every integer is
//! little-endian through the WAL's one helper (`wharf_wal::le`, STYLE 3.8). The decoder
//! distrusts every byte: each length is checked against what is left of the payload before
//! anything is allocated, nesting is bounded by `limits::FIELD_TABLE_DEPTH_MAX`, reserved bits
//! and trailing bytes are refused, and nothing panics (S-ERR-2).
//!
//! Pure functions over byte slices: no I/O, no state. Depends on the broker's event
//! vocabulary, `wharf_wal::le` and `limits`; must not depend on the WAL's files, `protocol` or
//! `server`.
//!
//! # Layout
//!
//! - `kind`: the record kinds, the format version, [`StoreRecord`].
//! - `error`: [`EncodeError`], [`DecodeError`].
//! - `cursor`: the byte cursors every field goes through (storage-format.md, "Primitives").
//! - `value`: field tables and values.
//! - `message`: the Message part: properties, fixed fields, body; whole or stored.
//! - `definitions`: vhost, exchange, queue, binding, policy, user, permission records.
//! - `message_events`: publish, schedule, dead-letter and a queue's id-list records.
//! - `record`: one whole record: [`encode_event`], [`decode`], the format marker.
//! - `carried`: the checkpoint-only [`Carried`] record.
//! - `referenced`: the checkpoint-only [`Referenced`] record (format 4).
//! - `stored`: lazy decoding of message records whose content stays on disk.
#![warn(clippy::indexing_slicing)]

mod carried;
mod cursor;
mod definitions;
mod error;
mod kind;
mod message;
mod message_events;
mod record;
mod referenced;
mod stored;
mod value;

pub use carried::{
    CARRIED_KIND, Carried, decode_carried, decode_carried_stored, encode_carried,
    encode_carried_leaving_body, encode_carried_part,
};
pub use error::{DecodeError, EncodeError};
pub use kind::{RecordKind, STORE_FORMAT_VERSION, StoreRecord};
pub use record::{
    decode, decode_shared, encode_copied, encode_event, encode_event_leaving_body, encode_format,
};
pub use referenced::{
    REFERENCED_KIND, ReferenceFields, Referenced, decode_referenced, encode_reference,
    encode_referenced,
};
pub use stored::{
    decode_message_part, decode_message_part_shared, decode_stored, encode_message_part,
    message_part, message_part_id,
};
