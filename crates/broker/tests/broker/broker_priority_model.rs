//! Model-based test of priority queues (S-PRIO, STYLE 2.4): random publishes (random
//! priorities, some above the maximum or missing, random per-message TTLs), gets with and
//! without acks, a consumer with a prefetch of 1 to 3, acks, rejects with and without
//! requeue, `basic.recover` and clock advances run against the broker and against
//! `Reference`, a naive model (one `Vec`, the next message found by a linear scan for the
//! highest priority, then the oldest). After every step the deliveries (in order), the ready
//! list (in delivery order, with redelivered flags), the dead-letter sink's count and the
//! next deadline must agree; at the end the broker is rebuilt from its events (recovery) and
//! must hand out the same messages in the same order.
//!
//! Scope: one durable priority queue with a random maximum priority, queue TTL, length limit
//! (drop-head or reject-publish) and dead-lettering into a plain sink queue; one channel,
//! at most one consumer.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test code: a panic is a failed test"
)]

use crate::broker_common;

use std::collections::BTreeMap;

use broker_common::{H, persistent, s};
use bytes::Bytes;
use proptest::prelude::*;
use wharf_broker::{Broker, Command, Value};

#[derive(Debug, Clone, Copy)]
struct Config {
    max_priority: u8,
    ttl: Option<u32>,
    max_len: Option<u64>,
    reject: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Publish {
        priority: Option<u8>,
        ttl: Option<u32>,
    },
    Get {
        ack: bool,
    },
    Ack(usize),
    Reject(usize, bool),
    Recover,
    Consume(u16),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::option::of(prop_oneof![4 => 0..8u8, 1 => Just(255u8)]),
              prop::option::of(0..40u32))
            .prop_map(|(priority, ttl)| Op::Publish { priority, ttl }),
        3 => any::<bool>().prop_map(|ack| Op::Get { ack }),
        2 => (0..8usize).prop_map(Op::Ack),
        2 => (0..8usize, any::<bool>()).prop_map(|(i, r)| Op::Reject(i, r)),
        1 => Just(Op::Recover),
        1 => (1..4u16).prop_map(Op::Consume),
        3 => (0..30u64).prop_map(Op::Advance),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        0..6u8,
        prop::option::of(0..40u32),
        prop::option::of(0..5u64),
        any::<bool>(),
    )
        .prop_map(|(max_priority, ttl, max_len, reject)| Config {
            max_priority,
            ttl,
            max_len,
            reject,
        })
}

#[derive(Debug, Clone)]
struct RMsg {
    body: u64,
    lane: u8,
    deadline: Option<u64>,
    redelivered: bool,
}

/// The naive model: ready messages in any order; the head is found by a scan. Unacked
/// messages by delivery tag, with whether the consumer (rather than `basic.get`) holds them.
#[derive(Debug)]
struct Reference {
    cfg: Config,
    ready: Vec<RMsg>,
    unacked: BTreeMap<u64, (RMsg, bool)>,
    sink: Vec<u64>,
    /// The consumer's prefetch, once it consumes (one consumer at most).
    prefetch: Option<u16>,
}

impl Reference {
    /// S-PRIO-1/2: priorities 0..=max(1, max); none is 0; above the top is the top.
    fn lane(&self, priority: Option<u8>) -> u8 {
        priority.unwrap_or(0).min(self.cfg.max_priority.max(1))
    }

    /// S-PRIO-3: the highest priority first, the oldest within it.
    fn head(&self) -> Option<usize> {
        (0..self.ready.len())
            .max_by_key(|&i| (self.ready[i].lane, std::cmp::Reverse(self.ready[i].body)))
    }

    fn in_order(&self) -> Vec<(u64, bool)> {
        let mut v: Vec<&RMsg> = self.ready.iter().collect();
        v.sort_by_key(|m| (std::cmp::Reverse(m.lane), m.body));
        v.into_iter().map(|m| (m.body, m.redelivered)).collect()
    }

    /// S-PRIO-6: drop-head takes the head (the next to deliver).
    fn drop_head(&mut self) {
        let Some(max) = self.cfg.max_len else { return };
        while !self.cfg.reject && self.ready.len() as u64 > max {
            let i = self.head().unwrap();
            let m = self.ready.remove(i);
            self.sink.push(m.body);
        }
    }

    /// How many more the consumer may hold.
    fn room(&self) -> usize {
        let held = self.unacked.values().filter(|u| u.1).count();
        self.prefetch
            .map_or(0, |p| usize::from(p).saturating_sub(held))
    }

    /// Enqueues a new message (or hands it straight to a consumer with room when the queue
    /// is empty, S-TTL-6); false if refused.
    fn publish(&mut self, m: RMsg, delivered: &mut Vec<RMsg>) -> bool {
        let full = self
            .cfg
            .max_len
            .is_some_and(|mx| self.ready.len() as u64 + 1 > mx);
        if self.cfg.reject && full {
            return false;
        }
        if self.ready.is_empty() && self.room() > 0 {
            delivered.push(m);
            return true;
        }
        self.ready.push(m);
        self.drop_head();
        true
    }

