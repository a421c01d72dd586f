//! AMQP 0-9-1 behaviour of the model as RabbitMQ 3.x has it: exchanges and routing, the
//! default and `amq.*` exchanges, queue declare/redeclare/exclusive/auto-delete, consumers,
//! delivery tags, acks, prefetch, flow. Explicit `now`, invariants after every step.

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
    ChanRef, Command, Effect, ErrorKind, Event, ExchangeDeclare, FieldTable, Properties,
    QueueDeclare, Reply, Value,
};

fn xdecl(name: &str, kind: &str) -> Command {
    Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: name.into(),
        kind: kind.into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    })
}

#[test]
fn default_and_system_exchanges_are_protected() {
    let mut h = H::new();
    let e = h.err(xdecl("", "direct"));
    assert_eq!(e.kind, ErrorKind::AccessRefused);
    assert_eq!(e.text, "operation not permitted on the default exchange");
    let e = h.err(Command::ExchangeDelete {
        vhost: "/".into(),
        exchange: String::new(),
        if_unused: false,
    });
    assert_eq!(e.kind.reply_code(), 403);
    let e = h.err(Command::ExchangeDelete {
        vhost: "/".into(),
        exchange: "amq.direct".into(),
        if_unused: false,
    });
    assert_eq!(e.kind.reply_code(), 403);
    let e = h.err(xdecl("amq.custom", "direct"));
    assert_eq!(e.kind.reply_code(), 403);
    // Redeclaring a predeclared exchange with the same type is fine, with another it is not.
    let mut d = xdecl("amq.direct", "direct");
    if let Command::ExchangeDeclare(x) = &mut d {
        x.durable = true;
    }
    h.ok(d);
    h.queue("q", &[]);
    let e = h.err(Command::QueueBind {
        vhost: "/".into(),
        queue: "q".into(),
        exchange: String::new(),
        routing_key: "q".into(),
        arguments: FieldTable::new(),
        bind: true,
        owner: None,
    });
    assert_eq!(e.text, "operation not permitted on the default exchange");
    // Publishing to the default exchange is allowed.
    h.send("q", Properties::default());
    assert_eq!(h.ready("q"), 1);
    for x in [
        "amq.direct",
        "amq.fanout",
        "amq.topic",
        "amq.headers",
        "amq.match",
    ] {
        assert!(h.b.exchanges("/").iter().any(|i| i.name == x), "{x}");
    }
}

#[test]
fn exchange_redeclare_with_another_type_is_406() {
    let mut h = H::new();
    h.ok(xdecl("x", "direct"));
    let e = h.err(xdecl("x", "fanout"));
    assert_eq!(e.kind.reply_code(), 406);
    assert_eq!(
        e.text,
        "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'"
    );
    let e = h.err(xdecl("y", "nonsense"));
    assert_eq!(e.kind, ErrorKind::CommandInvalid);
    let e = h.err(H::publish_cmd("missing", "k", Properties::default(), b"x"));
    assert_eq!(e.kind.reply_code(), 404);
    assert_eq!(e.text, "no exchange 'missing' in vhost '/'");
}

#[test]
fn routing_by_type_e2e_and_alternate_exchange() {
    let mut h = H::new();
    for q in ["d", "f1", "f2", "t", "hd", "ae"] {
        h.queue(q, &[]);
    }
    h.ok(xdecl("direct", "direct"));
    h.ok(xdecl("fan", "fanout"));
    h.ok(xdecl("top", "topic"));
    h.ok(xdecl("hdr", "headers"));
    h.ok(xdecl("alt", "fanout"));
    h.ok(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "main".into(),
        kind: "direct".into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments: args(&[("alternate-exchange", s("alt"))]),
    }));
    h.bind("d", "direct", "k");
    h.bind("f1", "fan", "ignored");
    h.bind("f2", "fan", "");
    h.bind("t", "top", "a.*.c");
    h.bind("ae", "alt", "");
    h.bind("d", "main", "known");
    h.ok(Command::QueueBind {
        vhost: "/".into(),
        queue: "hd".into(),
        exchange: "hdr".into(),
        routing_key: String::new(),
        arguments: args(&[("x-match", s("all")), ("a", s("1"))]),
        bind: true,
        owner: None,
    });
    // e2e: fan -> top.
    h.ok(Command::ExchangeBind {
        vhost: "/".into(),
        destination: "top".into(),
        source: "fan".into(),
        routing_key: String::new(),
        arguments: FieldTable::new(),
        bind: true,
    });
    h.ok(H::publish_cmd("direct", "k", Properties::default(), b"x"));
    h.ok(H::publish_cmd("fan", "a.b.c", Properties::default(), b"x"));
    let mut p = Properties::default();
    p.headers = Some(args(&[("a", s("1"))]));
    h.ok(H::publish_cmd("hdr", "", p, b"x"));
    h.ok(H::publish_cmd(
        "main",
        "unknown",
        Properties::default(),
        b"x",
    ));
    h.ok(H::publish_cmd("main", "known", Properties::default(), b"x"));
    assert_eq!(
        ["d", "f1", "f2", "t", "hd", "ae"].map(|q| h.ready(q)),
        [2, 1, 1, 1, 1, 1]
    );
}

