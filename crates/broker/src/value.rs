//! AMQP-shaped values as the broker sees them: queue and binding arguments, message headers,
//! `x-death`. The broker owns this type so it can build and read headers without depending on
//! `protocol`; `server/convert.rs` maps it to and from the wire's field tables.

/// One value of an AMQP 0-9-1 field table or array, with RabbitMQ's type set.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `t`
    Bool(bool),
    /// `b`
    I8(i8),
    /// `B`
    U8(u8),
    /// `s` (RabbitMQ's reading of the spec)
    I16(i16),
    /// `u`
    U16(u16),
    /// `I`
    I32(i32),
    /// `i`
    U32(u32),
    /// `l`
    I64(i64),
    /// `f`
    F32(f32),
    /// `d`
    F64(f64),
    /// `D`: `value / 10^scale`
    Decimal {
        /// Number of decimal digits after the point.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// `s` short string (at most 255 bytes on the wire).
    ShortStr(String),
    /// `S` long string: arbitrary bytes, usually UTF-8.
    LongStr(Vec<u8>),
    /// `A`
    Array(Vec<Value>),
    /// `T`: seconds since the Unix epoch.
    Timestamp(u64),
    /// `F`
    Table(FieldTable),
    /// `x`
    Bytes(Vec<u8>),
    /// `V`
    Void,
}

impl Value {
    /// The value as an integer, if it is of any AMQP integer type (S-TTL-1 accepts all of them).
    pub fn as_integer(&self) -> Option<i128> {
        match *self {
            Value::I8(v) => Some(i128::from(v)),
            Value::U8(v) => Some(i128::from(v)),
            Value::I16(v) => Some(i128::from(v)),
            Value::U16(v) => Some(i128::from(v)),
            Value::I32(v) => Some(i128::from(v)),
            Value::U32(v) => Some(i128::from(v)),
            Value::I64(v) => Some(i128::from(v)),
            _ => None,
        }
    }

    /// The value as text, if it is a short or long string holding UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::ShortStr(s) => Some(s),
            Value::LongStr(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// A long string holding `s`, the type RabbitMQ uses for string headers it writes.
    pub fn long_str(s: impl Into<String>) -> Value {
        Value::LongStr(s.into().into_bytes())
    }
}

/// An ordered AMQP field table. Order is kept as received so headers round-trip unchanged; a
/// key appears at most once (a later `insert` replaces the earlier value in place).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldTable {
    entries: Vec<(String, Value)>,
}

impl FieldTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` to `value`, replacing an existing entry in place or appending a new one.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.entries.push((key, value));
        }
    }

    /// Removes `key`, returning its value if it was present.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let index = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(index).1)
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl FromIterator<(String, Value)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let mut table = FieldTable::new();
        for (k, v) in iter {
            table.insert(k, v);
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_replaces_in_place_and_keeps_order() {
        let mut t = FieldTable::new();
        t.insert("a", Value::I32(1));
        t.insert("b", Value::I32(2));
        t.insert("a", Value::I32(3));
        let keys: Vec<_> = t.iter().map(|(k, _)| k.to_owned()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(t.get("a"), Some(&Value::I32(3)));
        assert_eq!(t.remove("a"), Some(Value::I32(3)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn every_integer_type_is_an_integer() {
        assert_eq!(Value::U8(7).as_integer(), Some(7));
        assert_eq!(Value::I64(-7).as_integer(), Some(-7));
        assert_eq!(Value::long_str("7").as_integer(), None);
        assert_eq!(Value::F64(7.0).as_integer(), None);
    }
}
