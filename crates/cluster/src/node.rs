//! A cluster node (DESIGN "Replication", its "Nodes and the link"): the cluster listener, the
//! node's connections to its peers, and the Raft groups it runs, each with its log in a WAL of
//! its own under the node's directory and its snapshot file beside it.
//!
//! **Membership.** Every node is started with the same list of seeds (`HOST:PORT` of each
//! node's cluster listener); a node's id is its position in the list, from 1. Every group's
//! voters are all the seeds. A group forms by itself (S-CLU-8): a node with no state of the
//! group asks every seed whether it holds any (`Probe`); once a majority of the seeds answer
//! and none holds any, the first of the answering seeds in the list initializes the group
//! (openraft's `initialize` with every seed as voter), and the others wait to hear from its
//! leader. A node that finds a seed holding state waits to hear from the group's leader.
//! Initializing twice is harmless:
//! every node would write the same membership at the same log id (index 0, term 0), and a
//! node with any state refuses (openraft's `NotAllowed`), so a restart never re-initializes.
//! Group 0, the metadata group, is opened at start.
//!
//! **Incarnations.** A node's Raft id in its groups is its member id (`incarnation.rs`): the
//! founding id (its slot) or, for a directory created after the cluster formed (a wiped disk),
//! a new id settled before any group opens (`members::settle`). The initial membership names
//! each seed by the member id it answered a probe with (its founding id when it did not
//! answer). The leader of each group lets a new incarnation in in place of the old
//! (`members::keep_once`), and serves the operator's `add_member` / `remove_member`, forwarded
//! to it by any node.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use openraft::{BasicNode, Config, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use wharf_wal::{FileStorage, Storage, WalConfig};

use crate::forward::{ForwardError, NotCommitted, Proposer, session_id};
use crate::incarnation::{self, MemberFileError};
use crate::lock;
use crate::log_store::{OpenError, WalLogStore};
use crate::members;
use crate::net::wire::{self, ANY_MEMBER, Failure, Header, Kind};
use crate::net::{self, CallError, Groups, LinkForward, Peers, TcpNetwork, has_state, serve};
use crate::state_machine::{MachineOpenError, QueueStateMachine};
use crate::status::{self, GroupStatus};
use crate::types::{LogId, NodeId, Raft};

/// The metadata group's id.
pub const METADATA_GROUP: u64 = 0;

/// Raft's timing on every group of a node.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Leader heartbeats (ms).
    pub heartbeat_ms: u64,
    /// The election timeout's range (ms): a follower that heard no leader for a random time in
    /// it campaigns.
    pub election_min_ms: u64,
    /// See `election_min_ms`.
    pub election_max_ms: u64,
    /// How often a node with no state of a group tries to form it.
    pub form_every: Duration,
    /// How long a formation probe waits for a seed's answer.
    pub probe_timeout: Duration,
    /// A snapshot is built (and the log behind it purged) after at least this many entries,
    /// or once they logged `snapshot_bytes` more than the queues hold, when they logged as
    /// many bytes as the last snapshot holds (S-CLU-80).
    pub snapshot_every: u64,
    /// See `snapshot_every`: what keeps a log of large entries short (an entry holds up to
    /// [`wharf_base::limits::RAFT_APPEND_BYTES_MAX`]).
    pub snapshot_bytes: u64,
}

impl Default for Timing {
    /// A leader lost is replaced within about a second (S-CLU-9): 100 ms heartbeats, 300 to
    /// 600 ms election timeouts. A follower refuses votes for the longest election timeout
    /// after it last heard its leader (openraft's leader lease), so a failover takes from
    /// about 600 ms to 1.2 s, more on a loaded machine.
    fn default() -> Self {
        Timing {
            heartbeat_ms: 100,
            election_min_ms: 300,
            election_max_ms: 600,
            form_every: Duration::from_millis(300),
            probe_timeout: Duration::from_millis(300),
            snapshot_every: 10_000,
            // The store's checkpoint minimum (DESIGN "Checkpoints").
            snapshot_bytes: wharf_base::limits::CHECKPOINT_LOG_BYTES_MIN,
        }
    }
}

