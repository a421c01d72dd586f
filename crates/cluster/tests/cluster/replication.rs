//! Three members on the in-memory network: elections, majority commits, truncation of a
//! deposed leader's unconfirmed entries, catch-up by snapshot (S-CLU-1 to S-CLU-4). The
//! leader's broker decisions are made by a live broker, as the broker task will make them,
//! and each member's committed broker is compared with it.

use openraft::EntryPayload;
use openraft::RaftLogReader;

use crate::commands::{declare_quorum, get, open, publish};
use crate::support::{Cluster, HangGuard, LiveBroker, open_log};

/// S-CLU-1: three members elect one leader; an entry is confirmed once a majority holds it
/// (the leader and one follower, the third cut off), and the third catches up when it
/// returns.
#[tokio::test(start_paused = true)]
async fn s_clu_1_three_members_elect_a_leader_and_commit_on_a_majority() {
    let _guard = HangGuard::new("s_clu_1_three_members_elect_a_leader_and_commit_on_a_majority");
    let c = Cluster::start(3).await;
    c.raft(1).trigger().heartbeat().await.unwrap();
    for id in [2, 3] {
        c.until(id, "member 1 as leader", |m| m.current_leader == Some(1))
            .await;
    }

    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(
        vec![declare_quorum("q", None), publish("q", "a", None)],
        1_000,
    );
    let first = c.raft(1).client_write(p).await.unwrap();
    assert_eq!(first.data.events, 2, "a queue and a message");
    for id in [1, 2, 3] {
        c.wait_applied(id, first.log_id.index).await;
        assert_eq!(
            c.committed(id),
            leader.broker.durable_state(),
            "member {id}"
        );
    }

    c.isolate(3);
    let (p, _) = leader.batch(vec![publish("q", "b", None)], 2_000);
    let second = c.raft(1).client_write(p).await.unwrap();
    c.wait_applied(2, second.log_id.index).await;
    assert_eq!(c.committed(2), leader.broker.durable_state());
    assert_ne!(
        c.committed(3),
        leader.broker.durable_state(),
        "member 3 was cut off: the entry was confirmed without it"
    );

    c.heal(3);
    c.raft(1).trigger().heartbeat().await.unwrap();
    c.wait_applied(3, second.log_id.index).await;
    assert_eq!(c.committed(3), leader.broker.durable_state());
}

/// S-CLU-2: entries a majority committed survive the loss of their leader: the new leader's
/// committed broker holds all of them, and it goes on committing with the remaining two.
#[tokio::test(start_paused = true)]
async fn s_clu_2_committed_entries_survive_the_loss_of_the_leader() {
    let _guard = HangGuard::new("s_clu_2_committed_entries_survive_the_loss_of_the_leader");
    let c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let mut cmds = vec![declare_quorum("q", None)];
    cmds.extend((0..5).map(|i| publish("q", &format!("m{i}"), None)));
    let (p, _) = leader.batch(cmds, 1_000);
    let committed = c.raft(1).client_write(p).await.unwrap();

    c.settle(1).await;
    c.isolate(1);
    c.elect(2).await;
    c.wait_applied(2, committed.log_id.index).await;
    assert_eq!(
        c.committed(2),
        leader.broker.durable_state(),
        "every committed message is on the new leader"
    );

    let (mut next_leader, _) = c.take_over(2, 2_000);
    let (p, _) = next_leader.batch(vec![publish("q", "after", None)], 2_000);
    let after = c.raft(2).client_write(p).await.unwrap();
    c.wait_applied(3, after.log_id.index).await;
    assert_eq!(c.committed(3), next_leader.broker.durable_state());
    let ready = c.committed(3).queues[0].1.len();
    assert_eq!(ready, 6, "five from the old leader, one from the new");
}

/// S-CLU-3: a leader cut off from the others appends entries no majority ever holds (three,
/// more than the new leader will write over them); they are never confirmed, and when the
/// member rejoins its log from the first of them on is the new leader's, in memory and as its
/// WAL replays it after a restart, and so is its committed broker.
#[tokio::test(start_paused = true)]
async fn s_clu_3_a_deposed_leaders_unconfirmed_entries_are_truncated() {
    let _guard = HangGuard::new("s_clu_3_a_deposed_leaders_unconfirmed_entries_are_truncated");
    let c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(vec![declare_quorum("q", None)], 1_000);
    let base = c.raft(1).client_write(p).await.unwrap().log_id.index;

    c.settle(1).await;
    c.isolate(1);
    let (lost, _) = leader.batch(vec![publish("q", "never confirmed", None)], 2_000);
    let pending = c.raft(1).client_write_ff(lost).await.unwrap();
    for i in 0..2 {
        let (lost, _) = leader.batch(vec![publish("q", "lost too", None)], 2_001 + i);
        drop(c.raft(1).client_write_ff(lost).await.unwrap());
    }
    c.until(1, "the lost entries in its log", |m| {
        m.last_log_index >= Some(base + 3)
    })
    .await;
    let on_old = c.members[&1]
        .log
        .clone()
        .try_get_log_entries(base + 1..=base + 1)
        .await
        .unwrap();
    assert!(matches!(on_old[0].payload, EntryPayload::Normal(_)));
    assert_eq!(on_old[0].log_id.leader_id.node_id, 1);

    c.elect(2).await;
    let (mut next_leader, _) = c.take_over(2, 3_000);
    let (p, _) = next_leader.batch(vec![publish("q", "confirmed", None)], 3_000);
    let kept = c.raft(2).client_write(p).await.unwrap().log_id.index;

    c.heal(1);
    c.raft(2).trigger().heartbeat().await.unwrap();
    c.wait_applied(1, kept).await;
    assert_eq!(kept, base + 2, "a blank entry and the confirmed one");
    let replaced = c.members[&1]
        .log
        .clone()
        .try_get_log_entries(base + 1..)
        .await
        .unwrap();
    assert_eq!(
        replaced.len(),
        2,
        "nothing left after the new leader's entries"
    );
    assert!(
        replaced.iter().all(|e| e.log_id.leader_id.node_id == 2),
        "member 1's log from the lost entry on is member 2's: {replaced:?}"
    );
    assert_eq!(c.committed(1), next_leader.broker.durable_state());
    assert_eq!(
        c.committed(1).queues[0].1.len(),
        1,
        "only the confirmed one"
    );
    c.raft(1).shutdown().await.unwrap();
    let mut reopened = open_log(&c.members[&1].disk);
    let after_restart = reopened.try_get_log_entries(base + 1..).await.unwrap();
    let ids = |es: &[wharf_cluster::Entry]| es.iter().map(|e| e.log_id).collect::<Vec<_>>();
    assert_eq!(
        ids(&after_restart),
        ids(&replaced),
        "the WAL replays the truncation"
    );
    let answer = pending.await.unwrap();
    assert!(
        answer.is_err(),
        "the proposer of the lost entry is told it did not commit: {answer:?}"
    );
}

