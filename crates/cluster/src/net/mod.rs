//! The cluster link between nodes (docs/CLUSTER-WIRE.md): openraft's RPCs over TCP, in
//! length-prefixed frames with a hand-written encoding, every group of a node multiplexed on
//! one connection per peer.
//!
//! - `wire`: the messages, byte for byte (a public namespace, for tests and tools).
//! - `frames`: reading and writing frames on a socket, bounded before parsing.
//! - `client`: [`Peers`], the calling side (connect, reconnect, calls by id).
//! - `serve`: [`serve`], the listener, and [`Groups`], where requests go.
//! - `relay`: relayed streams to another node's server ([`LinkRelay`], S-CLU-70).
//!
//! [`TcpNetwork`] is openraft's network factory for one group on top of [`Peers`].

mod client;
mod frames;
mod relay;
mod serve;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use client::{CONNECT_TIMEOUT, CallError, Peers};
pub use frames::read_frame;
pub use relay::{CHUNK_BYTES, IDLE_MAX, LinkRelay, PULL_WAIT, Sessions, relay_pull, relay_push};
pub use serve::{Admin, Groups, IN_FLIGHT_MAX, has_state, serve};

use crate::forward::{Forward, ForwardError};
use crate::types::{LogId, NodeId, Proposal, TypeConfig};
use wire::{Failure, Kind};

/// [`Forward`] over the cluster link: a proposal goes to the leader's cluster address, as the
/// group's membership on this node names it (S-CLU-50).
pub struct LinkForward {
    raft: crate::types::Raft,
    peers: Arc<Peers>,
}

impl LinkForward {
    /// Forwarding for `raft`'s group through `peers`.
    pub fn new(raft: crate::types::Raft, peers: Arc<Peers>) -> LinkForward {
        LinkForward { raft, peers }
    }
}

impl Forward for LinkForward {
    async fn forward(
        &self,
        leader: NodeId,
        group: u64,
        proposal: &Proposal,
    ) -> Result<LogId, ForwardError> {
        let Some(addr) = member_addr(&self.raft, leader) else {
            return Err(ForwardError::NotLeader(None));
        };
        let body = wire::propose(proposal).map_err(|e| ForwardError::Refused(e.to_string()))?;
        let call = self
            .peers
            .call(&addr, Kind::Propose, group, wire::ANY_MEMBER, &body);
        match call.await {
            Ok(reply) => wire::decode_propose_response(&reply)
                .map_err(|e| ForwardError::Unreachable(format!("leader {leader}: {e}"))),
            Err(CallError::Failed {
                failure: Failure::NotLeader(l),
                ..
            }) => Err(ForwardError::NotLeader(l)),
            // The leader's group not open (yet) or stopped: another leader may come.
            Err(CallError::Failed {
                failure: Failure::NoGroup | Failure::Stopped,
                ..
            }) => Err(ForwardError::NotLeader(None)),
            Err(CallError::Failed {
                failure: Failure::Refused(why),
                ..
            }) => Err(ForwardError::Refused(why)),
            Err(CallError::Failed { failure, .. }) => Err(ForwardError::Refused(format!(
                "leader {leader}: {failure:?}"
            ))),
            Err(e @ CallError::Unreachable { .. }) => Err(ForwardError::Unreachable(e.to_string())),
        }
    }
}

/// Member `member`'s cluster address, as the membership of `raft`'s group names it.
fn member_addr(raft: &crate::types::Raft, member: NodeId) -> Option<String> {
    let m = raft.metrics();
    let m = m.borrow();
    m.membership_config
        .membership()
        .get_node(&member)
        .map(|n| n.addr.clone())
}

