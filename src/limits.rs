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

/// Message ids per logged id-list record (settle, delivery, return, purge): a purge of a
/// long queue is logged as several records of this many ids at most (8 bytes each: 512 KiB).
pub const RECORD_IDS_MAX: usize = 64 * 1024;
/// The floor of the periodic checkpoint threshold: a checkpoint is taken once the log
/// written since the last one exceeds the larger of this and the last checkpoint's size (the
/// live durable bytes), so checkpoints cost at most about as many bytes as the log, and the
/// data directory stays near twice the live data plus a few segments.
pub const CHECKPOINT_LOG_BYTES_MIN: u64 = 64 * 1024 * 1024;

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
    RECORD_IDS_MAX * 8 + 2 * 1024 < RECORD_PAYLOAD_BYTES_MAX,
    "an id-list record of RECORD_IDS_MAX ids plus its vhost and queue names must fit a record"
);
const _: () = assert!(
    MESSAGE_BODY_BYTES_MAX as usize <= RECORD_PAYLOAD_BYTES_MAX,
    "a message body must fit in one record"
);
