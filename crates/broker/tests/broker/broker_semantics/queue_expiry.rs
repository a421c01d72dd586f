//! Queue expiry (S-QEXP): docs/SEMANTICS.md, one or more tests per rule, each named after its id.

use super::*;

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
