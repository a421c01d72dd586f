//! Frame decoding: bytes from the socket's read buffer to typed [`Frame`]s, and the protocol
//! header that opens a connection. Limits are enforced before anything is buffered or parsed:
//! the 7-octet frame header's size is checked against `frame_max` before the payload is waited
//! for, field-table nesting is checked (non-recursively) before any recursive parser runs.
//! Methods are parsed by amq-protocol, except `basic.publish`; content headers and standalone
//! tables by `properties`. "Not enough bytes yet" is `Ok(None)`, never an error. No tokio, no
//! broker.

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::{AMQPClass, basic, parse_class};
use amq_protocol::types::{FieldTable, ShortString};
use bytes::{Buf, Bytes, BytesMut};
use nom_free::all_consuming_ok;

use super::error::ProtocolError;
use super::properties;
use super::table_scan::{self, Depth};
use wharf_base::limits;

/// Frame type octet of a method frame.
pub const FRAME_METHOD: u8 = 1;
/// Frame type octet of a content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Frame type octet of a content body frame.
pub const FRAME_BODY: u8 = 3;
/// Frame type octet of a heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The octet that ends every frame.
pub const FRAME_END: u8 = 0xCE;
/// Octets of the frame header: type (1), channel (2), payload size (4).
pub const FRAME_HEADER_BYTES: usize = 1 + 2 + 4;
/// Octets a frame adds around its payload: the header and the frame-end octet. A body frame
/// carries at most `frame_max - FRAME_OVERHEAD_BYTES` octets of body.
pub const FRAME_OVERHEAD_BYTES: usize = FRAME_HEADER_BYTES + 1;

/// A body frame payload at least this large is kept as a slice of the read buffer (no copy);
/// smaller ones are copied out. Copying 4 KiB costs ~100 ns; pinning costs up to `frame_max`
/// of buffer per queued message.
pub const BODY_ZERO_COPY_BYTES_MIN: usize = 4096;

/// The AMQP 0-9-1 protocol header a client sends first, and the one we answer a refused
/// header with (spec section 4.2.2).
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";
/// The AMQP 0-9 header, which RabbitMQ accepts and treats as 0-9-1 (`rabbit_reader`'s
/// `version_negotiation({1, 1, 0, 9}, ...)`); some old clients still send it.
pub const PROTOCOL_HEADER_0_9: [u8; 8] = *b"AMQP\x01\x01\x00\x09";

/// A channel number. Channel 0 is the connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ChannelId(pub u16);

impl ChannelId {
    /// The connection's own channel.
    pub const CONNECTION: ChannelId = ChannelId(0);
}

impl std::fmt::Display for ChannelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One decoded frame. Invariants established by [`decode`]: `Header` and `Body` frames are
/// never on channel 0; a heartbeat is always on channel 0 and has no channel field.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A method frame.
    Method(ChannelId, AMQPClass),
    /// A content header frame: class id, body size and the basic properties. Boxed: the
    /// properties are ~300 octets, and every other frame is small.
    Header(ChannelId, Box<AMQPContentHeader>),
    /// A content body frame. Payloads of at least [`BODY_ZERO_COPY_BYTES_MIN`] octets share the
    /// read buffer's allocation (no copy); smaller ones are copied so they do not pin it.
    Body(ChannelId, Bytes),
    /// A heartbeat frame (channel 0, empty payload).
    Heartbeat,
}

impl Frame {
    /// The channel the frame belongs to (0 for heartbeats).
    pub fn channel(&self) -> ChannelId {
        match self {
            Frame::Method(c, _) | Frame::Header(c, _) | Frame::Body(c, _) => *c,
            Frame::Heartbeat => ChannelId::CONNECTION,
        }
    }
}

