//! [`ProtocolError`]: everything a peer can get wrong at the framing and content-assembly level,
//! each with the reply code RabbitMQ answers with and a readable text for the `close` method.
//! Depends only on `thiserror` and [`super::reply_code`]; no tokio, no broker.

use super::reply_code;

/// A protocol violation by the peer. Every variant maps to one AMQP reply code
/// ([`ProtocolError::reply_code`]) and says whether it closes the connection or only the channel
/// ([`ProtocolError::is_connection_error`]). The `Display` text is what goes into the
/// `reply-text` of `connection.close` / `channel.close` (truncate to 255 bytes when sending).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A frame header announced a payload larger than the negotiated `frame_max` allows. Raised
    /// from the 7-byte header alone, before the payload is buffered.
    #[error("frame too large: payload of {size_bytes} octets exceeds frame_max {frame_max_bytes}")]
    FrameTooLarge {
        /// Payload size announced by the frame header.
        size_bytes: u32,
        /// The `frame_max` in force.
        frame_max_bytes: u32,
    },
    /// A frame type other than method (1), header (2), body (3) or heartbeat (8).
    #[error("unknown frame type {frame_type} on channel {channel}")]
    UnknownFrameType {
        /// The frame type octet.
        frame_type: u8,
        /// The channel the frame was sent on.
        channel: u16,
    },
    /// The octet after the payload was not the frame-end octet 0xCE.
    #[error("invalid frame end marker {found:#04x} (expected 0xce) on channel {channel}")]
    BadFrameEnd {
        /// The octet found instead.
        found: u8,
        /// The channel the frame was sent on.
        channel: u16,
    },
    /// A heartbeat frame with a non-empty payload.
    #[error("heartbeat frame with {size_bytes} payload octets (must be empty)")]
    BadHeartbeat {
        /// The payload size of the heartbeat frame.
        size_bytes: u32,
    },
    /// A frame that is not allowed on that channel: a heartbeat on a channel other than 0, or a
    /// content header or body on channel 0.
    #[error("{kind} frame not allowed on channel {channel}")]
    FrameOnWrongChannel {
        /// "heartbeat", "content header" or "content body".
        kind: &'static str,
        /// The channel the frame was sent on.
        channel: u16,
    },
    /// A method frame naming a class/method pair that AMQP 0-9-1 (with RabbitMQ's extensions)
    /// does not define.
    #[error("unknown method class-id {class_id} method-id {method_id}")]
    UnknownMethod {
        /// The class id of the method frame.
        class_id: u16,
        /// The method id of the method frame.
        method_id: u16,
    },
    /// A method frame or content header whose fields could not be decoded (truncated, trailing
    /// octets, a short string that is not UTF-8, an unknown field type, ...). RabbitMQ answers
    /// with `FRAME_ERROR` "cannot decode".
    #[error("cannot decode {what} on channel {channel}")]
    Undecodable {
        /// Class and method id of the method concerned, `(0, 0)` when none (for the
        /// `class-id`/`method-id` fields of `connection.close` / `channel.close`).
        method_ids: (u16, u16),
        /// What failed: a method name like "basic.publish" or "content header".
        what: &'static str,
        /// The channel the frame was sent on.
        channel: u16,
    },
    /// A field table or array nested deeper than `limits::FIELD_TABLE_DEPTH_MAX`, refused before
    /// the recursive parser sees it.
    #[error("field table nested deeper than {depth_max} levels in {what} on channel {channel}")]
    TableTooDeep {
        /// Class and method id of the method concerned, `(0, 0)` when none (for the
        /// `class-id`/`method-id` fields of `connection.close` / `channel.close`).
        method_ids: (u16, u16),
        /// What held the table: a method name or "content header".
        what: &'static str,
        /// The channel the frame was sent on.
        channel: u16,
        /// The nesting limit.
        depth_max: usize,
    },
    /// A frame arrived that the channel's content state does not allow: a content header or
    /// body without a content-bearing method before it, a method in the middle of a content,
    /// a content header of the wrong class or with a non-zero weight.
    #[error("unexpected frame on channel {channel}: {detail}")]
    UnexpectedFrame {
        /// Class and method id of the method concerned, `(0, 0)` when none (for the
        /// `class-id`/`method-id` fields of `connection.close` / `channel.close`).
        method_ids: (u16, u16),
        /// The channel the frame was sent on.
        channel: u16,
        /// What was expected and what came (its text is RabbitMQ's).
        detail: FrameMismatch,
    },
    /// A content body frame carried more octets than the content header announced.
    #[error("content body frame exceeds remaining content size on channel {channel}")]
    BodyOverrun {
        /// Class and method id of the method concerned, `(0, 0)` when none (for the
        /// `class-id`/`method-id` fields of `connection.close` / `channel.close`).
        method_ids: (u16, u16),
        /// The channel the frame was sent on.
        channel: u16,
    },
    /// `basic.qos` with a `prefetch_size` other than 0, which RabbitMQ does not implement
    /// (540, with its text). amq-protocol drops the field, so the decoder checks it.
    #[error("prefetch_size!=0 ({prefetch_size})")]
    PrefetchSize {
        /// The prefetch size asked for, in octets.
        prefetch_size: u32,
    },
    /// The content header announced a body larger than the configured maximum. A channel error
    /// (406), as RabbitMQ's `max_message_size` check: the server closes the channel and, as the
    /// spec requires of a closing channel, discards the channel's remaining body frames.
    #[error("message size {body_size_bytes} is larger than configured max size {body_bytes_max}")]
    MessageTooLarge {
        /// Class and method id of the method concerned, `(0, 0)` when none (for the
        /// `class-id`/`method-id` fields of `connection.close` / `channel.close`).
        method_ids: (u16, u16),
        /// The channel the content was sent on.
        channel: u16,
        /// The body size announced by the content header.
        body_size_bytes: u64,
        /// The limit in force.
        body_bytes_max: u32,
    },
    /// A large body being written to its spool (S-BIG-3) could neither be written nor read
    /// back into memory: the server's own failure (541, a connection error, as RabbitMQ's
    /// internal errors).
    #[error("INTERNAL_ERROR - cannot store the message body: {reason}")]
    BodyStorage {
        /// Class and method id of the method concerned.
        method_ids: (u16, u16),
        /// The operating system's error, as text.
        reason: String,
    },
}

