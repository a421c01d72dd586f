//! Members on the TCP cluster link, in this process on loopback, real files: a member whose
//! directory is wiped comes back as a new incarnation (S-CLU-20), is refused as the old one
//! (S-CLU-21), catches up from the leader's snapshot and log as a learner and then replaces
//! the old incarnation (S-CLU-22), while the group commits throughout, with every committed
//! entry on the rejoined member; `add_member` / `remove_member` change the voters one at a
//! time (S-CLU-23).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use wharf_broker::{Event, MessageId};
use wharf_cluster::incarnation::slot_of;
use wharf_cluster::net::read_frame;
use wharf_cluster::net::wire::{self, Failure, Kind};
use wharf_cluster::{METADATA_GROUP, Machine, Node, Proposal, Timing};

use crate::commands::{declare_quorum, publish};
use crate::support::{HangGuard, LiveBroker};
use crate::tcp::{listeners, metadata, opened, start_with, timing, until};

/// Snapshots every 50 entries (50 kept behind one), so a member that missed more installs a
/// snapshot before it takes the log.
fn snapshotting() -> Timing {
    Timing {
        snapshot_every: 50,
        ..timing()
    }
}

/// Three nodes on loopback, each with its directory; a node stopped is `None`.
struct Three {
    dirs: Vec<tempfile::TempDir>,
    addrs: Vec<String>,
    seeds: String,
    nodes: Vec<Option<Node>>,
}

impl Three {
    async fn start() -> Three {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let (ls, seeds) = listeners(3).await;
        let addrs = seeds.split(',').map(str::to_owned).collect();
        let mut nodes = Vec::new();
        for (l, d) in ls.into_iter().zip(&dirs) {
            nodes.push(Some(start_with(l, &seeds, d.path(), snapshotting()).await));
        }
        opened(&nodes).await;
        let three = Three {
            dirs,
            addrs,
            seeds,
            nodes,
        };
        until(
            "every node following one leader",
            Duration::from_secs(10),
            || {
                let leader = three.leader();
                leader.is_some()
                    && three
                        .nodes
                        .iter()
                        .flatten()
                        .all(|n| metadata(n).leader == leader)
            },
        )
        .await;
        three
    }

    /// The slot (1..=3) of the node that leads the metadata group.
    fn leader(&self) -> Option<u64> {
        self.nodes
            .iter()
            .flatten()
            .find(|n| metadata(n).state == "leader")
            .map(Node::id)
    }

    fn node(&self, slot: u64) -> &Node {
        self.nodes[usize::try_from(slot - 1).unwrap()]
            .as_ref()
            .unwrap()
    }

    /// Stops node `slot` and wipes its directory.
    async fn stop_and_wipe(&mut self, slot: u64) {
        let i = usize::try_from(slot - 1).unwrap();
        let node = self.nodes[i].take().unwrap();
        node.shutdown().await;
        drop(node);
        let dir = self.dirs[i].path();
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::create_dir(dir).unwrap();
    }

    /// Starts node `slot` again on its address and directory.
    async fn restart(&mut self, slot: u64) -> Node {
        let i = usize::try_from(slot - 1).unwrap();
        let listener = TcpListener::bind(&self.addrs[i]).await.unwrap();
        let node = start_with(listener, &self.seeds, self.dirs[i].path(), snapshotting()).await;
        self.nodes[i] = Some(node.clone());
        node
    }

    fn others(&self, slot: u64) -> Vec<Node> {
        self.nodes
            .iter()
            .flatten()
            .filter(|n| n.id() != slot)
            .cloned()
            .collect()
    }

    async fn shutdown(self) {
        for n in self.nodes.iter().flatten() {
            n.shutdown().await;
        }
    }
}

/// What the writer committed: the message id of every publish whose entry committed, and the
/// entry's index.
#[derive(Default)]
struct Confirmed {
    ids: Vec<MessageId>,
    last_index: u64,
}

/// The message a publish proposal carries.
fn published(p: &Proposal) -> MessageId {
    p.events
        .iter()
        .find_map(|e| match e {
            Event::Published { message, .. } => Some(message.message.id),
            _ => None,
        })
        .unwrap()
}

