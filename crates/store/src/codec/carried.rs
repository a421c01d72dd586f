//! The checkpoint-only [`Carried`] record (storage-format.md, "Checkpoints"): one live
//! message with its placements in durable queues. Written from a message in memory or from an
//! already encoded Message part copied forward; read back whole or with the content left in
//! the checkpoint file.

use bytes::Bytes;
use std::sync::Arc;

use super::cursor::{Dec, Enc};
use super::error::{DecodeError, EncodeError};
use super::message::{get_message, get_stored_message, put_message};
use super::message_events::{death_reason_byte, death_reason_of};
use wharf_broker::{HeldDeath, Message, Placement, StoredAt, StoredMessage};

/// The kind byte of a [`Carried`] record. Checkpoint-only kinds live in `0x30..=0x3F`; they
/// never appear in the log, where [`decode`](super::decode) refuses them as unknown.
pub const CARRIED_KIND: u8 = 0x30;

const FLAG_REDELIVERED: u8 = 1 << 0;
/// Held to be dead-lettered (S-QQ-10, format 4): a reason `u8` and a time `u64` follow.
const FLAG_HELD: u8 = 1 << 1;

/// A placement is at least a `name` length, a count and a flags byte.
const PLACEMENT_BYTES_MIN: usize = size_of::<u16>() + size_of::<u32>() + 1;

/// One live persistent message as a checkpoint carries it: the message once, and each
/// durable queue it sits in with its marks there.
#[derive(Debug, Clone, PartialEq)]
pub struct Carried {
    /// Virtual host.
    pub vhost: String,
    /// Its queues, in the order written.
    pub placements: Vec<Placement>,
    /// The message.
    pub message: Arc<Message>,
}

/// Appends the payload of a [`Carried`] record to `out`.
///
/// # Errors
/// [`EncodeError`] when a name does not fit the format.
pub fn encode_carried(
    vhost: &str,
    placements: &[Placement],
    message: &Message,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let e = &mut Enc::new(out);
    put_placements(e, vhost, placements)?;
    put_message(e, message)
}

/// As [`encode_carried`], but the body (the last field) is not copied into `out`: it is
/// returned, to follow `out` in the record (S-BIG-3).
///
/// # Errors
/// As [`encode_carried`].
pub fn encode_carried_leaving_body(
    vhost: &str,
    placements: &[Placement],
    message: &Message,
    out: &mut Vec<u8>,
) -> Result<Bytes, EncodeError> {
    let e = &mut Enc::leaving_body(out);
    put_placements(e, vhost, placements)?;
    put_message(e, message)?;
    Ok(e.tail.take().unwrap_or_default())
}

/// Decodes the payload of a [`Carried`] record.
///
/// # Errors
/// [`DecodeError`] as for [`decode`](super::decode); also no placement at all.
pub fn decode_carried(payload: &[u8]) -> Result<Carried, DecodeError> {
    let d = &mut Dec::new(payload, CARRIED_KIND);
    let (vhost, placements) = get_placements(d)?;
    let message = get_message(d)?.message;
    d.finish()?;
    Ok(Carried {
        vhost,
        placements,
        message,
    })
}

/// Appends a [`Carried`] payload whose message is an already encoded Message part (a stored
/// message copied forward into a checkpoint without decoding it).
///
/// # Errors
/// [`EncodeError`] when a name does not fit the format.
pub fn encode_carried_part(
    vhost: &str,
    placements: &[Placement],
    part: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let e = &mut Enc::new(out);
    put_placements(e, vhost, placements)?;
    e.out.extend_from_slice(part);
    Ok(())
}

pub(super) fn put_placements(
    e: &mut Enc<'_>,
    vhost: &str,
    placements: &[Placement],
) -> Result<(), EncodeError> {
    e.name("vhost", vhost)?;
    e.count("placements", placements.len())?;
    for p in placements {
        e.name("queue", &p.queue)?;
        e.u32(p.delivery_count);
        let flags = if p.redelivered { FLAG_REDELIVERED } else { 0 }
            | if p.held.is_some() { FLAG_HELD } else { 0 };
        e.u8(flags);
        if let Some(death) = p.held {
            e.u8(death_reason_byte(death.reason));
            e.u64(death.at_ms);
        }
    }
    Ok(())
}

pub(super) fn get_placements(d: &mut Dec<'_>) -> Result<(String, Vec<Placement>), DecodeError> {
    let vhost = d.name("vhost")?;
    let n = d.count(PLACEMENT_BYTES_MIN, "placements")?;
    if n == 0 {
        return Err(d.err("carried message in no queue"));
    }
    let mut placements = Vec::with_capacity(n);
    for _ in 0..n {
        let queue = d.name("queue")?;
        let delivery_count = d.u32("delivery count")?;
        let flags = d.flags(FLAG_REDELIVERED | FLAG_HELD, "placement flags")?;
        placements.push(Placement {
            queue,
            delivery_count,
            redelivered: flags & FLAG_REDELIVERED != 0,
            held: get_held(d, flags)?,
        });
    }
    Ok((vhost, placements))
}

/// Decodes a [`Carried`] payload as recovery loads it: the message's content left in the
/// checkpoint at `at`.
///
/// # Errors
/// As [`decode_carried`].
pub fn decode_carried_stored(
    payload: &[u8],
    at: StoredAt,
) -> Result<(String, Vec<Placement>, StoredMessage), DecodeError> {
    let d = &mut Dec::new(payload, CARRIED_KIND);
    let (vhost, placements) = get_placements(d)?;
    let message = get_stored_message(d, at)?;
    d.finish()?;
    Ok((vhost, placements, message))
}

/// Steps over a [`Carried`] payload's vhost and placements, up to its Message part.
pub(super) fn skip_placements(d: &mut Dec<'_>) -> Result<(), DecodeError> {
    d.name("vhost")?;
    let n = d.count(PLACEMENT_BYTES_MIN, "placements")?;
    for _ in 0..n {
        d.name("queue")?;
        d.u32("delivery count")?;
        let flags = d.flags(FLAG_REDELIVERED | FLAG_HELD, "placement flags")?;
        get_held(d, flags)?;
    }
    Ok(())
}

/// A held placement's death (reason and time), when its flags say it has one.
fn get_held(d: &mut Dec<'_>, flags: u8) -> Result<Option<HeldDeath>, DecodeError> {
    if flags & FLAG_HELD == 0 {
        return Ok(None);
    }
    let reason = d.u8("death reason")?;
    let reason = death_reason_of(reason).ok_or_else(|| d.err("unknown death reason"))?;
    Ok(Some(HeldDeath {
        reason,
        at_ms: d.u64("death time")?,
    }))
}