/// How a node starts.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (its position in `seeds`, from 1).
    pub id: NodeId,
    /// Where the cluster listener binds.
    pub listen: SocketAddr,
    /// Every node's cluster address, the same list on every node.
    pub seeds: Vec<SocketAddr>,
    /// The node's Raft directory (a `group-<id>` directory per group).
    pub dir: PathBuf,
    /// Raft's timing.
    pub timing: Timing,
    /// The content of queued messages each group's committed broker keeps in memory, at most
    /// (about; the server's `message_memory_bytes`): beyond, the oldest are read back from
    /// the group's log when needed (S-CLU-82).
    pub message_memory_bytes: u64,
}

/// Why a node or a group did not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The settings are inconsistent.
    #[error("cluster settings: {0}")]
    Config(String),
    /// The member file did not read or write.
    #[error("the node's member file")]
    Member(#[from] MemberFileError),
    /// The cluster listener did not bind.
    #[error("binding the cluster listener on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A group's log did not open.
    #[error("group {group}'s Raft log")]
    Log {
        /// The group.
        group: u64,
        /// The error.
        source: OpenError,
    },
    /// A group's snapshot file did not load.
    #[error("group {group}'s snapshot file")]
    Snapshot {
        /// The group.
        group: u64,
        /// The error.
        source: MachineOpenError,
    },
    /// openraft refused to start the group.
    #[error("group {group}: {reason}")]
    Raft {
        /// The group.
        group: u64,
        /// openraft's error.
        reason: String,
    },
}

impl NodeConfig {
    /// The configuration of the node listening on `listen`, one of `seeds` (`HOST:PORT` with
    /// an IP address each, the same list in the same order on every node), keeping its groups
    /// under `dir`. Its id is its position in the list, from 1; or `id`, when given, for a
    /// node whose listener is not the address the others reach it at (behind a proxy, as the
    /// cluster tests put every node).
    ///
    /// # Errors
    /// A seed that is not an IP address and port, a repeated seed, `listen` not in the list
    /// (without `id`), or `id` outside the list.
    pub fn from_seeds(
        listen: &str,
        seeds: &str,
        dir: PathBuf,
        id: Option<u64>,
    ) -> Result<NodeConfig, NodeError> {
        let parse = |s: &str| {
            s.trim()
                .parse::<SocketAddr>()
                .map_err(|e| NodeError::Config(format!("{s:?} is not an IP address and port: {e}")))
        };
        let listen = parse(listen)?;
        let seeds = seeds
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(parse)
            .collect::<Result<Vec<_>, _>>()?;
        if seeds.len() as u64 > incarnation::SLOTS_MAX {
            return Err(NodeError::Config(format!(
                "{} seeds: at most {} are allowed",
                seeds.len(),
                incarnation::SLOTS_MAX
            )));
        }
        for (i, s) in seeds.iter().enumerate() {
            if seeds.iter().skip(i + 1).any(|o| o == s) {
                return Err(NodeError::Config(format!("seed {s} is listed twice")));
            }
        }
        let id = match id {
            Some(id) if (1..=seeds.len() as u64).contains(&id) => id,
            Some(id) => {
                return Err(NodeError::Config(format!(
                    "cluster id {id} is not a position in the {} seeds",
                    seeds.len()
                )));
            }
            None => {
                let position = seeds.iter().position(|s| *s == listen).ok_or_else(|| {
                    NodeError::Config(format!(
                        "cluster listen {listen} is not one of the cluster seeds (the same list on every node)"
                    ))
                })?;
                position as u64 + 1
            }
        };
        Ok(NodeConfig {
            id,
            listen,
            seeds,
            dir,
            timing: Timing::default(),
            message_memory_bytes: wharf_base::limits::MESSAGE_MEMORY_BYTES,
        })
    }

