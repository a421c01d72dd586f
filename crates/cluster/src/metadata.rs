//! [`MetadataGroup`]: what a server is handed to keep the cluster-wide definitions through
//! the metadata group (group 0; DESIGN "Definitions through the metadata group", S-CLU-51..54).
//! It proposes a batch's definitions from any member through the group's leader (S-CLU-50's
//! [`Proposer`]) and answers once the entry committed **and** applied on this member, so the
//! member's committed state already holds what it just proposed (its convergence,
//! [`crate::reconcile`], never sees its own definition missing); it says whether the entry was
//! voided (its events did not fit the committed state, S-CLU-60).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use wharf_broker::Event;

use crate::forward::{Forward, Proposer};
use crate::state_machine::QueueStateMachine;
use crate::types::{NodeId, Raft};

/// How long a proposal of definitions may take to commit and apply here before the member
/// gives up on it (S-CLU-53).
pub const METADATA_COMMIT_WAIT: Duration = Duration::from_secs(10);

/// Why definitions proposed to the metadata group are not the group's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct MetadataError {
    /// What happened, for the client and the log.
    pub why: String,
    /// The entry committed as nothing: its events did not fit the committed definitions (a
    /// concurrent change on another node, S-CLU-53).
    pub voided: bool,
}

/// A proposal's answer to come: the index its entry committed and applied at here.
pub type Proposed = Pin<Box<dyn Future<Output = Result<u64, MetadataError>> + Send + 'static>>;

type ProposeFn = dyn Fn(u64, Vec<Event>) -> Proposed + Send + Sync;

/// One member's handle on the metadata group.
#[derive(Clone)]
pub struct MetadataGroup {
    /// This member's id.
    pub node: NodeId,
    /// The group's Raft on this member.
    pub raft: Raft,
    /// The group's committed state on this member: the cluster's definitions.
    pub machine: QueueStateMachine,
    propose: Arc<ProposeFn>,
}

impl std::fmt::Debug for MetadataGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataGroup")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl MetadataGroup {
    /// Member `node`'s handle on the metadata group run by `raft` and `machine`, proposing
    /// through `proposer` and reaching other members' leaders through `forward` (the cluster
    /// link in a node, the in-memory network in tests).
    pub fn new<F: Forward + 'static>(
        node: NodeId,
        raft: Raft,
        machine: QueueStateMachine,
        proposer: Arc<Proposer>,
        forward: F,
    ) -> MetadataGroup {
        let forward = Arc::new(forward);
        let (r, m) = (raft.clone(), machine.clone());
        let propose = move |now_ms: u64, events: Vec<Event>| -> Proposed {
            let (proposer, forward, raft, machine) = (
                Arc::clone(&proposer),
                Arc::clone(&forward),
                r.clone(),
                m.clone(),
            );
            Box::pin(async move {
                let not_taken = |why: String| MetadataError { why, voided: false };
                let log_id = proposer
                    .propose(&*forward, now_ms, events, METADATA_COMMIT_WAIT)
                    .await
                    .map_err(|e| not_taken(e.to_string()))?;
                let index = log_id.index;
                let mut metrics = raft.metrics();
                let applied =
                    metrics.wait_for(|m| m.last_applied.is_some_and(|l| l.index >= index));
                match tokio::time::timeout(METADATA_COMMIT_WAIT, applied).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(_)) => return Err(not_taken("the metadata group stopped".to_owned())),
                    Err(_) => {
                        return Err(not_taken(format!(
                            "entry {index} of the metadata group committed but was not applied \
                             on this node in time"
                        )));
                    }
                }
                if machine.with(|m| m.was_voided(index)) {
                    return Err(MetadataError {
                        why: format!(
                            "entry {index} of the metadata group was voided: its definitions \
                             conflict with the cluster's (changed meanwhile on another node)"
                        ),
                        voided: true,
                    });
                }
                Ok(index)
            })
        };
        MetadataGroup {
            node,
            raft,
            machine,
            propose: Arc::new(propose),
        }
    }

    /// Proposes `events` decided at `now_ms`; the answer comes once the entry committed and
    /// applied here, or once it is known it will not be the group's (a timeout after
    /// [`METADATA_COMMIT_WAIT`]: it may still commit later, and then applies once).
    pub fn propose(&self, now_ms: u64, events: Vec<Event>) -> Proposed {
        (self.propose)(now_ms, events)
    }

    /// Watches this member's metrics of the group (its applied index moves).
    pub fn metrics(
        &self,
    ) -> tokio::sync::watch::Receiver<openraft::RaftMetrics<NodeId, openraft::BasicNode>> {
        self.raft.metrics()
    }

    /// The index applied here (0 before any).
    pub fn applied(&self) -> u64 {
        self.machine
            .with(|m| m.last_applied().map_or(0, |l| l.index))
    }
}
