//! Headers exchange routing: a binding's arguments are matched against a message's headers,
//! with `x-match` = `all` (the default), `any`, `all-with-x` or `any-with-x`, exactly as
//! RabbitMQ 3.13 and later (`rabbit_exchange_type_headers.erl` with
//! `mc_amqpl:routing_headers/2`). Pure functions over [`FieldTable`]s: must not depend on
//! anything outside `broker`.
//!
//! The rules, with where RabbitMQ states them:
//! - `x-match` is read from the binding. Only the four strings above are accepted at bind time
//!   (`validate_binding/2`); an unknown value can only come from a binding made before that
//!   check, and routes as `all` (`parse_x_match(_) -> all`, "legacy; we didn't validate").
//! - `all` / `any` skip every binding key that starts with `x-` (`match/2`); the `-with-x`
//!   variants skip only `x-match` itself and compare the other `x-` keys with the message's
//!   `x-` headers (`match_x/2`).
//! - A binding value of type void matches when the header is present, whatever its value.
//! - Otherwise the header must be present and equal with Erlang's exact equality (`=:=`) on
//!   values whose AMQP type tag has been dropped: every integer type compares by value
//!   (`I32(1)` equals `I64(1)` and `U8(1)`), floats compare with floats (`F32(0.5)` equals
//!   `F64(0.5)`), but an integer never equals a float (`I32(1)` is not `F64(1.0)`); long
//!   strings, short strings and byte arrays compare by their bytes; booleans with booleans;
//!   decimals by (scale, value); arrays and nested tables compare element by element *with*
//!   their type tags (RabbitMQ keeps `{Type, Value}` inside them), and tables in order.
//! - A header of type timestamp is converted to milliseconds before comparing
//!   (`mc_amqpl:routing_value(timestamp, V) -> V * 1000`) while the binding's value is not,
//!   so a binding `Timestamp(5)` does not match a header `Timestamp(5)` but matches `I64(5)`,
//!   and a binding `I64(5000)` matches a header `Timestamp(5)`. This is RabbitMQ's behaviour
//!   since 3.13 and we keep it so that bindings route the same on both brokers.
//! - With no keys left to compare, `all` matches every message and `any` matches none
//!   (`match_all([]) -> true`, `match_any([]) -> false`). A message without headers is
//!   matched as one with an empty table.
//!
//! Differences we accept, all for inputs RabbitMQ's own parser cannot produce: NaN is never
//! equal to anything (Erlang cannot hold NaN), `0.0` equals `-0.0` (IEEE; Erlang 27+ says
//! otherwise), and a short-string `x-match` is read as the text it holds (RabbitMQ decodes
//! field type `s` as a 16-bit integer, so it never sees a short string there).

use std::fmt::Write as _;

use crate::broker::error::BrokerError;
use crate::broker::value::{FieldTable, Value};

/// The binding argument that selects the matching mode.
const X_MATCH: &str = "x-match";

/// How a headers binding combines its keys: the value of its `x-match` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XMatch {
    /// Every compared key must match (the default when `x-match` is absent).
    All,
    /// At least one compared key must match.
    Any,
    /// As `All`, but `x-` keys other than `x-match` are compared too.
    AllWithX,
    /// As `Any`, but `x-` keys other than `x-match` are compared too.
    AnyWithX,
}

impl XMatch {
    /// The mode of a binding, as routing reads it: `All` when `x-match` is absent or holds
    /// anything [`validate_binding_args`] would refuse (RabbitMQ's legacy fallback).
    pub fn of(binding_args: &FieldTable) -> XMatch {
        binding_args
            .get(X_MATCH)
            .and_then(string_value)
            .and_then(XMatch::parse)
            .unwrap_or(XMatch::All)
    }

    /// The mode named by an `x-match` string, if it is one of the four RabbitMQ accepts.
    pub fn parse(text: &[u8]) -> Option<XMatch> {
        match text {
            b"all" => Some(XMatch::All),
            b"any" => Some(XMatch::Any),
            b"all-with-x" => Some(XMatch::AllWithX),
            b"any-with-x" => Some(XMatch::AnyWithX),
            _ => None,
        }
    }

    /// True for the modes that compare `x-` keys.
    pub fn with_x(self) -> bool {
        matches!(self, XMatch::AllWithX | XMatch::AnyWithX)
    }

