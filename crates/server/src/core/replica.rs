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
//! **Taking over.** When the member's metrics show it leads with every entry of its own log
//! applied (`Role::may_take_over`), its live broker adopts the group's committed state as a restarted single node
//! recovers (`wharf_cluster::adopt`, S-CLU-6); its first entry carries the member's own
//! definitions and the events of that recovery (S-CLU-12). Its clock never decides earlier than
//! the highest logged `now` (S-CLU-5).
//!
//! **Following.** The member serves its classic queues; a command that needs a replicated
//! queue (as the group's committed state knows it) reaches the broker task only when the
//! connection could not forward its channel to the leader (`connection/forward.rs`,
//! S-CLU-70), and is refused with 405 naming the leader and its AMQP address when known
//! (S-CLU-11, S-CLU-13). A channel moving to the leader is handed over here (S-CLU-71).
//!
//! **Losing the lead.** A member that stops leading, or whose proposal does not commit, steps
//! down and serves on as a follower (S-CLU-12): every connection closed with 320, what it
//! decided past the commit index never shown, the replicated queues dropped from its live
//! broker, which keeps what its own log holds. Only a stopped Raft or a failed take-over stops
//! the broker task (541 to every connection, as a failed log does).
//!
//! **A voided entry.** When an entry it proposed committed but was voided (its events did not
//! fit the committed state, S-CLU-60), the member still leads but its live broker has diverged:
//! it steps down the same way, closing every connection with 541 instead of 320 (no confirm for
//! the entry), and takes over again in the same term, from the committed state, once its old
//! gate waiter has seen every commit it was handed resolve (`Replica::predecessor`). Voided
//! entries in a row stop that after a few take-overs, for the term (S-CLU-62, `void_guard.rs`).

use tracing::{error, info, warn};

use super::Core;

/// The text of the 320 close a member that stopped leading sends every connection (S-CLU-12).
const STEPPED_DOWN: &str = "this node stopped leading the quorum queues' group; reconnect \
     (classic queues are served here, quorum queues by the group's leader)";
/// The start of the 541 close a member whose definitions the metadata group did not take sends
/// every connection (S-CLU-53); the reason follows.
const DEFINITIONS_REFUSED: &str = "a definition made on this node was not committed by the \
     cluster's metadata group and is undone here (the group may still take it); reconnect";
/// The text of the 541 close a leader whose entry was voided sends every connection (S-CLU-60).
const VOIDED: &str = "an entry of the quorum queues' group did not fit its committed state \
     and was voided; this node rebuilds its quorum queues from the committed state; reconnect";
use super::member::{Replica, own_snapshot};
use crate::convert::Close;
use wharf_broker::{BrokerError, Command, ErrorKind, Event, Snapshot};
use wharf_cluster::{QueueGroup, Role};
use wharf_protocol::reply_code;
use wharf_store::Ticket;

impl Core {
    /// Makes the broker task a member of `group` (before it runs; spawns its proposer and
    /// waiter tasks). It serves as a follower until its metrics show it leads.
    pub fn set_replica(&mut self, group: QueueGroup) {
        self.replica = Some(Replica::new(group));
    }

    /// Why the broker task must stop serving, if the group says so: the group's Raft or the
    /// gate's tasks stopped, or taking over failed. A gate that failed (an entry did not
    /// commit: this member lost the lead) is not a reason: the member steps down and serves
    /// as a follower (S-CLU-12).
    pub(super) fn replica_failure(&mut self) -> Option<String> {
        let r = self.replica.as_ref()?;
        if let Some(f) = &r.failure {
            return Some(f.clone());
        }
        let failed = r.passed.borrow().as_ref().err().cloned()?;
        if failed.meta {
            self.definitions_refused(&failed.why);
        } else if failed.voided && self.voided_in_a_row(failed.passed) {
            // S-CLU-62: its take-over entry is voided every time; not again this term.
            self.step_down(
                &failed.why,
                &Close::new(reply_code::INTERNAL_ERROR, VOIDED),
                true,
            );
        } else if failed.voided {
            // S-CLU-60: it still leads, but its live broker applied what the group voided.
            error!(reason = %failed.why, "a proposal of this leader was voided: rebuilding from the committed state");
            self.step_down(
                &failed.why,
                &Close::new(reply_code::INTERNAL_ERROR, VOIDED),
                false,
            );
        } else {
            self.step_down(
                &failed.why,
                &Close::new(reply_code::CONNECTION_FORCED, STEPPED_DOWN),
                true,
            );
        }
        None
    }

