//! AMQP 0-9-1 bytes <-> typed frames, with frame and message size limits enforced before
//! anything is buffered or parsed. No tokio, no broker: depends on `amq-protocol` (its method
//! and property types, and its parsers and generators for the cold methods), `bytes`,
//! `thiserror` and `limits`. Stateless except for [`ContentAssembler`], which holds one
//! channel's partial message.
//!
//! # Layout
//!
//! - `frame`: frame types, limits, the protocol header, [`decode`].
//! - `table_scan`: the non-recursive depth check run before any field table parser.
//! - `properties`: the hand-written content header (basic properties) decoder.
//! - `content`: [`ContentAssembler`], one channel's method + header + body.
//! - `encode`: every frame written, with the hand-written hot paths.
//! - `reply_code`: the spec's reply codes by name (a public namespace).
//! - `error`: [`ProtocolError`], [`FrameMismatch`].
//!
//! # Public API
//!
//! Reading (server side, per connection):
//!
//! 1. [`check_protocol_header`] on the first octets: `Incomplete` (read more), `Accepted`
//!    (consume 8 octets, send `connection.start`), or `Refused` (write the octets of
//!    [`encode_protocol_header`] and close: spec 4.2.2). Like RabbitMQ we accept
//!    `AMQP 0 0 9 1` and the 0-9 header `AMQP 1 1 0 9`, and refuse anything else as soon as
//!    the octets present rule it out (an HTTP `GET` or a TLS hello is answered at once).
//! 2. [`decode`]`(&mut read_buf, frame_max)` in a loop: `Ok(None)` means "read more" (the
//!    buffer is already reserved for the whole frame, at most `frame_max + 8` octets, decided
//!    from the 7-octet frame header before the payload is buffered); `Ok(Some(`[`Frame`]`))` is
//!    one frame; `Err(`[`ProtocolError`]`)` closes the connection with
//!    [`ProtocolError::reply_code`] and its text. Field tables nested deeper than
//!    `limits::FIELD_TABLE_DEPTH_MAX` are refused by a non-recursive scan before any recursive
//!    parser runs. Heartbeats on a channel other than 0 and content frames on channel 0 are
//!    refused here (505). Body payloads of at least [`BODY_ZERO_COPY_BYTES_MIN`] octets share
//!    the read buffer's allocation; smaller ones are copied out.
//! 3. One [`ContentAssembler`] per open channel: [`ContentAssembler::push`] each frame of that
//!    channel; it returns [`Assembled::Method`] for plain methods and [`Assembled::Content`]
//!    (method + boxed content header + body as `Bytes`) when a `basic.publish`'s header and
//!    body are complete. The body size is checked against the channel's limit when the header
//!    arrives, before any body octet is kept. Channel 0 carries only connection methods and
//!    heartbeats and needs no assembler; any other method there is the server's to refuse
//!    (RabbitMQ: 504 CHANNEL-ERROR).
//!
//! Writing: [`encode_frame`] / [`encode_method`] for any frame, [`encode_deliver`] (method +
//! header + body frames split at `frame_max - 8`), [`encode_ack`], [`encode_content`],
//! [`encode_heartbeat`], [`put_table`].
//!
//! Hot paths are hand-written, because amq-protocol allocates a `String` per flag bit when it
//! encodes or decodes a method and moves its 300-octet properties struct through every nom
//! layer: decoding `basic.publish` and content headers (with field tables), and encoding
//! `basic.deliver`, `basic.ack` and content headers. Golden-byte and differential property
//! tests pin them to amq-protocol's bytes and values; `benches/codec.rs` measures both.
//! [`decode_field_table`] decodes a standalone table under the same depth limit.
//!
//! Errors: [`ProtocolError`] carries the reply code RabbitMQ would send (frame errors 501,
//! unexpected frames 505, unknown methods 540, oversized messages 406 on the channel) and
//! whether it closes the connection. Reply codes live in [`reply_code`] under the spec's names.

#![warn(clippy::indexing_slicing)]

// `frame` and `encode` stay public modules only while the server and the workspace tests still
// name `protocol::frame::PROTOCOL_HEADER` and `protocol::encode::put_table` outside their
// import lines; both are re-exported below, the paths can move to the root.
mod content;
pub mod encode;
mod error;
pub mod frame;
mod properties;
pub mod reply_code;
mod table_scan;

pub use content::{
    Assembled, BODY_PREALLOC_BYTES_MAX, BodySpool, BodySpooler, Content, ContentAssembler,
    SPOOL_BODY_BYTES_MIN, carries_content,
};
pub use encode::{
    CLASS_BASIC, DeliverRef, body_chunk_bytes_max, body_frame_envelope, encode_ack,
    encode_body_frame, encode_content, encode_content_header, encode_content_header_generic,
    encode_deliver, encode_deliver_method, encode_frame, encode_heartbeat, encode_method,
    encode_method_generic, encode_protocol_header, put_table,
};
pub use error::{FrameMismatch, ProtocolError};
pub use frame::{
    BODY_ZERO_COPY_BYTES_MIN, ChannelId, Frame, PROTOCOL_HEADER, ProtocolHeaderCheck,
    check_protocol_header, decode, decode_field_table, effective_frame_max, method_name,
};