    /// True for the modes where one matching key suffices.
    pub fn is_any(self) -> bool {
        matches!(self, XMatch::Any | XMatch::AnyWithX)
    }
}

/// The bytes of a string-typed value (long or short string), the only types `x-match` may have.
fn string_value(value: &Value) -> Option<&[u8]> {
    match value {
        Value::LongStr(bytes) => Some(bytes),
        Value::ShortStr(text) => Some(text.as_bytes()),
        _ => None,
    }
}

/// True when a message with `headers` matches a binding with `binding_args` (see the module
/// documentation for the exact rules). `None` headers match as an empty table.
///
/// Cost: O(binding keys x headers), as tables are searched linearly; both are small.
pub fn headers_match(binding_args: &FieldTable, headers: Option<&FieldTable>) -> bool {
    let mode = XMatch::of(binding_args);
    let mut compared = binding_args.iter().filter(|(key, _)| {
        if mode.with_x() {
            *key != X_MATCH
        } else {
            !key.starts_with("x-")
        }
    });
    let hit = |(key, wanted): (&str, &Value)| {
        let Some(found) = headers.and_then(|h| h.get(key)) else {
            return false;
        };
        match wanted {
            // RabbitMQ: "a 'no value' in a pattern field is supposed to mean simple presence".
            Value::Void => true,
            _ => RoutingValue::of_binding(wanted) == RoutingValue::of_header(found),
        }
    };
    if mode.is_any() {
        compared.any(hit)
    } else {
        compared.all(hit)
    }
}