#[test]
fn mandatory_unroutable_is_returned_with_312() {
    let mut h = H::new();
    let o = h.ok(Command::Publish(wharf_broker::Publish {
        vhost: "/".into(),
        exchange: "amq.direct".into(),
        routing_key: "nobody".into(),
        mandatory: true,
        properties: Properties::default(),
        body: bytes::Bytes::from_static(b"x"),
    }));
    assert!(!o.published().unwrap().routed);
    assert!(
        matches!(&o.effects[..], [Effect::Return { reply_code: 312, reply_text, .. }] if reply_text == "NO_ROUTE")
    );
    let o = h.ok(H::publish_cmd(
        "amq.direct",
        "nobody",
        Properties::default(),
        b"x",
    ));
    assert!(o.effects.is_empty(), "not mandatory: dropped silently");
}

#[test]
fn queue_redeclare_passive_and_server_names() {
    let mut h = H::new();
    h.queue("q", &[("x-message-ttl", Value::I32(1000))]);
    let e = h.err(H::queue_cmd(
        "q",
        false,
        args(&[("x-message-ttl", Value::I32(2000))]),
    ));
    assert_eq!(
        e.text,
        "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '2000' but current is '1000'"
    );
    let e = h.err(H::queue_cmd(
        "q",
        true,
        args(&[("x-message-ttl", Value::I32(1000))]),
    ));
    assert!(e.text.contains("'durable'"));
    h.send("q", Properties::default());
    let mut passive = H::queue_cmd("q", false, FieldTable::new());
    if let Command::QueueDeclare(d) = &mut passive {
        d.passive = true;
    }
    match h.ok(passive).reply {
        Reply::QueueDeclareOk { message_count, .. } => assert_eq!(message_count, 1),
        other => panic!("{other:?}"),
    }
    let mut missing = H::queue_cmd("nope", false, FieldTable::new());
    if let Command::QueueDeclare(d) = &mut missing {
        d.passive = true;
    }
    assert_eq!(h.err(missing).kind.reply_code(), 404);
    let e = h.err(H::queue_cmd("amq.q", false, FieldTable::new()));
    assert_eq!(e.kind.reply_code(), 403);
    let name = |o: wharf_broker::Outcome| match o.reply {
        Reply::QueueDeclareOk { queue, .. } => queue,
        other => panic!("{other:?}"),
    };
    let a = name(h.queue("", &[]));
    let b = name(h.queue("", &[]));
    assert!(a.starts_with("amq.gen-") && b.starts_with("amq.gen-") && a != b);
    // Deterministic: a fresh broker given the same commands names them the same.
    let mut h2 = H::new();
    h2.queue("q", &[("x-message-ttl", Value::I32(1000))]);
    assert_eq!(name(h2.queue("", &[])), a);
}

#[test]
fn exclusive_queues_belong_to_their_connection() {
    let mut h = H::new();
    let other = ChanRef::new(2, 1);
    h.ok(Command::ConnectionOpen {
        conn: other.conn,
        vhost: "/".into(),
    });
    h.ok(Command::ChannelOpen { chan: other });
    h.ok(Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: "mine".into(),
        passive: false,
        durable: false,
        exclusive: true,
        auto_delete: false,
        arguments: FieldTable::new(),
        owner: Some(CH.conn),
    }));
    let e = h.err(Command::Consume {
        chan: other,
        queue: "mine".into(),
        consumer_tag: String::new(),
        no_ack: false,
        exclusive: false,
        arguments: wharf_broker::FieldTable::new(),
    });
    assert_eq!(e.kind, ErrorKind::ResourceLocked);
    h.send("mine", Properties::default());
    let o = h.ok(Command::ConnectionClose { conn: CH.conn });
    assert!(
        o.effects
            .iter()
            .any(|e| matches!(e, Effect::QueueDeleted { queue, .. } if queue == "mine"))
    );
    assert!(h.info("mine").is_none());
}

