//! The errors several domains refuse with (RabbitMQ's texts), so each is worded once.

use crate::args::{rs_exchange, rs_queue};
use crate::error::{BrokerError, ErrorKind};

/// 403: the default exchange cannot be declared, deleted or bound.
pub(super) fn default_exchange_refused() -> BrokerError {
    BrokerError::new(
        ErrorKind::AccessRefused,
        "operation not permitted on the default exchange",
    )
}

/// 404: no such exchange.
pub(super) fn no_exchange(vhost: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {}", rs_exchange(vhost, name)))
}

/// 404: no such queue.
pub(super) fn no_queue(vhost: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {}", rs_queue(vhost, name)))
}

/// 405: an exclusive queue of another connection (or a redeclare that differs in
/// exclusivity).
pub(super) fn locked(vhost: &str, name: &str) -> BrokerError {
    BrokerError::new(
        ErrorKind::ResourceLocked,
        format!(
            "cannot obtain exclusive access to locked {}. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
            rs_queue(vhost, name)
        ),
    )
}

/// A replayed event names what the state lacks: the log is damaged or not this broker's.
pub(super) fn corrupt(what: &str) -> BrokerError {
    BrokerError::new(
        ErrorKind::InternalError,
        format!("event does not fit the state: {what}"),
    )
}
