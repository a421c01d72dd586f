//! One log record as a whole: the format marker, and every event encoded or decoded by
//! dispatching on its kind to the definition or message event codecs. A decoded record must
//! use its whole payload: trailing bytes are damage.

use bytes::Bytes;

use super::cursor::{Dec, Enc};
use super::definitions::{get_definition, get_user_event, put_definition};
use super::error::{DecodeError, EncodeError};
use super::kind::{RecordKind, STORE_FORMAT_VERSION, StoreRecord};
use super::message::get_message;
use super::message_events::{get_message_event, put_message_event};
use wharf_broker::Event;
use wharf_wal::le;

/// Appends the payload of the format marker to `out`; returns its kind.
pub fn encode_format(out: &mut Vec<u8>) -> RecordKind {
    le::put_u16(out, STORE_FORMAT_VERSION);
    RecordKind::Format
}

/// Appends the payload of a `Copied` record (segment compaction, format 4) to `out`: the
/// vhost, then `part`, a message's encoded Message part copied as it is; returns its kind.
///
/// # Errors
/// [`EncodeError`] when the vhost name does not fit the format.
pub fn encode_copied(
    vhost: &str,
    part: &[u8],
    out: &mut Vec<u8>,
) -> Result<RecordKind, EncodeError> {
    let e = &mut Enc::new(out);
    e.name("vhost", vhost)?;
    e.out.extend_from_slice(part);
    Ok(RecordKind::Copied)
}

/// Appends the record payload of `event` to `out` and returns its kind. On error `out` may
/// hold a partial payload; the caller discards it.
///
/// # Errors
/// [`EncodeError`] when a field does not fit the format (see its variants).
pub fn encode_event(event: &Event, out: &mut Vec<u8>) -> Result<RecordKind, EncodeError> {
    encode_with(event, &mut Enc::new(out))
}

/// As [`encode_event`], but a message body (always the last field of its record) is not
/// copied into `out`: it is returned, to be appended after `out` as the rest of the payload
/// (empty for records without one). The bytes are the same (S-BIG-3).
///
/// # Errors
/// As [`encode_event`].
pub fn encode_event_leaving_body(
    event: &Event,
    out: &mut Vec<u8>,
) -> Result<(RecordKind, Bytes), EncodeError> {
    let e = &mut Enc::leaving_body(out);
    let kind = encode_with(event, e)?;
    Ok((kind, e.tail.take().unwrap_or_default()))
}

fn encode_with(event: &Event, e: &mut Enc<'_>) -> Result<RecordKind, EncodeError> {
    match event {
        Event::Published { .. }
        | Event::Scheduled { .. }
        | Event::Unscheduled { .. }
        | Event::DeadLettered { .. }
        | Event::Settled { .. }
        | Event::Delivered { .. }
        | Event::Returned { .. }
        | Event::Purged { .. }
        | Event::DeadLetterHeld { .. } => put_message_event(e, event)?,
        Event::VhostAdded { .. }
        | Event::VhostDeleted { .. }
        | Event::ExchangeDeclared { .. }
        | Event::ExchangeDeleted { .. }
        | Event::QueueDeclared { .. }
        | Event::QueueDeleted { .. }
        | Event::Bound { .. }
        | Event::Unbound { .. }
        | Event::PolicySet { .. }
        | Event::PolicyCleared { .. }
        | Event::UserPut { .. }
        | Event::UserDeleted { .. }
        | Event::PermissionSet { .. }
        | Event::PermissionCleared { .. }
        | Event::TopicPermissionSet { .. }
        | Event::TopicPermissionCleared { .. } => put_definition(e, event)?,
    }
    Ok(RecordKind::of(event))
}

/// Decodes one record payload of kind `kind`.
///
/// # Errors
/// [`DecodeError`] for an unknown kind, a short or over-long payload, a length or count
/// larger than the payload, invalid UTF-8, unknown enum values, reserved bits, nesting deeper
/// than `limits::FIELD_TABLE_DEPTH_MAX`, or a repeated table key. Never panics.
pub fn decode(kind: u8, payload: &[u8]) -> Result<StoreRecord, DecodeError> {
    decode_with(kind, payload, None)
}

/// As [`decode`], but message bodies are slices of `payload` (no copy): for readers that keep
/// many messages of a mapped log (the inspector). They keep the whole buffer alive, so recovery,
/// whose messages may outlive their segment file, uses [`decode`].
///
/// # Errors
/// As [`decode`].
pub fn decode_shared(kind: u8, payload: &Bytes) -> Result<StoreRecord, DecodeError> {
    decode_with(kind, payload, Some(payload))
}

fn decode_with(
    kind: u8,
    payload: &[u8],
    owner: Option<&Bytes>,
) -> Result<StoreRecord, DecodeError> {
    let d = &mut Dec {
        owner,
        buf: payload,
        at: 0,
        kind,
    };
    let Some(k) = RecordKind::from_byte(kind) else {
        return Err(d.err("unknown record kind"));
    };
    let record = match k {
        RecordKind::Format => StoreRecord::Format {
            version: d.u16("format version")?,
        },
        RecordKind::UserPut | RecordKind::UserDeleted => StoreRecord::Event(get_user_event(d, k)?),
        RecordKind::Copied => StoreRecord::Copied {
            vhost: d.name("vhost")?,
            message: get_message(d)?.message,
        },
        _ => StoreRecord::Event(get_event(d, k)?),
    };
    d.finish()?;
    Ok(record)
}

/// An event record that starts with its vhost: every kind but the format marker and users.
fn get_event(d: &mut Dec<'_>, k: RecordKind) -> Result<Event, DecodeError> {
    let vhost = d.name("vhost")?;
    match k {
        RecordKind::Format | RecordKind::UserPut | RecordKind::UserDeleted | RecordKind::Copied => {
            unreachable!("decode handles the format marker, user and copy records")
        }
        RecordKind::Published
        | RecordKind::Scheduled
        | RecordKind::Unscheduled
        | RecordKind::DeadLettered
        | RecordKind::Settled
        | RecordKind::Delivered
        | RecordKind::Returned
        | RecordKind::Purged
        | RecordKind::DeadLetterHeld => get_message_event(d, k, vhost),
        RecordKind::VhostAdded
        | RecordKind::VhostDeleted
        | RecordKind::ExchangeDeclared
        | RecordKind::ExchangeDeleted
        | RecordKind::QueueDeclared
        | RecordKind::QueueDeleted
        | RecordKind::Bound
        | RecordKind::Unbound
        | RecordKind::PolicySet
        | RecordKind::PolicyCleared
        | RecordKind::PermissionSet
        | RecordKind::PermissionCleared
        | RecordKind::TopicPermissionSet
        | RecordKind::TopicPermissionCleared => get_definition(d, k, vhost),
    }
}
