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

use std::sync::{Arc, OnceLock};
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
/// is durable, is what counts (S-CLU-90).
pub fn early_append(
    me: NodeId,
    group: u64,
    peers: Arc<Peers>,
    raft: Arc<OnceLock<crate::types::Raft>>,
) -> crate::EarlySend {
    Arc::new(move |rpc| {
        let Some(raft) = raft.get() else {
            return;
        };
        let targets: Vec<(NodeId, String)> = {
            let m = raft.metrics();
            let m = m.borrow();
            m.membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != me)
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect()
        };
        let peers = Arc::clone(&peers);
        tokio::spawn(async move {
            let Ok((body, _)) = wire::append_entries(&rpc) else {
                return;
            };
            let body: Arc<[u8]> = body.into();
            for (target, addr) in targets {
                let peers = Arc::clone(&peers);
                let body = Arc::clone(&body);
                tokio::spawn(async move {
                    let call = peers.call(&addr, Kind::AppendEntries, group, target, &body);
                    let _ = tokio::time::timeout(EARLY_WAIT, call).await;
                });
            }
        });
    })
}

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
