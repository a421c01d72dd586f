//! The store: broker events <-> write-ahead log records, checkpoints and the segment
//! reclamation they allow, recovery on start, and messages read back from disk. Depends on
//! `broker` (the events, `Broker::apply`, `Broker::snapshot`) and `wal`; knows nothing of AMQP
//! or tokio. The record layout is `codec/` and `storage-format.md` ("Store records",
//! "Checkpoints").
//!
//! # Layout
//!
//! - `store`: [`Store`] and its methods: `open` (recovery, close), `log` (append, tickets,
//!   durability), `checkpoints` (when and how checkpoints are taken).
//! - `replay`: recovery's log visitor and its [`RecoverySummary`].
//! - `appender`: [`LogHealth`], what the server's resource monitor may ask of the log.
//! - `disk_demand`: [`DiskDemand`], disk space the store is about to take (S-DISK-1).
//! - `batch`: one batch of events encoded and size-checked before anything is appended.
//! - `checkpoint_trigger`: [`CheckpointTrigger`], [`CheckpointDone`].
//! - `checkpoint`: the checkpoint file: write, read, load (a public namespace).
//! - `codec`: the store records, byte for byte (a public namespace).
//! - `stored`: messages whose content stays on disk, read back by position.
//! - `record_size`: the size rule of a message's record, installed in the broker.
//! - `segment_index`: the per-segment index of message ids and queue definitions the
//!   timeline reads instead of searching a segment (a public namespace).
//! - `trace`: the life of one message in the log (the inspector's `trace`, the management
//!   API's timeline), a public namespace.
//! - `error`: [`StoreError`] and the typed reasons it carries.
//!
//! # Checkpoints
//!
//! After each batch the server calls [`Store::maybe_checkpoint`]: once the log written since
//! the last checkpoint exceeds `max(limits::CHECKPOINT_LOG_BYTES_MIN, last checkpoint size)`
//! it takes `Broker::snapshot` (cheap: shared `Arc`s) and a thread of its own waits until the
//! log is durable through the snapshot's Lsn, compacts sparse segments (live messages copied
//! forward in the log), writes the checkpoint atomically (it refers to each live message
//! where its record is) and deletes the segments it covers and does not refer to. At a clean
//! shutdown [`Store::checkpoint_at_shutdown`] writes one synchronously, without compaction.

mod appender;
mod batch;
pub mod checkpoint;
mod checkpoint_trigger;
pub mod codec;
mod disk_demand;
mod error;
mod record_size;
mod replay;
pub mod segment_index;
mod store;
mod stored;
pub mod trace;

pub use appender::LogHealth;
pub use checkpoint_trigger::{CheckpointDone, CheckpointTrigger};
pub use disk_demand::DiskDemand;
pub use error::{CheckpointDamage, LogDamage, LogGap, StoreError};
pub use record_size::MessageRecordSize;
pub use replay::RecoverySummary;
pub use store::{Store, StoreConfig, Ticket};
