//! The broker task as a member of the metadata group (DESIGN "Definitions through the
//! metadata group"; S-CLU-51..54). Without a metadata handle nothing here runs.
//!
//! **Proposing.** The broker decides a definition as always (a declare, a binding between
//! exchanges, a policy, a user, a vhost: what `shared_definitions` names) and its batch's
//! definitions are proposed to group 0, from whichever node the client or operator used,
//! through the group's leader. The batch's frames and management answers wait at the gate for
//! that entry to commit and apply on this node, as for the store's fsync and group 1's commit
//! (S-CLU-52). Proposals go out one at a time, in batch order, from one sequencer task.
//!
//! **Refusing.** A proposal that does not commit in time (no majority) or is voided (another
//! node changed the same definitions first) fails its gate: every connection of the node is
//! closed with 541 and nothing of it stays, since the next convergence takes it out of the live
//! broker (S-CLU-53).
//!
//! **Converging.** Whenever the group's applied index moved and no proposal of this node is
//! in flight, the live broker is brought to the group's committed definitions
//! (`wharf_cluster::reconcile`): the events go to the node's own log and, while it leads the
//! quorum queues' group, into that group's next entry; they are never proposed back
//! (S-CLU-51).
//!
//! **Starting.** The node first reaches the group's definitions (an empty proposal through the
//! leader, applied here: a barrier) and then puts the configured vhosts and users into them,
//! as a single node does into its broker at start: the default user only when the cluster
//! never defined a user. Until then it proposes nothing and converges on nothing;
//! definitions made meanwhile wait for it, refused once they waited as long as a proposal may
//! take (S-CLU-54).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

use wharf_broker::{Broker, Event};
use wharf_clock::Clock;
use wharf_cluster::{MetadataError, MetadataGroup, Metrics, is_shared_definition};
use wharf_store::Ticket;

/// What the configured vhosts and users add to a broker holding the cluster's definitions,
/// at `now_ms` (the events; applied to that broker).
pub type Configured = Box<dyn Fn(&mut Broker, u64) -> Vec<Event> + Send + Sync>;

/// A proposal's answer, awaited at its gate.
pub(super) type MetaDone = oneshot::Receiver<Result<u64, MetadataError>>;

/// One batch's definitions, on their way to the sequencer.
struct Queued {
    now_ms: u64,
    events: Vec<Event>,
    done: oneshot::Sender<Result<u64, MetadataError>>,
}

impl Queued {
    /// Proposes the definitions and hands their gate the answer.
    async fn propose(self, group: &MetadataGroup) {
        let answer = group.propose(self.now_ms, self.events).await;
        let _ = self.done.send(answer);
    }
}

/// The answer of a proposal the sequencer will never make: it stopped.
pub(super) fn sequencer_stopped() -> MetadataError {
    MetadataError {
        why: "the metadata group's proposer stopped".to_owned(),
        voided: false,
    }
}

/// The broker task's state as a member of the metadata group.
pub(super) struct Meta {
    pub(super) group: MetadataGroup,
    to_sequencer: mpsc::UnboundedSender<Queued>,
    /// Set once the node reached the group's definitions and put its configured ones.
    pub(super) ready: watch::Receiver<bool>,
    metrics: watch::Receiver<Metrics>,
    /// The current batch's definitions, proposed with its gate.
    pending: Vec<Event>,
    /// The current batch's events that are the group's already (a convergence's, a
    /// take-over's), by position: never proposed.
    skip: Vec<std::ops::Range<usize>>,
    /// The gate of this node's last proposal: one is in flight while the gates passed are
    /// below it.
    pub(super) last_gate: Ticket,
    /// The applied index the live broker was last brought to (`None`: at the next chance).
    pub(super) converged_at: Option<u64>,
}

impl Meta {
    /// The state, with the sequencer task started.
    pub(super) fn new(group: MetadataGroup, configured: Configured, clock: Arc<dyn Clock>) -> Meta {
        let (to_sequencer, from_core) = mpsc::unbounded_channel();
        let (ready_tx, ready) = watch::channel(false);
        let metrics = group.metrics();
        tokio::spawn(sequencer(
            group.clone(),
            configured,
            clock,
            from_core,
            ready_tx,
        ));
        Meta {
            group,
            to_sequencer,
            ready,
            metrics,
            pending: Vec::new(),
            skip: Vec::new(),
            last_gate: 0,
            converged_at: None,
        }
    }

    /// Keeps the definitions among a batch's `events` for its proposal, unless the batch's
    /// events came from the group (a convergence, a take-over).
    pub(super) fn take_definitions(&mut self, events: &[Event]) {
        let skip = std::mem::take(&mut self.skip);
        let proposed = events
            .iter()
            .enumerate()
            .filter(|(i, e)| is_shared_definition(e) && !skip.iter().any(|r| r.contains(i)))
            .map(|(_, e)| e.clone());
        self.pending.extend(proposed);
    }

