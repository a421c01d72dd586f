//! Message TTL (S-TTL): docs/SEMANTICS.md, one or more tests per rule, each named after its id.

use super::*;

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