    /// When each group's member builds a snapshot (S-CLU-80, S-CLU-81).
    fn snapshot_rule(&self) -> crate::SnapshotRule {
        let t = &self.timing;
        crate::SnapshotRule::staggered(
            t.snapshot_every,
            t.snapshot_bytes,
            self.id,
            self.seeds.len() as u64,
        )
    }

    fn raft_config(&self) -> Result<Arc<Config>, NodeError> {
        let t = &self.timing;
        let config = Config {
            cluster_name: "wharf".into(),
            heartbeat_interval: t.heartbeat_ms,
            election_timeout_min: t.election_min_ms,
            election_timeout_max: t.election_max_ms,
            // The state machine asks for each snapshot when it is due (S-CLU-80,
            // `compaction.rs`): openraft's own policy counts entries only, whatever the
            // snapshot costs.
            snapshot_policy: SnapshotPolicy::Never,
            // At most 1,000 entries (fewer when snapshots are more frequent) stay behind a
            // snapshot for a lagging member; one further behind installs the snapshot.
            max_in_snapshot_log_to_keep: t.snapshot_every.min(1_000),
            ..Config::default()
        };
        config
            .validate()
            .map(Arc::new)
            .map_err(|e| NodeError::Config(e.to_string()))
    }
}

/// One group as this node runs it: what the server needs to propose and read.
#[derive(Clone)]
pub struct GroupHandle {
    /// The group.
    pub group: u64,
    /// This node's member id (its Raft id).
    pub node: NodeId,
    /// The group's Raft on this node.
    pub raft: Raft,
    /// The group's committed state on this node.
    pub machine: QueueStateMachine,
}

struct Inner {
    config: NodeConfig,
    addr: SocketAddr,
    peers: Arc<Peers>,
    groups: Groups,
    handles: tokio::sync::Mutex<BTreeMap<u64, GroupHandle>>,
    /// One membership change at a time per group.
    changing: Mutex<BTreeMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// This node's member id once settled ([`ANY_MEMBER`] before).
    member: watch::Sender<NodeId>,
    /// This node's proposer of each group it proposed to (S-CLU-50).
    proposers: Mutex<BTreeMap<u64, Arc<Proposer>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A running cluster node (cheap to clone).
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

impl Node {
    /// Binds the cluster listener, serves the link, and opens the metadata group.
    ///
    /// # Errors
    /// [`NodeError`]: the listener does not bind, or the metadata group does not open.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| NodeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        Node::start_on(config, listener).await
    }

    /// [`Node::start`] on a listener already bound (to `config.listen`): tests bind every
    /// node's port before any node starts, to know the seeds.
    ///
    /// # Errors
    /// [`NodeError`]: the metadata group does not open.
    pub async fn start_on(config: NodeConfig, listener: TcpListener) -> Result<Node, NodeError> {
        let addr = listener.local_addr().map_err(|source| NodeError::Bind {
            addr: config.listen,
            source,
        })?;
        let member = Node::recorded_member(&config)?;
        let groups = Groups::new(config.id, addr.to_string());
        let server = tokio::spawn(serve(listener, groups.clone()));
        let node = Node {
            inner: Arc::new(Inner {
                peers: Arc::new(Peers::new(config.id)),
                config,
                addr,
                groups,
                handles: tokio::sync::Mutex::new(BTreeMap::new()),
                changing: Mutex::new(BTreeMap::new()),
                member: watch::Sender::new(ANY_MEMBER),
                proposers: Mutex::new(BTreeMap::new()),
                tasks: Mutex::new(vec![server]),
            }),
        };
        let weak = Arc::downgrade(&node.inner);
        node.inner.groups.set_admin(Arc::new(move |header, body| {
            let weak = weak.clone();
            Box::pin(async move {
                match weak.upgrade() {
                    Some(inner) => Node { inner }.admin(header, body).await,
                    None => wire::failed(&Failure::Stopped),
                }
            })
        }));
        if let Some(member) = member {
            node.settled(member);
            if let Err(e) = node.group(METADATA_GROUP).await {
                node.shutdown().await;
                return Err(e);
            }
        } else {
            let settling = node.clone();
            let task = tokio::spawn(async move { settling.settle().await });
            lock(&node.inner.tasks).push(task);
        }
        tracing::info!(
            node = node.id(),
            %addr,
            seeds = node.inner.config.seeds.len(),
            "cluster node started"
        );
        Ok(node)
    }