/// Sends a leader's entries early ([`crate::WalLogStore::sending_early`]) over the cluster
/// link: to every other member of the group as `raft`'s membership names them, once `raft` is
/// set. A reply is not awaited by anyone: openraft's own append, sent once the leader's copy
/// is durable, is what counts (S-CLU-90). The early copies waiting for one member's answer
/// hold at most [`EARLY_BYTES_IN_FLIGHT`] of entries; past that, and for an append larger than
/// that, entries go by openraft's append alone. A member that falls behind (building a
/// snapshot, paused, cut off) is not sent a backlog of copies openraft's replication carries
/// anyway; and under a load that fills large entries (the proposer merges the batches that
/// arrive while the last entry is written), the pipeline is full without them and a second
/// copy of every byte would cost more than the wait it saves (16 publishers: 112-121k msg/s
/// with every entry sent early, against 120-125k without).
pub fn early_append(
    me: NodeId,
    group: u64,
    peers: Arc<Peers>,
    raft: Arc<OnceLock<crate::types::Raft>>,
) -> crate::EarlySend {
    let budget = EarlyBudget::default();
    Arc::new(move |rpc| {
        let Some(raft) = raft.get() else {
            return;
        };
        let bytes: usize = rpc.entries.iter().map(crate::log_store::entry_bytes).sum();
        let targets: Vec<_> = {
            let m = raft.metrics();
            let m = m.borrow();
            // Only to a member that answered one of this leader's own appends: before that its
            // log may lack what the entries follow (the group's membership, at a start), so an
            // early copy would be refused, and it would learn of the leader from it before it
            // knows the members' addresses (a client of it then could not be forwarded).
            let matched = |id: &NodeId| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(id))
                    .is_some_and(Option::is_some)
            };
            m.membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != me && matched(id))
                .filter_map(|(id, node)| Some((*id, node.addr.clone(), budget.take(*id, bytes)?)))
                .collect()
        };
        if targets.is_empty() {
            return;
        }
        let peers = Arc::clone(&peers);
        tokio::spawn(async move {
            let Ok((body, _)) = wire::append_entries(&rpc) else {
                return;
            };
            let body: Arc<[u8]> = body.into();
            for (target, addr, permit) in targets {
                let peers = Arc::clone(&peers);
                let body = Arc::clone(&body);
                tokio::spawn(async move {
                    let call = peers.call(&addr, Kind::AppendEntries, group, target, &body);
                    let _ = tokio::time::timeout(EARLY_WAIT, call).await;
                    drop(permit);
                });
            }
        });
    })
}

/// What each member may still be sent early: [`EARLY_BYTES_IN_FLIGHT`] of entries, by KiB.
#[derive(Default)]
struct EarlyBudget {
    members: Mutex<BTreeMap<NodeId, Arc<Semaphore>>>,
}

impl EarlyBudget {
    /// Room for `bytes` of entries early to `member`, held until the permit drops; none when
    /// its budget has not that much left, or is smaller.
    fn take(&self, member: NodeId, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(1024).max(1)).ok()?;
        if kib as usize > EARLY_KIB_IN_FLIGHT {
            return None;
        }
        let slot = Arc::clone(
            crate::lock(&self.members)
                .entry(member)
                .or_insert_with(|| Arc::new(Semaphore::new(EARLY_KIB_IN_FLIGHT))),
        );
        slot.try_acquire_many_owned(kib).ok()
    }
}

/// The most bytes of entries sent early that may wait for one member's answer at once.
pub const EARLY_BYTES_IN_FLIGHT: usize = 256 * 1024;

/// [`EARLY_BYTES_IN_FLIGHT`] in KiB, the permits of a member's budget.
const EARLY_KIB_IN_FLIGHT: usize = EARLY_BYTES_IN_FLIGHT / 1024;

/// How long an early append's call is kept before it is dropped unanswered.
const EARLY_WAIT: Duration = Duration::from_secs(2);

/// How long openraft waits before it calls an unreachable peer again.
pub const RETRY_AFTER: Duration = Duration::from_millis(100);

/// openraft's network factory for one group: connections to the group's members through the
/// node's shared [`Peers`].
#[derive(Clone)]
pub struct TcpNetwork {
    me: NodeId,
    group: u64,
    peers: Arc<Peers>,
}

impl TcpNetwork {
    /// The network of group `group` on node `me`.
    pub fn new(me: NodeId, group: u64, peers: Arc<Peers>) -> TcpNetwork {
        TcpNetwork { me, group, peers }
    }
}

/// openraft's client of one member of one group.
pub struct GroupClient {
    me: NodeId,
    target: NodeId,
    group: u64,
    addr: String,
    peers: Arc<Peers>,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = GroupClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> GroupClient {
        GroupClient {
            me: self.me,
            target,
            group: self.group,
            addr: node.addr.clone(),
            peers: Arc::clone(&self.peers),
        }
    }
}

type Rpc<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;
/// The error of an append or a vote.
type PlainError = RPCError<NodeId, BasicNode, RaftError<NodeId>>;
/// The error of a snapshot chunk.
type InstallError = RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>;

/// Why a call failed, before openraft's error types (which depend on the RPC).
enum Fail {
    Timeout(Duration),
    Unreachable(String),
    Remote(Failure),
}

