//! Dead-lettering (S-DLX): docs/SEMANTICS.md, one or more tests per rule, each named after its id.

use super::*;

pub(super) fn dlx_setup(h: &mut H, extra: &[(&str, Value)]) {
    h.exchange("dlx", "fanout", false, FieldTable::new());
    h.queue("dead", &[]);
    h.bind("dead", "dlx", "");
    let mut a = vec![("x-dead-letter-exchange", s("dlx"))];
    a.extend(extra.iter().cloned());
    h.queue("q", &a);
}

pub(super) fn first_death_reason(g: &wharf_broker::GetOk) -> String {
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

/// The model test's regression `078538d2` (`broker_model.rs`), checked against RabbitMQ 3.10.8:
/// two copies of one fanout message with `expiration` 0 die into one sink; a copy taken and
/// requeued goes back to its own place (S-TTL-7), redelivered, and neither copy carries an
/// `expiration` any more (S-DLX-5).
#[test]
fn s_dlx_5_a_requeued_dead_lettered_copy_keeps_its_place_and_loses_its_expiration() {
    let mut h = H::new();
    h.queue("sink", &[]);
    h.exchange("fx", "fanout", false, FieldTable::new());
    for q in ["q0", "q1"] {
        h.queue(
            q,
            &[
                ("x-dead-letter-exchange", s("")),
                ("x-dead-letter-routing-key", s("sink")),
            ],
        );
        h.bind(q, "fx", "");
    }
    h.ok(H::publish_cmd("fx", "", props_ttl("0"), b"m"));
    assert_eq!(h.ready("sink"), 2, "both copies died");
    let origin = |g: &wharf_broker::GetOk| {
        let q = header(&g.message.properties, "x-first-death-queue").unwrap();
        q.as_str().unwrap().to_owned()
    };
    let first = h.get("sink", false).unwrap();
    assert!(
        !first.redelivered,
        "a dead-lettered message is a new publish"
    );
    assert_eq!(first.message.properties.expiration, None);
    h.reject(first.delivery_tag.0, true);
    let again = h.get("sink", false).unwrap();
    assert_eq!(origin(&again), origin(&first), "back at its own place");
    assert!(again.redelivered);
    assert_eq!(again.message.properties.expiration, None);
    let other = h.get("sink", false).unwrap();
    assert_ne!(origin(&other), origin(&first));
    assert!(!other.redelivered);
    assert_eq!(other.message.properties.expiration, None);
    assert!(h.get("sink", false).is_none());
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