#[test]
fn delivery_tags_acks_and_unknown_tags() {
    let mut h = H::new();
    h.queue("q", &[]);
    for _ in 0..5 {
        h.send("q", Properties::default());
    }
    let tags: Vec<u64> = (0..5)
        .map(|_| h.get("q", false).unwrap().delivery_tag.0)
        .collect();
    assert_eq!(tags, vec![1, 2, 3, 4, 5]);
    h.ack(2, true); // 1 and 2
    assert_eq!(h.unacked("q"), 3);
    let e = h.err(Command::Ack {
        chan: CH,
        delivery_tag: 2,
        multiple: false,
    });
    assert_eq!(e.kind.reply_code(), 406);
    assert!(!e.kind.closes_connection());
    assert_eq!(e.text, "unknown delivery tag 2");
    h.ok(Command::Nack {
        chan: CH,
        delivery_tag: 4,
        multiple: true,
        requeue: true,
    });
    assert_eq!((h.ready("q"), h.unacked("q")), (2, 1));
    h.ack(0, true);
    assert_eq!(h.unacked("q"), 0);
    // Requeued messages come back first, in their original order, redelivered.
    let g = h.get("q", true).unwrap();
    assert!(g.redelivered);
    assert_eq!(g.delivery_tag.0, 6);
    assert_eq!(g.message_count, 1);
    let e = h.err(Command::Recover {
        chan: CH,
        requeue: false,
    });
    assert_eq!(e.kind.reply_code(), 540);
}

#[test]
fn requeue_goes_back_to_the_original_position() {
    let mut h = H::new();
    h.queue("q", &[]);
    for _ in 0..3 {
        h.send("q", Properties::default());
    }
    let a = h.get("q", false).unwrap();
    let b = h.get("q", false).unwrap();
    h.reject(b.delivery_tag.0, true);
    h.reject(a.delivery_tag.0, true);
    let ids: Vec<u64> = (0..3)
        .map(|_| h.get("q", true).unwrap().message.id.0)
        .collect();
    assert_eq!(ids, vec![a.message.id.0, b.message.id.0, ids[2]]);
    assert!(ids[1] < ids[2]);
}

#[test]
fn prefetch_round_robin_and_flow() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.ok(Command::Qos {
        chan: CH,
        prefetch_count: 2,
        global: false,
    });
    h.consume("q", "a", false);
    h.consume("q", "b", false);
    let mut got = Vec::new();
    for _ in 0..6 {
        got.extend(deliveries(&h.send("q", Properties::default())));
    }
    let tags: Vec<&str> = got.iter().map(|d| &*d.consumer_tag).collect();
    assert_eq!(tags, vec!["a", "b", "a", "b"], "round-robin, two each");
    assert_eq!(h.ready("q"), 2);
    let o = h.ack(got[0].delivery_tag.0, false);
    assert_eq!(deliveries(&o).len(), 1, "an ack frees one slot");
    // Pause the channel: nothing more is delivered until it resumes.
    h.ok(Command::ChannelFlow {
        chan: CH,
        active: false,
    });
    let o = h.ack(0, true);
    assert!(deliveries(&o).is_empty());
    let o = h.ok(Command::ChannelFlow {
        chan: CH,
        active: true,
    });
    assert_eq!(deliveries(&o).len(), 1);
    // Global prefetch caps the whole channel.
    h.ok(Command::Qos {
        chan: CH,
        prefetch_count: 1,
        global: true,
    });
    h.ack(0, true);
    for _ in 0..3 {
        h.send("q", Properties::default());
    }
    assert_eq!(h.unacked("q"), 1);
}

#[test]
fn exclusive_consumer_and_auto_delete() {
    let mut h = H::new();
    h.ok(Command::QueueDeclare(QueueDeclare {
        vhost: "/".into(),
        queue: "ad".into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: true,
        arguments: FieldTable::new(),
        owner: None,
    }));
    h.ok(Command::Consume {
        chan: CH,
        queue: "ad".into(),
        consumer_tag: "x".into(),
        no_ack: false,
        exclusive: true,
        arguments: wharf_broker::FieldTable::new(),
    });
    let e = h.err(Command::Consume {
        chan: CH,
        queue: "ad".into(),
        consumer_tag: "y".into(),
        no_ack: false,
        exclusive: false,
        arguments: wharf_broker::FieldTable::new(),
    });
    assert_eq!(e.kind, ErrorKind::AccessRefused);
    let e = h.err(Command::Consume {
        chan: CH,
        queue: "ad".into(),
        consumer_tag: "x".into(),
        no_ack: false,
        exclusive: false,
        arguments: wharf_broker::FieldTable::new(),
    });
    assert_eq!(e.kind, ErrorKind::NotAllowed);
    h.ok(Command::Cancel {
        chan: CH,
        consumer_tag: "x".into(),
    });
    assert!(
        h.info("ad").is_none(),
        "auto-deleted with its last consumer"
    );
}

