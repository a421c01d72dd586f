//! The broker task as a member of the group that replicates quorum queues (DESIGN
//! "Replication"; S-CLU-10, S-CLU-11). Without a group handle nothing here runs and the task is
//! a single node, unchanged.
//!
//! **Leading.** The member's broker decides as always; each batch's events are split
//! (`wharf_cluster::Replicated`): a classic queue's go to the member's own log, a replicated
//! queue's are proposed to the group as one entry carrying the task's `now`, definitions go to
//! both. The frames of a batch then wait at a gate of their own: a gate ticket passes once the
//! batch's own records are durable (the store's group commit) AND its entry is committed by a
//! majority of the group (each member's WAL made it durable before acknowledging it). Gates
//! pass in order, so a confirm, an ack's freed slot or a `get-empty` is seen only once
//! everything before it passed (S-CLU-1). Proposals are submitted in batch order by one
//! proposer task and awaited by one waiter task, so entries pipeline.
//!
//! **Taking over.** When the member's metrics show it leads with its term's first entry
//! applied, its live broker adopts the group's committed state as a restarted single node
//! recovers (`wharf_cluster::adopt`, S-CLU-6); its first entry carries the member's own
//! definitions and the events of that recovery (S-CLU-12). Its clock never decides earlier than
//! the highest logged `now` (S-CLU-5).
//!
//! **Following.** The member serves its classic queues; a command that needs a replicated
//! queue (as the group's committed state knows it) is refused with 405 naming the leader
//! (S-CLU-11): forwarding is not built.
//!
//! **Losing the lead.** A member that stops leading, or whose proposal does not commit, stops
//! its broker task as a failed log does (541 to every connection): what it decided past the
//! commit index is never shown, and its live broker, ahead of the group, is not reused.

use tracing::{error, info, warn};

use super::Core;
use super::member::{Replica, own_snapshot};
use crate::convert::Close;
use wharf_broker::{Command, Snapshot};
use wharf_cluster::{QueueGroup, Role};
use wharf_protocol::reply_code;
use wharf_store::Ticket;

impl Core {
    /// Makes the broker task a member of `group` (before it runs; spawns its proposer and
    /// waiter tasks). It serves as a follower until its metrics show it leads.
    pub fn set_replica(&mut self, group: QueueGroup) {
        self.replica = Some(Replica::new(group));
    }

    /// Why the broker task must stop serving, if the group says so: a gate failed (an entry
    /// did not commit), or the member stopped leading.
    pub(super) fn replica_failure(&self) -> Option<String> {
        let r = self.replica.as_ref()?;
        if let Some(f) = &r.failure {
            return Some(f.clone());
        }
        r.passed.borrow().as_ref().err().cloned()
    }

    /// The watermark of passed gates, in a group.
    pub(super) fn gate_passed(&self) -> Option<Ticket> {
        self.replica.as_ref().map(Replica::passed)
    }

    /// Waits (at most `limits::CLOSE_OK_WAIT`) until every gate issued has passed, so a clean
    /// stop shows what it committed.
    pub(super) async fn drain_gate(&mut self) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let target = r.gate;
        let passed = r.passed.wait_for(|p| !matches!(p, Ok(t) if *t < target));
        let _ = tokio::time::timeout(wharf_base::limits::CLOSE_OK_WAIT, passed).await;
    }

    /// Acts on a possible role change: takes over when this member came to lead; records a
    /// failure when it stopped leading.
    pub(super) fn on_role(&mut self) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let role = Role::of(r.group.node, &r.metrics.borrow_and_update());
        match (r.leading, role) {
            (false, Role::Leader) => self.take_over(),
            (true, Role::Follower(leader)) => {
                r.failure = Some(format!(
                    "this member stopped leading the quorum queues' group (leader now: {leader:?})"
                ));
            }
            _ => {}
        }
    }

    fn take_over(&mut self) {
        let now = self.clock.now_ms();
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let adopted = r
            .group
            .machine
            .with(|m| wharf_cluster::adopt(&mut self.broker, m, now).map(|a| (a, m.now_ms())));
        match adopted {
            Ok((adopted, logged_ms)) => {
                r.leading = true;
                r.floor_ms = logged_ms;
                r.replicated = adopted.replicated;
                r.local_only = adopted.local;
                // The group gets this member's own definitions first (S-CLU-12).
                r.split.replicated.extend(adopted.to_group);
                info!(
                    node = r.group.node,
                    queues = r.replicated.len(),
                    "leading the quorum queues' group: took over its committed state"
                );
                self.apply_outcome(adopted.outcome, None);
            }
            Err(e) => {
                error!(error = %e, "taking over the quorum queues' group failed");
                r.failure = Some(format!("taking over the group's state failed: {e}"));
            }
        }
    }

    /// The `now` the broker task decides with: its clock, and while it leads, never earlier
    /// than the highest `now` its group had logged (S-CLU-5).
    pub(super) fn decide_now(&self) -> u64 {
        let clock = self.clock.now_ms();
        match &self.replica {
            Some(r) if r.leading => wharf_cluster::leader_now(clock, r.floor_ms),
            _ => clock,
        }
    }

    /// Splits the batch's events when this member leads: the member's own part stays in
    /// `self.events` (for the store), the group's waits in the replica for the gate. A member
    /// that does not lead logs everything itself (its commands never reach a replicated queue,
    /// S-CLU-11).
    pub(super) fn split_batch(&mut self) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if !r.leading {
            return;
        }
        let events = std::mem::take(&mut self.events);
        r.split.local.append(&mut r.local_only);
        r.replicated.split(events, &mut r.split);
        std::mem::swap(&mut self.events, &mut r.split.local);
    }

    /// The gate ticket to seal this batch's frames with and the watermark to release with,
    /// in a group (`None` on a single node: the store's ticket and durable watermark).
    pub(super) fn gate_positions(&mut self) -> Option<(Ticket, Ticket)> {
        let now_ms = self.decide_now();
        let r = self.replica.as_mut()?;
        Some(r.gate_batch(self.store.as_ref(), self.last_ticket, now_ms))
    }

    /// The member's checkpoint: its own part of the live broker (S-CLU-10).
    pub(super) fn own_snapshot(&self) -> Snapshot {
        own_snapshot(&self.broker, self.replica.as_ref())
    }

    /// S-CLU-11: a member that does not lead refuses a command that needs a replicated queue,
    /// with 405 naming the leader (forwarding is not built).
    pub(super) fn follower_refusal(&self, conn: u64, cmd: &Command) -> Option<Close> {
        let r = self.replica.as_ref().filter(|r| !r.leading)?;
        let vhost = &self.conns.get(&conn)?.vhost;
        let queue = r.group.needs_leader(vhost, cmd)?;
        let leader = match Role::of(r.group.node, &r.metrics.borrow()) {
            Role::Follower(Some(id)) => format!("node {id}"),
            _ => "no node yet".to_owned(),
        };
        warn!(%vhost, %queue, %leader, "refused: a quorum queue led by another node");
        Some(Close::new(
            reply_code::RESOURCE_LOCKED,
            &format!(
                "quorum queue '{queue}' in vhost '{vhost}' is led by {leader}, not this node; \
                 connect to its leader (forwarding between nodes is not supported yet)"
            ),
        ))
    }
}
