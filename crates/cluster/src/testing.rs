//! An in-memory network for members of a group in one process (openraft's own test style):
//! a [`Router`] holds every member's Raft, and a member's [`Net`] calls the target's Raft
//! directly. A member can be cut off ([`Router::isolate`]) and reconnected. For tests, in this
//! crate and in the server's (several servers, each with its member, in one process).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::lock;
use crate::types::{NodeId, Raft, TypeConfig};

/// Which members exist and which can talk: a member cut off reaches nobody and nobody
/// reaches it.
#[derive(Default)]
pub struct Router {
    rafts: Mutex<BTreeMap<NodeId, Raft>>,
    /// Every member ever added (stopped ones stay: they are nodes of the cluster).
    seen: Mutex<BTreeSet<NodeId>>,
    cut: Mutex<BTreeSet<NodeId>>,
    /// Members cut off once they answer an append carrying entries ([`Router::cut_after_append`]).
    cut_after_append: Mutex<BTreeSet<NodeId>>,
    /// Keep the runtime busy while an RPC runs (for tokio's paused clock, see [`busy`]).
    spin: bool,
}

impl Router {
    /// A router for tests on real time.
    pub fn new() -> Arc<Router> {
        Arc::new(Router::default())
    }

    /// A router for tests on tokio's paused clock: an RPC keeps the runtime busy until it
    /// ends, so the clock moves only when the test advances it.
    pub fn for_paused_clock() -> Arc<Router> {
        Arc::new(Router {
            spin: true,
            ..Router::default()
        })
    }

    /// Member `id`'s network, to build its Raft with.
    pub fn net(self: &Arc<Self>, id: NodeId) -> Net {
        Net {
            from: id,
            router: Arc::clone(self),
        }
    }

    /// Makes member `id` reachable as `raft`.
    pub fn add(&self, id: NodeId, raft: Raft) {
        lock(&self.seen).insert(id);
        lock(&self.rafts).insert(id, raft);
    }

    /// Member `id` is gone (stopped): nobody reaches it.
    pub fn remove(&self, id: NodeId) {
        lock(&self.rafts).remove(&id);
    }

    /// Cuts member `id` off from every other member.
    pub fn isolate(&self, id: NodeId) {
        lock(&self.cut).insert(id);
    }

    /// Cuts member `id` off as soon as it has answered the next append that carries entries
    /// (its answer still reaches the leader): it holds those entries, and whatever the leader
    /// sends next (the commit of those entries) does not reach it.
    pub fn cut_after_append(&self, id: NodeId) {
        lock(&self.cut_after_append).insert(id);
    }

    /// Reconnects member `id`.
    pub fn heal(&self, id: NodeId) {
        lock(&self.cut).remove(&id);
    }

    /// Whether member `id` is cut off.
    pub fn is_cut(&self, id: NodeId) -> bool {
        lock(&self.cut).contains(&id)
    }

    fn target(&self, from: NodeId, to: NodeId) -> Result<Raft, Unreachable> {
        if self.is_cut(from) || self.is_cut(to) {
            return Err(Unreachable::new(&std::io::Error::other("partitioned")));
        }
        lock(&self.rafts)
            .get(&to)
            .cloned()
            .ok_or_else(|| Unreachable::new(&std::io::Error::other("no such member")))
    }

    async fn call<F: std::future::Future>(&self, fut: F) -> F::Output {
        if self.spin {
            busy(fut).await
        } else {
            fut.await
        }
    }
}

/// Member `from`'s way to its leader on a [`Router`] (S-CLU-50): the leader's side runs
/// directly ([`crate::lead`]); a member cut off, or gone, is unreachable.
pub struct RouterForward {
    from: NodeId,
    router: Arc<Router>,
}

impl Router {
    /// Member `from`'s [`crate::Forward`] on this network.
    pub fn forward(self: &Arc<Self>, from: NodeId) -> RouterForward {
        RouterForward {
            from,
            router: Arc::clone(self),
        }
    }
}

impl crate::Forward for RouterForward {
    async fn forward(
        &self,
        leader: NodeId,
        _group: u64,
        proposal: &crate::Proposal,
    ) -> Result<crate::LogId, crate::ForwardError> {
        let raft = self
            .router
            .target(self.from, leader)
            .map_err(|e| crate::ForwardError::Unreachable(e.to_string()))?;
        let answer = self.router.call(crate::lead(&raft, proposal.clone())).await;
        // The answer crosses the same network: a member cut off meanwhile does not hear it.
        self.router
            .target(self.from, leader)
            .map_err(|e| crate::ForwardError::Unreachable(e.to_string()))?;
        answer
    }
}

/// The address [`initialize`] gives member `id` in the group's membership.
pub fn member_addr(id: NodeId) -> String {
    format!("member-{id}")
}

/// The router as the cluster's nodes (`view.rs`): member `id` is the seed of slot `id`
/// ([`member_addr`]); one that is reachable (added, not stopped nor cut off) answers its status,
/// rendered from its Raft as a node renders it (its view of group [`crate::QUEUE_GROUP`]).
impl crate::peers::Peers for Router {
    fn seeds(&self) -> Vec<String> {
        let last = lock(&self.seen).iter().next_back().copied().unwrap_or(0);
        (1..=last).map(member_addr).collect()
    }

