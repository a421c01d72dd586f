//! A new leader's take-over (DESIGN "Replication", "Time"): its live broker starts as a copy
//! of the committed one and ends recovery as a restarted single node does (`Broker::recovered`:
//! unacked messages back and redelivered, S-DUR-6; leases restarted, S-QEXP-4; what is due
//! expires, S-DUR-5). Its clock never runs behind the highest `now` already logged, so time
//! never goes backwards across a leader change and the new leader expires the same messages at
//! the same instants (S-CLU-5, S-CLU-6). The outcome's events must be proposed like any other.

use wharf_broker::{Broker, Outcome};

use crate::snapshot::{self, SnapshotError};
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
    let bytes = snapshot::encode(machine.broker(), index, machine.now_ms())?;
    let mut live = snapshot::decode(&bytes)?.broker;
    let outcome = live.recovered(leader_now(clock_ms, machine.now_ms()));
    Ok((live, outcome))
}
