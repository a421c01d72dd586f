//! Recovery support: rebuilding a fresh broker from the events a live one emitted gives the
//! same durable state (definitions, policies, each durable queue's persistent messages in
//! order with deadlines, delivery counts and redelivered flags), and `recovered(now)` does
//! what S-QEXP-4, S-DUR-5 and S-DUR-6 ask. The property test drives random command
//! sequences; the unit tests pin single rules.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::many_single_char_names,
    clippy::field_reassign_with_default,
    clippy::option_map_or_none,
    reason = "test code: a panic is a failed test, and short scenarios read best"
)]

use crate::broker_common;

use broker_common::*;
use bytes::Bytes;
use proptest::prelude::*;
use wharf_broker::ApplyTo;
use wharf_broker::{
    Broker, ChanRef, Command, Event, ExchangeDeclare, FieldTable, PolicySpec, Properties, Publish,
    QueueDeclare, Value,
};

#[test]
fn s_dur_5_messages_that_died_while_down_expire_before_any_consumer_sees_them() {
    let mut h = H::new();
    let t0 = h.now;
    h.durable_queue("dead", &[]);
    h.durable_queue(
        "q",
        &[
            ("x-message-ttl", Value::I32(1000)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dead")),
        ],
    );
    h.send("q", persistent());
    h.now = t0 + 500;
    h.send("q", persistent());
    let mut b = h.replay();
    let o = b.recovered(t0 + 1200);
    b.check_invariants();
    let ready = |b: &Broker, q: &str| {
        b.queues("/")
            .into_iter()
            .find(|i| i.name == q)
            .unwrap()
            .ready
    };
    assert_eq!(ready(&b, "q"), 1, "the first died while down");
    assert_eq!(
        ready(&b, "dead"),
        1,
        "and was dead-lettered during recovery"
    );
    assert!(
        o.events
            .iter()
            .any(|e| matches!(e, Event::DeadLettered { .. }))
    );
    assert_eq!(
        b.next_deadline(),
        Some(t0 + 1500),
        "the other keeps its original deadline"
    );
}

#[test]
fn s_dur_6_unacked_messages_come_back_ready_and_redelivered_with_their_counts() {
    let mut h = H::new();
    h.durable_queue("q", &[]);
    h.send("q", persistent());
    h.send("q", persistent());
    let g = h.get("q", false).unwrap();
    h.reject(g.delivery_tag.0, true); // delivery count 1
    let _held = h.get("q", false).unwrap();
    let _held2 = h.get("q", false).unwrap();
    let mut b = h.replay();
    assert_eq!(b.durable_state(), h.b.durable_state());
    b.recovered(h.now);
    b.check_invariants();
    let msgs = b.ready_messages("/", "q");
    assert_eq!(msgs.len(), 2);
    assert!(msgs.iter().all(|(_, redelivered)| *redelivered));
    let chan = ChanRef::new(9, 1);
    b.handle(
        Command::ConnectionOpen {
            conn: chan.conn,
            vhost: "/".into(),
        },
        h.now,
    )
    .unwrap();
    b.handle(Command::ChannelOpen { chan }, h.now).unwrap();
    let o = b
        .handle(
            Command::Get {
                chan,
                queue: "q".into(),
                no_ack: true,
            },
            h.now,
        )
        .unwrap();
    match o.reply {
        wharf_broker::Reply::GetOk(g) => {
            assert!(g.redelivered);
            assert_eq!(g.delivery_count, 1, "the delivery count survived");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s_dur_1_transient_things_do_not_survive() {
    let mut h = H::new();
    h.queue("t", &[]);
    h.durable_queue("d", &[]);
    h.send("d", Properties::default()); // transient message
    h.send("d", persistent());
    h.exchange("tx", "fanout", false, FieldTable::new());
    h.exchange("dx", "fanout", true, FieldTable::new());
    h.bind("d", "dx", "");
    h.bind("d", "tx", "");
    let mut b = h.replay();
    b.recovered(h.now);
    let names: Vec<String> = b.queues("/").into_iter().map(|q| q.name).collect();
    assert_eq!(names, vec!["d"]);
    assert_eq!(b.ready_messages("/", "d").len(), 1);
    assert!(b.exchanges("/").iter().any(|x| x.name == "dx"));
    assert!(!b.exchanges("/").iter().any(|x| x.name == "tx"));
    assert_eq!(b.bindings("/").len(), 1);
}

#[test]
fn replayed_ids_continue_after_the_highest_seen() {
    let mut h = H::new();
    h.durable_queue("q", &[]);
    h.send("q", persistent());
    let mut b = h.replay();
    b.recovered(h.now);
    let o = b
        .handle(
            Command::Publish(Publish {
                vhost: "/".into(),
                exchange: String::new(),
                routing_key: "q".into(),
                mandatory: false,
                properties: persistent(),
                body: Bytes::from_static(b"x"),
            }),
            h.now,
        )
        .unwrap();
    match &o.events[0] {
        Event::Published { message, .. } => assert!(message.message.id.0 > 1),
        other => panic!("{other:?}"),
    }
}

// ----- replay equivalence over random command sequences -----

const QUEUES: [&str; 3] = ["a", "b", "dl"];

#[derive(Debug, Clone)]
enum Op {
    Declare {
        q: usize,
        durable: bool,
        ttl: Option<u32>,
        dlx: bool,
        max_len: Option<u8>,
    },
    Delete(usize),
    Bind(usize, bool, bool),
    Publish {
        q: Option<usize>,
        persistent: bool,
        ttl: Option<u32>,
    },
    Get(usize, bool),
    Consume(usize, u16),
    Cancel(usize),
    Ack(u64, bool),
    Nack(u64, bool, bool),
    Policy(Option<u32>, Option<u8>),
    ClearPolicy,
    Purge(usize),
    /// S-UI-10: every ready message of the queue moved back to its original route.
    MoveBack(usize),
    CloseChannel,
    Delay(u32),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..3usize, any::<bool>(), prop::option::of(0..50u32), any::<bool>(), prop::option::of(0..4u8))
            .prop_map(|(q, durable, ttl, dlx, max_len)| Op::Declare { q, durable, ttl, dlx, max_len }),
        1 => (0..3usize).prop_map(Op::Delete),
        2 => (0..3usize, any::<bool>(), any::<bool>()).prop_map(|(q, dlx, b)| Op::Bind(q, dlx, b)),
        8 => (prop::option::of(0..3usize), any::<bool>(), prop::option::of(0..50u32))
            .prop_map(|(q, persistent, ttl)| Op::Publish { q, persistent, ttl }),
        3 => (0..3usize, any::<bool>()).prop_map(|(q, n)| Op::Get(q, n)),
        2 => (0..3usize, 0..3u16).prop_map(|(q, p)| Op::Consume(q, p)),
        1 => (0..3usize).prop_map(Op::Cancel),
        3 => (0..20u64, any::<bool>()).prop_map(|(t, m)| Op::Ack(t, m)),
        3 => (0..20u64, any::<bool>(), any::<bool>()).prop_map(|(t, m, r)| Op::Nack(t, m, r)),
        1 => (prop::option::of(0..50u32), prop::option::of(0..4u8)).prop_map(|(t, m)| Op::Policy(t, m)),
        1 => Just(Op::ClearPolicy),
        1 => (0..3usize).prop_map(Op::Purge),
        1 => (0..3usize).prop_map(Op::MoveBack),
        1 => Just(Op::CloseChannel),
        1 => (1..60u32).prop_map(Op::Delay),
        3 => (0..40u64).prop_map(Op::Advance),
    ]
}

fn to_command(op: &Op) -> Option<Command> {
    let vhost = || "/".to_owned();
    Some(match op {
        Op::Declare {
            q,
            durable,
            ttl,
            dlx,
            max_len,
        } => {
            let mut a = Vec::new();
            if let Some(t) = ttl {
                a.push(("x-message-ttl", Value::I64(i64::from(*t))));
            }
            if *dlx && *q != 2 {
                a.push(("x-dead-letter-exchange", s("dlx")));
            }
            if let Some(m) = max_len {
                a.push(("x-max-length", Value::U8(*m)));
            }
            Command::QueueDeclare(QueueDeclare {
                vhost: vhost(),
                queue: QUEUES[*q].into(),
                passive: false,
                durable: *durable,
                exclusive: false,
                auto_delete: false,
                arguments: args(&a),
                owner: None,
            })
        }
        Op::Delete(q) => Command::QueueDelete {
            vhost: vhost(),
            queue: QUEUES[*q].into(),
            if_unused: false,
            if_empty: false,
            owner: None,
        },
        Op::Bind(q, dlx, bind) => Command::QueueBind {
            vhost: vhost(),
            queue: QUEUES[*q].into(),
            exchange: if *dlx { "dlx".into() } else { "fan".into() },
            routing_key: String::new(),
            arguments: FieldTable::new(),
            bind: *bind,
            owner: None,
        },
        Op::Publish { q, persistent, ttl } => Command::Publish(Publish {
            vhost: vhost(),
            exchange: if q.is_none() {
                "fan".into()
            } else {
                String::new()
            },
            routing_key: q.map_or("", |q| QUEUES[q]).into(),
            mandatory: false,
            properties: Properties {
                delivery_mode: Some(if *persistent { 2 } else { 1 }),
                expiration: ttl.map(|t| t.to_string()),
                ..Properties::default()
            },
            body: Bytes::from_static(b"payload"),
        }),
        Op::Get(q, no_ack) => Command::Get {
            chan: CH,
            queue: QUEUES[*q].into(),
            no_ack: *no_ack,
        },
        Op::Consume(q, prefetch) => {
            return Some(Command::Consume {
                chan: CH,
                queue: QUEUES[*q].into(),
                consumer_tag: format!("c{q}-{prefetch}"),
                no_ack: *prefetch == 0,
                exclusive: false,
                arguments: wharf_broker::FieldTable::new(),
            });
        }
        Op::Cancel(q) => Command::Cancel {
            chan: CH,
            consumer_tag: format!("c{q}-1"),
        },
        Op::Ack(t, m) => Command::Ack {
            chan: CH,
            delivery_tag: *t,
            multiple: *m,
        },
        Op::Nack(t, m, r) => Command::Nack {
            chan: CH,
            delivery_tag: *t,
            multiple: *m,
            requeue: *r,
        },
        Op::Policy(ttl, max_len) => {
            let mut def = serde_json::Map::new();
            if let Some(t) = ttl {
                def.insert("message-ttl".into(), (*t).into());
            }
            if let Some(m) = max_len {
                def.insert("max-length".into(), (*m).into());
            }
            if def.is_empty() {
                return None;
            }
            Command::PolicySet {
                vhost: vhost(),
                policy: PolicySpec {
                    name: "p".into(),
                    pattern: "^[ab]$".into(),
                    apply_to: ApplyTo::Queues,
                    priority: 0,
                    definition: serde_json::Value::Object(def).to_string(),
                },
                operator: false,
            }
        }
        Op::ClearPolicy => Command::PolicyClear {
            vhost: vhost(),
            name: "p".into(),
            operator: false,
        },
        Op::Purge(q) => Command::QueuePurge {
            vhost: vhost(),
            queue: QUEUES[*q].into(),
            owner: None,
        },
        Op::MoveBack(q) => Command::MoveBack {
            vhost: vhost(),
            queue: QUEUES[*q].into(),
            ids: None,
        },
        Op::CloseChannel => Command::ChannelClose { chan: CH },
        Op::Delay(ms) => Command::Publish(Publish {
            vhost: vhost(),
            exchange: "later".into(),
            routing_key: "k".into(),
            mandatory: false,
            properties: Properties {
                delivery_mode: Some(2),
                headers: Some(args(&[("x-delay", Value::U32(*ms))])),
                ..Properties::default()
            },
            body: Bytes::from_static(b"later"),
        }),
        Op::Advance(_) => return None,
    })
}

fn setup(h: &mut H) {
    h.exchange("fan", "fanout", true, FieldTable::new());
    h.exchange("dlx", "fanout", true, FieldTable::new());
    h.ok(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "later".into(),
        kind: "x-delayed-message".into(),
        passive: false,
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: args(&[("x-delayed-type", s("fanout"))]),
    }));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn replaying_the_events_rebuilds_the_durable_state(ops in prop::collection::vec(op(), 1..80)) {
        let mut h = H::new();
        setup(&mut h);
        for op in &ops {
            match op {
                Op::Advance(ms) => {
                    h.advance(*ms);
                }
                Op::CloseChannel => {
                    h.ok(Command::ChannelClose { chan: CH });
                    h.ok(Command::ChannelOpen { chan: CH });
                }
                other => {
                    if let Some(cmd) = to_command(other) {
                        let _ = h.try_cmd(cmd);
                    }
                }
            }
            let replayed = h.replay();
            prop_assert_eq!(replayed.durable_state(), h.b.durable_state());
        }
        // And recovery then leaves a consistent broker whose durable messages are all ready.
        let mut b = h.replay();
        let o = b.recovered(h.now);
        b.check_invariants();
        for (q, msgs) in b.durable_state().queues {
            prop_assert!(msgs.iter().all(|m| m.deadline_ms.is_none_or(|d| d > h.now)), "S-DUR-5 in {}", q.name);
        }
        prop_assert!(o.effects.iter().all(|e| !matches!(e, wharf_broker::Effect::Deliver(_))));
    }
}