/// What the first eight octets of a connection say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolHeaderCheck {
    /// Fewer than eight octets, and those present could still be a protocol header we accept.
    Incomplete,
    /// AMQP 0-9-1 (or 0-9, which RabbitMQ treats as 0-9-1): consume eight octets and send
    /// `connection.start`.
    Accepted,
    /// Anything else: write [`PROTOCOL_HEADER`] back and close the socket (spec 4.2.2). Decided
    /// as soon as the octets present cannot begin an accepted header, so a peer speaking
    /// another protocol (HTTP, TLS) is answered without waiting for eight octets. (RabbitMQ,
    /// which also speaks AMQP 1.0, answers headers other than `AMQP 0 0 9 x` with its 1.0 SASL
    /// header instead; we speak only 0-9-1, so we always offer 0-9-1.)
    Refused,
}

/// Checks the protocol header at the start of `buf`. Does not consume anything: on
/// `Accepted`, the caller advances the buffer by eight octets.
pub fn check_protocol_header(buf: &[u8]) -> ProtocolHeaderCheck {
    let n = buf.len().min(PROTOCOL_HEADER.len());
    let Some(present) = buf.get(..n) else {
        return ProtocolHeaderCheck::Incomplete;
    };
    let matches = |header: &[u8; 8]| header.get(..n) == Some(present);
    match (
        matches(&PROTOCOL_HEADER) || matches(&PROTOCOL_HEADER_0_9),
        n == 8,
    ) {
        (false, _) => ProtocolHeaderCheck::Refused,
        (true, true) => ProtocolHeaderCheck::Accepted,
        (true, false) => ProtocolHeaderCheck::Incomplete,
    }
}

/// The largest payload accepted under `frame_max`. `frame_max` is the negotiated maximum frame
/// size (header and frame-end included); 0 ("no limit" in the spec) and values above
/// `limits::FRAME_BYTES_MAX` mean `FRAME_BYTES_MAX`, values below `FRAME_BYTES_MIN` mean
/// `FRAME_BYTES_MIN` (every peer must accept that much). Like RabbitMQ (`FRAME_SIZE_FUDGE` in
/// `rabbit_reader`), we tolerate clients that forget the 8 octets of framing and accept a
/// payload of up to `frame_max` octets, so a frame occupies at most `frame_max + 8` octets of
/// the read buffer.
pub fn payload_bytes_max(frame_max: u32) -> u32 {
    effective_frame_max(frame_max)
}

/// `frame_max` clamped to `[FRAME_BYTES_MIN, FRAME_BYTES_MAX]`, 0 meaning the maximum.
pub fn effective_frame_max(frame_max: u32) -> u32 {
    if frame_max == 0 {
        limits::FRAME_BYTES_MAX
    } else {
        frame_max.clamp(limits::FRAME_BYTES_MIN, limits::FRAME_BYTES_MAX)
    }
}

