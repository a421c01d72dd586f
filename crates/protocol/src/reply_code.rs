//! AMQP 0-9-1 reply codes, named as the specification names them (section 1.5.2 of the XML
//! spec, "Constants"), so that a grep of the spec finds the code. Plain data: depends on nothing.
//!
//! Codes below 500 (except 320 and 402) are channel ("soft") errors in the spec's classification;
//! the rest are connection ("hard") errors. [`is_connection_error`] encodes that table.

/// Indicates that the method completed successfully.
pub const REPLY_SUCCESS: u16 = 200;
/// The client attempted to transfer content larger than the server could accept.
pub const CONTENT_TOO_LARGE: u16 = 311;
/// Returned with `basic.return` when a mandatory message cannot be routed (RabbitMQ extension
/// of the spec's constant list).
pub const NO_ROUTE: u16 = 312;
/// Returned with `basic.return` when an immediate message cannot be delivered.
pub const NO_CONSUMERS: u16 = 313;
/// An operator intervened to close the connection.
pub const CONNECTION_FORCED: u16 = 320;
/// The client tried to work with an unknown virtual host.
pub const INVALID_PATH: u16 = 402;
/// The client attempted to work with a server entity to which it has no access.
pub const ACCESS_REFUSED: u16 = 403;
/// The client attempted to work with a server entity that does not exist.
pub const NOT_FOUND: u16 = 404;
/// The client attempted to work with a server entity to which it has no access because another
/// client is working with it.
pub const RESOURCE_LOCKED: u16 = 405;
/// The client requested a method that was not allowed because some precondition failed.
pub const PRECONDITION_FAILED: u16 = 406;
/// The sender sent a malformed frame that the recipient could not decode.
pub const FRAME_ERROR: u16 = 501;
/// The sender sent a frame that contained illegal values for one or more fields.
pub const SYNTAX_ERROR: u16 = 502;
/// The client sent an invalid sequence of frames, attempting to perform an operation that was
/// considered invalid by the server.
pub const COMMAND_INVALID: u16 = 503;
/// The client attempted to work with a channel that had not been correctly opened.
pub const CHANNEL_ERROR: u16 = 504;
/// The peer sent a frame that was not expected, usually in the context of a content header and
/// body.
pub const UNEXPECTED_FRAME: u16 = 505;
/// The server could not complete the method because it lacked sufficient resources.
pub const RESOURCE_ERROR: u16 = 506;
/// The client tried to work with some entity in a manner that is prohibited by the server.
pub const NOT_ALLOWED: u16 = 530;
/// The client tried to use functionality that is not implemented in the server.
pub const NOT_IMPLEMENTED: u16 = 540;
/// The server could not complete the method because of an internal error.
pub const INTERNAL_ERROR: u16 = 541;

/// True when `code` is a connection (hard) error in the spec's table: the whole connection is
/// closed with `connection.close`. False for channel (soft) errors and for non-error codes.
pub const fn is_connection_error(code: u16) -> bool {
    matches!(
        code,
        CONNECTION_FORCED
            | INVALID_PATH
            | FRAME_ERROR
            | SYNTAX_ERROR
            | COMMAND_INVALID
            | CHANNEL_ERROR
            | UNEXPECTED_FRAME
            | RESOURCE_ERROR
            | NOT_ALLOWED
            | NOT_IMPLEMENTED
            | INTERNAL_ERROR
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_classification_of_hard_and_soft_errors() {
        for soft in [
            CONTENT_TOO_LARGE,
            NO_ROUTE,
            NO_CONSUMERS,
            ACCESS_REFUSED,
            NOT_FOUND,
            RESOURCE_LOCKED,
            PRECONDITION_FAILED,
        ] {
            assert!(!is_connection_error(soft), "{soft} is a channel error");
        }
        for hard in [
            CONNECTION_FORCED,
            INVALID_PATH,
            FRAME_ERROR,
            UNEXPECTED_FRAME,
            INTERNAL_ERROR,
        ] {
            assert!(is_connection_error(hard), "{hard} is a connection error");
        }
        assert!(!is_connection_error(REPLY_SUCCESS));
    }
}