    /// S-CLU-53: definitions this member proposed did not become the cluster's (no majority in
    /// time, or voided by a concurrent change): what its live broker decided after them is not
    /// shown. Every connection is closed with 541; a leader of the quorum queues' group steps
    /// down and takes over again from the committed state (as after a voided entry, S-CLU-60),
    /// a follower starts new gate tasks. The next convergence takes the definitions out of the
    /// live broker.
    fn definitions_refused(&mut self, why: &str) {
        error!(reason = %why, "definitions of this node were not committed by the metadata group: closing every connection");
        let close = Close::new(
            reply_code::INTERNAL_ERROR,
            &format!("{DEFINITIONS_REFUSED} ({why})"),
        );
        if let Some(m) = self.meta.as_mut() {
            m.reconverge();
        }
        if self.replica.as_ref().is_some_and(|r| r.leading) {
            self.step_down(why, &close, false);
            self.converge();
            return;
        }
        let Some(r) = self.replica.as_ref() else {
            return;
        };
        let passed = r.passed();
        self.close_all_now(&close);
        if let Some(r) = self.replica.as_mut() {
            *r = r.after();
        }
        self.refuse_admin_after(passed, &close.text);
        // Undone at once: the committed definitions lack them.
        self.converge();
    }

    /// Management answers waiting at gates after `passed`, which will not pass, are answered
    /// with `why` (541 `INTERNAL_ERROR`; the API answers 500 with it).
    fn refuse_admin_after(&mut self, passed: Ticket, why: &str) {
        let (kept, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut self.admin_waiting)
            .into_iter()
            .partition(|(t, _)| *t <= passed);
        self.admin_waiting = kept.into();
        for (_, answer) in refused {
            answer.refuse(BrokerError::new(ErrorKind::InternalError, why));
        }
    }

    /// Counts a voided entry of this member (the gates up to `passed` passed before it):
    /// whether it was voided too many times in a row this term (S-CLU-62), logged at ERROR.
    fn voided_in_a_row(&mut self, passed: Ticket) -> bool {
        let Some(r) = self.replica.as_mut() else {
            return false;
        };
        let term = r.metrics.borrow().current_term;
        let stop = r.void_streak.voided(term, passed);
        if stop {
            error!(
                term,
                voided = r.void_streak.count(),
                "entries of this leader were voided too many times in a row (its take-over's \
                 each time): it stops leading the quorum queues' group for the rest of this \
                 term (S-CLU-62)"
            );
        }
        stop
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
        let (role, ready, term) = {
            let m = r.metrics.borrow_and_update();
            let node = r.group.node;
            (
                Role::of(node, &m),
                Role::may_take_over(node, &m),
                m.current_term,
            )
        };
        match (r.leading, role) {
            // Only with its whole log applied (entries it appended leading this term before a
            // restart commit first), and not again in the term it stepped down in: entries it
            // proposed then may still commit after the committed state it would adopt.
            // And once nothing it proposed before it stepped down is in flight (S-CLU-60: a
            // leader whose entry was voided takes over again in the same term).
            (false, Role::Leader) if ready && term > r.deposed_term && r.predecessor.is_none() => {
                self.take_over();
            }
            (true, Role::Follower(leader)) => {
                self.step_down(
                    &format!("the group's leader is now {leader:?}"),
                    &Close::new(reply_code::CONNECTION_FORCED, STEPPED_DOWN),
                    true,
                );
            }
            _ => {}
        }
    }

