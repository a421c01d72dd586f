//! Scheduled messages (S-SCHED): docs/SEMANTICS.md, one or more tests per rule, each named after its id.

use super::*;

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

/// S-UI-21: the scheduled messages bound for a queue (by the bindings now) or waiting on an
/// exchange, earliest due first, paged; a bounded walk says when its total is incomplete.
#[test]
fn s_ui_21_scheduled_lists_in_due_order_with_a_bounded_walk() {
    use wharf_broker::ScheduledFor;
    let mut h = H::new();
    let t0 = h.now;
    delayed(&mut h, false);
    h.queue("q", &[]);
    h.bind("q", "later", "k");
    for (key, ms) in [
        ("k", 5000),
        ("k", 1000),
        ("other", 1500),
        ("k", 4000),
        ("k", 2000),
    ] {
        h.ok(H::publish_cmd(
            "later",
            key,
            delay_props(ms, Properties::default()),
            b"x",
        ));
    }
    let dues = |p: &wharf_broker::ScheduledPage| -> Vec<u64> {
        p.messages.iter().map(|m| m.due_ms - t0).collect()
    };
    let all =
        h.b.scheduled("/", ScheduledFor::Queue("q"), 0, 10, 100)
            .unwrap();
    assert_eq!(
        (dues(&all), all.total, all.complete),
        (vec![1000, 2000, 4000, 5000], 4, true)
    );
    let page =
        h.b.scheduled("/", ScheduledFor::Queue("q"), 1, 2, 100)
            .unwrap();
    assert_eq!((dues(&page), page.total), (vec![2000, 4000], 4));
    // A walk of at most 1 beyond the page: the page is whole, the total is not.
    let short =
        h.b.scheduled("/", ScheduledFor::Queue("q"), 0, 2, 1)
            .unwrap();
    assert_eq!(
        (dues(&short), short.total, short.complete),
        (vec![1000, 2000], 2, false)
    );
    let x =
        h.b.scheduled("/", ScheduledFor::Exchange("later"), 0, 10, 100)
            .unwrap();
    assert_eq!(dues(&x), [1000, 1500, 2000, 4000, 5000]);
    assert!(
        h.b.scheduled("/", ScheduledFor::Queue("nope"), 0, 10, 100)
            .is_none()
    );
    assert!(
        h.b.scheduled("/", ScheduledFor::Exchange("nope"), 0, 10, 100)
            .is_none()
    );
    // Routed when due: gone from the list.
    h.advance_to(t0 + 1000);
    assert_eq!(h.ready("q"), 1);
    let left =
        h.b.scheduled("/", ScheduledFor::Queue("q"), 0, 10, 100)
            .unwrap();
    assert_eq!(dues(&left), [2000, 4000, 5000]);
}
