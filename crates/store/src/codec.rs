//! Broker events <-> write-ahead log records, by hand, byte for byte as `storage-format.md`
//! ("Store records") describes them. One WAL record kind per event type; every integer is
//! little-endian through the WAL's one helper (`wal::record::le`, STYLE 3.8). The decoder
//! distrusts every byte: each length is checked against what is left of the payload before
//! anything is allocated, nesting is bounded by `limits::FIELD_TABLE_DEPTH_MAX`, reserved bits
//! and trailing bytes are refused, and nothing panics (S-ERR-2).
//!
//! Pure functions over byte slices: no I/O, no state. Depends on `broker::types`/`value` (the
//! event vocabulary), `wal::record::le` and `limits`; must not depend on the WAL's files,
//! `protocol` or `server`.
#![warn(clippy::indexing_slicing)]

use std::sync::Arc;

use bytes::Bytes;

use wharf_base::limits;
use wharf_broker::Placement;
use wharf_broker::{
    ApplyTo, DelayedType, DestName, Event, ExchangeKind, Message, MessageId, MessageRecord,
    PolicySpec, Properties, SettleKind, StoredAt, StoredEvent, StoredMessage,
};
use wharf_broker::{FieldTable, Value};
use wharf_wal::record::le;

/// The store record format this build writes and the newest it reads. Written in a
/// [`RecordKind::Format`] record each time a store is opened; a log announcing a newer
/// version is refused rather than guessed at.
pub const STORE_FORMAT_VERSION: u16 = 2;

/// The WAL record kind of each store record (the frame's `kind` byte). Values are part of the
/// format: never reuse or renumber one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordKind {
    /// The store format version, written at every open.
    Format = 0x01,
    /// [`Event::VhostAdded`].
    VhostAdded = 0x10,
    /// [`Event::VhostDeleted`].
    VhostDeleted = 0x11,
    /// [`Event::ExchangeDeclared`].
    ExchangeDeclared = 0x12,
    /// [`Event::ExchangeDeleted`].
    ExchangeDeleted = 0x13,
    /// [`Event::QueueDeclared`].
    QueueDeclared = 0x14,
    /// [`Event::QueueDeleted`].
    QueueDeleted = 0x15,
    /// [`Event::Bound`].
    Bound = 0x16,
    /// [`Event::Unbound`].
    Unbound = 0x17,
    /// [`Event::PolicySet`].
    PolicySet = 0x18,
    /// [`Event::PolicyCleared`].
    PolicyCleared = 0x19,
    /// [`Event::UserPut`] (format 2).
    UserPut = 0x1A,
    /// [`Event::UserDeleted`] (format 2).
    UserDeleted = 0x1B,
    /// [`Event::PermissionSet`] (format 2).
    PermissionSet = 0x1C,
    /// [`Event::PermissionCleared`] (format 2).
    PermissionCleared = 0x1D,
    /// [`Event::Published`].
    Published = 0x20,
    /// [`Event::Scheduled`].
    Scheduled = 0x21,
    /// [`Event::Unscheduled`].
    Unscheduled = 0x22,
    /// [`Event::Settled`].
    Settled = 0x23,
    /// [`Event::Delivered`].
    Delivered = 0x24,
    /// [`Event::Returned`].
    Returned = 0x25,
    /// [`Event::DeadLettered`].
    DeadLettered = 0x26,
    /// [`Event::Purged`].
    Purged = 0x27,
}

impl RecordKind {
    /// Every kind, for tests and the inspector.
    pub const ALL: [RecordKind; 23] = [
        RecordKind::Format,
        RecordKind::VhostAdded,
        RecordKind::VhostDeleted,
        RecordKind::ExchangeDeclared,
        RecordKind::ExchangeDeleted,
        RecordKind::QueueDeclared,
        RecordKind::QueueDeleted,
        RecordKind::Bound,
        RecordKind::Unbound,
        RecordKind::PolicySet,
        RecordKind::PolicyCleared,
        RecordKind::UserPut,
        RecordKind::UserDeleted,
        RecordKind::PermissionSet,
        RecordKind::PermissionCleared,
        RecordKind::Published,
        RecordKind::Scheduled,
        RecordKind::Unscheduled,
        RecordKind::Settled,
        RecordKind::Delivered,
        RecordKind::Returned,
        RecordKind::DeadLettered,
        RecordKind::Purged,
    ];

    /// The kind byte.
    pub fn byte(self) -> u8 {
        self as u8
    }

    /// The kind a byte names, if any.
    pub fn from_byte(byte: u8) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|k| k.byte() == byte)
    }

    /// The kind that records `event`.
    pub fn of(event: &Event) -> RecordKind {
        match event {
            Event::VhostAdded { .. } => RecordKind::VhostAdded,
            Event::VhostDeleted { .. } => RecordKind::VhostDeleted,
            Event::ExchangeDeclared { .. } => RecordKind::ExchangeDeclared,
            Event::ExchangeDeleted { .. } => RecordKind::ExchangeDeleted,
            Event::QueueDeclared { .. } => RecordKind::QueueDeclared,
            Event::QueueDeleted { .. } => RecordKind::QueueDeleted,
            Event::Bound { .. } => RecordKind::Bound,
            Event::Unbound { .. } => RecordKind::Unbound,
            Event::PolicySet { .. } => RecordKind::PolicySet,
            Event::PolicyCleared { .. } => RecordKind::PolicyCleared,
            Event::Published { .. } => RecordKind::Published,
            Event::Scheduled { .. } => RecordKind::Scheduled,
            Event::Unscheduled { .. } => RecordKind::Unscheduled,
            Event::Settled { .. } => RecordKind::Settled,
            Event::Delivered { .. } => RecordKind::Delivered,
            Event::Returned { .. } => RecordKind::Returned,
            Event::DeadLettered { .. } => RecordKind::DeadLettered,
            Event::Purged { .. } => RecordKind::Purged,
            Event::UserPut { .. } => RecordKind::UserPut,
            Event::UserDeleted { .. } => RecordKind::UserDeleted,
            Event::PermissionSet { .. } => RecordKind::PermissionSet,
            Event::PermissionCleared { .. } => RecordKind::PermissionCleared,
        }
    }
}

