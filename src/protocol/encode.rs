//! Frame encoding into a `BytesMut` write buffer. Two kinds of encoder live here:
//!
//! - generic ones ([`encode_method`], [`encode_content_header_generic`]) that run
//!   amq-protocol's generators, for every method and for reference;
//! - hand-written ones for the hot paths ([`encode_deliver`], [`encode_ack`],
//!   [`encode_content`]), which write straight into the buffer without amq-protocol's per-call
//!   allocations (its flag encoder allocates a `String` per bit). Golden-byte tests prove them
//!   byte-identical to amq-protocol's output; `benches/codec.rs` measures the difference.
//!
//! One deliberate difference: amq-protocol writes an `AMQPValue::ShortString` inside a field
//! table with the type tag `'_'`, which no peer can read (RabbitMQ's tables have no short-string
//! type). The hand-written table encoder writes it as a long string (`'S'`) instead, which is how
//! RabbitMQ would send the same text. No tokio, no broker.

use amq_protocol::frame::WriteContext;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, gen_class};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, ShortString};
use bytes::{BufMut, BytesMut};

use super::frame::{
    ChannelId, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
    FRAME_OVERHEAD_BYTES, Frame, PROTOCOL_HEADER, effective_frame_max,
};

/// Class id of `basic`, the only content class of AMQP 0-9-1.
pub const CLASS_BASIC: u16 = 60;

/// Writes the AMQP 0-9-1 protocol header (also the answer to a refused header).
pub fn encode_protocol_header(buf: &mut BytesMut) {
    buf.put_slice(&PROTOCOL_HEADER);
}

/// Writes a heartbeat frame.
pub fn encode_heartbeat(buf: &mut BytesMut) {
    buf.put_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// Writes any [`Frame`]: methods through [`encode_method`], content headers through the
/// hand-written properties encoder, bodies and heartbeats directly. The caller keeps method and
/// header frames within the peer's `frame_max` (methods cannot be split; RabbitMQ does not
/// check either) and body frames within it (use [`encode_content`] to split a body).
pub fn encode_frame(buf: &mut BytesMut, frame: &Frame) {
    match frame {
        Frame::Method(channel, method) => encode_method(buf, *channel, method),
        Frame::Header(channel, header) => encode_content_header(
            buf,
            *channel,
            header.class_id,
            header.body_size,
            &header.properties,
        ),
        Frame::Body(channel, body) => encode_body_frame(buf, *channel, body),
        Frame::Heartbeat => encode_heartbeat(buf),
    }
}

/// Writes a method frame with amq-protocol's generator, except for the hot methods
/// (`basic.deliver`, `basic.ack`) which take the hand-written path.
pub fn encode_method(buf: &mut BytesMut, channel: ChannelId, method: &AMQPClass) {
    match method {
        AMQPClass::Basic(basic::AMQPMethod::Ack(ack)) => {
            encode_ack(buf, channel, ack.delivery_tag, ack.multiple);
        }
        AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) => encode_deliver_method(
            buf,
            channel,
            DeliverRef {
                consumer_tag: &d.consumer_tag,
                delivery_tag: d.delivery_tag,
                redelivered: d.redelivered,
                exchange: &d.exchange,
                routing_key: &d.routing_key,
            },
        ),
        _ => encode_method_generic(buf, channel, method),
    }
}

/// Writes a method frame with amq-protocol's generator only (the reference for golden tests
/// and benchmarks, and the path for every method without a hand-written encoder).
pub fn encode_method_generic(buf: &mut BytesMut, channel: ChannelId, method: &AMQPClass) {
    let payload = generate(|ctx| gen_class(method)(ctx));
    put_frame(buf, FRAME_METHOD, channel, &payload);
}

/// Writes a content header frame with amq-protocol's generator only (reference for tests).
pub fn encode_content_header_generic(
    buf: &mut BytesMut,
    channel: ChannelId,
    class_id: u16,
    body_size_bytes: u64,
    properties: &BasicProperties,
) {
    let properties = generate(|ctx| basic::gen_properties(properties)(ctx));
    let mut payload = Vec::with_capacity(12 + properties.len());
    payload.extend_from_slice(&class_id.to_be_bytes());
    payload.extend_from_slice(&0u16.to_be_bytes());
    payload.extend_from_slice(&body_size_bytes.to_be_bytes());
    payload.extend_from_slice(&properties);
    put_frame(buf, FRAME_HEADER, channel, &payload);
}

/// Runs an amq-protocol generator into a fresh `Vec`.
fn generate(
    run: impl FnOnce(
        WriteContext<Vec<u8>>,
    ) -> Result<WriteContext<Vec<u8>>, amq_protocol::frame::GenError>,
) -> Vec<u8> {
    // The generators fail only when the writer refuses bytes; a Vec never does, and every
    // ShortString is at most 255 octets by construction.
    match run(WriteContext::from(Vec::with_capacity(64))) {
        Ok(ctx) => ctx.into_inner().0,
        Err(e) => panic!("amq-protocol generator failed writing into a Vec: {e:?}"),
    }
}

