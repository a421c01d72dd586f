//! What the API shows of the cluster a node is a member of (S-CLU-40..42): every node in
//! `/api/nodes`, and a quorum queue's `leader`, `members`, `online` (RabbitMQ's field names)
//! and `wharf_replication` (the group as this member's Raft sees it). Read once per request
//! from the group (`wharf_cluster::QueueGroup::figures`, `nodes`); no decisions here.

use serde_json::{Map, Value as JsonValue, json};
use wharf_cluster::{GroupFigures, NodeState, QueueGroup};

use super::api::{Api, ApiError};
use super::json::QueueSite;

/// The cluster as one request sees it.
#[derive(Debug, Clone)]
pub(crate) struct Sight {
    pub(crate) figures: GroupFigures,
    /// Every node, asked now; empty when not asked (no quorum queue listed).
    pub(crate) nodes: Vec<NodeState>,
}

impl Sight {
    /// The group now; the nodes asked too when `ask_nodes` (it waits for their status, at most
    /// `wharf_cluster::PROBE_WAIT`).
    pub(crate) async fn of(group: &QueueGroup, ask_nodes: bool) -> Sight {
        let figures = group.figures().await;
        let nodes = if ask_nodes {
            group.nodes().await
        } else {
            Vec::new()
        };
        Sight { figures, nodes }
    }

    /// Where a quorum queue of the group lives: its leader (S-CLU-41).
    pub(crate) fn site(&self, consumers_known: bool) -> QueueSite<'_> {
        QueueSite {
            node: self.figures.leader_name.as_deref(),
            consumers_known,
        }
    }

    /// A quorum queue's cluster fields: `leader` (when known), `members` (the nodes holding a
    /// replica, voters and learners), `online` (those of them running), and
    /// `wharf_replication`.
    pub(crate) fn queue_fields(&self) -> Map<String, JsonValue> {
        let g = &self.figures;
        let mut out = Map::new();
        if let Some(leader) = &g.leader_name {
            out.insert("leader".into(), json!(leader));
        }
        let members: Vec<&str> = g.members.iter().map(|r| r.name.as_str()).collect();
        let online: Vec<&str> = members
            .iter()
            .copied()
            .filter(|name| self.nodes.iter().any(|n| n.name == *name && n.running))
            .collect();
        out.insert("members".into(), json!(members));
        out.insert("online".into(), json!(online));
        out.insert("wharf_replication".into(), replication(g));
        out
    }
}

impl Sight {
    /// Whether stopping node `me` would leave the group's voters without a running majority
    /// (`nodes` asked).
    pub(crate) fn quorum_critical(&self, me: &str) -> bool {
        let voters: Vec<&str> = self
            .figures
            .members
            .iter()
            .filter(|r| r.voter)
            .map(|r| r.name.as_str())
            .collect();
        if !voters.contains(&me) {
            return false;
        }
        let running_others = voters
            .iter()
            .filter(|v| **v != me)
            .filter(|v| self.nodes.iter().any(|n| n.name == **v && n.running))
            .count();
        running_others < voters.len() / 2 + 1
    }
}

/// The group's Raft figures as this member sees them: its role, term, indexes, and per
/// member its matched index and lag (known on the leader only: `null` elsewhere).
fn replication(g: &GroupFigures) -> JsonValue {
    let members: Vec<JsonValue> = g
        .members
        .iter()
        .map(|r| {
            json!({
                "node": r.name,
                "member_id": r.member,
                "voter": r.voter,
                "match_index": r.matched,
                "lag": r.lag,
            })
        })
        .collect();
    json!({
        "raft_group": g.group,
        "raft_state": g.state,
        "term": g.term,
        "last_log_index": g.last_log,
        "commit_index": g.committed,
        "last_applied_index": g.applied,
        "snapshot_index": g.snapshot,
        "voided_entries": g.voided,
        "members": members,
    })
}

/// A node other than this one as `/api/nodes` shows it: RabbitMQ's `name`, `type` and
/// `running` (the figures RabbitMQ shows of a remote node wharf does not know: left out), and
/// `wharf_cluster`.
pub(crate) fn remote_node(n: &NodeState) -> JsonValue {
    let mut out = json!({
        "name": n.name,
        "type": "disc",
        "running": n.running,
    });
    if let Some(map) = out.as_object_mut() {
        map.insert("wharf_cluster".into(), node_cluster(n, None));
    }
    out
}

/// What a node says of itself in the cluster: its slot, member id, addresses, and its view of
/// its groups (from its status text, when it answered). This node's own entry also says, of
/// the quorum queues' group, how many entries its member voided (`own`: the group and the
/// count, S-CLU-61); another node's status text does not carry it.
pub(crate) fn node_cluster(n: &NodeState, own: Option<(u64, u64)>) -> JsonValue {
    let groups: Vec<JsonValue> = n
        .groups
        .iter()
        .map(|g| {
            let mut group = json!({
                "raft_group": g.group,
                "raft_state": g.state,
                "term": g.term,
                "leader_member_id": g.leader,
                "last_log_index": g.last_log,
                "last_applied_index": g.applied,
            });
            if let Some((_, voided)) = own.filter(|(id, _)| *id == g.group)
                && let Some(map) = group.as_object_mut()
            {
                map.insert("voided_entries".into(), json!(voided));
            }
            group
        })
        .collect();
    json!({
        "slot": n.slot,
        "member_id": n.member,
        "cluster_address": n.cluster_addr,
        "amqp_address": n.amqp,
        "raft_groups": groups,
    })
}

/// Every node of the cluster, this one by `own` (its full JSON), in slot order (S-CLU-40).
pub(crate) async fn nodes_json(api: &Api, own: JsonValue) -> Result<Vec<JsonValue>, ApiError> {
    let Some(group) = api.group() else {
        return Ok(vec![own]);
    };
    let me = api.node_name().to_owned();
    let voided = (
        wharf_cluster::QUEUE_GROUP,
        group.machine.with(wharf_cluster::Machine::voided),
    );
    let mut own = Some(own);
    let nodes = group.nodes().await;
    Ok(nodes
        .iter()
        .map(|n| {
            if n.name == me
                && let Some(mut own) = own.take()
            {
                if let Some(map) = own.as_object_mut() {
                    map.insert("wharf_cluster".into(), node_cluster(n, Some(voided)));
                }
                own
            } else {
                remote_node(n)
            }
        })
        .collect())
}