/// One decoded store record.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreRecord {
    /// The format marker written at open.
    Format {
        /// The store format version of the records that follow.
        version: u16,
    },
    /// A broker event, for `Broker::apply`.
    Event(Event),
}

/// An event that cannot be encoded: a field longer than its length prefix allows, or
/// nesting deeper than the protocol accepts. Nothing was appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A name longer than a `u16` length prefix (names come from AMQP short strings, at most
    /// 255 bytes; only the embedded API could pass a longer one).
    #[error("{field} of {len} bytes is too long for the store format (max {max})")]
    TooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The format's maximum.
        max: usize,
    },
    /// A field table or array nested deeper than `limits::FIELD_TABLE_DEPTH_MAX`.
    #[error("field table nested deeper than {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
}

/// A payload that is not a valid store record. `offset` is inside the payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable store record (kind {kind:#04x}) at payload byte {offset}: {what}")]
pub struct DecodeError {
    /// The record kind byte.
    pub kind: u8,
    /// Byte offset in the payload where decoding failed.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}

// ----- primitive layout (storage-format.md, "Primitives") -----

/// Names (vhost, exchange, queue, routing key, table keys, short properties) carry a `u16`
/// length; texts (policy pattern and definition, string values, bodies) a `u32` one.
const NAME_BYTES_MAX: usize = u16::MAX as usize;

// Flag bits, one per optional or boolean field, so an unknown bit is detectable.
const FLAG_AUTO_DELETE: u8 = 1 << 0;
const FLAG_INTERNAL: u8 = 1 << 1;
const FLAG_MESSAGE_TTL: u8 = 1 << 0;
const FLAG_SCHEDULED: u8 = 1 << 0;
const FLAG_DL_FROM: u8 = 1 << 0;
const FLAG_DL_MESSAGE: u8 = 1 << 1;

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

/// Appends little-endian fields to a record payload.
struct Enc<'a> {
    out: &'a mut Vec<u8>,
}

impl Enc<'_> {
    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    fn u16(&mut self, v: u16) {
        le::put_u16(self.out, v);
    }
    fn u32(&mut self, v: u32) {
        le::put_u32(self.out, v);
    }
    fn u64(&mut self, v: u64) {
        le::put_u64(self.out, v);
    }
    fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    fn name(&mut self, field: &'static str, s: &str) -> Result<(), EncodeError> {
        let len = u16::try_from(s.len()).map_err(|_| EncodeError::TooLong {
            field,
            len: s.len(),
            max: NAME_BYTES_MAX,
        })?;
        self.u16(len);
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }
    fn bytes32(&mut self, field: &'static str, b: &[u8]) -> Result<(), EncodeError> {
        let len = u32::try_from(b.len()).map_err(|_| EncodeError::TooLong {
            field,
            len: b.len(),
            max: u32::MAX as usize,
        })?;
        self.u32(len);
        self.out.extend_from_slice(b);
        Ok(())
    }
    fn count(&mut self, field: &'static str, n: usize) -> Result<(), EncodeError> {
        let n = u32::try_from(n).map_err(|_| EncodeError::TooLong {
            field,
            len: n,
            max: u32::MAX as usize,
        })?;
        self.u32(n);
        Ok(())
    }
    fn names(&mut self, field: &'static str, names: &[String]) -> Result<(), EncodeError> {
        self.count(field, names.len())?;
        for n in names {
            self.name(field, n)?;
        }
        Ok(())
    }
    fn ids(&mut self, ids: &[MessageId]) -> Result<(), EncodeError> {
        self.count("id list", ids.len())?;
        for id in ids {
            self.u64(id.0);
        }
        Ok(())
    }
}

/// Reads fields from a record payload; every read checks what is left first.
struct Dec<'a> {
    /// The buffer `buf` is a slice of, when the caller has one: bodies are then shared slices
    /// of it instead of copies.
    owner: Option<&'a Bytes>,
    buf: &'a [u8],
    at: usize,
    kind: u8,
}

