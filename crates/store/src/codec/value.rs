//! Field tables and their values (storage-format.md, "Field tables"): arguments, headers.
//! Nesting is bounded by `limits::FIELD_TABLE_DEPTH_MAX` both ways, and a repeated key is
//! refused on reading.

use super::cursor::{Dec, Enc};
use super::error::{DecodeError, EncodeError};
use wharf_base::limits;
use wharf_broker::{FieldTable, Value};

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
pub(super) fn put_table(e: &mut Enc<'_>, t: &FieldTable, depth: usize) -> Result<(), EncodeError> {
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

pub(super) fn get_table(d: &mut Dec<'_>, depth: usize) -> Result<FieldTable, DecodeError> {
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
