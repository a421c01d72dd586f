//! Conversion between the wire's field values (amq-protocol's `AMQPValue` / `FieldTable`) and
//! the broker's ([`wharf_broker::value`]), between the wire's basic properties and the
//! broker's [`Properties`], and from a [`BrokerError`] to the AMQP close it causes (S-ERR-1).
//! The one place where the two vocabularies meet (STYLE 2.2).
//!
//! The mapping is one-to-one per type, so a value survives a round trip in either direction
//! unchanged, with two properties of amq-protocol's `FieldTable` to know about: it is a
//! `BTreeMap`, so a table read from the wire comes out with its keys in byte order (and a key
//! repeated on the wire keeps its last value), and its keys are `ShortString`s, so a broker key
//! longer than 255 octets cannot be sent ([`ConvertError`]). `Value::ShortStr` maps to
//! `AMQPValue::ShortString`; no wire table ever holds one (RabbitMQ's tables have no
//! short-string type and amq-protocol reads tag `s` as a signed 16-bit integer), and
//! `protocol::encode` writes one as a long string.
//!
//! Recursion follows the value's nesting: values from the wire are at most
//! `limits::FIELD_TABLE_DEPTH_MAX` deep (refused by `protocol::decode` otherwise), and values
//! the broker builds (`x-death`) are shallow.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable as WireTable, LongString,
    ShortString,
};

use wharf_broker::{BrokerError, Properties};
use wharf_broker::{FieldTable, Value};
use wharf_protocol::reply_code;

/// A broker value that cannot be put on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A table key longer than a short string allows.
    #[error("field table key of {len_bytes} octets exceeds 255 (starts with {prefix:?})")]
    KeyTooLong {
        /// The key's length in octets.
        len_bytes: usize,
        /// The key's first few characters, to find it.
        prefix: String,
    },
    /// A `Value::ShortStr` longer than a short string allows.
    #[error("short string value of {len_bytes} octets exceeds 255")]
    ShortStrTooLong {
        /// The string's length in octets.
        len_bytes: usize,
    },
}

/// A wire value as a broker value.
pub fn value_from_wire(value: &AMQPValue) -> Value {
    match value {
        AMQPValue::Boolean(v) => Value::Bool(*v),
        AMQPValue::ShortShortInt(v) => Value::I8(*v),
        AMQPValue::ShortShortUInt(v) => Value::U8(*v),
        AMQPValue::ShortInt(v) => Value::I16(*v),
        AMQPValue::ShortUInt(v) => Value::U16(*v),
        AMQPValue::LongInt(v) => Value::I32(*v),
        AMQPValue::LongUInt(v) => Value::U32(*v),
        AMQPValue::LongLongInt(v) => Value::I64(*v),
        AMQPValue::Float(v) => Value::F32(*v),
        AMQPValue::Double(v) => Value::F64(*v),
        AMQPValue::DecimalValue(d) => Value::Decimal {
            scale: d.scale,
            value: d.value,
        },
        AMQPValue::ShortString(s) => Value::ShortStr(s.as_str().to_owned()),
        AMQPValue::LongString(s) => Value::LongStr(s.as_bytes().to_vec()),
        AMQPValue::FieldArray(a) => {
            Value::Array(a.as_slice().iter().map(value_from_wire).collect())
        }
        AMQPValue::Timestamp(t) => Value::Timestamp(*t),
        AMQPValue::FieldTable(t) => Value::Table(table_from_wire(t)),
        AMQPValue::ByteArray(b) => Value::Bytes(b.as_slice().to_vec()),
        AMQPValue::Void => Value::Void,
    }
}

/// A wire table as a broker table, keys in the wire table's (byte) order.
pub fn table_from_wire(table: &WireTable) -> FieldTable {
    table
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), value_from_wire(v)))
        .collect()
}