/// S-CLU-4: a member cut off while the leader snapshots and purges its log catches up from
/// the snapshot (a checkpoint of the committed broker, held messages' marks included) and
/// ends with the same committed broker.
#[tokio::test(start_paused = true)]
async fn s_clu_4_a_lagging_member_catches_up_from_a_snapshot() {
    let _guard = HangGuard::new("s_clu_4_a_lagging_member_catches_up_from_a_snapshot");
    let c = Cluster::start(3).await;
    c.isolate(3);
    let cut_at = c.last_index(3);
    let mut leader = LiveBroker::new();
    let mut last = 0;
    let (p, _) = leader.batch(
        [vec![declare_quorum("q", Some(60_000))], open()].concat(),
        1_000,
    );
    c.raft(1).client_write(p).await.unwrap();
    for i in 0..4 {
        let (p, _) = leader.batch(vec![publish("q", &format!("m{i}"), None)], 2_000 + i);
        last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    }
    let (p, _) = leader.batch(vec![get("q")], 3_000);
    assert!(!p.events.is_empty(), "the get logged its delivery mark");
    last = last.max(c.raft(1).client_write(p).await.unwrap().log_id.index);

    c.raft(1).trigger().snapshot().await.unwrap();
    c.until(1, "its snapshot", |m| {
        m.snapshot.map(|s| s.index) == Some(last)
    })
    .await;
    c.raft(1).trigger().purge_log(last).await.unwrap();
    c.until(1, "its purge", |m| m.purged.map(|p| p.index) == Some(last))
        .await;

    c.heal(3);
    c.raft(1).trigger().heartbeat().await.unwrap();
    c.wait_applied(3, last).await;
    let snap = c.raft(3).metrics().borrow().snapshot;
    assert_eq!(
        snap.map(|s| s.index),
        Some(last),
        "member 3 installed a snapshot"
    );
    let in_log = c.members[&3]
        .log
        .clone()
        .try_get_log_entries(cut_at + 1..=last)
        .await
        .unwrap();
    assert!(
        in_log.is_empty(),
        "the missed entries came as a snapshot, not as entries"
    );
    assert_eq!(c.committed(3), c.committed(1));
    let messages = &c.committed(3).queues[0].1;
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages.iter().filter(|m| m.redelivered).count(),
        1,
        "the delivered one carries its mark through the snapshot"
    );
}

/// S-CLU-1, issue 17: an entry costs each member one `fdatasync` of its Raft log, not two.
/// openraft saves the committed id once per commit, on the leader and on every follower (the
/// append that tells it); that mark rides on the next entry's sync instead of syncing alone,
/// which had doubled the syncs and put the second one in the way of the next entry's.
#[tokio::test(start_paused = true)]
async fn s_clu_1_an_entry_costs_each_member_one_log_sync() {
    const ENTRIES: u64 = 40;
    let _guard = HangGuard::new("s_clu_1_an_entry_costs_each_member_one_log_sync");
    let c = Cluster::start(3).await;
    c.elect(1).await;
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(vec![declare_quorum("q", None)], 1_000);
    let declared = c.raft(1).client_write(p).await.unwrap();
    for id in [1, 2, 3] {
        c.wait_applied(id, declared.log_id.index).await;
    }
    let before: Vec<u64> = [1, 2, 3]
        .iter()
        .map(|id| c.members[id].log.wal_stats().syncs)
        .collect();
    let mut last = 0;
    for i in 0..ENTRIES {
        let (p, _) = leader.batch(vec![publish("q", "m", None)], 2_000 + i);
        last = c.raft(1).client_write(p).await.unwrap().log_id.index;
        // Every member has the entry and knows it committed before the next one comes.
        c.raft(1).trigger().heartbeat().await.unwrap();
        for id in [2, 3] {
            c.wait_applied(id, last).await;
        }
    }
    for (id, before) in [1u64, 2, 3].iter().zip(before) {
        c.wait_applied(*id, last).await;
        let syncs = c.members[id].log.wal_stats().syncs - before;
        assert!(
            syncs <= ENTRIES + 2,
            "member {id}: {syncs} syncs of its Raft log for {ENTRIES} entries"
        );
    }
}
