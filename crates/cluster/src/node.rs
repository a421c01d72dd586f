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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::{BasicNode, Config, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use wharf_wal::{FileStorage, Storage, WalConfig};

use crate::log_store::{OpenError, WalLogStore};
use crate::net::wire::{self, Kind};
use crate::net::{CallError, Groups, Peers, TcpNetwork, has_state, serve};
use crate::state_machine::{MachineOpenError, QueueStateMachine};
use crate::status::{self, GroupStatus};
use crate::types::{NodeId, Raft};

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
    /// A snapshot is built (and the log behind it purged) after this many entries.
    pub snapshot_every: u64,
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
}

/// Why a node or a group did not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The settings are inconsistent.
    #[error("cluster settings: {0}")]
    Config(String),
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
        })
    }

    /// Every seed as the membership names it, by id.
    fn members(&self) -> BTreeMap<NodeId, BasicNode> {
        self.seeds
            .iter()
            .enumerate()
            .map(|(i, a)| {
                (
                    i as u64 + 1,
                    BasicNode {
                        addr: a.to_string(),
                    },
                )
            })
            .collect()
    }

    fn raft_config(&self) -> Result<Arc<Config>, NodeError> {
        let t = &self.timing;
        let config = Config {
            cluster_name: "wharf".into(),
            heartbeat_interval: t.heartbeat_ms,
            election_timeout_min: t.election_min_ms,
            election_timeout_max: t.election_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(t.snapshot_every),
            max_in_snapshot_log_to_keep: 1_000,
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
    /// This node.
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
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A running cluster node (cheap to clone).
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let groups = Groups::new(config.id, addr.to_string());
        let server = tokio::spawn(serve(listener, groups.clone()));
        let node = Node {
            inner: Arc::new(Inner {
                peers: Arc::new(Peers::new(config.id)),
                config,
                addr,
                groups,
                handles: tokio::sync::Mutex::new(BTreeMap::new()),
                tasks: Mutex::new(vec![server]),
            }),
        };
        if let Err(e) = node.group(METADATA_GROUP).await {
            node.shutdown().await;
            return Err(e);
        }
        tracing::info!(
            node = node.id(),
            %addr,
            seeds = node.inner.config.seeds.len(),
            "cluster node started"
        );
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.config.id
    }

    /// Where the cluster listener listens.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Opens group `group` on this node (or returns it, already open), and forms it with the
    /// other seeds if nobody has yet. Call it with the same id on every node.
    ///
    /// # Errors
    /// [`NodeError`]: the group's log or snapshot file does not open, or openraft refuses.
    pub async fn group(&self, group: u64) -> Result<GroupHandle, NodeError> {
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
        let machine = QueueStateMachine::open(storage, &dir.join("snapshot"))
            .map_err(|source| NodeError::Snapshot { group, source })?;
        let network = TcpNetwork::new(config.id, group, Arc::clone(&self.inner.peers));
        let raft = Raft::new(
            config.id,
            config.raft_config()?,
            network,
            log,
            machine.clone(),
        )
        .await
        .map_err(|e| NodeError::Raft {
            group,
            reason: e.to_string(),
        })?;
        self.inner.groups.insert(group, raft.clone());
        let handle = GroupHandle {
            group,
            node: config.id,
            raft,
            machine,
        };
        handles.insert(group, handle.clone());
        let former = tokio::spawn(form(
            Arc::clone(&self.inner.peers),
            config.clone(),
            handle.clone(),
        ));
        lock(&self.inner.tasks).push(former);
        Ok(handle)
    }

    /// Names `amqp`, the address this node's AMQP clients connect to, in its status, where
    /// the other nodes learn it (S-CLU-13).
    pub fn advertise_amqp(&self, amqp: SocketAddr) {
        self.inner.groups.set_amqp(amqp.to_string());
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
    let members = config.members();
    let majority = members.len() / 2 + 1;
    loop {
        if has_state(&handle.raft) {
            return;
        }
        let mut empty = vec![config.id];
        let mut someone_has_state = false;
        for (id, node) in members.iter().filter(|(id, _)| **id != config.id) {
            let probe = peers.call(&node.addr, Kind::Probe, handle.group, &[]);
            // No answer (unreachable, the group not open there yet, a timeout) counts as
            // neither empty nor holding state.
            if let Ok(Ok(reply)) = tokio::time::timeout(config.timing.probe_timeout, probe).await {
                match wire::decode_probe_response(&reply) {
                    Ok(false) => empty.push(*id),
                    Ok(true) => someone_has_state = true,
                    Err(_) => {}
                }
            }
        }
        // A seed holding state means the group exists: its leader will reach this node (the
        // loop ends once it has).
        if !someone_has_state && empty.len() >= majority && empty.iter().min() == Some(&config.id) {
            match handle.raft.initialize(members.clone()).await {
                Ok(()) => {
                    tracing::info!(
                        group = handle.group,
                        voters = members.len(),
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

/// Asks the node whose cluster listener is at `addr` for its status text.
///
/// # Errors
/// [`CallError`]: no answer.
pub async fn remote_status(addr: &str) -> Result<String, CallError> {
    let peers = Peers::new(0);
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        peers.call(addr, Kind::Status, 0, &[]),
    )
    .await
    .map_err(|_| CallError::Unreachable {
        addr: addr.to_owned(),
        reason: "no answer within 5 s".into(),
    })??;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}
