//! Checkpoints that refer to messages in place (store format 4): what a clean stop and the
//! next start cost with a large backlog, through the store as the server drives it.
//!
//! Scenarios (issue 18's goals, for a quiet machine):
//! - clean stop with 1,000,000 queued 1 KiB messages: `Store::checkpoint_at_shutdown` of the
//!   broker's snapshot and `Store::close` (goal under 1 s);
//! - the next start until every message is visible: `Store::open` (checkpoint, then the log
//!   after it) and `Broker::recovered`, its events logged, until the queue counts them all
//!   (goal under 1 s);
//! - the same for 1,000,000 messages of 100 B (recovery goal under 0.5 s).
//!
//! Back of the envelope (STYLE 3.9). A `Referenced` record is 21 B of frame and about 60 B of
//! payload plus the queue name, so 1M messages make a checkpoint of about 85 MB whatever the
//! bodies: writing it is the snapshot (~0.05 s), encoding (~50-100 ns a message) and one
//! sequential write with its fsync (~0.1-0.3 s on an SSD). Loading it is the frame checks and
//! one stored reference pushed per message (~200-300 ns): ~0.3 s per 1M. No body is read,
//! and the sealed segments the checkpoint covers are not scanned.
//!
//! Run: `cargo bench --bench checkpoint` (needs about 1.3 GB of free disk in the temporary
//! directory for the 1 KiB scenario). `WHARF_CKPT_MESSAGES=N` changes the 1,000,000,
//! `WHARF_CKPT_BODIES=1024,100` the body sizes run (one scenario each), `WHARF_CKPT_ROUNDS=R`
//! the stop/start rounds (3; the table prints each and the median). Then criterion times
//! encoding a checkpoint of 100,000 referenced messages in memory. Benches measure and never
//! assert; figures belong to a quiet machine (see tools/README.md).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a benchmark: a panic aborts the run, float casts only format figures"
)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use wharf_base::limits;
use wharf_broker::{
    Broker, Command, ConnId, FieldTable, MessageId, MessageRef, Properties, Publish, QueueDeclare,
    QueueSnapshot, Snapshot, SnapshotMessage, StoredMessage,
};
use wharf_store::{Store, StoreConfig, Ticket, checkpoint};
use wharf_wal::Lsn;

#[path = "support/mod.rs"]
mod support;
use support::{dir_bytes, env_or, median, stopwatch};

const NOW_MS: u64 = 1_700_000_000_000;
const QUEUE: &str = "backlog";
const BATCH: usize = 1000;

fn publish(body: &Bytes) -> Command {
    Command::Publish(Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: QUEUE.into(),
        mandatory: false,
        properties: Properties {
            delivery_mode: Some(2),
            ..Properties::default()
        },
        body: body.clone(),
    })
}

/// Logs `events` as the server does (the broker learns where each message's record went, so
/// it may page it out and a checkpoint may refer to it).
fn log(store: &Store, broker: &mut Broker, events: &[wharf_broker::Event]) -> Ticket {
    let mut logged = Vec::new();
    let ticket = store.log(events, &mut logged).unwrap().unwrap_or(0);
    broker.messages_logged(&logged);
    ticket
}

/// A fresh store in `config.dir` holding `n` persistent messages of `body_bytes` in one durable
/// queue, bodies beyond the default memory budget left on disk, as the server would leave it.
fn fill(config: &StoreConfig, n: usize, body_bytes: usize) -> (Store, Broker) {
    let (store, mut broker, _) = Store::open(config).unwrap();
    let declare = Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: QUEUE.into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
        owner: Some(ConnId(1)),
    });
    let events = broker.handle(declare, NOW_MS).unwrap().events;
    let mut ticket = log(&store, &mut broker, &events);
    let body = Bytes::from(vec![0x5a; body_bytes]);
    let mut events = Vec::with_capacity(BATCH);
    for i in 0..n {
        events.extend(broker.handle(publish(&body), NOW_MS).unwrap().events);
        if events.len() >= BATCH || i + 1 == n {
            ticket = log(&store, &mut broker, &events).max(ticket);
            events.clear();
            store.wait_durable(ticket).unwrap();
            broker.page_out(ticket, limits::MESSAGE_MEMORY_BYTES);
        }
    }
    (store, broker)
}

fn queued(broker: &Broker) -> u64 {
    broker
        .queues("/")
        .iter()
        .filter(|q| q.name == QUEUE)
        .map(|q| q.ready + q.unacked)
        .sum()
}

