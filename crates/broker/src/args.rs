//! Queue arguments, per-message expiration and policy definitions: parsing, validation with
//! RabbitMQ's error texts, and the resolution of argument + policy + operator policy into a
//! queue's effective settings (S-TTL-1..3, S-QEXP-1, S-DLX-2, S-LEN-1..2, S-POL-1..2).
//! Pure functions; must not depend on anything outside `broker`.

use regex::Regex;

use crate::error::BrokerError;
use crate::types::{ApplyTo, PolicySpec};
use crate::value::{FieldTable, Value};
use wharf_base::limits::TTL_MS_MAX;

/// What a queue does when a length limit is reached (S-LEN-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest messages.
    #[default]
    DropHead,
    /// Refuse the new message.
    RejectPublish,
    /// Refuse the new message and dead-letter it.
    RejectPublishDlx,
}

impl Overflow {
    fn parse(s: &str) -> Option<Overflow> {
        match s {
            "drop-head" => Some(Overflow::DropHead),
            "reject-publish" => Some(Overflow::RejectPublish),
            "reject-publish-dlx" => Some(Overflow::RejectPublishDlx),
            _ => None,
        }
    }
}

/// The settings a queue argument, a policy or an operator policy can carry. `None` = not set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueSettings {
    /// Message TTL in ms (S-TTL-1).
    pub message_ttl_ms: Option<u32>,
    /// Queue lease in ms, positive (S-QEXP-1).
    pub expires_ms: Option<u64>,
    /// Dead-letter exchange (S-DLX-2).
    pub dead_letter_exchange: Option<String>,
    /// Dead-letter routing key.
    pub dead_letter_routing_key: Option<String>,
    /// Ready messages allowed (S-LEN-1).
    pub max_length: Option<u64>,
    /// Ready body bytes allowed.
    pub max_length_bytes: Option<u64>,
    /// Overflow behaviour (S-LEN-2).
    pub overflow: Option<Overflow>,
    /// Returns allowed before dead-lettering with `delivery_limit` (S-DLX-1).
    pub delivery_limit: Option<u64>,
}

fn lowest<T: Ord + Copy>(values: [Option<T>; 3]) -> Option<T> {
    values.into_iter().flatten().min()
}

impl QueueSettings {
    /// Resolves argument, policy and operator policy as RabbitMQ does: numeric limits take the
    /// lowest (S-TTL-3, S-LEN-1, S-POL-2); dead-letter exchange, key and overflow take the
    /// argument over the policy (S-DLX-2); operator policies only lower numeric limits.
    pub fn effective(
        args: &QueueSettings,
        policy: Option<&QueueSettings>,
        operator: Option<&QueueSettings>,
    ) -> QueueSettings {
        let none = QueueSettings::default();
        let p = policy.unwrap_or(&none);
        let o = operator.unwrap_or(&none);
        QueueSettings {
            message_ttl_ms: lowest([args.message_ttl_ms, p.message_ttl_ms, o.message_ttl_ms]),
            expires_ms: lowest([args.expires_ms, p.expires_ms, o.expires_ms]),
            dead_letter_exchange: args
                .dead_letter_exchange
                .clone()
                .or_else(|| p.dead_letter_exchange.clone()),
            dead_letter_routing_key: args
                .dead_letter_routing_key
                .clone()
                .or_else(|| p.dead_letter_routing_key.clone()),
            max_length: lowest([args.max_length, p.max_length, o.max_length]),
            max_length_bytes: lowest([
                args.max_length_bytes,
                p.max_length_bytes,
                o.max_length_bytes,
            ]),
            overflow: args.overflow.or(p.overflow),
            delivery_limit: lowest([args.delivery_limit, p.delivery_limit, o.delivery_limit]),
        }
    }
}

