//! Who the members of a group are (DESIGN "Replication", "A wiped member"): a node's
//! incarnation settled at its first start, a new incarnation let in in place of the old one
//! by the group's leader, and the operator's `add_member` / `remove_member`, one change at a
//! time through openraft's `change_membership` (joint consensus).
//!
//! - [`settle`]: a node with an empty directory decides its member id: the founding id (its
//!   slot) only when **every** seed answers that it holds no state of the metadata group, so
//!   no vote or entry was ever acknowledged by anyone; a new incarnation otherwise.
//! - [`keep`]: on the leader of a group, a seed running another incarnation than the voter of
//!   its slot is added as a learner, and once caught up it replaces the old incarnation.
//! - [`add_member`], [`remove_member`]: the operator's changes (S-CLU-23).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, ChangeMembers, ServerState};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::incarnation::{new_incarnation, slot_of};
use crate::net::Peers;
use crate::net::wire::{self, ANY_MEMBER, Kind, Probed};
use crate::types::{NodeId, Raft};

/// How far behind the leader's last entry a learner may be when it is made a voter.
pub const CAUGHT_UP_LAG: u64 = 100;
/// How long `add_member` waits for the new member to catch up as a learner.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(60);

/// Every other seed's answer to a `Probe` of `group`, by slot (a seed that did not answer
/// within `timeout` is missing).
pub(crate) async fn probe_all(
    peers: &Arc<Peers>,
    seeds: &[SocketAddr],
    me: u64,
    group: u64,
    timeout: Duration,
) -> BTreeMap<u64, Probed> {
    let mut calls = JoinSet::new();
    for (slot, addr) in (1u64..).zip(seeds) {
        if slot == me {
            continue;
        }
        let peers = Arc::clone(peers);
        let addr = addr.to_string();
        calls.spawn(async move {
            let call = peers.call(&addr, Kind::Probe, group, ANY_MEMBER, Vec::new());
            let answer = match tokio::time::timeout(timeout, call).await {
                Ok(Ok(reply)) => wire::decode_probe_response(&reply).ok(),
                _ => None,
            };
            (slot, answer)
        });
    }
    let mut out = BTreeMap::new();
    while let Some(joined) = calls.join_next().await {
        if let Ok((slot, Some(p))) = joined {
            out.insert(slot, p);
        }
    }
    out
}

/// The member id of seed `me` whose directory holds no member file and no group: probes every
/// seed's metadata group until some seed holds state (the cluster formed: a new incarnation)
/// or every seed answered holding none (a cluster being formed: the founding id `me`).
pub(crate) async fn settle(
    peers: &Arc<Peers>,
    seeds: &[SocketAddr],
    me: u64,
    metadata_group: u64,
    probe_timeout: Duration,
    every: Duration,
) -> NodeId {
    loop {
        let answers = probe_all(peers, seeds, me, metadata_group, probe_timeout).await;
        if answers.values().any(|p| p.has_state) {
            let member = new_incarnation(me);
            tracing::warn!(
                slot = me,
                member,
                "no cluster state in this directory but the cluster has formed: starting as a new incarnation"
            );
            return member;
        }
        if answers.len() + 1 == seeds.len() {
            return me;
        }
        tokio::time::sleep(every).await;
    }
}

/// A member's place in a group as its leader sees it.
struct View {
    voters: BTreeSet<NodeId>,
    learners: BTreeSet<NodeId>,
    last_log: Option<u64>,
    matched: BTreeMap<NodeId, Option<u64>>,
}

/// The group's membership on its leader; why not, otherwise (not the leader, or a change in
/// flight: the last membership is joint or not committed yet).
fn leader_view(raft: &Raft) -> Result<View, String> {
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return Err(match m.current_leader {
            Some(l) => format!("not the leader (member {l} leads)"),
            None => "not the leader (no leader known)".into(),
        });
    }
    let membership = m.membership_config.membership();
    let committed = m.last_applied.map(|l| l.index);
    let joint = membership.get_joint_config().len() != 1;
    if joint || m.membership_config.log_id().map(|l| l.index) > committed {
        return Err("a membership change is in flight".into());
    }
    Ok(View {
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        last_log: m.last_log_index,
        matched: m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect())
            .unwrap_or_default(),
    })
}

/// The members of `voters` that are incarnations of seed `slot`.
fn of_slot(voters: &BTreeSet<NodeId>, slot: u64) -> BTreeSet<NodeId> {
    voters
        .iter()
        .filter(|v| slot_of(**v) == slot)
        .copied()
        .collect()
}