impl GroupClient {
    async fn call(&self, kind: Kind, body: &[u8], option: &RPCOption) -> Result<Vec<u8>, Fail> {
        let ttl = option.hard_ttl();
        match tokio::time::timeout(
            ttl,
            self.peers
                .call(&self.addr, kind, self.group, self.target, body),
        )
        .await
        {
            Err(_) => Err(Fail::Timeout(ttl)),
            Ok(Ok(body)) => Ok(body),
            Ok(Err(CallError::Failed { failure, .. })) => Err(Fail::Remote(failure)),
            Ok(Err(e @ CallError::Unreachable { .. })) => Err(Fail::Unreachable(e.to_string())),
        }
    }

    /// openraft's error for a failed call of `action` (a remote failure other than the
    /// snapshot mismatch means the member cannot serve now: unreachable, retried later).
    fn error<E: std::error::Error>(
        &self,
        action: RPCTypes,
        fail: Fail,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        match fail {
            Fail::Timeout(timeout) => RPCError::Timeout(Timeout {
                action,
                id: self.me,
                target: self.target,
                timeout,
            }),
            Fail::Unreachable(reason) => {
                RPCError::Unreachable(Unreachable::new(&std::io::Error::other(reason)))
            }
            Fail::Remote(failure) => RPCError::Unreachable(Unreachable::new(
                &std::io::Error::other(format!("member {}: {failure:?}", self.target)),
            )),
        }
    }

    /// A reply that does not decode: the peer is not a wharf node of this version, or a bug;
    /// retried after the backoff like an unreachable member.
    fn undecodable<E: std::error::Error>(
        e: &crate::record::RecordDecodeError,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        RPCError::Unreachable(Unreachable::new(e))
    }
}

impl RaftNetwork<TypeConfig> for GroupClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let (body, sent) = wire::append_entries(&rpc)
            .map_err(|e| PlainError::Unreachable(Unreachable::new(&e)))?;
        let reply = self
            .call(Kind::AppendEntries, &body, &option)
            .await
            .map_err(|f| -> PlainError { self.error(RPCTypes::AppendEntries, f) })?;
        let resp = wire::decode_append_entries_response(&reply)
            .map_err(|e| -> PlainError { Self::undecodable(&e) })?;
        // The frame held only the first `sent` entries: a success covers those alone.
        if sent < rpc.entries.len() && resp == AppendEntriesResponse::Success {
            let last = sent
                .checked_sub(1)
                .and_then(|i| rpc.entries.get(i))
                .map(|e| e.log_id)
                .or(rpc.prev_log_id);
            return Ok(AppendEntriesResponse::PartialSuccess(last));
        }
        Ok(resp)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let body = wire::install_snapshot(&rpc)
            .map_err(|e| InstallError::Unreachable(Unreachable::new(&e)))?;
        match self.call(Kind::InstallSnapshot, &body, &option).await {
            Ok(reply) => {
                wire::decode_install_snapshot_response(&reply).map_err(|e| Self::undecodable(&e))
            }
            Err(Fail::Remote(Failure::SnapshotMismatch(m))) => {
                Err(RPCError::RemoteError(RemoteError::new(
                    self.target,
                    RaftError::APIError(InstallSnapshotError::SnapshotMismatch(m)),
                )))
            }
            Err(f) => Err(self.error(RPCTypes::InstallSnapshot, f)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        let reply = self
            .call(Kind::Vote, &wire::vote(&rpc), &option)
            .await
            .map_err(|f| -> PlainError { self.error(RPCTypes::Vote, f) })?;
        wire::decode_vote_response(&reply).map_err(|e| Self::undecodable(&e))
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(RETRY_AFTER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S-CLU-90: each member's early copies in flight stay within the byte budget, an append
    /// larger than the budget never goes early, and a member's answer frees its room.
    #[test]
    fn early_copies_in_flight_stay_within_each_members_budget() {
        let budget = EarlyBudget::default();
        let kib = |n: usize| n * 1024;
        let first = budget.take(1, kib(100)).expect("room");
        let second = budget.take(1, kib(100)).expect("room");
        assert!(budget.take(1, kib(100)).is_none(), "300 KiB over 256");
        assert!(budget.take(1, kib(56)).is_some(), "exactly the rest");
        assert!(
            budget.take(2, kib(100)).is_some(),
            "another member's own budget"
        );
        drop(first);
        assert!(budget.take(1, kib(100)).is_some(), "freed by an answer");
        drop(second);
        assert!(
            budget.take(3, EARLY_BYTES_IN_FLIGHT + 1).is_none(),
            "larger than the budget"
        );
        assert!(budget.take(3, EARLY_BYTES_IN_FLIGHT).is_some());
    }
}
