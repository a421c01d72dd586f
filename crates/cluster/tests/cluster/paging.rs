//! S-CLU-82: a member's committed broker leaves queued bodies beyond its memory budget in the
//! group's log (its WAL) and reads them back when it needs them: a snapshot, a take-over; the
//! log keeps every segment such a message is in through purges, and lets them go once the
//! messages are gone.

use bytes::Bytes;
use openraft::RaftLogReader;
use wharf_broker::{Broker, Command, MessageRef};
use wharf_cluster::{snapshot, snapshot_file};

use crate::commands::{declare_quorum, publish};
use crate::support::{Cluster, HangGuard, LiveBroker, SNAPSHOT_DIR, segment_files};

/// The bodies of queue `q` of `broker`, in queue order; `None` for one left on disk.
fn bodies(broker: &Broker) -> Vec<Option<Bytes>> {
    let snapshot = broker.snapshot();
    snapshot.queues[0]
        .messages
        .iter()
        .map(|m| match &m.message {
            MessageRef::Loaded(m) => Some(m.body.clone()),
            MessageRef::Stored(_) => None,
        })
        .collect()
}

fn body(i: usize) -> String {
    format!("{i:05}-{}", "b".repeat(4 * 1024))
}

/// Member `id` builds a snapshot through `last` and purges its log through it.
async fn snapshot_and_purge(c: &Cluster, id: u64, last: u64) {
    c.raft(id).trigger().snapshot().await.unwrap();
    c.until(id, "its snapshot", |m| {
        m.snapshot.map(|s| s.index) == Some(last)
    })
    .await;
    c.raft(id).trigger().purge_log(last).await.unwrap();
    c.until(id, "its purge", |m| m.purged.map(|p| p.index) == Some(last))
        .await;
}

/// Waits (a while, in real time: the deletions run on a thread) until member `id`'s disk
/// holds fewer than `before` segments; how many it holds.
fn segments_below(c: &Cluster, id: u64, before: usize) -> usize {
    let mut now = segment_files(&c.members[&id].disk);
    for _ in 0..500 {
        if now < before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        now = segment_files(&c.members[&id].disk);
    }
    now
}

#[tokio::test(start_paused = true)]
async fn s_clu_82_a_members_committed_broker_leaves_bodies_in_the_log_and_reads_them_back() {
    let _guard = HangGuard::new(
        "s_clu_82_a_members_committed_broker_leaves_bodies_in_the_log_and_reads_them_back",
    );
    let mut c = Cluster::start(3).await;
    for m in c.members.values() {
        let _ = m.machine.clone().message_memory(64 * 1024);
    }
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(vec![declare_quorum("q", None)], 1_000);
    c.raft(1).client_write(p).await.unwrap();
    // 300 messages of 4 KiB, 2 an entry: 1.2 MB, far beyond 64 KiB, in 150 entries (more
    // than the newest the log keeps in memory).
    let count = 300;
    let mut last = 0;
    for batch in 0..count / 2 {
        let cmds = (batch * 2..batch * 2 + 2)
            .map(|i| publish("q", &body(i), None))
            .collect();
        let (p, _) = leader.batch(cmds, 2_000 + batch as u64);
        last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    }
    c.settle(1).await;
    let want: Vec<Bytes> = (0..count).map(|i| Bytes::from(body(i))).collect();

    // Member 2 holds about its budget in memory, the rest on disk, in queue order.
    let held = c.members[&2].machine.with(|m| bodies(m.broker()));
    assert_eq!(held.len(), count);
    // About the budget (16 messages), and the last entries' messages, if the disk had not made
    // them durable yet when they were applied.
    let in_memory = held.iter().filter(|b| b.is_some()).count();
    assert!(
        (1..=36).contains(&in_memory),
        "{in_memory} of {count} in memory"
    );
    for (i, b) in held.iter().enumerate() {
        if let Some(b) = b {
            assert_eq!(*b, want[i], "message {i}");
        }
    }
    assert!(
        held.iter().take_while(|b| b.is_none()).count() == count - in_memory,
        "the oldest went first"
    );
    // Its log let the events of the entries it applied go, and reads them back the same.
    let ours = c.members[&2]
        .log
        .clone()
        .try_get_log_entries(0..=last)
        .await
        .unwrap();
    let leaders = c.members[&1]
        .log
        .clone()
        .try_get_log_entries(0..=last)
        .await
        .unwrap();
    assert_eq!(ours.len(), leaders.len());
    for (o, l) in ours.iter().zip(&leaders) {
        assert_eq!(o.log_id, l.log_id);
        assert_eq!(format!("{:?}", o.payload), format!("{:?}", l.payload));
    }

    // A take-over reads every body back.
    let (live, _) = c.take_over(2, 10_000);
    assert_eq!(
        bodies(&live.broker),
        want.iter().cloned().map(Some).collect::<Vec<_>>()
    );

    // Its snapshot carries them all, and the purge after it keeps the segments they are in.
    let segments_before = segment_files(&c.members[&2].disk);
    snapshot_and_purge(&c, 2, last).await;
    let (_, bytes) = snapshot_file::read(&c.members[&2].disk, SNAPSHOT_DIR.as_ref())
        .unwrap()
        .unwrap();
    let decoded = snapshot::decode(&bytes).unwrap();
    assert_eq!(
        bodies(&decoded.broker),
        want.iter().cloned().map(Some).collect::<Vec<_>>()
    );
    let (live, _) = c.take_over(2, 10_000);
    assert_eq!(bodies(&live.broker).len(), count);
    assert!(
        bodies(&live.broker)
            .iter()
            .zip(&want)
            .all(|(b, w)| b.as_ref() == Some(w)),
        "read back after the purge"
    );

    // Once the queue is empty, the next snapshot's purge lets the segments go.
    let purge = Command::QueuePurge {
        vhost: "/".into(),
        queue: "q".into(),
        owner: None,
    };
    let (p, _) = leader.batch(vec![purge], 20_000);
    let last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    c.settle(1).await;
    snapshot_and_purge(&c, 2, last).await;
    let segments_after = segments_below(&c, 2, segments_before);
    assert!(
        segments_after < segments_before,
        "{segments_before} segments, then {segments_after}"
    );

    // A restart starts from the snapshot, the same committed state as the others'.
    c.restart(2, false).await;
    c.wait_applied(2, last).await;
    assert_eq!(c.committed(2), c.committed(1));
}