impl<'a> Dec<'a> {
    /// A decoder over `buf`, a payload of record kind `kind`, copying what it keeps.
    fn new(buf: &'a [u8], kind: u8) -> Self {
        Dec {
            owner: None,
            buf,
            at: 0,
            kind,
        }
    }

    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError {
            kind: self.kind,
            offset: self.at,
            what,
        }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or_else(|| self.err(what))?;
        let bytes = self.buf.get(self.at..end).ok_or_else(|| self.err(what))?;
        self.at = end;
        Ok(bytes)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.at).ok_or_else(|| self.err(what))?;
        self.at += 1;
        Ok(b)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let v = le::u16_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += size_of::<u16>();
        Ok(v)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let v = le::u32_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += size_of::<u32>();
        Ok(v)
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let v = le::u64_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += size_of::<u64>();
        Ok(v)
    }
    fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.err("boolean byte other than 0 or 1")),
        }
    }
    /// A flags byte whose bits outside `known` must be zero.
    fn flags(&mut self, known: u8, what: &'static str) -> Result<u8, DecodeError> {
        let f = self.u8(what)?;
        if f & !known != 0 {
            return Err(self.err("reserved flag bit set"));
        }
        Ok(f)
    }
    fn utf8(&self, bytes: &[u8]) -> Result<String, DecodeError> {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| self.err("string is not UTF-8"))
    }
    /// A `name`'s bytes stepped over (length checked, content not: its full decode checks
    /// it).
    fn skip_name(&mut self, what: &'static str) -> Result<(), DecodeError> {
        let n = usize::from(self.u16(what)?);
        self.take(n, what).map(|_| ())
    }

    fn name(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let len = self.u16(what)?;
        let bytes = self.take(usize::from(len), what)?;
        self.utf8(bytes)
    }
    /// `u32` length + bytes; the length is checked against what is left before copying.
    fn bytes32(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(what)?;
        let len = usize::try_from(len).map_err(|_| self.err(what))?;
        self.take(len, what)
    }
    fn text(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let bytes = self.bytes32(what)?;
        self.utf8(bytes)
    }
    /// A count of items each at least `item_bytes_min` long, checked against what is left so
    /// that a damaged count cannot make us allocate or loop beyond the payload.
    fn count(&mut self, item_bytes_min: usize, what: &'static str) -> Result<usize, DecodeError> {
        let n = usize::try_from(self.u32(what)?).map_err(|_| self.err(what))?;
        let left = self.buf.len().saturating_sub(self.at);
        match n.checked_mul(item_bytes_min) {
            Some(need) if need <= left => Ok(n),
            _ => Err(self.err("count larger than the record")),
        }
    }
    fn names(&mut self, what: &'static str) -> Result<Vec<String>, DecodeError> {
        let n = self.count(size_of::<u16>(), what)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.name(what)?);
        }
        Ok(out)
    }
    fn ids(&mut self) -> Result<Vec<MessageId>, DecodeError> {
        let n = self.count(size_of::<u64>(), "id list")?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(MessageId(self.u64("message id")?));
        }
        Ok(out)
    }
    fn finish(&self) -> Result<(), DecodeError> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(self.err("trailing bytes after the record"))
        }
    }
}

// ----- field tables and values (storage-format.md, "Field tables") -----

// Value tags: AMQP's (RabbitMQ's) type letters, plus `z` for a short string, which RabbitMQ's
// table letters lack (its `s` is a signed 16-bit integer).
const TAG_BOOL: u8 = b't';
const TAG_I8: u8 = b'b';
const TAG_U8: u8 = b'B';
const TAG_I16: u8 = b's';
const TAG_U16: u8 = b'u';
const TAG_I32: u8 = b'I';
const TAG_U32: u8 = b'i';
const TAG_I64: u8 = b'l';
const TAG_F32: u8 = b'f';
const TAG_F64: u8 = b'd';
const TAG_DECIMAL: u8 = b'D';
const TAG_SHORT_STR: u8 = b'z';
const TAG_LONG_STR: u8 = b'S';
const TAG_ARRAY: u8 = b'A';
const TAG_TIMESTAMP: u8 = b'T';
const TAG_TABLE: u8 = b'F';
const TAG_BYTES: u8 = b'x';
const TAG_VOID: u8 = b'V';

/// Bytes of the smallest table entry (empty key, `V` value) and array item (`V`).
const TABLE_ENTRY_BYTES_MIN: usize = size_of::<u16>() + 1;
const ARRAY_ITEM_BYTES_MIN: usize = 1;

/// `depth` counts containers from the top-level table (depth 1), as the protocol's decoder
/// does, so whatever it accepted can be stored.
fn put_table(e: &mut Enc<'_>, t: &FieldTable, depth: usize) -> Result<(), EncodeError> {
    if depth > limits::FIELD_TABLE_DEPTH_MAX {
        return Err(EncodeError::TooDeep {
            max: limits::FIELD_TABLE_DEPTH_MAX,
        });
    }
    e.count("field table", t.len())?;
    for (k, v) in t.iter() {
        e.name("field table key", k)?;
        put_value(e, v, depth)?;
    }
    Ok(())
}

fn put_value(e: &mut Enc<'_>, v: &Value, depth: usize) -> Result<(), EncodeError> {
    match v {
        Value::Bool(b) => {
            e.u8(TAG_BOOL);
            e.bool(*b);
        }
        Value::I8(n) => {
            e.u8(TAG_I8);
            e.u8(n.cast_unsigned());
        }
        Value::U8(n) => {
            e.u8(TAG_U8);
            e.u8(*n);
        }
        Value::I16(n) => {
            e.u8(TAG_I16);
            e.u16(n.cast_unsigned());
        }
        Value::U16(n) => {
            e.u8(TAG_U16);
            e.u16(*n);
        }
        Value::I32(n) => {
            e.u8(TAG_I32);
            e.u32(n.cast_unsigned());
        }
        Value::U32(n) => {
            e.u8(TAG_U32);
            e.u32(*n);
        }
        Value::I64(n) => {
            e.u8(TAG_I64);
            e.u64(n.cast_unsigned());
        }
        Value::F32(f) => {
            e.u8(TAG_F32);
            e.u32(f.to_bits());
        }
        Value::F64(f) => {
            e.u8(TAG_F64);
            e.u64(f.to_bits());
        }
        Value::Decimal { scale, value } => {
            e.u8(TAG_DECIMAL);
            e.u8(*scale);
            e.u32(*value);
        }
        Value::Timestamp(t) => {
            e.u8(TAG_TIMESTAMP);
            e.u64(*t);
        }
        Value::Void => e.u8(TAG_VOID),
        Value::ShortStr(_)
        | Value::LongStr(_)
        | Value::Bytes(_)
        | Value::Array(_)
        | Value::Table(_) => put_container(e, v, depth)?,
    }
    Ok(())
}

