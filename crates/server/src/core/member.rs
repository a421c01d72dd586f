//! The broker task's state as a member of the quorum queues' group (`replica.rs` drives it):
//! its role, the split of the current batch, and the gate its frames wait at, with the
//! proposer and waiter tasks behind the gate. Names nothing of the broker task itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use wharf_base::limits;
use wharf_broker::{Broker, Event, Snapshot};
use wharf_cluster::{
    Appended, Commit, Events, Metrics, Proposal, ProposeError, QueueGroup, Replicated, Split,
    events_bytes,
};
use wharf_store::{Store, StoreError, Ticket};

use super::metadata::{Meta, MetaDone, sequencer_stopped};
use super::void_guard::VoidStreak;

/// A store durability future the broker task waits on.
pub(super) type DurableFuture = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

/// One batch at the gate: its gate ticket, the store durability it waits for, its events
/// for the quorum queues' group.
struct Gated {
    gate: Ticket,
    durable: Option<DurableFuture>,
    proposal: Option<ToPropose>,
    /// Its definitions' answer from the metadata group (S-CLU-52).
    meta: Option<MetaDone>,
}

/// A batch's events for the quorum queues' group, decided at `now_ms` (S-CLU-5).
struct ToPropose {
    now_ms: u64,
    events: Vec<Event>,
}

impl Gated {
    /// About the bytes its events take in an entry.
    fn bytes(&self) -> usize {
        self.proposal
            .as_ref()
            .map_or(0, |p| events_bytes(&p.events))
    }
}

/// What the proposer hands the waiter: the gate, and what it waits for.
type Waiting = (
    Ticket,
    Option<DurableFuture>,
    Option<Commit>,
    Option<MetaDone>,
);

/// Why a gate will not pass.
#[derive(Debug, Clone)]
pub(super) struct GateFailure {
    pub(super) why: String,
    /// The gate's entry committed but was voided (S-CLU-60): this member still leads, and its
    /// live broker applied events the committed state did not take.
    pub(super) voided: bool,
    /// The gates passed before it (S-CLU-62).
    pub(super) passed: Ticket,
    /// It failed on the metadata group's side: its definitions are not the cluster's
    /// (S-CLU-53).
    pub(super) meta: bool,
}

/// The broker task's membership state.
pub(super) struct Replica {
    pub(super) group: QueueGroup,
    pub(super) metrics: watch::Receiver<Metrics>,
    pub(super) leading: bool,
    /// The highest `now` the group had logged when this member took over (S-CLU-5).
    pub(super) floor_ms: u64,
    pub(super) replicated: Replicated,
    /// The current batch's events, split.
    pub(super) split: Split,
    /// Definitions a take-over brought that only the member's own log takes.
    pub(super) local_only: Vec<Event>,
    /// The last gate ticket issued, and the store ticket it covered.
    pub(super) gate: Ticket,
    gated_store: Ticket,
    to_proposer: mpsc::UnboundedSender<Gated>,
    /// Set when this state is replaced at a step-down: its proposer submits nothing more.
    retired: Arc<AtomicBool>,
    pub(super) passed: watch::Receiver<Result<Ticket, GateFailure>>,
    /// This state's gate waiter; after a failure it ends once every commit it was handed has
    /// resolved.
    waiter: Option<JoinHandle<()>>,
    /// The waiter of the state this one replaced, until it ended: while it runs, entries the
    /// member proposed before stepping down may still commit, so it does not take over (S-CLU-12).
    pub(super) predecessor: Option<JoinHandle<()>>,
    /// Why the member must stop serving, once known.
    pub(super) failure: Option<String>,
    /// The term in which this member last stepped down (S-CLU-12): it takes over again only
    /// in a later term.
    pub(super) deposed_term: u64,
    /// Its voided entries in a row (S-CLU-62), kept across step-downs.
    pub(super) void_streak: VoidStreak,
}

/// What woke the broker task on the group's side.
pub(super) enum Wake {
    /// A gate passed (or failed).
    Gate,
    /// The member's role may have changed.
    Role,
    /// The metadata group applied something, or the node reached it (S-CLU-51).
    Meta,
}

