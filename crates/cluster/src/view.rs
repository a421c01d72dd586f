//! What a server shows of its cluster (S-CLU-40..45): the nodes by name and whether each
//! runs, the quorum queues' group as this member's Raft sees it (term, commit index, applied,
//! snapshot), and on the leader each member's replication lag. Read from openraft's metrics and
//! state, and from each node's status text (`status.rs`) asked over the cluster link; nothing
//! here changes the group.
//!
//! Nodes are named as `peers.rs` says; the cluster's name is its slot 1's, as RabbitMQ names a
//! cluster after its first node.

use std::future::Future;
use std::pin::Pin;

use crate::group::{QUEUE_GROUP, QueueGroup};
use crate::incarnation::slot_of;
use crate::peers::node_name;
use crate::status::{self, GroupStatus};
use crate::types::NodeId;

/// One node as a member sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Its seed slot.
    pub slot: u64,
    /// Its name ([`node_name`]).
    pub name: String,
    /// Its cluster address (seed).
    pub cluster_addr: String,
    /// It answered its status (this node always runs).
    pub running: bool,
    /// Its member id, when it answered one.
    pub member: Option<NodeId>,
    /// Where its AMQP clients connect, when it said so.
    pub amqp: Option<String>,
    /// Its view of its groups, when it answered.
    pub groups: Vec<GroupStatus>,
}

/// One member of the group, as this member's Raft knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// Its member id.
    pub member: NodeId,
    /// Its node's name.
    pub name: String,
    /// A voter (else a learner catching up).
    pub voter: bool,
    /// On the leader: the index of the last entry the member's log matches (`None`: none
    /// yet, or not the leader).
    pub matched: Option<u64>,
    /// On the leader: entries of the leader's log the member does not hold yet (its last
    /// index minus the member's matched index); `None` elsewhere.
    pub lag: Option<u64>,
}

/// The quorum queues' group as this member sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFigures {
    /// The group's id.
    pub group: u64,
    /// This member's role: `leader`, `follower`, `candidate`, `learner`, `shutdown`.
    pub state: &'static str,
    /// The current term.
    pub term: u64,
    /// The leader this member knows of.
    pub leader: Option<NodeId>,
    /// The leader's node name.
    pub leader_name: Option<String>,
    /// The index of this member's last log entry (appended; the WAL's group commit makes it
    /// durable).
    pub last_log: Option<u64>,
    /// The highest index this member knows committed.
    pub committed: Option<u64>,
    /// The highest index applied to its committed state.
    pub applied: Option<u64>,
    /// The last index its snapshot covers.
    pub snapshot: Option<u64>,
    /// The group's voters and learners, by member id.
    pub members: Vec<Replica>,
    /// This member's id.
    pub member: NodeId,
    /// The committed entries this member's state machine voided since it started, its
    /// replay of its log included (S-CLU-60, `Machine::voided`).
    pub voided: u64,
}

impl QueueGroup {
    /// This member's node name.
    pub fn node_name(&self) -> String {
        self.name_of(self.node)
    }

    /// The name of member `member`'s node (by its slot and seed).
    pub fn name_of(&self, member: NodeId) -> String {
        let slot = slot_of(member);
        let seeds = self.peers.seeds();
        let addr = usize::try_from(slot)
            .ok()
            .and_then(|s| s.checked_sub(1))
            .and_then(|i| seeds.get(i).cloned())
            .unwrap_or_else(|| "unknown".to_owned());
        node_name(slot, &addr)
    }

    /// The cluster's name: its first node's.
    pub fn cluster_name(&self) -> String {
        match self.peers.seeds().first() {
            Some(addr) => node_name(1, addr),
            None => self.node_name(),
        }
    }

    /// The group now, as this member's Raft sees it (the commit index is asked of Raft
    /// itself; `None` once it stopped).
    pub async fn figures(&self) -> GroupFigures {
        let m = self.raft.metrics().borrow().clone();
        let committed = self
            .raft
            .with_raft_state(|s| s.committed.map(|l| l.index))
            .await
            .ok()
            .flatten();
        let last_log = m.last_log_index;
        let matched = |id: &NodeId| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(id).copied().flatten().map(|l| l.index))
        };
        let lag = |id: &NodeId| {
            let leader = m.replication.as_ref()?;
            let held = leader.get(id)?.map_or(0, |l| l.index + 1);
            Some(last_log.map_or(0, |l| l + 1).saturating_sub(held))
        };
        let membership = m.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let mut members: Vec<Replica> = membership
            .nodes()
            .map(|(id, _)| Replica {
                member: *id,
                name: self.name_of(*id),
                voter: voters.contains(id),
                matched: matched(id),
                lag: lag(id),
            })
            .collect();
        members.sort_by_key(|r| r.member);
        GroupFigures {
            group: QUEUE_GROUP,
            state: status::state_name(m.state),
            term: m.current_term,
            leader: m.current_leader,
            leader_name: m.current_leader.map(|l| self.name_of(l)),
            last_log,
            committed,
            applied: m.last_applied.map(|l| l.index),
            snapshot: m.snapshot.map(|l| l.index),
            members,
            member: self.node,
            voided: self.machine.with(crate::Machine::voided),
        }
    }

    /// `(vhost, queue)` of every quorum queue the group's committed state holds.
    pub fn quorum_queues(&self) -> Vec<(String, String)> {
        self.machine.with(|m| {
            let broker = m.broker();
            broker
                .vhost_names()
                .into_iter()
                .flat_map(|v| broker.queues(&v))
                .filter(|q| q.kind == wharf_broker::QueueKind::Quorum)
                .map(|q| (q.vhost, q.name))
                .collect()
        })
    }

    /// Every node of the cluster (every seed), asked for its status at once; this node runs.
    pub async fn nodes(&self) -> Vec<NodeState> {
        let me = slot_of(self.node);
        let seeds = self.peers.seeds();
        let asks = (1u64..).zip(&seeds).map(|(slot, addr)| async move {
            let text = self.peers.status(addr).await;
            let parsed = text.as_deref().and_then(status::parse);
            NodeState {
                slot,
                name: node_name(slot, addr),
                cluster_addr: addr.clone(),
                running: slot == me || text.is_some(),
                member: text
                    .as_deref()
                    .and_then(status::parse_member)
                    .or((slot == me).then_some(self.node)),
                amqp: text.as_deref().and_then(status::parse_amqp),
                groups: parsed.map(|(_, g)| g).unwrap_or_default(),
            }
        });
        join_all(asks.collect()).await
    }
}

/// Runs `futures` at once; their outputs in order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut set: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in set.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
