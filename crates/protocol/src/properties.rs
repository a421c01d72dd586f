//! Hand-written decoder of content headers (class id, weight, body size, basic properties) and
//! of field tables, the one structure on the publish hot path that amq-protocol decodes slowly
//! (its nom combinators move the 300-octet properties struct through every layer and collect
//! strings octet by octet; `benches/codec.rs` measured it at most of a publish's decode time).
//!
//! It accepts exactly what amq-protocol's `parse_content_header` and `parse_field_table`
//! accept, and produces the same values, which `tests/protocol/protocol_props.rs` checks on valid,
//! mutated and arbitrary payloads: short strings must be UTF-8, the type tags are RabbitMQ's
//! (`s`/`U` signed 16-bit, `l`/`L` signed 64-bit, no short-string type), a table or array must
//! be filled exactly by its entries, a repeated key keeps its last value, the weight is read and
//! ignored, and only one property-flags word is read. Recursion follows table nesting, which
//! callers bound first with the non-recursive scan in `table_scan` (`decode` and
//! `decode_field_table` do). No tokio, no broker.

use amq_protocol::frame::AMQPContentHeader;
use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
};

/// A cursor over untrusted octets: every read checks the remaining length first.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.rest.split_at_checked(n)?;
        self.rest = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_be_bytes)
    }

    fn short_string(&mut self) -> Option<ShortString> {
        let len = self.u8()?;
        let text = std::str::from_utf8(self.take(usize::from(len))?).ok()?;
        // At most 255 octets: the length is one octet.
        ShortString::try_new(text).ok()
    }

    fn long_bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        self.take(len)
    }
}

/// Decodes a content header payload; `None` where amq-protocol's parser fails.
pub(crate) fn decode_content_header(payload: &[u8]) -> Option<AMQPContentHeader> {
    let mut r = Reader { rest: payload };
    let class_id = r.u16()?;
    let _weight = r.u16()?;
    let body_size = r.u64()?;
    let properties = decode_properties(&mut r)?;
    r.rest.is_empty().then_some(AMQPContentHeader {
        class_id,
        body_size,
        properties,
    })
}

/// The basic properties: a flags word, then each present property in flag order (bit 15
/// first).
fn decode_properties(r: &mut Reader<'_>) -> Option<BasicProperties> {
    let flags = r.u16()?;
    let has = |bit: u16| flags & (1 << bit) != 0;
    let mut p = BasicProperties::default();
    if has(15) {
        p = p.with_content_type(r.short_string()?);
    }
    if has(14) {
        p = p.with_content_encoding(r.short_string()?);
    }
    if has(13) {
        p = p.with_headers(decode_table(r)?);
    }
    if has(12) {
        p = p.with_delivery_mode(r.u8()?);
    }
    if has(11) {
        p = p.with_priority(r.u8()?);
    }
    if has(10) {
        p = p.with_correlation_id(r.short_string()?);
    }
    if has(9) {
        p = p.with_reply_to(r.short_string()?);
    }
    if has(8) {
        p = p.with_expiration(r.short_string()?);
    }
    if has(7) {
        p = p.with_message_id(r.short_string()?);
    }
    if has(6) {
        p = p.with_timestamp(r.u64()?);
    }
    if has(5) {
        p = p.with_type(r.short_string()?);
    }
    if has(4) {
        p = p.with_user_id(r.short_string()?);
    }
    if has(3) {
        p = p.with_app_id(r.short_string()?);
    }
    if has(2) {
        p = p.with_cluster_id(r.short_string()?);
    }
    Some(p)
}

/// Decodes one table that must fill `bytes` exactly.
pub(crate) fn decode_whole_table(bytes: &[u8]) -> Option<FieldTable> {
    let mut r = Reader { rest: bytes };
    let table = decode_table(&mut r)?;
    r.rest.is_empty().then_some(table)
}

/// A 32-bit length, then entries filling exactly that many octets.
fn decode_table(r: &mut Reader<'_>) -> Option<FieldTable> {
    let mut inner = Reader {
        rest: r.long_bytes()?,
    };
    let mut table = FieldTable::default();
    while !inner.rest.is_empty() {
        let key = inner.short_string()?;
        let value = decode_value(&mut inner)?;
        table.insert(key, value);
    }
    Some(table)
}

/// A type tag and its value, with amq-protocol's (RabbitMQ's) reading of the tags.
fn decode_value(r: &mut Reader<'_>) -> Option<AMQPValue> {
    Some(match r.u8()? {
        b't' => AMQPValue::Boolean(r.u8()? != 0),
        b'b' => AMQPValue::ShortShortInt(i8::from_be_bytes(r.array()?)),
        b'B' => AMQPValue::ShortShortUInt(r.u8()?),
        b's' | b'U' => AMQPValue::ShortInt(i16::from_be_bytes(r.array()?)),
        b'u' => AMQPValue::ShortUInt(r.u16()?),
        b'I' => AMQPValue::LongInt(i32::from_be_bytes(r.array()?)),
        b'i' => AMQPValue::LongUInt(r.u32()?),
        b'L' | b'l' => AMQPValue::LongLongInt(i64::from_be_bytes(r.array()?)),
        b'f' => AMQPValue::Float(f32::from_be_bytes(r.array()?)),
        b'd' => AMQPValue::Double(f64::from_be_bytes(r.array()?)),
        b'D' => AMQPValue::DecimalValue(DecimalValue {
            scale: r.u8()?,
            value: r.u32()?,
        }),
        b'S' => AMQPValue::LongString(LongString::from(r.long_bytes()?)),
        b'A' => {
            let mut inner = Reader {
                rest: r.long_bytes()?,
            };
            let mut values = Vec::new();
            while !inner.rest.is_empty() {
                values.push(decode_value(&mut inner)?);
            }
            AMQPValue::FieldArray(FieldArray::from(values))
        }
        b'T' => AMQPValue::Timestamp(r.u64()?),
        b'F' => AMQPValue::FieldTable(decode_table(r)?),
        b'x' => AMQPValue::ByteArray(ByteArray::from(r.long_bytes()?)),
        b'V' => AMQPValue::Void,
        _ => return None,
    })
}
