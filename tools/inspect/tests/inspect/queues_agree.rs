//! `queues` equals what the broker reports after recovering the same directory
//! (`Store::open`, then `recovered(now)`, then `queues()`), for random workloads: publishes
//! with and without their own TTL into queues with and without TTL and dead-lettering, gets
//! that ack, requeue, reject or stay unacked, purges, queue deletion and redeclaration, and
//! clock advances with expiry. Each log must also `verify` clean.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use crate::common;

use std::sync::Arc;

use common::{T0_MS, inspect};
use proptest::prelude::*;
use serde_json::Value as Json;
use wharf_broker::{Command, FieldTable, Properties, Value};
use wharf_inspect::workload::Driver;
use wharf_store::{Store, StoreConfig};
use wharf_wal::{FileStorage, WalConfig};

#[derive(Debug, Clone)]
enum Op {
    Publish {
        q: usize,
        expiration_ms: Option<u32>,
        body_len: usize,
    },
    Get {
        q: usize,
        then: Then,
    },
    Advance {
        ms: u32,
    },
    Purge {
        q: usize,
    },
    DeleteAndRedeclare {
        q: usize,
    },
}

#[derive(Debug, Clone, Copy)]
enum Then {
    Ack,
    Requeue,
    Reject,
    Hold,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, prop::option::of(1u32..4000), 0..64usize)
            .prop_map(|(q, expiration_ms, body_len)| Op::Publish { q, expiration_ms, body_len }),
        3 => (0..3usize, prop_oneof![Just(Then::Ack), Just(Then::Requeue), Just(Then::Reject), Just(Then::Hold)])
            .prop_map(|(q, then)| Op::Get { q, then }),
        1 => (0..3000u32).prop_map(|ms| Op::Advance { ms }),
        1 => (0..3usize).prop_map(|q| Op::Purge { q }),
        1 => (0..3usize).prop_map(|q| Op::DeleteAndRedeclare { q }),
    ]
}

fn small_wal() -> WalConfig {
    WalConfig {
        segment_bytes_max: 8192,
        preallocate: false,
        ..WalConfig::default()
    }
}

fn run_workload(dir: &std::path::Path, ops: &[Op]) -> u64 {
    let mut d = Driver::create(dir, 8192, false, T0_MS).unwrap();
    d.exchange("dlx", "fanout").unwrap();
    d.queue("dlq", FieldTable::new()).unwrap();
    d.bind("dlq", "dlx", "").unwrap();
    let args: Vec<FieldTable> = [(Some(1000), true), (None, true), (Some(2500), false)]
        .into_iter()
        .map(|(ttl, dlx)| {
            let mut args = FieldTable::new();
            if let Some(t) = ttl {
                args.insert("x-message-ttl", Value::I32(t));
            }
            if dlx {
                args.insert("x-dead-letter-exchange", Value::long_str("dlx"));
            }
            args
        })
        .collect();
    for (i, a) in args.iter().enumerate() {
        d.queue(&format!("q{i}"), a.clone()).unwrap();
    }
    for op in ops {
        match op {
            Op::Publish {
                q,
                expiration_ms,
                body_len,
            } => {
                let props = Properties {
                    expiration: expiration_ms.map(|e| e.to_string()),
                    ..Properties::default()
                };
                d.publish("", &format!("q{q}"), props, &vec![b'b'; *body_len])
                    .unwrap();
            }
            Op::Get { q, then } => {
                if let Some(tag) = d.get(&format!("q{q}")).unwrap() {
                    match then {
                        Then::Ack => d.ack(tag).unwrap(),
                        Then::Requeue => d.reject(tag, true).unwrap(),
                        Then::Reject => d.reject(tag, false).unwrap(),
                        Then::Hold => {}
                    }
                }
            }
            Op::Purge { q } => {
                d.run(Command::QueuePurge {
                    vhost: "/".to_owned(),
                    queue: format!("q{q}"),
                    owner: None,
                })
                .unwrap();
            }
            Op::DeleteAndRedeclare { q } => {
                d.run(Command::QueueDelete {
                    vhost: "/".to_owned(),
                    queue: format!("q{q}"),
                    if_unused: false,
                    if_empty: false,
                    owner: None,
                })
                .unwrap();
                d.queue(&format!("q{q}"), args[*q].clone()).unwrap();
            }
            Op::Advance { ms } => {
                let now = d.now_ms + u64::from(*ms);
                d.expire_at(now).unwrap();
            }
        }
    }
    let end = d.now_ms;
    d.close().unwrap();
    end
}

/// (queue, ready, bytes, oldest enqueue time, next deadline).
type Row = (String, u64, u64, Option<u64>, Option<u64>);

/// The rows as the recovered broker reports them.
fn broker_view(dir: &std::path::Path, now_ms: u64) -> Vec<Row> {
    let config = StoreConfig {
        dir: dir.to_owned(),
        salvage: false,
    };
    let (store, mut broker, _) =
        Store::open_with(&config, Arc::new(FileStorage), &small_wal()).unwrap();
    let _ = broker.recovered(now_ms);
    drop(store);
    let state = broker.durable_state();
    broker
        .queues("/")
        .into_iter()
        .map(|q| {
            let msgs = &state
                .queues
                .iter()
                .find(|(i, _)| i.name == q.name)
                .unwrap()
                .1;
            let oldest = msgs.iter().map(|m| m.enqueued_at_ms).min();
            let deadline = msgs.iter().filter_map(|m| m.deadline_ms).min();
            (q.name, q.ready, q.ready_bytes, oldest, deadline)
        })
        .collect()
}

fn inspector_view(dir: &str, now: &str) -> Vec<Row> {
    let (code, out) = inspect(&["--json", "queues", dir, "--now", now]);
    assert_eq!(code, 0, "{out}");
    out.lines()
        .map(|l| {
            let v: Json = serde_json::from_str(l).unwrap();
            assert_eq!(v["unacked"], 0, "after recovery every message is ready");
            (
                v["queue"].as_str().unwrap().to_owned(),
                v["ready"].as_u64().unwrap(),
                v["bytes"].as_u64().unwrap(),
                v["oldest_enqueued_ms"].as_u64(),
                v["next_deadline_ms"].as_u64(),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn s_dur_5_queues_equals_the_recovered_brokers_view(
        ops in prop::collection::vec(op(), 1..60),
        later_ms in 0u64..5000,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let end = run_workload(dir, &ops);
        let now = end + later_ms;
        let d = dir.to_str().unwrap();
        let want_clean = inspect(&["verify", d]).0;
        prop_assert_eq!(want_clean, 0, "a log written by the library verifies clean");
        let got = inspector_view(d, &now.to_string());
        // export agrees with the ready counts, in the same recovered state.
        for (q, ready, ..) in &got {
            let (code, out) = inspect(&["export", d, "--queue", q, "--now", &now.to_string()]);
            prop_assert_eq!(code, 0);
            prop_assert_eq!(out.lines().count() as u64, *ready, "export of {}", q);
        }
        // Recovering writes to the directory, so it comes after every inspection.
        let want = broker_view(dir, now);
        prop_assert_eq!(got, want);
    }
}
