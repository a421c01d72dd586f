//! RabbitMQ's wording in error texts: field type names, rendered values, `rs(Resource)`, the
//! `invalid arg` refusal.

use crate::error::BrokerError;
use crate::value::Value;

/// RabbitMQ's 406 for a bad argument: `invalid arg 'K' for queue 'q' in vhost '/': REASON`.
pub(crate) fn invalid_arg(key: &str, what: &str, reason: &str) -> BrokerError {
    BrokerError::precondition(format!("invalid arg '{key}' for {what}: {reason}"))
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
pub(super) fn render(v: &Value) -> String {
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
