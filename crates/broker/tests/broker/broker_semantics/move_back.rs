//! S-UI-10: moving dead-lettered messages back to their original route, one event per
//! message, `x-death` kept; what cannot move stays, with the reason.

use super::*;
use wharf_broker::{ErrorKind, MessageId, Outcome};

/// `work` (durable, dead-lettering to the fanout `dlx`, bound to the durable `dlq`) fed by
/// the direct exchange `orders` with key `k`; one persistent message rejected into `dlq`.
/// Returns the id of the dead-lettered copy in `dlq`.
fn rejected_into_dlq(h: &mut H) -> MessageId {
    h.exchange("dlx", "fanout", true, FieldTable::new());
    h.exchange("orders", "direct", true, FieldTable::new());
    h.durable_queue("dlq", &[]);
    h.bind("dlq", "dlx", "");
    h.durable_queue("work", &[("x-dead-letter-exchange", s("dlx"))]);
    h.bind("work", "orders", "k");
    h.ok(H::publish_cmd("orders", "k", persistent(), b"order"));
    let got = h.get("work", false).expect("a message in work");
    h.reject(got.delivery_tag.0, false);
    assert_eq!((h.ready("work"), h.ready("dlq")), (0, 1));
    dlq_ids(h)[0]
}

fn dlq_ids(h: &H) -> Vec<MessageId> {
    let page = h.b.browse("/", "dlq", 0, 100).expect("dlq exists");
    page.messages.iter().map(|m| m.id).collect()
}

fn move_back(h: &mut H, ids: Option<Vec<MessageId>>) -> Outcome {
    h.ok(Command::MoveBack {
        vhost: "/".into(),
        queue: "dlq".into(),
        ids,
    })
}

#[test]
fn s_ui_10_move_back_routes_to_the_original_queue_in_one_event_keeping_x_death() {
    let mut h = H::new();
    let dead = rejected_into_dlq(&mut h);
    let before = h.b.browse("/", "dlq", 0, 1).unwrap().messages[0]
        .content
        .clone()
        .unwrap();
    let o = move_back(&mut h, None);
    assert_eq!(
        o.reply,
        Reply::MovedBack {
            moved: vec![dead],
            skipped: vec![]
        }
    );
    assert_eq!(o.events.len(), 1, "one event: {:?}", o.events);
    let Event::DeadLettered {
        from,
        id,
        message,
        targets,
        ..
    } = o.events[0].clone()
    else {
        panic!("not a DeadLettered event: {:?}", o.events[0]);
    };
    assert_eq!((from.as_deref(), id), (Some("dlq"), dead));
    assert_eq!(targets, vec!["work".to_owned()]);
    let copy = &message.as_ref().expect("the copy is logged").message;
    assert_ne!(copy.id, dead, "the copy has a new id");
    assert_eq!(
        (copy.exchange.as_str(), copy.routing_key.as_str()),
        ("orders", "k")
    );
    assert_eq!(
        header(&copy.properties, "x-death"),
        header(&before.properties, "x-death"),
        "x-death is kept"
    );
    assert_eq!((h.ready("work"), h.ready("dlq")), (1, 0));
    let got = h.get("work", true).expect("back in work");
    assert_eq!(got.message.exchange, "orders");
    assert_eq!(got.message.routing_key, "k");
    // S-DLX-7: replayed to any prefix, the message is in exactly one of the two queues.
    let mut without_move = wharf_broker::Broker::new();
    for e in &h.events[..h.events.len() - 2] {
        without_move.apply(e).unwrap();
    }
    let count = |b: &wharf_broker::Broker, q: &str| {
        b.queues("/")
            .into_iter()
            .find(|i| i.name == q)
            .unwrap()
            .ready
    };
    assert_eq!(
        (count(&without_move, "work"), count(&without_move, "dlq")),
        (0, 1)
    );
    without_move.apply(&h.events[h.events.len() - 2]).unwrap();
    assert_eq!(
        (count(&without_move, "work"), count(&without_move, "dlq")),
        (1, 0)
    );
}

