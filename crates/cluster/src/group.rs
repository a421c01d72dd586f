//! [`QueueGroup`]: what a server is handed to replicate its quorum queues (DESIGN
//! "Replication"): this member's id, the group's Raft, and its committed state. Whoever starts
//! the member (the process-level cluster, or a test) builds the Raft; the server only proposes
//! to it, watches who leads, and reads the committed state.

use openraft::{RaftMetrics, ServerState};
use wharf_broker::{Broker, Command, QueueKind};

use crate::leaders::LeaderAddrs;
use crate::split::is_quorum;
use crate::state_machine::QueueStateMachine;
use crate::types::{NodeId, Proposal, Raft};

/// The id of the group that carries every quorum queue of a cluster (DESIGN "Replication",
/// "The server in a group"): the `wharf` binary opens it on its node beside the metadata group
/// ([`crate::METADATA_GROUP`], 0) and hands it to its server. Its directory is
/// `<data dir>/raft/group-1`. Fixed until queues get groups of their own.
pub const QUEUE_GROUP: u64 = 1;

/// A member's Raft metrics, as [`QueueGroup::metrics`] watches them.
pub type Metrics = RaftMetrics<NodeId, openraft::BasicNode>;

/// A proposal's commit to come: its log index once committed by a majority and applied here
/// (S-CLU-1), or why it never will be (this member stopped leading, the group stopped), or
/// that it committed as nothing (voided, S-CLU-60).
pub type Commit = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<u64, ProposeError>> + Send + 'static>,
>;

/// A proposal that will not commit through this member, or that committed as nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    /// The group did not take it (this member stopped leading, the group stopped).
    #[error("the quorum queues' group did not take the proposal: {0}")]
    NotTaken(String),
    /// It committed at this index but its events did not fit the committed state: every
    /// member voided it (S-CLU-60). The proposer's live broker applied them: it has diverged.
    #[error(
        "entry {0} of the quorum queues' group was voided: its events do not fit the committed state"
    )]
    Voided(u64),
}

/// One member's handle on the group that carries the quorum queues (S-CLU-10).
#[derive(Clone)]
pub struct QueueGroup {
    /// This member's id.
    pub node: NodeId,
    /// The group's Raft on this member.
    pub raft: Raft,
    /// The group's committed state on this member.
    pub machine: QueueStateMachine,
    /// The AMQP addresses of the group's leaders, as this member learns them
    /// (`QueueGroup::learn_leader_addresses`, S-CLU-13); empty where nobody learns them.
    pub leaders: LeaderAddrs,
    /// The cluster's nodes: their seeds and how to ask each for its status (`view.rs`,
    /// S-CLU-40).
    pub peers: crate::peers::SharedPeers,
}

impl std::fmt::Debug for QueueGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueGroup")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// What a member's metrics say about its part in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// This member leads, and has applied every entry committed before its term (its own
    /// term's first entry is applied): it serves; it may take over once its whole log is
    /// applied ([`Role::may_take_over`]).
    Leader,
    /// Another member leads, or nobody yet (`None`).
    Follower(Option<NodeId>),
}

impl Role {
    /// The role `metrics` show for member `node`.
    pub fn of(node: NodeId, metrics: &RaftMetrics<NodeId, openraft::BasicNode>) -> Role {
        let leads = metrics.state == ServerState::Leader && metrics.current_leader == Some(node);
        let caught_up = metrics
            .last_applied
            .is_some_and(|l| l.leader_id.get_term() == metrics.current_term);
        if leads && caught_up {
            Role::Leader
        } else if leads {
            // Elected, its first entry not applied yet: not ready to serve, nobody else leads.
            Role::Follower(None)
        } else {
            Role::Follower(metrics.current_leader.filter(|l| *l != node))
        }
    }

    /// Whether member `node` may take over now (S-CLU-12): it leads ([`Role::Leader`]) and has
    /// applied every entry of its own log. A member that has not taken over proposes nothing,
    /// so whatever its log holds past its applied index was appended before: by a leader of an
    /// earlier term (its term's first entry comes after it), or by this member itself leading
    /// this same term before a restart (openraft resumes a committed vote of its own without a
    /// new first entry). Such entries commit in this term; a committed state adopted before
    /// they apply would decide events (message ids) that collide with theirs.
    pub fn may_take_over(node: NodeId, metrics: &RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
        Role::of(node, metrics) == Role::Leader
            && metrics.last_applied.map(|l| l.index) >= metrics.last_log_index
    }
}

impl QueueGroup {
    /// Watches this member's metrics (role, leader, applied index).
    pub fn metrics(&self) -> tokio::sync::watch::Receiver<Metrics> {
        self.raft.metrics()
    }