#[test]
fn delete_and_purge_counts_and_conditions() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.send("q", Properties::default());
    h.send("q", Properties::default());
    let e = h.err(Command::QueueDelete {
        vhost: "/".into(),
        queue: "q".into(),
        if_unused: false,
        if_empty: true,
        owner: None,
    });
    assert_eq!(e.text, "queue 'q' in vhost '/' not empty");
    h.consume("q", "c", false);
    let e = h.err(Command::QueueDelete {
        vhost: "/".into(),
        queue: "q".into(),
        if_unused: true,
        if_empty: false,
        owner: None,
    });
    assert_eq!(e.text, "queue 'q' in vhost '/' in use");
    h.ok(Command::Cancel {
        chan: CH,
        consumer_tag: "c".into(),
    });
    h.send("q", Properties::default());
    match h
        .ok(Command::QueuePurge {
            vhost: "/".into(),
            queue: "q".into(),
            owner: None,
        })
        .reply
    {
        Reply::PurgeOk { message_count } => assert_eq!(message_count, 1),
        other => panic!("{other:?}"),
    }
    h.send("q", Properties::default());
    let o = h.ok(Command::QueueDelete {
        vhost: "/".into(),
        queue: "q".into(),
        if_unused: false,
        if_empty: false,
        owner: None,
    });
    assert_eq!(o.reply, Reply::DeleteOk { message_count: 1 });
    // Consumers on a deleted queue are told.
    h.queue("r", &[]);
    h.consume("r", "c2", false);
    let o = h.ok(Command::QueueDelete {
        vhost: "/".into(),
        queue: "r".into(),
        if_unused: false,
        if_empty: false,
        owner: None,
    });
    assert!(o.effects.iter().any(
        |e| matches!(e, Effect::ConsumerCancelled { consumer_tag, .. } if &**consumer_tag == "c2")
    ));
}

#[test]
fn auto_delete_exchange_goes_with_its_last_binding() {
    let mut h = H::new();
    h.ok(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "ax".into(),
        kind: "fanout".into(),
        passive: false,
        durable: false,
        auto_delete: true,
        internal: false,
        arguments: FieldTable::new(),
    }));
    h.queue("q", &[]);
    h.bind("q", "ax", "");
    h.ok(Command::QueueDelete {
        vhost: "/".into(),
        queue: "q".into(),
        if_unused: false,
        if_empty: false,
        owner: None,
    });
    assert!(!h.b.exchanges("/").iter().any(|x| x.name == "ax"));
}

#[test]
fn persistent_messages_in_durable_queues_need_durability() {
    let mut h = H::new();
    h.durable_queue("d", &[]);
    h.queue("t", &[]);
    h.send("d", persistent()).published().unwrap();
    h.send("t", persistent()).published().unwrap();
    let o = h.send("d", Properties::default());
    o.published().unwrap();
    assert!(o.events.is_empty());
    // The publish event carries the body once and the queues it entered.
    let published: Vec<_> = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::Published { .. }))
        .collect();
    assert_eq!(published.len(), 1);
}

#[test]
fn recover_requeues_everything_unacked_as_redelivered() {
    let mut h = H::new();
    h.queue("q", &[]);
    h.send("q", Properties::default());
    h.send("q", Properties::default());
    h.get("q", false).unwrap();
    h.get("q", false).unwrap();
    h.ok(Command::Recover {
        chan: CH,
        requeue: true,
    });
    assert_eq!((h.ready("q"), h.unacked("q")), (2, 0));
    let g = h.get("q", true).unwrap();
    assert!(g.redelivered);
    assert_eq!(g.delivery_count, 1);
}

#[test]
fn vhosts_are_separate_and_deletable() {
    let mut h = H::new();
    let o = h.ok(Command::VhostAdd { vhost: "v".into() });
    assert_eq!(o.events, vec![Event::VhostAdded { vhost: "v".into() }]);
    assert!(h.b.exchanges("v").iter().any(|x| x.name == "amq.topic"));
    h.ok(Command::QueueDeclare(QueueDeclare {
        vhost: "v".into(),
        queue: "q".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
        owner: None,
    }));
    assert!(h.info("q").is_none(), "not in '/'");
    let e = h.err(Command::ConnectionOpen {
        conn: wharf_broker::ConnId(7),
        vhost: "nope".into(),
    });
    assert!(e.kind.closes_connection());
    h.ok(Command::VhostDelete { vhost: "v".into() });
    assert!(h.b.queues("v").is_empty());
    assert!(!h.b.vhost_names().contains(&"v".to_owned()));
    let b = h.replay();
    assert_eq!(b.vhost_names(), vec!["/".to_owned()]);
}

#[test]
fn internal_exchanges_refuse_publishes() {
    let mut h = H::new();
    h.ok(Command::ExchangeDeclare(ExchangeDeclare {
        vhost: "/".into(),
        exchange: "inner".into(),
        kind: "fanout".into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: true,
        arguments: FieldTable::new(),
    }));
    let e = h.err(H::publish_cmd("inner", "", Properties::default(), b"x"));
    assert_eq!(e.kind.reply_code(), 403);
}