    fn status<'a>(&'a self, addr: &'a str) -> crate::peers::Pending<'a, Option<String>> {
        Box::pin(async move {
            let id: NodeId = addr.strip_prefix("member-")?.parse().ok()?;
            if self.is_cut(id) {
                return None;
            }
            let raft = lock(&self.rafts).get(&id).cloned()?;
            let group = crate::status::group_status(crate::QUEUE_GROUP, &raft);
            Some(crate::status::render(id, id, addr, None, &[group]))
        })
    }
}

/// One member's connections.
pub struct Net {
    from: NodeId,
    router: Arc<Router>,
}

/// A connection from one member to another.
pub struct Conn {
    from: NodeId,
    to: NodeId,
    router: Arc<Router>,
}

impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Conn {
        Conn {
            from: self.from,
            to: target,
            router: Arc::clone(&self.router),
        }
    }
}

/// Drives an RPC to its end without letting the runtime go idle. The paused clock jumps to the
/// next timer whenever the runtime idles, and it idles while the target waits for its WAL's
/// writer thread (a real thread) to sync a vote or entries: the jump would fire openraft's RPC
/// timeout (`election_timeout_min` for a vote, never retried without ticks) before the answer
/// comes. Yielding keeps the runtime busy, so the clock moves only when a test advances it.
pub async fn busy<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            () = tokio::task::yield_now() => {}
        }
    }
}

/// `rpc` with entries of the member's own, decoded from their records as a member reading
/// them off the cluster link decodes them: no two members share a message (each member's log
/// stamps its own copy with where it wrote it, S-CLU-82).
fn own_copies(mut rpc: AppendEntriesRequest<TypeConfig>) -> AppendEntriesRequest<TypeConfig> {
    use crate::record::{self, RaftRecord};
    for entry in &mut rpc.entries {
        let record = RaftRecord::Entry {
            group: 0,
            entry: entry.clone(),
        };
        #[expect(
            clippy::expect_used,
            reason = "test support: an entry the leader logged encodes and decodes"
        )]
        let copy = record::encode(&record)
            .ok()
            .and_then(|(kind, payload)| record::decode(kind, &payload).ok())
            .expect("an entry encodes and decodes");
        if let RaftRecord::Entry { entry: copy, .. } = copy {
            *entry = copy;
        }
    }
    rpc
}

type Rpc<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let raft = self.router.target(self.from, self.to)?;
        let carries_entries = !rpc.entries.is_empty();
        let rpc = own_copies(rpc);
        let resp = self.router.call(raft.append_entries(rpc)).await;
        if carries_entries && lock(&self.router.cut_after_append).remove(&self.to) {
            self.router.isolate(self.to);
        }
        resp.map_err(|e| RemoteError::new(self.to, e).into())
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let raft = self.router.target(self.from, self.to)?;
        let resp = self.router.call(raft.install_snapshot(rpc)).await;
        resp.map_err(|e| RemoteError::new(self.to, e).into())
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        let raft = self.router.target(self.from, self.to)?;
        let resp = self.router.call(raft.vote(rpc)).await;
        resp.map_err(|e| RemoteError::new(self.to, e).into())
    }
}

/// openraft's configuration for members of a test on real time: elections and heartbeats run
/// by themselves; a lost leader is replaced within about two seconds, and a loaded machine
/// that delays heartbeats by a few hundred milliseconds does not depose a live one.
///
/// # Panics
/// The constants do not make a valid configuration (a bug).
#[expect(clippy::expect_used, reason = "a constant configuration")]
pub fn realtime_config() -> Arc<openraft::Config> {
    let config = openraft::Config {
        cluster_name: "wharf-test".into(),
        heartbeat_interval: 100,
        election_timeout_min: 1_000,
        election_timeout_max: 2_000,
        ..openraft::Config::default()
    };
    Arc::new(config.validate().expect("a valid configuration"))
}

/// Starts member `id` of group `group_id` on `router`'s network: its Raft log in a WAL in
/// `dir` on `storage`, an empty committed state. It joins the group once a member initializes
/// the group with it ([`initialize`]).
///
/// # Errors
/// The log did not open, or openraft refused to start.
pub async fn start_member(
    router: &Arc<Router>,
    id: NodeId,
    group_id: u64,
    dir: &std::path::Path,
    storage: Arc<dyn wharf_wal::Storage>,
    config: Arc<openraft::Config>,
) -> Result<crate::QueueGroup, String> {
    let store = crate::WalLogStore::open(dir, storage, &wharf_wal::WalConfig::default(), group_id)
        .map_err(|e| e.to_string())?;
    let machine = crate::QueueStateMachine::new().with_log(group_id, store.reader());
    let raft = Raft::new(id, config, router.net(id), store, machine.clone())
        .await
        .map_err(|e| e.to_string())?;
    router.add(id, raft.clone());
    Ok(crate::QueueGroup {
        leaders: crate::LeaderAddrs::default(),
        peers: Arc::clone(router) as crate::peers::SharedPeers,
        node: id,
        raft,
        machine,
    })
}

/// Initializes the group on `member` with `members` as voters (`member` among them); it then
/// campaigns and, once the others answer, leads.
///
/// # Errors
/// openraft refused (the group was initialized already).
pub async fn initialize(member: &crate::QueueGroup, members: &[NodeId]) -> Result<(), String> {
    let nodes: BTreeMap<NodeId, BasicNode> = members
        .iter()
        .map(|&id| {
            let addr = member_addr(id);
            (id, BasicNode { addr })
        })
        .collect();
    member
        .raft
        .initialize(nodes)
        .await
        .map_err(|e| e.to_string())
}