impl Replica {
    pub(super) fn new(group: QueueGroup) -> Replica {
        Replica::start(group, 0, 0)
    }

    /// A follower's state after this member stopped leading (S-CLU-12): new proposer and
    /// waiter tasks (the old ones end with the old state), gate tickets going on from the last
    /// one issued, every gate issued so far counted as passed: their frames were discarded with
    /// the connections, never released. The old proposer is retired: what it still holds was
    /// decided under the lost lead and is never submitted, not even once this member leads
    /// again (a submit already under way when it is retired is Raft's to refuse: this member
    /// no longer leads that term). The term it last stepped down in and its voided entries in
    /// a row carry over.
    pub(super) fn after(&mut self) -> Replica {
        self.retired.store(true, Ordering::Release);
        let mut next = Replica::start(self.group.clone(), self.gate, self.gated_store);
        next.predecessor = self.waiter.take();
        next.deposed_term = self.deposed_term;
        next.void_streak = self.void_streak;
        next
    }

    fn start(group: QueueGroup, gate: Ticket, gated_store: Ticket) -> Replica {
        let (to_proposer, from_core) = mpsc::unbounded_channel();
        let (to_waiter, from_proposer) = mpsc::unbounded_channel();
        let (passed_tx, passed) = watch::channel(Ok(gate));
        let retired = Arc::new(AtomicBool::new(false));
        tokio::spawn(proposer(
            group.clone(),
            Arc::clone(&retired),
            from_core,
            to_waiter,
        ));
        let waiter = tokio::spawn(gate_waiter(from_proposer, passed_tx));
        Replica {
            metrics: group.metrics(),
            group,
            leading: false,
            floor_ms: 0,
            replicated: Replicated::default(),
            split: Split::default(),
            local_only: Vec::new(),
            gate,
            gated_store,
            to_proposer,
            retired,
            passed,
            waiter: Some(waiter),
            predecessor: None,
            failure: None,
            deposed_term: 0,
            void_streak: VoidStreak::default(),
        }
    }

    /// The watermark of passed gates.
    pub(super) fn passed(&self) -> Ticket {
        self.passed.borrow().as_ref().copied().unwrap_or(0)
    }

    /// Ends a batch at the gate: when it logged records of its own (up to `store_ticket`) or
    /// has an entry to propose, it gets a new gate ticket. Returns the ticket to seal the
    /// batch's frames with and the watermark to release with.
    /// The entry carries `now_ms`, the batch's `now` (S-CLU-5).
    pub(super) fn gate_batch(
        &mut self,
        store: Option<&Store>,
        store_ticket: Ticket,
        now_ms: u64,
        meta: Option<MetaDone>,
    ) -> (Ticket, Ticket) {
        let proposal = std::mem::take(&mut self.split.replicated);
        if store_ticket > self.gated_store || !proposal.is_empty() || meta.is_some() {
            self.gate += 1;
            let durable = store
                .filter(|s| store_ticket > s.durable_watermark())
                .map(|s| -> DurableFuture { Box::pin(s.durable(store_ticket)) });
            let gated = Gated {
                gate: self.gate,
                durable,
                proposal: (!proposal.is_empty()).then_some(ToPropose {
                    now_ms,
                    events: proposal,
                }),
                meta,
            };
            self.gated_store = store_ticket;
            if self.to_proposer.send(gated).is_err() {
                self.failure = Some("the proposer task stopped".to_owned());
            }
        }
        (self.gate, self.passed())
    }
}