#[test]
fn s_ui_10_what_cannot_move_stays_with_its_reason() {
    let mut h = H::new();
    let dead = rejected_into_dlq(&mut h);
    // Published straight into the dead-letter queue: it never died.
    h.send("dlq", persistent());
    let never_died = dlq_ids(&h)[1];
    let o = move_back(&mut h, Some(vec![never_died, MessageId(999_999)]));
    let Reply::MovedBack { moved, skipped } = o.reply else {
        panic!("{:?}", o.reply);
    };
    assert!(moved.is_empty());
    assert!(o.events.is_empty(), "nothing logged: {:?}", o.events);
    assert_eq!(skipped[0].0, never_died);
    assert!(
        skipped[0].1.contains("never dead-lettered"),
        "{}",
        skipped[0].1
    );
    assert!(
        skipped[1].1.contains("not a ready message"),
        "{}",
        skipped[1].1
    );
    // The original binding is gone: unroutable, so it stays.
    h.ok(Command::QueueBind {
        vhost: "/".into(),
        queue: "work".into(),
        exchange: "orders".into(),
        routing_key: "k".into(),
        arguments: FieldTable::new(),
        bind: false,
        owner: None,
    });
    let o = move_back(&mut h, Some(vec![dead]));
    let Reply::MovedBack { moved, skipped } = o.reply else {
        panic!("{:?}", o.reply);
    };
    assert!(moved.is_empty());
    assert!(skipped[0].1.contains("to no queue"), "{}", skipped[0].1);
    // The original exchange is gone.
    h.ok(Command::ExchangeDelete {
        vhost: "/".into(),
        exchange: "orders".into(),
        if_unused: false,
    });
    let o = move_back(&mut h, None);
    let Reply::MovedBack { skipped, .. } = o.reply else {
        panic!("{:?}", o.reply);
    };
    assert!(
        skipped[0].1.contains("no longer exists"),
        "{}",
        skipped[0].1
    );
    assert_eq!(h.ready("dlq"), 2);
    let e = h.err(Command::MoveBack {
        vhost: "/".into(),
        queue: "nope".into(),
        ids: None,
    });
    assert_eq!(e.kind, ErrorKind::NotFound);
}

/// A message carrying an `x-death` as a dead-lettering from `work` writes it (what a client
/// republishing a dead letter by hand sends).
fn dead_letter_props() -> Properties {
    let mut death = FieldTable::new();
    death.insert("count", Value::I64(1));
    death.insert("exchange", s(""));
    death.insert("queue", s("work"));
    death.insert("reason", s("expired"));
    death.insert("routing-keys", Value::Array(vec![s("work")]));
    let mut headers = FieldTable::new();
    headers.insert("x-death", Value::Array(vec![Value::Table(death)]));
    Properties {
        headers: Some(headers),
        ..persistent()
    }
}

#[test]
fn s_ui_10_one_move_back_handles_at_most_the_limit() {
    let max = wharf_base::limits::MOVE_BACK_MESSAGES_MAX;
    let mut h = H::new();
    h.durable_queue("work", &[]);
    h.durable_queue("dlq", &[]);
    for _ in 0..=max {
        h.send("dlq", dead_letter_props());
    }
    let too_many = (0..=max as u64).map(MessageId).collect();
    let e = h.err(Command::MoveBack {
        vhost: "/".into(),
        queue: "dlq".into(),
        ids: Some(too_many),
    });
    assert_eq!(e.kind, ErrorKind::PreconditionFailed);
    let o = move_back(&mut h, None);
    let Reply::MovedBack { moved, skipped } = o.reply else {
        panic!("{:?}", o.reply);
    };
    assert_eq!((moved.len(), skipped.len()), (max, 0));
    assert_eq!(o.events.len(), max, "one record per message");
    assert_eq!((h.ready("work"), h.ready("dlq")), (max as u64, 1));
}
