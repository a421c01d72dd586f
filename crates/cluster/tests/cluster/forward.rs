//! A member proposes through the group's leader (S-CLU-50), on the in-memory network: the
//! proposal commits on every member; it is retried against the next leader when the one it
//! was sent to is gone; a copy committed twice applies once, before and after a snapshot.

use std::time::Duration;

use wharf_cluster::{Forward, ForwardError, Origin, Proposal, Proposer, lead};

use crate::commands::{declare_quorum, publish};
use crate::support::{Cluster, GROUP, HangGuard, LiveBroker};

/// How long a test proposal may take to commit (tokio's paused clock).
const WAIT: Duration = Duration::from_secs(30);

/// The messages queue `q` holds in member `id`'s committed state.
fn depth(c: &Cluster, id: u64) -> u64 {
    c.members[&id]
        .machine
        .with(|m| m.broker().ready_messages("/", "q").len() as u64)
}

/// S-CLU-50: member 2, a follower, proposes a quorum queue and a message through member 1,
/// the leader: its proposer gets the log id once the entry committed, and every member applies
/// it.
#[tokio::test(start_paused = true)]
async fn s_clu_50_a_follower_proposes_through_the_leader() {
    let _guard = HangGuard::new("s_clu_50_a_follower_proposes_through_the_leader");
    let c = Cluster::start(3).await;
    c.settle(1).await;
    let proposer = Proposer::new(2, GROUP, c.raft(2).clone(), 0x5e55);
    let (p, _) = LiveBroker::new().batch(
        vec![declare_quorum("q", None), publish("q", "m", None)],
        1_000,
    );
    let log_id = proposer
        .propose(&c.router.forward(2), p.now_ms, p.events.to_vec(), WAIT)
        .await
        .unwrap();
    assert_eq!(log_id.leader_id.node_id, 1, "committed by the leader");
    c.settle(1).await;
    for id in 1..=3 {
        assert_eq!(depth(&c, id), 1, "member {id}");
        let seq = c.members[&id].machine.with(|m| m.session_seq(0x5e55));
        assert_eq!(seq, Some(1), "member {id}");
    }
    assert_eq!(c.committed(2), c.committed(1));
    assert_eq!(c.committed(3), c.committed(1));
}

/// S-CLU-50: a member that does not lead answers `NotLeader` naming the leader it knows; a
/// proposer whose leader is cut off tries again until a new leader (member 2, itself here)
/// commits the proposal.
#[tokio::test(start_paused = true)]
async fn s_clu_50_a_proposal_is_retried_against_the_new_leader() {
    let _guard = HangGuard::new("s_clu_50_a_proposal_is_retried_against_the_new_leader");
    let c = Cluster::start(3).await;
    c.settle(1).await;
    let (p, _) = LiveBroker::new().batch(vec![declare_quorum("q", None)], 1_000);
    let asked = c
        .router
        .forward(2)
        .forward(
            3,
            GROUP,
            &Proposal {
                origin: Some(Origin { session: 1, seq: 1 }),
                ..p.clone()
            },
        )
        .await;
    assert_eq!(asked, Err(ForwardError::NotLeader(Some(1))));

    c.isolate(1);
    let proposer = Proposer::new(3, GROUP, c.raft(3).clone(), 0x0303);
    let forward = c.router.forward(3);
    let pending = tokio::spawn(async move {
        // A day, not WAIT: the clock is paused and jumps to the proposer's next retry
        // whenever the runtime idles, as it does while `elect` below waits for real disk
        // writes; on a loaded machine 30 s of retries (300 of them) passed before the
        // election did. A day of retries would need far more real time than any election.
        let out = proposer
            .propose(
                &forward,
                p.now_ms,
                p.events.to_vec(),
                Duration::from_secs(86_400),
            )
            .await;
        (proposer, out)
    });
    // Member 3 still names member 1 its leader: its attempts find it unreachable.
    tokio::time::advance(Duration::from_millis(250)).await;
    assert!(!pending.is_finished());
    c.elect(2).await;
    let (_, out) = pending.await.unwrap();
    let log_id = out.unwrap();
    assert_eq!(log_id.leader_id.node_id, 2, "committed by the new leader");
    c.settle(2).await;
    for id in [2, 3] {
        let names = c.members[&id].machine.with(|m| m.broker().queue_names("/"));
        assert_eq!(names, vec!["q".to_owned()], "member {id} has the queue");
    }
}

/// S-CLU-50: the same forwarded proposal committed twice (its answer lost, retried through
/// another leader) applies once on every member; the member that snapshotted and restarted
/// still knows it applied it.
#[tokio::test(start_paused = true)]
async fn s_clu_50_a_proposal_committed_twice_applies_once() {
    let _guard = HangGuard::new("s_clu_50_a_proposal_committed_twice_applies_once");
    let mut c = Cluster::start(3).await;
    let mut live = LiveBroker::new();
    let (declared, _) = live.batch(vec![declare_quorum("q", None)], 1_000);
    c.raft(1).client_write(declared).await.unwrap();
    let (p, _) = live.batch(vec![publish("q", "once", None)], 2_000);
    let forwarded = Proposal {
        origin: Some(Origin {
            session: 0xabc,
            seq: 1,
        }),
        ..p
    };
    let first = lead(c.raft(1), forwarded.clone()).await.unwrap();
    c.settle(1).await;
    c.isolate(1);
    c.elect(2).await;
    let second = lead(c.raft(2), forwarded.clone()).await.unwrap();
    assert!(second.index > first.index, "a second copy committed");
    c.settle(2).await;
    for id in [2, 3] {
        assert_eq!(depth(&c, id), 1, "member {id} applied it once");
    }

    // Member 3's snapshot carries the session; after a restart a third copy still applies
    // nothing.
    c.raft(3).trigger().snapshot().await.unwrap();
    c.until(3, "a snapshot", |m| {
        m.snapshot.is_some_and(|s| s.index >= second.index)
    })
    .await;
    c.restart(3, false).await;
    c.settle(2).await;
    assert_eq!(
        c.members[&3].machine.with(|m| m.session_seq(0xabc)),
        Some(1)
    );
    let third = lead(c.raft(2), forwarded).await.unwrap();
    c.settle(2).await;
    assert!(third.index > second.index);
    for id in [2, 3] {
        assert_eq!(depth(&c, id), 1, "member {id} applied it once");
    }
}