/// Submits the gated batches' entries in order and hands each commit to the waiter; ends,
/// submitting nothing more, once `retired` (the member stepped down).
///
/// openraft 0.9 appends a leader's entries one at a time, each waiting for its fsync; so the
/// proposer submits an entry only once its last one is handed to the log (`Appended`), and
/// the batches that arrived meanwhile go into that one entry (up to about
/// [`limits::RAFT_APPEND_BYTES_MAX`] of events): under load one fsync covers many batches,
/// as the store's group commit does on one node. The entry's commit goes to the first of its
/// batches' gates; the others follow it, since gates pass in order.
async fn proposer(
    group: QueueGroup,
    retired: Arc<AtomicBool>,
    mut from_core: mpsc::UnboundedReceiver<Gated>,
    to_waiter: mpsc::UnboundedSender<Waiting>,
) {
    let mut appended: Option<Appended> = None;
    let mut next: Option<Gated> = None;
    loop {
        let first = match next.take() {
            Some(gated) => gated,
            None => match from_core.recv().await {
                Some(gated) => gated,
                None => return,
            },
        };
        if let Some(appended) = appended.take() {
            appended.wait().await;
        }
        let mut bytes = first.bytes();
        let mut batches = vec![first];
        while bytes < limits::RAFT_APPEND_BYTES_MAX {
            match from_core.try_recv() {
                Ok(gated) => {
                    bytes += gated.bytes();
                    batches.push(gated);
                }
                Err(_) => break,
            }
        }
        if bytes >= limits::RAFT_APPEND_BYTES_MAX && batches.len() > 1 {
            next = batches.pop();
        }
        if retired.load(Ordering::Acquire) {
            return;
        }
        let mut commit = match merged(&mut batches) {
            Some((now_ms, events)) => {
                let (events, watch) = Events::watched(events);
                appended = Some(watch);
                let proposal = Proposal {
                    now_ms,
                    events,
                    origin: None,
                };
                Some(match group.submit(proposal).await {
                    Ok(commit) => commit,
                    Err(e) => {
                        let failed: Commit = Box::pin(async move { Err(e) });
                        failed
                    }
                })
            }
            None => None,
        };
        for gated in batches {
            let commit = if gated.proposal.is_some() {
                commit.take()
            } else {
                None
            };
            if to_waiter
                .send((gated.gate, gated.durable, commit, gated.meta))
                .is_err()
            {
                return;
            }
        }
    }
}

/// The events of `batches`' proposals in order, at the last one's `now` (each batch's `now`
/// is at least the one's before it, and the state machine keeps the highest `now` it
/// applied: S-CLU-5); `None` when none proposes anything.
fn merged(batches: &mut [Gated]) -> Option<(u64, Vec<Event>)> {
    let mut proposals = batches.iter_mut().filter_map(|g| g.proposal.as_mut());
    let first = proposals.next()?;
    let mut now_ms = first.now_ms;
    let mut events = std::mem::take(&mut first.events);
    for p in proposals {
        now_ms = now_ms.max(p.now_ms);
        events.append(&mut p.events);
    }
    Some((now_ms, events))
}

/// Awaits each gate's store durability and commit, in order, and publishes the passed gate
/// (or the first failure). After a failure it awaits the commits still handed to it, ignoring
/// them, and ends once the proposer has ended: then nothing the member proposed is in flight.
async fn gate_waiter(
    mut from_proposer: mpsc::UnboundedReceiver<Waiting>,
    passed: watch::Sender<Result<Ticket, GateFailure>>,
) {
    while let Some((gate, durable, commit, meta)) = from_proposer.recv().await {
        let mut failed = None;
        let passed_before = || passed.borrow().as_ref().copied().unwrap_or(0);
        if let Some(durable) = durable
            && let Err(e) = durable.await
        {
            failed = Some(GateFailure {
                why: e.to_string(),
                voided: false,
                passed: passed_before(),
                meta: false,
            });
        }
        if failed.is_none() {
            // Both at once: definitions refused fail the gate even while the quorum queues'
            // entry waits for a majority that is not there (S-CLU-53).
            let commit = async {
                match commit {
                    Some(commit) => commit.await.map(drop).map_err(|e| GateFailure {
                        voided: matches!(e, ProposeError::Voided(_)),
                        why: e.to_string(),
                        passed: passed_before(),
                        meta: false,
                    }),
                    None => Ok(()),
                }
            };
            let meta = async {
                let Some(meta) = meta else {
                    return Ok(());
                };
                let answer = meta.await.unwrap_or_else(|_| Err(sequencer_stopped()));
                answer.map(drop).map_err(|e| GateFailure {
                    why: e.why,
                    voided: e.voided,
                    passed: passed_before(),
                    meta: true,
                })
            };
            failed = tokio::try_join!(commit, meta).err();
        }
        if let Some(failed) = failed {
            let _ = passed.send(Err(failed));
            while let Some((_, _, commit, _)) = from_proposer.recv().await {
                if let Some(commit) = commit {
                    let _ = commit.await;
                }
            }
            return;
        }
        passed.send_modify(|p| {
            if let Ok(t) = p {
                *t = (*t).max(gate);
            }
        });
    }
}

