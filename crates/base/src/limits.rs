//! Every hard limit of wharf, in one place, with the relationships between them checked at
//! compile time. Configuration may lower a limit, never raise it. A leaf module: it depends on
//! nothing and anything may use it.

/// Largest frame we accept or send (header + payload + frame-end), advertised in
/// `connection.tune`. RabbitMQ's default `frame_max` is 128 KiB.
pub const FRAME_BYTES_MAX: u32 = 128 * 1024;
/// AMQP 0-9-1's `frame-min-size`: every peer must accept frames this large.
pub const FRAME_BYTES_MIN: u32 = 4096;
/// Largest message body the configuration may allow (`max_message_size`; RabbitMQ refuses more
/// than 512 MiB too). A record this large gets a segment of its own (storage-format.md,
/// version 3), so it needs no room in a regular segment.
pub const MESSAGE_BODY_BYTES_MAX: u32 = 512 * 1024 * 1024;
/// `max_message_size` when the configuration says nothing: RabbitMQ's default, 128 MiB.
pub const MESSAGE_BODY_BYTES_DEFAULT: u32 = 128 * 1024 * 1024;
/// Channels per connection, advertised in `connection.tune` (RabbitMQ: 2047).
pub const CHANNELS_PER_CONNECTION_MAX: u16 = 2047;
/// Nesting depth of AMQP field tables and arrays we decode.
pub const FIELD_TABLE_DEPTH_MAX: usize = 16;

/// Largest WAL segment file, header included.
pub const SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Largest payload of one WAL record: a whole message body plus room for its properties,
/// headers and routing information. A record larger than a segment's room is written alone in
/// a segment sized to it (storage-format.md, "Segment file").
pub const RECORD_PAYLOAD_BYTES_MAX: usize = MESSAGE_BODY_BYTES_MAX as usize + 256 * 1024;

