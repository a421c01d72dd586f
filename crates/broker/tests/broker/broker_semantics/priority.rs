//! Priority queues (S-PRIO): docs/SEMANTICS.md, one or more tests per rule, each named after
//! its id. Bodies name the message, so each test reads the order it got back.

use super::dead_letter::first_death_reason;
use super::*;

fn prio(p: Option<u8>) -> Properties {
    Properties {
        priority: p,
        ..Properties::default()
    }
}

fn send_p(h: &mut H, queue: &str, p: Option<u8>, body: &'static [u8]) -> Outcome {
    h.ok(H::publish_cmd("", queue, prio(p), body))
}

/// Every ready body of `queue`, taken with `basic.get` (no ack).
fn drain(h: &mut H, queue: &str) -> Vec<String> {
    std::iter::from_fn(|| h.get(queue, true))
        .map(|g| String::from_utf8_lossy(&g.message.body).into_owned())
        .collect()
}

fn pq(h: &mut H, name: &str, max: i32, extra: &[(&str, Value)]) {
    let mut a = vec![("x-max-priority", Value::I32(max))];
    a.extend(extra.iter().cloned());
    h.queue(name, &a);
}

use wharf_broker::Outcome;

/// A fanout `dlx` feeding queue `dead` (a priority queue when `max` is set).
fn dead_letters_into(h: &mut H, max: Option<i32>) {
    h.exchange("dlx", "fanout", false, FieldTable::new());
    match max {
        Some(max) => pq(h, "dead", max, &[]),
        None => {
            h.queue("dead", &[]);
        }
    }
    h.bind("dead", "dlx", "");
}

