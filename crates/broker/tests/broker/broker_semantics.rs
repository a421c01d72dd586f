//! One or more tests per SEMANTICS rule of S-TTL, S-QEXP, S-DLX, S-LEN, S-POL and S-SCHED,
//! each named after its id, driven through the public `Broker` API with explicit `now`
//! values (no clock, no sleep). Invariants are checked after every step by the helper.

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
use wharf_broker::{
    Command, DeathFate, DeathReason, Effect, Event, ExchangeDeclare, FieldTable, Properties, Reply,
    Value,
};

// ----- S-TTL -----

#[test]
fn s_ttl_1_bad_message_ttl_fails_declare_with_406_naming_the_argument() {
    let mut h = H::new();
    let e = h.err(H::queue_cmd(
        "q",
        false,
        args(&[("x-message-ttl", Value::I32(-1))]),
    ));
    assert_eq!(e.kind.reply_code(), 406);
    assert!(!e.kind.closes_connection());
    assert!(e.text.contains("'x-message-ttl'"), "{}", e.text);
    let e = h.err(H::queue_cmd(
        "q",
        false,
        args(&[("x-message-ttl", s("100"))]),
    ));
    assert!(e.text.contains("x-message-ttl"));
    assert!(h.info("q").is_none(), "nothing was created");
    // Any integer type in range is fine.
    h.queue("q", &[("x-message-ttl", Value::U8(100))]);
    h.queue("q2", &[("x-message-ttl", Value::I64(4_294_967_295))]);
    // And the policy key is validated too.
    let e = h
        .policy("p", ".*", r#"{"message-ttl": -1}"#, 0, false)
        .unwrap_err();
    assert!(e.text.contains("message-ttl"));
}

#[test]
fn s_ttl_2_bad_expiration_closes_the_channel_with_406() {
    let mut h = H::new();
    h.queue("q", &[]);
    for bad in ["-5", "abc", "1.5", ""] {
        let e = h.err(H::publish_cmd("", "q", props_ttl(bad), b"x"));
        assert_eq!(e.kind.reply_code(), 406, "{bad}");
        assert!(!e.kind.closes_connection());
    }
    assert_eq!(h.ready("q"), 0, "refused publishes enqueue nothing");
    h.send("q", props_ttl("250"));
    assert_eq!(h.ready("q"), 1);
}

#[test]
fn s_ttl_3_the_lowest_ttl_wins() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("q", &[("x-message-ttl", Value::I32(1000))]);
    h.send("q", props_ttl("300"));
    h.send("q", props_ttl("5000"));
    assert_eq!(h.b.next_deadline(), Some(t0 + 300));
    h.policy("p", "^q$", r#"{"message-ttl": 700}"#, 0, false)
        .unwrap();
    h.policy("op", "^q$", r#"{"message-ttl": 500}"#, 0, true)
        .unwrap();
    h.advance_to(t0 + 300);
    assert_eq!(h.ready("q"), 1);
    h.advance_to(t0 + 499);
    assert_eq!(h.ready("q"), 1);
    h.advance_to(t0 + 500);
    assert_eq!(
        h.ready("q"),
        0,
        "operator policy 500 < policy 700 < argument 1000 < 5000"
    );
}

#[test]
fn s_ttl_4_deadline_is_enqueue_time_plus_ttl() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.now = 1_000;
    h.send("q", props_ttl("100"));
    assert_eq!(h.b.next_deadline(), Some(1_100));
    let o = h.advance_to(1_099);
    assert!(deaths(&o).is_empty());
    assert_eq!(h.ready("q"), 1);
    let o = h.advance_to(1_100);
    assert_eq!(
        deaths(&o),
        vec![("q".to_owned(), DeathReason::Expired, DeathFate::Discarded)]
    );
    assert_eq!(h.ready("q"), 0);
    assert_eq!(h.b.next_deadline(), None);
}

#[test]
fn s_ttl_5_get_and_deliver_never_hand_out_an_expired_message() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.send("q", props_ttl("10"));
    h.send("q", Properties::default());
    h.now += 10; // No expire_due call: the head is checked lazily.
    let g = h.get("q", true).expect("the second message");
    assert!(g.message.ttl_ms.is_none());
    h.send("q", props_ttl("10"));
    h.now += 20;
    let o = h.consume("q", "c", true);
    assert!(
        deliveries(&o).is_empty(),
        "the expired message is not delivered"
    );
    assert_eq!(h.ready("q"), 0);
}