fn put_frame(buf: &mut BytesMut, frame_type: u8, channel: ChannelId, payload: &[u8]) {
    buf.reserve(FRAME_OVERHEAD_BYTES + payload.len());
    buf.put_u8(frame_type);
    buf.put_u16(channel.0);
    buf.put_u32(len_u32(payload.len()));
    buf.put_slice(payload);
    buf.put_u8(FRAME_END);
}

/// A length that goes into a 32-bit length field. Everything we encode is bounded far below
/// 4 GiB (frames by `frame_max`, bodies by `MESSAGE_BODY_BYTES_MAX`), so a larger value is a
/// bug in the caller.
#[expect(
    clippy::expect_used,
    reason = "lengths we encode are far below 4 GiB (see above)"
)]
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("length does not fit an AMQP 32-bit length field")
}

/// Starts a frame whose payload size is patched by [`end_frame`]; returns the size's offset.
fn begin_frame(buf: &mut BytesMut, frame_type: u8, channel: ChannelId) -> usize {
    buf.put_u8(frame_type);
    buf.put_u16(channel.0);
    let at = buf.len();
    buf.put_u32(0);
    at
}

fn end_frame(buf: &mut BytesMut, size_at: usize) {
    let payload_len = buf.len() - size_at - 4;
    patch_u32(buf, size_at, len_u32(payload_len));
    buf.put_u8(FRAME_END);
}

fn patch_u32(buf: &mut BytesMut, at: usize, value: u32) {
    let slot = buf.get_mut(at..at + 4);
    assert!(slot.is_some(), "patch at {at} beyond the buffer");
    if let Some(slot) = slot {
        slot.copy_from_slice(&value.to_be_bytes());
    }
}

fn put_short_string(buf: &mut BytesMut, s: &ShortString) {
    let bytes = s.as_str().as_bytes();
    // ShortString holds at most 255 octets by construction (`ShortString::try_new`).
    buf.put_u8(u8::try_from(bytes.len()).unwrap_or(u8::MAX));
    buf.put_slice(bytes);
}

/// Writes a `basic.ack` frame (publisher confirms and consumer acks): 21 octets.
pub fn encode_ack(buf: &mut BytesMut, channel: ChannelId, delivery_tag: u64, multiple: bool) {
    buf.reserve(21);
    buf.put_u8(FRAME_METHOD);
    buf.put_u16(channel.0);
    buf.put_u32(13);
    buf.put_u16(CLASS_BASIC);
    buf.put_u16(80);
    buf.put_u64(delivery_tag);
    buf.put_u8(u8::from(multiple));
    buf.put_u8(FRAME_END);
}

/// The fields of a `basic.deliver`, borrowed so a delivery costs no allocation.
#[derive(Debug, Clone, Copy)]
pub struct DeliverRef<'a> {
    /// The consumer the message goes to.
    pub consumer_tag: &'a ShortString,
    /// The channel-scoped delivery tag.
    pub delivery_tag: u64,
    /// Whether the message was delivered before (S-DUR-6).
    pub redelivered: bool,
    /// The exchange the message was published to.
    pub exchange: &'a ShortString,
    /// The routing key it was published with.
    pub routing_key: &'a ShortString,
}

fn encode_deliver_method(buf: &mut BytesMut, channel: ChannelId, d: DeliverRef<'_>) {
    let size_at = begin_frame(buf, FRAME_METHOD, channel);
    buf.put_u16(CLASS_BASIC);
    buf.put_u16(60);
    put_short_string(buf, d.consumer_tag);
    buf.put_u64(d.delivery_tag);
    buf.put_u8(u8::from(d.redelivered));
    put_short_string(buf, d.exchange);
    put_short_string(buf, d.routing_key);
    end_frame(buf, size_at);
}

/// Writes a whole delivery: the `basic.deliver` method frame, the content header and the body
/// frames, split so that no frame exceeds the peer's `frame_max`.
pub fn encode_deliver(
    buf: &mut BytesMut,
    channel: ChannelId,
    deliver: DeliverRef<'_>,
    properties: &BasicProperties,
    body: &[u8],
    frame_max: u32,
) {
    encode_deliver_method(buf, channel, deliver);
    encode_content(buf, channel, properties, body, frame_max);
}

/// Writes the content of a message (class `basic`): the header frame, then the body in frames
/// of at most `frame_max - 8` octets (`frame_max` clamped as in
/// [`super::frame::effective_frame_max`]). An empty body has no body frame, as RabbitMQ sends.
pub fn encode_content(
    buf: &mut BytesMut,
    channel: ChannelId,
    properties: &BasicProperties,
    body: &[u8],
    frame_max: u32,
) {
    encode_content_header(buf, channel, CLASS_BASIC, body.len() as u64, properties);
    let chunk_bytes_max = effective_frame_max(frame_max) as usize - FRAME_OVERHEAD_BYTES;
    buf.reserve(body.len() + body.len().div_ceil(chunk_bytes_max) * FRAME_OVERHEAD_BYTES);
    for chunk in body.chunks(chunk_bytes_max) {
        encode_body_frame(buf, channel, chunk);
    }
}

