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

use bytes::Bytes;
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

pub use client::{CONNECT_TIMEOUT, CallError, Peers, Sent};
pub use frames::{FrameReader, read_frame};
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
            .call(&addr, Kind::Propose, group, wire::ANY_MEMBER, body);
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
///
/// A member is sent only copies that follow what its connection was last given, early or by
/// openraft's own append ([`EarlyLanes`]): a copy that does not start right after the
/// member's log would be refused, and would cost the member's Raft a turn for nothing. The
/// copies go in the order the leader appended them: one task sends a member's copies one
/// after the other on its connection, and its server hands them to the member's Raft in the
/// order they came (`serve`). Each member's copies waiting for its answer hold at most
/// [`EARLY_BYTES_IN_FLIGHT`] of entries; past that, and for an append larger than that,
/// entries go by openraft's append alone, and so do the next ones until openraft's append
/// carried the entry they follow: a member that falls behind (building a snapshot, paused,
/// cut off) is not sent a backlog of copies openraft's replication carries anyway.
pub fn early_append(
    me: NodeId,
    group: u64,
    peers: Arc<Peers>,
    raft: Arc<OnceLock<crate::types::Raft>>,
    lanes: Arc<EarlyLanes>,
) -> crate::EarlySend {
    let (to_sender, copies) = mpsc::unbounded_channel();
    tokio::spawn(send_early(group, peers, copies));
    Arc::new(move |rpc| {
        let Some(raft) = raft.get() else {
            return;
        };
        let Some(last) = rpc.entries.last().map(|e| e.log_id) else {
            return;
        };
        let copy = Copy {
            prev: rpc.prev_log_id,
            last,
            bytes: rpc.entries.iter().map(crate::log_store::entry_bytes).sum(),
        };
        let targets: Vec<_> = {
            let m = raft.metrics();
            let m = m.borrow();
            // Only to a member that answered one of this leader's own appends: before that its
            // log may lack what the entries follow (the group's membership, at a start), so an
            // early copy would be refused, and it would learn of the leader from it before it
            // knows the members' addresses (a client of it then could not be forwarded).
            let matched = |id: &NodeId| m.replication.as_ref().and_then(|r| r.get(id)).copied();
            m.membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != me)
                .filter_map(|(id, node)| {
                    let permit = lanes.take(*id, matched(id).flatten()?, copy)?;
                    Some((*id, node.addr.clone(), permit))
                })
                .collect()
        };
        if !targets.is_empty() {
            let _ = to_sender.send((rpc, targets));
        }
    })
}

/// An early copy for some members: the request and, for each member, where it goes and the
/// room it holds in the member's budget.
type EarlyCopy = (
    AppendEntriesRequest<TypeConfig>,
    Vec<(NodeId, String, OwnedSemaphorePermit)>,
);

/// An early copy as one member's sender takes it: the encoded request, and its room in the
/// member's budget.
type MemberCopy = (Bytes, OwnedSemaphorePermit);

/// Encodes each early copy once and hands it to each of its members' senders, in order.
async fn send_early(group: u64, peers: Arc<Peers>, mut copies: mpsc::UnboundedReceiver<EarlyCopy>) {
    let mut senders: BTreeMap<NodeId, mpsc::UnboundedSender<MemberCopy>> = BTreeMap::new();
    while let Some((rpc, targets)) = copies.recv().await {
        let Ok((body, _)) = wire::append_entries(&rpc) else {
            continue;
        };
        let body = Bytes::from(body);
        for (target, addr, permit) in targets {
            let sender = senders.entry(target).or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(send_to_member(group, target, addr, Arc::clone(&peers), rx));
                tx
            });
            let _ = sender.send((body.clone(), permit));
        }
    }
}

/// Sends one member its early copies one after the other, each queued on the connection
/// before the next, so they reach it in the order the leader appended them (a copy that
/// overtook the one before it would be refused). Each copy's room in the member's budget is
/// freed once it is answered, or after [`EARLY_WAIT`].
async fn send_to_member(
    group: u64,
    target: NodeId,
    addr: String,
    peers: Arc<Peers>,
    mut copies: mpsc::UnboundedReceiver<MemberCopy>,
) {
    while let Some((body, permit)) = copies.recv().await {
        if let Ok(sent) = peers
            .send(&addr, Kind::AppendEntries, group, target, body)
            .await
        {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(EARLY_WAIT, sent.reply()).await;
                drop(permit);
            });
        }
    }
}

/// An early copy's entries, as a member's lane sees them.
#[derive(Clone, Copy)]
struct Copy {
    /// The entry they follow.
    prev: Option<LogId>,
    /// Their last.
    last: LogId,
    /// Their size.
    bytes: usize,
}

