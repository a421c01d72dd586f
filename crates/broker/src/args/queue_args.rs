//! Queue arguments (`x-message-ttl`, `x-expires`, `x-dead-letter-*`, `x-max-length*`,
//! `x-overflow`, `x-delivery-limit`, `x-queue-type`, `x-single-active-consumer`,
//! `x-consumer-timeout`, the quorum queue's own, and through `classic.rs` `x-max-priority`,
//! `x-queue-mode`, `x-queue-version`): validation with RabbitMQ's error texts, and the
//! resolution of argument + policy + operator policy into a queue's effective settings
//! (S-TTL-1, S-TTL-3, S-QEXP-1, S-DLX-2, S-LEN-1..2, S-POL-2, S-CONS, S-QQ, S-PRIO).

use super::classic;
use super::queue_type::{
    QueueKind, check_arguments_for_kind, check_dlx_strategy, check_leader_locator, queue_kind,
};
use super::texts::{invalid_arg, rs_queue, type_name};
use crate::error::BrokerError;
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
    pub(super) fn parse(s: &str) -> Option<Overflow> {
        match s {
            "drop-head" => Some(Overflow::DropHead),
            "reject-publish" => Some(Overflow::RejectPublish),
            "reject-publish-dlx" => Some(Overflow::RejectPublishDlx),
            _ => None,
        }
    }
}

/// How a quorum queue dead-letters (S-QQ-7): `x-dead-letter-strategy` or the
/// `dead-letter-strategy` policy key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeadLetterStrategy {
    /// A message that cannot be dead-lettered is dropped (S-DLX-4), as a classic queue does.
    #[default]
    AtMostOnce,
    /// A message that cannot be dead-lettered waits in its queue until it can (S-QQ-10).
    AtLeastOnce,
}

impl DeadLetterStrategy {
    pub(super) fn parse(s: &str) -> Option<DeadLetterStrategy> {
        match s {
            "at-most-once" => Some(DeadLetterStrategy::AtMostOnce),
            "at-least-once" => Some(DeadLetterStrategy::AtLeastOnce),
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
    /// Returns allowed before dead-lettering with `delivery_limit` (S-DLX-1); `u64::MAX`
    /// means unlimited (a quorum queue's negative `x-delivery-limit`, S-QQ-3).
    pub delivery_limit: Option<u64>,
    /// The queue type (argument only; S-QQ-1).
    pub queue_type: Option<QueueKind>,
    /// `x-single-active-consumer` (argument only; S-CONS-4).
    pub single_active_consumer: Option<bool>,
    /// Consumer timeout in ms: `x-consumer-timeout` or the `consumer-timeout` policy key,
    /// the lowest wins (S-CONS-8).
    pub consumer_timeout_ms: Option<u64>,
    /// `x-max-priority` as declared (S-PRIO-1); an argument only, never a policy key.
    pub max_priority: Option<u8>,
    /// `x-dead-letter-strategy` or the `dead-letter-strategy` policy key (S-QQ-7); the
    /// argument wins.
    pub dead_letter_strategy: Option<DeadLetterStrategy>,
}

/// A quorum queue's delivery limit when none is set, as RabbitMQ 4.x (S-QQ-3).
pub const QUORUM_DELIVERY_LIMIT: u64 = 20;

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
            overflow: Self::overflow(args, p),
            delivery_limit: Self::delivery_limit(args, p, o),
            queue_type: args.queue_type,
            single_active_consumer: args.single_active_consumer,
            consumer_timeout_ms: lowest([
                args.consumer_timeout_ms,
                p.consumer_timeout_ms,
                o.consumer_timeout_ms,
            ]),
            max_priority: args.max_priority,
            dead_letter_strategy: args.dead_letter_strategy.or(p.dead_letter_strategy),
        }
    }

    /// S-QQ-7, S-QQ-10: at-least-once dead-lettering is in effect only on a quorum queue that
    /// asks for it, has a dead-letter exchange, and overflows with `reject-publish` (which
    /// bounds what waits); RabbitMQ's `dead_letter_handler`.
    pub fn at_least_once(&self) -> bool {
        self.kind() == QueueKind::Quorum
            && self.dead_letter_strategy == Some(DeadLetterStrategy::AtLeastOnce)
            && self.dead_letter_exchange.is_some()
            && self.overflow == Some(Overflow::RejectPublish)
    }

    /// S-QQ-7: asks for at-least-once dead-lettering that is not in effect because the
    /// overflow is not `reject-publish` (RabbitMQ falls back to at-most-once with a warning).
    pub fn at_least_once_falls_back(&self) -> bool {
        self.kind() == QueueKind::Quorum
            && self.dead_letter_strategy == Some(DeadLetterStrategy::AtLeastOnce)
            && self.dead_letter_exchange.is_some()
            && self.overflow != Some(Overflow::RejectPublish)
    }

    /// The queue's type (classic unless `x-queue-type` says otherwise).
    pub fn kind(&self) -> QueueKind {
        self.queue_type.unwrap_or_default()
    }

    /// S-QQ-3: the lowest limit wins, an unlimited one (a quorum queue's negative argument)
    /// wins over any other as RabbitMQ's `resolve_delivery_limit`; a quorum queue without one
    /// has 20, a classic queue none (S-DLX-1).
    fn delivery_limit(args: &Self, p: &Self, o: &Self) -> Option<u64> {
        let set = [args.delivery_limit, p.delivery_limit, o.delivery_limit];
        let limit = if set.contains(&Some(u64::MAX)) {
            Some(u64::MAX)
        } else {
            lowest(set)
        };
        match (limit, args.kind()) {
            (None, QueueKind::Quorum) => Some(QUORUM_DELIVERY_LIMIT),
            (limit, _) => limit,
        }
    }

    /// S-QQ-8: a quorum queue does not do `reject-publish-dlx`; RabbitMQ falls back to
    /// `drop-head` (with a warning), and so does wharf.
    fn overflow(args: &Self, p: &Self) -> Option<Overflow> {
        let chosen = args.overflow.or(p.overflow);
        match (chosen, args.kind()) {
            (Some(Overflow::RejectPublishDlx), QueueKind::Quorum) => Some(Overflow::DropHead),
            (chosen, _) => chosen,
        }
    }
}