#[test]
fn s_prio_1_max_priority_is_validated_with_rabbitmqs_texts() {
    let mut h = H::new();
    let prefix = "invalid arg 'x-max-priority' for queue 'p' in vhost '/': ";
    for (v, reason) in [
        (Value::I32(-1), "{value_negative,-1}"),
        (Value::I32(256), "{max_value_exceeded,256}"),
        (s("5"), "\"expected integer, got longstr\""),
        (Value::Bool(true), "\"expected integer, got bool\""),
    ] {
        let e = h.err(H::queue_cmd("p", false, args(&[("x-max-priority", v)])));
        assert_eq!(e.kind.reply_code(), 406);
        assert_eq!(e.text, format!("{prefix}{reason}"));
        assert!(h.info("p").is_none(), "nothing declared");
    }
    for (name, v) in [("u8", Value::U8(255)), ("i64", Value::I64(3))] {
        h.queue(name, &[("x-max-priority", v)]);
    }
    // A redeclare must agree.
    let e = h.err(H::queue_cmd(
        "i64",
        false,
        args(&[("x-max-priority", Value::I32(4))]),
    ));
    assert_eq!(
        e.text,
        "inequivalent arg 'x-max-priority' for queue 'i64' in vhost '/': received '4' but current is '3'"
    );
    let e = h.err(H::queue_cmd("i64", false, FieldTable::new()));
    assert!(
        e.text
            .ends_with("received none but current is the value '3' of type 'long'")
    );
    // Not a policy key.
    let e = h
        .policy("p", ".*", r#"{"max-priority": 5}"#, 0, false)
        .unwrap_err();
    assert_eq!(e.kind.reply_code(), 406);
    assert!(e.text.contains("'max-priority'"), "{}", e.text);
}

#[test]
fn s_prio_1_a_log_from_before_the_checks_replays_its_queue_without_them() {
    // An older wharf ignored these arguments, so its log may hold values now refused.
    let mut b = wharf_broker::Broker::new();
    let mut arguments = args(&[
        ("x-max-priority", Value::I32(300)),
        ("x-queue-mode", s("bogus")),
        ("x-message-ttl", Value::I32(50)),
    ]);
    b.apply(&Event::QueueDeclared {
        vhost: "/".into(),
        queue: "old".into(),
        auto_delete: false,
        arguments: arguments.clone(),
    })
    .unwrap();
    let q = b.queues("/").into_iter().find(|q| q.name == "old").unwrap();
    assert_eq!(q.max_priority, None, "a plain queue, as it was");
    assert_eq!(q.arguments, arguments, "its arguments as declared");
    // Every other argument is still checked.
    arguments.insert("x-message-ttl", Value::I32(-1));
    let e = b
        .apply(&Event::QueueDeclared {
            vhost: "/".into(),
            queue: "older".into(),
            auto_delete: false,
            arguments,
        })
        .unwrap_err();
    assert!(e.text.contains("x-message-ttl"), "{}", e.text);
}

#[test]
fn s_prio_1_max_priority_zero_still_has_priorities_zero_and_one() {
    let mut h = H::new();
    pq(&mut h, "z", 0, &[]);
    send_p(&mut h, "z", None, b"a");
    send_p(&mut h, "z", Some(1), b"b");
    send_p(&mut h, "z", Some(2), b"c");
    send_p(&mut h, "z", Some(0), b"d");
    assert_eq!(drain(&mut h, "z"), ["b", "c", "a", "d"]);
}

#[test]
fn s_prio_2_no_priority_is_zero_and_over_the_maximum_is_the_maximum() {
    // The sequence checked against RabbitMQ 3.10: c d f h g b a e.
    let mut h = H::new();
    pq(&mut h, "p", 5, &[]);
    for (b, p) in [
        (b"a", None),
        (b"b", Some(1)),
        (b"c", Some(5)),
        (b"d", Some(9)),
        (b"e", Some(0)),
        (b"f", Some(5)),
        (b"g", Some(3)),
        (b"h", Some(200)),
    ] {
        send_p(&mut h, "p", p, b);
    }
    let g = h.get("p", true).unwrap();
    assert_eq!(
        g.message.properties.priority,
        Some(5),
        "delivered unchanged"
    );
    assert_eq!(drain(&mut h, "p"), ["d", "f", "h", "g", "b", "a", "e"]);
    // A plain queue ignores priorities.
    h.queue("plain", &[]);
    send_p(&mut h, "plain", Some(1), b"x");
    send_p(&mut h, "plain", Some(9), b"y");
    assert_eq!(drain(&mut h, "plain"), ["x", "y"]);
}

#[test]
fn s_prio_3_consumers_get_higher_priorities_first_fifo_within() {
    let mut h = H::new();
    pq(&mut h, "p", 10, &[]);
    for (b, p) in [(b"1", 1), (b"2", 7), (b"3", 1), (b"4", 10), (b"5", 7)] {
        send_p(&mut h, "p", Some(p), b);
    }
    let o = h.consume("p", "c", true);
    let bodies: Vec<_> = deliveries(&o)
        .iter()
        .map(|d| String::from_utf8_lossy(&d.message.body).into_owned())
        .collect();
    assert_eq!(bodies, ["4", "2", "5", "1", "3"]);
}

#[test]
fn s_prio_4_requeue_goes_back_into_its_priority_with_its_deadline() {
    // As RabbitMQ: b c a taken, all requeued in another order, then b c a d.
    let mut h = H::new();
    pq(&mut h, "p", 5, &[("x-message-ttl", Value::I32(1000))]);
    for (b, p) in [(b"a", 1), (b"b", 5), (b"c", 5), (b"d", 1)] {
        send_p(&mut h, "p", Some(p), b);
    }
    let taken: Vec<_> = (0..3).map(|_| h.get("p", false).unwrap()).collect();
    let bodies: Vec<_> = taken.iter().map(|g| g.message.body.clone()).collect();
    assert_eq!(bodies, [&b"b"[..], b"c", b"a"]);
    h.advance(600);
    for i in [0, 2, 1] {
        h.reject(taken[i].delivery_tag.0, true);
    }
    let first = h.get("p", false).unwrap();
    assert!(first.redelivered);
    h.reject(first.delivery_tag.0, true);
    assert_eq!(h.b.next_deadline(), Some(1_000_000 + 1000), "deadline kept");
    assert_eq!(drain(&mut h, "p"), ["b", "c", "a", "d"]);
    // Past the original deadline, requeued messages die at once.
    for (b, p) in [(b"x", 2), (b"y", 4)] {
        send_p(&mut h, "p", Some(p), b);
    }
    let g = h.get("p", false).unwrap();
    h.advance(1000);
    assert_eq!(h.ready("p"), 0, "x expired behind nothing");
    h.reject(g.delivery_tag.0, true);
    assert_eq!(h.ready("p"), 0, "y came back late and expired");
}

#[test]
fn s_prio_5_expiry_anywhere_in_any_priority_dead_letters() {
    let mut h = H::new();
    dead_letters_into(&mut h, Some(5));
    pq(&mut h, "p", 5, &[("x-dead-letter-exchange", s("dlx"))]);
    // A low-priority message with a short TTL behind high-priority ones, and the reverse.
    send_p(&mut h, "p", Some(5), b"hi");
    for (p, ttl, body) in [(1, "10", &b"lo-ttl"[..]), (4, "20", b"mid-ttl")] {
        let mut props = props_ttl(ttl);
        props.priority = Some(p);
        h.ok(H::publish_cmd("", "p", props, body));
    }
    send_p(&mut h, "p", Some(0), b"lo");
    h.advance(10);
    assert_eq!(h.ready("p"), 3);
    h.advance(10);
    assert_eq!(h.ready("p"), 2);
    assert_eq!(drain(&mut h, "p"), ["hi", "lo"]);
    // The copies keep their priorities, so the priority dead-letter queue orders them.
    let g = h.get("dead", true).unwrap();
    assert_eq!(
        (&g.message.body[..], g.message.properties.priority),
        (&b"mid-ttl"[..], Some(4))
    );
    assert_eq!(first_death_reason(&g), "expired");
    assert_eq!(drain(&mut h, "dead"), ["lo-ttl"]);
}

#[test]
fn s_prio_6_drop_head_drops_the_next_message_to_deliver() {
    // Checked against RabbitMQ 3.10: a1 b5 c3 d1 e0 with max-length 3 keeps a d e.
    let mut h = H::new();
    dead_letters_into(&mut h, None);
    pq(
        &mut h,
        "p",
        5,
        &[
            ("x-max-length", Value::I32(3)),
            ("x-dead-letter-exchange", s("dlx")),
        ],
    );
    for (b, p) in [(b"a", 1), (b"b", 5), (b"c", 3), (b"d", 1), (b"e", 0)] {
        send_p(&mut h, "p", Some(p), b);
    }
    assert_eq!(drain(&mut h, "p"), ["a", "d", "e"]);
    let g = h.get("dead", true).unwrap();
    assert_eq!(first_death_reason(&g), "maxlen");
    assert_eq!(&g.message.body[..], b"b");
    assert_eq!(drain(&mut h, "dead"), ["c"]);
}

#[test]
fn s_prio_6_reject_publish_refuses_whatever_the_priority() {
    let mut h = H::new();
    dead_letters_into(&mut h, None);
    for (q, overflow) in [("r", "reject-publish"), ("rd", "reject-publish-dlx")] {
        pq(
            &mut h,
            q,
            5,
            &[
                ("x-max-length", Value::I32(2)),
                ("x-overflow", s(overflow)),
                ("x-dead-letter-exchange", s("dlx")),
            ],
        );
        send_p(&mut h, q, Some(1), b"a");
        send_p(&mut h, q, Some(1), b"b");
        let o = send_p(&mut h, q, Some(5), b"c");
        assert!(o.published().unwrap().refused, "{overflow}");
        assert_eq!(drain(&mut h, q), ["a", "b"]);
    }
    assert_eq!(drain(&mut h, "dead"), ["c"], "only reject-publish-dlx");
}

#[test]
fn s_prio_7_replay_restores_each_priority_in_order() {
    let mut h = H::new();
    h.durable_queue("p", &[("x-max-priority", Value::I32(3))]);
    let mut p = persistent();
    for (i, body) in [b"a", b"b", b"c", b"d", b"e", b"f"].into_iter().enumerate() {
        p.priority = Some([0, 3, 1, 3, 2, 0][i]);
        h.ok(H::publish_cmd("", "p", p.clone(), body));
    }
    // One delivered and requeued, one acked: replay must put the first back in place.
    let g = h.get("p", false).unwrap();
    h.reject(g.delivery_tag.0, true);
    let g = h.get("p", false).unwrap();
    let g2 = h.get("p", false).unwrap();
    h.ack(g2.delivery_tag.0, false);
    h.reject(g.delivery_tag.0, true);
    let mut b = h.replay();
    b.recovered(h.now);
    b.check_invariants();
    b.handle(
        Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".into(),
        },
        h.now,
    )
    .unwrap();
    b.handle(Command::ChannelOpen { chan: CH }, h.now).unwrap();
    let mut got = Vec::new();
    loop {
        let o = b
            .handle(
                Command::Get {
                    chan: CH,
                    queue: "p".into(),
                    no_ack: true,
                },
                h.now,
            )
            .unwrap();
        match o.reply {
            Reply::GetOk(g) => got.push(String::from_utf8_lossy(&g.message.body).into_owned()),
            _ => break,
        }
    }
    assert_eq!(got, ["b", "e", "c", "a", "f"], "d was acked");
}