    /// The member id the node's directory records, or the founding id for a directory holding
    /// groups from before member files (recorded now); `None` for an empty directory.
    fn recorded_member(config: &NodeConfig) -> Result<Option<NodeId>, NodeError> {
        let storage = FileStorage;
        match incarnation::read(&storage, &config.dir)? {
            Some((member, slot)) if slot == config.id => Ok(Some(member)),
            Some((member, slot)) => Err(NodeError::Config(format!(
                "the directory {} is member {member} of seed {slot}, not of seed {}",
                config.dir.display(),
                config.id
            ))),
            None if incarnation::has_groups(&storage, &config.dir)? => {
                incarnation::write(&storage, &config.dir, config.id, config.id)?;
                Ok(Some(config.id))
            }
            None => Ok(None),
        }
    }

    /// Settles an empty directory's member id (`members::settle`), records it, then opens
    /// the metadata group.
    async fn settle(&self) {
        let config = &self.inner.config;
        let member = members::settle(
            &self.inner.peers,
            &config.seeds,
            config.id,
            METADATA_GROUP,
            config.timing.probe_timeout,
            config.timing.form_every,
        )
        .await;
        if let Err(e) = incarnation::write(&FileStorage, &config.dir, member, config.id) {
            tracing::error!(error = %e, "cannot record the node's member id: not joining");
            return;
        }
        self.settled(member);
        if let Err(e) = self.group(METADATA_GROUP).await {
            tracing::error!(error = %e, "the metadata group did not open");
        }
    }

    fn settled(&self, member: NodeId) {
        self.inner.groups.settle(member);
        self.inner.member.send_replace(member);
        tracing::info!(slot = self.id(), member, "member id settled");
    }

    /// This node's member id (its Raft id in every group), once settled.
    pub async fn member(&self) -> NodeId {
        let mut rx = self.inner.member.subscribe();
        let settled = rx.wait_for(|m| *m != ANY_MEMBER).await.map(|m| *m);
        settled.unwrap_or(ANY_MEMBER)
    }

    /// Runs one pass of the leader's watch over `group`'s members now (it runs every
    /// `form_every` by itself): on the leader, a seed running another incarnation than its
    /// slot's voter is let in (S-CLU-22). Does nothing where the group is not open.
    pub async fn watch_members(&self, group: u64) {
        let handle = self.inner.handles.lock().await.get(&group).cloned();
        if let Some(h) = handle {
            let config = &self.inner.config;
            members::keep_once(
                &self.inner.peers,
                &config.seeds,
                config.id,
                group,
                &h.raft,
                &self.changing(group),
                config.timing.probe_timeout,
            )
            .await;
        }
    }

