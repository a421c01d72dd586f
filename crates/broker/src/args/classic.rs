//! The classic-queue arguments RabbitMQ 3.13/4.x validate with texts of their own:
//! `x-max-priority` (S-PRIO-1), and `x-queue-mode` / `x-queue-version`, accepted as no-ops
//! (S-PRIO-8). Pure functions; must not depend on anything outside `args`.

use super::texts::{invalid_arg, type_name};
use crate::error::BrokerError;
use crate::value::Value;

/// The policy keys `queue-mode` (`default`, `lazy`) and `queue-version` (1, 2) (S-PRIO-8):
/// validated as RabbitMQ 3.13 does, then ignored. Returns the key, for the warning.
///
/// # Errors
/// `"eager" is not a valid queue-mode value`, `3 is not a valid queue-version value`.
pub fn no_op_policy_key(key: &str, v: &serde_json::Value) -> Result<&'static str, String> {
    if key == "queue-mode" {
        match v.as_str() {
            Some("default" | "lazy") => Ok("queue-mode"),
            _ => Err(format!("{v} is not a valid queue-mode value")),
        }
    } else {
        match v.as_u64() {
            Some(1 | 2) => Ok("queue-version"),
            _ => Err(format!("{v} is not a valid queue-version value")),
        }
    }
}

/// The arguments wharf refuses bad values of only since priority queues (before, it ignored
/// them): a log written earlier may hold a queue declared with a value now refused, and
/// replay brings that queue back as it was then, without them ([`crate::Broker::apply`]).
pub(super) const LATE_CHECKED_ARGS: [&str; 3] =
    ["x-max-priority", "x-queue-mode", "x-queue-version"];

/// RabbitMQ's `check_non_neg_int_arg`: any AMQP integer type, not negative. Its type error
/// is a quoted sentence (`"expected integer, got longstr"`), unlike the older
/// `{unacceptable_type,…}` of `x-message-ttl` and friends.
fn non_negative(key: &str, v: &Value, what: &str) -> Result<u64, BrokerError> {
    let Some(i) = v.as_integer() else {
        let text = format!("\"expected integer, got {}\"", type_name(v));
        return Err(invalid_arg(key, what, &text));
    };
    if i < 0 {
        return Err(invalid_arg(key, what, &format!("{{value_negative,{i}}}")));
    }
    Ok(u64::try_from(i).unwrap_or(u64::MAX))
}

/// `x-max-priority` (S-PRIO-1): an integer 0..=255 (255 is RabbitMQ's
/// `?MAX_SUPPORTED_PRIORITY`, and a `u8` holds exactly that range). The value as given; a queue declared
/// with 0 still has priorities 0 and 1, as RabbitMQ 3.13+ (see [`priority_lanes`]).
///
/// # Errors
/// `{value_negative,-1}`, `{max_value_exceeded,256}`, `"expected integer, got longstr"`.
pub fn max_priority(key: &str, v: &Value, what: &str) -> Result<u8, BrokerError> {
    let n = non_negative(key, v, what)?;
    u8::try_from(n).map_err(|_| invalid_arg(key, what, &format!("{{max_value_exceeded,{n}}}")))
}

/// The highest priority of a queue declared with `x-max-priority` `max` (S-PRIO-1): RabbitMQ
/// 3.13+ gives a queue at least priorities 0 and 1 (`max(1, min(Max, 255))`).
pub fn priority_lanes(max: Option<u8>) -> Option<u8> {
    max.map(|m| m.max(1))
}

/// `x-queue-mode` (S-PRIO-8): `default` or `lazy`, a string; a no-op in wharf, as in
/// RabbitMQ 3.12+ (every classic queue pages to disk by its own rule).
///
/// # Errors
/// `{unacceptable_type,signedint}` for a non-string, `"unsupported queue mode 'x'"`.
pub fn queue_mode(key: &str, v: &Value, what: &str) -> Result<(), BrokerError> {
    let Some(mode) = v.as_str() else {
        let text = format!("{{unacceptable_type,{}}}", type_name(v));
        return Err(invalid_arg(key, what, &text));
    };
    if matches!(mode, "default" | "lazy") {
        Ok(())
    } else {
        let text = format!("\"unsupported queue mode '{mode}'\"");
        Err(invalid_arg(key, what, &text))
    }
}

