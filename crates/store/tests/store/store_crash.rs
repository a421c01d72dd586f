//! Crashes and I/O faults at every sync point of a scripted workload on a simulated disk.
//! For every N: the N-th sync (or write) fails, the disk loses power (or the process just
//! restarts), and the store is reopened. Recovery must always succeed; it must bring back a
//! prefix of what was logged that includes everything acknowledged durable (S-DUR-3, S-DUR-4),
//! nothing that was never logged, and exactly the state that prefix describes (S-DUR-7).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use std::collections::BTreeSet;

use proptest::prelude::*;
use store_common::{Driver, Op, log, op, open, replay, setup};
use wharf_broker::{Event, MessageId};
use wharf_wal::SimStorage;

/// A fixed workload: publishes (persistent and transient, with and without TTL, to a plain
/// queue, a TTL + dead-letter queue and through a fanout), gets, acks, rejects, expiry.
fn script() -> Vec<Op> {
    let mut ops = setup();
    for i in 0..30usize {
        ops.push(Op::Publish {
            exchange: match i % 7 {
                0 => Some(1),
                3 => Some(3),
                _ => None,
            },
            key: i % 2,
            persistent: i % 4 != 3,
            expiration_ms: (i % 5 == 0).then_some(500),
            delay_ms: (i % 7 == 3).then_some(1500),
            body_len: 100,
        });
        if i % 3 == 1 {
            ops.push(Op::Get {
                q: i % 2,
                no_ack: false,
            });
        }
        if i % 4 == 2 {
            ops.push(Op::Ack {
                pick: 0,
                multiple: false,
            });
        }
        if i % 5 == 4 {
            ops.push(Op::Reject {
                pick: 0,
                requeue: i % 2 == 0,
            });
        }
        if i % 6 == 5 {
            ops.push(Op::Advance { ms: 1000 });
        }
    }
    ops.push(Op::Get {
        q: 0,
        no_ack: false,
    });
    ops.push(Op::Advance { ms: 5000 });
    ops.push(Op::Purge { q: 0 });
    ops
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Sync,
    Write,
}

/// What one faulty run did before the fault stopped it.
struct Run {
    /// Every event handed to `Store::log`, the failing call's included (its first records
    /// may have reached the log before the failure).
    attempted: Vec<Event>,
    /// How many of them were acknowledged durable.
    acked: usize,
    /// Whether the fault was hit at all (false: N is past the workload's last sync).
    faulted: bool,
}

fn faulty_run(sim: &SimStorage, fault: Fault, n: u64, ops: &[Op]) -> Run {
    match fault {
        Fault::Sync => sim.fail_sync_after(n),
        Fault::Write => sim.fail_write_after(n),
    }
    let mut run = Run {
        attempted: Vec::new(),
        acked: 0,
        faulted: false,
    };
    let Ok((store, _, _)) = open(sim) else {
        run.faulted = true;
        return run;
    };
    let mut live = Driver::new();
    for op in ops {
        let events = live.apply(op);
        run.attempted.extend(events.iter().cloned());
        let durable = log(&store, &events).and_then(|ticket| store.wait_durable(ticket));
        if durable.is_err() {
            run.faulted = true;
            // Fail-stop: nothing is accepted after a failure.
            assert!(
                store.log(&events, &mut Vec::new()).is_err(),
                "log accepted a record after a failure"
            );
            assert!(store.wait_durable(store.durable_watermark() + 1).is_err());
            break;
        }
        run.acked = run.attempted.len();
    }
    if !run.faulted {
        store.close().unwrap();
    }
    run
}

fn published_ids(events: &[Event]) -> BTreeSet<MessageId> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Published { message, .. } => Some(message.message.id),
            Event::DeadLettered {
                message: Some(m), ..
            } => Some(m.message.id),
            _ => None,
        })
        .collect()
}

