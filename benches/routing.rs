//! Topic routing over 10,000 bindings: publishes routed per second for routing keys that match
//! 0, 1 and about 100 bindings. Measures `broker::routing::topic` only; depends on nothing else.
//!
//! Back of the envelope: a routing key like `stock.S2999.nyse` has 3 words. The trie keeps a
//! small set of active nodes (here the root, the `#` node of `#.halted` and, inside `stock`,
//! its `*` branch), and each active node costs one `SipHash` lookup of a short word (~20-30 ns)
//! per word. That is ~3 words x ~3 lookups x ~25 ns, about 0.2-0.3 us per key, so 3-5 million
//! keys/s on one core whatever the number of bindings, plus ~1 ns per matched destination
//! copied out (~0.1 us for 100). The linear reference (`topic_matches` on each of the 10,000
//! bindings, ~100 ns each with its allocations) should take ~1 ms per key: the trie should be
//! three orders of magnitude faster. A result far from these is a finding.
//!
//! Run: `cargo bench --bench routing` (about 15 s).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wharf_broker::{TopicIndex, topic_matches};

/// Symbols with exact bindings on every venue.
const SYMBOLS: u32 = 3000;
const VENUES: [&str; 3] = ["nyse", "nasdaq", "lse"];

/// A realistic mix of 10,000 bindings, as (pattern, destination id).
fn bindings() -> Vec<(String, u32)> {
    let mut out = Vec::new();
    // 9,000 exact: one queue per symbol and venue.
    for sym in 0..SYMBOLS {
        for venue in VENUES {
            out.push((format!("stock.S{sym:04}.{venue}"), 0));
        }
    }
    // 800 per-symbol feeds from every venue.
    for sym in 0..800 {
        out.push((format!("stock.S{sym:04}.*"), 0));
    }
    // 150 per-venue consumers: 50 on lse, 100 on nasdaq.
    for i in 0..150 {
        let venue = if i < 50 { "lse" } else { "nasdaq" };
        out.push((format!("stock.*.{venue}"), 0));
    }
    // 50 catch-alls with `#`; the `#.halted` node stays active along every key.
    for _ in 0..25 {
        out.push(("audit.#".to_owned(), 0));
        out.push(("#.halted".to_owned(), 0));
    }
    // Every binding gets its own destination so none is a duplicate.
    for (dest, binding) in (0_u32..).zip(out.iter_mut()) {
        binding.1 = dest;
    }
    assert_eq!(out.len(), 10_000);
    out
}

/// (name, routing key, number of bindings it matches).
const KEYS: [(&str, &str, usize); 3] = [
    ("0_matches", "stock.S9999.nyse", 0),
    ("1_match", "stock.S2999.nyse", 1),
    ("102_matches", "stock.S0001.nasdaq", 102),
];

fn topic_routing(c: &mut Criterion) {
    let bindings = bindings();
    let mut index = TopicIndex::new();
    for (pattern, dest) in &bindings {
        assert!(index.bind(pattern, *dest));
    }
    index.check_invariants();

    let mut group = c.benchmark_group("topic_route_10k_bindings");
    group
        .throughput(Throughput::Elements(1))
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    let mut out = Vec::with_capacity(256);
    for (name, key, expected) in KEYS {
        out.clear();
        index.route(key, &mut out);
        assert_eq!(out.len(), expected, "{key}: the bench's premise is wrong");
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                index.route(black_box(key), &mut out);
                black_box(out.len())
            });
        });
    }
    // The linear scan the trie replaced, for scale (one key suffices: it costs the same for all).
    group.bench_function("linear_reference_1_match", |b| {
        b.iter(|| {
            bindings
                .iter()
                .filter(|(pattern, _)| topic_matches(pattern, black_box("stock.S2999.nyse")))
                .count()
        });
    });
    group.finish();
}

criterion_group!(benches, topic_routing);
criterion_main!(benches);