/// The values with a length: strings, byte strings, arrays and nested tables.
fn put_container(e: &mut Enc<'_>, v: &Value, depth: usize) -> Result<(), EncodeError> {
    match v {
        Value::ShortStr(s) => {
            e.u8(TAG_SHORT_STR);
            e.bytes32("short string value", s.as_bytes())?;
        }
        Value::LongStr(b) => {
            e.u8(TAG_LONG_STR);
            e.bytes32("long string value", b)?;
        }
        Value::Bytes(b) => {
            e.u8(TAG_BYTES);
            e.bytes32("byte array value", b)?;
        }
        Value::Array(items) => {
            if depth >= limits::FIELD_TABLE_DEPTH_MAX {
                return Err(EncodeError::TooDeep {
                    max: limits::FIELD_TABLE_DEPTH_MAX,
                });
            }
            e.u8(TAG_ARRAY);
            e.count("array", items.len())?;
            for item in items {
                put_value(e, item, depth + 1)?;
            }
        }
        Value::Table(t) => {
            e.u8(TAG_TABLE);
            put_table(e, t, depth + 1)?;
        }
        _ => unreachable!("put_value sends only containers here"),
    }
    Ok(())
}

fn get_table(d: &mut Dec<'_>, depth: usize) -> Result<FieldTable, DecodeError> {
    if depth > limits::FIELD_TABLE_DEPTH_MAX {
        return Err(d.err("field table nested too deep"));
    }
    let n = d.count(TABLE_ENTRY_BYTES_MIN, "field table")?;
    let mut t = FieldTable::new();
    for _ in 0..n {
        let key = d.name("field table key")?;
        let value = get_value(d, depth)?;
        let before = t.len();
        t.insert(key, value);
        // The encoder never writes a key twice (FieldTable keeps keys unique); a repeat is
        // damage, and silently keeping one of the two would change the message.
        if t.len() == before {
            return Err(d.err("field table key repeated"));
        }
    }
    Ok(t)
}

fn get_value(d: &mut Dec<'_>, depth: usize) -> Result<Value, DecodeError> {
    let tag = d.u8("value tag")?;
    let v = match tag {
        TAG_BOOL => Value::Bool(d.bool("bool value")?),
        TAG_I8 => Value::I8(d.u8("i8 value")?.cast_signed()),
        TAG_U8 => Value::U8(d.u8("u8 value")?),
        TAG_I16 => Value::I16(d.u16("i16 value")?.cast_signed()),
        TAG_U16 => Value::U16(d.u16("u16 value")?),
        TAG_I32 => Value::I32(d.u32("i32 value")?.cast_signed()),
        TAG_U32 => Value::U32(d.u32("u32 value")?),
        TAG_I64 => Value::I64(d.u64("i64 value")?.cast_signed()),
        TAG_F32 => Value::F32(f32::from_bits(d.u32("f32 value")?)),
        TAG_F64 => Value::F64(f64::from_bits(d.u64("f64 value")?)),
        TAG_DECIMAL => Value::Decimal {
            scale: d.u8("decimal scale")?,
            value: d.u32("decimal value")?,
        },
        TAG_TIMESTAMP => Value::Timestamp(d.u64("timestamp value")?),
        TAG_VOID => Value::Void,
        TAG_SHORT_STR => Value::ShortStr(d.text("short string value")?),
        TAG_LONG_STR => Value::LongStr(d.bytes32("long string value")?.to_vec()),
        TAG_BYTES => Value::Bytes(d.bytes32("byte array value")?.to_vec()),
        TAG_ARRAY => {
            if depth >= limits::FIELD_TABLE_DEPTH_MAX {
                return Err(d.err("array nested too deep"));
            }
            let n = d.count(ARRAY_ITEM_BYTES_MIN, "array")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(get_value(d, depth + 1)?);
            }
            Value::Array(items)
        }
        TAG_TABLE => Value::Table(get_table(d, depth + 1)?),
        _ => return Err(d.err("unknown value tag")),
    };
    Ok(v)
}