/// Makes `member` (at `addr`) a voter in place of `old` (the voters it replaces, maybe none):
/// first a learner, caught up from the leader's snapshot and log; then one joint-consensus
/// change. With `wait`, waits (up to [`CATCH_UP_WAIT`]) for the learner to catch up; without,
/// returns after adding the learner and makes it a voter on a later call, once caught up.
/// Returns whether `member` is a voter now.
async fn admit(
    raft: &Raft,
    member: NodeId,
    addr: &str,
    old: &BTreeSet<NodeId>,
    wait: bool,
) -> Result<bool, String> {
    let view = leader_view(raft)?;
    if view.learners.contains(&member) {
        let last = view.last_log.unwrap_or(0);
        match view.matched.get(&member).copied().flatten() {
            Some(matched) if last.saturating_sub(matched) <= CAUGHT_UP_LAG => {}
            _ => return Ok(false),
        }
    } else {
        let node = BasicNode {
            addr: addr.to_owned(),
        };
        let add = raft.add_learner(member, node, wait);
        match tokio::time::timeout(CATCH_UP_WAIT, add).await {
            Err(_) => {
                return Err(format!(
                    "member {member} did not catch up within {CATCH_UP_WAIT:?}"
                ));
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(_)) if !wait => return Ok(false),
            Ok(Ok(_)) => {}
        }
    }
    let view = leader_view(raft)?;
    let mut voters: BTreeSet<NodeId> = view.voters.difference(old).copied().collect();
    voters.insert(member);
    raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
        .await
        .map_err(|e| e.to_string())?;
    Ok(true)
}

/// One pass of the leader's watch over `group` (see the module's doc): a seed running an
/// incarnation other than its slot's voter is let in in place of that voter. A slot with no
/// voter (removed by the operator) is left alone: only `add_member` brings it back.
pub(crate) async fn keep_once(
    peers: &Arc<Peers>,
    seeds: &[SocketAddr],
    me: u64,
    group: u64,
    raft: &Raft,
    changing: &Mutex<()>,
    probe_timeout: Duration,
) {
    let Ok(view) = leader_view(raft) else {
        return;
    };
    let probed = probe_all(peers, seeds, me, group, probe_timeout).await;
    for (slot, p) in probed {
        if p.member == ANY_MEMBER || view.voters.contains(&p.member) {
            continue;
        }
        let old = of_slot(&view.voters, slot);
        let Some(addr) = usize::try_from(slot - 1).ok().and_then(|i| seeds.get(i)) else {
            continue;
        };
        if old.is_empty() {
            continue;
        }
        let Ok(_one_at_a_time) = changing.try_lock() else {
            return;
        };
        match admit(raft, p.member, &addr.to_string(), &old, false).await {
            Ok(true) => tracing::info!(
                group,
                member = p.member,
                replaced = ?old,
                "a new incarnation of a member replaced the old one"
            ),
            Ok(false) => tracing::debug!(group, member = p.member, "a new incarnation catching up"),
            Err(e) => tracing::debug!(group, member = p.member, error = %e, "not replaced yet"),
        }
        // One change per pass.
        return;
    }
}

/// `wharfctl add_member`: the seed at `addr` (its cluster address, as the seeds list it)
/// becomes a voter of the group `raft` leads, replacing any other incarnation of its slot.
///
/// # Errors
/// Why not, as the operator reads it.
pub(crate) async fn add_member(
    peers: &Arc<Peers>,
    seeds: &[SocketAddr],
    group: u64,
    raft: &Raft,
    changing: &Mutex<()>,
    addr: &str,
) -> Result<String, String> {
    let parsed: SocketAddr = addr
        .trim()
        .parse()
        .map_err(|e| format!("{addr:?} is not an IP address and port: {e}"))?;
    let slot = (1u64..)
        .zip(seeds)
        .find(|(_, s)| **s == parsed)
        .map(|(slot, _)| slot)
        .ok_or_else(|| format!("{parsed} is not one of the cluster seeds"))?;
    let view = leader_view(raft)?;
    let target = parsed.to_string();
    let probe = peers.call(&target, Kind::Probe, group, ANY_MEMBER, Vec::new());
    let probed = match tokio::time::timeout(Duration::from_secs(5), probe).await {
        Ok(Ok(reply)) => wire::decode_probe_response(&reply).map_err(|e| e.to_string())?,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no answer from {parsed} within 5 s")),
    };
    if probed.member == ANY_MEMBER {
        return Err(format!(
            "the node at {parsed} has not settled its member id yet"
        ));
    }
    if view.voters.contains(&probed.member) {
        return Err(format!("member {} is a voter already", probed.member));
    }
    let old = of_slot(&view.voters, slot);
    let _one_at_a_time = changing
        .try_lock()
        .map_err(|_| "a membership change is in flight".to_owned())?;
    admit(raft, probed.member, &parsed.to_string(), &old, true).await?;
    Ok(format!(
        "member {} at {parsed} is a voter of group {group}",
        probed.member
    ))
}

/// `wharfctl remove_member` (`forget_cluster_node`): `member` stops being a voter of the group
/// `raft` leads (and is forgotten).
///
/// # Errors
/// Why not, as the operator reads it.
pub(crate) async fn remove_member(
    group: u64,
    raft: &Raft,
    changing: &Mutex<()>,
    member: NodeId,
) -> Result<String, String> {
    let view = leader_view(raft)?;
    if !view.voters.contains(&member) && !view.learners.contains(&member) {
        return Err(format!("member {member} is not a member of group {group}"));
    }
    if view.voters.len() == 1 && view.voters.contains(&member) {
        return Err(format!(
            "member {member} is the last voter of group {group}"
        ));
    }
    let _one_at_a_time = changing
        .try_lock()
        .map_err(|_| "a membership change is in flight".to_owned())?;
    let change = if view.voters.contains(&member) {
        ChangeMembers::RemoveVoters([member].into())
    } else {
        ChangeMembers::RemoveNodes([member].into())
    };
    raft.change_membership(change, false)
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!("member {member} removed from group {group}"))
}