/// What a channel's content state expected instead of the frame that came
/// ([`ProtocolError::UnexpectedFrame`]). Displayed in RabbitMQ's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameMismatch {
    /// A content header or body without a content-bearing method before it.
    #[error("expected method frame, got non method frame instead")]
    ExpectedMethod,
    /// Something other than the content header after a content-bearing method.
    #[error("expected content header for class {class_id}, got non content header frame instead")]
    ExpectedHeader {
        /// The method's class.
        class_id: u16,
    },
    /// A content header of another class than its method's.
    #[error("expected content header for class {class_id}, got one for class {found} instead")]
    HeaderClass {
        /// The method's class.
        class_id: u16,
        /// The header's class.
        found: u16,
    },
    /// Something other than a body frame in the middle of a content.
    #[error("expected content body, got non content body frame instead")]
    ExpectedBody,
}

impl ProtocolError {
    /// The AMQP reply code to send in `connection.close` or `channel.close`.
    pub fn reply_code(&self) -> u16 {
        match self {
            ProtocolError::FrameTooLarge { .. }
            | ProtocolError::UnknownFrameType { .. }
            | ProtocolError::BadFrameEnd { .. }
            | ProtocolError::BadHeartbeat { .. }
            | ProtocolError::Undecodable { .. }
            | ProtocolError::TableTooDeep { .. }
            | ProtocolError::BodyOverrun { .. } => reply_code::FRAME_ERROR,
            ProtocolError::FrameOnWrongChannel { .. } | ProtocolError::UnexpectedFrame { .. } => {
                reply_code::UNEXPECTED_FRAME
            }
            ProtocolError::UnknownMethod { .. } | ProtocolError::PrefetchSize { .. } => {
                reply_code::NOT_IMPLEMENTED
            }
            ProtocolError::MessageTooLarge { .. } => reply_code::PRECONDITION_FAILED,
            ProtocolError::BodyStorage { .. } => reply_code::INTERNAL_ERROR,
        }
    }

    /// True when the error closes the whole connection (`connection.close`), false when it only
    /// closes the channel it happened on (`channel.close`). Every frame-level error is a
    /// connection error: after one, the byte stream cannot be trusted.
    pub fn is_connection_error(&self) -> bool {
        reply_code::is_connection_error(self.reply_code())
    }

    /// Class and method id of the method that caused the error, for the `class-id` and
    /// `method-id` fields of the close method (RabbitMQ fills them the same way); `(0, 0)`
    /// when the error is not about a method.
    pub fn method_ids(&self) -> (u16, u16) {
        match self {
            ProtocolError::UnknownMethod {
                class_id,
                method_id,
            } => (*class_id, *method_id),
            ProtocolError::PrefetchSize { .. } => (60, 10),
            ProtocolError::Undecodable { method_ids, .. }
            | ProtocolError::TableTooDeep { method_ids, .. }
            | ProtocolError::UnexpectedFrame { method_ids, .. }
            | ProtocolError::BodyOverrun { method_ids, .. }
            | ProtocolError::MessageTooLarge { method_ids, .. }
            | ProtocolError::BodyStorage { method_ids, .. } => *method_ids,
            _ => (0, 0),
        }
    }

    /// The channel the error happened on, when it is a channel error (for `channel.close`).
    pub fn channel(&self) -> Option<u16> {
        match self {
            ProtocolError::MessageTooLarge { channel, .. } => Some(*channel),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_message_too_large_is_a_channel_error() {
        let too_large = ProtocolError::MessageTooLarge {
            channel: 3,
            body_size_bytes: 10,
            body_bytes_max: 5,
            method_ids: (60, 40),
        };
        assert_eq!(too_large.method_ids(), (60, 40));
        assert!(!too_large.is_connection_error());
        assert_eq!(too_large.reply_code(), reply_code::PRECONDITION_FAILED);
        assert_eq!(too_large.channel(), Some(3));
        assert_eq!(
            too_large.to_string(),
            "message size 10 is larger than configured max size 5"
        );
        let end = ProtocolError::BadFrameEnd {
            found: 0,
            channel: 1,
        };
        assert!(end.is_connection_error());
        assert_eq!(end.reply_code(), reply_code::FRAME_ERROR);
    }
}
