//! A member's committed state survives its restart (S-CLU-7): the snapshot file holds what
//! the purged log held (whose segments are deleted), and the committed entries after it are
//! re-applied from the WAL before any leader is heard. The snapshot file's bytes are storage-format.md's ("Raft
//! snapshot file").

use std::collections::{BTreeMap, BTreeSet};

use openraft::storage::SnapshotMeta;
use openraft::{BasicNode, CommittedLeaderId};
use wharf_cluster::{LogId, Membership, StoredMembership};
use wharf_cluster::{incarnation, snapshot_file};

use crate::commands::{declare_quorum, publish};
use crate::support::{Cluster, HangGuard, LiveBroker, segment_files};

/// Member 2 snapshots and purges its log, then more entries commit; restarted while cut off
/// (so no leader can help it), it holds the same committed state at once, from its snapshot
/// file and the committed entries after it; healed, it follows the leader again.
async fn restarted_member_keeps_its_committed_state(power_loss: bool) {
    let mut c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(vec![declare_quorum("q", None)], 1_000);
    c.raft(1).client_write(p).await.unwrap();
    let mut last = 0;
    // Bodies of 6 KiB: the three entries fill more than one 16 KiB segment.
    for i in 0..3 {
        let body = format!("m{i}-{}", "x".repeat(6 * 1024));
        let (p, _) = leader.batch(vec![publish("q", &body, None)], 2_000 + i);
        last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    }
    c.settle(1).await;
    let segments_before = segment_files(&c.members[&2].disk);
    assert!(segments_before > 1, "{segments_before} segments");
    c.raft(2).trigger().snapshot().await.unwrap();
    c.until(2, "its snapshot", |m| {
        m.snapshot.map(|s| s.index) == Some(last)
    })
    .await;
    c.raft(2).trigger().purge_log(last).await.unwrap();
    c.until(2, "its purge", |m| m.purged.map(|p| p.index) == Some(last))
        .await;
    // The deletions run on a blocking thread, off openraft's core task.
    let mut segments_after = segment_files(&c.members[&2].disk);
    for _ in 0..500 {
        if segments_after < segments_before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        segments_after = segment_files(&c.members[&2].disk);
    }
    assert!(
        segments_after < segments_before,
        "the purge reclaimed segments: {segments_before} then {segments_after}"
    );
    for i in 3..5 {
        let (p, _) = leader.batch(vec![publish("q", &format!("m{i}"), None)], 3_000 + i);
        last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    }
    c.settle(1).await;
    let before = c.committed(2);
    assert_eq!(before.queues[0].1.len(), 5);

    c.isolate(2);
    c.restart(2, power_loss).await;
    let snap = c.members[&2]
        .machine
        .with(wharf_cluster::Machine::snapshot_last_log_id);
    assert!(
        snap.is_some_and(|s| s.index < last),
        "started from its snapshot file: {snap:?}"
    );
    if power_loss {
        // The committed mark after the snapshot may not have been synced: what the member
        // re-applies alone is at least the snapshot's state; the leader brings the rest.
        let applied = c.members[&2]
            .machine
            .with(wharf_cluster::Machine::last_applied);
        assert!(applied >= snap, "{applied:?} before its snapshot {snap:?}");
    } else {
        c.wait_applied(2, last).await;
        assert_eq!(
            c.committed(2),
            before,
            "the committed state after the restart"
        );
    }

    c.heal(2);
    let (p, _) = leader.batch(vec![publish("q", "after", None)], 4_000);
    let index = c.raft(1).client_write(p).await.unwrap().log_id.index;
    c.raft(1).trigger().heartbeat().await.unwrap();
    c.wait_applied(2, index).await;
    assert_eq!(c.committed(2), c.committed(1));
    assert_eq!(c.committed(2).queues[0].1.len(), 6);
}

/// S-CLU-7, a clean stop.
#[tokio::test(start_paused = true)]
async fn s_clu_7_a_restarted_member_keeps_its_committed_state() {
    let _guard = HangGuard::new("s_clu_7_a_restarted_member_keeps_its_committed_state");
    restarted_member_keeps_its_committed_state(false).await;
}

/// S-CLU-7, a power loss: the snapshot file was synced before openraft purged the log behind
/// it, so the member starts from it, and the leader brings what it misses.
#[tokio::test(start_paused = true)]
async fn s_clu_7_a_member_keeps_its_committed_state_through_a_power_loss() {
    let _guard = HangGuard::new("s_clu_7_a_member_keeps_its_committed_state_through_a_power_loss");
    restarted_member_keeps_its_committed_state(true).await;
}

fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