    fn changing(&self, group: u64) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(lock(&self.inner.changing).entry(group).or_default())
    }

    /// Answers a membership request (`AddMember`, `RemoveMember`): on the group's leader; a
    /// request that reached another member is forwarded to the leader once.
    async fn admin(&self, header: Header, body: Vec<u8>) -> Vec<u8> {
        let handle = self.inner.handles.lock().await.get(&header.group).cloned();
        let Some(handle) = handle else {
            return wire::failed(&Failure::NoGroup);
        };
        let decoded = match header.kind {
            Kind::AddMember => wire::decode_add_member(&body).map(|(h, a)| (h, Ok(a))),
            Kind::RemoveMember => wire::decode_remove_member(&body).map(|(h, m)| (h, Err(m))),
            _ => return wire::failed(&Failure::BadRequest),
        };
        let Ok((hops, what)) = decoded else {
            return wire::failed(&Failure::BadRequest);
        };
        let m = handle.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader && hops == 0 {
            let leader = m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
            let Some(leader) = leader else {
                return wire::failed(&Failure::Refused(format!(
                    "group {} has no leader now",
                    header.group
                )));
            };
            let forwarded = match &what {
                Ok(addr) => wire::add_member(1, addr),
                Err(member) => wire::remove_member(1, *member),
            };
            let call = self.inner.peers.call(
                &leader.addr,
                header.kind,
                header.group,
                ANY_MEMBER,
                forwarded,
            );
            return match call.await {
                Ok(text) => wire::ok(&text),
                Err(CallError::Failed { failure, .. }) => wire::failed(&failure),
                Err(e) => wire::failed(&Failure::Refused(e.to_string())),
            };
        }
        let changing = self.changing(header.group);
        let config = &self.inner.config;
        let result = match what {
            Ok(addr) => {
                members::add_member(
                    &self.inner.peers,
                    &config.seeds,
                    header.group,
                    &handle.raft,
                    &changing,
                    &addr,
                )
                .await
            }
            Err(member) => {
                members::remove_member(header.group, &handle.raft, &changing, member).await
            }
        };
        match result {
            Ok(text) => wire::ok(text.as_bytes()),
            Err(why) => wire::failed(&Failure::Refused(why)),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.config.id
    }

    /// Where the cluster listener listens.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Every node's cluster address (the seeds), in order.
    pub fn seeds(&self) -> Vec<String> {
        let seeds = &self.inner.config.seeds;
        seeds.iter().map(ToString::to_string).collect()
    }

    /// Opens group `group` on this node (or returns it, already open), and forms it with the
    /// other seeds if nobody has yet. Call it with the same id on every node.
    ///
    /// # Errors
    /// [`NodeError`]: the group's log or snapshot file does not open, or openraft refuses.
    pub async fn group(&self, group: u64) -> Result<GroupHandle, NodeError> {
        let member = self.member().await;
        let mut handles = self.inner.handles.lock().await;
        if let Some(h) = handles.get(&group) {
            return Ok(h.clone());
        }
        let config = &self.inner.config;
        let dir = config.dir.join(format!("group-{group}"));
        let storage: Arc<dyn Storage> = Arc::new(FileStorage);
        let log = WalLogStore::open(
            &dir.join("log"),
            Arc::clone(&storage),
            &WalConfig::default(),
            group,
        )
        .map_err(|source| NodeError::Log { group, source })?;
        let led: Arc<OnceLock<Raft>> = Arc::default();
        let early = Arc::new(net::EarlyLanes::default());
        let log = log.sending_early(
            member,
            net::early_append(
                member,
                group,
                Arc::clone(&self.inner.peers),
                Arc::clone(&led),
                Arc::clone(&early),
            ),
        );
        let machine = QueueStateMachine::open(storage, &dir.join("snapshot"))
            .map_err(|source| NodeError::Snapshot { group, source })?
            .with_log(group, log.reader())
            .message_memory(config.message_memory_bytes);
        let network = TcpNetwork::new(member, group, Arc::clone(&self.inner.peers), early);
        let raft = Raft::new(member, config.raft_config()?, network, log, machine.clone())
            .await
            .map_err(|e| NodeError::Raft {
                group,
                reason: e.to_string(),
            })?;
        let _ = led.set(raft.clone());
        self.inner.groups.insert(group, raft.clone());
        let snapshots = machine.snapshot_by(config.snapshot_rule(), raft.clone());
        let handle = GroupHandle {
            group,
            node: member,
            raft,
            machine,
        };
        handles.insert(group, handle.clone());
        let former = tokio::spawn(form(
            Arc::clone(&self.inner.peers),
            config.clone(),
            handle.clone(),
        ));
        let keeper = tokio::spawn(keep(
            Arc::clone(&self.inner.peers),
            config.clone(),
            handle.clone(),
            self.changing(group),
        ));
        lock(&self.inner.tasks).extend([former, keeper, snapshots]);
        Ok(handle)
    }

    /// Proposes `events`, decided at `now_ms`, to `group` through its leader (S-CLU-50: on
    /// this node when it leads, over the cluster link otherwise), and waits until the entry
    /// commits: its log id. Tries again against each new leader for at most `wait`; applies
    /// once however many copies commit.
    ///
    /// # Errors
    /// [`NotCommitted`]: the group is not open on this node, refused the proposal, or did not
    /// commit it within `wait`.
    pub async fn propose(
        &self,
        group: u64,
        now_ms: u64,
        events: Vec<wharf_broker::Event>,
        wait: Duration,
    ) -> Result<LogId, NotCommitted> {
        let handle = self.inner.handles.lock().await.get(&group).cloned();
        let Some(handle) = handle else {
            return Err(NotCommitted {
                group,
                why: ForwardError::Refused(format!("group {group} is not open on this node")),
            });
        };
        let proposer = self.proposer(&handle);
        let forward = LinkForward::new(handle.raft.clone(), Arc::clone(&self.inner.peers));
        proposer.propose(&forward, now_ms, events, wait).await
    }

    /// This node's proposer of `handle`'s group (one per group and node start, S-CLU-50).
    fn proposer(&self, handle: &GroupHandle) -> Arc<Proposer> {
        Arc::clone(
            lock(&self.inner.proposers)
                .entry(handle.group)
                .or_insert_with(|| {
                    Arc::new(Proposer::new(
                        handle.node,
                        handle.group,
                        handle.raft.clone(),
                        session_id(handle.node),
                    ))
                }),
        )
    }

    /// This node's handle on the metadata group, for its server (S-CLU-51..54): proposals go
    /// through the node's proposer of group 0, to the leader over the cluster link.
    ///
    /// # Errors
    /// [`NodeError`]: the metadata group does not open.
    pub async fn metadata(&self) -> Result<crate::MetadataGroup, NodeError> {
        let handle = self.group(METADATA_GROUP).await?;
        let proposer = self.proposer(&handle);
        let forward = LinkForward::new(handle.raft.clone(), Arc::clone(&self.inner.peers));
        Ok(crate::MetadataGroup::new(
            handle.node,
            handle.raft,
            handle.machine,
            proposer,
            forward,
        ))
    }

    /// Names `amqp`, the address this node's AMQP clients connect to, in its status, where
    /// the other nodes learn it (S-CLU-13).
    pub fn advertise_amqp(&self, amqp: SocketAddr) {
        self.inner.groups.set_amqp(amqp.to_string());
    }

    /// This node's relay to the servers of `raft`'s group's members, over the cluster link,
    /// serving theirs here (S-CLU-70).
    pub fn relay(&self, raft: Raft) -> crate::net::LinkRelay {
        crate::net::LinkRelay::new(
            raft,
            Arc::clone(&self.inner.peers),
            self.inner.groups.relays(),
        )
    }

    /// This node's view of every group it runs.
    pub fn status(&self) -> Vec<GroupStatus> {
        self.inner
            .groups
            .all()
            .iter()
            .map(|(g, raft)| status::group_status(*g, raft))
            .collect()
    }

    /// The status text `wharfctl cluster_status` shows (`status.rs`).
    pub fn status_text(&self) -> String {
        self.inner.groups.status()
    }

    /// Stops every group (openraft's shutdown: each log's WAL closed) and the listener.
    pub async fn shutdown(&self) {
        for task in lock(&self.inner.tasks).drain(..) {
            task.abort();
        }
        let handles: Vec<GroupHandle> = {
            let mut h = self.inner.handles.lock().await;
            std::mem::take(&mut *h).into_values().collect()
        };
        for h in handles {
            self.inner.groups.remove(h.group);
            if let Err(e) = h.raft.shutdown().await {
                tracing::warn!(group = h.group, error = %e, "stopping a group");
            }
        }
    }
}