/// Proposes `proposals` in order, each to whichever of `nodes` leads at the time (skipped
/// when its write fails: it was never confirmed), recording what committed.
async fn write(nodes: Vec<Node>, proposals: Vec<Proposal>, confirmed: Arc<Mutex<Confirmed>>) {
    for p in proposals {
        let mut leader = None;
        until(
            "a leader among the writer's nodes",
            Duration::from_secs(10),
            || {
                leader = nodes
                    .iter()
                    .find(|n| metadata(n).state == "leader")
                    .cloned();
                leader.is_some()
            },
        )
        .await;
        let leader = leader.unwrap();
        let group = leader.group(METADATA_GROUP).await.unwrap();
        let id = published(&p);
        if let Ok(resp) = group.raft.client_write(p).await {
            let mut c = confirmed.lock().unwrap();
            c.ids.push(id);
            c.last_index = c.last_index.max(resp.log_id.index);
        }
    }
}

/// Every message of queue `q` on `node`'s committed state.
async fn queued(node: &Node) -> BTreeSet<MessageId> {
    let group = node.group(METADATA_GROUP).await.unwrap();
    group.machine.with(|m: &Machine| {
        m.durable_state()
            .queues
            .iter()
            .filter(|(q, _)| q.name == "q")
            .flat_map(|(_, msgs)| msgs.iter().map(|m| m.id))
            .collect()
    })
}

/// Commits the queue's declaration and `n` publishes through the leader; returns the live
/// broker for more.
async fn fill(three: &Three, n: u64) -> LiveBroker {
    let mut live = LiveBroker::new();
    let leader = three.node(three.leader().unwrap());
    let group = leader.group(METADATA_GROUP).await.unwrap();
    let (p, _) = live.batch(vec![declare_quorum("q", None)], 1_000);
    group.raft.client_write(p).await.unwrap();
    for i in 0..n {
        let (p, _) = live.batch(vec![publish("q", &format!("m{i}"), None)], 2_000 + i);
        group.raft.client_write(p).await.unwrap();
    }
    live
}

fn proposals(live: &mut LiveBroker, from: u64, n: u64) -> Vec<Proposal> {
    (from..from + n)
        .map(|i| {
            live.batch(vec![publish("q", &format!("m{i}"), None)], 10_000 + i)
                .0
        })
        .collect()
}

/// The scenario of S-CLU-20..22 for the node chosen by `pick` (given the leader's slot):
/// committed entries; the node stopped and its directory wiped; more entries commit while it
/// is away (its log purged behind a snapshot on the others); it restarts empty, settles a new
/// member id, is refused as the old one, catches up as a learner and replaces the old voter,
/// while a writer keeps committing; afterwards every member holds every confirmed message
/// and the same committed state.
async fn a_wiped_member_rejoins(pick: impl Fn(u64) -> u64) {
    let mut three = Three::start().await;
    let mut live = fill(&three, 120).await;
    let wiped = pick(three.leader().unwrap());
    let old_member = three.node(wiped).group(METADATA_GROUP).await.unwrap().node;
    assert_eq!(
        old_member, wiped,
        "the founding incarnation's id is its slot"
    );
    three.stop_and_wipe(wiped).await;

    // The two others commit on their own, and purge their logs behind a snapshot.
    let others = three.others(wiped);
    let confirmed = Arc::new(Mutex::new(Confirmed::default()));
    write(
        others.clone(),
        proposals(&mut live, 200, 150),
        Arc::clone(&confirmed),
    )
    .await;
    let before = confirmed.lock().unwrap().ids.len();
    assert!(
        before > 100,
        "the two others commit without the third: {before}"
    );
    for n in &others {
        let purged = n
            .group(METADATA_GROUP)
            .await
            .unwrap()
            .raft
            .metrics()
            .borrow()
            .purged;
        assert!(
            purged.is_some(),
            "node {}: log purged behind a snapshot",
            n.id()
        );
    }

    // The wiped node comes back empty, while a writer goes on.
    let writer = tokio::spawn(write(
        others.clone(),
        proposals(&mut live, 400, 400),
        Arc::clone(&confirmed),
    ));
    let back = three.restart(wiped).await;
    let member = back.member().await;
    assert_ne!(member, old_member, "a new incarnation (S-CLU-20)");
    assert_eq!(slot_of(member), wiped);
    refuses_the_old_incarnation(
        &three.addrs[usize::try_from(wiped - 1).unwrap()],
        old_member,
    )
    .await;
    until(
        "the new incarnation a voter in place of the old",
        Duration::from_secs(20),
        || {
            others.iter().any(|n| {
                let s = metadata(n);
                s.state == "leader"
                    && s.members.contains(&member)
                    && !s.members.contains(&old_member)
            })
        },
    )
    .await;
    let during = confirmed.lock().unwrap().ids.len();
    writer.await.unwrap();
    let (ids, target) = {
        let c = confirmed.lock().unwrap();
        assert!(
            c.ids.len() > during || during > before,
            "the group kept committing while the member rejoined"
        );
        let ids: BTreeSet<MessageId> = c.ids.iter().copied().collect();
        (ids, c.last_index)
    };
    every_member_holds(&three, &back, &ids, target).await;
    three.shutdown().await;
}

