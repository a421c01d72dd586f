//! Recovery speed: how fast `Store::open` replays a log of persistent 100 B messages into a
//! fresh broker, in records/s and MB/s, split into its three costs (WAL scan with CRC checks,
//! record decoding, `Broker::apply`).
//!
//! Back of the envelope (STYLE 3.9). A Published record of a 100 B body to one queue is about
//! 140 B of payload + 21 B of frame, so 1M messages are ~160 MB of log. Reading it: from the
//! page cache (memcpy/mmap, ~5-10 GB/s) well under 0.1 s; cold from this machine's disk
//! (~320 MB/s sequential, see `benches/wal_append.rs`) ~0.5 s. CRC32 (crc32fast, SIMD) runs at
//! several GB/s: ~0.05 s. Decoding is a few bounds checks, two small `String`s and a 100 B
//! body copy per record: ~100-200 ns, so 0.1-0.2 s per 1M. Apply allocates an `Arc<Message>`
//! and pushes a queue entry (plus its index entries): ~200-400 ns. Total ~0.4-0.7 s per 1M
//! warm, i.e. 1.5-2.5M records/s and 250-400 MB/s. The goal (1M persistent 100 B
//! messages recovered in under 1 s; 10M in 5 s, i.e. 2M records/s) is within reach of a
//! single thread only if apply stays near the low end; 10M also needs ~10x the memory of 1M
//! since the model keeps every body in memory today.
//!
//! Measured (this 2-core shared VM, warm page cache, 2026-11-22; payload MB/s):
//! - 1M messages over 10,000 queues (172 MB of segments): WAL scan 0.24-0.37 s (2.7-4.2M
//!   records/s), scan + decode 0.48-0.65 s (1.6-2.1M records/s), `Store::open` 1.96-2.03 s
//!   (~0.5M records/s, 73-76 MB/s). Decoding costs ~250 ns per record, applying ~1.4 us: the
//!   model, not the log, is the cost, and 1M in under 1 s needs `apply` ~3x faster.
//! - All messages in ONE queue: before commit 0c88209, 50k in 0.55 s, 100k in 2.2 s, 200k in
//!   11.3 s (quadratic: `replay_push` walked the queue for its last id). After it, 1M in one
//!   queue: WAL scan 0.18 s, scan + decode 0.35-0.47 s, `Store::open` 0.52-0.76 s.
//!
//! - Checkpoints (2026-11-22, 1M messages in one queue, medians of 3 warm runs):
//!   - all 1M live, nothing else in the log: `Store::open` log only 1.02 s, from the
//!     checkpoint 1.02 s (the log is all live data, so there is nothing to skip). Snapshot
//!     0.05 s in the broker task; writing the 167 MB checkpoint with its fsync 1.8 s on its
//!     own thread. Data dir 167 MB -> 200 MB (checkpoint 167 MB + the active segment, which
//!     is never deleted, with its preallocation).
//!   - plus 2M publish/take pairs of history (`WHARF_REPLAY_CHURN=2000000`, 5M records):
//!     log only 3.57 s, from the checkpoint 1.06 s; data dir 593 MB -> 223 MB (8 of 9
//!     segments deleted).
//!
//! Run: `cargo bench --bench replay` (`WHARF_REPLAY_RECORDS=N` to change the 1,000,000,
//! `WHARF_REPLAY_QUEUES=Q` to spread them round robin over Q queues instead of one,
//! `WHARF_REPLAY_CHURN=K` to add K publish/take pairs through another queue after them: history
//! that a checkpoint drops).
//! It prints one table; then criterion times decoding one record. Benches measure and never
//! assert.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a benchmark: a panic aborts the run, float casts only format figures"
)]

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use wharf_broker::{Broker, Command, FieldTable, Properties, QueueDeclare};
use wharf_broker::{ConnId, Publish};
use wharf_store::codec::{self, StoreRecord};
use wharf_store::{Store, StoreConfig};
use wharf_wal::{FileStorage, RecoveryMode, scan};

#[path = "support/mod.rs"]
mod support;
use support::{dir_bytes, env_or, median, stopwatch};

const BODY_BYTES: usize = 100;
const BATCH: usize = 1000;

