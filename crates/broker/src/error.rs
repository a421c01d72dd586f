//! The broker's one error type. Its kinds mirror AMQP's reply codes, so `server/convert.rs`
//! can map a `BrokerError` to a channel or connection close without guessing (S-ERR-1).

/// What went wrong, in AMQP's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 403 `ACCESS_REFUSED` (channel): e.g. an exclusive queue of another connection.
    AccessRefused,
    /// 404 `NOT_FOUND` (channel): no such exchange or queue.
    NotFound,
    /// 405 `RESOURCE_LOCKED` (channel): an exclusive queue in use by another connection.
    ResourceLocked,
    /// 406 `PRECONDITION_FAILED` (channel): bad argument, inequivalent redeclare, unknown tag.
    PreconditionFailed,
    /// 530 `NOT_ALLOWED` (connection): e.g. an unknown vhost, or redeclaring `amq.*`.
    NotAllowed,
    /// 503 `COMMAND_INVALID` (connection): a method that makes no sense in this state.
    CommandInvalid,
    /// 504 `CHANNEL_ERROR` (connection): e.g. a method on a closed or unopened channel.
    ChannelError,
    /// 540 `NOT_IMPLEMENTED` (connection).
    NotImplemented,
    /// 541 `INTERNAL_ERROR` (connection).
    InternalError,
}

impl ErrorKind {
    /// The AMQP reply code.
    pub fn reply_code(self) -> u16 {
        match self {
            ErrorKind::AccessRefused => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::ResourceLocked => 405,
            ErrorKind::PreconditionFailed => 406,
            ErrorKind::NotAllowed => 530,
            ErrorKind::CommandInvalid => 503,
            ErrorKind::ChannelError => 504,
            ErrorKind::NotImplemented => 540,
            ErrorKind::InternalError => 541,
        }
    }

    /// True when the error closes the whole connection rather than one channel.
    pub fn closes_connection(self) -> bool {
        self.reply_code() >= 500
    }
}

/// A refusal the broker returns to a client, with the text RabbitMQ would send
/// (e.g. `PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {text}")]
pub struct BrokerError {
    /// The class of error, which fixes the reply code.
    pub kind: ErrorKind,
    /// Readable text for `reply-text`, without the `NOT_FOUND - ` prefix (the server adds it).
    pub text: String,
}

impl BrokerError {
    /// An error of `kind` with `text`.
    pub fn new(kind: ErrorKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
        }
    }

    /// 406 `PRECONDITION_FAILED`.
    pub fn precondition(text: impl Into<String>) -> Self {
        Self::new(ErrorKind::PreconditionFailed, text)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(text: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_and_connection_errors_are_told_apart() {
        assert!(!ErrorKind::PreconditionFailed.closes_connection());
        assert!(!ErrorKind::NotFound.closes_connection());
        assert!(ErrorKind::NotAllowed.closes_connection());
        assert!(ErrorKind::ChannelError.closes_connection());
        assert_eq!(BrokerError::precondition("x").kind.reply_code(), 406);
    }
}