/// Smallest WAL segment size accepted (tests lower the size to exercise rolling): room for a
/// header and a few small records.
pub const SEGMENT_BYTES_MIN: u64 = 4096;
/// Bytes of records appended but not yet taken by the WAL writer before `append` blocks (the
/// producers' backpressure bound; also what a writer paused on a full disk may hold).
pub const WAL_PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How far ahead of the write position a preallocating log keeps zeros written.
pub const PREALLOCATE_STEP_BYTES: u64 = 4 * 1024 * 1024;
/// How often a WAL writer paused on a full disk retries creating its next segment.
pub const DISK_FULL_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Connections the server accepts at most (`connection_max` may lower it; RabbitMQ's default
/// is unlimited, but every bound is explicit here).
pub const CONNECTIONS_MAX: u32 = 65_536;
/// Unacknowledged deliveries one channel may hold when its consumers set no prefetch limit
/// (prefetch 0): a safety cap, so that a consumer that never acks cannot pull a whole queue
/// into the unacked set and its connection's outbox.
pub const UNACKED_PER_CHANNEL_MAX: u32 = 65_535;

/// Batches of operations queued towards the broker task before readers wait (and so stop
/// reading their sockets): the publisher backpressure bound.
pub const CORE_QUEUE_BATCHES_MAX: usize = 256;
/// Publisher flow control (S-FLOW-1): a queue with a consumer on another connection that
/// holds more than this many ready messages puts the connections publishing into it in
/// `flow` (their sockets are read no further) ...
pub const FLOW_READY_HIGH: usize = 4096;
/// ... until it holds at most this many (or has no such consumer, or is gone).
pub const FLOW_READY_LOW: usize = flow_ready_low(FLOW_READY_HIGH);
/// The low mark that goes with a high mark: a quarter of it.
pub const fn flow_ready_low(high: usize) -> usize {
    high / 4
}
/// The largest high mark `flow_ready_high` accepts.
pub const FLOW_READY_HIGH_MAX: usize = 16 * 1024 * 1024;
/// The longest a connection in `flow` waits before its socket is read once more (S-FLOW-2):
/// so that connections that consume from each other's queues pace each other instead of
/// waiting for each other forever.
pub const FLOW_PAUSE_MAX: std::time::Duration = std::time::Duration::from_millis(100);
/// How long a peer has to finish the handshake.
pub const HANDSHAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long we wait for `close-ok` after sending `connection.close`.
pub const CLOSE_OK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Bytes of partly received message bodies one connection may hold over all its channels
/// when the largest body is `body_bytes_max` (more than one maximal message, far less than
/// `channel_max` of them).
pub const fn gathering_bytes_per_connection(body_bytes_max: u32) -> usize {
    2 * body_bytes_max as usize + 1024 * 1024
}
/// [`gathering_bytes_per_connection`] at the largest body the configuration may allow.
pub const GATHERING_BYTES_PER_CONNECTION_MAX: usize =
    gathering_bytes_per_connection(MESSAGE_BODY_BYTES_MAX);
/// The heartbeat interval proposed in `connection.tune`, in seconds (RabbitMQ's 60).
pub const HEARTBEAT_SECS_DEFAULT: u16 = 60;
/// The consumer timeout where neither queue nor consumer sets one, in ms (RabbitMQ 3.13/4.x's
/// `consumer_timeout`: 30 minutes; S-CONS-9).
pub const CONSUMER_TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;
/// How often a quorum queue with at-least-once dead-lettering tries again to dead-letter the
/// messages it holds, besides every change of definitions in its vhost, in ms (RabbitMQ's
/// `dead_letter_worker_publisher_confirm_timeout`: 3 minutes; S-QQ-10).
pub const DEAD_LETTER_RETRY_MS: u64 = 3 * 60 * 1000;
/// How often the resource monitor samples free disk and memory.
pub const RESOURCE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// An alarm clears only this many percent of its limit away from it (hysteresis).
pub const ALARM_HYSTERESIS_PERCENT: u64 = 5;
/// Default `disk_free_limit`: RabbitMQ's `disk_free_limit.absolute` default of 50 MB.
pub const DISK_FREE_LIMIT_BYTES_DEFAULT: u64 = 50_000_000;
/// Default `memory_high_watermark`, a fraction of RAM: RabbitMQ's
/// `vm_memory_high_watermark.relative` default.
pub const MEMORY_HIGH_WATERMARK_DEFAULT: f64 = 0.4;
/// Message ids per logged id-list record (settle, delivery, return, purge): a purge of a
/// long queue is logged as several records of this many ids at most (8 bytes each: 512 KiB).
pub const RECORD_IDS_MAX: usize = 64 * 1024;
/// The floor of the periodic checkpoint threshold: a checkpoint is taken once the log
/// written since the last one exceeds the larger of this and the last checkpoint's size (the
/// live durable bytes), so checkpoints cost at most about as many bytes as the log, and the
/// data directory stays near twice the live data plus a few segments.
pub const CHECKPOINT_LOG_BYTES_MIN: u64 = 64 * 1024 * 1024;
/// The smallest `checkpoint_log_bytes_min` the configuration accepts: below it, a broker
/// with little live data would checkpoint every few batches.
pub const CHECKPOINT_LOG_BYTES_MIN_LOWEST: u64 = 1024 * 1024;
/// The largest `checkpoint_log_bytes_min` the configuration accepts: recovery replays up to
/// this much log (plus the checkpoint), and the data directory holds it on top of the live
/// data.
pub const CHECKPOINT_LOG_BYTES_MIN_HIGHEST: u64 = 4 * 1024 * 1024 * 1024;

/// Memory for the content of queued messages (body plus about 512 bytes of properties and
/// bookkeeping each) the broker keeps; beyond it the oldest persistent messages of durable
/// queues whose records are durable are paged out, leaving a 40-byte reference each, and are
/// read back from the log or the checkpoint when delivered (DESIGN "Memory").
pub const MESSAGE_MEMORY_BYTES: u64 = 16 * 1024 * 1024;

/// Messages one move back out of a dead-letter queue (S-UI-10) handles: it runs on the broker
/// task, reading each paged-out message back, so one request stays within milliseconds to a
/// few hundred (a larger queue takes several requests; "all" takes the first this many).
pub const MOVE_BACK_MESSAGES_MAX: usize = 10_000;

/// Largest `x-message-ttl`, `message-ttl` and per-message `expiration` value (S-TTL-1): 2^32-1 ms.
pub const TTL_MS_MAX: u64 = u32::MAX as u64;

/// Raft log appends whose durability a group's flusher is waiting for (`wharf-cluster`): an
/// append waits for room beyond this, so a group that outruns its disk is throttled.
pub const RAFT_FLUSH_PENDING_MAX: usize = 4096;
/// About the most bytes of entries one Raft append carries (at least one entry, however
/// large): a follower writes and fsyncs them before it answers, within openraft's RPC
/// timeout (the heartbeat interval), so a member catching up gets its backlog in steps that
/// answer in time instead of one large append timed out and sent again.
pub const RAFT_APPEND_BYTES_MAX: usize = 1024 * 1024;

/// Voided entries in a row, in one term, after which a leader of the quorum queues' group
/// stops taking over for the rest of that term (S-CLU-62): its take-over entry is voided every
/// time, so taking over once more would only close every connection again.
pub const VOIDED_TAKE_OVERS_MAX: u32 = 3;

const _: () = assert!(
    VOIDED_TAKE_OVERS_MAX >= 2,
    "a leader whose entry was voided takes over again at least once (S-CLU-60)"
);
const _: () = assert!(
    FLOW_READY_LOW < FLOW_READY_HIGH,
    "flow control needs hysteresis: the low mark below the high one"
);
const _: () = assert!(
    FRAME_BYTES_MAX >= FRAME_BYTES_MIN,
    "AMQP frame-min-size is 4096"
);
const _: () = assert!(
    MESSAGE_BODY_BYTES_DEFAULT <= MESSAGE_BODY_BYTES_MAX,
    "the default body limit must be allowed"
);
const _: () = assert!(
    GATHERING_BYTES_PER_CONNECTION_MAX > MESSAGE_BODY_BYTES_MAX as usize,
    "one maximal message must be receivable"
);
const _: () = assert!(
    ALARM_HYSTERESIS_PERCENT < 100,
    "an alarm must be able to clear"
);
const _: () = assert!(
    HANDSHAKE_WAIT.as_secs() >= CLOSE_OK_WAIT.as_secs(),
    "a handshake gets at least as long as a close"
);
const _: () = assert!(
    CHANNELS_PER_CONNECTION_MAX > 0 && CONNECTIONS_MAX > 0,
    "a limit of zero would refuse everything"
);
const _: () = assert!(
    SEGMENT_BYTES_MIN <= SEGMENT_BYTES_MAX,
    "the smallest segment size must be allowed"
);
const _: () = assert!(
    PREALLOCATE_STEP_BYTES <= SEGMENT_BYTES_MAX,
    "zeros ahead stay within one segment"
);
const _: () = assert!(
    PREALLOCATE_STEP_BYTES.is_multiple_of(1024 * 1024),
    "zero-fill writes whole MiB steps"
);
const _: () = assert!(
    WAL_PENDING_BYTES_MAX as u64 >= SEGMENT_BYTES_MAX,
    "the pending buffer holds a segment's worth of records (an empty buffer takes any record)"
);
const _: () = assert!(
    RECORD_IDS_MAX * 8 + 2 * 1024 < RECORD_PAYLOAD_BYTES_MAX,
    "an id-list record of RECORD_IDS_MAX ids plus its vhost and queue names must fit a record"
);
const _: () = assert!(
    MESSAGE_BODY_BYTES_MAX as usize <= RECORD_PAYLOAD_BYTES_MAX,
    "a message body must fit in one record"
);
const _: () = assert!(
    CHECKPOINT_LOG_BYTES_MIN_LOWEST <= CHECKPOINT_LOG_BYTES_MIN
        && CHECKPOINT_LOG_BYTES_MIN <= CHECKPOINT_LOG_BYTES_MIN_HIGHEST,
    "the default checkpoint threshold floor must be accepted by the configuration"
);
