//! RabbitMQ's equivalence checks on a redeclare: the same flags and the same arguments, or
//! 406 with its text.

use super::texts::{render, type_name};
use crate::error::BrokerError;
use crate::value::{FieldTable, Value};

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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{QUEUE_ARGS, rs_queue};

    fn table(k: &str, v: Value) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert(k, v);
        t
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
}
