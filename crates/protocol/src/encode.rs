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
//! type). Our encoders write it as a long string (`'S'`) instead, which is how RabbitMQ would
//! send the same text: the hand-written table encoder directly, and [`encode_method`] /
//! [`encode_method_generic`] by rewriting such a table before amq-protocol sees it. Only
//! [`encode_content_header_generic`], kept as amq-protocol's reference output, does not.
//! No tokio, no broker.

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
/// and benchmarks, and the path for every method without a hand-written encoder). A short
/// string inside the method's field table is sent as a long string (see the module doc).
pub fn encode_method_generic(buf: &mut BytesMut, channel: ChannelId, method: &AMQPClass) {
    let payload = if method_table(method).is_some_and(holds_short_string) {
        let mut method = method.clone();
        if let Some(table) = method_table_mut(&mut method) {
            *table = short_strings_as_long(table);
        }
        generate(|ctx| gen_class(&method)(ctx))
    } else {
        generate(|ctx| gen_class(method)(ctx))
    };
    put_frame(buf, FRAME_METHOD, channel, &payload);
}

/// The field table of the methods that carry one (the same list as `table_scan`'s).
fn method_table(method: &AMQPClass) -> Option<&FieldTable> {
    use amq_protocol::protocol::{connection as c, exchange as e, queue as q};
    Some(match method {
        AMQPClass::Connection(c::AMQPMethod::Start(m)) => &m.server_properties,
        AMQPClass::Connection(c::AMQPMethod::StartOk(m)) => &m.client_properties,
        AMQPClass::Exchange(e::AMQPMethod::Declare(m)) => &m.arguments,
        AMQPClass::Exchange(e::AMQPMethod::Bind(m)) => &m.arguments,
        AMQPClass::Exchange(e::AMQPMethod::Unbind(m)) => &m.arguments,
        AMQPClass::Queue(q::AMQPMethod::Declare(m)) => &m.arguments,
        AMQPClass::Queue(q::AMQPMethod::Bind(m)) => &m.arguments,
        AMQPClass::Queue(q::AMQPMethod::Unbind(m)) => &m.arguments,
        AMQPClass::Basic(basic::AMQPMethod::Consume(m)) => &m.arguments,
        _ => return None,
    })
}

fn method_table_mut(method: &mut AMQPClass) -> Option<&mut FieldTable> {
    use amq_protocol::protocol::{connection as c, exchange as e, queue as q};
    Some(match method {
        AMQPClass::Connection(c::AMQPMethod::Start(m)) => &mut m.server_properties,
        AMQPClass::Connection(c::AMQPMethod::StartOk(m)) => &mut m.client_properties,
        AMQPClass::Exchange(e::AMQPMethod::Declare(m)) => &mut m.arguments,
        AMQPClass::Exchange(e::AMQPMethod::Bind(m)) => &mut m.arguments,
        AMQPClass::Exchange(e::AMQPMethod::Unbind(m)) => &mut m.arguments,
        AMQPClass::Queue(q::AMQPMethod::Declare(m)) => &mut m.arguments,
        AMQPClass::Queue(q::AMQPMethod::Bind(m)) => &mut m.arguments,
        AMQPClass::Queue(q::AMQPMethod::Unbind(m)) => &mut m.arguments,
        AMQPClass::Basic(basic::AMQPMethod::Consume(m)) => &mut m.arguments,
        _ => return None,
    })
}

fn holds_short_string(table: &FieldTable) -> bool {
    fn value(v: &AMQPValue) -> bool {
        match v {
            AMQPValue::ShortString(_) => true,
            AMQPValue::FieldArray(a) => a.as_slice().iter().any(value),
            AMQPValue::FieldTable(t) => holds_short_string(t),
            _ => false,
        }
    }
    table.into_iter().any(|(_, v)| value(v))
}

/// A copy of `table` with every short string (at any depth) turned into a long string.
fn short_strings_as_long(table: &FieldTable) -> FieldTable {
    fn value(v: &AMQPValue) -> AMQPValue {
        match v {
            AMQPValue::ShortString(s) => AMQPValue::LongString(s.as_str().into()),
            AMQPValue::FieldArray(a) => {
                AMQPValue::FieldArray(a.as_slice().iter().map(value).collect::<Vec<_>>().into())
            }
            AMQPValue::FieldTable(t) => AMQPValue::FieldTable(short_strings_as_long(t)),
            other => other.clone(),
        }
    }
    let mut out = FieldTable::default();
    for (k, v) in table {
        out.insert(k.clone(), value(v));
    }
    out
}

