//! The Message part (storage-format.md, "Properties", "Message"): a message's fixed fields,
//! names, properties and body. Decoded whole (a message in memory) or only checked and
//! measured (a stored message whose content stays on disk, DESIGN "Memory").

use std::sync::Arc;

use bytes::Bytes;

use super::cursor::{Dec, Enc};
use super::error::{DecodeError, EncodeError};
use super::value::{get_table, put_table};
use wharf_base::limits;
use wharf_broker::{Message, MessageId, MessageRecord, Properties, StoredAt, StoredMessage};

const FLAG_MESSAGE_TTL: u8 = 1 << 0;

// Property presence bits (storage-format.md, "Properties"), in AMQP's property order.
const PROP_CONTENT_TYPE: u16 = 1 << 0;
const PROP_CONTENT_ENCODING: u16 = 1 << 1;
const PROP_HEADERS: u16 = 1 << 2;
const PROP_DELIVERY_MODE: u16 = 1 << 3;
const PROP_PRIORITY: u16 = 1 << 4;
const PROP_CORRELATION_ID: u16 = 1 << 5;
const PROP_REPLY_TO: u16 = 1 << 6;
const PROP_EXPIRATION: u16 = 1 << 7;
const PROP_MESSAGE_ID: u16 = 1 << 8;
const PROP_TIMESTAMP: u16 = 1 << 9;
const PROP_TYPE: u16 = 1 << 10;
const PROP_USER_ID: u16 = 1 << 11;
const PROP_APP_ID: u16 = 1 << 12;
const PROP_CLUSTER_ID: u16 = 1 << 13;
const PROP_ALL: u16 = (1 << 14) - 1;

fn put_properties(e: &mut Enc<'_>, p: &Properties) -> Result<(), EncodeError> {
    let bit = |present: bool, b: u16| if present { b } else { 0 };
    let mask = bit(p.content_type.is_some(), PROP_CONTENT_TYPE)
        | bit(p.content_encoding.is_some(), PROP_CONTENT_ENCODING)
        | bit(p.headers.is_some(), PROP_HEADERS)
        | bit(p.delivery_mode.is_some(), PROP_DELIVERY_MODE)
        | bit(p.priority.is_some(), PROP_PRIORITY)
        | bit(p.correlation_id.is_some(), PROP_CORRELATION_ID)
        | bit(p.reply_to.is_some(), PROP_REPLY_TO)
        | bit(p.expiration.is_some(), PROP_EXPIRATION)
        | bit(p.message_id.is_some(), PROP_MESSAGE_ID)
        | bit(p.timestamp.is_some(), PROP_TIMESTAMP)
        | bit(p.kind.is_some(), PROP_TYPE)
        | bit(p.user_id.is_some(), PROP_USER_ID)
        | bit(p.app_id.is_some(), PROP_APP_ID)
        | bit(p.cluster_id.is_some(), PROP_CLUSTER_ID);
    e.u16(mask);
    put_opt_name(e, "content-type", p.content_type.as_ref())?;
    put_opt_name(e, "content-encoding", p.content_encoding.as_ref())?;
    if let Some(h) = &p.headers {
        put_table(e, h, 1)?;
    }
    if let Some(m) = p.delivery_mode {
        e.u8(m);
    }
    if let Some(pr) = p.priority {
        e.u8(pr);
    }
    put_opt_name(e, "correlation-id", p.correlation_id.as_ref())?;
    put_opt_name(e, "reply-to", p.reply_to.as_ref())?;
    put_opt_name(e, "expiration", p.expiration.as_ref())?;
    put_opt_name(e, "message-id", p.message_id.as_ref())?;
    if let Some(t) = p.timestamp {
        e.u64(t);
    }
    put_opt_name(e, "type", p.kind.as_ref())?;
    put_opt_name(e, "user-id", p.user_id.as_ref())?;
    put_opt_name(e, "app-id", p.app_id.as_ref())?;
    put_opt_name(e, "cluster-id", p.cluster_id.as_ref())?;
    Ok(())
}

/// An optional name property: present when its bit is set.
fn put_opt_name(
    e: &mut Enc<'_>,
    field: &'static str,
    s: Option<&String>,
) -> Result<(), EncodeError> {
    match s {
        Some(s) => e.name(field, s),
        None => Ok(()),
    }
}

fn get_opt_name(
    d: &mut Dec<'_>,
    mask: u16,
    bit: u16,
    what: &'static str,
) -> Result<Option<String>, DecodeError> {
    if mask & bit != 0 {
        d.name(what).map(Some)
    } else {
        Ok(None)
    }
}

/// Steps over encoded properties, checking their structure, without building them (recovery
/// of a message whose content stays on disk; the full decode when it is read back checks the
/// rest). Only a headers table is decoded, to find its end. Returns the `priority` property
/// (0 when absent), which a priority queue needs to file the message (S-PRIO-2).
fn skip_properties(d: &mut Dec<'_>) -> Result<u8, DecodeError> {
    let mask = d.u16("property mask")?;
    if mask & !PROP_ALL != 0 {
        return Err(d.err("reserved property bit set"));
    }
    let mut priority = 0;
    for bit in 0..14u16 {
        let b = 1 << bit;
        if mask & b == 0 {
            continue;
        }
        match b {
            PROP_HEADERS => {
                get_table(d, 1)?;
            }
            PROP_DELIVERY_MODE => {
                d.u8("property")?;
            }
            PROP_PRIORITY => priority = d.u8("priority")?,
            PROP_TIMESTAMP => {
                d.u64("timestamp")?;
            }
            _ => d.skip_name("property")?,
        }
    }
    Ok(priority)
}