/// Writes one body frame holding `chunk`.
pub fn encode_body_frame(buf: &mut BytesMut, channel: ChannelId, chunk: &[u8]) {
    put_frame(buf, FRAME_BODY, channel, chunk);
}

/// Writes a content header frame with the hand-written properties encoder.
pub fn encode_content_header(
    buf: &mut BytesMut,
    channel: ChannelId,
    class_id: u16,
    body_size_bytes: u64,
    properties: &BasicProperties,
) {
    let size_at = begin_frame(buf, FRAME_HEADER, channel);
    buf.put_u16(class_id);
    buf.put_u16(0); // weight: always 0
    buf.put_u64(body_size_bytes);
    put_properties(buf, properties);
    end_frame(buf, size_at);
}

/// The basic properties in the order and with the flag bits of the spec (bit 15 first).
fn put_properties(buf: &mut BytesMut, p: &BasicProperties) {
    buf.put_u16(p.bitmask());
    let short = |buf: &mut BytesMut, s: &Option<ShortString>| {
        if let Some(s) = s {
            put_short_string(buf, s);
        }
    };
    short(buf, p.content_type());
    short(buf, p.content_encoding());
    if let Some(headers) = p.headers() {
        put_table(buf, headers);
    }
    if let Some(mode) = p.delivery_mode() {
        buf.put_u8(*mode);
    }
    if let Some(priority) = p.priority() {
        buf.put_u8(*priority);
    }
    short(buf, p.correlation_id());
    short(buf, p.reply_to());
    short(buf, p.expiration());
    short(buf, p.message_id());
    if let Some(timestamp) = p.timestamp() {
        buf.put_u64(*timestamp);
    }
    short(buf, p.kind());
    short(buf, p.user_id());
    short(buf, p.app_id());
    short(buf, p.cluster_id());
}

/// Writes a field table: a 32-bit length, then `key value` entries in the table's (sorted) order.
pub fn put_table(buf: &mut BytesMut, table: &FieldTable) {
    let at = buf.len();
    buf.put_u32(0);
    for (key, value) in table {
        put_short_string(buf, key);
        put_value(buf, value);
    }
    patch_u32(buf, at, len_u32(buf.len() - at - 4));
}

fn put_array(buf: &mut BytesMut, array: &FieldArray) {
    let at = buf.len();
    buf.put_u32(0);
    for value in array.as_slice() {
        put_value(buf, value);
    }
    patch_u32(buf, at, len_u32(buf.len() - at - 4));
}

/// Writes a tagged value with RabbitMQ's type tags (`s` = signed 16-bit, `l` = signed 64-bit).
/// Recursion depth is that of the value: decoded values are bounded by
/// `limits::FIELD_TABLE_DEPTH_MAX`, and values we build ourselves are shallow.
fn put_value(buf: &mut BytesMut, value: &AMQPValue) {
    match value {
        AMQPValue::Boolean(b) => put_tagged(buf, b't', &[u8::from(*b)]),
        AMQPValue::ShortShortInt(v) => put_tagged(buf, b'b', &v.to_be_bytes()),
        AMQPValue::ShortShortUInt(v) => put_tagged(buf, b'B', &[*v]),
        AMQPValue::ShortInt(v) => put_tagged(buf, b's', &v.to_be_bytes()),
        AMQPValue::ShortUInt(v) => put_tagged(buf, b'u', &v.to_be_bytes()),
        AMQPValue::LongInt(v) => put_tagged(buf, b'I', &v.to_be_bytes()),
        AMQPValue::LongUInt(v) => put_tagged(buf, b'i', &v.to_be_bytes()),
        AMQPValue::LongLongInt(v) => put_tagged(buf, b'l', &v.to_be_bytes()),
        AMQPValue::Float(v) => put_tagged(buf, b'f', &v.to_be_bytes()),
        AMQPValue::Double(v) => put_tagged(buf, b'd', &v.to_be_bytes()),
        AMQPValue::DecimalValue(d) => {
            buf.put_u8(b'D');
            buf.put_u8(d.scale);
            buf.put_u32(d.value);
        }
        AMQPValue::ShortString(s) => put_long_bytes(buf, b'S', s.as_str().as_bytes()),
        AMQPValue::LongString(s) => put_long_bytes(buf, b'S', s.as_bytes()),
        AMQPValue::FieldArray(a) => {
            buf.put_u8(b'A');
            put_array(buf, a);
        }
        AMQPValue::Timestamp(t) => put_tagged(buf, b'T', &t.to_be_bytes()),
        AMQPValue::FieldTable(t) => {
            buf.put_u8(b'F');
            put_table(buf, t);
        }
        AMQPValue::ByteArray(a) => put_long_bytes(buf, b'x', a.as_slice()),
        AMQPValue::Void => buf.put_u8(b'V'),
    }
}

fn put_tagged(buf: &mut BytesMut, tag: u8, bytes: &[u8]) {
    buf.put_u8(tag);
    buf.put_slice(bytes);
}

fn put_long_bytes(buf: &mut BytesMut, tag: u8, bytes: &[u8]) {
    buf.put_u8(tag);
    buf.put_u32(len_u32(bytes.len()));
    buf.put_slice(bytes);
}