/// A broker value as a wire value.
///
/// # Errors
/// [`ConvertError`] when a key or short string inside is longer than 255 octets.
pub fn value_to_wire(value: &Value) -> Result<AMQPValue, ConvertError> {
    Ok(match value {
        Value::Bool(v) => AMQPValue::Boolean(*v),
        Value::I8(v) => AMQPValue::ShortShortInt(*v),
        Value::U8(v) => AMQPValue::ShortShortUInt(*v),
        Value::I16(v) => AMQPValue::ShortInt(*v),
        Value::U16(v) => AMQPValue::ShortUInt(*v),
        Value::I32(v) => AMQPValue::LongInt(*v),
        Value::U32(v) => AMQPValue::LongUInt(*v),
        Value::I64(v) => AMQPValue::LongLongInt(*v),
        Value::F32(v) => AMQPValue::Float(*v),
        Value::F64(v) => AMQPValue::Double(*v),
        Value::Decimal { scale, value } => AMQPValue::DecimalValue(DecimalValue {
            scale: *scale,
            value: *value,
        }),
        Value::ShortStr(s) => AMQPValue::ShortString(
            ShortString::try_new(s.as_str())
                .map_err(|_| ConvertError::ShortStrTooLong { len_bytes: s.len() })?,
        ),
        Value::LongStr(b) => AMQPValue::LongString(LongString::from(b.clone())),
        Value::Array(items) => AMQPValue::FieldArray(FieldArray::from(
            items
                .iter()
                .map(value_to_wire)
                .collect::<Result<Vec<_>, _>>()?,
        )),
        Value::Timestamp(t) => AMQPValue::Timestamp(*t),
        Value::Table(t) => AMQPValue::FieldTable(table_to_wire(t)?),
        Value::Bytes(b) => AMQPValue::ByteArray(ByteArray::from(b.clone())),
        Value::Void => AMQPValue::Void,
    })
}

/// A broker table as a wire table. The wire table orders keys by bytes (see the module doc).
///
/// # Errors
/// [`ConvertError`] when a key or short string inside is longer than 255 octets.
pub fn table_to_wire(table: &FieldTable) -> Result<WireTable, ConvertError> {
    let mut wire = WireTable::default();
    for (key, value) in table.iter() {
        let short = ShortString::try_new(key).map_err(|_| ConvertError::KeyTooLong {
            len_bytes: key.len(),
            prefix: key.chars().take(32).collect(),
        })?;
        wire.insert(short, value_to_wire(value)?);
    }
    Ok(wire)
}

/// `s` as a short string, cut at 255 octets (on a character boundary) if longer. For texts
/// the server builds (reply texts, names echoed back), where a cut is better than a refusal.
pub fn short(s: &str) -> ShortString {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    // At most 255 octets by construction, so try_new cannot fail; fall back to empty anyway.
    ShortString::try_new(s.get(..end).unwrap_or_default()).unwrap_or_default()
}

/// Wire basic properties as the broker's.
pub fn properties_from_wire(p: &BasicProperties) -> Properties {
    let s = |v: &Option<ShortString>| v.as_ref().map(|v| v.as_str().to_owned());
    Properties {
        content_type: s(p.content_type()),
        content_encoding: s(p.content_encoding()),
        headers: p.headers().as_ref().map(table_from_wire),
        delivery_mode: *p.delivery_mode(),
        priority: *p.priority(),
        correlation_id: s(p.correlation_id()),
        reply_to: s(p.reply_to()),
        expiration: s(p.expiration()),
        message_id: s(p.message_id()),
        timestamp: *p.timestamp(),
        kind: s(p.kind()),
        user_id: s(p.user_id()),
        app_id: s(p.app_id()),
        cluster_id: s(p.cluster_id()),
    }
}

/// Broker properties as wire basic properties. Header keys or strings too long for the wire
/// (only possible for values the broker built itself) are cut or dropped rather than failing
/// a delivery.
pub fn properties_to_wire(p: &Properties) -> BasicProperties {
    let mut w = BasicProperties::default();
    if let Some(v) = &p.content_type {
        w = w.with_content_type(short(v));
    }
    if let Some(v) = &p.content_encoding {
        w = w.with_content_encoding(short(v));
    }
    if let Some(h) = &p.headers {
        w = w.with_headers(table_to_wire_lossy(h));
    }
    if let Some(v) = p.delivery_mode {
        w = w.with_delivery_mode(v);
    }
    if let Some(v) = p.priority {
        w = w.with_priority(v);
    }
    if let Some(v) = &p.correlation_id {
        w = w.with_correlation_id(short(v));
    }
    if let Some(v) = &p.reply_to {
        w = w.with_reply_to(short(v));
    }
    if let Some(v) = &p.expiration {
        w = w.with_expiration(short(v));
    }
    if let Some(v) = &p.message_id {
        w = w.with_message_id(short(v));
    }
    if let Some(v) = p.timestamp {
        w = w.with_timestamp(v);
    }
    if let Some(v) = &p.kind {
        w = w.with_type(short(v));
    }
    if let Some(v) = &p.user_id {
        w = w.with_user_id(short(v));
    }
    if let Some(v) = &p.app_id {
        w = w.with_app_id(short(v));
    }
    if let Some(v) = &p.cluster_id {
        w = w.with_cluster_id(short(v));
    }
    w
}