/// Decodes one frame from the front of `buf`, consuming its octets.
///
/// - `Ok(None)`: not enough octets yet. Nothing is consumed; the buffer has been reserved up to
///   the whole frame (never more than `frame_max + 8` octets, checked from the 7-octet header
///   before reserving), so the caller just reads more and calls again.
/// - `Ok(Some(frame))`: one frame, removed from `buf`.
/// - `Err(e)`: a protocol violation; all are connection errors (the stream cannot be trusted
///   after one). The buffer's content is then unspecified.
///
/// # Errors
/// Any [`ProtocolError`] of the framing level: unknown frame type, frame too large, bad
/// frame-end octet, heartbeat on a channel other than 0 or with a payload, content frames on
/// channel 0, unknown or undecodable methods and headers, tables nested too deeply.
pub fn decode(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, ProtocolError> {
    let Some(&[frame_type, c0, c1, s0, s1, s2, s3]) = buf.first_chunk::<FRAME_HEADER_BYTES>()
    else {
        return Ok(None);
    };
    let channel = u16::from_be_bytes([c0, c1]);
    let size_bytes = u32::from_be_bytes([s0, s1, s2, s3]);
    if !matches!(
        frame_type,
        FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
    ) {
        return Err(ProtocolError::UnknownFrameType {
            frame_type,
            channel,
        });
    }
    let too_large = ProtocolError::FrameTooLarge {
        size_bytes,
        frame_max_bytes: effective_frame_max(frame_max),
    };
    if size_bytes > payload_bytes_max(frame_max) {
        return Err(too_large);
    }
    // size_bytes <= FRAME_BYTES_MAX (128 KiB) here, so the sum cannot overflow.
    let Ok(payload_len) = usize::try_from(size_bytes) else {
        return Err(too_large);
    };
    let frame_len = FRAME_HEADER_BYTES + payload_len + 1;
    if buf.len() < frame_len {
        buf.reserve(frame_len - buf.len());
        return Ok(None);
    }
    let end = buf.get(frame_len - 1).copied();
    if end != Some(FRAME_END) {
        return Err(ProtocolError::BadFrameEnd {
            found: end.unwrap_or(0),
            channel,
        });
    }
    decode_whole_frame(buf, frame_type, channel, frame_len).map(Some)
}

/// Decodes the frame at the front of `buf`, which holds all `frame_len` octets of it (frame end
/// checked), and consumes it.
fn decode_whole_frame(
    buf: &mut BytesMut,
    frame_type: u8,
    channel: u16,
    frame_len: usize,
) -> Result<Frame, ProtocolError> {
    let channel_id = ChannelId(channel);
    let payload_range = FRAME_HEADER_BYTES..frame_len - 1;
    let frame = match frame_type {
        FRAME_METHOD => {
            let payload = buf.get(payload_range).unwrap_or_default();
            let method = decode_method(channel, payload)?;
            Frame::Method(channel_id, method)
        }
        FRAME_HEADER => {
            refuse_on_channel_zero("content header", channel)?;
            let payload = buf.get(payload_range).unwrap_or_default();
            Frame::Header(channel_id, decode_content_header(channel, payload)?)
        }
        FRAME_BODY => {
            refuse_on_channel_zero("content body", channel)?;
            // Consumes the frame itself.
            return Ok(Frame::Body(
                channel_id,
                take_body(buf, payload_range, frame_len),
            ));
        }
        _ => {
            if channel != 0 {
                return Err(ProtocolError::FrameOnWrongChannel {
                    kind: "heartbeat",
                    channel,
                });
            }
            if !payload_range.is_empty() {
                return Err(ProtocolError::BadHeartbeat {
                    size_bytes: u32::try_from(payload_range.len()).unwrap_or(u32::MAX),
                });
            }
            Frame::Heartbeat
        }
    };
    buf.advance(frame_len);
    Ok(frame)
}

/// The payload of a body frame, consuming the frame. A large payload stays in the read buffer's
/// allocation (no copy); a small one is copied out, so that a queued message does not pin a
/// whole read buffer, and so the buffer is not turned into a shared one for a few octets.
fn take_body(buf: &mut BytesMut, payload: std::ops::Range<usize>, frame_len: usize) -> Bytes {
    if payload.len() >= BODY_ZERO_COPY_BYTES_MIN {
        buf.split_to(frame_len).freeze().slice(payload)
    } else {
        let body = Bytes::copy_from_slice(buf.get(payload).unwrap_or_default());
        buf.advance(frame_len);
        body
    }
}

fn refuse_on_channel_zero(kind: &'static str, channel: u16) -> Result<(), ProtocolError> {
    if channel == 0 {
        Err(ProtocolError::FrameOnWrongChannel { kind, channel })
    } else {
        Ok(())
    }
}

/// Decodes a method frame's payload: class id, method id, arguments.
pub(crate) fn decode_method(channel: u16, payload: &[u8]) -> Result<AMQPClass, ProtocolError> {
    let (class_id, method_id) = match payload {
        [c0, c1, m0, m1, ..] => (
            u16::from_be_bytes([*c0, *c1]),
            u16::from_be_bytes([*m0, *m1]),
        ),
        _ => {
            return Err(ProtocolError::Undecodable {
                what: "method frame",
                channel,
                method_ids: (0, 0),
            });
        }
    };
    let Some(name) = method_name(class_id, method_id) else {
        return Err(ProtocolError::UnknownMethod {
            class_id,
            method_id,
        });
    };
    let arguments = payload.get(4..).unwrap_or_default();
    if (class_id, method_id) == (60, 10)
        && let Some(&[s0, s1, s2, s3]) = arguments.first_chunk::<4>()
        && [s0, s1, s2, s3] != [0; 4]
    {
        // S-PROTO-3: amq-protocol's `basic::Qos` has no prefetch_size; refused here, before
        // the field is lost.
        return Err(ProtocolError::PrefetchSize {
            prefetch_size: u32::from_be_bytes([s0, s1, s2, s3]),
        });
    }
    if (class_id, method_id) == (60, 40) {
        // The hot path: basic.publish decoded by hand (see `decode_publish_arguments`).
        return decode_publish_arguments(arguments)
            .map(|p| AMQPClass::Basic(basic::AMQPMethod::Publish(p)))
            .ok_or(ProtocolError::Undecodable {
                what: name,
                channel,
                method_ids: (class_id, method_id),
            });
    }
    if table_scan::scan_method_arguments(
        class_id,
        method_id,
        arguments,
        limits::FIELD_TABLE_DEPTH_MAX,
    ) == Depth::TooDeep
    {
        return Err(ProtocolError::TableTooDeep {
            what: name,
            channel,
            depth_max: limits::FIELD_TABLE_DEPTH_MAX,
            method_ids: (class_id, method_id),
        });
    }
    all_consuming_ok(parse_class(payload)).ok_or(ProtocolError::Undecodable {
        what: name,
        channel,
        method_ids: (class_id, method_id),
    })
}

/// Decodes a content header frame's payload, refusing deep header tables first.
pub(crate) fn decode_content_header(
    channel: u16,
    payload: &[u8],
) -> Result<Box<AMQPContentHeader>, ProtocolError> {
    const WHAT: &str = "content header";
    if table_scan::scan_content_header(payload, limits::FIELD_TABLE_DEPTH_MAX) == Depth::TooDeep {
        return Err(ProtocolError::TableTooDeep {
            what: WHAT,
            channel,
            depth_max: limits::FIELD_TABLE_DEPTH_MAX,
            method_ids: (0, 0),
        });
    }
    // Hand-written (see `properties`); the table depth was bounded just above.
    properties::decode_content_header(payload)
        .map(Box::new)
        .ok_or(ProtocolError::Undecodable {
            what: WHAT,
            channel,
            method_ids: (0, 0),
        })
}

/// Decodes a standalone field table (4-octet length, then entries) that must fill `bytes`
/// exactly, with the same depth limit as frames. For tables that arrive outside a frame (and
/// for the fuzz target of the table decoder).
///
/// # Errors
/// [`ProtocolError::TableTooDeep`] when nesting exceeds `limits::FIELD_TABLE_DEPTH_MAX`,
/// [`ProtocolError::Undecodable`] when the bytes are not exactly one well-formed table.
pub fn decode_field_table(bytes: &[u8]) -> Result<FieldTable, ProtocolError> {
    const WHAT: &str = "field table";
    if table_scan::scan_table_at(bytes, 0, limits::FIELD_TABLE_DEPTH_MAX) == Depth::TooDeep {
        return Err(ProtocolError::TableTooDeep {
            what: WHAT,
            channel: 0,
            depth_max: limits::FIELD_TABLE_DEPTH_MAX,
            method_ids: (0, 0),
        });
    }
    properties::decode_whole_table(bytes).ok_or(ProtocolError::Undecodable {
        what: WHAT,
        channel: 0,
        method_ids: (0, 0),
    })
}

/// Hand-written decoder of `basic.publish`'s arguments (reserved-1, exchange, routing-key,
/// mandatory and immediate bits), the one method on the publish hot path. It accepts exactly
/// what amq-protocol's `parse_publish` accepts (short strings must be UTF-8; the bits octet's
/// other bits are ignored; no trailing octets), which a differential property test checks, and
/// avoids the allocations amq-protocol's flag parser makes for every frame.
pub(crate) fn decode_publish_arguments(arguments: &[u8]) -> Option<basic::Publish> {
    let rest = arguments.get(2..)?;
    let (exchange, rest) = split_short_string(rest)?;
    let (routing_key, rest) = split_short_string(rest)?;
    let [bits] = rest else {
        return None;
    };
    Some(basic::Publish {
        exchange,
        routing_key,
        mandatory: bits & 1 != 0,
        immediate: bits & 2 != 0,
    })
}

fn split_short_string(bytes: &[u8]) -> Option<(ShortString, &[u8])> {
    let (&len, rest) = bytes.split_first()?;
    let (text, rest) = rest.split_at_checked(usize::from(len))?;
    let text = std::str::from_utf8(text).ok()?;
    // At most 255 octets by construction (the length is one octet).
    let short = ShortString::try_new(text).ok()?;
    Some((short, rest))
}

/// The spec's name of a method (`basic.publish`), or `None` for ids AMQP 0-9-1 does not define.
pub fn method_name(class_id: u16, method_id: u16) -> Option<&'static str> {
    Some(match (class_id, method_id) {
        (10, 10) => "connection.start",
        (10, 11) => "connection.start-ok",
        (10, 20) => "connection.secure",
        (10, 21) => "connection.secure-ok",
        (10, 30) => "connection.tune",
        (10, 31) => "connection.tune-ok",
        (10, 40) => "connection.open",
        (10, 41) => "connection.open-ok",
        (10, 50) => "connection.close",
        (10, 51) => "connection.close-ok",
        (10, 60) => "connection.blocked",
        (10, 61) => "connection.unblocked",
        (10, 70) => "connection.update-secret",
        (10, 71) => "connection.update-secret-ok",
        (20, 10) => "channel.open",
        (20, 11) => "channel.open-ok",
        (20, 20) => "channel.flow",
        (20, 21) => "channel.flow-ok",
        (20, 40) => "channel.close",
        (20, 41) => "channel.close-ok",
        (30, 10) => "access.request",
        (30, 11) => "access.request-ok",
        (40, 10) => "exchange.declare",
        (40, 11) => "exchange.declare-ok",
        (40, 20) => "exchange.delete",
        (40, 21) => "exchange.delete-ok",
        (40, 30) => "exchange.bind",
        (40, 31) => "exchange.bind-ok",
        (40, 40) => "exchange.unbind",
        (40, 51) => "exchange.unbind-ok",
        (50, 10) => "queue.declare",
        (50, 11) => "queue.declare-ok",
        (50, 20) => "queue.bind",
        (50, 21) => "queue.bind-ok",
        (50, 30) => "queue.purge",
        (50, 31) => "queue.purge-ok",
        (50, 40) => "queue.delete",
        (50, 41) => "queue.delete-ok",
        (50, 50) => "queue.unbind",
        (50, 51) => "queue.unbind-ok",
        (60, 10) => "basic.qos",
        (60, 11) => "basic.qos-ok",
        (60, 20) => "basic.consume",
        (60, 21) => "basic.consume-ok",
        (60, 30) => "basic.cancel",
        (60, 31) => "basic.cancel-ok",
        (60, 40) => "basic.publish",
        (60, 50) => "basic.return",
        (60, 60) => "basic.deliver",
        (60, 70) => "basic.get",
        (60, 71) => "basic.get-ok",
        (60, 72) => "basic.get-empty",
        (60, 80) => "basic.ack",
        (60, 90) => "basic.reject",
        (60, 100) => "basic.recover-async",
        (60, 110) => "basic.recover",
        (60, 111) => "basic.recover-ok",
        (60, 120) => "basic.nack",
        (85, 10) => "confirm.select",
        (85, 11) => "confirm.select-ok",
        (90, 10) => "tx.select",
        (90, 11) => "tx.select-ok",
        (90, 20) => "tx.commit",
        (90, 21) => "tx.commit-ok",
        (90, 30) => "tx.rollback",
        (90, 31) => "tx.rollback-ok",
        _ => return None,
    })
}

/// amq-protocol's parsers are nom parsers; this keeps nom's types out of the rest of the module.
mod nom_free {
    use amq_protocol::frame::ParserResult;

    /// The value when the parser succeeded and consumed its whole input.
    pub(super) fn all_consuming_ok<T>(result: ParserResult<&[u8], T>) -> Option<T> {
        match result {
            Ok(([], value)) => Some(value),
            _ => None,
        }
    }
}
