//! Nodes on the TCP cluster link (docs/CLUSTER-WIRE.md), in this process on loopback, with
//! real time and real files: three nodes form the metadata group by themselves (S-CLU-8),
//! commit on a majority, elect a new leader when the leader stops (S-CLU-9), and the stopped
//! node catches up when it comes back. The link refuses garbage without panicking (S-ERR-2).

use bytes::Bytes;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wharf_cluster::net::read_frame;
use wharf_cluster::net::wire::{self, Kind};
use wharf_cluster::status::GroupStatus;
use wharf_cluster::{METADATA_GROUP, Node, NodeConfig, Timing};

use crate::commands::declare_quorum;
use crate::support::{HangGuard, LiveBroker};

/// Fast timing for tests on a loaded machine: elections within a second.
pub fn timing() -> Timing {
    Timing {
        heartbeat_ms: 50,
        election_min_ms: 300,
        election_max_ms: 600,
        form_every: Duration::from_millis(100),
        probe_timeout: Duration::from_millis(200),
        snapshot_every: 10_000,
        snapshot_bytes: Timing::default().snapshot_bytes,
    }
}

/// Binds `n` listeners on loopback ports, so every node knows the seeds before one starts.
pub async fn listeners(n: usize) -> (Vec<TcpListener>, String) {
    let mut ls = Vec::new();
    for _ in 0..n {
        ls.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let seeds: Vec<String> = ls
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    (ls, seeds.join(","))
}

async fn start(listener: TcpListener, seeds: &str, dir: &Path) -> Node {
    start_with(listener, seeds, dir, timing()).await
}

pub async fn start_with(listener: TcpListener, seeds: &str, dir: &Path, timing: Timing) -> Node {
    let listen = listener.local_addr().unwrap().to_string();
    let mut config = NodeConfig::from_seeds(&listen, seeds, dir.to_path_buf(), None).unwrap();
    config.timing = timing;
    Node::start_on(config, listener).await.unwrap()
}

/// Node `id`'s place in the test's vectors.
fn slot(id: u64) -> usize {
    usize::try_from(id - 1).unwrap()
}

/// Waits until every node settled its member id and opened the metadata group (an empty
/// directory's node does so once every seed answered, S-CLU-20).
pub async fn opened(nodes: &[Option<Node>]) {
    for n in nodes.iter().flatten() {
        n.group(METADATA_GROUP).await.unwrap();
    }
}

pub fn metadata(node: &Node) -> GroupStatus {
    node.status()
        .into_iter()
        .find(|g| g.group == METADATA_GROUP)
        .unwrap()
}

/// Polls `cond` every 20 ms until it holds; panics after `within` (real time: these nodes
/// run on real sockets and timers).
#[expect(
    clippy::disallowed_methods,
    reason = "nodes on real sockets and timers: the wait is bounded in real time"
)]
pub async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts three nodes on `dirs` and waits until the metadata group has a leader: the nodes,
/// the seeds, the leader's id.
async fn three_nodes(dirs: &[tempfile::TempDir]) -> (Vec<Option<Node>>, String, u64) {
    let (ls, seeds) = listeners(3).await;
    let mut nodes: Vec<Option<Node>> = Vec::new();
    for (l, d) in ls.into_iter().zip(dirs) {
        nodes.push(Some(start(l, &seeds, d.path()).await));
    }
    opened(&nodes).await;
    until("a leader", Duration::from_secs(5), || {
        leader_of(&nodes).is_some()
    })
    .await;
    let leader = leader_of(&nodes).unwrap();
    (nodes, seeds, leader)
}

/// Waits until every running node applied the metadata group's entry at `index`.
async fn applied_everywhere(nodes: &[Option<Node>], index: u64) {
    until(
        "the entry applied on every node",
        Duration::from_secs(5),
        || {
            nodes
                .iter()
                .flatten()
                .all(|n| metadata(n).applied >= Some(index))
        },
    )
    .await;
}

fn leader_of(nodes: &[Option<Node>]) -> Option<u64> {
    nodes
        .iter()
        .flatten()
        .map(metadata)
        .find(|s| s.state == "leader")
        .map(|s| s.leader.unwrap_or(0))
}

