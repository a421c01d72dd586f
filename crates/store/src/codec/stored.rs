//! Lazy decoding of message records whose content stays on disk (DESIGN "Memory"): the
//! stored form recovery applies, and the Message part found again and decoded whole when a
//! stored message is read back.

use std::sync::Arc;

use bytes::Bytes;

use super::carried::{CARRIED_KIND, skip_placements};
use super::cursor::Dec;
use super::cursor::Enc;
use super::error::DecodeError;
use super::error::EncodeError;
use super::kind::RecordKind;
use super::message::{get_message, get_stored_message, put_message};
use super::message_events::{get_dead_letter_head, get_published_head};
use wharf_broker::{Message, MessageId, StoredAt, StoredEvent};
use wharf_wal::le;

/// Decodes a `Published` or `DeadLettered` record as recovery applies it, the message's
/// content left on disk at `at` (the record's position); `Ok(None)` for every other kind
/// (decode those with [`decode`](super::decode)).
///
/// # Errors
/// As [`decode`](super::decode).
pub fn decode_stored(
    kind: u8,
    payload: &[u8],
    at: StoredAt,
) -> Result<Option<StoredEvent>, DecodeError> {
    let d = &mut Dec::new(payload, kind);
    let event = match RecordKind::from_byte(kind) {
        Some(RecordKind::Published) => {
            let vhost = d.name("vhost")?;
            let (scheduled, queues) = get_published_head(d)?;
            StoredEvent::Published {
                vhost,
                message: get_stored_message(d, at)?,
                queues,
                scheduled,
            }
        }
        Some(RecordKind::DeadLettered) => {
            let vhost = d.name("vhost")?;
            let (has_copy, from, id, targets) = get_dead_letter_head(d)?;
            let message = if has_copy {
                Some(get_stored_message(d, at)?)
            } else {
                None
            };
            StoredEvent::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            }
        }
        _ => return Ok(None),
    };
    d.finish()?;
    Ok(Some(event))
}

/// The Message part (storage-format.md, "Message") of a record that holds one: `Published`,
/// `Scheduled`, `DeadLettered` with its copy, `Copied`, or a checkpoint's `Carried`. It is always the
/// record's last field, so it runs to the end of the payload.
///
/// # Errors
/// The record holds no message or its fields before the message do not decode.
pub fn message_part(kind: u8, payload: &[u8]) -> Result<&[u8], DecodeError> {
    let d = &mut Dec::new(payload, kind);
    if kind == CARRIED_KIND {
        skip_placements(d)?;
    } else {
        match RecordKind::from_byte(kind) {
            Some(RecordKind::Published) => {
                d.name("vhost")?;
                get_published_head(d)?;
            }
            Some(RecordKind::Scheduled) => {
                d.name("vhost")?;
                d.name("exchange")?;
            }
            Some(RecordKind::Copied) => {
                d.name("vhost")?;
            }
            Some(RecordKind::DeadLettered) => {
                d.name("vhost")?;
                if !get_dead_letter_head(d)?.0 {
                    return Err(d.err("dead-lettering without a message copy"));
                }
            }
            _ => return Err(d.err("record kind holds no message")),
        }
    }
    Ok(payload.get(d.at..).unwrap_or_default())
}

/// The Message part of `message` (what [`decode_message_part`] reads): a message read back
/// from another log, carried into a checkpoint as the store's own stored ones are.
///
/// # Errors
/// [`EncodeError`] when a name does not fit the format.
pub fn encode_message_part(message: &Message) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(message.body.len() + 128);
    put_message(&mut Enc::new(&mut out), message)?;
    Ok(out)
}

/// The id at the start of a Message part, without decoding the rest.
pub fn message_part_id(part: &[u8]) -> Option<MessageId> {
    le::u64_at(part, 0).map(MessageId)
}

/// Decodes a whole Message part (from [`message_part`]).
///
/// # Errors
/// As [`decode`](super::decode); also bytes after the message.
pub fn decode_message_part(kind: u8, part: &[u8]) -> Result<Message, DecodeError> {
    decode_part_with(&mut Dec::new(part, kind))
}

/// As [`decode_message_part`], but the body is a slice of `part`, not a copy (a body read
/// back from disk is held once, S-BIG-3).
///
/// # Errors
/// As [`decode_message_part`].
pub fn decode_message_part_shared(kind: u8, part: &Bytes) -> Result<Message, DecodeError> {
    let mut d = Dec::new(part, kind);
    d.owner = Some(part);
    decode_part_with(&mut d)
}

fn decode_part_with(d: &mut Dec<'_>) -> Result<Message, DecodeError> {
    let message = get_message(d)?.message;
    d.finish()?;
    Ok(Arc::unwrap_or_clone(message))
}