/// Every member applied the entries through `target`, the rejoined `back` holds every
/// message of `ids` (caught up from a snapshot), and every member's committed state is the
/// same.
async fn every_member_holds(three: &Three, back: &Node, ids: &BTreeSet<MessageId>, target: u64) {
    until(
        "every member applied every confirmed entry",
        Duration::from_secs(20),
        || {
            three
                .nodes
                .iter()
                .flatten()
                .all(|n| metadata(n).applied >= Some(target))
        },
    )
    .await;
    let on_back = queued(back).await;
    assert!(
        ids.is_subset(&on_back),
        "no confirmed message lost on the rejoined member"
    );
    let group = back.group(METADATA_GROUP).await.unwrap();
    let snapshot = group.raft.metrics().borrow().snapshot;
    assert!(snapshot.is_some(), "it caught up from a snapshot");
    let expected = group.machine.with(Machine::durable_state);
    for n in three.nodes.iter().flatten() {
        let g = n.group(METADATA_GROUP).await.unwrap();
        assert_eq!(
            g.machine.with(Machine::durable_state),
            expected,
            "node {}: the same committed state",
            n.id()
        );
    }
}

/// S-CLU-21: requests for the old incarnation of the node at `addr` (a vote, an append) are
/// refused, never answered as that member.
async fn refuses_the_old_incarnation(addr: &str, old: u64) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let hello = wire::frame(Kind::Hello, 0, 0, wire::ANY_MEMBER, wire::hello(9).into())
        .unwrap()
        .to_vec();
    s.write_all(&hello).await.unwrap();
    let vote = openraft::raft::VoteRequest {
        vote: wharf_cluster::Vote::new(1_000, 2),
        last_log_id: None,
    };
    let append = openraft::raft::AppendEntriesRequest {
        vote: wharf_cluster::Vote::new(1_000, 2),
        prev_log_id: None,
        leader_commit: None,
        entries: Vec::new(),
    };
    let (append, _) = wire::append_entries(&append).unwrap();
    for (id, kind, body) in [
        (1, Kind::Vote, wire::vote(&vote)),
        (2, Kind::AppendEntries, append),
    ] {
        let f = wire::frame(kind, id, METADATA_GROUP, old, body.into())
            .unwrap()
            .to_vec();
        s.write_all(&f).await.unwrap();
        let reply = read_frame(&mut s, wire::FRAME_BYTES_MAX)
            .await
            .unwrap()
            .unwrap();
        let (header, body) = wire::split(&reply).unwrap();
        assert_eq!(header.id, id);
        assert_eq!(
            wire::decode_reply(body).unwrap(),
            Err(Failure::WrongMember),
            "{kind:?} for the old incarnation"
        );
    }
}

/// S-CLU-20, S-CLU-21, S-CLU-22: a follower's directory wiped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_22_a_wiped_follower_rejoins_and_catches_up() {
    let _guard = HangGuard::new("s_clu_22_a_wiped_follower_rejoins_and_catches_up");
    a_wiped_member_rejoins(|leader| leader % 3 + 1).await;
}

/// S-CLU-20, S-CLU-21, S-CLU-22: the leader's directory wiped: the others elect a leader
/// among themselves, which lets the wiped node's new incarnation in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_22_a_wiped_leader_rejoins_and_catches_up() {
    let _guard = HangGuard::new("s_clu_22_a_wiped_leader_rejoins_and_catches_up");
    a_wiped_member_rejoins(|leader| leader).await;
}