    /// S-CLU-12: this member stopped leading (or an entry it proposed did not commit): it
    /// serves on as a follower, without a restart. Its live broker is ahead of the group's
    /// commit index, so nothing of what it decided for the group is shown or kept: every
    /// connection is closed with 320 (frames not released yet are dropped, as after a failed
    /// log), the closes' events for its classic queues go to its own log (their unacked
    /// messages back, as any closed connection's) while the group's are dropped (they never
    /// commit, S-CLU-3), and the replicated queues leave the live broker, which keeps its
    /// classic queues and definitions: exactly what its own log holds. New gate tasks take
    /// over from the old ones; management answers waiting at a gate that will not pass are
    /// dropped.
    ///
    /// A leader whose entry was voided (S-CLU-60) steps down the same way, with `close` saying
    /// so, but not `deposed`: it takes over again in the same term, from the committed state,
    /// once every entry it proposed before has committed or failed.
    fn step_down(&mut self, why: &str, close: &Close, deposed: bool) {
        let Some(r) = self.replica.as_ref() else {
            return;
        };
        if !r.leading {
            return;
        }
        let term = r.metrics.borrow().current_term;
        let passed = r.passed();
        warn!(
            node = r.group.node,
            reason = why,
            "stopped leading the quorum queues' group: closing every connection, serving as a follower"
        );
        self.close_all_now(close);
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let events = std::mem::take(&mut self.events);
        r.split.local.append(&mut r.local_only);
        r.replicated.split(events, &mut r.split);
        std::mem::swap(&mut self.events, &mut r.split.local);
        let gone: Vec<Event> = r
            .replicated
            .iter()
            .map(|(vhost, queue)| Event::QueueDeleted {
                vhost: vhost.to_owned(),
                queue: queue.to_owned(),
            })
            .collect();
        let mut follower = r.after();
        if deposed {
            follower.deposed_term = term;
        }
        *r = follower;
        for event in &gone {
            if let Err(e) = self.broker.apply(event) {
                error!(error = %e, ?event, "dropping a replicated queue from the live broker");
            }
        }
        self.refuse_admin_after(passed, why);
        info!(
            queues = gone.len(),
            "serving as a follower of the quorum queues' group"
        );
    }

    fn take_over(&mut self) {
        let now = self.clock.now_ms();
        let first = self.events.len();
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
                r.void_streak.took_over(r.gate);
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
                // What the take-over brought is the groups' already: never proposed to the
                // metadata group. Group 1's definitions may lag group 0's: the live broker
                // converges on group 0 again at once (S-CLU-51).
                let last = self.events.len();
                if let Some(m) = self.meta.as_mut() {
                    m.skip(first..last);
                    m.reconverge();
                }
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
        let meta = self.meta.as_mut().and_then(|m| m.submit(now_ms));
        let proposed = meta.is_some();
        let positions = r.gate_batch(self.store.as_ref(), self.last_ticket, now_ms, meta);
        if proposed && let Some(m) = self.meta.as_mut() {
            m.proposed_at(positions.0);
        }
        Some(positions)
    }

    /// The member's checkpoint: its own part of the live broker (S-CLU-10).
    pub(super) fn own_snapshot(&self) -> Snapshot {
        own_snapshot(&self.broker, self.replica.as_ref())
    }

    /// S-CLU-11: a member that does not lead refuses a command that needs a replicated queue,
    /// with 405 naming the leader, when the connection could not forward it (S-CLU-70).
    pub(super) fn follower_refusal(&self, conn: u64, cmd: &Command) -> Option<Close> {
        let vhost = &self.conns.get(&conn)?.vhost;
        let text = self.refusal_text(vhost, cmd)?;
        Some(Close::new(reply_code::RESOURCE_LOCKED, &text))
    }

    /// S-CLU-11 on the management path (the HTTP API, `wharfctl`): the same refusal for an
    /// operator's command, named by its own vhost.
    pub(super) fn admin_refusal(&self, cmd: &Command) -> Option<BrokerError> {
        let vhost = match cmd {
            Command::QueueDeclare(d) => &d.vhost,
            Command::Publish(p) => &p.vhost,
            Command::QueueBind { vhost, .. }
            | Command::QueuePurge { vhost, .. }
            | Command::MoveBack { vhost, .. }
            | Command::QueueDelete { vhost, .. } => vhost,
            _ => return None,
        };
        let text = self.refusal_text(vhost, cmd)?;
        Some(BrokerError::new(ErrorKind::ResourceLocked, text))
    }

