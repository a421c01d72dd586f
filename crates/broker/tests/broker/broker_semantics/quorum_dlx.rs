//! At-least-once dead-lettering of quorum queues (S-QQ-7, S-QQ-10): a message that cannot be
//! dead-lettered now waits in its queue and goes once it can, never lost, never twice.

use super::*;
use wharf_base::limits::DEAD_LETTER_RETRY_MS;

/// A quorum queue `qq` dead-lettering at-least-once to `dlx` with key `k`.
fn at_least_once(h: &mut H, extra: &[(&str, Value)]) -> Outcome {
    let mut a = vec![
        ("x-queue-type", s("quorum")),
        ("x-dead-letter-strategy", s("at-least-once")),
        ("x-overflow", s("reject-publish")),
        ("x-dead-letter-exchange", s("dlx")),
        ("x-dead-letter-routing-key", s("k")),
    ];
    a.extend_from_slice(extra);
    h.durable_queue("qq", &a)
}

/// Publishes one persistent message to `qq`, takes it and rejects it: it dies `rejected`.
fn reject_one(h: &mut H) -> Outcome {
    h.send("qq", persistent());
    let g = h.get("qq", false).expect("the message is ready");
    h.reject(g.delivery_tag.0, false)
}

fn held(h: &H) -> (u64, u64) {
    let q = h.info("qq").unwrap();
    (q.dead_letter_held, q.dead_letter_held_bytes)
}

fn dead_lettered(o: &Outcome) -> usize {
    o.events
        .iter()
        .filter(|e| matches!(e, Event::DeadLettered { from: Some(f), .. } if f == "qq"))
        .count()
}

use wharf_broker::Outcome;

#[test]
fn s_qq_10_a_death_that_routes_nowhere_waits_and_goes_when_a_binding_appears() {
    let mut h = H::new();
    h.exchange("dlx", "direct", true, FieldTable::new());
    at_least_once(&mut h, &[]);
    let died_at = h.now;
    let o = reject_one(&mut h);
    assert_eq!(
        deaths(&o),
        vec![("qq".to_owned(), DeathReason::Rejected, DeathFate::Held)]
    );
    assert!(
        o.events
            .iter()
            .any(|e| matches!(e, Event::DeadLetterHeld { queue, .. } if queue == "qq")),
        "holding is logged: {:?}",
        o.events
    );
    assert_eq!(held(&h), (1, 4));
    assert_eq!((h.ready("qq"), h.unacked("qq")), (0, 0));
    // Not delivered to a consumer: it is not ready.
    assert_eq!(deliveries(&h.consume("qq", "c", false)).len(), 0);
    // A queue declared later is not bound yet: still held.
    h.durable_queue("dead", &[]);
    assert_eq!(held(&h), (1, 4));
    h.now += 5_000;
    let o = h.bind("dead", "dlx", "k");
    assert_eq!(dead_lettered(&o), 1, "one event moves it: {:?}", o.events);
    assert_eq!(held(&h), (0, 0));
    assert_eq!(h.ready("dead"), 1);
    let g = h.get("dead", true).unwrap();
    let Some(Value::Array(deaths)) = header(&g.message.properties, "x-death") else {
        panic!("no x-death");
    };
    let Value::Table(d) = &deaths[0] else {
        panic!("x-death entry")
    };
    assert_eq!(d.get("reason").and_then(Value::as_str), Some("rejected"));
    assert_eq!(
        d.get("time"),
        Some(&Value::Timestamp(died_at / 1000)),
        "the time it died, not the time it went"
    );
    // Once only.
    assert_eq!(h.get("dead", true), None);
    assert_eq!(h.replay().durable_state(), h.b.durable_state());
}