/// storage-format.md, "Raft snapshot file": the golden bytes of a small file; it decodes back
/// to itself; every cut and every flipped byte is refused without a panic (the CRC covers all
/// after the header's CRC field; S-ERR-2).
#[test]
fn raft_snapshot_file_matches_the_documented_bytes() {
    let nodes: BTreeMap<u64, BasicNode> = [(1, BasicNode { addr: "a".into() })].into();
    let membership = Membership::new(vec![BTreeSet::from([1])], nodes);
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(2, 1, 9)),
        last_membership: StoredMembership::new(Some(log_id(1, 1, 0)), membership),
        snapshot_id: "9-1".into(),
    };
    let file = snapshot_file::encode(&meta, b"SNAP").unwrap();
    let body = "5a000000 \
         01 0200000000000000 0100000000000000 0900000000000000 \
         01 0100000000000000 0100000000000000 0000000000000000 \
         01000000 01000000 0100000000000000 01000000 0100000000000000 01000000 61 \
         03000000 392d31 \
         534e4150"
        .replace(' ', "");
    let body_bytes: Vec<u8> = (0..body.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&body[i..i + 2], 16).unwrap())
        .collect();
    let crc = crc32fast::hash(&body_bytes).to_le_bytes();
    let mut want = b"wharfrsf".to_vec();
    want.extend_from_slice(&[1, 0]);
    want.extend_from_slice(&crc);
    want.extend_from_slice(&body_bytes);
    assert_eq!(file, want);
    let (back, bytes) = snapshot_file::decode(&file).unwrap();
    assert_eq!(back, meta);
    assert_eq!(bytes, b"SNAP");
    for cut in 0..file.len() {
        assert!(snapshot_file::decode(&file[..cut]).is_err(), "cut at {cut}");
    }
    for at in 0..file.len() {
        let mut damaged = file.clone();
        damaged[at] ^= 0x10;
        assert!(snapshot_file::decode(&damaged).is_err(), "flip at {at}");
    }
}

/// storage-format.md, "Member file": the documented bytes of a new incarnation of slot 2;
/// they decode back; any one byte changed, or the file cut, is refused (S-CLU-20, S-ERR-2).
#[test]
fn member_file_matches_the_documented_bytes() {
    let member = 0x0001_0000_0000_0002;
    let file = incarnation::encode(member, 2);
    let documented =
        "77686172666d6272 0100 0200000000000100 0200000000000000 e0fde3d4".replace(' ', "");
    let documented: Vec<u8> = (0..documented.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&documented[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(file, documented);
    assert_eq!(file.len(), incarnation::MEMBER_FILE_BYTES);
    assert_eq!(incarnation::decode(&file).unwrap(), (member, 2));
    assert_eq!(incarnation::slot_of(member), 2);
    for i in 0..file.len() {
        let mut bad = file.clone();
        bad[i] ^= 0x40;
        assert!(incarnation::decode(&bad).is_err(), "byte {i} changed");
    }
    assert!(incarnation::decode(&file[..file.len() - 1]).is_err());
    // A founding id is its slot; a new incarnation keeps the slot and is never the founding.
    let fresh = incarnation::new_incarnation(3);
    assert_eq!(incarnation::slot_of(fresh), 3);
    assert_ne!(fresh, 3);

    let dir = tempfile::tempdir().unwrap();
    let disk = wharf_wal::FileStorage;
    assert_eq!(incarnation::read(&disk, dir.path()).unwrap(), None);
    incarnation::write(&disk, dir.path(), fresh, 3).unwrap();
    assert_eq!(
        incarnation::read(&disk, dir.path()).unwrap(),
        Some((fresh, 3))
    );
}

/// S-CLU-7, issue 17: a member restarted before it heard that the last entry of its log
/// committed (the leader's commit did not reach it, and the leader does not send it again)
/// re-applies alone only what its committed mark says, and the rest once the leader speaks to
/// it: a running cluster's heartbeat, which `Cluster::restart` sends (this cluster runs no
/// ticks). Without that heartbeat the member never applied the entry: the void test's hang.
#[tokio::test(start_paused = true)]
async fn s_clu_7_a_member_restarted_before_it_heard_a_commit_applies_the_entry_once_the_leader_speaks()
 {
    let _guard = HangGuard::new(
        "s_clu_7_a_member_restarted_before_it_heard_a_commit_applies_the_entry_once_the_leader_speaks",
    );
    let mut c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(vec![declare_quorum("q", None)], 1_000);
    let declared = c.raft(1).client_write(p).await.unwrap().log_id.index;
    c.settle(1).await;

    // Member 2 away, the entry commits on member 3's answer; member 3 is cut off right after
    // it answers, so the commit that follows does not reach it.
    c.isolate(2);
    c.router.cut_after_append(3);
    let (p, _) = leader.batch(vec![publish("q", "m", None)], 2_000);
    let last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    assert!(c.router.is_cut(3), "member 3 answered the append");
    let held = c.members[&3].log.entries(last..last + 1).unwrap();
    assert_eq!(held.len(), 1, "member 3's log holds the entry");
    let applied = c.members[&3]
        .machine
        .with(wharf_cluster::Machine::last_applied)
        .map(|l| l.index);
    assert!(
        applied.is_some_and(|a| a >= declared && a < last),
        "member 3 does not know the entry committed: applied {applied:?}"
    );

    c.heal(2);
    c.heal(3);
    c.restart(3, false).await;
    c.wait_applied(3, last).await;
    assert_eq!(c.committed(3), leader.broker.durable_state());
}