#[test]
fn s_prio_8_queue_mode_and_version_are_accepted_no_ops_bad_values_refused() {
    let mut h = H::new();
    let o = h.queue(
        "m",
        &[
            ("x-queue-mode", s("lazy")),
            ("x-queue-version", Value::I32(2)),
        ],
    );
    let ignored: Vec<_> = o
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::ArgumentIgnored { argument, .. } => Some(argument.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ignored, ["x-queue-mode", "x-queue-version"]);
    send_p(&mut h, "m", Some(9), b"a");
    send_p(&mut h, "m", None, b"b");
    assert_eq!(drain(&mut h, "m"), ["a", "b"], "a plain queue still");
    let o = h.queue(
        "m",
        &[
            ("x-queue-mode", s("lazy")),
            ("x-queue-version", Value::I32(2)),
        ],
    );
    assert!(o.effects.is_empty(), "said once, at creation");
    let e = h.err(H::queue_cmd(
        "m",
        false,
        args(&[
            ("x-queue-mode", s("default")),
            ("x-queue-version", Value::I32(2)),
        ]),
    ));
    assert_eq!(
        e.text,
        "inequivalent arg 'x-queue-mode' for queue 'm' in vhost '/': received 'default' but current is 'lazy'"
    );
    for (k, v, reason) in [
        (
            "x-queue-mode",
            s("bogus"),
            "\"unsupported queue mode 'bogus'\"",
        ),
        (
            "x-queue-mode",
            Value::I32(5),
            "{unacceptable_type,signedint}",
        ),
        (
            "x-queue-version",
            Value::I32(3),
            "\"unsupported queue version '3'\"",
        ),
        ("x-queue-version", Value::I32(-1), "{value_negative,-1}"),
        (
            "x-queue-version",
            s("2"),
            "\"expected integer, got longstr\"",
        ),
    ] {
        let e = h.err(H::queue_cmd("bad", false, args(&[(k, v)])));
        assert_eq!(e.kind.reply_code(), 406);
        assert_eq!(
            e.text,
            format!("invalid arg '{k}' for queue 'bad' in vhost '/': {reason}")
        );
    }
}