    /// The refusal of `cmd` on `vhost` by a member that does not lead, when it needs a
    /// replicated queue (S-CLU-11, S-CLU-13).
    fn refusal_text(&self, vhost: &str, cmd: &Command) -> Option<String> {
        let r = self.replica.as_ref().filter(|r| !r.leading)?;
        let queue = r.group.needs_leader(vhost, cmd)?;
        let leader = r.group.leader_name();
        warn!(%vhost, %queue, %leader, "refused: a quorum queue led by another node");
        Some(format!(
            "quorum queue '{queue}' in vhost '{vhost}' is led by {leader}, not this node, \
             which cannot forward to it now; connect to its leader"
        ))
    }
}

impl Core {
    /// S-CLU-71: channel `ch` moves to the quorum queues' leader (`need`: the method, the
    /// quorum queue, the leader). It may only when nothing of it stays here: no transaction,
    /// no consumer, no unacknowledged delivery (those are this node's classic queues');
    /// otherwise it is closed with 406 naming both. Once moved it leaves the broker.
    pub(super) fn hand_off(
        &mut self,
        conn: u64,
        ch: u16,
        (method, queue, leader): (crate::methods::MethodId, &str, u64),
        done: tokio::sync::oneshot::Sender<Option<super::Handoff>>,
    ) {
        let chan = wharf_broker::ChanRef::new(conn, ch);
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let Some(state) = c.channels.get(&ch) else {
            return;
        };
        let busy = if state.tx.is_some() {
            Some("is transactional")
        } else if self.broker.channel_unacked(chan) > 0 {
            Some("holds unacknowledged deliveries of this node's queues")
        } else if self
            .broker
            .consumers(&c.vhost)
            .iter()
            .any(|info| info.chan == chan)
        {
            Some("has consumers on this node's queues")
        } else {
            None
        };
        if let Some(busy) = busy {
            let text = format!(
                "channel {ch} {busy}, and quorum queue '{queue}' is led by node {leader}: \
                 use another channel for the quorum queue"
            );
            warn!(conn, channel = ch, %text, "a channel could not move to the quorum queues' leader");
            let close = Close::new(reply_code::PRECONDITION_FAILED, &text);
            self.fail(conn, ch, &close, method);
            let _ = done.send(None);
            return;
        }
        let confirm_next = state.confirm_next;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.channels.remove(&ch);
        }
        self.close_channel_in_broker(conn, ch);
        info!(conn, channel = ch, %queue, leader, "channel forwarded to the quorum queues' leader");
        let _ = done.send(Some(super::Handoff { confirm_next }));
    }
}

impl Core {
    /// S-CLU-72: the classic queue of this node `probe` uses on connection `conn`'s vhost, if
    /// any (a member that does not lead holds no quorum queue in its live broker).
    pub(super) fn local_use(&self, conn: u64, probe: &super::LocalUse) -> Option<String> {
        let vhost = &self.conns.get(&conn)?.vhost;
        let classic = |q: &str| {
            self.broker
                .queue_kind(vhost, q)
                .is_some_and(|k| k != wharf_broker::QueueKind::Quorum)
        };
        match probe {
            super::LocalUse::Queue(q) => classic(q).then(|| q.clone()),
            super::LocalUse::Publish { exchange, key } => self
                .broker
                .routed_queue_names(vhost, exchange, key, None)
                .into_iter()
                .find(|q| classic(q)),
        }
    }
}

impl Core {
    /// S-CLU-74: channel `ch`, which had moved to the leader, is this node's again: open in
    /// the broker (no `open-ok`: the client's channel never closed), in confirm mode going on
    /// from `confirm_next` when given.
    pub(super) fn take_back(&mut self, conn: u64, ch: u16, confirm_next: Option<u64>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.channels.contains_key(&ch) {
            return;
        }
        c.channels.insert(
            ch,
            super::ChanState {
                confirm_next,
                ..super::ChanState::default()
            },
        );
        let cmd = Command::ChannelOpen {
            chan: wharf_broker::ChanRef::new(conn, ch),
        };
        match self.broker.handle(cmd, self.now()) {
            Ok(out) => self.apply_outcome(out, Some((conn, ch))),
            Err(e) => {
                let close = crate::convert::broker_error_close(&e);
                self.fail(conn, ch, &close, crate::methods::MethodId::CHANNEL_OPEN);
            }
        }
    }
}
