//! Enqueue + deliver + ack through `Broker::handle`, one queue, one consumer; and the same
//! through a priority queue with 10 priorities (S-PRIO), whose cost should stay within a few
//! percent of the plain queue's (a lane lookup per enqueue and per take).
//!
//! Estimate: a publish is a map lookup for the exchange, one for the queue, an `Arc` for the
//! message and a delivery record; the ack is a `BTreeMap` removal. Each is some tens of
//! nanoseconds, so a cycle should cost ~300-500 ns, i.e. 2-3 million cycles per second on
//! one core. Measures only; correctness lives in the tests.

#![allow(
    clippy::unwrap_used,
    clippy::missing_docs_in_private_items,
    missing_docs,
    reason = "bench code: a failed setup should stop the bench loudly"
)]

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wharf_broker::{
    Broker, ChanRef, Command, FieldTable, Properties, Publish, QueueDeclare, Reply, Value,
};

const CH: ChanRef = ChanRef {
    conn: wharf_broker::ConnId(1),
    channel: wharf_broker::ChannelId(1),
};

fn broker_with_queue(arguments: FieldTable) -> Broker {
    let mut b = Broker::new();
    b.handle(
        Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".into(),
        },
        0,
    )
    .unwrap();
    b.handle(Command::ChannelOpen { chan: CH }, 0).unwrap();
    b.handle(
        Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: "q".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments,
            owner: None,
        }),
        0,
    )
    .unwrap();
    b
}

fn publish(body: &Bytes) -> Command {
    publish_with(body, None)
}

fn publish_with(body: &Bytes, priority: Option<u8>) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: "q".into(),
        mandatory: false,
        properties: Properties {
            priority,
            ..Properties::default()
        },
        body: body.clone(),
    })
}

fn cycle(c: &mut Criterion) {
    let body = Bytes::from_static(&[0u8; 64]);
    let mut g = c.benchmark_group("broker_cycle");
    g.throughput(Throughput::Elements(1));

    // A waiting consumer: publish is delivered at once, then acked.
    let mut b = broker_with_queue(FieldTable::new());
    b.handle(
        Command::Consume {
            chan: CH,
            queue: "q".into(),
            consumer_tag: "c".into(),
            no_ack: false,
            exclusive: false,
            arguments: wharf_broker::FieldTable::new(),
        },
        0,
    )
    .unwrap();
    let mut tag = 0u64;
    g.bench_function("publish_deliver_ack", |bench| {
        bench.iter(|| {
            let o = b.handle(publish(&body), 1).unwrap();
            black_box(&o);
            tag += 1;
            b.handle(
                Command::Ack {
                    chan: CH,
                    delivery_tag: tag,
                    multiple: false,
                },
                1,
            )
            .unwrap();
        });
    });

    // A backlog of 10k ready messages: publish to the tail, get the head, ack it; in a plain
    // queue, then in one with 10 priorities fed priorities 0..9 in turn.
    let mut prio = FieldTable::new();
    prio.insert("x-max-priority", Value::I32(10));
    for (name, arguments, priorities) in [
        ("publish_get_ack_backlog_10k", FieldTable::new(), None),
        (
            "publish_get_ack_backlog_10k_priorities_10",
            prio,
            Some(10u8),
        ),
    ] {
        let mut b = broker_with_queue(arguments);
        let mut n = 0u8;
        let mut next = move || {
            n = n.wrapping_add(1);
            priorities.map(|p| n % p)
        };
        for _ in 0..10_000 {
            b.handle(publish_with(&body, next()), 1).unwrap();
        }
        g.bench_function(name, |bench| {
            bench.iter(|| get_and_ack(&mut b, publish_with(&body, next())));
        });
    }
    g.finish();
}

/// Publishes `cmd`, takes the queue's head with `basic.get` and acks it.
fn get_and_ack(b: &mut Broker, cmd: Command) {
    b.handle(cmd, 1).unwrap();
    let o = b
        .handle(
            Command::Get {
                chan: CH,
                queue: "q".into(),
                no_ack: false,
            },
            1,
        )
        .unwrap();
    let Reply::GetOk(got) = o.reply else {
        panic!("queue ran dry")
    };
    b.handle(
        Command::Ack {
            chan: CH,
            delivery_tag: got.delivery_tag.0,
            multiple: false,
        },
        1,
    )
    .unwrap();
}

criterion_group!(benches, cycle);
criterion_main!(benches);