    /// The current batch's events at `range` are not proposed (they are the group's already).
    pub(super) fn skip(&mut self, range: std::ops::Range<usize>) {
        self.skip.push(range);
    }

    /// Hands the batch's definitions, if any, to the sequencer: the answer its gate awaits.
    pub(super) fn submit(&mut self, now_ms: u64) -> Option<MetaDone> {
        if self.pending.is_empty() {
            return None;
        }
        let events = std::mem::take(&mut self.pending);
        let (done, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(q)) = self.to_sequencer.send(Queued {
            now_ms,
            events,
            done,
        }) {
            let _ = q.done.send(Err(sequencer_stopped()));
        }
        Some(answer)
    }

    /// Records the gate the last proposal waits at.
    pub(super) fn proposed_at(&mut self, gate: Ticket) {
        self.last_gate = gate;
    }

    /// After a failed proposal: converge at the next chance whatever the applied index.
    pub(super) fn reconverge(&mut self) {
        self.converged_at = None;
    }

    /// Waits until the group's applied index may have moved, or the node became ready.
    pub(super) async fn changed(&mut self) {
        tokio::select! {
            changed = self.metrics.changed() => {
                if changed.is_err() {
                    // The group stopped: nothing more will move.
                    std::future::pending::<()>().await;
                }
            }
            changed = self.ready.changed() => {
                if changed.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// Proposes the node's definitions, one batch at a time in order, once it reached the group's
/// definitions and put its configured ones (S-CLU-54).
async fn sequencer(
    group: MetadataGroup,
    configured: Configured,
    clock: Arc<dyn Clock>,
    mut from_core: mpsc::UnboundedReceiver<Queued>,
    ready: watch::Sender<bool>,
) {
    // Definitions made meanwhile wait for it, each at most the time a proposal has.
    let mut waiting: Vec<(u64, Queued)> = Vec::new();
    let wait_ms =
        u64::try_from(wharf_cluster::METADATA_COMMIT_WAIT.as_millis()).unwrap_or(u64::MAX);
    let reach = reach(&group, &configured, clock.as_ref());
    tokio::pin!(reach);
    loop {
        tokio::select! {
            () = &mut reach => break,
            queued = from_core.recv() => match queued {
                Some(q) => waiting.push((clock.now_ms(), q)),
                None => return,
            },
            () = tokio::time::sleep(wharf_cluster::RETRY_EVERY) => {}
        }
        let (late, on_time): (Vec<_>, Vec<_>) = std::mem::take(&mut waiting)
            .into_iter()
            .partition(|(since, _)| clock.now_ms().saturating_sub(*since) > wait_ms);
        waiting = on_time;
        for (_, q) in late {
            let _ = q.done.send(Err(MetadataError {
                why: "this node has not reached the cluster's metadata group".to_owned(),
                voided: false,
            }));
        }
    }
    info!("reached the cluster's metadata group");
    let _ = ready.send(true);
    for (_, q) in waiting {
        q.propose(&group).await;
    }
    while let Some(q) = from_core.recv().await {
        q.propose(&group).await;
    }
}

/// Reaches the group's definitions (S-CLU-54): a barrier (once an entry proposed now is
/// applied here, so is everything committed before it), then the configured vhosts and users
/// put into them. Tries until it succeeds.
async fn reach(group: &MetadataGroup, configured: &Configured, clock: &dyn Clock) {
    let mut logged = false;
    while let Err(e) = group.propose(clock.now_ms(), Vec::new()).await {
        if !std::mem::replace(&mut logged, true) {
            warn!(error = %e, "waiting for the cluster's metadata group");
        }
        tokio::time::sleep(wharf_cluster::RETRY_EVERY).await;
    }
    loop {
        let now_ms = clock.now_ms();
        let events = group.machine.with(|m| {
            let mut scratch = definitions_of(m.broker());
            configured(&mut scratch, now_ms)
        });
        if events.is_empty() {
            return;
        }
        match group.propose(now_ms, events).await {
            Ok(_) => return,
            Err(e) => {
                warn!(error = %e, "putting the configured vhosts and users into the cluster's definitions");
                tokio::time::sleep(wharf_cluster::RETRY_EVERY).await;
            }
        }
    }
}

/// A broker holding `committed`'s definitions and nothing else.
fn definitions_of(committed: &Broker) -> Broker {
    let mut b = Broker::new();
    for event in committed.definitions() {
        if let Err(e) = b.apply(&event) {
            error!(error = %e, ?event, "copying a definition of the cluster");
        }
    }
    b
}