#[test]
fn s_qq_10_a_missing_dead_letter_exchange_holds_until_it_exists_and_routes() {
    let mut h = H::new();
    at_least_once(&mut h, &[]);
    h.durable_queue("dead", &[]);
    let o = reject_one(&mut h);
    assert_eq!(deaths(&o)[0].2, DeathFate::Held);
    assert_eq!(
        h.b.dead_letter_dropped(),
        0,
        "not dropped (S-DLX-4 is at-most-once)"
    );
    h.exchange("dlx", "direct", true, FieldTable::new());
    assert_eq!(held(&h).0, 1, "the exchange routes nowhere yet");
    let o = h.bind("dead", "dlx", "k");
    assert_eq!(dead_lettered(&o), 1);
    assert_eq!((held(&h).0, h.ready("dead")), (0, 1));
    assert_eq!(h.replay().durable_state(), h.b.durable_state());
}

#[test]
fn s_qq_10_a_target_that_refuses_holds_it_and_the_retry_timer_moves_it() {
    let mut h = H::new();
    h.exchange("dlx", "direct", true, FieldTable::new());
    h.durable_queue(
        "dead",
        &[
            ("x-max-length", Value::I32(1)),
            ("x-overflow", s("reject-publish")),
        ],
    );
    h.bind("dead", "dlx", "k");
    h.send("dead", persistent());
    at_least_once(&mut h, &[]);
    let o = reject_one(&mut h);
    assert_eq!(deaths(&o)[0].2, DeathFate::Held, "the target is full");
    // Room appears in the target, but nothing has tried again yet.
    h.get("dead", true).unwrap();
    assert_eq!((held(&h).0, h.ready("dead")), (1, 0));
    assert_eq!(h.advance(DEAD_LETTER_RETRY_MS - 1).events.len(), 0);
    let o = h.advance(1);
    assert_eq!(
        dead_lettered(&o),
        1,
        "retried after {DEAD_LETTER_RETRY_MS} ms"
    );
    assert_eq!((held(&h).0, h.ready("dead")), (0, 1));
    assert_eq!(h.replay().durable_state(), h.b.durable_state());
}

#[test]
fn s_qq_10_all_or_nothing_when_one_of_two_targets_refuses() {
    let mut h = H::new();
    h.exchange("dlx", "direct", true, FieldTable::new());
    h.durable_queue("a", &[]);
    h.durable_queue(
        "b",
        &[
            ("x-max-length", Value::I32(0)),
            ("x-overflow", s("reject-publish")),
        ],
    );
    h.bind("a", "dlx", "k");
    h.bind("b", "dlx", "k");
    at_least_once(&mut h, &[]);
    reject_one(&mut h);
    assert_eq!((held(&h).0, h.ready("a")), (1, 0), "neither target has it");
    // The full target goes away: the next change of definitions routes it to `a` alone.
    h.ok(Command::QueueDelete {
        vhost: "/".into(),
        queue: "b".into(),
        if_unused: false,
        if_empty: false,
        owner: Some(CH.conn),
    });
    assert_eq!(held(&h).0, 1, "a deletion opens no route");
    h.durable_queue("c", &[]);
    assert_eq!((held(&h).0, h.ready("a")), (0, 1));
}

#[test]
fn s_qq_10_held_messages_count_against_the_length_limit_and_are_purged() {
    let mut h = H::new();
    at_least_once(&mut h, &[("x-max-length", Value::I32(2))]);
    reject_one(&mut h);
    h.send("qq", persistent());
    assert_eq!((held(&h).0, h.ready("qq")), (1, 1));
    let p = h.send("qq", persistent()).published().unwrap();
    assert!(p.refused, "1 held + 1 ready reach the limit of 2");
    let o = h.ok(Command::QueuePurge {
        vhost: "/".into(),
        queue: "qq".into(),
        owner: Some(CH.conn),
    });
    assert_eq!(o.reply, Reply::PurgeOk { message_count: 2 });
    assert_eq!(held(&h), (0, 0));
    assert_eq!(h.replay().durable_state(), h.b.durable_state());
}