/// Forms `handle`'s group when no seed holds state of it (see the module's doc), then ends;
/// ends at once when this node holds state already.
async fn form(peers: Arc<Peers>, config: NodeConfig, handle: GroupHandle) {
    let majority = config.seeds.len() / 2 + 1;
    loop {
        if has_state(&handle.raft) {
            return;
        }
        let answers = members::probe_all(
            &peers,
            &config.seeds,
            config.id,
            handle.group,
            config.timing.probe_timeout,
        )
        .await;
        // A seed holding state means the group exists: its leader will reach this node (the
        // loop ends once it has).
        let someone_has_state = answers.values().any(|p| p.has_state);
        // A seed still settling its member id is waited for: it would otherwise find the
        // group formed and come back as a new incarnation (S-CLU-20).
        let settling = answers.values().any(|p| p.member == ANY_MEMBER);
        let first_answering = answers
            .keys()
            .next()
            .map_or(config.id, |s| config.id.min(*s));
        if !someone_has_state
            && !settling
            && answers.len() + 1 >= majority
            && first_answering == config.id
        {
            // Each seed by the member id it answered with; its founding id when it did not
            // answer.
            let voters: BTreeMap<NodeId, BasicNode> = (1u64..)
                .zip(&config.seeds)
                .map(|(slot, addr)| {
                    let member = match answers.get(&slot) {
                        _ if slot == config.id => handle.node,
                        Some(p) if p.member != ANY_MEMBER => p.member,
                        _ => slot,
                    };
                    let node = BasicNode {
                        addr: addr.to_string(),
                    };
                    (member, node)
                })
                .collect();
            match handle.raft.initialize(voters.clone()).await {
                Ok(()) => {
                    tracing::info!(
                        group = handle.group,
                        voters = voters.len(),
                        "formed the group"
                    );
                }
                Err(e) => tracing::debug!(group = handle.group, error = %e, "not initialized"),
            }
            return;
        }
        tokio::time::sleep(config.timing.form_every).await;
    }
}

