//! wharf's replication (issue #17; docs/DESIGN.md, "Replication"): a quorum queue is a Raft
//! group run by openraft; its entries are the broker events the leader decided, with the
//! leader's `now`; its log lives in wharf's WAL; its snapshots are checkpoints. Depends on
//! `broker`, `store`, `wal` and openraft (which brings tokio); never on `server`.
//!
//! # Layout
//!
//! - `types`: [`TypeConfig`] (openraft's type configuration), [`Proposal`], [`Applied`], and
//!   aliases of openraft's types for it.
//! - `record`: the Raft records in the WAL, byte for byte (a public namespace).
//! - `log_store`: [`WalLogStore`], openraft's log storage on the WAL; [`WalLogReader`].
//! - `state_machine`: [`QueueStateMachine`], the committed broker of a group; [`Machine`].
//! - `snapshot`: a group's snapshot as checkpoint bytes (a public namespace).
//! - `snapshot_file`: a member's current snapshot on disk (a public namespace).
//! - `leader`: [`take_over`], a new leader's live broker; [`leader_now`].
//!
//! **Not built yet:** a network between processes, the metadata group, forwarding, and any
//! use by the server. The tests run three members on an in-memory network.

mod leader;
mod log_store;
pub mod record;
pub mod snapshot;
pub mod snapshot_file;
mod state_machine;
mod types;

pub use leader::{leader_now, take_over};
pub use log_store::{OpenError, WalLogReader, WalLogStore};
pub use state_machine::{Machine, MachineOpenError, MachineSnapshotBuilder, QueueStateMachine};
pub use types::{
    Applied, Entry, LogId, Membership, NodeId, Proposal, Raft, StorageError, StoredMembership,
    TypeConfig, Vote,
};