#[test]
fn s_ttl_6_ttl_zero_delivers_only_to_a_waiting_consumer() {
    let mut h = H::new();
    h.queue("dead", &[]);
    h.queue(
        "q",
        &[
            ("x-message-ttl", Value::I32(0)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dead")),
        ],
    );
    let mut p = Properties::default();
    p.expiration = None;
    let o = h.ok(Command::Publish(wharf_broker::Publish {
        vhost: "/".into(),
        exchange: String::new(),
        routing_key: "q".into(),
        mandatory: true,
        properties: p.clone(),
        body: bytes::Bytes::from_static(b"x"),
    }));
    assert!(
        !o.effects.iter().any(|e| matches!(e, Effect::Return { .. })),
        "no basic.return"
    );
    assert_eq!(h.ready("q"), 0, "expired at once");
    assert_eq!(h.ready("dead"), 1, "and dead-lettered");
    h.consume("q", "c", false);
    let o = h.send("q", p);
    assert_eq!(
        deliveries(&o).len(),
        1,
        "a consumer that can take it gets it"
    );
    assert_eq!(h.ready("dead"), 1);
}

#[test]
fn s_ttl_7_requeue_keeps_the_original_deadline() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("q", &[("x-message-ttl", Value::I32(100))]);
    h.send("q", Properties::default());
    h.now = t0 + 50;
    let g = h.get("q", false).unwrap();
    h.now = t0 + 60;
    h.reject(g.delivery_tag.0, true);
    assert_eq!(h.b.next_deadline(), Some(t0 + 100), "not t0 + 160");
    h.advance_to(t0 + 99);
    assert_eq!(h.ready("q"), 1);
    // Closing the channel requeues with the original deadline too.
    let g = h.get("q", false).unwrap();
    assert!(g.redelivered);
    h.ok(Command::ChannelClose { chan: CH });
    assert_eq!(h.ready("q"), 1);
    h.advance_to(t0 + 100);
    assert_eq!(h.ready("q"), 0);
}

#[test]
fn s_ttl_8_a_held_message_does_not_expire_and_dies_at_once_when_returned_late() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("dead", &[]);
    h.queue(
        "q",
        &[
            ("x-message-ttl", Value::I32(100)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dead")),
        ],
    );
    h.send("q", Properties::default());
    let g = h.get("q", false).unwrap();
    assert_eq!(h.b.next_deadline(), None, "held: not in the deadline index");
    h.advance_to(t0 + 500);
    assert_eq!(h.unacked("q"), 1, "held past its deadline, still held");
    let o = h.reject(g.delivery_tag.0, true);
    assert_eq!(
        deaths(&o),
        vec![(
            "q".to_owned(),
            DeathReason::Expired,
            DeathFate::DeadLettered { targets: 1 }
        )]
    );
    assert_eq!(h.ready("q"), 0);
    assert_eq!(h.ready("dead"), 1);
}

#[test]
fn s_ttl_9_expiry_reaches_messages_behind_the_head() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("q", &[]);
    h.send("q", props_ttl("100000"));
    h.send("q", props_ttl("10"));
    h.send("q", Properties::default());
    h.send("q", props_ttl("20"));
    assert_eq!(h.b.next_deadline(), Some(t0 + 10));
    h.advance_to(t0 + 10);
    assert_eq!(
        h.ready("q"),
        3,
        "the second message went although it is not at the head"
    );
    assert_eq!(h.b.next_deadline(), Some(t0 + 20));
    h.advance_to(t0 + 20);
    assert_eq!(h.ready("q"), 2);
    let a = h.get("q", true).unwrap();
    let b = h.get("q", true).unwrap();
    assert_eq!(a.message.ttl_ms, Some(100_000));
    assert_eq!(b.message.ttl_ms, None);
}

#[test]
fn s_ttl_10_each_queue_has_its_own_deadline() {
    let mut h = H::new();
    let t0 = h.now;
    h.exchange("f", "fanout", false, FieldTable::new());
    h.queue("a", &[("x-message-ttl", Value::I32(100))]);
    h.queue("b", &[("x-message-ttl", Value::I32(200))]);
    h.bind("a", "f", "");
    h.bind("b", "f", "");
    h.ok(H::publish_cmd("f", "", Properties::default(), b"x"));
    h.advance_to(t0 + 100);
    assert_eq!((h.ready("a"), h.ready("b")), (0, 1));
    h.advance_to(t0 + 200);
    assert_eq!(h.ready("b"), 0);
}