fn get_properties(d: &mut Dec<'_>) -> Result<Properties, DecodeError> {
    let mask = d.u16("property mask")?;
    if mask & !PROP_ALL != 0 {
        return Err(d.err("reserved property bit set"));
    }
    let has = |b: u16| mask & b != 0;
    let name = |d: &mut Dec<'_>, b: u16, what| get_opt_name(d, mask, b, what);
    let content_type = name(d, PROP_CONTENT_TYPE, "content-type")?;
    let content_encoding = name(d, PROP_CONTENT_ENCODING, "content-encoding")?;
    let headers = if has(PROP_HEADERS) {
        Some(get_table(d, 1)?)
    } else {
        None
    };
    let delivery_mode = if has(PROP_DELIVERY_MODE) {
        Some(d.u8("delivery-mode")?)
    } else {
        None
    };
    let priority = if has(PROP_PRIORITY) {
        Some(d.u8("priority")?)
    } else {
        None
    };
    let correlation_id = name(d, PROP_CORRELATION_ID, "correlation-id")?;
    let reply_to = name(d, PROP_REPLY_TO, "reply-to")?;
    let expiration = name(d, PROP_EXPIRATION, "expiration")?;
    let message_id = name(d, PROP_MESSAGE_ID, "message-id")?;
    let timestamp = if has(PROP_TIMESTAMP) {
        Some(d.u64("timestamp")?)
    } else {
        None
    };
    Ok(Properties {
        content_type,
        content_encoding,
        headers,
        delivery_mode,
        priority,
        correlation_id,
        reply_to,
        expiration,
        message_id,
        timestamp,
        kind: name(d, PROP_TYPE, "type")?,
        user_id: name(d, PROP_USER_ID, "user-id")?,
        app_id: name(d, PROP_APP_ID, "app-id")?,
        cluster_id: name(d, PROP_CLUSTER_ID, "cluster-id")?,
    })
}

pub(super) fn put_message(e: &mut Enc<'_>, m: &Message) -> Result<(), EncodeError> {
    e.u64(m.id.0);
    e.u64(m.enqueued_at_ms);
    put_ttl(e, m.ttl_ms);
    e.name("exchange", &m.exchange)?;
    e.name("routing key", &m.routing_key)?;
    put_properties(e, &m.properties)?;
    e.body(&m.body)
}

/// A Message part's fixed fields: id, enqueue time, own TTL.
fn get_message_head(d: &mut Dec<'_>) -> Result<(MessageId, u64, Option<u32>), DecodeError> {
    let id = MessageId(d.u64("message id")?);
    let enqueued_at_ms = d.u64("enqueued at")?;
    let ttl_ms = get_ttl(d)?;
    Ok((id, enqueued_at_ms, ttl_ms))
}

/// A message's own TTL as the Message part (and a checkpoint's reference) holds it: a `flags`
/// byte whose bit 0 says a `u32` TTL follows.
pub(super) fn put_ttl(e: &mut Enc<'_>, ttl_ms: Option<u32>) {
    match ttl_ms {
        Some(ttl) => {
            e.u8(FLAG_MESSAGE_TTL);
            e.u32(ttl);
        }
        None => e.u8(0),
    }
}

/// Reads what [`put_ttl`] wrote.
pub(super) fn get_ttl(d: &mut Dec<'_>) -> Result<Option<u32>, DecodeError> {
    let flags = d.flags(FLAG_MESSAGE_TTL, "message flags")?;
    if flags & FLAG_MESSAGE_TTL == 0 {
        return Ok(None);
    }
    Ok(Some(d.u32("message ttl")?))
}

pub(super) fn get_message(d: &mut Dec<'_>) -> Result<MessageRecord, DecodeError> {
    let (id, enqueued_at_ms, ttl_ms) = get_message_head(d)?;
    let exchange = d.name("exchange")?;
    let routing_key = d.name("routing key")?;
    let properties = get_properties(d)?;
    let body = d.bytes32("body")?;
    if body.len() > limits::MESSAGE_BODY_BYTES_MAX as usize {
        return Err(d.err("body over limits::MESSAGE_BODY_BYTES_MAX"));
    }
    Ok(MessageRecord {
        message: Arc::new(Message {
            id,
            enqueued_at_ms,
            ttl_ms,
            exchange,
            routing_key,
            properties,
            body: match d.owner {
                Some(owner) => owner.slice_ref(body),
                None => Bytes::copy_from_slice(body),
            },
            stored: wharf_broker::StoredSlot::default(),
        }),
    })
}

/// Reads a message's fixed fields and checks the rest of it (names, properties, body length)
/// without keeping the content: what memory holds of a message whose body stays on disk.
pub(super) fn get_stored_message(
    d: &mut Dec<'_>,
    at: StoredAt,
) -> Result<StoredMessage, DecodeError> {
    let (id, enqueued_at_ms, ttl_ms) = get_message_head(d)?;
    d.skip_name("exchange")?;
    d.skip_name("routing key")?;
    let priority = skip_properties(d)?;
    let body = d.bytes32("body")?;
    if body.len() > limits::MESSAGE_BODY_BYTES_MAX as usize {
        return Err(d.err("body over limits::MESSAGE_BODY_BYTES_MAX"));
    }
    Ok(StoredMessage {
        id,
        enqueued_at_ms,
        ttl_ms,
        body_len: u32::try_from(body.len()).unwrap_or(u32::MAX),
        priority,
        at,
    })
}