    /// The end of a step: the consumer takes heads while it has room (`taken` are on their
    /// way to it already; a due head expires first, S-TTL-5), then everything due expires
    /// (S-PRIO-5). Returns what it took.
    fn settle(&mut self, now: u64, taken: usize) -> Vec<RMsg> {
        let mut out = Vec::new();
        loop {
            self.expire_heads(now);
            if self.room() <= taken + out.len() {
                break;
            }
            let Some(i) = self.head() else { break };
            out.push(self.ready.remove(i));
        }
        self.expire(now);
        out
    }

    fn expire_heads(&mut self, now: u64) {
        while let Some(i) = self.head()
            && self.ready[i].deadline.is_some_and(|d| d <= now)
        {
            let m = self.ready.remove(i);
            self.sink.push(m.body);
        }
    }

    fn requeue(&mut self, mut m: RMsg) {
        m.redelivered = true;
        self.ready.push(m);
        self.drop_head();
    }

    /// S-PRIO-5: everything due expires, wherever it is.
    fn expire(&mut self, now: u64) {
        let (due, keep): (Vec<RMsg>, Vec<RMsg>) = self
            .ready
            .drain(..)
            .partition(|m| m.deadline.is_some_and(|d| d <= now));
        self.ready = keep;
        self.sink.extend(due.iter().map(|m| m.body));
    }

    fn next_deadline(&self) -> Option<u64> {
        self.ready.iter().filter_map(|m| m.deadline).min()
    }
}

fn body_of(b: &Bytes) -> u64 {
    u64::from_le_bytes(b.as_ref().try_into().unwrap())
}

struct Run {
    h: H,
    r: Reference,
    next_body: u64,
}

impl Run {
    fn new(cfg: Config) -> Self {
        let mut h = H::new();
        h.durable_queue("sink", &[]);
        let mut a = vec![
            ("x-max-priority", Value::U8(cfg.max_priority)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("sink")),
        ];
        if let Some(t) = cfg.ttl {
            a.push(("x-message-ttl", Value::I64(i64::from(t))));
        }
        if let Some(m) = cfg.max_len {
            a.push(("x-max-length", Value::I64(i64::try_from(m).unwrap())));
        }
        if cfg.reject {
            a.push(("x-overflow", s("reject-publish")));
        }
        h.durable_queue("p", &a);
        let r = Reference {
            cfg,
            ready: Vec::new(),
            unacked: BTreeMap::new(),
            sink: Vec::new(),
            prefetch: None,
        };
        Run { h, r, next_body: 1 }
    }

    fn pick(&self, i: usize) -> Option<u64> {
        let n = self.r.unacked.len();
        (n > 0).then(|| *self.r.unacked.keys().nth(i % n).unwrap())
    }

    fn step(&mut self, op: &Op) {
        let now = self.h.now;
        match *op {
            Op::Publish { priority, ttl } => self.publish(priority, ttl),
            Op::Get { ack } => {
                self.get(ack);
                let none = self.r.settle(now, 0);
                assert!(none.is_empty(), "a get frees no consumer room");
            }
            Op::Ack(i) => {
                if let Some(tag) = self.pick(i) {
                    let o = self.h.ack(tag, false);
                    self.r.unacked.remove(&tag);
                    self.delivered(&o, Vec::new());
                }
            }
            Op::Reject(i, requeue) => {
                if let Some(tag) = self.pick(i) {
                    let o = self.h.reject(tag, requeue);
                    let (m, _) = self.r.unacked.remove(&tag).unwrap();
                    if requeue {
                        self.r.requeue(m);
                    } else {
                        self.r.sink.push(m.body);
                    }
                    self.delivered(&o, Vec::new());
                }
            }
            Op::Recover => {
                let o = self.h.ok(Command::Recover {
                    chan: broker_common::CH,
                    requeue: true,
                });
                for (m, _) in std::mem::take(&mut self.r.unacked).into_values() {
                    self.r.requeue(m);
                }
                self.delivered(&o, Vec::new());
            }
            Op::Consume(prefetch) => {
                if self.r.prefetch.is_none() {
                    self.h.ok(Command::Qos {
                        chan: broker_common::CH,
                        prefetch_count: prefetch,
                        global: false,
                    });
                    let o = self.h.consume("p", "c", false);
                    self.r.prefetch = Some(prefetch);
                    self.delivered(&o, Vec::new());
                }
            }
            Op::Advance(ms) => {
                let o = self.h.advance(ms);
                self.r.expire(self.h.now);
                self.delivered(&o, Vec::new());
            }
        }
    }