pub(super) fn non_neg_int(key: &str, v: &Value, what: &str) -> Result<u64, BrokerError> {
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

pub(super) fn string_arg(key: &str, v: &Value, what: &str) -> Result<String, BrokerError> {
    v.as_str().map(str::to_owned).ok_or_else(|| {
        invalid_arg(
            key,
            what,
            &format!("{{unacceptable_type,{}}}", type_name(v)),
        )
    })
}

pub(super) fn ttl_value(key: &str, n: u64, what: &str) -> Result<u32, BrokerError> {
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
pub const QUEUE_ARGS: [&str; 12] = [
    "x-message-ttl",
    "x-expires",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-delivery-limit",
    "x-queue-type",
    "x-max-priority",
    "x-queue-mode",
    "x-queue-version",
];

/// The arguments this file's consumer and quorum rules add to the redeclare equivalence
/// check (RabbitMQ checks every argument of the queue's type).
pub const QUEUE_ARGS_CONS: [&str; 3] = [
    "x-single-active-consumer",
    "x-consumer-timeout",
    "x-dead-letter-strategy",
];

/// Validates `queue.declare` arguments (406 naming the argument on any error) and returns
/// the settings they carry. The queue type comes first; an argument RabbitMQ knows for
/// another queue type is refused (S-QQ-5); arguments no RabbitMQ queue type knows are
/// ignored, as RabbitMQ does.
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
    let kind = queue_kind(vhost, queue, args)?;
    // RabbitMQ validates only the arguments of the queue's type, and refuses the others.
    check_arguments_for_kind(kind, vhost, queue, args)?;
    let mut s = QueueSettings {
        queue_type: args.get("x-queue-type").map(|_| kind),
        ..QueueSettings::default()
    };
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
            "x-delivery-limit" => s.delivery_limit = Some(delivery_limit(kind, key, v, &what)?),
            "x-max-priority" => s.max_priority = Some(classic::max_priority(key, v, &what)?),
            "x-queue-mode" => classic::queue_mode(key, v, &what)?,
            "x-queue-version" => classic::queue_version(key, v, &what)?,
            _ => consumer_and_quorum_arg(key, v, &what, &mut s)?,
        }
    }
    Ok(s)
}

/// The arguments of a queue read back from the log. A queue logged before wharf checked
/// the consumer, quorum and classic-only arguments (S-CONS, S-QQ, S-PRIO-1) may carry one it
/// now refuses; it comes back with the arguments checked before (`QUEUE_ARGS` less
/// `classic::LATE_CHECKED_ARGS`), as it ran then, rather than stopping recovery.
///
/// # Errors
/// As [`parse_queue_args`], when even those fail (a damaged log).
pub(crate) fn parse_logged_queue_args(
    vhost: &str,
    queue: &str,
    args: &FieldTable,
) -> Result<QueueSettings, BrokerError> {
    parse_queue_args(vhost, queue, args).or_else(|_| {
        let mut older = FieldTable::new();
        for (key, v) in args.iter() {
            if QUEUE_ARGS.contains(&key) && !classic::LATE_CHECKED_ARGS.contains(&key) {
                older.insert(key, v.clone());
            }
        }
        parse_queue_args(vhost, queue, &older)
    })
}

/// S-QQ-3: a quorum queue takes any integer (negative: unlimited); a classic queue's
/// (an extension, S-DLX-1) must be non-negative.
fn delivery_limit(kind: QueueKind, key: &str, v: &Value, what: &str) -> Result<u64, BrokerError> {
    match (kind, v.as_integer()) {
        (QueueKind::Quorum, Some(i)) if i < 0 => Ok(u64::MAX),
        _ => non_neg_int(key, v, what),
    }
}

/// The arguments of consumers (S-CONS) and of quorum queues (S-QQ); others are left alone
/// (the queue type check refuses those of other types).
fn consumer_and_quorum_arg(
    key: &str,
    v: &Value,
    what: &str,
    s: &mut QueueSettings,
) -> Result<(), BrokerError> {
    match key {
        // S-CONS-4: a bool, nothing else (RabbitMQ's check_bool_arg).
        "x-single-active-consumer" => match v {
            Value::Bool(b) => s.single_active_consumer = Some(*b),
            other => {
                return Err(invalid_arg(
                    key,
                    what,
                    &format!("{{unacceptable_type,{}}}", type_name(other)),
                ));
            }
        },
        "x-consumer-timeout" => s.consumer_timeout_ms = Some(non_neg_int(key, v, what)?),
        "x-dead-letter-strategy" => {
            check_dlx_strategy(key, v, what)?;
            s.dead_letter_strategy = v.as_str().and_then(DeadLetterStrategy::parse);
        }
        "x-queue-leader-locator" => check_leader_locator(key, v, what)?,
        "x-quorum-initial-group-size" if non_neg_int(key, v, what)? == 0 => {
            return Err(invalid_arg(key, what, "{value_zero,0}"));
        }
        "x-quorum-initial-group-size" | "x-max-in-memory-length" | "x-max-in-memory-bytes" => {
            non_neg_int(key, v, what)?;
        }
        _ => {}
    }
    Ok(())
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
}