/// A group's early copies to each member (S-CLU-90): the room left in the member's budget
/// ([`EARLY_BYTES_IN_FLIGHT`] of entries waiting for its answer, by KiB), and the last entry
/// queued on its connection, by an early copy or openraft's own append, while the copies
/// followed it. Shared by the group's [`early_append`] and its [`TcpNetwork`].
#[derive(Default)]
pub struct EarlyLanes {
    members: Mutex<BTreeMap<NodeId, Lane>>,
}

struct Lane {
    room: Arc<Semaphore>,
    last: Option<LogId>,
}

impl EarlyLanes {
    fn lane(members: &mut BTreeMap<NodeId, Lane>, member: NodeId) -> &mut Lane {
        members.entry(member).or_insert_with(|| Lane {
            room: Arc::new(Semaphore::new(EARLY_KIB_IN_FLIGHT)),
            last: None,
        })
    }

    /// Room for `copy` early to `member`, whose log matches the leader's through `matched`,
    /// held until the permit drops. None when the copy would not follow the member's log (it
    /// starts neither right after the last entry queued for it nor within what it matched),
    /// or its budget has not that much room left, or is smaller. A copy not sent breaks the
    /// chain: the next ones wait for openraft's append to carry what they follow.
    fn take(&self, member: NodeId, matched: LogId, copy: Copy) -> Option<OwnedSemaphorePermit> {
        let mut members = crate::lock(&self.members);
        let lane = Self::lane(&mut members, member);
        let follows = (copy.prev.is_some() && lane.last == copy.prev) || Some(matched) >= copy.prev;
        let permit = u32::try_from(copy.bytes.div_ceil(1024).max(1))
            .ok()
            .filter(|kib| follows && *kib as usize <= EARLY_KIB_IN_FLIGHT)
            .and_then(|kib| Arc::clone(&lane.room).try_acquire_many_owned(kib).ok());
        lane.last = permit.as_ref().map(|_| copy.last);
        permit
    }

    /// openraft's append queued entries through `last` on `member`'s connection: early copies
    /// may follow it (unless those sent are further on already).
    fn queued(&self, member: NodeId, last: LogId) {
        let mut members = crate::lock(&self.members);
        let lane = Self::lane(&mut members, member);
        lane.last = lane.last.max(Some(last));
    }
}

/// The most bytes of entries sent early that may wait for one member's answer at once.
pub const EARLY_BYTES_IN_FLIGHT: usize = 4 * 1024 * 1024;

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
    early: Arc<EarlyLanes>,
}

impl TcpNetwork {
    /// The network of group `group` on node `me`, telling `early` what its appends queue.
    pub fn new(me: NodeId, group: u64, peers: Arc<Peers>, early: Arc<EarlyLanes>) -> TcpNetwork {
        TcpNetwork {
            me,
            group,
            peers,
            early,
        }
    }
}

/// openraft's client of one member of one group.
pub struct GroupClient {
    me: NodeId,
    target: NodeId,
    group: u64,
    addr: String,
    peers: Arc<Peers>,
    early: Arc<EarlyLanes>,
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
            early: Arc::clone(&self.early),
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
    async fn call(&self, kind: Kind, body: Vec<u8>, option: &RPCOption) -> Result<Vec<u8>, Fail> {
        self.call_noting(kind, body, option, || {}).await
    }

