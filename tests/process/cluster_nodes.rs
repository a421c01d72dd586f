//! Three `wharf` processes form a cluster on loopback, behind the fault-injecting proxy
//! (tests/support/cluster.rs): the metadata group forms by itself (S-CLU-8), a killed leader
//! is replaced within 2 s and the restarted node rejoins and catches up (S-CLU-9), a leader
//! cut off from the others is replaced and steps down once healed. What a node says comes from
//! `wharfctl cluster_status`.

use std::collections::BTreeSet;
use std::time::Duration;

use wharf_cluster::incarnation::slot_of;

use crate::support::cluster::{Cluster, now};

/// The metadata group.
const META: u64 = 0;

/// Waits until node `leader` sees nodes 1, 2 and 3 in sync with its log, each by one member
/// id: the founding one, or a new incarnation's (a seed that answered after the group formed
/// joins as a new member, S-CLU-20), which names the same seed slot.
async fn all_in_sync(c: &Cluster, leader: u64, what: &str) {
    let all: BTreeSet<u64> = [1, 2, 3].into();
    c.until(leader, META, what, Duration::from_secs(20), |v| {
        v.in_sync.as_ref().is_some_and(|ids| {
            ids.len() == all.len()
                && ids.iter().map(|id| slot_of(*id)).collect::<BTreeSet<_>>() == all
        })
    })
    .await;
}

/// Waits until node `old`, a deposed leader, follows another leader in `term` or later.
async fn follows_a_new_leader(c: &Cluster, old: u64, term: u64) {
    c.until(
        old,
        META,
        "following the new leader",
        Duration::from_secs(10),
        |v| v.state == "follower" && v.term >= term && v.leader.is_some_and(|l| l != old),
    )
    .await;
}

/// S-CLU-8, S-CLU-9: three nodes form the metadata group with every node a member and in
/// sync; SIGKILL of the leader: another node leads within 2 s; the killed node restarted on
/// its directory rejoins, catches up with the new leader's log and follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_9_a_killed_leader_is_replaced_and_rejoins() {
    let mut c = Cluster::start(3).await;
    let (leader, view) = c.leader(META, &[], 0, Duration::from_secs(20)).await;
    let all: BTreeSet<u64> = [1, 2, 3].into();
    assert_eq!(view.members, all);
    all_in_sync(&c, leader, "every member in sync").await;

    c.kill(leader);
    let killed = now();
    let (next, view) = c
        .leader(META, &[leader], view.term, Duration::from_secs(2))
        .await;
    let took = killed.elapsed();
    eprintln!(
        "node {next} leads term {} {took:?} after the SIGKILL of node {leader}",
        view.term
    );
    let target = view.last_log.unwrap();

    c.start_node(leader);
    let back = c
        .until(
            leader,
            META,
            "caught up with the new leader",
            Duration::from_secs(10),
            |v| v.applied >= Some(target) && v.leader == Some(next),
        )
        .await;
    assert_eq!(back.state, "follower");
    all_in_sync(&c, next, "the restarted node in sync").await;
}

/// S-CLU-9: the leader cut off from both others (its process still running) is replaced by
/// one of them; healed, it follows the new leader in its higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_9_a_partitioned_leader_is_replaced_and_follows_once_healed() {
    let c = Cluster::start(3).await;
    let (leader, view) = c.leader(META, &[], 0, Duration::from_secs(20)).await;
    c.proxy().partition(&[leader], c.size());
    let (_, new) = c
        .leader(META, &[leader], view.term, Duration::from_secs(5))
        .await;
    c.proxy().heal();
    follows_a_new_leader(&c, leader, new.term).await;
}

/// `wharfctl cluster_status` exits as `rabbitmqctl` does: 69 when no node answers at the
/// address, 64 for an argument it does not take.
#[test]
fn cluster_status_exit_codes() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_wharfctl"))
            .args(args)
            .output()
            .unwrap()
    };
    // A port just released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = run(&["cluster_status", "--cluster", &port.to_string()]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("Error: "));
    let out = run(&["cluster_status", "--bogus"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

/// S-CLU-9: the leader paused (SIGSTOP, its connections open) is replaced; resumed (SIGCONT),
/// it follows the new leader in its higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_9_a_paused_leader_is_replaced_and_follows_once_resumed() {
    let mut c = Cluster::start(3).await;
    let (leader, view) = c.leader(META, &[], 0, Duration::from_secs(20)).await;
    c.pause(leader);
    let (_, new) = c
        .leader(META, &[leader], view.term, Duration::from_secs(5))
        .await;
    c.resume(leader);
    follows_a_new_leader(&c, leader, new.term).await;
}

/// The proxy's delays and drops, set before the nodes first meet: with 20 ms on every link and
/// one chunk in 20 breaking its connection, the three nodes still form the group and every
/// member gets in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_forms_over_slow_and_lossy_links() {
    let mut c = Cluster::prepare(3).await;
    for (a, b) in [(1, 2), (1, 3), (2, 3)] {
        c.proxy().delay(a, b, 20);
        c.proxy().drop_one_in(a, b, 20);
    }
    c.start_all();
    let (leader, _) = c.leader(META, &[], 0, Duration::from_secs(20)).await;
    all_in_sync(&c, leader, "every member in sync").await;
    assert!(c.proxy().dropped() > 0, "the drops broke connections");
}