/// One scenario: `n` messages of `body_bytes`, then `rounds` clean stops and starts.
fn scenario(n: usize, body_bytes: usize, rounds: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        dir: tmp.path().join("data"),
        salvage: false,
    };
    let start = stopwatch();
    let (mut store, mut broker) = fill(&config, n, body_bytes);
    println!(
        "{n} x {body_bytes} B persistent messages queued in {:.1} s ({:.1} MB in the directory)",
        start.elapsed().as_secs_f64(),
        dir_bytes(&config.dir) as f64 / 1e6
    );
    let (mut stops, mut starts) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round > 0 {
            // Something new since the last checkpoint, so the stop writes one.
            let events = broker
                .handle(publish(&Bytes::from(vec![0x5a; body_bytes])), NOW_MS)
                .unwrap()
                .events;
            let ticket = log(&store, &mut broker, &events);
            store.wait_durable(ticket).unwrap();
        }
        let expected = queued(&broker);
        let start = stopwatch();
        let done = store.checkpoint_at_shutdown(broker.snapshot()).unwrap();
        store.close().unwrap();
        let stop = start.elapsed();
        drop(broker);
        let start = stopwatch();
        let (opened, mut recovered, summary) = Store::open(&config).unwrap();
        let events = recovered.recovered(NOW_MS).events;
        let ticket = log(&opened, &mut recovered, &events);
        opened.wait_durable(ticket).unwrap();
        let visible = queued(&recovered);
        let start_time = start.elapsed();
        println!(
            "  round {round}: clean stop {:.3} s (checkpoint {:.1} MB); next start until all \
             visible {:.3} s ({visible} of {expected} visible; {} log records replayed, {} \
             covered records read; directory {:.1} MB)",
            stop.as_secs_f64(),
            done.map_or(0.0, |d| d.bytes as f64 / 1e6),
            start_time.as_secs_f64(),
            summary.records,
            summary.covered_records,
            dir_bytes(&config.dir) as f64 / 1e6
        );
        stops.push(stop);
        starts.push(start_time);
        store = opened;
        broker = recovered;
    }
    println!(
        "  median of {rounds}: clean stop {:.3} s, next start {:.3} s",
        median(&mut stops).as_secs_f64(),
        median(&mut starts).as_secs_f64()
    );
    store.close().unwrap();
}

/// Encoding a checkpoint of 100,000 messages that are all referred to (no I/O): the
/// per-message cost of a checkpoint's records.
fn encode_references(c: &mut Criterion) {
    const N: u64 = 100_000;
    let messages = (0..N)
        .map(|i| SnapshotMessage {
            message: MessageRef::Stored(StoredMessage {
                id: MessageId(i),
                enqueued_at_ms: NOW_MS,
                ttl_ms: None,
                body_len: 1024,
                priority: 0,
                // The store's packing of a log position: segment in bits 40..63.
                at: ((i / 60_000) << 40) | ((i % 60_000) * 1100),
            }),
            delivery_count: 0,
            redelivered: false,
            held: None,
        })
        .collect();
    let snapshot = Snapshot {
        definitions: vec![wharf_broker::Event::QueueDeclared {
            vhost: "/".into(),
            queue: QUEUE.into(),
            auto_delete: false,
            arguments: FieldTable::new(),
        }],
        scheduled: Vec::new(),
        queues: vec![QueueSnapshot {
            vhost: "/".into(),
            queue: QUEUE.into(),
            messages,
        }],
        next_message_id: N,
    };
    let mut group = c.benchmark_group("checkpoint");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("encode_100k_references", |b| {
        b.iter(|| black_box(checkpoint::encode_to_vec(black_box(&snapshot), Lsn(1)).unwrap()));
    });
    group.finish();
}

fn main() {
    let n = env_or("WHARF_CKPT_MESSAGES", 1_000_000);
    let rounds = env_or("WHARF_CKPT_ROUNDS", 3).max(1);
    let bodies = std::env::var("WHARF_CKPT_BODIES").unwrap_or_else(|_| "1024,100".to_owned());
    for body in bodies.split(',').filter_map(|b| b.trim().parse().ok()) {
        scenario(n, body, rounds);
    }
    let mut c = Criterion::default().configure_from_args();
    encode_references(&mut c);
    c.final_summary();
}