/// S-CLU-8, S-CLU-9: three nodes form the metadata group with no one initializing it by hand;
/// an entry commits on every node; the leader stops and another is elected within 2 s; the
/// old leader restarts on its directory, rejoins and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::disallowed_methods,
    reason = "the failover time is measured in real time (S-CLU-9)"
)]
async fn s_clu_8_three_nodes_form_a_group_and_survive_the_leaders_loss() {
    let _guard = HangGuard::new("s_clu_8_three_nodes_form_a_group_and_survive_the_leaders_loss");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (mut nodes, seeds, leader) = three_nodes(&dirs).await;
    let addrs: Vec<String> = seeds.split(',').map(str::to_owned).collect();
    let all: BTreeSet<u64> = [1, 2, 3].into();
    assert_eq!(metadata(nodes[0].as_ref().unwrap()).members, all);

    let lnode = nodes[slot(leader)].clone().unwrap();
    let group = lnode.group(METADATA_GROUP).await.unwrap();
    let mut live = LiveBroker::new();
    let (p, _) = live.batch(vec![declare_quorum("q", None)], 1_000);
    let index = group.raft.client_write(p).await.unwrap().log_id.index;
    applied_everywhere(&nodes, index).await;
    let committed = group.machine.with(wharf_cluster::Machine::durable_state);
    for n in nodes.iter().flatten() {
        let h = n.group(METADATA_GROUP).await.unwrap();
        assert_eq!(
            h.machine.with(wharf_cluster::Machine::durable_state),
            committed
        );
    }
    let in_sync = metadata(&lnode).in_sync.unwrap();
    assert_eq!(in_sync, all, "every member in sync on the leader");

    // The leader stops; a new one within 2 s.
    lnode.shutdown().await;
    nodes[slot(leader)] = None;
    drop(lnode);
    let stopped = tokio::time::Instant::now();
    until("a new leader", Duration::from_secs(2), || {
        leader_of(&nodes).is_some_and(|l| l != leader)
    })
    .await;
    let took = stopped.elapsed();
    let new_leader = leader_of(&nodes).unwrap();
    let nnode = nodes[slot(new_leader)].clone().unwrap();
    let ngroup = nnode.group(METADATA_GROUP).await.unwrap();
    let (p, _) = live.batch(vec![declare_quorum("r", None)], 2_000);
    let index = ngroup.raft.client_write(p).await.unwrap().log_id.index;
    eprintln!("new leader {new_leader} after {took:?}");

    // The old leader comes back on its directory and port, and catches up.
    let listener = TcpListener::bind(&addrs[slot(leader)]).await.unwrap();
    let back = start(listener, &seeds, dirs[slot(leader)].path()).await;
    until("the old leader caught up", Duration::from_secs(5), || {
        metadata(&back).applied >= Some(index)
    })
    .await;
    let h = back.group(METADATA_GROUP).await.unwrap();
    assert_eq!(
        h.machine.with(wharf_cluster::Machine::durable_state),
        ngroup.machine.with(wharf_cluster::Machine::durable_state)
    );
    let text = wharf_cluster::remote_status(&addrs[slot(new_leader)])
        .await
        .unwrap();
    let (id, groups) = wharf_cluster::status::parse(&text).unwrap();
    assert_eq!(id, new_leader);
    assert_eq!(groups[0].state, "leader");
    back.shutdown().await;
    for n in nodes.iter().flatten() {
        n.shutdown().await;
    }
}

