//! A member proposes through the group's leader (S-CLU-50; docs/CLUSTER-WIRE.md, `Propose`):
//! a [`Proposer`] numbers its proposals in a session of its own, hands each to the leader its
//! metrics name (itself, or another member through a [`Forward`]), and on an answer that the
//! proposal was not taken or may not have been (not the leader any more, no leader yet, the
//! leader unreachable, the link cut while waiting) tries again, with the same number, against
//! the leader it learns next, until the entry commits or its time is up.
//!
//! **Applied once.** A retry may commit a second copy of an entry whose first copy committed
//! too (the answer was lost). Each copy carries its origin (`session`, `seq`); the group's
//! state machine applies an entry only when its `seq` is above the highest it applied of that
//! session (`state_machine.rs`), and carries that table in its snapshots. This is sound
//! because a proposer has one proposal under way at a time: `seq` `n + 1` is proposed only once
//! `n` committed, so no copy of `n` can first commit after `n + 1`.

use std::future::Future;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::Mutex;

use crate::types::{LogId, NodeId, Origin, Proposal, Raft};

/// How long a proposer waits for a leader to show up before asking again.
pub const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Why the leader (or the member asked) did not commit a proposal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// The member asked does not lead; the leader it knows, if any.
    #[error("not the group's leader (the leader is {0:?})")]
    NotLeader(Option<NodeId>),
    /// The member asked could not be reached, or the link broke before its answer: the
    /// proposal may or may not have been taken.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The member asked refused the proposal for good (its group stopped, a bad request).
    #[error("refused: {0}")]
    Refused(String),
}

impl ForwardError {
    /// Whether another attempt, against the leader known next, may commit the proposal.
    pub fn retryable(&self) -> bool {
        !matches!(self, ForwardError::Refused(_))
    }
}

/// The way a member reaches another member's leader side: over the cluster link in a node
/// (`net`), directly on the in-memory network in tests (`testing`).
pub trait Forward: Send + Sync {
    /// Hands `proposal` for `group` to member `leader`, which answers with the log id its
    /// entry committed at ([`lead`]).
    fn forward(
        &self,
        leader: NodeId,
        group: u64,
        proposal: &Proposal,
    ) -> impl Future<Output = Result<LogId, ForwardError>> + Send;
}

/// The leader's side of a forwarded proposal: writes it to `raft` and waits until it commits
/// (and is applied here).
///
/// # Errors
/// [`ForwardError::NotLeader`] when this member does not lead (or stopped leading before the
/// entry committed), [`ForwardError::Refused`] when its Raft stopped.
pub async fn lead(raft: &Raft, proposal: Proposal) -> Result<LogId, ForwardError> {
    match raft.client_write(proposal).await {
        Ok(written) => Ok(written.log_id),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            Err(ForwardError::NotLeader(f.leader_id))
        }
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Err(ForwardError::Refused(e.to_string()))
        }
        Err(RaftError::Fatal(e)) => Err(ForwardError::Refused(format!("the group stopped: {e}"))),
    }
}

/// A member's proposer for one group: its session and the next number in it. One proposal
/// is under way at a time (the others wait their turn).
pub struct Proposer {
    me: NodeId,
    group: u64,
    raft: Raft,
    session: u64,
    next_seq: Mutex<u64>,
}

/// A proposal that did not commit within its time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group {group} did not commit the proposal: {why}")]
pub struct NotCommitted {
    /// The group.
    pub group: u64,
    /// The last answer.
    pub why: ForwardError,
}

impl Proposer {
    /// Member `me`'s proposer for `raft`'s group `group`, in `session`: a number no other
    /// proposer of the group uses, and never used before by this one (a node picks it at its
    /// start, [`session_id`]).
    pub fn new(me: NodeId, group: u64, raft: Raft, session: u64) -> Proposer {
        Proposer {
            me,
            group,
            raft,
            session,
            next_seq: Mutex::new(1),
        }
    }

    /// This proposer's session.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Proposes `events` decided at `now_ms` through the group's leader, and waits until the
    /// entry commits: its log id. Tries again against each new leader for at most `wait`.
    ///
    /// # Errors
    /// [`NotCommitted`]: refused for good, or not committed within `wait` (the entry may still
    /// commit later; it then applies once).
    pub async fn propose(
        &self,
        forward: &impl Forward,
        now_ms: u64,
        events: Vec<wharf_broker::Event>,
        wait: Duration,
    ) -> Result<LogId, NotCommitted> {
        let mut next = self.next_seq.lock().await;
        let proposal = Proposal {
            now_ms,
            events: events.into(),
            origin: Some(Origin {
                session: self.session,
                seq: *next,
            }),
        };
        // The number is used up whatever happens: a copy may commit after a timeout.
        *next += 1;
        let mut metrics = self.raft.metrics();
        let mut last = ForwardError::NotLeader(None);
        let attempts = async {
            loop {
                let leader = metrics.borrow_and_update().current_leader;
                let answer = match leader {
                    Some(l) if l == self.me => lead(&self.raft, proposal.clone()).await,
                    Some(l) => forward.forward(l, self.group, &proposal).await,
                    None => Err(ForwardError::NotLeader(None)),
                };
                match answer {
                    Ok(log_id) => return Ok(log_id),
                    Err(why) if !why.retryable() => return Err(why),
                    Err(why) => {
                        tracing::debug!(group = self.group, error = %why, "proposal not taken: trying again");
                        last = why;
                    }
                }
                // A new leader shows in the metrics; an unreachable one is asked again
                // shortly.
                let _ = tokio::time::timeout(RETRY_EVERY, metrics.changed()).await;
            }
        };
        let answer = tokio::time::timeout(wait, attempts).await;
        let group = self.group;
        match answer {
            Ok(Ok(log_id)) => Ok(log_id),
            Ok(Err(why)) => Err(NotCommitted { group, why }),
            Err(_) => Err(NotCommitted { group, why: last }),
        }
    }
}

/// A session number for a proposer starting now: 64 bits from the operating system's
/// randomness (std's `RandomState` is seeded from it) mixed with the member id, so two
/// proposers (two members, or two starts of one) share one with a chance of 2^-64.
pub fn session_id(me: NodeId) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(me);
    h.finish()
}