/// A broker table as a wire table, dropping entries that cannot be put on the wire (keys over
/// 255 octets). Tables from clients always convert; only broker-built ones could fail.
/// The properties of a delivery: the message's, plus the `x-delivery-count` header a quorum
/// queue adds to a message that came back (S-QQ-9; a `long`, as RabbitMQ sends it).
pub fn delivery_properties(p: &Properties, count_header: Option<u32>) -> BasicProperties {
    let w = properties_to_wire(p);
    let Some(n) = count_header else {
        return w;
    };
    let mut headers = w.headers().clone().unwrap_or_default();
    headers.insert(
        short("x-delivery-count"),
        AMQPValue::LongLongInt(i64::from(n)),
    );
    w.with_headers(headers)
}

/// A field table for the wire, leaving out what cannot go (an overlong key).
pub fn table_to_wire_lossy(table: &FieldTable) -> WireTable {
    table_to_wire(table).unwrap_or_else(|_| {
        let mut wire = WireTable::default();
        for (key, value) in table.iter() {
            if let (Ok(k), Ok(v)) = (ShortString::try_new(key), value_to_wire(value)) {
                wire.insert(k, v);
            }
        }
        wire
    })
}

/// The spec's name of a reply code, as RabbitMQ prefixes reply texts with it.
pub fn reply_code_name(code: u16) -> &'static str {
    match code {
        reply_code::REPLY_SUCCESS => "OK",
        reply_code::CONTENT_TOO_LARGE => "CONTENT_TOO_LARGE",
        reply_code::NO_ROUTE => "NO_ROUTE",
        reply_code::NO_CONSUMERS => "NO_CONSUMERS",
        reply_code::CONNECTION_FORCED => "CONNECTION_FORCED",
        reply_code::INVALID_PATH => "INVALID_PATH",
        reply_code::ACCESS_REFUSED => "ACCESS_REFUSED",
        reply_code::NOT_FOUND => "NOT_FOUND",
        reply_code::RESOURCE_LOCKED => "RESOURCE_LOCKED",
        reply_code::PRECONDITION_FAILED => "PRECONDITION_FAILED",
        reply_code::FRAME_ERROR => "FRAME_ERROR",
        reply_code::SYNTAX_ERROR => "SYNTAX_ERROR",
        reply_code::COMMAND_INVALID => "COMMAND_INVALID",
        reply_code::CHANNEL_ERROR => "CHANNEL_ERROR",
        reply_code::UNEXPECTED_FRAME => "UNEXPECTED_FRAME",
        reply_code::RESOURCE_ERROR => "RESOURCE_ERROR",
        reply_code::NOT_ALLOWED => "NOT_ALLOWED",
        reply_code::NOT_IMPLEMENTED => "NOT_IMPLEMENTED",
        _ => "INTERNAL_ERROR",
    }
}

/// An AMQP close (of a channel or the connection) with RabbitMQ's reply text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The reply code.
    pub code: u16,
    /// `NAME - detail`, as RabbitMQ writes it (cut to 255 octets when sent).
    pub text: String,
    /// True for `connection.close`, false for `channel.close`.
    pub connection: bool,
}

impl Close {
    /// A close with `code` and `detail`, prefixed with the code's name; connection or channel
    /// as the spec classifies the code.
    pub fn new(code: u16, detail: &str) -> Self {
        Close {
            code,
            text: format!("{} - {detail}", reply_code_name(code)),
            connection: reply_code::is_connection_error(code),
        }
    }
}

