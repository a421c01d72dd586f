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

use crate::args::type_name;
use crate::error::BrokerError;
use crate::value::{FieldTable, Value};

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
            type_name(x_match),
            erlang_term(x_match)
        ))),
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
                let _ = write!(out, "{{{},", type_name(item));
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
                    type_name(item)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use proptest::prelude::*;

    fn table(entries: &[(&str, Value)]) -> FieldTable {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn s(text: &str) -> Value {
        Value::long_str(text)
    }

    /// A binding with `x-match` = `mode` (none when empty) and `keys`.
    fn binding(mode: &str, keys: &[(&str, Value)]) -> FieldTable {
        let mut args = FieldTable::new();
        if !mode.is_empty() {
            args.insert("x-match", s(mode));
        }
        for (k, v) in keys {
            args.insert(*k, v.clone());
        }
        args
    }

    /// True when a binding on the single key `k` = `wanted` matches a header `k` = `found`.
    fn same(wanted: Value, found: Value) -> bool {
        headers_match(
            &binding("", &[("k", wanted)]),
            Some(&table(&[("k", found)])),
        )
    }

    // `match_all`: every compared key must be present and equal; other headers are ignored.
    #[test]
    fn all_is_the_default_and_needs_every_key() {
        let headers = table(&[("a", s("1")), ("b", s("2")), ("c", s("3"))]);
        for mode in ["", "all"] {
            let both = binding(mode, &[("a", s("1")), ("b", s("2"))]);
            assert!(headers_match(&both, Some(&headers)), "{mode:?}");
            let one_wrong = binding(mode, &[("a", s("1")), ("b", s("9"))]);
            assert!(!headers_match(&one_wrong, Some(&headers)), "{mode:?}");
            let one_missing = binding(mode, &[("a", s("1")), ("z", s("2"))]);
            assert!(!headers_match(&one_missing, Some(&headers)), "{mode:?}");
            assert!(!headers_match(&both, None), "{mode:?}");
        }
    }

    // `match_any`: one present and equal key suffices.
    #[test]
    fn any_needs_one_key() {
        let headers = table(&[("a", s("1")), ("b", s("2"))]);
        let one = binding("any", &[("a", s("9")), ("b", s("2"))]);
        assert!(headers_match(&one, Some(&headers)));
        let none = binding("any", &[("a", s("9")), ("z", s("2"))]);
        assert!(!headers_match(&none, Some(&headers)));
        assert!(!headers_match(&one, None));
    }

    // `match/2` skips every `x-` binding key; `match_x/2` skips only `x-match` and compares
    // the others with the message's `x-` headers (kept by `routing_headers(_, [x_headers])`).
    #[test]
    fn x_keys_are_compared_only_by_the_with_x_modes() {
        let headers = table(&[("a", s("1")), ("x-tenant", s("t1"))]);
        let wrong_x = [("a", s("1")), ("x-tenant", s("t2"))];
        assert!(headers_match(&binding("all", &wrong_x), Some(&headers)));
        assert!(!headers_match(
            &binding("all-with-x", &wrong_x),
            Some(&headers)
        ));
        let right_x = [("a", s("1")), ("x-tenant", s("t1"))];
        assert!(headers_match(
            &binding("all-with-x", &right_x),
            Some(&headers)
        ));

        let only_x = [("x-tenant", s("t1"))];
        assert!(headers_match(
            &binding("any-with-x", &only_x),
            Some(&headers)
        ));
        // For `any`, nothing is left to compare once `x-tenant` is skipped: no match.
        assert!(!headers_match(&binding("any", &only_x), Some(&headers)));
        let missing_x = [("x-other", s("t1")), ("b", s("2"))];
        assert!(!headers_match(
            &binding("any-with-x", &missing_x),
            Some(&headers)
        ));
    }

    // `match_all([], ...) -> true` and `match_any([], ...) -> false`: a binding with nothing
    // to compare catches every message under `all` and none under `any`.
    #[test]
    fn binding_without_compared_keys_matches_all_or_nothing() {
        let headers = table(&[("a", s("1"))]);
        for args in [binding("", &[]), binding("all", &[("x-foo", s("1"))])] {
            assert!(headers_match(&args, Some(&headers)));
            assert!(headers_match(&args, None));
        }
        assert!(headers_match(&binding("all-with-x", &[]), None));
        for mode in ["any", "any-with-x"] {
            assert!(
                !headers_match(&binding(mode, &[]), Some(&headers)),
                "{mode}"
            );
            assert!(!headers_match(&binding(mode, &[]), None), "{mode}");
        }
    }

    // `match({K, void, _}, M) -> maps:is_key(K, M)`: a void binding value asks for presence.
    #[test]
    fn void_binding_value_matches_presence_only() {
        assert!(same(Value::Void, s("anything")));
        assert!(same(Value::Void, Value::Void));
        assert!(same(Value::Void, Value::I32(0)));
        let args = binding("", &[("k", Value::Void)]);
        assert!(!headers_match(
            &args,
            Some(&table(&[("other", Value::Void)]))
        ));
        assert!(!headers_match(&args, None));
        // A void header does not equal a non-void binding value.
        assert!(!same(s(""), Value::Void));
    }

    // `parse_x_match(_) -> all. %% legacy; we didn't validate`.
    #[test]
    fn unknown_x_match_routes_as_all() {
        let headers = table(&[("a", s("1"))]);
        for bad in [s("ANY"), s("first"), Value::I32(1)] {
            let mut args = binding("", &[("a", s("1")), ("b", s("2"))]);
            args.insert("x-match", bad.clone());
            assert!(
                !headers_match(&args, Some(&headers)),
                "{bad:?} acted as any"
            );
            args.remove("b");
            assert!(headers_match(&args, Some(&headers)), "{bad:?}");
            assert_eq!(XMatch::of(&args), XMatch::All);
        }
    }

    // Values are compared with `=:=` after the type tag is dropped: integers by value
    // whatever their width or sign, floats only with floats.
    #[test]
    fn integers_of_any_type_compare_by_value() {
        assert!(same(Value::I32(1), Value::I64(1)));
        assert!(same(Value::U8(1), Value::I32(1)));
        assert!(same(Value::I16(-5), Value::I64(-5)));
        assert!(same(Value::U32(u32::MAX), Value::I64(i64::from(u32::MAX))));
        assert!(!same(Value::I32(1), Value::I32(2)));
        assert!(!same(Value::I8(-1), Value::U8(255)));
    }

    #[test]
    fn integers_never_equal_floats_and_floats_compare_as_doubles() {
        assert!(!same(Value::I32(1), Value::F64(1.0)));
        assert!(!same(Value::F32(1.0), Value::I64(1)));
        assert!(same(Value::F32(0.5), Value::F64(0.5)));
        // RabbitMQ widens a 32-bit float to a double, so 0.1f32 is not 0.1.
        assert!(!same(Value::F32(0.1), Value::F64(0.1)));
        assert!(same(Value::F32(0.1), Value::F64(f64::from(0.1_f32))));
        assert!(!same(Value::F64(f64::NAN), Value::F64(f64::NAN)));
    }

    // Long strings and byte arrays are both Erlang binaries; booleans are atoms and equal
    // no integer; a decimal is `{Scale, Value}`.
    #[test]
    fn strings_bytes_bools_and_decimals() {
        assert!(same(s("abc"), Value::Bytes(b"abc".to_vec())));
        assert!(same(Value::ShortStr("abc".into()), s("abc")));
        assert!(!same(s("abc"), s("abd")));
        assert!(!same(s("1"), Value::I32(1)));
        assert!(same(Value::Bool(true), Value::Bool(true)));
        assert!(!same(Value::Bool(true), Value::U8(1)));
        let dec = |scale, value| Value::Decimal { scale, value };
        assert!(same(dec(2, 150), dec(2, 150)));
        assert!(!same(dec(1, 15), dec(2, 150)));
    }

    // Inside arrays and tables RabbitMQ keeps `{Type, Value}`, so types matter there, and a
    // table is a list, so order matters.
    #[test]
    fn arrays_and_tables_compare_with_their_types() {
        let arr = |v: Vec<Value>| Value::Array(v);
        assert!(same(
            arr(vec![Value::I32(1), s("a")]),
            arr(vec![Value::I32(1), s("a")])
        ));
        assert!(!same(arr(vec![Value::I32(1)]), arr(vec![Value::I64(1)])));
        assert!(!same(
            arr(vec![s("a")]),
            arr(vec![Value::Bytes(b"a".to_vec())])
        ));
        assert!(!same(arr(vec![Value::I32(1)]), Value::I32(1)));
        let ab = Value::Table(table(&[("a", Value::I32(1)), ("b", Value::I32(2))]));
        let ba = Value::Table(table(&[("b", Value::I32(2)), ("a", Value::I32(1))]));
        assert!(same(ab.clone(), ab.clone()));
        assert!(!same(ab, ba));
    }

    // `mc_amqpl:routing_value(timestamp, V) -> V * 1000` applies to the message's headers
    // only, not to the binding's arguments (RabbitMQ 3.13+).
    #[test]
    fn timestamp_headers_are_compared_in_milliseconds() {
        assert!(!same(Value::Timestamp(5), Value::Timestamp(5)));
        assert!(same(Value::I64(5000), Value::Timestamp(5)));
        assert!(same(Value::Timestamp(5000), Value::Timestamp(5)));
        assert!(same(Value::Timestamp(5), Value::I64(5)));
        assert!(same(Value::Timestamp(0), Value::Timestamp(0)));
        // Erlang integers do not overflow and neither may we.
        assert!(!same(
            Value::Timestamp(u64::MAX),
            Value::Timestamp(u64::MAX)
        ));
    }

    #[test]
    fn validation_accepts_the_four_modes_and_absence() {
        for mode in ["all", "any", "all-with-x", "any-with-x"] {
            assert_eq!(
                validate_binding_args(&binding(mode, &[("a", s("1"))])),
                Ok(())
            );
            let mut short = FieldTable::new();
            short.insert("x-match", Value::ShortStr(mode.into()));
            assert_eq!(validate_binding_args(&short), Ok(()));
        }
        assert_eq!(validate_binding_args(&FieldTable::new()), Ok(()));
        assert_eq!(
            validate_binding_args(&table(&[("x-other", Value::I8(1))])),
            Ok(())
        );
    }

    // `validate_binding/2`: `{error, {binding_invalid, "Invalid x-match field value ~tp; ..."}}`
    // which the channel turns into PRECONDITION_FAILED.
    #[test]
    fn validation_refuses_unknown_x_match_values_with_rabbitmq_text() {
        let cases: [(Value, &str); 4] = [
            (s("first"), "<<\"first\">>"),
            (s("ALL"), "<<\"ALL\">>"),
            (s("tout-\u{e9}"), "<<\"tout-\u{e9}\"/utf8>>"),
            (Value::LongStr(vec![0x61, 0xff]), "<<97,255>>"),
        ];
        for (value, printed) in cases {
            let mut args = FieldTable::new();
            args.insert("x-match", value);
            let err = validate_binding_args(&args).unwrap_err();
            assert_eq!(err.kind, ErrorKind::PreconditionFailed);
            assert_eq!(err.kind.reply_code(), 406);
            assert_eq!(
                err.text,
                format!(
                    "Invalid x-match field value {printed}; \
                     expected all, any, all-with-x, or any-with-x"
                )
            );
        }
    }

    #[test]
    fn validation_refuses_x_match_of_the_wrong_type_with_rabbitmq_text() {
        let cases: [(Value, &str); 6] = [
            (Value::I32(1), "signedint (value 1)"),
            (Value::Bool(true), "bool (value true)"),
            (Value::F64(1e20), "double (value 1.0e20)"),
            (Value::Bytes(b"all".to_vec()), "binary (value <<\"all\">>)"),
            (Value::Void, "void (value undefined)"),
            (
                Value::Array(vec![s("all"), Value::I8(-1)]),
                "array (value [{longstr,<<\"all\">>},{byte,-1}])",
            ),
        ];
        for (value, printed) in cases {
            let mut args = FieldTable::new();
            args.insert("x-match", value);
            let err = validate_binding_args(&args).unwrap_err();
            assert_eq!(err.kind, ErrorKind::PreconditionFailed);
            assert_eq!(
                err.text,
                format!("Invalid x-match field type {printed}; expected longstr")
            );
        }
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Void),
            (0..3_i32).prop_map(Value::I32),
            (0..3_i64).prop_map(Value::I64),
            (0..3_u8).prop_map(|v| Value::F64(f64::from(v))),
            prop::sample::select(vec!["0", "1"]).prop_map(Value::long_str),
        ]
    }

    fn table_strategy() -> impl Strategy<Value = FieldTable> {
        prop::collection::vec(
            (
                prop::sample::select(vec!["a", "b", "c", "x-d"]),
                value_strategy(),
            ),
            0..4,
        )
        .prop_map(|entries| {
            entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// `all` is the conjunction and `any` the disjunction of the one-key bindings made from
        /// the compared keys, and the two modes agree on one-key bindings.
        #[test]
        fn modes_combine_one_key_bindings(
            keys in table_strategy(),
            headers in table_strategy(),
            with_x in any::<bool>(),
        ) {
            let (all, any) = if with_x { ("all-with-x", "any-with-x") } else { ("all", "any") };
            let compared: Vec<(&str, &Value)> = keys
                .iter()
                .filter(|(k, _)| with_x || !k.starts_with("x-"))
                .collect();
            let one = |k: &str, v: &Value| {
                let single = binding(all, &[(k, v.clone())]);
                let as_any = headers_match(&binding(any, &[(k, v.clone())]), Some(&headers));
                let as_all = headers_match(&single, Some(&headers));
                assert_eq!(as_all, as_any, "one-key binding {k:?}");
                as_all
            };
            let every = compared.iter().all(|(k, v)| one(k, v));
            let some = compared.iter().any(|(k, v)| one(k, v));
            let pairs: Vec<(&str, Value)> = keys.iter().map(|(k, v)| (k, v.clone())).collect();
            prop_assert_eq!(headers_match(&binding(all, &pairs), Some(&headers)), every);
            prop_assert_eq!(headers_match(&binding(any, &pairs), Some(&headers)), some);
        }
    }
}
