//! Expiry cost: a queue of N messages with random per-message TTLs; each measured step
//! advances the clock by 1,000 ms, which makes roughly 1,000-2,000 messages due (refills
//! raise the density a little; the bench prints the measured average), and calls
//! `expire_due`. Divide the time by the printed count for the cost per expired message.
//!
//! Estimate: each expired message costs a deadline-index pop and a tombstone in the queue,
//! O(log N) each, so ~1,000 x (100-300 ns) = 0.1-0.3 ms per step, nearly the same for
//! N = 100k and N = 1M (S-TTL-9: cost grows with the expired, not with the queue length).

#![allow(
    clippy::unwrap_used,
    clippy::missing_docs_in_private_items,
    missing_docs,
    reason = "bench code: a failed setup should stop the bench loudly"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use wharf_broker::{Broker, Command, FieldTable, Properties, Publish, QueueDeclare};

/// A deterministic generator (no randomness from outside): TTLs uniform in [1, n] ms, so
/// advancing the clock by 1,000 ms expires about 1,000 messages.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n + 1
    }
}

fn fill(b: &mut Broker, rng: &mut Lcg, n: u64, now: u64, count: u64) {
    for _ in 0..count {
        let ttl = rng.next(n);
        b.handle(
            Command::Publish(Publish {
                vhost: "/".into(),
                exchange: String::new(),
                routing_key: "q".into(),
                mandatory: false,
                properties: Properties {
                    expiration: Some(ttl.to_string()),
                    ..Properties::default()
                },
                body: Bytes::new(),
            }),
            now,
        )
        .unwrap();
    }
}

fn expiry(c: &mut Criterion) {
    let mut g = c.benchmark_group("broker_expiry_step_1000ms");
    g.sample_size(20);
    for n in [100_000u64, 1_000_000] {
        let mut b = Broker::new();
        b.handle(
            Command::QueueDeclare(QueueDeclare {
                vhost: "/".into(),
                queue: "q".into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
                owner: None,
            }),
            0,
        )
        .unwrap();
        let mut rng = Lcg(42);
        let mut now = 0u64;
        let mut base = 0u64;
        let (mut expired, mut steps) = (0u64, 0u64);
        fill(&mut b, &mut rng, n, now, n);
        g.bench_function(format!("queue_len_{n}"), |bench| {
            bench.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // Keep the queue near N: once a tenth has expired, refill (not timed).
                    let len = b.queues("/")[0].ready;
                    if len < n * 9 / 10 {
                        base = now;
                        fill(&mut b, &mut rng, n, now, n - len);
                    }
                    now += 1_000;
                    #[expect(clippy::disallowed_methods, reason = "benches time themselves")]
                    let start = Instant::now();
                    let o = b.expire_due(now);
                    total += start.elapsed();
                    expired += o.effects.len() as u64;
                    steps += 1;
                    black_box(o);
                }
                let _ = base;
                total
            });
        });
        println!(
            "queue_len_{n}: {} messages expired per step on average",
            expired / steps.max(1)
        );
    }
    g.finish();
}

criterion_group!(benches, expiry);
criterion_main!(benches);