/// S-CLU-23: `remove_member` sent to a follower is forwarded to the leader and removes the
/// member (the leader does not let it back by itself); removing it again, or a member that
/// never was, is refused with the reason; `add_member` brings it back as a voter; adding it
/// again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_23_members_are_removed_and_added_one_at_a_time() {
    let _guard = HangGuard::new("s_clu_23_members_are_removed_and_added_one_at_a_time");
    let three = Three::start().await;
    let leader = three.leader().unwrap();
    let follower = leader % 3 + 1;
    let other = follower % 3 + 1;
    let ask = &three.addrs[usize::try_from(other - 1).unwrap()];
    let text = wharf_cluster::remote_remove_member(ask, METADATA_GROUP, follower)
        .await
        .unwrap();
    assert!(text.contains("removed"), "{text}");
    let voters = metadata(three.node(leader)).members;
    assert_eq!(voters, [leader, other].into_iter().collect::<BTreeSet<_>>());
    let refused = |e: wharf_cluster::net::CallError| match e {
        wharf_cluster::net::CallError::Failed {
            failure: Failure::Refused(why),
            ..
        } => why,
        e => panic!("not a refusal: {e}"),
    };
    let again = wharf_cluster::remote_remove_member(ask, METADATA_GROUP, follower).await;
    assert!(refused(again.unwrap_err()).contains("not a member"));
    let never = wharf_cluster::remote_remove_member(ask, METADATA_GROUP, 77).await;
    assert!(refused(never.unwrap_err()).contains("not a member"));

    // The leader's watch leaves a removed slot alone: a pass of it (which probes every seed,
    // the removed one running) proposes nothing.
    let last_log = metadata(three.node(leader)).last_log;
    three.node(leader).watch_members(METADATA_GROUP).await;
    assert_eq!(metadata(three.node(leader)).members, voters);
    assert_eq!(
        metadata(three.node(leader)).last_log,
        last_log,
        "no change proposed"
    );

    let follower_addr = &three.addrs[usize::try_from(follower - 1).unwrap()];
    let text = wharf_cluster::remote_add_member(ask, METADATA_GROUP, follower_addr)
        .await
        .unwrap();
    assert!(text.contains("is a voter"), "{text}");
    let all: BTreeSet<u64> = [1, 2, 3].into();
    until("three voters again", Duration::from_secs(5), || {
        metadata(three.node(leader)).members == all
    })
    .await;
    let twice = wharf_cluster::remote_add_member(ask, METADATA_GROUP, follower_addr).await;
    assert!(refused(twice.unwrap_err()).contains("a voter already"));
    let stranger = wharf_cluster::remote_add_member(ask, METADATA_GROUP, "127.0.0.1:1").await;
    assert!(refused(stranger.unwrap_err()).contains("not one of the cluster seeds"));
    three.shutdown().await;
}

/// S-CLU-20: a directory recording another seed's member id is refused by name; a directory
/// from before member files (group directories, no member file) keeps its founding id and
/// records it; a recorded new incarnation is kept across restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_20_the_member_file_decides_the_member_id() {
    let _guard = HangGuard::new("s_clu_20_the_member_file_decides_the_member_id");
    let (mut ls, seeds) = listeners(1).await;
    let listen = ls[0].local_addr().unwrap().to_string();
    let config = |dir: &std::path::Path| {
        let mut c = wharf_cluster::NodeConfig::from_seeds(&listen, &seeds, dir.to_path_buf(), None)
            .unwrap();
        c.timing = timing();
        c
    };
    let disk = wharf_wal::FileStorage;

    let other = tempfile::tempdir().unwrap();
    wharf_cluster::incarnation::write(&disk, other.path(), 0x0005_0000_0000_0002, 2).unwrap();
    let e = Node::start_on(config(other.path()), ls.remove(0))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("of seed 2, not of seed 1"), "{e}");

    let legacy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(legacy.path().join("group-0")).unwrap();
    let listener = TcpListener::bind(&listen).await.unwrap();
    let node = Node::start_on(config(legacy.path()), listener)
        .await
        .unwrap();
    assert_eq!(node.member().await, 1, "the founding id");
    node.shutdown().await;
    drop(node);
    let recorded = wharf_cluster::incarnation::read(&disk, legacy.path()).unwrap();
    assert_eq!(recorded, Some((1, 1)));

    let wiped = tempfile::tempdir().unwrap();
    let member = wharf_cluster::incarnation::new_incarnation(1);
    wharf_cluster::incarnation::write(&disk, wiped.path(), member, 1).unwrap();
    let listener = TcpListener::bind(&listen).await.unwrap();
    let node = Node::start_on(config(wiped.path()), listener)
        .await
        .unwrap();
    assert_eq!(node.member().await, member, "the recorded incarnation");
    assert_eq!(
        node.group(METADATA_GROUP)
            .await
            .unwrap()
            .raft
            .metrics()
            .borrow()
            .id,
        member,
        "its Raft id"
    );
    node.shutdown().await;
}
