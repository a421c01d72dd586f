//! A new leader's take-over (DESIGN "Replication", "Time"): its live broker starts as a copy
//! of the committed one and ends recovery as a restarted single node does (`Broker::recovered`:
//! unacked messages back and redelivered, S-DUR-6; leases restarted, S-QEXP-4; what is due
//! expires, S-DUR-5). Its clock never runs behind the highest `now` already logged, so time
//! never goes backwards across a leader change and the new leader expires the same messages at
//! the same instants (S-CLU-5, S-CLU-6). The outcome's events must be proposed like any other.

use wharf_broker::{Broker, Event, Outcome, Placement};

use crate::snapshot::{self, SnapshotError};
use crate::split::{Replicated, Split, shared_definitions};
use crate::state_machine::Machine;

/// The `now` a leader decides with: its clock, but never earlier than the highest `now` the
/// group has logged (S-CLU-5).
pub fn leader_now(clock_ms: u64, logged_ms: u64) -> u64 {
    clock_ms.max(logged_ms)
}

/// A new leader's live broker, from the committed state `machine`, at the leader's clock
/// `clock_ms`; and the outcome of ending recovery, whose events the leader proposes first.
///
/// # Errors
/// The committed broker does not survive its own checkpoint round trip (a bug, or a message
/// whose content is not in memory).
pub fn take_over(machine: &Machine, clock_ms: u64) -> Result<(Broker, Outcome), SnapshotError> {
    let index = machine.last_applied().map_or(0, |l| l.index);
    let bytes = snapshot::encode(
        machine.broker(),
        index,
        machine.now_ms(),
        &snapshot::Sessions::new(),
    )?;
    let mut live = snapshot::decode(&bytes)?.broker;
    let outcome = live.recovered(leader_now(clock_ms, machine.now_ms()));
    Ok((live, outcome))
}

/// What a member's live broker took over from the group ([`adopt`]).
#[derive(Debug)]
pub struct Adopted {
    /// The outcome of ending recovery in the committed state: its events are proposed first.
    pub outcome: Outcome,
    /// The queues the live broker now serves for the group.
    pub replicated: Replicated,
    /// Definitions the live broker got from the group that the member's own log must hold too
    /// (vhosts, exchanges, policies, users...), so that log stays whole for its classic queues.
    pub local: Vec<Event>,
    /// The member's own definitions the group must hold too (its vhosts, exchanges,
    /// policies...), so what the new leader decides on them applies on every member: proposed
    /// first, before the outcome's events.
    pub to_group: Vec<Event>,
}

/// A new leader's take-over into the member's live broker `live`, which keeps its own (classic)
/// queues, connections and consumers (S-CLU-6, S-CLU-10): the group's committed state, taken over
/// at `clock_ms` as [`take_over`] does, is loaded into `live`: its definitions (declared only
/// where missing), its replicated queues, and their messages with their marks (unacked ones
/// back and redelivered).
///
/// # Errors
/// As [`take_over`]; or `live` refuses a definition or a message of the group (a replicated
/// queue's name is taken by a queue of the member's own).
pub fn adopt(
    live: &mut Broker,
    machine: &Machine,
    clock_ms: u64,
) -> Result<Adopted, SnapshotError> {
    let now_ms = leader_now(clock_ms, machine.now_ms());
    let to_group = shared_definitions(live.snapshot().definitions);
    let (taken, outcome) = take_over(machine, clock_ms)?;
    let snapshot = taken.snapshot();
    let mut replicated = Replicated::default();
    let mut split = Split::default();
    replicated.split(snapshot.definitions, &mut split);
    for event in &split.replicated {
        if let Event::QueueDeclared { vhost, queue, .. } = event
            && live.queue_kind(vhost, queue).is_some()
        {
            return Err(wharf_broker::BrokerError::precondition(format!(
                "queue '{queue}' in vhost '{vhost}' of the group is also a queue of this member's own"
            ))
            .into());
        }
        live.apply(event)?;
        if let Event::QueueDeclared { vhost, queue, .. } = event {
            live.restart_lease(vhost, queue, now_ms);
        }
    }
    for q in snapshot
        .queues
        .iter()
        .filter(|q| replicated.contains(&q.vhost, &q.queue))
    {
        for m in &q.messages {
            let placement = Placement {
                queue: q.queue.clone(),
                delivery_count: m.delivery_count,
                redelivered: m.redelivered,
                held: m.held,
            };
            live.restore_message(&q.vhost, &m.message, &[placement])?;
        }
    }
    live.restore_next_message_id(snapshot.next_message_id);
    Ok(Adopted {
        outcome,
        replicated,
        local: split.local,
        to_group,
    })
}