#[test]
fn s_ttl_11_a_ttl_policy_applies_to_queued_messages_and_clearing_restores() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("q", &[]);
    h.send("q", Properties::default());
    h.now = t0 + 500;
    h.send("q", props_ttl("3000"));
    h.now = t0 + 700;
    let o = h
        .policy("ttl", "^q$", r#"{"message-ttl": 1000}"#, 0, false)
        .unwrap();
    assert!(
        o.events
            .iter()
            .any(|e| matches!(e, Event::PolicySet { .. }))
    );
    assert_eq!(
        h.b.next_deadline(),
        Some(t0 + 1000),
        "enqueue time + new TTL"
    );
    h.advance_to(t0 + 1000);
    assert_eq!(h.ready("q"), 1);
    h.ok(Command::PolicyClear {
        vhost: "/".into(),
        name: "ttl".into(),
        operator: false,
    });
    assert_eq!(
        h.b.next_deadline(),
        Some(t0 + 3500),
        "back to the message's own TTL"
    );
    h.advance_to(t0 + 3499);
    assert_eq!(h.ready("q"), 1);
    // A policy whose TTL is already past expires at once.
    h.policy("ttl", "^q$", r#"{"message-ttl": 10}"#, 0, false)
        .unwrap();
    assert_eq!(h.ready("q"), 0);
}

// ----- S-QEXP -----

#[test]
fn s_qexp_1_expires_must_be_positive_and_an_unused_queue_is_deleted() {
    let mut h = H::new();
    let t0 = h.now;
    let e = h.err(H::queue_cmd(
        "q",
        false,
        args(&[("x-expires", Value::I32(0))]),
    ));
    assert_eq!(e.kind.reply_code(), 406);
    assert!(e.text.contains("x-expires"));
    assert!(h.policy("p", ".*", r#"{"expires": 0}"#, 0, false).is_err());
    h.queue("q", &[("x-expires", Value::I32(1000))]);
    h.advance_to(t0 + 999);
    assert!(h.info("q").is_some());
    let o = h.advance_to(t0 + 1000);
    assert!(h.info("q").is_none());
    assert!(o.effects.iter().any(|e| matches!(
        e,
        Effect::QueueDeleted {
            reason: wharf_broker::QueueDeletedReason::Expired,
            ..
        }
    )));
    // By policy too.
    h.queue("r", &[]);
    h.policy("exp", "^r$", r#"{"expires": 50}"#, 0, false)
        .unwrap();
    h.advance(50);
    assert!(h.info("r").is_none());
}

#[test]
fn s_qexp_2_get_consume_and_redeclare_renew_the_lease() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("q", &[("x-expires", Value::I32(1000))]);
    h.now = t0 + 600;
    assert!(h.get("q", true).is_none());
    h.advance_to(t0 + 1500);
    assert!(h.info("q").is_some(), "get renewed the lease to t0+1600");
    h.queue("q", &[("x-expires", Value::I32(1000))]);
    h.advance_to(t0 + 2400);
    assert!(h.info("q").is_some(), "redeclare renewed it to t0+2500");
    h.consume("q", "c", true);
    h.advance_to(t0 + 10_000);
    assert!(h.info("q").is_some(), "a consumer keeps it in use");
    h.ok(Command::Cancel {
        chan: CH,
        consumer_tag: "c".into(),
    });
    h.advance_to(t0 + 10_999);
    assert!(h.info("q").is_some());
    h.advance_to(t0 + 11_000);
    assert!(
        h.info("q").is_none(),
        "unused for the whole period after the cancel"
    );
}

#[test]
fn s_qexp_3_next_deadline_names_the_lease_end_exactly() {
    let mut h = H::new();
    let t0 = h.now;
    h.queue("q", &[("x-expires", Value::I32(1234))]);
    assert_eq!(h.b.next_deadline(), Some(t0 + 1234));
    h.advance_to(t0 + 1234);
    assert!(h.info("q").is_none());
    assert_eq!(h.b.next_deadline(), None);
}

#[test]
fn s_qexp_4_a_durable_queue_gets_a_full_lease_after_recovery() {
    let mut h = H::new();
    let t0 = h.now;
    h.durable_queue("q", &[("x-expires", Value::I32(1000))]);
    let mut b = h.replay();
    b.recovered(t0 + 5000);
    b.check_invariants();
    assert_eq!(b.next_deadline(), Some(t0 + 6000));
    b.expire_due(t0 + 5999);
    assert_eq!(b.queues("/").len(), 1);
    let o = b.expire_due(t0 + 6000);
    assert!(b.queues("/").is_empty());
    assert!(
        o.events
            .iter()
            .any(|e| matches!(e, Event::QueueDeleted { queue, .. } if queue == "q"))
    );
}

#[test]
fn s_qexp_5_lease_deletion_is_logged_and_discards_messages() {
    let mut h = H::new();
    h.durable_queue("dead", &[]);
    h.durable_queue(
        "q",
        &[
            ("x-expires", Value::I32(100)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dead")),
        ],
    );
    h.send("q", persistent());
    let o = h.advance(100);
    assert!(o.events.contains(&Event::QueueDeleted {
        vhost: "/".into(),
        queue: "q".into()
    }));
    assert!(deaths(&o).is_empty(), "not dead-lettered");
    assert_eq!(h.ready("dead"), 0);
    let b = h.replay();
    assert_eq!(b.queues("/").len(), 1, "the replayed log agrees");
}

// ----- S-DLX -----

fn dlx_setup(h: &mut H, extra: &[(&str, Value)]) {
    h.exchange("dlx", "fanout", false, FieldTable::new());
    h.queue("dead", &[]);
    h.bind("dead", "dlx", "");
    let mut a = vec![("x-dead-letter-exchange", s("dlx"))];
    a.extend(extra.iter().cloned());
    h.queue("q", &a);
}

fn first_death_reason(g: &wharf_broker::GetOk) -> String {
    match header(&g.message.properties, "x-death") {
        Some(Value::Array(a)) => match &a[0] {
            Value::Table(t) => t.get("reason").and_then(Value::as_str).unwrap().to_owned(),
            _ => panic!(),
        },
        _ => panic!("no x-death"),
    }
}

#[test]
fn s_dlx_1_rejected_expired_maxlen_and_delivery_limit_dead_letter() {
    let mut h = H::new();
    dlx_setup(
        &mut h,
        &[
            ("x-max-length", Value::I32(1)),
            ("x-delivery-limit", Value::I32(1)),
        ],
    );
    // rejected
    h.send("q", Properties::default());
    let g = h.get("q", false).unwrap();
    h.reject(g.delivery_tag.0, false);
    assert_eq!(
        first_death_reason(&h.get("dead", true).unwrap()),
        "rejected"
    );
    // expired
    h.send("q", props_ttl("5"));
    h.advance(5);
    assert_eq!(first_death_reason(&h.get("dead", true).unwrap()), "expired");
    // maxlen
    h.send("q", Properties::default());
    h.send("q", Properties::default());
    assert_eq!(first_death_reason(&h.get("dead", true).unwrap()), "maxlen");
    // delivery_limit: returned twice > limit 1.
    let g = h.get("q", false).unwrap();
    assert_eq!(g.delivery_count, 0);
    h.reject(g.delivery_tag.0, true);
    let g = h.get("q", false).unwrap();
    assert_eq!(g.delivery_count, 1);
    assert!(g.redelivered);
    h.reject(g.delivery_tag.0, true);
    assert_eq!(h.ready("q"), 0);
    assert_eq!(
        first_death_reason(&h.get("dead", true).unwrap()),
        "delivery_limit"
    );
}

#[test]
fn s_dlx_2_the_argument_overrides_the_policy() {
    let mut h = H::new();
    h.exchange("arg", "fanout", false, FieldTable::new());
    h.exchange("pol", "fanout", false, FieldTable::new());
    h.queue("from-arg", &[]);
    h.queue("from-pol", &[]);
    h.bind("from-arg", "arg", "");
    h.bind("from-pol", "pol", "");
    h.policy("d", "^q", r#"{"dead-letter-exchange": "pol"}"#, 0, false)
        .unwrap();
    h.queue("q1", &[("x-dead-letter-exchange", s("arg"))]);
    h.queue("q2", &[]);
    for q in ["q1", "q2"] {
        h.send(q, props_ttl("1"));
    }
    h.advance(1);
    assert_eq!((h.ready("from-arg"), h.ready("from-pol")), (1, 1));
}

#[test]
fn s_dlx_3_routing_keys_dead_letter_key_or_original_with_cc_and_no_bcc() {
    let mut h = H::new();
    h.exchange("t", "direct", false, FieldTable::new());
    h.exchange("dlx", "direct", false, FieldTable::new());
    for (q, k) in [
        ("rk", "orig"),
        ("cc", "cc-key"),
        ("bcc", "bcc-key"),
        ("fixed", "fixed"),
    ] {
        h.queue(q, &[]);
        h.bind(q, "dlx", k);
    }
    h.queue("src", &[("x-dead-letter-exchange", s("dlx"))]);
    h.queue(
        "src2",
        &[
            ("x-dead-letter-exchange", s("dlx")),
            ("x-dead-letter-routing-key", s("fixed")),
        ],
    );
    h.bind("src", "t", "orig");
    h.bind("src", "t", "bcc-key");
    h.bind("src2", "t", "orig");
    let mut p = props_ttl("1");
    p.headers = Some(args(&[
        ("CC", Value::Array(vec![s("cc-key")])),
        ("BCC", Value::Array(vec![s("bcc-key")])),
    ]));
    h.ok(H::publish_cmd("t", "orig", p, b"x"));
    assert_eq!(h.ready("src"), 1, "BCC routed it to src once");
    h.advance(1);
    assert_eq!(
        (
            h.ready("rk"),
            h.ready("cc"),
            h.ready("bcc"),
            h.ready("fixed")
        ),
        (1, 1, 0, 1)
    );
    let g = h.get("cc", true).unwrap();
    assert!(
        header(&g.message.properties, "BCC").is_none(),
        "BCC removed"
    );
    assert!(header(&g.message.properties, "CC").is_some(), "CC kept");
    let g = h.get("fixed", true).unwrap();
    assert_eq!(g.message.routing_key, "fixed");
    assert!(
        header(&g.message.properties, "CC").is_none(),
        "a dead-letter routing key replaces the CC keys"
    );
}

#[test]
fn s_dlx_4_a_missing_dead_letter_exchange_drops_and_counts() {
    let mut h = H::new();
    h.queue("q", &[("x-dead-letter-exchange", s("nowhere"))]);
    h.send("q", props_ttl("1"));
    let o = h.advance(1);
    assert_eq!(
        deaths(&o),
        vec![(
            "q".to_owned(),
            DeathReason::Expired,
            DeathFate::ExchangeMissing
        )]
    );
    assert_eq!(h.b.dead_letter_dropped(), 1);
    // Without a dead-letter exchange: simply discarded, not counted.
    h.queue("plain", &[]);
    h.send("plain", props_ttl("1"));
    let o = h.advance(1);
    assert_eq!(deaths(&o)[0].2, DeathFate::Discarded);
    assert_eq!(h.b.dead_letter_dropped(), 1);
}

fn x_death(p: &Properties) -> Vec<FieldTable> {
    match header(p, "x-death") {
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Value::Table(t) => t,
                _ => panic!(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[test]
fn s_dlx_5_x_death_headers() {
    let mut h = H::new();
    h.now = 1_700_000_000_123;
    // q1 --expired--> q2 --rejected--> q1 --expired--> q2
    h.queue(
        "q1",
        &[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("q2")),
        ],
    );
    h.queue(
        "q2",
        &[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("q1")),
        ],
    );
    let mut p = props_ttl("10");
    p.headers = Some(args(&[("CC", Value::Array(vec![s("other")]))]));
    h.send("q1", p);
    h.advance(10);
    let g = h.get("q2", false).unwrap();
    let p = &g.message.properties;
    assert_eq!(p.expiration, None, "expiration removed");
    let d = x_death(p);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].get("queue").and_then(Value::as_str), Some("q1"));
    assert_eq!(d[0].get("reason").and_then(Value::as_str), Some("expired"));
    assert_eq!(d[0].get("count").and_then(Value::as_integer), Some(1));
    assert_eq!(d[0].get("time"), Some(&Value::Timestamp(1_700_000_000)));
    assert_eq!(d[0].get("exchange").and_then(Value::as_str), Some(""));
    assert_eq!(
        d[0].get("routing-keys"),
        Some(&Value::Array(vec![s("q1"), s("other")]))
    );
    assert_eq!(
        d[0].get("original-expiration").and_then(Value::as_str),
        Some("10")
    );
    assert_eq!(
        header(p, "x-first-death-queue").unwrap().as_str(),
        Some("q1")
    );
    assert_eq!(
        header(p, "x-first-death-reason").unwrap().as_str(),
        Some("expired")
    );
    // Rejected in q2: back to q1 (a cycle with a rejection is allowed, S-DLX-6).
    h.reject(g.delivery_tag.0, false);
    let g = h.get("q1", false).unwrap();
    let d = x_death(&g.message.properties);
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[0].get("queue").and_then(Value::as_str),
        Some("q2"),
        "newest first"
    );
    assert_eq!(d[0].get("reason").and_then(Value::as_str), Some("rejected"));
    assert!(d[0].get("original-expiration").is_none());
    // Rejected from q1 now: a new (q1, rejected) entry; then q2 rejects again: count 2.
    h.reject(g.delivery_tag.0, false);
    let g = h.get("q2", false).unwrap();
    h.reject(g.delivery_tag.0, false);
    let g = h.get("q1", true).unwrap();
    let d = x_death(&g.message.properties);
    assert_eq!(d.len(), 3);
    assert_eq!(d[0].get("queue").and_then(Value::as_str), Some("q2"));
    assert_eq!(
        d[0].get("count").and_then(Value::as_integer),
        Some(2),
        "repeat death counted and moved to the front"
    );
    assert_eq!(d[1].get("reason").and_then(Value::as_str), Some("rejected"));
    assert_eq!(d[2].get("reason").and_then(Value::as_str), Some("expired"));
    assert_eq!(
        header(&g.message.properties, "x-first-death-reason")
            .unwrap()
            .as_str(),
        Some("expired"),
        "set once"
    );
    assert_eq!(
        header(&g.message.properties, "x-first-death-exchange")
            .unwrap()
            .as_str(),
        Some("")
    );
}

#[test]
fn s_dlx_6_an_expiry_only_cycle_is_dropped() {
    let mut h = H::new();
    h.queue(
        "a",
        &[
            ("x-message-ttl", Value::I32(5)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("b")),
        ],
    );
    h.queue(
        "b",
        &[
            ("x-message-ttl", Value::I32(5)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("a")),
        ],
    );
    h.send("a", Properties::default());
    h.advance(5);
    assert_eq!(h.ready("b"), 1);
    let o = h.advance(5);
    assert_eq!(
        deaths(&o),
        vec![(
            "b".to_owned(),
            DeathReason::Expired,
            DeathFate::DeadLettered { targets: 0 }
        )]
    );
    assert_eq!(
        (h.ready("a"), h.ready("b")),
        (0, 0),
        "a -> b -> a is a cycle of expiries"
    );
    // A queue that dead-letters to itself on expiry, with TTL 0: no endless loop.
    h.queue(
        "self",
        &[
            ("x-message-ttl", Value::I32(0)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("self")),
        ],
    );
    h.send("self", Properties::default());
    assert_eq!(h.ready("self"), 0);
}

#[test]
fn s_dlx_7_one_event_removes_and_enqueues() {
    let mut h = H::new();
    h.exchange("dlx", "fanout", true, FieldTable::new());
    h.durable_queue("d1", &[]);
    h.durable_queue("d2", &[]);
    h.bind("d1", "dlx", "");
    h.bind("d2", "dlx", "");
    h.durable_queue(
        "q",
        &[
            ("x-dead-letter-exchange", s("dlx")),
            ("x-message-ttl", Value::I32(10)),
        ],
    );
    h.send("q", persistent());
    let o = h.advance(10);
    let dl: Vec<_> = o
        .events
        .iter()
        .filter(|e| matches!(e, Event::DeadLettered { .. }))
        .collect();
    assert_eq!(o.events.len(), 1, "one event: {:?}", o.events);
    match dl[0] {
        Event::DeadLettered {
            from,
            targets,
            message,
            ..
        } => {
            assert_eq!(from.as_deref(), Some("q"));
            assert_eq!(targets, &vec!["d1".to_owned(), "d2".to_owned()]);
            assert!(message.is_some());
        }
        _ => unreachable!(),
    }
    // Replaying up to any prefix leaves the message in exactly one place.
    let b = h.replay();
    let counts: Vec<(String, u64)> = b
        .durable_state()
        .queues
        .iter()
        .map(|(q, m)| (q.name.clone(), m.len() as u64))
        .collect();
    assert_eq!(
        counts,
        vec![("d1".into(), 1), ("d2".into(), 1), ("q".into(), 0)]
    );
    let mut before = wharf_broker::Broker::new();
    for e in &h.events[..h.events.len() - 1] {
        before.apply(e).unwrap();
    }
    let counts: Vec<u64> = before
        .durable_state()
        .queues
        .iter()
        .map(|(_, m)| m.len() as u64)
        .collect();
    assert_eq!(counts, vec![0, 0, 1]);
}

// ----- S-LEN -----

#[test]
fn s_len_1_max_length_and_bytes_lower_wins() {
    let mut h = H::new();
    dlx_setup(&mut h, &[("x-max-length", Value::I32(3))]);
    h.policy("len", "^q$", r#"{"max-length": 2}"#, 0, false)
        .unwrap();
    for _ in 0..3 {
        h.send("q", Properties::default());
    }
    assert_eq!(h.ready("q"), 2, "policy 2 < argument 3");
    assert_eq!(h.ready("dead"), 1);
    let g = h.get("dead", true).unwrap();
    assert_eq!(first_death_reason(&g), "maxlen");
    // Bytes: "body" is 4 bytes; 9 bytes hold two.
    h.queue("b", &[("x-max-length-bytes", Value::I32(9))]);
    for _ in 0..3 {
        h.send("b", Properties::default());
    }
    assert_eq!(h.ready("b"), 2);
    assert_eq!(h.info("b").unwrap().ready_bytes, 8);
}

#[test]
fn s_len_2_overflow_modes() {
    let mut h = H::new();
    dlx_setup(
        &mut h,
        &[
            ("x-max-length", Value::I32(1)),
            ("x-overflow", s("reject-publish")),
        ],
    );
    let first = h.send("q", Properties::default()).published().unwrap();
    assert!(first.routed && !first.refused);
    let second = h.send("q", Properties::default()).published().unwrap();
    assert!(second.refused, "nack under confirms");
    assert_eq!(h.ready("q"), 1);
    assert_eq!(h.ready("dead"), 0, "reject-publish does not dead-letter");
    h.queue(
        "r",
        &[
            ("x-max-length", Value::I32(1)),
            ("x-overflow", s("reject-publish-dlx")),
            ("x-dead-letter-exchange", s("dlx")),
        ],
    );
    h.send("r", Properties::default());
    let o = h.send("r", Properties::default());
    assert!(o.published().unwrap().refused);
    assert_eq!(h.ready("r"), 1);
    assert_eq!(
        h.ready("dead"),
        1,
        "reject-publish-dlx dead-letters the refused message"
    );
    assert_eq!(first_death_reason(&h.get("dead", true).unwrap()), "maxlen");
    // drop-head is the default.
    h.queue("d", &[("x-max-length", Value::I32(1))]);
    h.send("d", props_ttl("111"));
    h.send("d", Properties::default());
    assert_eq!(
        h.get("d", true).unwrap().message.ttl_ms,
        None,
        "the oldest went"
    );
}

#[test]
fn s_len_1_drop_head_dead_lettering_into_a_sibling_target_keeps_queue_order() {
    // A fanout reaches `a` (max-length 0, dead-letters to `b`) and `b`: the copy from `a`
    // is newer than the original, so `b` must hold the original first.
    let mut h = H::new();
    h.exchange("f", "fanout", false, FieldTable::new());
    h.queue(
        "a",
        &[
            ("x-max-length", Value::I32(0)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("b")),
        ],
    );
    h.queue("b", &[]);
    h.bind("a", "f", "");
    h.bind("b", "f", "");
    h.ok(H::publish_cmd("f", "", Properties::default(), b"x"));
    assert_eq!((h.ready("a"), h.ready("b")), (0, 2));
    let first = h.get("b", true).unwrap();
    assert!(
        header(&first.message.properties, "x-death").is_none(),
        "the original first"
    );
    let second = h.get("b", true).unwrap();
    assert!(header(&second.message.properties, "x-death").is_some());
}

// ----- S-POL -----

#[test]
fn s_pol_1_policy_definitions_are_checked() {
    let mut h = H::new();
    for (def, key) in [
        (r#"{"bogus": 1}"#, "bogus"),
        (r#"{"max-length": "ten"}"#, "max-length"),
        (r#"{"expires": 0}"#, "expires"),
        (r#"{"dead-letter-exchange": 5}"#, "dead-letter-exchange"),
    ] {
        let e = h.policy("p", ".*", def, 0, false).unwrap_err();
        assert!(e.text.contains(key), "{}", e.text);
    }
    let e = h
        .policy("p", "(unclosed", r#"{"max-length": 1}"#, 0, false)
        .unwrap_err();
    assert!(e.text.contains("regular expression"));
    assert!(h.b.policies("/").is_empty());
    // apply-to exchanges does not touch queues.
    h.queue("q", &[]);
    h.ok(Command::PolicySet {
        vhost: "/".into(),
        policy: wharf_broker::PolicySpec {
            name: "x".into(),
            pattern: ".*".into(),
            apply_to: wharf_broker::ApplyTo::Exchanges,
            priority: 0,
            definition: r#"{"max-length": 0}"#.into(),
        },
        operator: false,
    });
    h.send("q", Properties::default());
    assert_eq!(h.ready("q"), 1);
    assert_eq!(h.info("q").unwrap().policy, None);
}

#[test]
fn s_pol_2_highest_priority_applies_and_operator_policies_only_lower() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.policy("low", "^q", r#"{"max-length": 1}"#, 1, false)
        .unwrap();
    h.policy("high", "q", r#"{"max-length": 3}"#, 5, false)
        .unwrap();
    assert_eq!(h.info("q").unwrap().policy.as_deref(), Some("high"));
    for _ in 0..4 {
        h.send("q", Properties::default());
    }
    assert_eq!(h.ready("q"), 3, "only the higher-priority policy applies");
    h.policy("op", ".*", r#"{"max-length": 10}"#, 0, true)
        .unwrap();
    h.send("q", Properties::default());
    assert_eq!(h.ready("q"), 3, "an operator policy cannot raise a limit");
    h.policy("op", ".*", r#"{"max-length": 2}"#, 0, true)
        .unwrap();
    assert_eq!(h.ready("q"), 2, "but it lowers it, at once");
    assert_eq!(h.info("q").unwrap().operator_policy.as_deref(), Some("op"));
}

#[test]
fn s_pol_3_policy_changes_are_logged_and_recovered() {
    let mut h = H::new();
    let t0 = h.now;
    h.durable_queue("q", &[]);
    h.send("q", persistent());
    h.policy("ttl", "^q$", r#"{"message-ttl": 5000}"#, 0, false)
        .unwrap();
    h.policy("gone", "^x$", r#"{"max-length": 1}"#, 0, false)
        .unwrap();
    h.ok(Command::PolicyClear {
        vhost: "/".into(),
        name: "gone".into(),
        operator: false,
    });
    let mut b = h.replay();
    assert_eq!(b.policies("/").len(), 1);
    assert_eq!(b.durable_state(), h.b.durable_state());
    b.recovered(t0 + 1000);
    assert_eq!(
        b.next_deadline(),
        Some(t0 + 5000),
        "the recovered policy TTL applies"
    );
}

#[test]
fn s_pol_4_policy_spec_mirrors_set_policy() {
    let mut h = H::new();
    h.policy("name", "^amq\\.", r#"{"max-length": 7}"#, 3, false)
        .unwrap();
    let p = &h.b.policies("/")[0];
    assert_eq!(p.policy.name, "name");
    assert_eq!(p.policy.pattern, "^amq\\.");
    assert_eq!(p.policy.priority, 3);
    assert_eq!(p.policy.apply_to, wharf_broker::ApplyTo::Queues);
    let e = h.err(Command::PolicyClear {
        vhost: "/".into(),
        name: "nope".into(),
        operator: false,
    });
    assert_eq!(e.kind.reply_code(), 404);
}

// ----- S-SCHED -----

fn delayed(h: &mut H, durable: bool) {
    h.ok(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "later".into(),
        kind: "x-delayed-message".into(),
        passive: false,
        durable,
        auto_delete: false,
        internal: false,
        arguments: args(&[("x-delayed-type", s("direct"))]),
    }));
}

fn delay_props(ms: i32, base: Properties) -> Properties {
    let mut p = base;
    p.headers = Some(args(&[("x-delay", Value::I32(ms))]));
    p
}

#[test]
fn s_sched_1_delayed_messages_are_invisible_until_due_and_durable() {
    let mut h = H::new();
    let t0 = h.now;
    let e = h.err(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "bad".into(),
        kind: "x-delayed-message".into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }));
    assert_eq!(e.kind.reply_code(), 406);
    delayed(&mut h, true);
    h.durable_queue("q", &[]);
    h.bind("q", "later", "k");
    let o = h.ok(H::publish_cmd(
        "later",
        "k",
        delay_props(1000, persistent()),
        b"x",
    ));
    let r = o.published().unwrap();
    assert!(r.routed);
    assert!(matches!(o.events[..], [Event::Scheduled { .. }]));
    assert_eq!(h.ready("q"), 0);
    assert_eq!(h.b.next_deadline(), Some(t0 + 1000));
    h.advance_to(t0 + 999);
    assert_eq!(h.ready("q"), 0, "invisible");
    // Survives a restart and arrives exactly on time after it.
    let mut b = h.replay();
    b.recovered(t0 + 10);
    assert_eq!(b.next_deadline(), Some(t0 + 1000));
    b.expire_due(t0 + 1000);
    assert_eq!(b.queues("/")[0].ready, 1);
    h.advance_to(t0 + 1000);
    assert_eq!(h.ready("q"), 1);
    // Without x-delay (or with a non-positive one) it routes at once.
    h.ok(H::publish_cmd(
        "later",
        "k",
        delay_props(0, Properties::default()),
        b"x",
    ));
    h.ok(H::publish_cmd("later", "k", Properties::default(), b"x"));
    assert_eq!(h.ready("q"), 3);
}

#[test]
fn s_sched_2_deadline_counts_from_the_scheduled_time() {
    let mut h = H::new();
    let t0 = h.now;
    delayed(&mut h, false);
    h.queue("q", &[]);
    h.bind("q", "later", "k");
    h.ok(H::publish_cmd(
        "later",
        "k",
        delay_props(1000, props_ttl("500")),
        b"x",
    ));
    h.advance_to(t0 + 1000);
    assert_eq!(h.ready("q"), 1);
    assert_eq!(h.b.next_deadline(), Some(t0 + 1500));
    h.advance_to(t0 + 1499);
    assert_eq!(h.ready("q"), 1);
    h.advance_to(t0 + 1500);
    assert_eq!(h.ready("q"), 0);
}

#[test]
fn reply_types_for_get_and_publish() {
    let mut h = H::new();
    h.queue("q", &[]);
    let o = h.send("q", Properties::default());
    assert_eq!(
        o.reply,
        Reply::Published(wharf_broker::PublishResult {
            routed: true,
            refused: false,
        })
    );
}