// ----- properties and messages (storage-format.md, "Properties", "Message") -----

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
/// rest). Only a headers table is decoded, to find its end.
fn skip_properties(d: &mut Dec<'_>) -> Result<(), DecodeError> {
    let mask = d.u16("property mask")?;
    if mask & !PROP_ALL != 0 {
        return Err(d.err("reserved property bit set"));
    }
    for bit in 0..14u16 {
        let b = 1 << bit;
        if mask & b == 0 {
            continue;
        }
        match b {
            PROP_HEADERS => {
                get_table(d, 1)?;
            }
            PROP_DELIVERY_MODE | PROP_PRIORITY => {
                d.u8("property")?;
            }
            PROP_TIMESTAMP => {
                d.u64("timestamp")?;
            }
            _ => d.skip_name("property")?,
        }
    }
    Ok(())
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

fn put_message(e: &mut Enc<'_>, m: &Message) -> Result<(), EncodeError> {
    e.u64(m.id.0);
    e.u64(m.enqueued_at_ms);
    match m.ttl_ms {
        Some(ttl) => {
            e.u8(FLAG_MESSAGE_TTL);
            e.u32(ttl);
        }
        None => e.u8(0),
    }
    e.name("exchange", &m.exchange)?;
    e.name("routing key", &m.routing_key)?;
    put_properties(e, &m.properties)?;
    e.bytes32("body", &m.body)
}

/// A Message part's fixed fields: id, enqueue time, own TTL.
fn get_message_head(d: &mut Dec<'_>) -> Result<(MessageId, u64, Option<u32>), DecodeError> {
    let id = MessageId(d.u64("message id")?);
    let enqueued_at_ms = d.u64("enqueued at")?;
    let flags = d.flags(FLAG_MESSAGE_TTL, "message flags")?;
    let ttl_ms = if flags & FLAG_MESSAGE_TTL != 0 {
        Some(d.u32("message ttl")?)
    } else {
        None
    };
    Ok((id, enqueued_at_ms, ttl_ms))
}

fn get_message(d: &mut Dec<'_>) -> Result<MessageRecord, DecodeError> {
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

// ----- small enums (storage-format.md, "Enumerations") -----

fn exchange_kind_byte(k: ExchangeKind) -> u8 {
    match k {
        ExchangeKind::Direct => 0,
        ExchangeKind::Fanout => 1,
        ExchangeKind::Topic => 2,
        ExchangeKind::Headers => 3,
        ExchangeKind::Delayed(DelayedType::Direct) => 4,
        ExchangeKind::Delayed(DelayedType::Fanout) => 5,
        ExchangeKind::Delayed(DelayedType::Topic) => 6,
        ExchangeKind::Delayed(DelayedType::Headers) => 7,
    }
}

fn exchange_kind_of(b: u8) -> Option<ExchangeKind> {
    Some(match b {
        0 => ExchangeKind::Direct,
        1 => ExchangeKind::Fanout,
        2 => ExchangeKind::Topic,
        3 => ExchangeKind::Headers,
        4 => ExchangeKind::Delayed(DelayedType::Direct),
        5 => ExchangeKind::Delayed(DelayedType::Fanout),
        6 => ExchangeKind::Delayed(DelayedType::Topic),
        7 => ExchangeKind::Delayed(DelayedType::Headers),
        _ => return None,
    })
}

fn apply_to_byte(a: ApplyTo) -> u8 {
    match a {
        ApplyTo::Queues => 0,
        ApplyTo::Exchanges => 1,
        ApplyTo::All => 2,
    }
}

fn apply_to_of(b: u8) -> Option<ApplyTo> {
    Some(match b {
        0 => ApplyTo::Queues,
        1 => ApplyTo::Exchanges,
        2 => ApplyTo::All,
        _ => return None,
    })
}

fn settle_kind_byte(k: SettleKind) -> u8 {
    match k {
        SettleKind::Ack => 0,
        SettleKind::Expire => 1,
        SettleKind::Discard => 2,
    }
}

fn settle_kind_of(b: u8) -> Option<SettleKind> {
    Some(match b {
        0 => SettleKind::Ack,
        1 => SettleKind::Expire,
        2 => SettleKind::Discard,
        _ => return None,
    })
}

fn put_dest(e: &mut Enc<'_>, dest: &DestName) -> Result<(), EncodeError> {
    match dest {
        DestName::Queue(q) => {
            e.u8(0);
            e.name("destination queue", q)
        }
        DestName::Exchange(x) => {
            e.u8(1);
            e.name("destination exchange", x)
        }
    }
}

fn get_dest(d: &mut Dec<'_>) -> Result<DestName, DecodeError> {
    match d.u8("destination type")? {
        0 => Ok(DestName::Queue(d.name("destination queue")?)),
        1 => Ok(DestName::Exchange(d.name("destination exchange")?)),
        _ => Err(d.err("unknown destination type")),
    }
}

// ----- records -----

/// Appends the payload of the format marker to `out`; returns its kind.
pub fn encode_format(out: &mut Vec<u8>) -> RecordKind {
    le::put_u16(out, STORE_FORMAT_VERSION);
    RecordKind::Format
}

/// Appends the record payload of `event` to `out` and returns its kind. On error `out` may
/// hold a partial payload; the caller discards it.
///
/// # Errors
/// [`EncodeError`] when a field does not fit the format (see its variants).
pub fn encode_event(event: &Event, out: &mut Vec<u8>) -> Result<RecordKind, EncodeError> {
    let e = &mut Enc { out };
    match event {
        Event::VhostAdded { vhost } | Event::VhostDeleted { vhost } => e.name("vhost", vhost)?,
        Event::ExchangeDeclared { .. } | Event::QueueDeclared { .. } => put_declared(e, event)?,
        Event::ExchangeDeleted {
            vhost,
            exchange: name,
        }
        | Event::QueueDeleted { vhost, queue: name } => {
            e.name("vhost", vhost)?;
            e.name("name", name)?;
        }
        Event::Bound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        }
        | Event::Unbound {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
        } => {
            e.name("vhost", vhost)?;
            e.name("source", source)?;
            put_dest(e, destination)?;
            e.name("routing key", routing_key)?;
            put_table(e, arguments, 1)?;
        }
        Event::PolicySet { .. } | Event::PolicyCleared { .. } => put_policy(e, event)?,
        Event::Published { .. }
        | Event::Scheduled { .. }
        | Event::Unscheduled { .. }
        | Event::DeadLettered { .. } => put_message_event(e, event)?,
        Event::Settled {
            vhost,
            queue,
            ids,
            kind,
        } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.u8(settle_kind_byte(*kind));
            e.ids(ids)?;
        }
        Event::Delivered { vhost, queue, ids }
        | Event::Returned { vhost, queue, ids }
        | Event::Purged { vhost, queue, ids } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.ids(ids)?;
        }
        Event::UserPut { .. }
        | Event::UserDeleted { .. }
        | Event::PermissionSet { .. }
        | Event::PermissionCleared { .. } => put_access(e, event)?,
    }
    Ok(RecordKind::of(event))
}