/// Writes `n` persistent 100 B messages, round robin over `queues` durable queues, through a
/// live broker and the store, as the server would (events logged in batches of 1000), and
/// returns the size of the segment files.
fn write_log(config: &StoreConfig, n: usize, queues: usize) -> u64 {
    let (store, mut broker, _) = Store::open(config).unwrap();
    let now = 1_700_000_000_000;
    for q in 0..queues {
        let declare = broker
            .handle(
                Command::QueueDeclare(QueueDeclare {
                    vhost: "/".into(),
                    queue: format!("q{q}"),
                    passive: false,
                    durable: true,
                    exclusive: false,
                    auto_delete: false,
                    arguments: FieldTable::new(),
                    owner: Some(ConnId(1)),
                }),
                now,
            )
            .unwrap();
        store.log(&declare.events, &mut Vec::new()).unwrap();
    }
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    let mut events = Vec::with_capacity(BATCH);
    let mut ticket = 0;
    for i in 0..n {
        let publish = Command::Publish(Publish {
            vhost: "/".into(),
            exchange: String::new(),
            routing_key: format!("q{}", i % queues),
            mandatory: false,
            properties: Properties {
                delivery_mode: Some(2),
                ..Properties::default()
            },
            body: body.clone(),
        });
        events.extend(broker.handle(publish, now).unwrap().events);
        if events.len() >= BATCH || i + 1 == n {
            ticket = store
                .log(&events, &mut Vec::new())
                .unwrap()
                .unwrap_or(ticket);
            events.clear();
        }
    }
    let churn = env_or("WHARF_REPLAY_CHURN", 0);
    if churn > 0 {
        ticket = write_churn(&store, &mut broker, churn).max(ticket);
    }
    store.wait_durable(ticket).unwrap();
    store.close().unwrap();
    std::fs::read_dir(&config.dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// History that is no longer live: `pairs` persistent 100 B messages published to queue
/// `churn` and taken at once (`basic.get` with no-ack), as a benchmark's acked traffic.
fn write_churn(store: &Store, broker: &mut Broker, pairs: usize) -> u64 {
    use wharf_broker::ChanRef;
    use wharf_broker::ChannelId;
    let now = 1_700_000_000_000;
    let chan = ChanRef {
        conn: ConnId(1),
        channel: ChannelId(1),
    };
    let mut events = Vec::new();
    for cmd in [
        Command::ConnectionOpen {
            conn: ConnId(1),
            vhost: "/".into(),
        },
        Command::ChannelOpen { chan },
        Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: "churn".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
            owner: Some(ConnId(1)),
        }),
    ] {
        events.extend(broker.handle(cmd, now).unwrap().events);
    }
    let body = Bytes::from(vec![0x5a; BODY_BYTES]);
    let mut ticket = 0;
    for i in 0..pairs {
        let publish = Command::Publish(Publish {
            vhost: "/".into(),
            exchange: String::new(),
            routing_key: "churn".into(),
            mandatory: false,
            properties: Properties {
                delivery_mode: Some(2),
                ..Properties::default()
            },
            body: body.clone(),
        });
        events.extend(broker.handle(publish, now).unwrap().events);
        let get = Command::Get {
            chan,
            queue: "churn".into(),
            no_ack: true,
        };
        events.extend(broker.handle(get, now).unwrap().events);
        if events.len() >= BATCH || i + 1 == pairs {
            ticket = store
                .log(&events, &mut Vec::new())
                .unwrap()
                .unwrap_or(ticket);
            events.clear();
        }
    }
    ticket
}

struct Pass {
    name: &'static str,
    records: u64,
    payload_bytes: u64,
    elapsed: Duration,
}

fn scan_only(dir: &Path) -> Pass {
    let start = stopwatch();
    let (mut records, mut bytes) = (0u64, 0u64);
    scan(&FileStorage, dir, RecoveryMode::Strict, &mut |r| {
        records += 1;
        bytes += r.payload.len() as u64;
        black_box(r.payload);
        Ok(())
    })
    .unwrap();
    Pass {
        name: "WAL scan (CRC)",
        records,
        payload_bytes: bytes,
        elapsed: start.elapsed(),
    }
}

fn scan_decode(dir: &Path) -> Pass {
    let start = stopwatch();
    let (mut records, mut bytes) = (0u64, 0u64);
    scan(&FileStorage, dir, RecoveryMode::Strict, &mut |r| {
        records += 1;
        bytes += r.payload.len() as u64;
        black_box(codec::decode(r.kind, r.payload).unwrap());
        Ok(())
    })
    .unwrap();
    Pass {
        name: "scan + decode",
        records,
        payload_bytes: bytes,
        elapsed: start.elapsed(),
    }
}

fn full_open(config: &StoreConfig) -> (Pass, Broker) {
    let start = stopwatch();
    let (store, broker, summary) = Store::open(config).unwrap();
    let elapsed = start.elapsed();
    store.close().unwrap();
    let pass = Pass {
        name: "Store::open (+ apply)",
        records: summary.records,
        payload_bytes: summary.bytes,
        elapsed,
    };
    (pass, broker)
}

fn print(p: &Pass) {
    let s = p.elapsed.as_secs_f64();
    println!(
        "{:<24} {:>10} records {:>8.3} s {:>12.0} records/s {:>8.1} MB/s",
        p.name,
        p.records,
        s,
        p.records as f64 / s,
        p.payload_bytes as f64 / s / 1e6
    );
}