/// A value as RabbitMQ compares it when routing: its AMQP type dropped at the top level, kept
/// inside arrays and tables.
#[derive(Debug, PartialEq)]
enum RoutingValue<'a> {
    Int(i128),
    Float(f64),
    Bool(bool),
    Binary(&'a [u8]),
    Decimal { scale: u8, value: u32 },
    Array(&'a [Value]),
    Table(&'a FieldTable),
    Void,
}

impl<'a> RoutingValue<'a> {
    /// A binding argument's value: timestamps stay in seconds.
    fn of_binding(value: &'a Value) -> Self {
        Self::untyped(value)
    }

    /// A message header's value: timestamps become milliseconds (`mc_amqpl:routing_value`).
    fn of_header(value: &'a Value) -> Self {
        match value {
            Value::Timestamp(seconds) => RoutingValue::Int(i128::from(*seconds) * 1000),
            other => Self::untyped(other),
        }
    }

    /// The value without its type; a timestamp counts as its seconds.
    fn untyped(value: &'a Value) -> Self {
        match value {
            Value::I8(v) => RoutingValue::Int(i128::from(*v)),
            Value::U8(v) => RoutingValue::Int(i128::from(*v)),
            Value::I16(v) => RoutingValue::Int(i128::from(*v)),
            Value::U16(v) => RoutingValue::Int(i128::from(*v)),
            Value::I32(v) => RoutingValue::Int(i128::from(*v)),
            Value::U32(v) => RoutingValue::Int(i128::from(*v)),
            Value::I64(v) => RoutingValue::Int(i128::from(*v)),
            Value::Timestamp(seconds) => RoutingValue::Int(i128::from(*seconds)),
            Value::Bool(b) => RoutingValue::Bool(*b),
            Value::F32(f) => RoutingValue::Float(f64::from(*f)),
            Value::F64(f) => RoutingValue::Float(*f),
            Value::Decimal { scale, value } => RoutingValue::Decimal {
                scale: *scale,
                value: *value,
            },
            Value::ShortStr(text) => RoutingValue::Binary(text.as_bytes()),
            Value::LongStr(bytes) | Value::Bytes(bytes) => RoutingValue::Binary(bytes),
            Value::Array(items) => RoutingValue::Array(items),
            Value::Table(table) => RoutingValue::Table(table),
            Value::Void => RoutingValue::Void,
        }
    }
}

/// Checks a headers-exchange binding's arguments at bind time, as RabbitMQ's
/// `validate_binding/2` does: `x-match` may be absent or one of `all`, `any`, `all-with-x`,
/// `any-with-x`; nothing else in the arguments is checked.
///
/// # Errors
/// `PRECONDITION_FAILED` (406) with RabbitMQ's text, e.g.
/// `Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x`, or
/// `Invalid x-match field type signedint (value 1); expected longstr`.
pub fn validate_binding_args(binding_args: &FieldTable) -> Result<(), BrokerError> {
    let Some(x_match) = binding_args.get(X_MATCH) else {
        // RabbitMQ: "spec is vague on whether it can be omitted but in practice it's useful".
        return Ok(());
    };
    match string_value(x_match) {
        Some(text) if XMatch::parse(text).is_some() => Ok(()),
        Some(text) => Err(BrokerError::precondition(format!(
            "Invalid x-match field value {}; expected all, any, all-with-x, or any-with-x",
            erlang_binary(text)
        ))),
        None => Err(BrokerError::precondition(format!(
            "Invalid x-match field type {} (value {}); expected longstr",
            erlang_type(x_match),
            erlang_term(x_match)
        ))),
    }
}

/// RabbitMQ's name for a field's type (`rabbit_binary_parser`), as it appears in its errors.
fn erlang_type(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::I8(_) => "byte",
        Value::U8(_) => "unsignedbyte",
        Value::I16(_) => "short",
        Value::U16(_) => "unsignedshort",
        Value::I32(_) => "signedint",
        Value::U32(_) => "unsignedint",
        Value::I64(_) => "long",
        Value::F32(_) => "float",
        Value::F64(_) => "double",
        Value::Decimal { .. } => "decimal",
        Value::ShortStr(_) => "shortstr",
        Value::LongStr(_) => "longstr",
        Value::Array(_) => "array",
        Value::Timestamp(_) => "timestamp",
        Value::Table(_) => "table",
        Value::Bytes(_) => "binary",
        Value::Void => "void",
    }
}

/// A field value printed as Erlang's `~tp` prints RabbitMQ's decoding of it (close enough for
/// an error text; not a serialisation).
fn erlang_term(value: &Value) -> String {
    let mut out = String::new();
    write_term(&mut out, value);
    out
}

fn write_term(out: &mut String, value: &Value) {
    // `write!` into a String cannot fail; the results are ignored for that reason.
    match value {
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::F32(f) => out.push_str(&erlang_float(f64::from(*f))),
        Value::F64(f) => out.push_str(&erlang_float(*f)),
        Value::Decimal { scale, value } => {
            let _ = write!(out, "{{{scale},{value}}}");
        }
        Value::ShortStr(text) => out.push_str(&erlang_binary(text.as_bytes())),
        Value::LongStr(bytes) | Value::Bytes(bytes) => out.push_str(&erlang_binary(bytes)),
        Value::Timestamp(seconds) => {
            let _ = write!(out, "{seconds}");
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{{{},", erlang_type(item));
                write_term(out, item);
                out.push('}');
            }
            out.push(']');
        }
        Value::Table(table) => {
            out.push('[');
            for (i, (key, item)) in table.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "{{{},{},",
                    erlang_binary(key.as_bytes()),
                    erlang_type(item)
                );
                write_term(out, item);
                out.push('}');
            }
            out.push(']');
        }
        Value::Void => out.push_str("undefined"),
        integer => {
            let _ = write!(out, "{}", integer.as_integer().unwrap_or_default());
        }
    }
}

/// A float as Erlang prints it: always with a fraction, exponent as `1.0e20`.
fn erlang_float(f: f64) -> String {
    let text = format!("{f:?}");
    match text.split_once('e') {
        Some((mantissa, exponent)) if !mantissa.contains('.') => {
            format!("{mantissa}.0e{exponent}")
        }
        _ => text,
    }
}

/// A binary as Erlang's `~tp` prints it: `<<"text">>`, `<<"tëxt"/utf8>>`, or `<<1,2,255>>`
/// when the bytes are not printable text.
fn erlang_binary(bytes: &[u8]) -> String {
    let printable = std::str::from_utf8(bytes).ok().filter(|text| {
        text.chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
    });
    let Some(text) = printable else {
        let numbers: Vec<String> = bytes.iter().map(u8::to_string).collect();
        return format!("<<{}>>", numbers.join(","));
    };
    let mut out = String::from("<<\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    if !text.is_ascii() {
        out.push_str("/utf8");
    }
    out.push_str(">>");
    out
}