/// Writes a content header frame with amq-protocol's generator only: the reference output for
/// tests and benchmarks, including its `'_'` tag for short strings in `headers` (module doc).
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

/// A writer over a slice sized in advance: the hand-written encoders compute a frame's exact
/// length, grow the buffer once, and fill it here, instead of paying a capacity check and a
/// `memcpy` call per field. Writing past the end is a sizing bug: the write is skipped (no
/// panic mid-frame) and [`Out::finish`] then fails its assertion.
struct Out<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> Out<'a> {
    /// Grows `buf` by `len` zeroed octets and returns a writer over them.
    fn grow(buf: &'a mut BytesMut, len: usize) -> Self {
        let start = buf.len();
        buf.resize(start + len, 0);
        let tail = buf.get_mut(start..).unwrap_or_default();
        Out { buf: tail, at: 0 }
    }

    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        if let Some(dst) = self.buf.get_mut(self.at..end) {
            dst.copy_from_slice(bytes);
        }
        self.at = end;
    }

    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }

    fn u16(&mut self, v: u16) {
        self.put(&v.to_be_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.put(&v.to_be_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.put(&v.to_be_bytes());
    }

    fn short_string(&mut self, s: &ShortString) {
        let bytes = s.as_str().as_bytes();
        // ShortString holds at most 255 octets by construction (`ShortString::try_new`).
        self.u8(u8::try_from(bytes.len()).unwrap_or(u8::MAX));
        self.put(bytes);
    }

    fn frame_header(&mut self, frame_type: u8, channel: ChannelId, payload_len: usize) {
        self.u8(frame_type);
        self.u16(channel.0);
        self.u32(len_u32(payload_len));
    }

    /// Pair assertion of the sizing: exactly the computed length was written.
    fn finish(self) {
        assert_eq!(self.at, self.buf.len(), "encoder sized a frame wrongly");
    }
}

fn short_string_len(s: &ShortString) -> usize {
    1 + s.as_str().len()
}

/// Writes a `basic.ack` frame (publisher confirms and consumer acks): 21 octets.
pub fn encode_ack(buf: &mut BytesMut, channel: ChannelId, delivery_tag: u64, multiple: bool) {
    let [c0, c1] = channel.0.to_be_bytes();
    let [t0, t1, t2, t3, t4, t5, t6, t7] = delivery_tag.to_be_bytes();
    buf.put_slice(&[
        FRAME_METHOD,
        c0,
        c1,
        0,
        0,
        0,
        13, // payload: class, method, tag, bits
        0,
        60, // basic
        0,
        80, // ack
        t0,
        t1,
        t2,
        t3,
        t4,
        t5,
        t6,
        t7,
        u8::from(multiple),
        FRAME_END,
    ]);
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

/// Writes the `basic.deliver` method frame alone (its content follows, see
/// [`encode_content_header`] and [`body_frame_envelope`]).
pub fn encode_deliver_method(buf: &mut BytesMut, channel: ChannelId, d: DeliverRef<'_>) {
    let payload_len = 4
        + short_string_len(d.consumer_tag)
        + 8
        + 1
        + short_string_len(d.exchange)
        + short_string_len(d.routing_key);
    let mut out = Out::grow(buf, FRAME_OVERHEAD_BYTES + payload_len);
    out.frame_header(FRAME_METHOD, channel, payload_len);
    out.u16(CLASS_BASIC);
    out.u16(60);
    out.short_string(d.consumer_tag);
    out.u64(d.delivery_tag);
    out.u8(u8::from(d.redelivered));
    out.short_string(d.exchange);
    out.short_string(d.routing_key);
    out.u8(FRAME_END);
    out.finish();
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
    let chunk_bytes_max = body_chunk_bytes_max(frame_max);
    buf.reserve(
        FRAME_OVERHEAD_BYTES
            + 14
            + properties_len(properties)
            + body.len()
            + body.len().div_ceil(chunk_bytes_max) * FRAME_OVERHEAD_BYTES,
    );
    encode_content_header(buf, channel, CLASS_BASIC, body.len() as u64, properties);
    for chunk in body.chunks(chunk_bytes_max) {
        encode_body_frame(buf, channel, chunk);
    }
}

/// Writes one body frame holding `chunk`.
pub fn encode_body_frame(buf: &mut BytesMut, channel: ChannelId, chunk: &[u8]) {
    let (header, end) = body_frame_envelope(channel, chunk.len());
    buf.reserve(FRAME_OVERHEAD_BYTES + chunk.len());
    buf.put_slice(&header);
    buf.put_slice(chunk);
    buf.put_slice(&[end]);
}

/// The bytes around the payload of a body frame of `len` octets: its frame header and its
/// frame end, for a writer that sends the payload from where it already is (S-BIG-3).
pub fn body_frame_envelope(channel: ChannelId, len: usize) -> ([u8; 7], u8) {
    let [c0, c1] = channel.0.to_be_bytes();
    let [s0, s1, s2, s3] = len_u32(len).to_be_bytes();
    ([FRAME_BODY, c0, c1, s0, s1, s2, s3], FRAME_END)
}

/// The largest payload of one body frame under `frame_max` (clamped as in
/// [`super::frame::effective_frame_max`]).
pub fn body_chunk_bytes_max(frame_max: u32) -> usize {
    effective_frame_max(frame_max) as usize - FRAME_OVERHEAD_BYTES
}

/// Writes a content header frame with the hand-written properties encoder.
pub fn encode_content_header(
    buf: &mut BytesMut,
    channel: ChannelId,
    class_id: u16,
    body_size_bytes: u64,
    properties: &BasicProperties,
) {
    let payload_len = 2 + 2 + 8 + properties_len(properties);
    let mut out = Out::grow(buf, FRAME_OVERHEAD_BYTES + payload_len);
    out.frame_header(FRAME_HEADER, channel, payload_len);
    out.u16(class_id);
    out.u16(0); // weight: always 0
    out.u64(body_size_bytes);
    put_properties(&mut out, properties);
    out.u8(FRAME_END);
    out.finish();
}

/// The short-string properties in flag order after the headers, delivery mode and priority
/// (correlation-id .. message-id), and after the timestamp (type .. cluster-id).
fn short_properties(p: &BasicProperties) -> ([&Option<ShortString>; 4], [&Option<ShortString>; 4]) {
    (
        [
            p.correlation_id(),
            p.reply_to(),
            p.expiration(),
            p.message_id(),
        ],
        [p.kind(), p.user_id(), p.app_id(), p.cluster_id()],
    )
}

/// Encoded size of the properties: flags word and every present property.
fn properties_len(p: &BasicProperties) -> usize {
    let short = |s: &Option<ShortString>| s.as_ref().map_or(0, short_string_len);
    let (middle, last) = short_properties(p);
    2 + short(p.content_type())
        + short(p.content_encoding())
        + p.headers().as_ref().map_or(0, table_len)
        + usize::from(p.delivery_mode().is_some())
        + usize::from(p.priority().is_some())
        + middle.into_iter().map(short).sum::<usize>()
        + if p.timestamp().is_some() { 8 } else { 0 }
        + last.into_iter().map(short).sum::<usize>()
}

/// The basic properties in the order and with the flag bits of the spec (bit 15 first).
fn put_properties(out: &mut Out<'_>, p: &BasicProperties) {
    let short = |out: &mut Out<'_>, s: &Option<ShortString>| {
        if let Some(s) = s {
            out.short_string(s);
        }
    };
    out.u16(p.bitmask());
    short(out, p.content_type());
    short(out, p.content_encoding());
    if let Some(headers) = p.headers() {
        put_table_into(out, headers);
    }
    if let Some(mode) = p.delivery_mode() {
        out.u8(*mode);
    }
    if let Some(priority) = p.priority() {
        out.u8(*priority);
    }
    let (middle, last) = short_properties(p);
    for s in middle {
        short(out, s);
    }
    if let Some(timestamp) = p.timestamp() {
        out.u64(*timestamp);
    }
    for s in last {
        short(out, s);
    }
}

/// Writes a field table: a 32-bit length, then `key value` entries in the table's (sorted)
/// order, with the same tags as the content header encoder.
pub fn put_table(buf: &mut BytesMut, table: &FieldTable) {
    let mut out = Out::grow(buf, table_len(table));
    put_table_into(&mut out, table);
    out.finish();
}

/// Encoded size of a table, length word included. Recursion follows the table's nesting,
/// bounded for decoded tables by `limits::FIELD_TABLE_DEPTH_MAX`.
fn table_len(table: &FieldTable) -> usize {
    4 + table
        .into_iter()
        .map(|(k, v)| short_string_len(k) + value_len(v))
        .sum::<usize>()
}

fn array_len(array: &FieldArray) -> usize {
    4 + array.as_slice().iter().map(value_len).sum::<usize>()
}

/// Encoded size of a tagged value, tag included.
fn value_len(value: &AMQPValue) -> usize {
    1 + match value {
        AMQPValue::Void => 0,
        AMQPValue::Boolean(_) | AMQPValue::ShortShortInt(_) | AMQPValue::ShortShortUInt(_) => 1,
        AMQPValue::ShortInt(_) | AMQPValue::ShortUInt(_) => 2,
        AMQPValue::LongInt(_) | AMQPValue::LongUInt(_) | AMQPValue::Float(_) => 4,
        AMQPValue::DecimalValue(_) => 5,
        AMQPValue::LongLongInt(_) | AMQPValue::Double(_) | AMQPValue::Timestamp(_) => 8,
        AMQPValue::ShortString(s) => 4 + s.as_str().len(),
        AMQPValue::LongString(s) => 4 + s.len(),
        AMQPValue::ByteArray(a) => 4 + a.len(),
        AMQPValue::FieldArray(a) => array_len(a),
        AMQPValue::FieldTable(t) => table_len(t),
    }
}

fn put_table_into(out: &mut Out<'_>, table: &FieldTable) {
    out.u32(len_u32(table_len(table) - 4));
    for (key, value) in table {
        out.short_string(key);
        put_value(out, value);
    }
}

/// Writes a tagged value with RabbitMQ's type tags (`s` = signed 16-bit, `l` = signed 64-bit;
/// a short string goes out as a long string `S`, see the module doc).
fn put_value(out: &mut Out<'_>, value: &AMQPValue) {
    match value {
        AMQPValue::Boolean(b) => out.put(&[b't', u8::from(*b)]),
        AMQPValue::ShortShortInt(v) => out.put(&[b'b', v.to_be_bytes()[0]]),
        AMQPValue::ShortShortUInt(v) => out.put(&[b'B', *v]),
        AMQPValue::ShortInt(v) => put_tagged(out, b's', &v.to_be_bytes()),
        AMQPValue::ShortUInt(v) => put_tagged(out, b'u', &v.to_be_bytes()),
        AMQPValue::LongInt(v) => put_tagged(out, b'I', &v.to_be_bytes()),
        AMQPValue::LongUInt(v) => put_tagged(out, b'i', &v.to_be_bytes()),
        AMQPValue::LongLongInt(v) => put_tagged(out, b'l', &v.to_be_bytes()),
        AMQPValue::Float(v) => put_tagged(out, b'f', &v.to_be_bytes()),
        AMQPValue::Double(v) => put_tagged(out, b'd', &v.to_be_bytes()),
        AMQPValue::DecimalValue(d) => {
            out.put(&[b'D', d.scale]);
            out.u32(d.value);
        }
        AMQPValue::ShortString(s) => put_long_bytes(out, b'S', s.as_str().as_bytes()),
        AMQPValue::LongString(s) => put_long_bytes(out, b'S', s.as_bytes()),
        AMQPValue::FieldArray(a) => {
            out.u8(b'A');
            out.u32(len_u32(array_len(a) - 4));
            for v in a.as_slice() {
                put_value(out, v);
            }
        }
        AMQPValue::Timestamp(t) => put_tagged(out, b'T', &t.to_be_bytes()),
        AMQPValue::FieldTable(t) => {
            out.u8(b'F');
            put_table_into(out, t);
        }
        AMQPValue::ByteArray(a) => put_long_bytes(out, b'x', a.as_slice()),
        AMQPValue::Void => out.u8(b'V'),
    }
}

fn put_tagged(out: &mut Out<'_>, tag: u8, bytes: &[u8]) {
    out.u8(tag);
    out.put(bytes);
}

fn put_long_bytes(out: &mut Out<'_>, tag: u8, bytes: &[u8]) {
    out.u8(tag);
    out.u32(len_u32(bytes.len()));
    out.put(bytes);
}
