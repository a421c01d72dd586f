//! S-CLU-80: when a member builds a snapshot of a group, on a committed state holding real
//! messages (a quorum queue filled, then purged): a snapshot waits for the log to take as many
//! bytes as the last one held, however many entries that took, and a purged queue snapshots
//! again after the entry count alone.

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder};
use wharf_broker::Command;
use wharf_cluster::{Entry, LogId, Machine, QueueStateMachine, SnapshotRule};

use crate::commands::{declare_quorum, publish};
use crate::support::LiveBroker;

const RULE: SnapshotRule = SnapshotRule { every: 10 };

/// A committed state machine fed by a leader's live broker, one entry per batch.
struct Fed {
    live: LiveBroker,
    machine: QueueStateMachine,
    index: u64,
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

    fn publish(&mut self) {
        self.apply(vec![publish("q", &"x".repeat(1_000), None)]);
    }

    fn due(&self) -> bool {
        self.machine.with(|m| m.snapshot_due(RULE))
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
    let mut fed = Fed {
        live: LiveBroker::new(),
        machine: QueueStateMachine::new(),
        index: 0,
    };
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
    fed.apply(vec![Command::QueuePurge {
        vhost: "/".into(),
        queue: "q".into(),
        owner: None,
    }]);
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