    /// Checks the deliveries of one step (`direct`: handed over as it was published) against
    /// the reference's, in order, and records their tags.
    fn delivered(&mut self, o: &wharf_broker::Outcome, direct: Vec<RMsg>) {
        let mut want = direct;
        let taken = want.len();
        want.extend(self.r.settle(self.h.now, taken));
        let got = broker_common::deliveries(o);
        let got_ids: Vec<(u64, bool)> = got
            .iter()
            .map(|d| (body_of(&d.message.body), d.redelivered))
            .collect();
        let want_ids: Vec<(u64, bool)> = want.iter().map(|m| (m.body, m.redelivered)).collect();
        assert_eq!(got_ids, want_ids, "deliveries");
        for (d, m) in got.iter().zip(want) {
            self.r.unacked.insert(d.delivery_tag.0, (m, true));
        }
    }

    fn publish(&mut self, priority: Option<u8>, ttl: Option<u32>) {
        let body = self.next_body;
        self.next_body += 1;
        let mut p = persistent();
        p.priority = priority;
        p.expiration = ttl.map(|t| t.to_string());
        let o = self
            .h
            .ok(wharf_broker::Command::Publish(wharf_broker::Publish {
                vhost: "/".into(),
                exchange: String::new(),
                routing_key: "p".into(),
                mandatory: false,
                properties: p,
                body: Bytes::copy_from_slice(&body.to_le_bytes()),
            }));
        let lowest = match (ttl, self.r.cfg.ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let m = RMsg {
            body,
            lane: self.r.lane(priority),
            deadline: lowest.map(|t| self.h.now + u64::from(t)),
            redelivered: false,
        };
        let mut direct = Vec::new();
        let accepted = self.r.publish(m, &mut direct);
        assert_eq!(o.published().unwrap().refused, !accepted, "reject-publish");
        self.delivered(&o, direct);
    }

    fn get(&mut self, ack: bool) {
        let got = self.h.get("p", !ack);
        let want = self.r.head().map(|i| self.r.ready.remove(i));
        match (got, want) {
            (None, None) => {}
            (Some(g), Some(m)) => {
                assert_eq!(
                    (body_of(&g.message.body), g.redelivered),
                    (m.body, m.redelivered),
                    "basic.get hands out the head"
                );
                if ack {
                    self.r.unacked.insert(g.delivery_tag.0, (m, false));
                }
            }
            (g, m) => panic!("broker got {g:?}, reference {m:?}"),
        }
    }

    fn compare(&self) {
        assert_eq!(
            ready_in_order(&self.h.b, "p"),
            self.r.in_order(),
            "ready list"
        );
        assert_eq!(
            self.h.ready("sink"),
            self.r.sink.len() as u64,
            "dead-lettered"
        );
        assert_eq!(
            self.h.b.next_deadline(),
            self.r.next_deadline(),
            "next deadline"
        );
    }

    /// S-PRIO-7: a broker rebuilt from the events hands out the same messages in the same
    /// order, the unacked ones back in their place as redelivered (S-DUR-6).
    fn check_recovery(mut self) {
        let mut b = self.h.replay();
        b.recovered(self.h.now);
        b.check_invariants();
        for (m, _) in std::mem::take(&mut self.r.unacked).into_values() {
            self.r.ready.push(RMsg {
                redelivered: true,
                ..m
            });
        }
        // S-TTL-8: one held past its deadline dies as it comes back.
        self.r.expire(self.h.now);
        assert_eq!(
            ready_in_order(&b, "p"),
            self.r.in_order(),
            "recovered order"
        );
        let mut sink: Vec<u64> = ready_in_order(&b, "sink").iter().map(|m| m.0).collect();
        sink.sort_unstable();
        self.r.sink.sort_unstable();
        assert_eq!(sink, self.r.sink, "recovered sink");
    }
}

fn ready_in_order(b: &Broker, queue: &str) -> Vec<(u64, bool)> {
    b.ready_messages("/", queue)
        .into_iter()
        .map(|(m, redelivered)| (body_of(&m.body), redelivered))
        .collect()
}

#[test]
fn s_prio_model_sanity_a_requeued_high_message_is_the_head_again() {
    let mut run = Run::new(Config {
        max_priority: 3,
        ttl: None,
        max_len: None,
        reject: false,
    });
    for op in [
        Op::Publish {
            priority: Some(1),
            ttl: None,
        },
        Op::Publish {
            priority: Some(3),
            ttl: None,
        },
        Op::Get { ack: true },
        Op::Reject(0, true),
    ] {
        run.step(&op);
        run.compare();
    }
    assert_eq!(ready_in_order(&run.h.b, "p"), [(2, true), (1, false)]);
    run.check_recovery();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn s_prio_broker_agrees_with_the_priority_model(
        cfg in config(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut run = Run::new(cfg);
        run.compare();
        for op in &ops {
            run.step(op);
            run.compare();
        }
        run.check_recovery();
    }
}