/// Users and permissions (format 2). User records carry no vhost; permission records start
/// with theirs, like every other record.
fn put_access(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::UserPut {
            name,
            password_hash,
            tags,
        } => {
            e.name("user", name)?;
            e.bytes32("password hash", password_hash.as_bytes())?;
            e.names("tag", tags)
        }
        Event::UserDeleted { name } => e.name("user", name),
        Event::PermissionSet {
            user,
            vhost,
            configure,
            write,
            read,
        } => {
            e.name("vhost", vhost)?;
            e.name("user", user)?;
            e.bytes32("configure regex", configure.as_bytes())?;
            e.bytes32("write regex", write.as_bytes())?;
            e.bytes32("read regex", read.as_bytes())
        }
        Event::PermissionCleared { user, vhost } => {
            e.name("vhost", vhost)?;
            e.name("user", user)
        }
        _ => unreachable!("encode_event sends only users and permissions here"),
    }
}

fn get_user_event(d: &mut Dec<'_>, k: RecordKind) -> Result<Event, DecodeError> {
    let name = d.name("user")?;
    Ok(match k {
        RecordKind::UserPut => Event::UserPut {
            name,
            password_hash: d.text("password hash")?,
            tags: d.names("tag")?,
        },
        _ => Event::UserDeleted { name },
    })
}

fn put_declared(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::ExchangeDeclared {
            vhost,
            exchange,
            kind,
            auto_delete,
            internal,
            arguments,
        } => {
            e.name("vhost", vhost)?;
            e.name("exchange", exchange)?;
            e.u8(exchange_kind_byte(*kind));
            let flags = if *auto_delete { FLAG_AUTO_DELETE } else { 0 }
                | if *internal { FLAG_INTERNAL } else { 0 };
            e.u8(flags);
            put_table(e, arguments, 1)
        }
        Event::QueueDeclared {
            vhost,
            queue,
            auto_delete,
            arguments,
        } => {
            e.name("vhost", vhost)?;
            e.name("queue", queue)?;
            e.u8(if *auto_delete { FLAG_AUTO_DELETE } else { 0 });
            put_table(e, arguments, 1)
        }
        _ => unreachable!("encode_event sends only declarations here"),
    }
}

fn put_policy(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::PolicySet {
            vhost,
            policy,
            operator,
        } => {
            e.name("vhost", vhost)?;
            e.bool(*operator);
            e.name("policy name", &policy.name)?;
            e.bytes32("policy pattern", policy.pattern.as_bytes())?;
            e.u8(apply_to_byte(policy.apply_to));
            e.u32(policy.priority.cast_unsigned());
            e.bytes32("policy definition", policy.definition.as_bytes())
        }
        Event::PolicyCleared {
            vhost,
            name,
            operator,
        } => {
            e.name("vhost", vhost)?;
            e.bool(*operator);
            e.name("policy name", name)
        }
        _ => unreachable!("encode_event sends only policies here"),
    }
}

fn put_message_event(e: &mut Enc<'_>, event: &Event) -> Result<(), EncodeError> {
    match event {
        Event::Published {
            vhost,
            message,
            queues,
            scheduled,
        } => {
            e.name("vhost", vhost)?;
            match scheduled {
                Some(id) => {
                    e.u8(FLAG_SCHEDULED);
                    e.u64(id.0);
                }
                None => e.u8(0),
            }
            e.names("queue", queues)?;
            put_message(e, &message.message)
        }
        Event::Scheduled {
            vhost,
            exchange,
            message,
        } => {
            e.name("vhost", vhost)?;
            e.name("exchange", exchange)?;
            put_message(e, &message.message)
        }
        Event::Unscheduled { vhost, id } => {
            e.name("vhost", vhost)?;
            e.u64(id.0);
            Ok(())
        }
        Event::DeadLettered {
            vhost,
            from,
            id,
            message,
            targets,
        } => {
            e.name("vhost", vhost)?;
            let flags = if from.is_some() { FLAG_DL_FROM } else { 0 }
                | if message.is_some() {
                    FLAG_DL_MESSAGE
                } else {
                    0
                };
            e.u8(flags);
            if let Some(from) = from {
                e.name("source queue", from)?;
            }
            e.u64(id.0);
            e.names("target queue", targets)?;
            match message {
                Some(m) => put_message(e, &m.message),
                None => Ok(()),
            }
        }
        _ => unreachable!("encode_event sends only message events here"),
    }
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
        _ => StoreRecord::Event(get_event(d, k)?),
    };
    d.finish()?;
    Ok(record)
}

