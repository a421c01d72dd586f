//! S-FLOW: publisher flow control. Marks of 3 (high) and 1 (low) ready messages keep the
//! scenarios short; the rule is the same at the default marks.

use super::*;
use bytes::Bytes;
use wharf_broker::{ChanRef, ConnId, Publish};

/// The consumer's channel, on a second connection.
const OTHER: ChanRef = ChanRef {
    conn: ConnId(2),
    channel: wharf_broker::ChannelId(1),
};

fn flow_broker() -> H {
    let mut h = H::new();
    h.b.set_flow_marks(3, 1);
    h.ok(Command::ConnectionOpen {
        conn: OTHER.conn,
        vhost: "/".into(),
    });
    h.ok(Command::ChannelOpen { chan: OTHER });
    h.queue("q", &[]);
    h
}

/// A consumer of `q` on `chan` that takes one message at a time.
fn consume_one_at_a_time(h: &mut H, chan: ChanRef) {
    h.ok(Command::Qos {
        chan,
        prefetch_count: 1,
        global: false,
    });
    h.ok(Command::Consume {
        chan,
        queue: "q".into(),
        consumer_tag: "c".into(),
        no_ack: false,
        exclusive: false,
        arguments: FieldTable::new(),
    });
}

/// `basic.publish` on `CH` to `q`; whether the publisher is to be slowed.
fn publish_on(h: &mut H) -> bool {
    let o = h.ok(Command::PublishOn {
        chan: CH,
        publish: Publish {
            vhost: "/".into(),
            exchange: String::new(),
            routing_key: "q".into(),
            mandatory: false,
            properties: Properties::default(),
            body: Bytes::from_static(b"m"),
        },
    });
    o.published().expect("a publish result").flow
}

fn ack_next(h: &mut H, tag: u64) {
    h.ok(Command::Ack {
        chan: OTHER,
        delivery_tag: tag,
        multiple: false,
    });
}

#[test]
fn s_flow_1_a_backlog_behind_another_connections_consumer_slows_its_publisher_until_low() {
    let mut h = flow_broker();
    consume_one_at_a_time(&mut h, OTHER);
    // The first goes to the consumer; then 1, 2, 3 ready: at the high mark, not over it.
    for _ in 0..4 {
        assert!(!publish_on(&mut h));
    }
    assert_eq!(h.ready("q"), 3);
    assert!(publish_on(&mut h), "4 ready is over the high mark of 3");
    assert!(h.b.flow_released().is_empty());
    // Each ack delivers the next one: 3 ready, then 2, still over the low mark of 1.
    ack_next(&mut h, 1);
    ack_next(&mut h, 2);
    assert_eq!(h.ready("q"), 2);
    assert!(h.b.flow_released().is_empty());
    ack_next(&mut h, 3);
    assert_eq!(h.ready("q"), 1);
    assert_eq!(h.b.flow_released(), vec![CH.conn]);
    assert!(
        h.b.flow_released().is_empty(),
        "a connection is released once"
    );
}

#[test]
fn s_flow_1_a_queue_without_consumers_buffers_without_slowing_anyone() {
    let mut h = flow_broker();
    for _ in 0..20 {
        assert!(!publish_on(&mut h));
    }
    assert_eq!(h.ready("q"), 20);
}

#[test]
fn s_flow_1_a_connections_own_consumer_never_slows_it() {
    let mut h = flow_broker();
    consume_one_at_a_time(&mut h, CH);
    for _ in 0..20 {
        assert!(!publish_on(&mut h));
    }
    assert_eq!(h.ready("q"), 19);
}

#[test]
fn s_flow_1_the_management_apis_publishes_are_never_slowed() {
    let mut h = flow_broker();
    consume_one_at_a_time(&mut h, OTHER);
    for _ in 0..20 {
        let o = h.send("q", Properties::default());
        assert!(!o.published().expect("a publish result").flow);
    }
}

#[test]
fn s_flow_1_the_consumer_leaving_or_the_queue_going_releases_the_publisher() {
    let mut h = flow_broker();
    consume_one_at_a_time(&mut h, OTHER);
    while !publish_on(&mut h) {}
    h.ok(Command::Cancel {
        chan: OTHER,
        consumer_tag: "c".into(),
    });
    assert_eq!(
        h.b.flow_released(),
        vec![CH.conn],
        "no consumer is behind any more"
    );

    consume_one_at_a_time(&mut h, OTHER);
    while !publish_on(&mut h) {}
    h.ok(Command::QueueDelete {
        vhost: "/".into(),
        queue: "q".into(),
        if_unused: false,
        if_empty: false,
        owner: Some(CH.conn),
    });
    assert_eq!(h.b.flow_released(), vec![CH.conn], "the queue is gone");
}

#[test]
fn s_flow_1_a_closed_connection_is_forgotten() {
    let mut h = flow_broker();
    consume_one_at_a_time(&mut h, OTHER);
    while !publish_on(&mut h) {}
    h.ok(Command::ConnectionClose { conn: CH.conn });
    assert!(h.b.flow_released().is_empty());
}

#[test]
fn s_flow_1_high_mark_zero_turns_flow_control_off() {
    let mut h = flow_broker();
    h.b.set_flow_marks(0, 0);
    consume_one_at_a_time(&mut h, OTHER);
    for _ in 0..20 {
        assert!(!publish_on(&mut h));
    }
}
