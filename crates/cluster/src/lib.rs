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
//! - `leader`: [`take_over`], a new leader's live broker; [`leader_now`]; [`adopt`], a
//!   take-over into a server's live broker.
//! - `group`: [`QueueGroup`], the handle a server replicates its quorum queues through.
//! - `split`: [`Replicated`], which events of a batch go to the group, which stay local.
//! - `testing`: an in-memory network for members in one process (a public namespace).
//!
//! **Not built yet:** a network between processes, the metadata group, a group per queue,
//! and forwarding. The server uses one group for every quorum queue (`QueueGroup`); the tests
//! run members on an in-memory network (`testing`).

mod group;
mod leader;
mod log_store;
pub mod record;
pub mod snapshot;
mod split;
mod state_machine;
pub mod testing;
mod types;

pub use group::{Commit, Metrics, ProposeError, QueueGroup, Role, needs_leader};
pub use leader::{Adopted, adopt, leader_now, take_over};
pub use log_store::{OpenError, WalLogReader, WalLogStore};
pub use split::{Replicated, Split, is_quorum, shared_definitions};
pub use state_machine::{Machine, MachineSnapshotBuilder, QueueStateMachine};
pub use types::{
    Applied, Entry, LogId, Membership, NodeId, Proposal, Raft, StorageError, StoredMembership,
    TypeConfig, Vote,
};