fn get_event(d: &mut Dec<'_>, k: RecordKind) -> Result<Event, DecodeError> {
    let vhost = d.name("vhost")?;
    Ok(match k {
        RecordKind::Format | RecordKind::UserPut | RecordKind::UserDeleted => {
            unreachable!("decode handles the format marker and user records")
        }
        RecordKind::PermissionSet => Event::PermissionSet {
            user: d.name("user")?,
            vhost,
            configure: d.text("configure regex")?,
            write: d.text("write regex")?,
            read: d.text("read regex")?,
        },
        RecordKind::PermissionCleared => Event::PermissionCleared {
            user: d.name("user")?,
            vhost,
        },
        RecordKind::VhostAdded => Event::VhostAdded { vhost },
        RecordKind::VhostDeleted => Event::VhostDeleted { vhost },
        RecordKind::ExchangeDeclared => get_exchange_declared(d, vhost)?,
        RecordKind::QueueDeclared => {
            let queue = d.name("queue")?;
            let flags = d.flags(FLAG_AUTO_DELETE, "queue flags")?;
            Event::QueueDeclared {
                vhost,
                queue,
                auto_delete: flags & FLAG_AUTO_DELETE != 0,
                arguments: get_table(d, 1)?,
            }
        }
        RecordKind::ExchangeDeleted => Event::ExchangeDeleted {
            vhost,
            exchange: d.name("name")?,
        },
        RecordKind::QueueDeleted => Event::QueueDeleted {
            vhost,
            queue: d.name("name")?,
        },
        RecordKind::Bound | RecordKind::Unbound => {
            let source = d.name("source")?;
            let destination = get_dest(d)?;
            let routing_key = d.name("routing key")?;
            let arguments = get_table(d, 1)?;
            if k == RecordKind::Bound {
                Event::Bound {
                    vhost,
                    source,
                    destination,
                    routing_key,
                    arguments,
                }
            } else {
                Event::Unbound {
                    vhost,
                    source,
                    destination,
                    routing_key,
                    arguments,
                }
            }
        }
        RecordKind::PolicySet | RecordKind::PolicyCleared => get_policy(d, k, vhost)?,
        RecordKind::Published
        | RecordKind::Scheduled
        | RecordKind::Unscheduled
        | RecordKind::DeadLettered => get_message_event(d, k, vhost)?,
        RecordKind::Settled => {
            let queue = d.name("queue")?;
            let kind = d.u8("settle kind")?;
            let kind = settle_kind_of(kind).ok_or_else(|| d.err("unknown settle kind"))?;
            Event::Settled {
                vhost,
                queue,
                ids: d.ids()?,
                kind,
            }
        }
        RecordKind::Delivered | RecordKind::Returned | RecordKind::Purged => {
            let queue = d.name("queue")?;
            let ids = d.ids()?;
            match k {
                RecordKind::Delivered => Event::Delivered { vhost, queue, ids },
                RecordKind::Returned => Event::Returned { vhost, queue, ids },
                _ => Event::Purged { vhost, queue, ids },
            }
        }
    })
}

fn get_exchange_declared(d: &mut Dec<'_>, vhost: String) -> Result<Event, DecodeError> {
    let exchange = d.name("exchange")?;
    let kind = d.u8("exchange type")?;
    let kind = exchange_kind_of(kind).ok_or_else(|| d.err("unknown exchange type"))?;
    let flags = d.flags(FLAG_AUTO_DELETE | FLAG_INTERNAL, "exchange flags")?;
    Ok(Event::ExchangeDeclared {
        vhost,
        exchange,
        kind,
        auto_delete: flags & FLAG_AUTO_DELETE != 0,
        internal: flags & FLAG_INTERNAL != 0,
        arguments: get_table(d, 1)?,
    })
}

fn get_policy(d: &mut Dec<'_>, k: RecordKind, vhost: String) -> Result<Event, DecodeError> {
    let operator = d.bool("operator flag")?;
    let name = d.name("policy name")?;
    if k == RecordKind::PolicyCleared {
        return Ok(Event::PolicyCleared {
            vhost,
            name,
            operator,
        });
    }
    let pattern = d.text("policy pattern")?;
    let apply_to = d.u8("apply-to")?;
    let apply_to = apply_to_of(apply_to).ok_or_else(|| d.err("unknown apply-to"))?;
    let priority = d.u32("policy priority")?.cast_signed();
    let definition = d.text("policy definition")?;
    Ok(Event::PolicySet {
        vhost,
        policy: PolicySpec {
            name,
            pattern,
            apply_to,
            priority,
            definition,
        },
        operator,
    })
}

/// A `Published` payload after the vhost, up to its message: the schedule it ends and the
/// queues.
fn get_published_head(d: &mut Dec<'_>) -> Result<(Option<MessageId>, Vec<String>), DecodeError> {
    let flags = d.flags(FLAG_SCHEDULED, "publish flags")?;
    let scheduled = if flags & FLAG_SCHEDULED != 0 {
        Some(MessageId(d.u64("scheduled id")?))
    } else {
        None
    };
    Ok((scheduled, d.names("queue")?))
}

/// A `DeadLettered` payload after the vhost, up to its message copy: whether there is one,
/// the source queue, the message's id there, the targets.
fn get_dead_letter_head(
    d: &mut Dec<'_>,
) -> Result<(bool, Option<String>, MessageId, Vec<String>), DecodeError> {
    let flags = d.flags(FLAG_DL_FROM | FLAG_DL_MESSAGE, "dead-letter flags")?;
    let from = if flags & FLAG_DL_FROM != 0 {
        Some(d.name("source queue")?)
    } else {
        None
    };
    let id = MessageId(d.u64("message id")?);
    let targets = d.names("target queue")?;
    Ok((flags & FLAG_DL_MESSAGE != 0, from, id, targets))
}