/// Reopens after the fault and checks what came back against what was logged and acked.
fn check_recovery(sim: &SimStorage, run: &Run, what: &str) {
    let (store, mut recovered, summary) =
        open(sim).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let k = usize::try_from(summary.events).unwrap();
    assert!(
        k >= run.acked,
        "{what}: {k} events recovered, {} acked",
        run.acked
    );
    assert!(
        k <= run.attempted.len(),
        "{what}: more events than were logged"
    );
    let state = recovered.durable_state();
    assert_eq!(
        state,
        replay(&run.attempted[..k]).durable_state(),
        "{what}: not a prefix"
    );
    // Said directly: every message present is one that was logged, and every message the
    // acknowledged prefix holds is present unless a later recovered record removed it.
    let present: BTreeSet<MessageId> = state
        .queues
        .iter()
        .flat_map(|(_, m)| m.iter().map(|m| m.id))
        .collect();
    assert!(
        present.is_subset(&published_ids(&run.attempted)),
        "{what}: phantom message"
    );
    let acked_state = replay(&run.attempted[..run.acked]).durable_state();
    let later = &run.attempted[run.acked..k];
    for (q, msgs) in &acked_state.queues {
        for m in msgs {
            let touched_later = later.iter().any(|e| removes(e, &q.name, m.id));
            assert!(
                touched_later || present.contains(&m.id),
                "{what}: acknowledged message {:?} of {} lost",
                m.id,
                q.name
            );
        }
    }
    // The store goes on after recovery: end it, log that, and it is durable.
    let end = recovered.recovered(store_common::T0_MS + 60_000);
    let ticket = log(&store, &end.events).unwrap();
    store.wait_durable(ticket).unwrap();
    store.close().unwrap();
}

fn removes(e: &Event, queue: &str, id: MessageId) -> bool {
    match e {
        Event::Settled { queue: q, ids, .. } | Event::Purged { queue: q, ids, .. } => {
            q == queue && ids.contains(&id)
        }
        Event::DeadLettered {
            from: Some(q),
            id: i,
            ..
        } => q == queue && *i == id,
        Event::QueueDeleted { queue: q, .. } => q == queue,
        Event::VhostDeleted { .. } => true,
        _ => false,
    }
}

fn every_fault_point(fault: Fault, power_loss: bool) -> u64 {
    for n in 0..2000 {
        let sim = SimStorage::new(n);
        let run = faulty_run(&sim, fault, n, &script());
        let sim = if power_loss {
            sim.power_loss()
        } else {
            // A restart without power loss: disarm a fault the run did not reach (SimStorage
            // keeps it armed until a power loss).
            sim.fail_sync_after(u64::MAX);
            sim.fail_write_after(u64::MAX);
            sim
        };
        let what = format!("{fault:?} fault after {n} (power loss: {power_loss})");
        check_recovery(&sim, &run, &what);
        if !run.faulted {
            return n;
        }
    }
    panic!("the workload never ran to its end");
}

#[test]
fn s_dur_3_power_loss_at_every_sync_keeps_everything_acknowledged() {
    let points = every_fault_point(Fault::Sync, true);
    assert!(
        points > 20,
        "only {points} sync points: the workload should sync per step"
    );
}

#[test]
fn s_dur_3_failed_sync_is_fail_stop_and_a_restart_recovers() {
    every_fault_point(Fault::Sync, false);
}

#[test]
fn s_dur_3_failed_write_is_fail_stop_and_recovery_keeps_what_was_durable() {
    every_fault_point(Fault::Write, false);
    every_fault_point(Fault::Write, true);
}

#[test]
fn the_script_exercises_every_message_record() {
    // The crash tests above are only as good as the records the script produces.
    let mut live = Driver::new();
    for op in script() {
        live.apply(&op);
    }
    let kinds: BTreeSet<&str> = live
        .events
        .iter()
        .map(|e| match e {
            Event::Published {
                scheduled: Some(_), ..
            } => "Published(scheduled)",
            Event::Published { .. } => "Published",
            Event::Scheduled { .. } => "Scheduled",
            Event::Settled { .. } => "Settled",
            Event::Delivered { .. } => "Delivered",
            Event::Returned { .. } => "Returned",
            Event::DeadLettered { .. } => "DeadLettered",
            Event::Purged { .. } => "Purged",
            _ => "other",
        })
        .collect();
    for want in [
        "Published",
        "Published(scheduled)",
        "Scheduled",
        "Settled",
        "Delivered",
        "Returned",
        "DeadLettered",
        "Purged",
    ] {
        assert!(kinds.contains(want), "the script logs no {want}: {kinds:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The same checks for random workloads (policies, consumers, deletes, delayed
    /// messages...) with a power loss at a random sync point.
    #[test]
    fn s_dur_3_power_loss_during_random_workloads(
        n in 0u64..120,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let sim = SimStorage::new(n);
        let ops: Vec<Op> = setup().into_iter().chain(ops).collect();
        let run = faulty_run(&sim, Fault::Sync, n, &ops);
        check_recovery(&sim.power_loss(), &run, &format!("sync fault after {n}"));
    }
}