/// The one mapping from a broker refusal to what the client sees (S-ERR-1, STYLE 3.3):
/// 403/404/405/406 close the channel; 503, 504, 530, 540, 541 close the connection.
pub fn broker_error_close(e: &BrokerError) -> Close {
    // The broker's table is the one mapping of kinds to codes (`ErrorKind::reply_code`).
    let code = e.kind.reply_code();
    Close {
        code,
        text: format!("{} - {}", reply_code_name(code), e.text),
        connection: e.kind.closes_connection(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wharf_broker::ErrorKind;

    #[test]
    fn broker_errors_map_to_rabbitmq_closes() {
        let c = broker_error_close(&BrokerError::not_found("no queue 'x' in vhost '/'"));
        assert_eq!(c.code, 404);
        assert!(!c.connection);
        assert_eq!(c.text, "NOT_FOUND - no queue 'x' in vhost '/'");
        let c = broker_error_close(&BrokerError::new(ErrorKind::NotAllowed, "vhost"));
        assert_eq!((c.code, c.connection), (530, true));
        assert_eq!(Close::new(504, "x").text, "CHANNEL_ERROR - x");
        assert!(Close::new(504, "x").connection);
    }

    #[test]
    fn short_cuts_on_a_char_boundary() {
        let s = "é".repeat(200);
        let cut = short(&s);
        assert!(cut.as_str().len() <= 255);
        assert!(s.starts_with(cut.as_str()));
    }

    #[test]
    fn properties_round_trip() {
        let mut headers = FieldTable::new();
        headers.insert("a", Value::I32(1));
        let p = Properties {
            content_type: Some("text/plain".into()),
            headers: Some(headers),
            delivery_mode: Some(2),
            expiration: Some("100".into()),
            timestamp: Some(7),
            kind: Some("t".into()),
            ..Properties::default()
        };
        assert_eq!(properties_from_wire(&properties_to_wire(&p)), p);
    }

    fn key() -> impl Strategy<Value = String> {
        "[a-z0-9-]{0,12}"
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i8>().prop_map(Value::I8),
            any::<u8>().prop_map(Value::U8),
            any::<i16>().prop_map(Value::I16),
            any::<u16>().prop_map(Value::U16),
            any::<i32>().prop_map(Value::I32),
            any::<u32>().prop_map(Value::U32),
            any::<i64>().prop_map(Value::I64),
            // Floats from raw bits, NaN payloads included: compared bit for bit below.
            any::<u32>().prop_map(|b| Value::F32(f32::from_bits(b))),
            any::<u64>().prop_map(|b| Value::F64(f64::from_bits(b))),
            (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| Value::Decimal { scale, value }),
            "\\PC{0,20}".prop_map(Value::ShortStr),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::LongStr),
            any::<u64>().prop_map(Value::Timestamp),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::Bytes),
            Just(Value::Void),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Table(m.into_iter().collect())),
            ]
        })
    }

    /// Equality with floats compared by bits, so NaN payloads count as preserved.
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
            (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
            }
            (Value::Table(x), Value::Table(y)) => same_table(x, y),
            _ => a == b,
        }
    }

    fn same_table(x: &FieldTable, y: &FieldTable) -> bool {
        x.len() == y.len()
            && x.iter()
                .zip(y.iter())
                .all(|((ka, a), (kb, b))| ka == kb && same(a, b))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every broker value survives broker -> wire -> broker (tables generated with sorted
        /// keys, the only order a wire table can hold).
        #[test]
        fn broker_values_round_trip_through_the_wire_types(v in value()) {
            let back = value_from_wire(&value_to_wire(&v).unwrap());
            prop_assert!(same(&v, &back), "{v:?} came back as {back:?}");
        }

        /// Every wire value survives wire -> broker -> wire.
        #[test]
        fn wire_values_round_trip_through_the_broker_types(v in value()) {
            let wire = value_to_wire(&v).unwrap();
            let again = value_to_wire(&value_from_wire(&wire)).unwrap();
            // AMQPValue's PartialEq treats NaN as unequal; compare through the broker's bits.
            prop_assert!(same(&value_from_wire(&wire), &value_from_wire(&again)));
            prop_assert_eq!(format!("{wire:?}"), format!("{again:?}"));
        }
    }

    #[test]
    fn wire_tables_come_out_in_key_order_and_overlong_keys_are_refused() {
        let mut t = FieldTable::new();
        t.insert("b", Value::I32(2));
        t.insert("a", Value::long_str("x"));
        let wire = table_to_wire(&t).unwrap();
        let keys: Vec<_> = table_from_wire(&wire)
            .iter()
            .map(|(k, _)| k.to_owned())
            .collect();
        assert_eq!(keys, ["a", "b"]);

        let mut long = FieldTable::new();
        long.insert("k".repeat(256), Value::Void);
        assert!(matches!(
            table_to_wire(&long),
            Err(ConvertError::KeyTooLong { len_bytes: 256, .. })
        ));
        assert_eq!(
            value_to_wire(&Value::ShortStr("s".repeat(256))),
            Err(ConvertError::ShortStrTooLong { len_bytes: 256 })
        );
    }
}
