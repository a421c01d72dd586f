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
//! - `void`: voiding a committed entry that does not fit the committed state (S-CLU-60).
//! - `snapshot`: a group's snapshot as checkpoint bytes (a public namespace).
//! - `snapshot_file`: a member's current snapshot on disk (a public namespace).
//! - `leader`: [`take_over`], a new leader's live broker; [`leader_now`]; [`adopt`], a
//!   take-over into a server's live broker.
//! - `group`: [`QueueGroup`], the handle a server replicates its quorum queues through.
//! - `leaders`: [`LeaderAddrs`], where the clients of a group's leader connect, learned by
//!   [`QueueGroup::learn_leader_addresses`].
//! - `definitions`: [`reconcile`], the events that bring a live broker's cluster-wide
//!   definitions to the metadata group's committed ones (S-CLU-51).
//! - `metadata`: [`MetadataGroup`], the handle a server keeps the cluster-wide definitions
//!   through (group 0, S-CLU-51..54).
//! - `forward`: [`Proposer`], a member proposing through the group's leader ([`Forward`]),
//!   each proposal applied once (S-CLU-50).
//! - `relay`: [`Relay`], a member's byte streams to the other members' servers, for clients'
//!   channels forwarded to the leader (S-CLU-70; over the link: `net::LinkRelay`; in one
//!   process: [`LocalRelays`]).
//! - `split`: [`Replicated`], which events of a batch go to the group, which stay local.
//! - `net`: the cluster link between nodes (openraft's RPCs over TCP; a public namespace).
//! - `incarnation`: a node's member id and the member file recording it (a public namespace).
//! - `members`: settling a node's member id, letting a new incarnation in, `add_member` and
//!   `remove_member`.
//! - `node`: [`Node`], a process's cluster node: listener, peers, groups, formation.
//! - `status`: what `wharfctl cluster_status` shows (a public namespace).
//! - `peers`: the cluster's nodes as a member reaches them ([`Peers`]), and their names.
//! - `view`: what a server shows of its cluster: running nodes, the group's Raft
//!   figures and replication lag ([`GroupFigures`], [`NodeState`]).
//! - `testing`: an in-memory network for members in one process (a public namespace).
//!
//! **Not built yet:** the server proposing its definitions to the metadata group and
//! converging on it (`forward` and `definitions` are the parts built), and
//! a group per queue: a server replicates every quorum queue through one group
//! (`QueueGroup`).

mod compaction;
mod definitions;
mod forward;
mod group;
pub mod incarnation;
mod leader;
mod leaders;
mod log_store;
mod members;
mod metadata;
pub mod net;
mod node;
pub mod paging;
mod peers;
pub mod record;
mod relay;
pub mod snapshot;
pub mod snapshot_file;
mod split;
mod state_machine;
pub mod status;
pub mod testing;
mod types;
mod view;
mod void;

pub use compaction::{Sizes, SnapshotRule};
pub use definitions::reconcile;
pub use forward::{Forward, ForwardError, NotCommitted, Proposer, RETRY_EVERY, lead, session_id};
pub use group::{Commit, Metrics, ProposeError, QUEUE_GROUP, QueueGroup, Role, needs_leader};
pub use leader::{Adopted, adopt, leader_now, take_over};
pub use leaders::LeaderAddrs;
pub use log_store::{EarlySend, OpenError, WalLogReader, WalLogStore, events_bytes};
pub use metadata::{METADATA_COMMIT_WAIT, MetadataError, MetadataGroup, Proposed};
pub use node::{
    GroupHandle, METADATA_GROUP, Node, NodeConfig, NodeError, Timing, remote_add_member,
    remote_remove_member, remote_status,
};
pub use peers::{PROBE_WAIT, Peers, Pending, SeedPeers, SharedPeers, node_name};
pub use relay::{Door, LocalRelays, Opening, Reachable, Relay, RelayStream};
pub use split::{Replicated, Split, is_quorum, is_shared_definition, shared_definitions};
pub use state_machine::{Machine, MachineOpenError, MachineSnapshotBuilder, QueueStateMachine};
pub use types::{
    Appended, Applied, Entry, Events, LogId, Membership, NodeId, Origin, Proposal, Raft,
    StorageError, StoredMembership, TypeConfig, Vote,
};
pub use view::{GroupFigures, NodeState, Replica};

/// Locks `m` whether or not a panic poisoned it: for the locks around maps, sets and caches
/// that no panic leaves half-changed.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