fn table() {
    let n = env_or("WHARF_REPLAY_RECORDS", 1_000_000);
    let queues = env_or("WHARF_REPLAY_QUEUES", 1).max(1);
    let tmp = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        dir: tmp.path().join("data"),
        salvage: false,
    };
    let start = stopwatch();
    let log_bytes = write_log(&config, n, queues);
    println!(
        "wrote {n} persistent {BODY_BYTES} B messages to {queues} queue(s): \
         {:.1} MB of segments (preallocated) in {:.2} s",
        log_bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    // Warm page cache: the log was just written. Three runs of each pass; medians below.
    let mut log_only = Vec::new();
    for _ in 0..3 {
        print(&scan_only(&config.dir));
        print(&scan_decode(&config.dir));
        let (pass, broker) = full_open(&config);
        print(&pass);
        log_only.push(pass.elapsed);
        let recovered: u64 = broker.queues("/").iter().map(|q| q.ready).sum();
        println!("  ({recovered} of {n} messages back in their queues)");
        drop(broker);
    }
    checkpointed(&config, n, &mut log_only);
}

/// Takes the checkpoint a clean shutdown takes (which deletes the covered segments), then
/// times `Store::open` from it (checkpoint + an almost empty log) against the log-only runs.
fn checkpointed(config: &StoreConfig, n: usize, log_only: &mut [Duration]) {
    let before = dir_bytes(&config.dir);
    let (mut store, broker, _) = Store::open(config).unwrap();
    let start = stopwatch();
    let snapshot = broker.snapshot();
    let snapshot_time = start.elapsed();
    let done = store.checkpoint_now(snapshot).unwrap().unwrap();
    let write_time = start.elapsed();
    store.close().unwrap();
    drop(broker);
    let after = dir_bytes(&config.dir);
    println!(
        "checkpoint: snapshot {:.3} s, written (with waiting, fsync, rename, segment deletion)          {:.3} s, {:.1} MB; {} segments deleted; data dir {:.1} MB -> {:.1} MB",
        snapshot_time.as_secs_f64(),
        write_time.as_secs_f64(),
        done.bytes as f64 / 1e6,
        done.segments_deleted,
        before as f64 / 1e6,
        after as f64 / 1e6
    );
    let mut with_checkpoint = Vec::new();
    for _ in 0..3 {
        let start = stopwatch();
        let (store, broker, summary) = Store::open(config).unwrap();
        let elapsed = start.elapsed();
        store.close().unwrap();
        let recovered: u64 = broker.queues("/").iter().map(|q| q.ready).sum();
        println!(
            "Store::open from checkpoint at Lsn {:?}: {:.3} s ({} messages carried, {} log \
             records after it; {recovered} of {n} messages back)",
            summary.checkpoint_lsn,
            elapsed.as_secs_f64(),
            summary.checkpoint_messages,
            summary.records
        );
        with_checkpoint.push(elapsed);
        drop(broker);
    }
    println!(
        "median Store::open: log only {:.3} s, from checkpoint {:.3} s",
        median(log_only).as_secs_f64(),
        median(&mut with_checkpoint).as_secs_f64()
    );
}

fn decode_one(c: &mut Criterion) {
    let message = wharf_broker::Message {
        id: wharf_broker::MessageId(7),
        enqueued_at_ms: 1_700_000_000_000,
        ttl_ms: None,
        exchange: String::new(),
        routing_key: "q".into(),
        properties: Properties {
            delivery_mode: Some(2),
            ..Properties::default()
        },
        body: Bytes::from(vec![0x5a; BODY_BYTES]),
        stored: wharf_broker::StoredSlot::default(),
    };
    let event = wharf_broker::Event::Published {
        vhost: "/".into(),
        message: wharf_broker::MessageRecord {
            message: Arc::new(message),
        },
        queues: vec!["q".into()],
        scheduled: None,
    };
    let mut payload = Vec::new();
    let kind = codec::encode_event(&event, &mut payload).unwrap().byte();
    let mut group = c.benchmark_group("store_codec");
    group.throughput(Throughput::Bytes(payload.len() as u64));
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_millis(500));
    group.bench_function("decode_published_100B", |b| {
        b.iter(|| match codec::decode(kind, black_box(&payload)).unwrap() {
            StoreRecord::Event(e) => black_box(e),
            StoreRecord::Format { .. } | StoreRecord::Copied { .. } => unreachable!(),
        });
    });
    group.bench_function("encode_published_100B", |b| {
        let mut out = Vec::with_capacity(256);
        b.iter(|| {
            out.clear();
            codec::encode_event(black_box(&event), &mut out).unwrap();
            black_box(&out);
        });
    });
    group.finish();
}

fn main() {
    table();
    let mut c = Criterion::default().configure_from_args();
    decode_one(&mut c);
    c.final_summary();
}
