//! The errors several domains refuse with (RabbitMQ's texts), so each is worded once.

use crate::args::{rs_exchange, rs_queue};
use crate::error::{BrokerError, ErrorKind};

pub(super) fn default_exchange_refused() -> BrokerError {
    BrokerError::new(
        ErrorKind::AccessRefused,
        "operation not permitted on the default exchange",
    )
}

pub(super) fn no_exchange(vhost: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {}", rs_exchange(vhost, name)))
}

pub(super) fn no_queue(vhost: &str, name: &str) -> BrokerError {
    BrokerError::not_found(format!("no {}", rs_queue(vhost, name)))
}

pub(super) fn locked(vhost: &str, name: &str) -> BrokerError {
    BrokerError::new(
        ErrorKind::ResourceLocked,
        format!(
            "cannot obtain exclusive access to locked {}. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
            rs_queue(vhost, name)
        ),
    )
}

pub(super) fn corrupt(what: &str) -> BrokerError {
    BrokerError::new(
        ErrorKind::InternalError,
        format!("event does not fit the state: {what}"),
    )
}