/// S-CLU-50: on the TCP link, a node that does not lead the metadata group answers a
/// proposal sent to it `NotLeader` naming the leader, and proposes through its leader; the
/// entry commits on every node, and the proposing node gets its log id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_50_a_follower_node_proposes_over_the_link() {
    let _guard = HangGuard::new("s_clu_50_a_follower_node_proposes_over_the_link");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (nodes, _, leader) = three_nodes(&dirs).await;
    let follower = nodes
        .iter()
        .flatten()
        .find(|n| n.id() != leader)
        .unwrap()
        .clone();
    let (p, _) = LiveBroker::new().batch(vec![declare_quorum("q", None)], 1_000);
    // Once it has heard the leader (until then it would name nobody)...
    let heard = follower.group(METADATA_GROUP).await.unwrap();
    let mut metrics = heard.raft.metrics();
    tokio::time::timeout(
        Duration::from_secs(20),
        metrics.wait_for(|m| m.current_leader == Some(leader)),
    )
    .await
    .expect("the follower hears the leader")
    .unwrap();
    // ...asked directly, the follower answers that it does not lead, naming the leader.
    let body = wire::propose(&wharf_cluster::Proposal {
        origin: Some(wharf_cluster::Origin { session: 9, seq: 1 }),
        ..p.clone()
    })
    .unwrap();
    let asked = wharf_cluster::net::Peers::new(0)
        .call(
            &follower.addr().to_string(),
            Kind::Propose,
            METADATA_GROUP,
            wire::ANY_MEMBER,
            body,
        )
        .await;
    assert!(
        matches!(
            &asked,
            Err(wharf_cluster::net::CallError::Failed {
                failure: wire::Failure::NotLeader(Some(l)),
                ..
            }) if *l == leader
        ),
        "{asked:?}"
    );
    let log_id = follower
        .propose(
            METADATA_GROUP,
            p.now_ms,
            p.events.to_vec(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(log_id.leader_id.node_id, leader);
    applied_everywhere(&nodes, log_id.index).await;
    for n in nodes.iter().flatten() {
        let h = n.group(METADATA_GROUP).await.unwrap();
        assert_eq!(h.machine.with(|m| m.broker().queue_names("/")), ["q"]);
    }
    for n in nodes.iter().flatten() {
        n.shutdown().await;
    }
}

/// Reads frames until the peer closes; `true` when it closed (EOF or reset) within 2 s.
async fn closes(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .is_ok()
}

/// S-ERR-2: garbage before the hello, a frame length over the bound, and a request whose body
/// does not decode never panic the node: the first two close the connection, the last is
/// answered `BadRequest` on a connection that stays usable; the node answers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_link_refuses_garbage_without_panicking() {
    let _guard = HangGuard::new("the_cluster_link_refuses_garbage_without_panicking");
    let dir = tempfile::tempdir().unwrap();
    let (mut ls, seeds) = listeners(1).await;
    let addr = seeds.clone();
    let node = start(ls.remove(0), &seeds, dir.path()).await;
    // The only seed settles its founding member id and opens the metadata group.
    node.group(METADATA_GROUP).await.unwrap();

    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(closes(&mut s).await, "garbage instead of a hello closes");

    let mut s = TcpStream::connect(&addr).await.unwrap();
    let hello = wire::frame(Kind::Hello, 0, 0, wire::ANY_MEMBER, wire::hello(9).into())
        .unwrap()
        .to_vec();
    s.write_all(&hello).await.unwrap();
    s.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    s.write_all(&[0x10; 64]).await.unwrap();
    assert!(closes(&mut s).await, "a length over the bound closes");

    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let bad = wire::frame(
        Kind::AppendEntries,
        7,
        METADATA_GROUP,
        1,
        vec![0xff; 40].into(),
    )
    .unwrap()
    .to_vec();
    s.write_all(&bad).await.unwrap();
    let reply = read_frame(&mut s, wire::FRAME_BYTES_MAX)
        .await
        .unwrap()
        .unwrap();
    let (header, body) = wire::split(&reply).unwrap();
    assert_eq!((header.kind, header.id), (Kind::Reply, 7));
    assert_eq!(
        wire::decode_reply(body).unwrap(),
        Err(wire::Failure::BadRequest)
    );
    let status = wire::frame(Kind::Status, 8, 0, wire::ANY_MEMBER, Bytes::new())
        .unwrap()
        .to_vec();
    s.write_all(&status).await.unwrap();
    let reply = read_frame(&mut s, wire::FRAME_BYTES_MAX)
        .await
        .unwrap()
        .unwrap();
    let (header, body) = wire::split(&reply).unwrap();
    assert_eq!(header.id, 8);
    let text = String::from_utf8(wire::decode_reply(body).unwrap().unwrap().to_vec()).unwrap();
    assert!(text.starts_with("node 1 "), "{text}");

    // Random frames: each is refused or answered, none panics the node.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    for id in 0..200u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kinds = [
            Kind::AppendEntries,
            Kind::Vote,
            Kind::InstallSnapshot,
            Kind::Probe,
            Kind::AddMember,
            Kind::RemoveMember,
        ];
        let kind = kinds[usize::try_from(seed % 6).unwrap()];
        let body: Vec<u8> = (0..(seed >> 8) % 96)
            .map(|i| (seed >> (i % 56)).to_le_bytes()[0])
            .collect();
        let f = wire::frame(kind, id, (seed >> 3) % 2, (seed >> 5) % 2, body.into())
            .unwrap()
            .to_vec();
        s.write_all(&f).await.unwrap();
        let reply = read_frame(&mut s, wire::FRAME_BYTES_MAX)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wire::split(&reply).unwrap().0.id, id);
    }
    let text = wharf_cluster::remote_status(&addr).await.unwrap();
    assert!(text.starts_with("node 1 "), "{text}");
    node.shutdown().await;
}

/// A node's id is its position in the seeds, from 1, or the id given; a listen address not
/// in the seeds (without an id), a repeated seed, a seed that is not `IP:PORT` and an id
/// outside the list are refused by name.
#[test]
fn node_ids_come_from_the_seed_list() {
    let seeds = "127.0.0.1:7001, 127.0.0.1:7002,127.0.0.1:7003";
    let dir = std::path::PathBuf::from("/nowhere");
    let c = NodeConfig::from_seeds("127.0.0.1:7002", seeds, dir.clone(), None).unwrap();
    assert_eq!((c.id, c.seeds.len()), (2, 3));
    let c = NodeConfig::from_seeds("127.0.0.1:9000", seeds, dir.clone(), Some(3)).unwrap();
    assert_eq!(c.id, 3, "behind a proxy: the id given");
    for (listen, seeds, id, says) in [
        (
            "127.0.0.1:9000",
            seeds,
            None,
            "not one of the cluster seeds",
        ),
        (
            "127.0.0.1:7001",
            "127.0.0.1:7001,127.0.0.1:7001",
            None,
            "listed twice",
        ),
        (
            "127.0.0.1:7001",
            "localhost:7001",
            None,
            "not an IP address and port",
        ),
        ("127.0.0.1:7001", seeds, Some(4), "not a position"),
        ("127.0.0.1:7001", seeds, Some(0), "not a position"),
    ] {
        let e = NodeConfig::from_seeds(listen, seeds, dir.clone(), id)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{listen} in {seeds} as {id:?}: {e}");
    }
}