/// RabbitMQ's name for a field type, as it appears in its error texts.
pub fn type_name(v: &Value) -> &'static str {
    match v {
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

/// A value rendered as RabbitMQ renders it in an error text.
fn render(v: &Value) -> String {
    match v {
        Value::ShortStr(s) => s.clone(),
        Value::LongStr(b) | Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        other => match other.as_integer() {
            Some(i) => i.to_string(),
            None => format!("{other:?}"),
        },
    }
}

/// `queue 'q' in vhost '/'`, RabbitMQ's `rs(QueueName)`.
pub fn rs_queue(vhost: &str, queue: &str) -> String {
    format!("queue '{queue}' in vhost '{vhost}'")
}

/// `exchange 'x' in vhost '/'`.
pub fn rs_exchange(vhost: &str, exchange: &str) -> String {
    format!("exchange '{exchange}' in vhost '{vhost}'")
}

fn invalid_arg(key: &str, what: &str, reason: &str) -> BrokerError {
    BrokerError::precondition(format!("invalid arg '{key}' for {what}: {reason}"))
}

fn non_neg_int(key: &str, v: &Value, what: &str) -> Result<u64, BrokerError> {
    let Some(i) = v.as_integer() else {
        return Err(invalid_arg(
            key,
            what,
            &format!("{{unacceptable_type,{}}}", type_name(v)),
        ));
    };
    if i < 0 {
        return Err(invalid_arg(key, what, &format!("{{value_negative,{i}}}")));
    }
    u64::try_from(i).map_err(|_| invalid_arg(key, what, &format!("{{value_too_large,{i}}}")))
}

fn string_arg(key: &str, v: &Value, what: &str) -> Result<String, BrokerError> {
    v.as_str().map(str::to_owned).ok_or_else(|| {
        invalid_arg(
            key,
            what,
            &format!("{{unacceptable_type,{}}}", type_name(v)),
        )
    })
}

fn ttl_value(key: &str, n: u64, what: &str) -> Result<u32, BrokerError> {
    if n > TTL_MS_MAX {
        return Err(invalid_arg(
            key,
            what,
            &format!("{{value_too_large,{n},{TTL_MS_MAX}}}"),
        ));
    }
    u32::try_from(n).map_err(|_| invalid_arg(key, what, "{value_too_large}"))
}

/// The queue arguments that take part in validation and equivalence checks.
pub const QUEUE_ARGS: [&str; 9] = [
    "x-message-ttl",
    "x-expires",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-delivery-limit",
    "x-queue-type",
];

/// Validates `queue.declare` arguments (406 naming the argument on any error) and returns
/// the settings they carry. Unknown arguments are ignored, as RabbitMQ does.
///
/// # Errors
/// `PRECONDITION_FAILED` with RabbitMQ's text, e.g.
/// `invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}`.
pub fn parse_queue_args(
    vhost: &str,
    queue: &str,
    args: &FieldTable,
) -> Result<QueueSettings, BrokerError> {
    let what = rs_queue(vhost, queue);
    let mut s = QueueSettings::default();
    for (key, v) in args.iter() {
        match key {
            // S-TTL-1: any integer type, 0 <= n <= 2^32-1.
            "x-message-ttl" => {
                let n = non_neg_int(key, v, &what)?;
                s.message_ttl_ms = Some(ttl_value(key, n, &what)?);
            }
            // S-QEXP-1: a positive integer.
            "x-expires" => {
                let n = non_neg_int(key, v, &what)?;
                if n == 0 {
                    return Err(invalid_arg(key, &what, "{value_zero,0}"));
                }
                s.expires_ms = Some(u64::from(ttl_value(key, n, &what)?));
            }
            "x-dead-letter-exchange" => s.dead_letter_exchange = Some(string_arg(key, v, &what)?),
            "x-dead-letter-routing-key" => {
                let rk = string_arg(key, v, &what)?;
                // RabbitMQ refuses a dead-letter routing key without a dead-letter exchange.
                if args.get("x-dead-letter-exchange").is_none() {
                    return Err(invalid_arg(key, &what, "routing_key_but_no_dlx_defined"));
                }
                s.dead_letter_routing_key = Some(rk);
            }
            "x-max-length" => s.max_length = Some(non_neg_int(key, v, &what)?),
            "x-max-length-bytes" => s.max_length_bytes = Some(non_neg_int(key, v, &what)?),
            "x-overflow" => {
                let text = string_arg(key, v, &what)?;
                s.overflow = Some(Overflow::parse(&text).ok_or_else(|| {
                    invalid_arg(key, &what, &format!("{{invalid_overflow,<<\"{text}\">>}}"))
                })?);
            }
            "x-delivery-limit" => s.delivery_limit = Some(non_neg_int(key, v, &what)?),
            "x-queue-type" => {
                let text = string_arg(key, v, &what)?;
                if text != "classic" {
                    return Err(invalid_arg(
                        key,
                        &what,
                        &format!("unsupported queue type '{text}'"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(s)
}

/// RabbitMQ's rendering of an argument in an equivalence error.
fn describe(v: Option<&Value>) -> String {
    match v {
        None => "none".to_owned(),
        Some(v) => format!("the value '{}' of type '{}'", render(v), type_name(v)),
    }
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_integer(), b.as_integer()) {
        (Some(x), Some(y)) => x == y,
        _ => match (a.as_str(), b.as_str()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

/// Checks a redeclare's arguments against the queue's (406 `inequivalent arg`).
///
/// # Errors
/// `PRECONDITION_FAILED`: `inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/':
/// received the value '2000' of type 'signedint' but current is the value '1000' of type
/// 'signedint'`.
pub fn assert_args_equivalence(
    what: &str,
    current: &FieldTable,
    received: &FieldTable,
    keys: &[&str],
) -> Result<(), BrokerError> {
    for key in keys {
        let (c, r) = (current.get(key), received.get(key));
        let equal = match (c, r) {
            (None, None) => true,
            (Some(a), Some(b)) => same_value(a, b),
            _ => false,
        };
        if !equal {
            return Err(BrokerError::precondition(format!(
                "inequivalent arg '{key}' for {what}: received {} but current is {}",
                describe(r),
                describe(c)
            )));
        }
    }
    Ok(())
}

/// Checks a boolean field of a redeclare (`durable`, `auto_delete`, ...).
///
/// # Errors
/// `PRECONDITION_FAILED`: `inequivalent arg 'durable' for queue 'q' in vhost '/': received
/// 'true' but current is 'false'`.
pub fn assert_field_equivalence(
    what: &str,
    field: &str,
    current: &str,
    received: &str,
) -> Result<(), BrokerError> {
    if current == received {
        Ok(())
    } else {
        Err(BrokerError::precondition(format!(
            "inequivalent arg '{field}' for {what}: received '{received}' but current is '{current}'"
        )))
    }
}

/// Parses the `expiration` property (S-TTL-2) as RabbitMQ's `rabbit_basic:parse_expiration`:
/// an optional sign and decimal digits, 0 <= n <= 2^32-1.
///
/// # Errors
/// `PRECONDITION_FAILED` (the channel closes): `invalid expiration '<text>': <reason>`.
pub fn parse_expiration(text: &str) -> Result<u32, BrokerError> {
    let fail = |reason: String| {
        BrokerError::precondition(format!("invalid expiration '{text}': {reason}"))
    };
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, text.get(1..).unwrap_or("")),
        Some(b'+') => (false, text.get(1..).unwrap_or("")),
        _ => (false, text),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return Err(fail("{invalid_expiration,no_integer}".to_owned()));
    }
    if end < digits.len() {
        return Err(fail(format!(
            "{{leftover_string,\"{}\"}}",
            digits.get(end..).unwrap_or("")
        )));
    }
    let Ok(n) = digits.parse::<u64>() else {
        return Err(fail(format!("{{value_too_large,{digits}}}")));
    };
    if negative && n > 0 {
        return Err(fail(format!("{{value_negative,-{n}}}")));
    }
    if n > TTL_MS_MAX {
        return Err(fail(format!("{{value_too_large,{n},{TTL_MS_MAX}}}")));
    }
    u32::try_from(n).map_err(|_| fail("{value_too_large}".to_owned()))
}

/// A policy after validation (S-POL-1): compiled pattern and parsed definition.
#[derive(Debug, Clone)]
pub struct Policy {
    /// As set.
    pub spec: PolicySpec,
    /// Compiled pattern.
    pub regex: Regex,
    /// Parsed definition.
    pub settings: QueueSettings,
}

impl Policy {
    /// True when this policy may apply to a queue named `queue`.
    pub fn matches_queue(&self, queue: &str) -> bool {
        matches!(self.spec.apply_to, ApplyTo::Queues | ApplyTo::All) && self.regex.is_match(queue)
    }
}

fn policy_error(name: &str, text: &str) -> BrokerError {
    BrokerError::precondition(format!("invalid policy '{name}': {text}"))
}

/// Validates a policy (S-POL-1): the pattern must compile; the definition must be a JSON
/// object whose keys are all known and well-typed; operator policies may only set numeric
/// limits (S-POL-2).
///
/// # Errors
/// `PRECONDITION_FAILED` naming the offending key or the pattern.
pub fn parse_policy(spec: &PolicySpec, operator: bool) -> Result<Policy, BrokerError> {
    let name = spec.name.as_str();
    if name.is_empty() {
        return Err(policy_error(name, "the name is empty"));
    }
    let regex = Regex::new(&spec.pattern).map_err(|e| {
        policy_error(
            name,
            &format!("invalid regular expression '{}': {e}", spec.pattern),
        )
    })?;
    let json: serde_json::Value = serde_json::from_str(&spec.definition)
        .map_err(|e| policy_error(name, &format!("the definition is not JSON: {e}")))?;
    let serde_json::Value::Object(map) = json else {
        return Err(policy_error(name, "the definition must be a JSON object"));
    };
    if map.is_empty() {
        return Err(policy_error(name, "the definition is empty"));
    }
    let mut s = QueueSettings::default();
    for (key, v) in &map {
        let int = || -> Result<u64, BrokerError> {
            v.as_u64().ok_or_else(|| {
                policy_error(
                    name,
                    &format!("'{key}' must be a non-negative integer, got {v}"),
                )
            })
        };
        let string = || -> Result<String, BrokerError> {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| policy_error(name, &format!("'{key}' must be a string, got {v}")))
        };
        if operator
            && matches!(
                key.as_str(),
                "dead-letter-exchange" | "dead-letter-routing-key" | "overflow"
            )
        {
            return Err(policy_error(
                name,
                &format!("'{key}' is not allowed in an operator policy"),
            ));
        }
        match key.as_str() {
            "message-ttl" => {
                let n = int()?;
                let ttl = u32::try_from(n).map_err(|_| {
                    policy_error(name, &format!("'message-ttl' must be at most {TTL_MS_MAX}"))
                })?;
                s.message_ttl_ms = Some(ttl);
            }
            "expires" => {
                let n = int()?;
                if n == 0 || n > TTL_MS_MAX {
                    return Err(policy_error(
                        name,
                        &format!("'expires' must be between 1 and {TTL_MS_MAX}, got {n}"),
                    ));
                }
                s.expires_ms = Some(n);
            }
            "dead-letter-exchange" => s.dead_letter_exchange = Some(string()?),
            "dead-letter-routing-key" => s.dead_letter_routing_key = Some(string()?),
            "max-length" => s.max_length = Some(int()?),
            "max-length-bytes" => s.max_length_bytes = Some(int()?),
            "delivery-limit" => s.delivery_limit = Some(int()?),
            "overflow" => {
                let text = string()?;
                s.overflow = Some(Overflow::parse(&text).ok_or_else(|| {
                    policy_error(name, &format!("'overflow' has an unknown value '{text}'"))
                })?);
            }
            _ => {
                return Err(policy_error(
                    name,
                    &format!("'{key}' is not a recognised policy key"),
                ));
            }
        }
    }
    Ok(Policy {
        spec: spec.clone(),
        regex,
        settings: s,
    })
}

/// The policy that applies to `queue` among `policies` (S-POL-2): the highest priority; ties
/// go to the greatest name, so the choice is deterministic.
pub fn select_policy<'a>(
    policies: impl Iterator<Item = &'a Policy>,
    queue: &str,
) -> Option<&'a Policy> {
    policies
        .filter(|p| p.matches_queue(queue))
        .max_by(|a, b| (a.spec.priority, &a.spec.name).cmp(&(b.spec.priority, &b.spec.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(k: &str, v: Value) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert(k, v);
        t
    }

    #[test]
    fn s_ttl_1_message_ttl_accepts_every_integer_type_in_range() {
        for v in [
            Value::U8(5),
            Value::I16(5),
            Value::U32(5),
            Value::I64(5),
            Value::I64(i64::from(u32::MAX)),
        ] {
            let s = parse_queue_args("/", "q", &table("x-message-ttl", v)).unwrap();
            assert!(s.message_ttl_ms.is_some());
        }
        assert_eq!(
            parse_queue_args("/", "q", &table("x-message-ttl", Value::I32(0)))
                .unwrap()
                .message_ttl_ms,
            Some(0)
        );
    }

    #[test]
    fn s_ttl_1_message_ttl_refuses_bad_values_naming_the_argument() {
        for (v, reason) in [
            (Value::I32(-1), "{value_negative,-1}"),
            (Value::long_str("10"), "{unacceptable_type,longstr}"),
            (Value::F64(1.0), "{unacceptable_type,double}"),
            (
                Value::I64(1 << 32),
                "{value_too_large,4294967296,4294967295}",
            ),
        ] {
            let err = parse_queue_args("/", "q", &table("x-message-ttl", v)).unwrap_err();
            assert_eq!(err.kind.reply_code(), 406);
            assert_eq!(
                err.text,
                format!("invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {reason}")
            );
        }
    }

    #[test]
    fn s_qexp_1_expires_must_be_positive() {
        let err = parse_queue_args("/", "q", &table("x-expires", Value::I32(0))).unwrap_err();
        assert_eq!(
            err.text,
            "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"
        );
        let err = parse_queue_args("/", "q", &table("x-expires", Value::I32(-5))).unwrap_err();
        assert!(err.text.contains("x-expires"));
        let ok = parse_queue_args("/", "q", &table("x-expires", Value::U16(10))).unwrap();
        assert_eq!(ok.expires_ms, Some(10));
    }

    #[test]
    fn s_dlx_2_routing_key_without_exchange_is_refused() {
        let err = parse_queue_args(
            "/",
            "q",
            &table("x-dead-letter-routing-key", Value::long_str("k")),
        )
        .unwrap_err();
        assert_eq!(
            err.text,
            "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"
        );
    }

    #[test]
    fn s_len_2_overflow_values() {
        for (text, want) in [
            ("drop-head", Overflow::DropHead),
            ("reject-publish", Overflow::RejectPublish),
            ("reject-publish-dlx", Overflow::RejectPublishDlx),
        ] {
            let s =
                parse_queue_args("/", "q", &table("x-overflow", Value::long_str(text))).unwrap();
            assert_eq!(s.overflow, Some(want));
        }
        let err =
            parse_queue_args("/", "q", &table("x-overflow", Value::long_str("drop"))).unwrap_err();
        assert!(err.text.contains("'x-overflow'"), "{}", err.text);
        let err = parse_queue_args("/", "q", &table("x-max-length", Value::I8(-1))).unwrap_err();
        assert!(err.text.contains("'x-max-length'"));
    }

    #[test]
    fn s_ttl_2_expiration_parsing() {
        assert_eq!(parse_expiration("0").unwrap(), 0);
        assert_eq!(parse_expiration("60000").unwrap(), 60000);
        assert_eq!(parse_expiration("4294967295").unwrap(), u32::MAX);
        for bad in [
            "",
            "-1",
            "1.5",
            "abc",
            "10s",
            "4294967296",
            " 1",
            "99999999999999999999",
        ] {
            let err = parse_expiration(bad).unwrap_err();
            assert_eq!(err.kind.reply_code(), 406, "{bad}");
            assert!(err.text.starts_with("invalid expiration"), "{}", err.text);
        }
    }

    #[test]
    fn inequivalent_arg_text_is_rabbitmqs() {
        let err = assert_args_equivalence(
            &rs_queue("/", "q"),
            &table("x-message-ttl", Value::I32(1000)),
            &table("x-message-ttl", Value::I32(2000)),
            &QUEUE_ARGS,
        )
        .unwrap_err();
        assert_eq!(
            err.text,
            "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received the value '2000' of type 'signedint' but current is the value '1000' of type 'signedint'"
        );
        // Integer types compare by value.
        assert_args_equivalence(
            "x",
            &table("x-message-ttl", Value::I32(1000)),
            &table("x-message-ttl", Value::I64(1000)),
            &QUEUE_ARGS,
        )
        .unwrap();
        let err = assert_args_equivalence(
            &rs_queue("/", "q"),
            &FieldTable::new(),
            &table("x-expires", Value::I32(5)),
            &QUEUE_ARGS,
        )
        .unwrap_err();
        assert!(err.text.ends_with("but current is none"), "{}", err.text);
    }

    fn spec(def: &str) -> PolicySpec {
        PolicySpec {
            name: "p".into(),
            pattern: "^q".into(),
            apply_to: ApplyTo::Queues,
            priority: 0,
            definition: def.into(),
        }
    }

    #[test]
    fn s_pol_1_definitions_are_validated() {
        let p = parse_policy(
            &spec(r#"{"message-ttl": 5, "expires": 7, "dead-letter-exchange": "dlx", "dead-letter-routing-key": "k", "max-length": 1, "max-length-bytes": 2, "overflow": "reject-publish", "delivery-limit": 3}"#),
            false,
        )
        .unwrap();
        assert_eq!(p.settings.message_ttl_ms, Some(5));
        assert_eq!(p.settings.overflow, Some(Overflow::RejectPublish));
        for (def, needle) in [
            (r#"{"foo": 1}"#, "'foo'"),
            (r#"{"message-ttl": "5"}"#, "'message-ttl'"),
            (r#"{"message-ttl": -5}"#, "'message-ttl'"),
            (r#"{"expires": 0}"#, "'expires'"),
            (r#"{"overflow": "x"}"#, "'overflow'"),
            (r#"{"max-length": 1.5}"#, "'max-length'"),
            ("[1]", "JSON object"),
            ("{", "not JSON"),
        ] {
            let err = parse_policy(&spec(def), false).unwrap_err();
            assert!(err.text.contains(needle), "{def}: {}", err.text);
        }
        let mut bad = spec(r#"{"max-length": 1}"#);
        bad.pattern = "(".into();
        assert!(
            parse_policy(&bad, false)
                .unwrap_err()
                .text
                .contains("regular expression")
        );
        let err = parse_policy(&spec(r#"{"dead-letter-exchange": "x"}"#), true).unwrap_err();
        assert!(err.text.contains("operator"));
    }

    #[test]
    fn s_pol_2_resolution_lowest_numeric_argument_wins_for_dlx() {
        let args = QueueSettings {
            message_ttl_ms: Some(100),
            dead_letter_exchange: Some("arg".into()),
            max_length: Some(10),
            ..QueueSettings::default()
        };
        let policy = QueueSettings {
            message_ttl_ms: Some(50),
            dead_letter_exchange: Some("pol".into()),
            dead_letter_routing_key: Some("polkey".into()),
            max_length: Some(20),
            overflow: Some(Overflow::RejectPublish),
            ..QueueSettings::default()
        };
        let op = QueueSettings {
            max_length: Some(5),
            message_ttl_ms: Some(70),
            ..QueueSettings::default()
        };
        let e = QueueSettings::effective(&args, Some(&policy), Some(&op));
        assert_eq!(e.message_ttl_ms, Some(50));
        assert_eq!(e.max_length, Some(5));
        assert_eq!(e.dead_letter_exchange.as_deref(), Some("arg"));
        assert_eq!(e.dead_letter_routing_key.as_deref(), Some("polkey"));
        assert_eq!(e.overflow, Some(Overflow::RejectPublish));
    }
}
