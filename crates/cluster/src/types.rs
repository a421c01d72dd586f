//! openraft's type configuration for a wharf Raft group, and what an entry carries: a
//! [`Proposal`] (the leader's `now` and the broker events of one batch, DESIGN "Replication").

use std::io::Cursor;

use wharf_broker::Event;

/// A member's id in every group (`u64`, as openraft's examples use).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The type configuration of every wharf Raft group.
    pub TypeConfig:
        D = Proposal,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry as openraft hands it to the log store and the state machine.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (leader term and node, index).
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// A group's membership.
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
/// A membership with the log id that set it.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
/// A storage failure as openraft wants it reported.
pub type StorageError = openraft::StorageError<NodeId>;
/// A Raft instance of a wharf group.
pub type Raft = openraft::Raft<TypeConfig>;

/// What the leader proposes: the durable events of one batch of its broker, decided at
/// `now_ms` (the leader's clock, milliseconds since the epoch; S-CLU-5). Every member applies
/// the events in order with `Broker::apply` once the entry is committed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Proposal {
    /// The leader's clock when it decided these events.
    pub now_ms: u64,
    /// The events, in the order the leader's broker produced them.
    pub events: Vec<Event>,
    /// Who proposed it, when a member handed it to the leader (`forward.rs`): an entry whose
    /// origin was applied already is skipped, so a retried proposal applies once (S-CLU-50).
    /// `None` for the leader's own proposals.
    pub origin: Option<Origin>,
}

/// A forwarded proposal's identity, chosen by its proposer (S-CLU-50): the proposer's
/// `session` (unique per proposer process) and the proposal's `seq` within it, from 1, one
/// proposal at a time. A group applies an entry of a session only when its `seq` is above the
/// highest it applied of that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The proposer's session.
    pub session: u64,
    /// The proposal's number in the session.
    pub seq: u64,
}

/// What applying one committed entry returned to the proposer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The entry's log index.
    pub index: u64,
    /// Events applied (0 for blank and membership entries, and for a voided entry).
    pub events: usize,
    /// The entry's events did not fit the committed state: none of them applied, on any
    /// member (S-CLU-60).
    pub voided: bool,
}
