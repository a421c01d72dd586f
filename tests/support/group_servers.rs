//! In-process servers on 127.0.0.1:0, each a member of the group that replicates quorum
//! queues (S-CLU-10). The members talk over the in-memory network of `wharf_cluster::testing`
//! and elect and send heartbeats on real time (openraft's timers); each member's Raft log is a
//! WAL in its own temporary directory on the real disk. Each server has its own manual clock:
//! the broker's time moves only when a test moves it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::watch;
use wharf_clock::ManualClock;
use wharf_cluster::testing::{Router, initialize, realtime_config, start_member};
use wharf_cluster::{LocalRelays, Metrics, QueueGroup, Role};
use wharf_server::{RelayHandle, Server, ServerConfig, ServerHandle};

use super::T0_MS;

/// Declares the durable quorum queue `name` on `ch` (S-CLU-10), within 20 s.
pub async fn declare_quorum(ch: &Channel, name: &str) {
    let mut args = lapin::types::FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        lapin::types::AMQPValue::LongString("quorum".into()),
    );
    let durable = lapin::options::QueueDeclareOptions {
        durable: true,
        ..lapin::options::QueueDeclareOptions::default()
    };
    super::within(20, ch.queue_declare(name.into(), durable, args))
        .await
        .unwrap();
}

/// The group's id in every member's log.
const GROUP: u64 = 1;
/// How long a test waits for an election or a reply before it fails.
const WAIT: Duration = Duration::from_secs(20);

/// One node: a member of the group and the server it was handed to.
pub struct Node {
    pub group: QueueGroup,
    pub server: Option<ServerHandle>,
    pub clock: ManualClock,
    pub dir: tempfile::TempDir,
}

/// Nodes 1..=n; node 1 leads at the start.
pub struct Cluster {
    pub router: Arc<Router>,
    pub nodes: BTreeMap<u64, Node>,
}

/// Waits until `metrics` satisfy `cond`, failing the test after [`WAIT`].
async fn until(what: &str, mut metrics: watch::Receiver<Metrics>, cond: impl Fn(&Metrics) -> bool) {
    tokio::time::timeout(WAIT, metrics.wait_for(|m| cond(m)))
        .await
        .unwrap_or_else(|_| panic!("waiting for {what}: timed out"))
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
}

impl Cluster {
    /// Starts `n` members, initializes the group on member 1, waits until it leads, then starts
    /// a server on each.
    pub async fn start(n: u64) -> Cluster {
        Cluster::start_with(n, false).await
    }

    /// As [`Cluster::start`], each server forwarding its clients' quorum queue work to the
    /// leader's server (S-CLU-70) through relays in this process, cut as the router cuts.
    pub async fn start_forwarding(n: u64) -> Cluster {
        Cluster::start_with(n, true).await
    }

    async fn start_with(n: u64, forwarding: bool) -> Cluster {
        let router = Router::new();
        let relays = forwarding.then(|| {
            let seen = Arc::clone(&router);
            LocalRelays::new(Box::new(move |from, to| {
                !seen.is_cut(from) && !seen.is_cut(to)
            }))
        });
        let ids: Vec<u64> = (1..=n).collect();
        let mut nodes = BTreeMap::new();
        for &id in &ids {
            let dir = tempfile::tempdir().unwrap();
            for sub in ["raft", "data"] {
                std::fs::create_dir_all(dir.path().join(sub)).unwrap();
            }
            let group = start_member(
                &router,
                id,
                GROUP,
                &dir.path().join("raft"),
                Arc::new(wharf_wal::FileStorage),
                realtime_config(),
            )
            .await
            .unwrap();
            let clock = ManualClock::new(T0_MS);
            nodes.insert(
                id,
                Node {
                    group,
                    server: None,
                    clock,
                    dir,
                },
            );
        }
        initialize(&nodes[&1].group, &ids).await.unwrap();
        let mut cluster = Cluster { router, nodes };
        cluster.wait_leader(1).await;
        for (id, node) in &mut cluster.nodes {
            let mut config = ServerConfig::new("127.0.0.1:0", node.dir.path().join("data"));
            config.relay = relays.as_ref().map(|r| RelayHandle(r.member(*id)));
            config.clock = Arc::new(node.clock.clone());
            config.cluster = Some(node.group.clone());
            config.mgmt_bind = Some("127.0.0.1:0".to_owned());
            config.prometheus_bind = Some("127.0.0.1:0".to_owned());
            node.server = Some(Server::start(config).await.unwrap());
        }
        cluster
    }

    fn server(&self, id: u64) -> &ServerHandle {
        self.nodes[&id].server.as_ref().expect("node running")
    }

    /// Waits until member `id` leads with its term's first entry applied (`Role::Leader`),
    /// then lets its server act on it (a timer step runs after the take-over, S-CLU-6).
    pub async fn wait_leader(&self, id: u64) {
        let node = &self.nodes[&id];
        until("leadership", node.group.metrics(), |m| {
            Role::of(id, m) == Role::Leader
        })
        .await;
        if let Some(server) = &node.server {
            server.tick().await;
        }
    }

