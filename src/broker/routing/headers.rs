//! Headers exchange routing: a binding's arguments are matched against a message's headers,
//! with `x-match` = `all` (default) or `any`.
//!
//! FOUNDATION STUB: the routing work completes RabbitMQ's rules (`all-with-x`, `any-with-x`,
//! void values, binding validation); the API stays.

use crate::broker::error::BrokerError;
use crate::broker::value::{FieldTable, Value};

/// True when a message with `headers` matches a binding with `binding_args`.
pub fn headers_match(binding_args: &FieldTable, headers: Option<&FieldTable>) -> bool {
    let any = matches!(
        binding_args.get("x-match").and_then(Value::as_str),
        Some("any")
    );
    let mut wanted = binding_args
        .iter()
        .filter(|(k, _)| !k.starts_with("x-"))
        .peekable();
    if wanted.peek().is_none() {
        return !any;
    }
    let mut hit = |(k, v): (&str, &Value)| headers.and_then(|h| h.get(k)) == Some(v);
    if any {
        wanted.any(&mut hit)
    } else {
        wanted.all(&mut hit)
    }
}

/// Checks a headers-exchange binding's arguments at bind time (406 on a bad `x-match`).
///
/// # Errors
/// `PRECONDITION_FAILED` when `x-match` has a value RabbitMQ does not accept.
pub fn validate_binding_args(binding_args: &FieldTable) -> Result<(), BrokerError> {
    let _ = binding_args;
    Ok(())
}