fn get_message_event(d: &mut Dec<'_>, k: RecordKind, vhost: String) -> Result<Event, DecodeError> {
    Ok(match k {
        RecordKind::Published => {
            let (scheduled, queues) = get_published_head(d)?;
            Event::Published {
                vhost,
                message: get_message(d)?,
                queues,
                scheduled,
            }
        }
        RecordKind::Scheduled => Event::Scheduled {
            vhost,
            exchange: d.name("exchange")?,
            message: get_message(d)?,
        },
        RecordKind::Unscheduled => Event::Unscheduled {
            vhost,
            id: MessageId(d.u64("message id")?),
        },
        _ => {
            let (has_copy, from, id, targets) = get_dead_letter_head(d)?;
            let message = if has_copy {
                Some(get_message(d)?)
            } else {
                None
            };
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            }
        }
    })
}

// ----- checkpoint-only records (storage-format.md, "Checkpoints") -----

/// The kind byte of a [`Carried`] record. Checkpoint-only kinds live in `0x30..=0x3F`; they
/// never appear in the log, where [`decode`] refuses them as unknown.
pub const CARRIED_KIND: u8 = 0x30;

const FLAG_REDELIVERED: u8 = 1 << 0;

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
    let e = &mut Enc { out };
    put_placements(e, vhost, placements)?;
    put_message(e, message)
}

/// Decodes the payload of a [`Carried`] record.
///
/// # Errors
/// [`DecodeError`] as for [`decode`]; also no placement at all.
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

// ----- stored messages: content left on disk (DESIGN "Memory") -----

/// Reads a message's fixed fields and checks the rest of it (names, properties, body length)
/// without keeping the content: what memory holds of a message whose body stays on disk.
fn get_stored_message(d: &mut Dec<'_>, at: StoredAt) -> Result<StoredMessage, DecodeError> {
    let (id, enqueued_at_ms, ttl_ms) = get_message_head(d)?;
    d.skip_name("exchange")?;
    d.skip_name("routing key")?;
    skip_properties(d)?;
    let body = d.bytes32("body")?;
    if body.len() > limits::MESSAGE_BODY_BYTES_MAX as usize {
        return Err(d.err("body over limits::MESSAGE_BODY_BYTES_MAX"));
    }
    Ok(StoredMessage {
        id,
        enqueued_at_ms,
        ttl_ms,
        body_len: u32::try_from(body.len()).unwrap_or(u32::MAX),
        at,
    })
}

/// Decodes a `Published` or `DeadLettered` record as recovery applies it, the message's
/// content left on disk at `at` (the record's position); `Ok(None)` for every other kind
/// (decode those with [`decode`]).
///
/// # Errors
/// As [`decode`].
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
/// `Scheduled`, `DeadLettered` with its copy, or a checkpoint's `Carried`. It is always the
/// record's last field, so it runs to the end of the payload.
///
/// # Errors
/// The record holds no message or its fields before the message do not decode.
pub fn message_part(kind: u8, payload: &[u8]) -> Result<&[u8], DecodeError> {
    let d = &mut Dec::new(payload, kind);
    if kind == CARRIED_KIND {
        d.name("vhost")?;
        let n = d.count(size_of::<u16>() + size_of::<u32>() + 1, "placements")?;
        for _ in 0..n {
            d.name("queue")?;
            d.u32("delivery count")?;
            d.flags(FLAG_REDELIVERED, "placement flags")?;
        }
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

/// The id at the start of a Message part, without decoding the rest.
pub fn message_part_id(part: &[u8]) -> Option<MessageId> {
    le::u64_at(part, 0).map(MessageId)
}

/// Decodes a whole Message part (from [`message_part`]).
///
/// # Errors
/// As [`decode`]; also bytes after the message.
pub fn decode_message_part(kind: u8, part: &[u8]) -> Result<Message, DecodeError> {
    let d = &mut Dec::new(part, kind);
    let message = get_message(d)?.message;
    d.finish()?;
    Ok(Arc::unwrap_or_clone(message))
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
    let e = &mut Enc { out };
    put_placements(e, vhost, placements)?;
    e.out.extend_from_slice(part);
    Ok(())
}

fn put_placements(
    e: &mut Enc<'_>,
    vhost: &str,
    placements: &[Placement],
) -> Result<(), EncodeError> {
    e.name("vhost", vhost)?;
    e.count("placements", placements.len())?;
    for p in placements {
        e.name("queue", &p.queue)?;
        e.u32(p.delivery_count);
        e.u8(if p.redelivered { FLAG_REDELIVERED } else { 0 });
    }
    Ok(())
}

fn get_placements(d: &mut Dec<'_>) -> Result<(String, Vec<Placement>), DecodeError> {
    let vhost = d.name("vhost")?;
    // A placement is at least a `name` length, a count and a flags byte.
    let n = d.count(size_of::<u16>() + size_of::<u32>() + 1, "placements")?;
    if n == 0 {
        return Err(d.err("carried message in no queue"));
    }
    let mut placements = Vec::with_capacity(n);
    for _ in 0..n {
        let queue = d.name("queue")?;
        let delivery_count = d.u32("delivery count")?;
        let flags = d.flags(FLAG_REDELIVERED, "placement flags")?;
        placements.push(Placement {
            queue,
            delivery_count,
            redelivered: flags & FLAG_REDELIVERED != 0,
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