#[test]
fn s_prio_8_queue_mode_and_version_policy_keys_are_accepted_no_ops() {
    let mut h = H::new();
    h.queue("m", &[]);
    let o = h
        .policy(
            "lazy",
            "^m$",
            r#"{"queue-mode": "lazy", "queue-version": 2}"#,
            0,
            false,
        )
        .unwrap();
    let ignored: Vec<_> = o
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::ArgumentIgnored { what, argument, .. } => Some(format!("{what} {argument}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        ignored,
        ["policy 'lazy' queue-mode", "policy 'lazy' queue-version"]
    );
    assert_eq!(h.info("m").unwrap().policy.as_deref(), Some("lazy"));
    for (def, text) in [
        (
            r#"{"queue-mode": "eager"}"#,
            "\"eager\" is not a valid queue-mode value",
        ),
        (
            r#"{"queue-version": 3}"#,
            "3 is not a valid queue-version value",
        ),
    ] {
        let e = h.policy("bad", ".*", def, 0, false).unwrap_err();
        assert_eq!(e.kind.reply_code(), 406);
        assert_eq!(e.text, format!("invalid policy 'bad': {text}"));
    }
    // As RabbitMQ: queue-version may be an operator policy key, queue-mode may not.
    h.policy("op", ".*", r#"{"queue-version": 1}"#, 0, true)
        .unwrap();
    let e = h
        .policy("op2", ".*", r#"{"queue-mode": "lazy"}"#, 0, true)
        .unwrap_err();
    assert!(e.text.contains("'queue-mode'"), "{}", e.text);
}
