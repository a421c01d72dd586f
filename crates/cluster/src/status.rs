//! What `wharfctl cluster_status` shows: a node's view of its groups, from openraft's
//! metrics. As text, one line per node and per group (docs/CLUSTER-WIRE.md, "Status"), so a
//! person reads it and a test parses it:
//!
//! ```text
//! node 1 127.0.0.1:7001 member 1 amqp 127.0.0.1:5672
//! group 0 state leader term 3 leader 1 last_log 12 applied 12 members 1,2,3 learners - in_sync 1,2,3
//! ```
//!
//! `node` is the node's seed slot, `member` its member id (its Raft id: the slot for the
//! directory's founding incarnation, another id after a wipe, `incarnation.rs`; `-` while not
//! settled). `members` are the group's voters, `learners` the members catching up before they
//! vote.
//! `in_sync` (the members whose log matches the leader's last entry) is known on the leader
//! only; elsewhere it is `-`, as is `leader` while no leader is known. `amqp` is the address
//! the node's AMQP clients connect to, once its server listens (absent before): a follower
//! names its leader's in a refusal (S-CLU-13).

use std::collections::BTreeSet;
use std::fmt::Write;

use openraft::ServerState;

use crate::types::{NodeId, Raft};

/// One group's state on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The group.
    pub group: u64,
    /// This node's role in it: `leader`, `follower`, `candidate`, `learner`, `shutdown`.
    pub state: String,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The index of this node's last log entry.
    pub last_log: Option<u64>,
    /// The index of the last entry applied to this node's committed state.
    pub applied: Option<u64>,
    /// The group's voters.
    pub members: BTreeSet<NodeId>,
    /// The group's learners (members not voting yet).
    pub learners: BTreeSet<NodeId>,
    /// On the leader: members whose log holds the leader's last entry.
    pub in_sync: Option<BTreeSet<NodeId>>,
}

/// A role as the status text and the management API name it.
pub(crate) fn state_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// The status of `raft`, a member of `group`.
pub fn group_status(group: u64, raft: &Raft) -> GroupStatus {
    let m = raft.metrics().borrow().clone();
    let last_log = m.last_log_index;
    let in_sync = m.replication.as_ref().map(|r| {
        r.iter()
            .filter(|(_, matched)| matched.map(|l| l.index) == last_log)
            .map(|(id, _)| *id)
            .collect()
    });
    GroupStatus {
        group,
        state: state_name(m.state).to_owned(),
        term: m.current_term,
        leader: m.current_leader,
        last_log,
        applied: m.last_applied.map(|l| l.index),
        members: m.membership_config.voter_ids().collect(),
        learners: m.membership_config.membership().learner_ids().collect(),
        in_sync,
    }
}

fn ids(set: &BTreeSet<NodeId>) -> String {
    let list: Vec<String> = set.iter().map(ToString::to_string).collect();
    if list.is_empty() {
        "-".into()
    } else {
        list.join(",")
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The status text of node `me` (its seed slot), member `member`, at `addr` (its AMQP clients
/// at `amqp`) running `groups`.
pub fn render(
    me: NodeId,
    member: NodeId,
    addr: &str,
    amqp: Option<&str>,
    groups: &[GroupStatus],
) -> String {
    let member = if member == 0 {
        "-".into()
    } else {
        member.to_string()
    };
    let mut out = format!("node {me} {addr} member {member}");
    if let Some(amqp) = amqp {
        let _ = write!(out, " amqp {amqp}");
    }
    out.push('\n');
    for g in groups {
        let _ = writeln!(
            out,
            "group {} state {} term {} leader {} last_log {} applied {} members {} learners {} in_sync {}",
            g.group,
            g.state,
            g.term,
            opt(g.leader),
            opt(g.last_log),
            opt(g.applied),
            ids(&g.members),
            ids(&g.learners),
            g.in_sync.as_ref().map_or_else(|| "-".into(), ids),
        );
    }
    out
}

/// The AMQP address on the node line of [`render`]'s text, if the node named one.
pub fn parse_amqp(text: &str) -> Option<String> {
    let head: Vec<&str> = text.lines().next()?.split_whitespace().collect();
    let i = head.iter().position(|w| *w == "amqp")?;
    head.get(i + 1).map(|a| (*a).to_owned())
}

/// The member id on the node line of [`render`]'s text, once the node settled it.
pub fn parse_member(text: &str) -> Option<NodeId> {
    let head: Vec<&str> = text.lines().next()?.split_whitespace().collect();
    let i = head.iter().position(|w| *w == "member")?;
    head.get(i + 1)?.parse().ok()
}

/// Parses [`render`]'s text back: the node id and its groups (unknown words are skipped, so
/// a newer node's extra fields do not break an older reader).
pub fn parse(text: &str) -> Option<(NodeId, Vec<GroupStatus>)> {
    let mut lines = text.lines();
    let mut head = lines.next()?.split_whitespace();
    if head.next()? != "node" {
        return None;
    }
    let me = head.next()?.parse().ok()?;
    let mut groups = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        // Words are key and value pairs: a key is looked up among the keys only (the state
        // `leader` is not the key `leader`).
        let field = |name: &str| {
            words
                .chunks(2)
                .find(|pair| pair.first() == Some(&name))
                .and_then(|pair| pair.get(1))
                .copied()
        };
        let num = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
        let set = |name: &str| -> Option<BTreeSet<NodeId>> {
            let v = field(name)?;
            if v == "-" {
                return None;
            }
            v.split(',').map(|id| id.parse().ok()).collect()
        };
        groups.push(GroupStatus {
            group: num("group")?,
            state: field("state")?.to_owned(),
            term: num("term")?,
            leader: num("leader"),
            last_log: num("last_log"),
            applied: num("applied"),
            members: set("members").unwrap_or_default(),
            learners: set("learners").unwrap_or_default(),
            in_sync: set("in_sync"),
        });
    }
    Some((me, groups))
}