/// `x-queue-version` (S-PRIO-8): 1 or 2, as RabbitMQ 3.13 and 4.0/4.1 accept; a no-op in
/// wharf (its log has one format of its own).
///
/// # Errors
/// As [`max_priority`]'s type and sign errors; `"unsupported queue version '3'"`.
pub fn queue_version(key: &str, v: &Value, what: &str) -> Result<(), BrokerError> {
    match non_negative(key, v, what)? {
        1 | 2 => Ok(()),
        n => Err(invalid_arg(
            key,
            what,
            &format!("\"unsupported queue version '{n}'\""),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHAT: &str = "queue 'q' in vhost '/'";

    fn text(r: Result<impl std::fmt::Debug, BrokerError>) -> String {
        let e = r.expect_err("refused");
        assert_eq!(e.kind.reply_code(), 406);
        e.text
    }

    #[test]
    fn s_prio_1_max_priority_texts_are_rabbitmqs() {
        let k = "x-max-priority";
        let prefix = "invalid arg 'x-max-priority' for queue 'q' in vhost '/': ";
        for (v, reason) in [
            (Value::I32(-1), "{value_negative,-1}"),
            (Value::I32(256), "{max_value_exceeded,256}"),
            (Value::I64(1_000_000), "{max_value_exceeded,1000000}"),
            (Value::long_str("5"), "\"expected integer, got longstr\""),
            (Value::Bool(true), "\"expected integer, got bool\""),
            (Value::F64(1.5), "\"expected integer, got double\""),
        ] {
            assert_eq!(text(max_priority(k, &v, WHAT)), format!("{prefix}{reason}"));
        }
        for (v, want) in [
            (Value::U8(0), 0),
            (Value::I16(10), 10),
            (Value::U32(255), 255),
            (Value::I64(7), 7),
        ] {
            assert_eq!(max_priority(k, &v, WHAT).unwrap(), want);
        }
        assert_eq!(priority_lanes(Some(0)), Some(1), "0 still gives 0 and 1");
        assert_eq!(priority_lanes(Some(10)), Some(10));
        assert_eq!(priority_lanes(None), None);
    }

    #[test]
    fn s_prio_8_queue_mode_and_version_refuse_what_rabbitmq_refuses() {
        let prefix = |k: &str| format!("invalid arg '{k}' for queue 'q' in vhost '/': ");
        let m = "x-queue-mode";
        assert!(queue_mode(m, &Value::long_str("lazy"), WHAT).is_ok());
        assert!(queue_mode(m, &Value::long_str("default"), WHAT).is_ok());
        assert_eq!(
            text(queue_mode(m, &Value::long_str("bogus"), WHAT)),
            format!("{}\"unsupported queue mode 'bogus'\"", prefix(m))
        );
        assert_eq!(
            text(queue_mode(m, &Value::I32(5), WHAT)),
            format!("{}{{unacceptable_type,signedint}}", prefix(m))
        );
        let v = "x-queue-version";
        assert!(queue_version(v, &Value::U8(1), WHAT).is_ok());
        assert!(queue_version(v, &Value::I32(2), WHAT).is_ok());
        for (val, reason) in [
            (Value::I32(3), "\"unsupported queue version '3'\""),
            (Value::I32(0), "\"unsupported queue version '0'\""),
            (Value::I32(-1), "{value_negative,-1}"),
            (Value::long_str("2"), "\"expected integer, got longstr\""),
        ] {
            assert_eq!(
                text(queue_version(v, &val, WHAT)),
                format!("{}{reason}", prefix(v))
            );
        }
    }
}
