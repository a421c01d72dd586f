//! Every hard limit of wharf, in one place, with the relationships between them checked at
//! compile time. Configuration may lower a limit, never raise it. A leaf module: it depends on
//! nothing and anything may use it.

/// Largest frame we accept or send (header + payload + frame-end), advertised in
/// `connection.tune`. RabbitMQ's default `frame_max` is 128 KiB.
pub const FRAME_BYTES_MAX: u32 = 128 * 1024;
/// AMQP 0-9-1's `frame-min-size`: every peer must accept frames this large.
pub const FRAME_BYTES_MIN: u32 = 4096;
/// Largest message body we accept (RabbitMQ 3.x's `max_message_size` default is 128 MiB; we
/// keep bodies smaller so a record always fits comfortably in a segment).
pub const MESSAGE_BODY_BYTES_MAX: u32 = 16 * 1024 * 1024;
/// Channels per connection, advertised in `connection.tune` (RabbitMQ: 2047).
pub const CHANNELS_PER_CONNECTION_MAX: u16 = 2047;
/// Nesting depth of AMQP field tables and arrays we decode.
pub const FIELD_TABLE_DEPTH_MAX: usize = 16;

/// Largest WAL segment file, header included.
pub const SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Largest payload of one WAL record: a whole message body plus room for its properties,
/// headers and routing information.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = MESSAGE_BODY_BYTES_MAX as usize + 256 * 1024;

/// Largest `x-message-ttl`, `message-ttl` and per-message `expiration` value (S-TTL-1): 2^32-1 ms.
pub const TTL_MS_MAX: u64 = u32::MAX as u64;

const _: () = assert!(
    FRAME_BYTES_MAX >= FRAME_BYTES_MIN,
    "AMQP frame-min-size is 4096"
);
const _: () = assert!(
    (RECORD_PAYLOAD_BYTES_MAX as u64) < SEGMENT_BYTES_MAX / 2,
    "a record must fit in a segment with room to spare, or rolling could loop"
);
const _: () = assert!(
    MESSAGE_BODY_BYTES_MAX as usize <= RECORD_PAYLOAD_BYTES_MAX,
    "a message body must fit in one record"
);
