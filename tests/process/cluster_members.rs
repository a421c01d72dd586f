//! Three `wharf` processes behind the fault-injecting proxy (tests/support/cluster.rs): a node
//! killed (SIGKILL) and restarted on a wiped data directory comes back as a new incarnation and
//! replaces its old self in the metadata group, caught up with the leader (S-CLU-20, 22), a
//! follower's and the leader's alike; `wharfctl remove_member` / `add_member` change the
//! voters one at a time (S-CLU-23). What a node says comes from `wharfctl cluster_status`.
//! (No writer runs in these processes yet: what commits is the group's own entries, a new
//! leader's and each membership change.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeSet;
use std::time::Duration;

use wharf_cluster::incarnation::slot_of;

use crate::support::cluster::Cluster;

/// The metadata group.
const META: u64 = 0;

/// Waits until node `leader` leads with three voters, one per slot, all in sync, one of them
/// of slot `slot` but not `old`; returns that voter's id.
async fn replaced(c: &Cluster, leader: u64, slot: u64, old: u64) -> u64 {
    let v = c
        .until(
            leader,
            META,
            "the new incarnation a voter in sync, in place of the old",
            Duration::from_secs(30),
            |v| {
                let slots: BTreeSet<u64> = v.members.iter().map(|m| slot_of(*m)).collect();
                v.state == "leader"
                    && v.members.len() == 3
                    && slots == [1, 2, 3].into()
                    && !v.members.contains(&old)
                    && v.in_sync.as_ref() == Some(&v.members)
            },
        )
        .await;
    let new = v.members.iter().copied().find(|m| slot_of(*m) == slot);
    new.unwrap()
}

/// The rejoined node `slot` applied what the leader had when it was let in.
async fn caught_up(c: &Cluster, slot: u64, leader: u64) {
    let target = c.view(leader, META).unwrap().last_log;
    c.until(
        slot,
        META,
        "the rejoined node caught up",
        Duration::from_secs(10),
        |v| v.applied >= target && v.state == "follower",
    )
    .await;
}

/// S-CLU-20, S-CLU-22: SIGKILL of a follower, its data directory wiped, restarted: a new
/// incarnation replaces it and catches up; then the same for the leader (the other two elect
/// a leader, which lets the wiped node back in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_22_a_wiped_follower_and_a_wiped_leader_rejoin() {
    let mut c = Cluster::start(3).await;
    let (leader, view) = c.leader(META, &[], 0, Duration::from_secs(20)).await;
    let all: BTreeSet<u64> = [1, 2, 3].into();
    assert_eq!(view.members, all);

    let follower = leader % 3 + 1;
    c.kill(follower);
    c.wipe(follower);
    c.start_node(follower);
    let new = replaced(&c, leader, follower, follower).await;
    assert_ne!(new, follower, "a new member id");
    caught_up(&c, follower, leader).await;

    c.kill(leader);
    c.wipe(leader);
    let (next, _) = c
        .leader(META, &[leader], view.term, Duration::from_secs(10))
        .await;
    c.start_node(leader);
    let again = replaced(&c, next, leader, leader).await;
    assert_ne!(again, leader);
    caught_up(&c, leader, next).await;
}

/// Runs `wharfctl` with `args`; its exit code and output.
fn wharfctl(args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wharfctl"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// S-CLU-23: `wharfctl remove_member` (and its alias `forget_cluster_node`) sent to any node
/// removes a voter; `cluster_status` shows two; removing it again is refused (exit 70);
/// `wharfctl add_member` brings it back as a voter in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_23_wharfctl_removes_and_adds_a_member() {
    let c = Cluster::start(3).await;
    let (leader, _) = c.leader(META, &[], 0, Duration::from_secs(20)).await;
    let follower = leader % 3 + 1;
    let other = follower % 3 + 1;
    c.until(
        other,
        META,
        "following the leader",
        Duration::from_secs(10),
        |v| v.leader == Some(leader),
    )
    .await;
    let ask = c.listen(other);
    let id = follower.to_string();
    let (code, text) =
        tokio::task::block_in_place(|| wharfctl(&["forget_cluster_node", &id, "--cluster", &ask]));
    assert_eq!(code, Some(0), "{text}");
    let two: BTreeSet<u64> = [leader, other].into();
    c.until(leader, META, "two voters", Duration::from_secs(10), |v| {
        v.members == two
    })
    .await;
    let (code, text) =
        tokio::task::block_in_place(|| wharfctl(&["remove_member", &id, "--cluster", &ask]));
    assert_eq!(code, Some(70), "{text}");
    assert!(text.contains("not a member"), "{text}");

    let seed = c.seed(follower);
    let (code, text) =
        tokio::task::block_in_place(|| wharfctl(&["add_member", &seed, "--cluster", &ask]));
    assert_eq!(code, Some(0), "{text}");
    let all: BTreeSet<u64> = [1, 2, 3].into();
    c.until(
        leader,
        META,
        "three voters in sync",
        Duration::from_secs(10),
        |v| v.members == all && v.in_sync.as_ref() == Some(&all),
    )
    .await;
    let (code, _) = tokio::task::block_in_place(|| wharfctl(&["add_member", "--cluster", &ask]));
    assert_eq!(code, Some(64), "add_member without an address");
}