/// The leader's watch over `handle`'s group, every `form_every` (`members::keep_once`).
async fn keep(
    peers: Arc<Peers>,
    config: NodeConfig,
    handle: GroupHandle,
    changing: Arc<tokio::sync::Mutex<()>>,
) {
    loop {
        tokio::time::sleep(config.timing.form_every).await;
        members::keep_once(
            &peers,
            &config.seeds,
            config.id,
            handle.group,
            &handle.raft,
            &changing,
            config.timing.probe_timeout,
        )
        .await;
    }
}

/// Asks the node whose cluster listener is at `addr` for its status text.
///
/// # Errors
/// [`CallError`]: no answer.
pub async fn remote_status(addr: &str) -> Result<String, CallError> {
    remote_call(addr, Kind::Status, 0, &[], Duration::from_secs(5)).await
}

/// How long `wharfctl add_member` waits: the new member catches up first.
const ADMIN_WAIT: Duration = Duration::from_secs(90);

/// Asks the node at `addr` to make the seed at `member_addr` a voter of `group`
/// (`wharfctl add_member`); the answer as text.
///
/// # Errors
/// [`CallError`]: no answer, or the change refused (`Failure::Refused` says why).
pub async fn remote_add_member(
    addr: &str,
    group: u64,
    member_addr: &str,
) -> Result<String, CallError> {
    let body = wire::add_member(0, member_addr);
    remote_call(addr, Kind::AddMember, group, &body, ADMIN_WAIT).await
}

/// Asks the node at `addr` to remove `member` from `group` (`wharfctl remove_member`).
///
/// # Errors
/// [`CallError`]: no answer, or the change refused.
pub async fn remote_remove_member(
    addr: &str,
    group: u64,
    member: NodeId,
) -> Result<String, CallError> {
    let body = wire::remove_member(0, member);
    remote_call(addr, Kind::RemoveMember, group, &body, ADMIN_WAIT).await
}

async fn remote_call(
    addr: &str,
    kind: Kind,
    group: u64,
    body: &[u8],
    wait: Duration,
) -> Result<String, CallError> {
    let peers = Peers::new(0);
    let reply = tokio::time::timeout(
        wait,
        peers.call(addr, kind, group, ANY_MEMBER, body.to_vec()),
    )
    .await
    .map_err(|_| CallError::Unreachable {
        addr: addr.to_owned(),
        reason: format!("no answer within {wait:?}"),
    })??;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}
