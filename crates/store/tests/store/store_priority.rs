//! Priority queues across a restart (S-PRIO-7): a durable priority queue's persistent
//! messages come back in the same order (by priority, then first in first out), whether the
//! recovered broker finds them in a checkpoint or in the log after it, and whether the live
//! broker had left their content on disk (paged out: the priority comes from the record,
//! never from reading the message back).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use crate::store_common;

use bytes::Bytes;
use store_common::{CH, Live, open};
use wharf_broker::{Broker, Command, FieldTable, Properties, Publish, QueueDeclare, Reply, Value};
use wharf_wal::SimStorage;

fn declare() -> Command {
    let mut arguments = FieldTable::new();
    arguments.insert("x-max-priority", Value::U8(9));
    Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: "pq".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
        owner: None,
    })
}

fn publish(body: u8, priority: Option<u8>) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: "pq".into(),
        mandatory: false,
        properties: Properties {
            delivery_mode: Some(2),
            priority,
            ..Properties::default()
        },
        body: Bytes::from(vec![body]),
    })
}

fn order(b: &Broker) -> Vec<(u8, bool)> {
    b.ready_messages("/", "pq")
        .into_iter()
        .map(|(m, redelivered)| (m.body[0], redelivered))
        .collect()
}

fn get() -> Command {
    Command::Get {
        chan: CH,
        queue: "pq".into(),
        no_ack: false,
    }
}

/// Publishes twelve messages of mixed priorities (a checkpoint after the sixth), takes one
/// and requeues it, takes another and leaves it unacked, acks a third; then cuts the power.
/// Returns the disk and the live broker's ready list.
fn workload(paging: bool) -> (SimStorage, u64, Vec<(u8, bool)>) {
    let sim = SimStorage::new(41);
    let mut live = Live::open(&sim, paging);
    live.step(declare());
    let prios = [None, Some(5), Some(1), Some(9), Some(5), Some(200)];
    for (i, p) in prios.into_iter().enumerate() {
        live.step(publish(u8::try_from(i).unwrap(), p));
    }
    live.store
        .checkpoint_now(live.driver.broker.snapshot())
        .unwrap();
    let prios = [Some(1), None, Some(9), Some(3), Some(5), Some(0)];
    for (i, p) in prios.into_iter().enumerate() {
        live.step(publish(u8::try_from(i + 6).unwrap(), p));
    }
    live.step(get());
    live.settle(Some(true));
    live.step(get());
    live.step(get());
    live.settle(None);
    if paging {
        assert_eq!(
            live.driver.broker.loaded_bytes(),
            0,
            "every ready body on disk"
        );
    }
    let ready = order(&live.driver.broker);
    let now = live.driver.now_ms;
    drop(live);
    (sim.power_loss(), now, ready)
}

fn run(paging: bool) {
    let (sim, now, ready) = workload(paging);
    // 3 (priority 9) was taken, requeued to the front and taken again (held); 5 (200 counts
    // as 9) was acked. Left: 8 | 1 4 10 | 9 | 2 6 | 0 7 11 (by priority 9, 5, 3, 1, 0).
    let bodies: Vec<u8> = ready.iter().map(|m| m.0).collect();
    assert_eq!(bodies, [8, 1, 4, 10, 9, 2, 6, 0, 7, 11]);
    let (_store, mut recovered, summary) = open(&sim).unwrap();
    assert!(
        summary.checkpoint_lsn.is_some(),
        "half came from the checkpoint"
    );
    recovered.check_invariants();
    assert_eq!(
        recovered.loaded_bytes(),
        0,
        "recovery loads no body: priorities come from the records"
    );
    let end = recovered.recovered(now + 1);
    assert!(end.effects.is_empty());
    let mut want = vec![(3, true)];
    want.extend(ready);
    assert_eq!(
        order(&recovered),
        want,
        "same order, the held one first again"
    );
    let first = recovered
        .handle(
            Command::ConnectionOpen {
                conn: CH.conn,
                vhost: "/".into(),
            },
            now + 1,
        )
        .and_then(|_| recovered.handle(Command::ChannelOpen { chan: CH }, now + 1))
        .and_then(|_| recovered.handle(get(), now + 1))
        .unwrap();
    let Reply::GetOk(g) = first.reply else {
        panic!("{:?}", first.reply)
    };
    assert_eq!(
        (g.message.body[0], g.message.properties.priority),
        (3, Some(9))
    );
}

#[test]
fn s_prio_7_recovery_keeps_priority_order() {
    run(false);
}

#[test]
fn s_prio_7_paged_out_messages_keep_their_priority_across_recovery() {
    run(true);
}
