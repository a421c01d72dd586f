//! Expiry across a leader change (S-CLU-5, S-CLU-6): deadlines come from logged facts, so the
//! new leader expires the same messages at the same instants as a single node restarted at
//! the moment of the change; and a new leader whose clock is behind the log does not turn
//! time back. Clocks are `ManualClock`s, one per member; nothing sleeps.

use std::time::Duration;

use wharf_broker::{Broker, Event, MessageId, Outcome, SettleKind};
use wharf_clock::{Clock, ManualClock};

use crate::commands::{declare_quorum, get, open, publish};
use crate::support::{Cluster, HangGuard, LiveBroker};

const T0: u64 = 1_700_000_000_000;

/// The ids an outcome expired.
fn expired(out: &Outcome) -> Vec<MessageId> {
    out.events
        .iter()
        .filter_map(|e| match e {
            Event::Settled {
                ids,
                kind: SettleKind::Expire,
                ..
            } => Some(ids.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// S-CLU-6, S-CLU-5: the leader publishes three messages (queue TTL 10 s, one with its own
/// 4 s TTL) and holds one unacked; it is lost at T0+5 s. The new leader takes over at its
/// clock and expires, deadline by deadline, exactly what a single node that logged the same
/// events and restarted at T0+5 s expires, at the same instants.
#[tokio::test(start_paused = true)]
async fn s_clu_6_a_new_leader_expires_the_same_messages_at_the_same_times() {
    let _guard = HangGuard::new("s_clu_6_a_new_leader_expires_the_same_messages_at_the_same_times");
    let c = Cluster::start(3).await;
    let clock1 = ManualClock::new(T0);
    let mut leader = LiveBroker::new();
    let mut logged: Vec<Event> = Vec::new();
    let mut step = |cmds, now| {
        let (p, _) = leader.batch(cmds, now);
        logged.extend(p.events.iter().cloned());
        p
    };
    let mut proposals = vec![step(
        [vec![declare_quorum("q", Some(10_000))], open()].concat(),
        clock1.now_ms(),
    )];
    proposals.push(step(vec![publish("q", "m1", None)], clock1.now_ms()));
    clock1.advance(Duration::from_secs(2));
    proposals.push(step(vec![publish("q", "m2", Some(4_000))], clock1.now_ms()));
    clock1.advance(Duration::from_secs(1));
    proposals.push(step(
        vec![publish("q", "m3", None), get("q")],
        clock1.now_ms(),
    ));
    let mut last = 0;
    for p in proposals {
        last = c.raft(1).client_write(p).await.unwrap().log_id.index;
    }

    // The leader is lost at T0+5 s, before any deadline.
    c.settle(1).await;
    c.isolate(1);
    c.elect(2).await;
    c.wait_applied(2, last).await;
    let clock2 = ManualClock::new(T0 + 5_000);
    let (mut next, recovered) = c.take_over(2, clock2.now_ms());

    // The reference: one node that logged the same events and restarted at T0+5 s.
    let mut single = Broker::new();
    for e in &logged {
        single.apply(e).unwrap();
    }
    let single_recovered = single.recovered(T0 + 5_000);
    assert_eq!(expired(&recovered), expired(&single_recovered));
    assert_eq!(next.broker.durable_state(), single.durable_state());

    let mut events = recovered.events;
    let mut seen = Vec::new();
    while let Some(deadline) = next.broker.next_deadline() {
        assert_eq!(
            Some(deadline),
            single.next_deadline(),
            "the same next deadline"
        );
        clock2.set(deadline);
        let out = next.broker.expire_due(clock2.now_ms());
        let reference = single.expire_due(deadline);
        assert_eq!(
            expired(&out),
            expired(&reference),
            "at T0+{}",
            deadline - T0
        );
        seen.push((deadline - T0, expired(&out).len()));
        events.extend(out.events);
    }
    let proposal = wharf_cluster::Proposal {
        now_ms: clock2.now_ms(),
        events: events.into(),
        origin: None,
    };
    assert_eq!(
        seen,
        vec![(6_000, 1), (10_000, 1), (13_000, 1)],
        "m2 at its own TTL, m1 (held, then requeued: original deadline, S-TTL-7), m3"
    );

    let index = c.raft(2).client_write(proposal).await.unwrap().log_id.index;
    c.wait_applied(3, index).await;
    assert_eq!(c.committed(3), next.broker.durable_state());
    assert!(c.committed(3).queues[0].1.is_empty(), "all three expired");
}

/// S-CLU-5: a new leader whose clock reads earlier than the last logged `now` decides with the
/// logged `now`: a message whose deadline that `now` has passed expires at the take-over, as
/// it would on the old leader's next tick.
#[tokio::test(start_paused = true)]
async fn s_clu_5_a_leader_clock_behind_the_log_does_not_turn_time_back() {
    let _guard = HangGuard::new("s_clu_5_a_leader_clock_behind_the_log_does_not_turn_time_back");
    let c = Cluster::start(3).await;
    let mut leader = LiveBroker::new();
    let (p, _) = leader.batch(
        vec![
            declare_quorum("q", None),
            declare_quorum("r", None),
            publish("q", "short", Some(1_000)),
        ],
        T0,
    );
    c.raft(1).client_write(p).await.unwrap();
    // Five seconds on, another queue gets a message; the leader dies before its timer for
    // "short" fires.
    let (p, _) = leader.batch(vec![publish("r", "later", None)], T0 + 5_000);
    let last = c.raft(1).client_write(p).await.unwrap().log_id.index;

    c.settle(1).await;
    c.isolate(1);
    c.elect(2).await;
    c.wait_applied(2, last).await;
    let behind = T0 + 500;
    assert_eq!(
        c.members[&2].machine.with(wharf_cluster::Machine::now_ms),
        T0 + 5_000,
        "the highest logged now"
    );
    assert_eq!(wharf_cluster::leader_now(behind, T0 + 5_000), T0 + 5_000);
    let (_, out) = c.take_over(2, behind);
    assert_eq!(
        expired(&out).len(),
        1,
        "expired at the logged now, not the clock"
    );
}
