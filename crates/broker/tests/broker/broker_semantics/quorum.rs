//! Quorum queues on a single node (S-QQ) and the queue-argument audit: one or more tests per
//! rule of docs/SEMANTICS.md, each named after its id, with RabbitMQ 4.0's texts.

use super::*;
use wharf_broker::{QueueDeclare, QueueKind};

fn quorum() -> (&'static str, Value) {
    ("x-queue-type", s("quorum"))
}

fn declare(
    name: &str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    a: &[(&str, Value)],
) -> Command {
    Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: name.into(),
        passive: false,
        durable,
        exclusive,
        auto_delete,
        arguments: args(a),
        owner: Some(CH.conn),
    })
}

#[test]
fn s_qq_1_a_quorum_queue_is_listed_as_such_and_survives_replay() {
    let mut h = H::new();
    h.durable_queue("qq", &[quorum()]);
    h.durable_queue("cq", &[("x-queue-type", s("classic"))]);
    h.durable_queue("plain", &[]);
    assert_eq!(h.info("qq").unwrap().kind, QueueKind::Quorum);
    assert_eq!(h.info("cq").unwrap().kind, QueueKind::Classic);
    assert_eq!(h.info("plain").unwrap().kind, QueueKind::Classic);
    let b = h.replay();
    let qq = b.queues("/").into_iter().find(|q| q.name == "qq").unwrap();
    assert_eq!(qq.kind, QueueKind::Quorum);
    // Redeclaring with another type is inequivalent.
    let e = h.err(H::queue_cmd("qq", true, FieldTable::new()));
    assert!(
        e.text.starts_with("inequivalent arg 'x-queue-type'"),
        "{}",
        e.text
    );
}

#[test]
fn s_qq_2_non_durable_exclusive_and_auto_delete_are_refused() {
    let mut h = H::new();
    for (durable, exclusive, auto_delete, prop) in [
        (false, false, false, "non-durable"),
        (true, true, false, "exclusive-owner"),
        (true, false, true, "auto-delete"),
        (false, true, true, "auto-delete"),
    ] {
        let e = h.err(declare("qq", durable, exclusive, auto_delete, &[quorum()]));
        assert_eq!(e.kind.reply_code(), 406);
        assert_eq!(
            e.text,
            format!("invalid property '{prop}' for queue 'qq' in vhost '/'")
        );
    }
    assert!(h.info("qq").is_none());
}

#[test]
fn s_qq_3_delivery_limit_defaults_to_20_and_negative_means_unlimited() {
    let mut h = H::new();
    h.exchange("dlx", "fanout", false, FieldTable::new());
    h.queue("dead", &[]);
    h.bind("dead", "dlx", "");
    h.durable_queue("qq", &[quorum(), ("x-dead-letter-exchange", s("dlx"))]);
    h.send("qq", Properties::default());
    for returns in 1..=20 {
        let g = h.get("qq", false).expect("still in the queue");
        assert_eq!(g.delivery_count, returns - 1);
        h.reject(g.delivery_tag.0, true);
    }
    // Delivered 21 times, returned 20 times: the 21st return dead-letters it.
    let g = h.get("qq", false).unwrap();
    let o = h.reject(g.delivery_tag.0, true);
    assert_eq!(deaths(&o)[0].1, DeathReason::DeliveryLimit);
    assert_eq!(h.ready("dead"), 1);

    h.durable_queue(
        "unlimited",
        &[quorum(), ("x-delivery-limit", Value::I32(-1))],
    );
    h.send("unlimited", Properties::default());
    for _ in 0..30 {
        let g = h.get("unlimited", false).unwrap();
        h.reject(g.delivery_tag.0, true);
    }
    assert_eq!(h.ready("unlimited"), 1);
    // A classic queue has no limit unless set (S-DLX-1), and refuses a negative one.
    h.queue("classic", &[]);
    h.send("classic", Properties::default());
    for _ in 0..30 {
        let g = h.get("classic", false).unwrap();
        h.reject(g.delivery_tag.0, true);
    }
    assert_eq!(h.ready("classic"), 1);
    let e = h.err(H::queue_cmd(
        "c2",
        false,
        args(&[("x-delivery-limit", Value::I32(-1))]),
    ));
    assert!(e.text.contains("{value_negative,-1}"), "{}", e.text);
}

#[test]
fn s_qq_4_stream_and_unknown_types_are_refused() {
    let mut h = H::new();
    let e = h.err(H::queue_cmd(
        "s",
        true,
        args(&[("x-queue-type", s("stream"))]),
    ));
    assert_eq!(e.kind.reply_code(), 406);
    assert_eq!(
        e.text,
        "invalid arg 'x-queue-type' for queue 's' in vhost '/': queue type 'stream' is not supported by wharf yet"
    );
    let e = h.err(H::queue_cmd("s", true, args(&[("x-queue-type", s("foo"))])));
    assert_eq!(
        e.text,
        "invalid arg 'x-queue-type' for queue 's' in vhost '/': \"unsupported queue type 'foo'\""
    );
    let e = h.err(H::queue_cmd(
        "s",
        true,
        args(&[("x-queue-type", Value::I32(5))]),
    ));
    assert_eq!(
        e.text,
        "invalid arg 'x-queue-type' for queue 's' in vhost '/': {unacceptable_type,signedint}"
    );
}