    /// Waits until a member other than `old` leads, as member `watcher` sees it; returns it.
    pub async fn new_leader(&self, old: u64, watcher: u64) -> u64 {
        let metrics = self.nodes[&watcher].group.metrics();
        until("a new leader", metrics.clone(), |m| {
            m.current_leader.is_some_and(|l| l != old)
        })
        .await;
        let leader = metrics.borrow().current_leader.unwrap();
        self.wait_leader(leader).await;
        leader
    }

    /// The leader's Raft stops (as its process would die), then its server: nothing it decided
    /// after this is committed.
    pub async fn stop(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        self.router.remove(id);
        node.group.raft.shutdown().await.unwrap();
        if let Some(server) = node.server.take() {
            // Its broker task has stopped with the group (541 to its connections); the
            // shutdown's own result says so, which is expected here.
            let _ = server.shutdown().await;
        }
    }

    /// Waits until member `id` has applied every entry member `leader` has applied.
    pub async fn wait_applied(&self, id: u64, leader: u64) {
        let target = self.nodes[&leader]
            .group
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index);
        until(
            "the leader's entries applied",
            self.nodes[&id].group.metrics(),
            |m| m.last_applied.is_some_and(|l| l.index >= target),
        )
        .await;
    }

    /// The bodies of `queue`'s messages in member `id`'s committed state, in queue order, with
    /// their `redelivered` marks; `None` when the queue is not there.
    pub fn committed(&self, id: u64, queue: &str) -> Option<Vec<(String, bool)>> {
        self.nodes[&id].group.machine.with(|m| {
            m.broker().queue_kind("/", queue)?;
            Some(
                m.broker()
                    .ready_messages("/", queue)
                    .into_iter()
                    .map(|(msg, redelivered)| {
                        (String::from_utf8_lossy(&msg.body).into_owned(), redelivered)
                    })
                    .collect(),
            )
        })
    }

    /// Node `id`'s AMQP address.
    pub fn addr(&self, id: u64) -> std::net::SocketAddr {
        self.server(id).local_addr()
    }

    /// A lapin connection to node `id` and one channel on it.
    pub async fn channel(&self, id: u64) -> (Connection, Channel) {
        let conn =
            Connection::connect(&self.server(id).amqp_url(), ConnectionProperties::default())
                .await
                .unwrap();
        let ch = conn.create_channel().await.unwrap();
        (conn, ch)
    }

    /// Node `id`'s management API and dashboard, `http://HOST:PORT`.
    pub fn mgmt_base(&self, id: u64) -> String {
        format!("http://{}", self.server(id).mgmt_addr().unwrap())
    }

    /// `GET path` on node `id`'s management API as guest: the status and the body as JSON
    /// (`null` when it is not JSON).
    pub async fn api(&self, id: u64, path: &str) -> (u16, serde_json::Value) {
        self.api_request(id, "GET", path, None).await
    }

    /// `method path` with `body` on node `id`'s management API as guest (as [`Cluster::api`]).
    pub async fn api_request(
        &self,
        id: u64,
        method: &'static str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        super::mgmt_request(self.mgmt_base(id), method, path, body)
            .await
            .unwrap_or_else(|| panic!("node {id}'s management API did not answer {method} {path}"))
    }

    /// `GET path` on node `id`'s Prometheus listener: the text.
    pub async fn metrics(&self, id: u64, path: &str) -> String {
        let base = format!("http://{}", self.server(id).prometheus_addr().unwrap());
        let asked = path.to_owned();
        let answer = tokio::task::spawn_blocking(move || {
            wharf_ctl::Client::anonymous(&base).get(&asked).unwrap()
        })
        .await
        .unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        answer.body
    }

    /// Sets node `id`'s clock to `ms` and runs its timer step.
    pub async fn set_clock(&self, id: u64, ms: u64) {
        self.nodes[&id].clock.set(ms);
        self.server(id).tick().await;
    }

    /// Stops every server still running.
    pub async fn shutdown(mut self) {
        for node in self.nodes.values_mut() {
            if let Some(server) = node.server.take() {
                server.shutdown().await.unwrap();
            }
            node.group.raft.shutdown().await.unwrap();
        }
    }

    /// S-CLU-1: cuts the leader's followers (members 2 and 3) off, publishes `body`
    /// persistently to `queue` on `ch` and checks that no confirm comes within 300 ms (no
    /// majority holds it); returns the pending confirm for the test to await after it heals.
    pub async fn publish_without_majority(
        &self,
        ch: &Channel,
        queue: &str,
        body: &[u8],
    ) -> std::pin::Pin<Box<lapin::PublisherConfirm>> {
        self.router.isolate(2);
        self.router.isolate(3);
        let pending = super::within(
            20,
            ch.basic_publish(
                "".into(),
                queue.into(),
                lapin::options::BasicPublishOptions::default(),
                body,
                lapin::BasicProperties::default().with_delivery_mode(2),
            ),
        )
        .await
        .unwrap();
        let mut pending = Box::pin(pending);
        let early = tokio::time::timeout(Duration::from_millis(300), &mut pending).await;
        assert!(early.is_err(), "confirmed without a majority: {early:?}");
        pending
    }
}