    /// Submits `proposal` to the group: proposals are ordered as the calls of this method
    /// complete. Returns the commit to come, without waiting for it.
    ///
    /// # Errors
    /// The group's Raft has stopped.
    pub async fn submit(&self, proposal: Proposal) -> Result<Commit, ProposeError> {
        let rx = self
            .raft
            .client_write_ff(proposal)
            .await
            .map_err(|e| ProposeError::NotTaken(e.to_string()))?;
        Ok(Box::pin(async move {
            match rx.await {
                Ok(Ok(written)) if written.data.voided => {
                    Err(ProposeError::Voided(written.log_id.index))
                }
                Ok(Ok(written)) => Ok(written.log_id.index),
                Ok(Err(e)) => Err(ProposeError::NotTaken(e.to_string())),
                Err(e) => Err(ProposeError::NotTaken(e.to_string())),
            }
        }))
    }

    /// Who leads, for a refusal (S-CLU-11, S-CLU-13): `node 2 at 127.0.0.1:5673` when
    /// the leader's AMQP address is known, `node 2` when not, `no node yet` during an
    /// election.
    pub fn leader_name(&self) -> String {
        match self.role() {
            Role::Follower(Some(id)) => match self.leaders.get(id) {
                Some(amqp) => format!("node {id} at {amqp}"),
                None => format!("node {id}"),
            },
            _ => "no node yet".to_owned(),
        }
    }

    /// Keeps `self.leaders` up to date (S-CLU-13): each time another member becomes the
    /// leader this member knows of, asks it for its status and records the AMQP address it
    /// names. The task ends when the group's Raft stops.
    pub fn learn_leader_addresses(&self) -> tokio::task::JoinHandle<()> {
        crate::leaders::learn(self.node, self.metrics(), self.leaders.clone())
    }

    /// This member's role now.
    pub fn role(&self) -> Role {
        Role::of(self.node, &self.raft.metrics().borrow())
    }

    /// The replicated queue `cmd` (on a connection to `vhost`) would need, as the group's
    /// committed state knows it: a quorum queue's declaration, a use of a queue the group
    /// holds, a publish the committed routing sends into one. A member that does not lead
    /// refuses such a command (S-CLU-11).
    pub fn needs_leader(&self, vhost: &str, cmd: &Command) -> Option<String> {
        self.machine.with(|m| needs_leader(m.broker(), vhost, cmd))
    }
}

/// [`QueueGroup::needs_leader`] over the committed broker `committed`.
pub fn needs_leader(committed: &Broker, vhost: &str, cmd: &Command) -> Option<String> {
    let replicated = |q: &str| committed.queue_kind(vhost, q) == Some(QueueKind::Quorum);
    let named = |q: &String| replicated(q).then(|| q.clone());
    match cmd {
        Command::QueueDeclare(d) => {
            (is_quorum(&d.arguments) || replicated(&d.queue)).then(|| d.queue.clone())
        }
        Command::QueueBind { queue, .. }
        | Command::QueuePurge { queue, .. }
        | Command::QueueDelete { queue, .. }
        | Command::MoveBack { queue, .. }
        | Command::Consume { queue, .. }
        | Command::Get { queue, .. } => named(queue),
        Command::Publish(p) | Command::PublishOn { publish: p, .. } => committed
            .routed_queue_names(
                &p.vhost,
                &p.exchange,
                &p.routing_key,
                p.properties.headers.as_ref(),
            )
            .into_iter()
            .find(|q| replicated(q)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, RaftMetrics, ServerState};

    use super::Role;

    /// Member 2 leading term 14, its log ending at `last_log`, applied up to `applied`.
    fn leading(applied: u64, last_log: u64) -> RaftMetrics<u64, openraft::BasicNode> {
        let mut m = RaftMetrics::new_initial(2);
        m.state = ServerState::Leader;
        m.current_leader = Some(2);
        m.current_term = 14;
        m.last_log_index = Some(last_log);
        m.last_applied = Some(LogId::new(CommittedLeaderId::new(14, 2), applied));
        m
    }

    /// S-CLU-12: the failure the Jepsen-style test found (issue #17): member 2 led term 14,
    /// appended entries 20268..=20272 with only 20267 known committed, was restarted, and
    /// resumed leading term 14 with those entries unapplied. It leads, its applied entry is of
    /// its term, yet it must not take over until it applied them; then it may.
    #[test]
    fn a_leader_takes_over_only_once_its_whole_log_is_applied() {
        let resumed = leading(20267, 20272);
        assert_eq!(Role::of(2, &resumed), Role::Leader);
        assert!(!Role::may_take_over(2, &resumed));
        assert!(Role::may_take_over(2, &leading(20272, 20272)));
    }

    /// S-CLU-12: a member elected in a new term, its term's first entry appended and not yet
    /// applied, neither serves nor takes over; a member that does not lead never takes over.
    #[test]
    fn neither_a_new_leader_before_its_first_entry_nor_a_follower_takes_over() {
        let mut elected = leading(20036, 20037);
        elected.last_applied = Some(LogId::new(CommittedLeaderId::new(7, 2), 20036));
        assert_eq!(Role::of(2, &elected), Role::Follower(None));
        assert!(!Role::may_take_over(2, &elected));
        let mut follower = leading(20272, 20272);
        follower.state = ServerState::Follower;
        follower.current_leader = Some(3);
        assert!(!Role::may_take_over(2, &follower));
    }
}