/// The part of `broker` a member's own checkpoint holds: all of it on a single node; without
/// the replicated queues, which the group holds, in a group (S-CLU-10).
pub(super) fn own_snapshot(broker: &Broker, replica: Option<&Replica>) -> Snapshot {
    let snapshot = broker.snapshot();
    match replica {
        Some(r) => r.replicated.local_snapshot(snapshot),
        None => snapshot,
    }
}

/// Waits for the group's side of the broker task to need it; never, without a group; at once
/// when the member must stop serving (the task then acts on the failure).
pub(super) fn wake<'a>(
    replica: Option<&'a mut Replica>,
    meta: Option<&'a mut Meta>,
) -> Pin<Box<dyn Future<Output = Wake> + Send + 'a>> {
    match replica {
        None => Box::pin(std::future::pending()),
        Some(r) if r.failure.is_some() => Box::pin(std::future::ready(Wake::Gate)),
        Some(r) => Box::pin(async move {
            tokio::select! {
                () = meta_changed(meta) => Wake::Meta,
                changed = r.passed.changed() => {
                    if changed.is_err() && r.failure.is_none() {
                        r.failure = Some("the gate's waiter stopped".to_owned());
                    }
                    Wake::Gate
                }
                changed = r.metrics.changed() => {
                    if changed.is_err() && r.failure.is_none() {
                        r.failure = Some("the group's Raft stopped".to_owned());
                    }
                    Wake::Role
                }
                () = predecessor_ended(r.predecessor.as_mut()) => {
                    r.predecessor = None;
                    Wake::Role
                }
            }
        }),
    }
}

/// Ends when the metadata group may have moved; never without one.
async fn meta_changed(meta: Option<&mut Meta>) {
    match meta {
        Some(m) => m.changed().await,
        None => std::future::pending().await,
    }
}

/// Ends when the replaced state's waiter has ended; never without one.
async fn predecessor_ended(waiter: Option<&mut JoinHandle<()>>) {
    match waiter {
        Some(w) => {
            let _ = w.await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gated(gate: Ticket, proposal: Option<(u64, &[&str])>) -> Gated {
        Gated {
            gate,
            durable: None,
            proposal: proposal.map(|(now_ms, vhosts)| ToPropose {
                now_ms,
                events: vhosts
                    .iter()
                    .map(|v| Event::VhostAdded {
                        vhost: (*v).to_owned(),
                    })
                    .collect(),
            }),
            meta: None,
        }
    }

    /// Batches merged into one entry keep their events' order, and the entry carries the
    /// latest `now` (S-CLU-5); batches proposing nothing add nothing.
    #[test]
    fn merged_batches_keep_their_order_at_the_latest_now() {
        let mut batches = vec![
            gated(1, None),
            gated(2, Some((100, &["a", "b"]))),
            gated(3, None),
            gated(4, Some((105, &["c"]))),
        ];
        let (now_ms, events) = merged(&mut batches).unwrap();
        assert_eq!(now_ms, 105);
        let names: Vec<_> = events
            .iter()
            .map(|e| match e {
                Event::VhostAdded { vhost } => vhost.as_str(),
                _ => "?",
            })
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(merged(&mut [gated(5, None)]).is_none());
    }
}