    /// [`GroupClient::call`], running `queued` once the request is queued on the connection.
    async fn call_noting(
        &self,
        kind: Kind,
        body: Vec<u8>,
        option: &RPCOption,
        queued: impl FnOnce(),
    ) -> Result<Vec<u8>, Fail> {
        let ttl = option.hard_ttl();
        let call = async {
            let sent = self
                .peers
                .send(&self.addr, kind, self.group, self.target, body)
                .await?;
            queued();
            sent.reply().await
        };
        match tokio::time::timeout(ttl, call).await {
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
        let last = sent
            .checked_sub(1)
            .and_then(|i| rpc.entries.get(i))
            .map(|e| e.log_id);
        let queued = || {
            if let Some(last) = last {
                self.early.queued(self.target, last);
            }
        };
        let reply = self
            .call_noting(Kind::AppendEntries, body, &option, queued)
            .await
            .map_err(|f| -> PlainError { self.error(RPCTypes::AppendEntries, f) })?;
        let resp = wire::decode_append_entries_response(&reply)
            .map_err(|e| -> PlainError { Self::undecodable(&e) })?;
        // The frame held only the first `sent` entries: a success covers those alone.
        if sent < rpc.entries.len() && resp == AppendEntriesResponse::Success {
            return Ok(AppendEntriesResponse::PartialSuccess(
                last.or(rpc.prev_log_id),
            ));
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
        match self.call(Kind::InstallSnapshot, body, &option).await {
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
            .call(Kind::Vote, wire::vote(&rpc), &option)
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

    fn id(index: u64) -> LogId {
        LogId::new(openraft::CommittedLeaderId::new(3, 1), index)
    }

    /// A copy of the entries `from..=to`, `parts` 256ths of a member's budget.
    fn copy(from: u64, to: u64, parts: usize) -> Copy {
        Copy {
            prev: from.checked_sub(1).map(id),
            last: id(to),
            bytes: parts * EARLY_BYTES_IN_FLIGHT / 256,
        }
    }

    /// S-CLU-90: each member's early copies in flight stay within the byte budget, an append
    /// larger than the budget never goes early, and a member's answer frees its room.
    #[test]
    fn early_copies_in_flight_stay_within_each_members_budget() {
        let lanes = EarlyLanes::default();
        let matched = id(0);
        let first = lanes.take(1, matched, copy(1, 1, 100)).expect("room");
        let second = lanes.take(1, matched, copy(2, 2, 100)).expect("room");
        assert!(
            lanes.take(1, matched, copy(3, 3, 100)).is_none(),
            "300 parts over 256"
        );
        assert!(
            lanes.take(2, matched, copy(1, 1, 100)).is_some(),
            "another member's own budget"
        );
        drop(first);
        // Entry 3 was not sent: 4 goes once member 1 has matched 3 from openraft's append.
        assert!(
            lanes.take(1, id(3), copy(4, 4, 100)).is_some(),
            "freed by an answer"
        );
        assert!(
            lanes.take(1, id(3), copy(5, 5, 56)).is_some(),
            "exactly the rest"
        );
        drop(second);
        assert!(
            lanes
                .take(
                    3,
                    matched,
                    Copy {
                        bytes: EARLY_BYTES_IN_FLIGHT + 1,
                        ..copy(1, 1, 0)
                    }
                )
                .is_none(),
            "larger than the budget"
        );
        assert!(
            lanes
                .take(
                    3,
                    matched,
                    Copy {
                        bytes: EARLY_BYTES_IN_FLIGHT,
                        ..copy(1, 1, 0)
                    }
                )
                .is_some()
        );
    }

    /// S-CLU-90: a member is sent only copies that follow its log: right after the last entry
    /// queued for it (an early copy's or openraft's append's), or within what it matched.
    /// After a copy that was not sent (its budget full), the next ones wait until the member
    /// matched what they follow; a copy that would leave a gap is never sent.
    #[test]
    fn a_member_is_sent_only_copies_that_follow_its_log() {
        let lanes = EarlyLanes::default();
        let matched = id(10);
        assert!(
            lanes.take(1, matched, copy(12, 12, 1)).is_none(),
            "11 missing"
        );
        let held = lanes
            .take(1, matched, copy(11, 12, 255))
            .expect("follows 10");
        let _thirteen = lanes.take(1, matched, copy(13, 13, 1)).expect("follows 12");
        assert!(
            lanes.take(1, matched, copy(14, 14, 1)).is_none(),
            "budget full"
        );
        drop(held);
        assert!(
            lanes.take(1, matched, copy(15, 15, 1)).is_none(),
            "14 was not sent"
        );
        assert!(
            lanes.take(1, id(13), copy(15, 15, 1)).is_none(),
            "14 not matched yet"
        );
        assert!(
            lanes.take(1, id(14), copy(15, 15, 1)).is_some(),
            "matched 14"
        );
        assert!(
            lanes.take(1, id(14), copy(16, 17, 1)).is_some(),
            "follows 15"
        );
        // Another term's entry under the same index does not follow the last copy sent.
        let other = Copy {
            prev: Some(LogId::new(openraft::CommittedLeaderId::new(4, 2), 17)),
            ..copy(18, 18, 1)
        };
        assert!(lanes.take(1, id(14), other).is_none());
        // openraft's append queued 18 on the connection: a copy may follow it again, and an
        // append of entries already sent early leaves the chain where the copies are.
        assert!(lanes.take(1, id(14), copy(19, 19, 1)).is_none());
        lanes.queued(1, id(18));
        assert!(
            lanes.take(1, id(14), copy(19, 19, 1)).is_some(),
            "follows 18"
        );
        lanes.queued(1, id(18));
        assert!(
            lanes.take(1, id(14), copy(20, 20, 1)).is_some(),
            "follows 19"
        );
    }
}
