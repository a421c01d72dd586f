//! S-CLU-80: when a member builds a snapshot of a group, on a committed state holding real
//! messages (a quorum queue filled, then purged): a snapshot waits for the log to take as many
//! bytes as the last one held, however many entries that took, a purged queue snapshots
//! again after the entry count alone, and a shallow queue of large messages after the bytes
//! alone.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder};
use wharf_broker::Command;
use wharf_cluster::{Entry, LogId, Machine, QueueStateMachine, SnapshotRule};

use crate::commands::{declare_quorum, publish};
use crate::support::LiveBroker;

const RULE: SnapshotRule = SnapshotRule {
    every: 10,
    bytes: u64::MAX,
};

/// A committed state machine fed by a leader's live broker, one entry per batch.
struct Fed {
    live: LiveBroker,
    machine: QueueStateMachine,
    index: u64,
    rule: SnapshotRule,
}

impl Fed {
    fn apply(&mut self, cmds: Vec<Command>) {
        let (proposal, _) = self.live.batch(cmds, 1_000);
        self.index += 1;
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), self.index),
            payload: EntryPayload::Normal(proposal),
        };
        self.machine.apply_entries([entry]).unwrap();
    }

    fn new(rule: SnapshotRule) -> Fed {
        Fed {
            live: LiveBroker::new(),
            machine: QueueStateMachine::new(),
            index: 0,
            rule,
        }
    }

    fn publish(&mut self) {
        self.publish_sized(1_000);
    }

    fn publish_sized(&mut self, size: usize) {
        self.apply(vec![publish("q", &"x".repeat(size), None)]);
    }

    fn purge(&mut self) {
        self.apply(vec![Command::QueuePurge {
            vhost: "/".into(),
            queue: "q".into(),
            owner: None,
        }]);
    }

    fn due(&self) -> bool {
        self.machine.with(|m| m.snapshot_due(self.rule))
    }

    async fn build(&mut self) -> u64 {
        let mut handle = self.machine.clone();
        handle
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        self.machine.with(Machine::snapshot_bytes)
    }
}

#[tokio::test]
async fn s_clu_80_a_deep_queue_snapshots_after_as_many_logged_bytes_a_purged_one_soon() {
    let mut fed = Fed::new(RULE);
    fed.apply(vec![declare_quorum("q", None)]);
    for _ in 0..99 {
        fed.publish();
    }
    assert!(fed.due(), "100 entries, no snapshot yet: the count alone");
    let first = fed.build().await;
    assert!(
        first > 99_000,
        "the snapshot holds every body: {first} bytes"
    );

    // A snapshot every 10 entries would be due now: this one waits for the log to take about
    // as many bytes as the last snapshot held.
    let mut published = 0u64;
    while !fed.due() {
        fed.publish();
        published += 1;
        assert!(
            published * 1_000 <= first + 1_000,
            "{published} published after a snapshot of {first} bytes, none due"
        );
    }
    assert!(
        published * 1_100 >= first,
        "due after {published} entries of 1 KB, the last snapshot of {first} bytes"
    );
    let second = fed.build().await;
    assert!(
        second > first + published * 1_000 - 1,
        "{second} after {first}"
    );

    // The queue purged: what the next snapshot costs is small again, the count alone rules.
    fed.purge();
    for _ in 0..8 {
        fed.apply(vec![declare_quorum("q", None)]);
    }
    assert!(!fed.due(), "9 entries of 10");
    fed.apply(vec![declare_quorum("q", None)]);
    assert!(
        fed.due(),
        "10 entries after the last snapshot, the queue empty"
    );
}

/// A queue kept shallow (each 10 KB message purged after it) snapshots once its log took
/// `bytes` (100 KB), long before `every` entries: an entry holds up to 1 MiB, and 10,000 of
/// them held up to 10 GB in memory.
#[tokio::test]
async fn s_clu_80_a_shallow_queue_of_large_messages_snapshots_after_the_bytes() {
    let mut fed = Fed::new(SnapshotRule {
        every: 1_000,
        bytes: 100_000,
    });
    fed.apply(vec![declare_quorum("q", None)]);
    fed.build().await;
    let mut pairs = 0;
    while !fed.due() {
        fed.publish_sized(10_000);
        fed.purge();
        pairs += 1;
        assert!(pairs <= 10, "not due after {pairs} messages of 10 KB");
    }
    assert!(pairs >= 9, "due after {pairs} messages of 10 KB");
}
