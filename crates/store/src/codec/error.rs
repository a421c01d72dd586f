//! The codec's errors: [`EncodeError`] for an event that does not fit the format,
//! [`DecodeError`] for a payload that is not a valid record (with the offset in the payload).

/// An event that cannot be encoded: a field longer than its length prefix allows, or
/// nesting deeper than the protocol accepts. Nothing was appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A name longer than a `u16` length prefix (names come from AMQP short strings, at most
    /// 255 bytes; only the embedded API could pass a longer one).
    #[error("{field} of {len} bytes is too long for the store format (max {max})")]
    TooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The format's maximum.
        max: usize,
    },
    /// A field table or array nested deeper than `limits::FIELD_TABLE_DEPTH_MAX`.
    #[error("field table nested deeper than {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
}

/// A payload that is not a valid store record. `offset` is inside the payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable store record (kind {kind:#04x}) at payload byte {offset}: {what}")]
pub struct DecodeError {
    /// The record kind byte.
    pub kind: u8,
    /// Byte offset in the payload where decoding failed.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}