#[test]
fn s_qq_5_an_argument_of_another_queue_type_is_refused() {
    let mut h = H::new();
    for (a, module) in [
        (
            vec![quorum(), ("x-max-priority", Value::I32(5))],
            "rabbit_quorum_queue",
        ),
        (
            vec![quorum(), ("x-queue-mode", s("lazy"))],
            "rabbit_quorum_queue",
        ),
        (
            vec![quorum(), ("x-max-age", s("1D"))],
            "rabbit_quorum_queue",
        ),
        (
            vec![("x-max-in-memory-length", Value::I32(5))],
            "rabbit_classic_queue",
        ),
        (
            vec![("x-dead-letter-strategy", s("at-most-once"))],
            "rabbit_classic_queue",
        ),
        (
            vec![("x-quorum-initial-group-size", Value::I32(3))],
            "rabbit_classic_queue",
        ),
        (
            vec![("x-stream-max-segment-size-bytes", Value::I32(3))],
            "rabbit_classic_queue",
        ),
    ] {
        let key = a.last().unwrap().0;
        let e = h.err(H::queue_cmd("q", true, args(&a)));
        assert_eq!(
            e.text,
            format!("invalid arg '{key}' for queue 'q' in vhost '/' of queue type {module}")
        );
    }
    // Arguments no queue type knows are ignored, as RabbitMQ does.
    h.durable_queue("q", &[("x-made-up", Value::I32(1))]);
}

#[test]
fn s_qq_6_locators_and_in_memory_limits_are_accepted_as_warned_no_ops() {
    let mut h = H::new();
    let o = h.durable_queue(
        "qq",
        &[
            quorum(),
            ("x-queue-leader-locator", s("balanced")),
            ("x-max-in-memory-length", Value::I32(10)),
            ("x-quorum-initial-group-size", Value::I32(3)),
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
    assert_eq!(
        ignored,
        [
            "x-queue-leader-locator",
            "x-quorum-initial-group-size",
            "x-max-in-memory-length"
        ]
    );
    let o = h.queue("cq", &[("x-queue-master-locator", s("min-masters"))]);
    assert!(
        o.effects
            .iter()
            .any(|e| matches!(e, Effect::ArgumentIgnored { .. }))
    );
    for (a, reason) in [
        (
            ("x-queue-leader-locator", s("nearest")),
            "invalid_queue_locator_arg",
        ),
        (
            ("x-quorum-initial-group-size", Value::I32(0)),
            "{value_zero,0}",
        ),
    ] {
        let key = a.0;
        let e = h.err(H::queue_cmd("bad", true, args(&[quorum(), a])));
        assert_eq!(
            e.text,
            format!("invalid arg '{key}' for queue 'bad' in vhost '/': {reason}")
        );
    }
}

#[test]
fn s_qq_7_dead_letter_strategy_values() {
    let mut h = H::new();
    for v in ["at-most-once", "at-least-once"] {
        h.durable_queue(v, &[quorum(), ("x-dead-letter-strategy", s(v))]);
    }
    for (v, reason) in [
        (s("sometimes"), "invalid_dlx_strategy"),
        (Value::I32(1), "{unacceptable_type,signedint}"),
    ] {
        let e = h.err(H::queue_cmd(
            "q",
            true,
            args(&[quorum(), ("x-dead-letter-strategy", v)]),
        ));
        assert_eq!(
            e.text,
            format!("invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/': {reason}")
        );
    }
}

#[test]
fn s_qq_8_reject_publish_dlx_falls_back_to_drop_head_on_a_quorum_queue() {
    let mut h = H::new();
    let o = h.durable_queue(
        "qq",
        &[
            quorum(),
            ("x-max-length", Value::I32(1)),
            ("x-overflow", s("reject-publish-dlx")),
        ],
    );
    assert!(o.effects.iter().any(
        |e| matches!(e, Effect::ArgumentIgnored { argument, .. } if argument == "x-overflow")
    ));
    let second = {
        h.send("qq", Properties::default());
        h.send("qq", Properties::default()).published().unwrap()
    };
    assert!(second.routed && !second.refused, "drop-head takes it");
    assert_eq!(h.ready("qq"), 1);
}

#[test]
fn s_qq_9_x_delivery_count_is_set_once_a_message_came_back() {
    let mut h = H::new();
    h.durable_queue("qq", &[quorum()]);
    h.queue("cq", &[]);
    for q in ["qq", "cq"] {
        h.send(q, Properties::default());
        let g = h.get(q, false).unwrap();
        assert_eq!(g.count_header, None, "first delivery of {q}");
        h.reject(g.delivery_tag.0, true);
    }
    assert_eq!(h.get("cq", true).unwrap().count_header, None, "classic");
    let g = h.get("qq", false).unwrap();
    assert_eq!(g.count_header, Some(1));
    // A channel close returns it too (RabbitMQ 4.x counts every return).
    h.ok(Command::ChannelClose { chan: CH });
    h.ok(Command::ChannelOpen { chan: CH });
    let o = h.consume("qq", "c", false);
    let d = deliveries(&o);
    assert_eq!(d[0].count_header, Some(2));
    assert!(d[0].redelivered);
}

#[test]
fn s_qq_5_a_queue_logged_with_an_argument_now_refused_still_recovers() {
    // Logged before wharf refused it: recovery keeps the queue, with the arguments it acted
    // on then, instead of stopping.
    let mut b = wharf_broker::Broker::new();
    b.apply(&Event::QueueDeclared {
        vhost: "/".into(),
        queue: "old".into(),
        auto_delete: false,
        arguments: args(&[
            ("x-max-in-memory-length", Value::I32(5)),
            ("x-single-active-consumer", s("yes")),
            ("x-message-ttl", Value::I32(1000)),
        ]),
    })
    .unwrap();
    b.check_invariants();
    let q = b.queues("/").into_iter().find(|q| q.name == "old").unwrap();
    assert_eq!(q.kind, QueueKind::Classic);
    assert_eq!(q.arguments.len(), 3, "listed as declared");
}