#[test]
fn s_qq_10_an_expired_message_is_held_and_does_not_expire_again() {
    let mut h = H::new();
    at_least_once(&mut h, &[("x-message-ttl", Value::I32(100))]);
    h.send("qq", persistent());
    let o = h.advance(100);
    assert_eq!(
        deaths(&o),
        vec![("qq".to_owned(), DeathReason::Expired, DeathFate::Held)]
    );
    let o = h.advance(10 * DEAD_LETTER_RETRY_MS);
    assert!(deaths(&o).is_empty(), "held, tried, kept: {o:?}");
    assert_eq!(held(&h).0, 1);
    h.exchange("dlx", "fanout", true, FieldTable::new());
    h.durable_queue("dead", &[]);
    let o = h.bind("dead", "dlx", "");
    assert_eq!(
        deaths(&o),
        vec![(
            "qq".to_owned(),
            DeathReason::Expired,
            DeathFate::DeadLettered { targets: 1 }
        )]
    );
}

#[test]
fn s_qq_10_held_messages_survive_replay_and_go_at_recovery_if_they_can() {
    let mut h = H::new();
    h.exchange("dlx", "direct", true, FieldTable::new());
    h.durable_queue("dead", &[]);
    at_least_once(&mut h, &[]);
    reject_one(&mut h);
    reject_one(&mut h);
    assert_eq!(held(&h).0, 2);
    let mut b = h.replay();
    assert_eq!(b.durable_state(), h.b.durable_state());
    let q = b.queues("/").into_iter().find(|q| q.name == "qq").unwrap();
    assert_eq!(q.dead_letter_held, 2);
    // A binding logged after them (as if added by hand before the restart is not possible
    // here): recovery tries them at once.
    b.apply(&Event::Bound {
        vhost: "/".into(),
        source: "dlx".into(),
        destination: wharf_broker::DestName::Queue("dead".into()),
        routing_key: "k".into(),
        arguments: FieldTable::new(),
    })
    .unwrap();
    let o = b.recovered(h.now);
    b.check_invariants();
    assert_eq!(
        o.events
            .iter()
            .filter(|e| matches!(e, Event::DeadLettered { .. }))
            .count(),
        2
    );
    let qs = b.queues("/");
    let info = |n: &str| qs.iter().find(|q| q.name == n).unwrap().clone();
    assert_eq!((info("qq").dead_letter_held, info("dead").ready), (0, 2));
}

#[test]
fn s_qq_7_at_least_once_without_reject_publish_falls_back_with_a_warning() {
    let mut h = H::new();
    let o = h.durable_queue(
        "qq",
        &[
            ("x-queue-type", s("quorum")),
            ("x-dead-letter-strategy", s("at-least-once")),
            ("x-dead-letter-exchange", s("dlx")),
        ],
    );
    assert!(o.effects.iter().any(|e| matches!(
        e,
        Effect::ArgumentIgnored { argument, .. } if argument.starts_with("x-dead-letter-strategy")
    )));
    let o = reject_one(&mut h);
    assert_eq!(deaths(&o)[0].2, DeathFate::ExchangeMissing, "at-most-once");
    assert_eq!(held(&h).0, 0);
}

#[test]
fn s_qq_7_the_policy_key_sets_the_strategy_and_clearing_it_lets_held_messages_go() {
    let mut h = H::new();
    h.policy(
        "alo",
        "^qq$",
        r#"{"dead-letter-strategy": "at-least-once", "overflow": "reject-publish", "dead-letter-exchange": "dlx"}"#,
        0,
        false,
    )
    .unwrap();
    h.durable_queue("qq", &[("x-queue-type", s("quorum"))]);
    reject_one(&mut h);
    assert_eq!(held(&h).0, 1);
    // At-most-once now: the held message goes as at-most-once would (its exchange is
    // missing: dropped), as RabbitMQ does when the strategy changes.
    let o = h
        .policy(
            "alo",
            "^qq$",
            r#"{"overflow": "reject-publish", "dead-letter-exchange": "dlx"}"#,
            0,
            false,
        )
        .unwrap();
    assert_eq!(deaths(&o)[0].2, DeathFate::ExchangeMissing);
    assert_eq!(held(&h).0, 0);
    assert_eq!(h.replay().durable_state(), h.b.durable_state());
    let e = h
        .policy(
            "bad",
            "^x",
            r#"{"dead-letter-strategy": "sometimes"}"#,
            0,
            false,
        )
        .unwrap_err();
    assert!(e.text.contains("'dead-letter-strategy'"), "{}", e.text);
}
