//! The checkpoint-only [`Referenced`] record (format 4, storage-format.md, "Checkpoints"): one
//! live message with its placements in durable queues, and where its record already is in
//! the log, instead of the message itself. What memory holds of a stored message (id,
//! enqueue time, own TTL, priority, body length) is in it, so recovery restores the message
//! without reading the log.

use super::carried::{get_placements, put_placements};
use super::cursor::{Dec, Enc};
use super::error::{DecodeError, EncodeError};
use super::message::{get_ttl, put_ttl};
use wharf_broker::{MessageId, Placement};

/// The kind byte of a [`Referenced`] record (checkpoint-only, `0x30..=0x3F`).
pub const REFERENCED_KIND: u8 = 0x31;

/// One live persistent message as a checkpoint refers to it: its queues with their marks,
/// what memory holds of it, and the position of the log record holding its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referenced {
    /// Virtual host.
    pub vhost: String,
    /// Its queues, in the order written.
    pub placements: Vec<Placement>,
    /// The message's fields and where its record is.
    pub message: ReferenceFields,
}

/// The fixed fields of a [`Referenced`] record, to encode one from borrowed placements (a
/// checkpoint writes millions: no allocation per message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceFields {
    /// Its id.
    pub id: MessageId,
    /// Enqueue time (ms since the epoch).
    pub enqueued_at_ms: u64,
    /// Its own TTL.
    pub ttl_ms: Option<u32>,
    /// Its `priority` property (0 when none).
    pub priority: u8,
    /// Body length in bytes.
    pub body_len: u32,
    /// The log segment holding its record.
    pub segment: u64,
    /// The offset of that record's frame in the segment.
    pub offset: u64,
}

/// Appends the payload of a [`Referenced`] record to `out`.
///
/// # Errors
/// [`EncodeError`] when a name does not fit the format.
pub fn encode_referenced(r: &Referenced, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    encode_reference(&r.vhost, &r.placements, &r.message, out)
}

/// Appends the payload of a [`Referenced`] record made of `vhost`, `placements` and `f`.
///
/// # Errors
/// [`EncodeError`] when a name does not fit the format.
pub fn encode_reference(
    vhost: &str,
    placements: &[Placement],
    f: &ReferenceFields,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let e = &mut Enc::new(out);
    put_placements(e, vhost, placements)?;
    e.u64(f.id.0);
    e.u64(f.enqueued_at_ms);
    put_ttl(e, f.ttl_ms);
    e.u8(f.priority);
    e.u32(f.body_len);
    e.u64(f.segment);
    e.u64(f.offset);
    Ok(())
}

/// Decodes the payload of a [`Referenced`] record.
///
/// # Errors
/// [`DecodeError`] as for [`decode`](super::decode); also no placement at all.
pub fn decode_referenced(payload: &[u8]) -> Result<Referenced, DecodeError> {
    let d = &mut Dec::new(payload, REFERENCED_KIND);
    let (vhost, placements) = get_placements(d)?;
    let id = MessageId(d.u64("message id")?);
    let enqueued_at_ms = d.u64("enqueued at")?;
    let ttl_ms = get_ttl(d)?;
    let priority = d.u8("priority")?;
    let body_len = d.u32("body length")?;
    if body_len > wharf_base::limits::MESSAGE_BODY_BYTES_MAX {
        return Err(d.err("body over limits::MESSAGE_BODY_BYTES_MAX"));
    }
    let segment = d.u64("segment")?;
    let offset = d.u64("offset")?;
    d.finish()?;
    Ok(Referenced {
        vhost,
        placements,
        message: ReferenceFields {
            id,
            enqueued_at_ms,
            ttl_ms,
            priority,
            body_len,
            segment,
            offset,
        },
    })
}
