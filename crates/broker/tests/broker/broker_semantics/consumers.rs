//! Consumers (S-CONS): consumer priorities, single active consumer and the consumer timeout,
//! one or more tests per rule of docs/SEMANTICS.md, each named after its id. Several channels
//! of one connection stand for several clients; time moves only through `advance`.

use super::*;
use wharf_broker::{ChanRef, ChannelId, ConsumerInfo, Delivery, Outcome};

fn chan(n: u16) -> ChanRef {
    ChanRef {
        conn: CH.conn,
        channel: ChannelId(n),
    }
}

/// Opens channel `n` with a per-consumer prefetch (0 = none).
fn open(h: &mut H, n: u16, prefetch: u16) -> ChanRef {
    let c = chan(n);
    h.ok(Command::ChannelOpen { chan: c });
    h.ok(Command::Qos {
        chan: c,
        prefetch_count: prefetch,
        global: false,
    });
    c
}

fn consume_cmd(c: ChanRef, queue: &str, tag: &str, a: &[(&str, Value)]) -> Command {
    Command::Consume {
        chan: c,
        queue: queue.into(),
        consumer_tag: tag.into(),
        no_ack: false,
        exclusive: false,
        arguments: args(a),
    }
}

fn consume(h: &mut H, c: ChanRef, queue: &str, tag: &str, a: &[(&str, Value)]) -> Outcome {
    h.ok(consume_cmd(c, queue, tag, a))
}

fn tags(o: &Outcome) -> Vec<String> {
    deliveries(o)
        .iter()
        .map(|d| d.consumer_tag.to_string())
        .collect()
}

fn ack_on(h: &mut H, c: ChanRef, tag: u64) -> Outcome {
    h.ok(Command::Ack {
        chan: c,
        delivery_tag: tag,
        multiple: false,
    })
}

fn consumer(h: &H, tag: &str) -> ConsumerInfo {
    h.b.consumers("/")
        .into_iter()
        .find(|c| c.consumer_tag == tag)
        .unwrap()
}

fn prio(p: i32) -> [(&'static str, Value); 1] {
    [("x-priority", Value::I32(p))]
}

#[test]
fn s_cons_1_the_highest_priority_consumer_with_room_gets_the_message() {
    let mut h = H::new();
    h.queue("q", &[]);
    let (a, b) = (open(&mut h, 2, 1), open(&mut h, 3, 1));
    consume(&mut h, a, "q", "low", &prio(0));
    consume(&mut h, b, "q", "high", &prio(10));
    assert_eq!(tags(&h.send("q", Properties::default())), ["high"]);
    // S-CONS-3: the high one is full, so the low one gets the next.
    assert_eq!(tags(&h.send("q", Properties::default())), ["low"]);
    assert!(tags(&h.send("q", Properties::default())).is_empty());
    // Room again at the top: the waiting message goes there, not to the low one.
    assert_eq!(tags(&ack_on(&mut h, b, 1)), ["high"]);
}

#[test]
fn s_cons_1_x_priority_takes_any_integer_and_refuses_other_types() {
    let mut h = H::new();
    h.queue("q", &[]);
    for (i, v) in [Value::I8(-3), Value::U32(7), Value::I64(1 << 40)]
        .into_iter()
        .enumerate()
    {
        consume(&mut h, CH, "q", &format!("c{i}"), &[("x-priority", v)]);
    }
    for (v, ty) in [
        (s("high"), "longstr"),
        (Value::Bool(true), "bool"),
        (Value::F64(2.5), "double"),
    ] {
        let e = h.err(consume_cmd(CH, "q", "bad", &[("x-priority", v)]));
        assert_eq!(e.kind.reply_code(), 406);
        assert_eq!(
            e.text,
            format!(
                "invalid arg 'x-priority' for queue 'q' in vhost '/': \"expected integer, got {ty}\""
            )
        );
    }
    let e = h.err(consume_cmd(
        CH,
        "q",
        "s",
        &[("x-stream-offset", Value::I32(5))],
    ));
    assert_eq!(
        e.text,
        "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
    );
    assert_eq!(
        consumer(&h, "c0").arguments.get("x-priority"),
        Some(&Value::I8(-3))
    );
}

#[test]
fn s_cons_2_round_robin_among_consumers_of_equal_priority() {
    let mut h = H::new();
    h.queue("q", &[]);
    let (a, b, c) = (open(&mut h, 2, 0), open(&mut h, 3, 0), open(&mut h, 4, 0));
    consume(&mut h, a, "q", "b1", &prio(5));
    consume(&mut h, c, "q", "low", &prio(-1));
    consume(&mut h, b, "q", "b2", &prio(5));
    let mut got = Vec::new();
    for _ in 0..4 {
        got.extend(tags(&h.send("q", Properties::default())));
    }
    assert_eq!(got, ["b1", "b2", "b1", "b2"]);
}

#[test]
fn s_cons_4_single_active_consumer_only_the_first_registered_receives() {
    let mut h = H::new();
    h.queue("q", &[("x-single-active-consumer", Value::Bool(true))]);
    let (a, b) = (open(&mut h, 2, 0), open(&mut h, 3, 0));
    consume(&mut h, a, "q", "first", &[]);
    // A higher priority does not take over on a classic queue (S-CONS-5).
    consume(&mut h, b, "q", "second", &prio(9));
    let mut got = Vec::new();
    for _ in 0..3 {
        got.extend(tags(&h.send("q", Properties::default())));
    }
    assert_eq!(got, ["first", "first", "first"]);
    let (f, s2) = (consumer(&h, "first"), consumer(&h, "second"));
    assert_eq!((f.active, f.activity_status), (true, "single_active"));
    assert_eq!((s2.active, s2.activity_status), (false, "waiting"));
}

#[test]
fn s_cons_4_single_active_consumer_must_be_a_bool() {
    let mut h = H::new();
    for (v, ty) in [(s("yes"), "longstr"), (Value::I32(1), "signedint")] {
        let e = h.err(H::queue_cmd(
            "q",
            false,
            args(&[("x-single-active-consumer", v)]),
        ));
        assert_eq!(
            e.text,
            format!(
                "invalid arg 'x-single-active-consumer' for queue 'q' in vhost '/': {{unacceptable_type,{ty}}}"
            )
        );
    }
    h.queue("plain", &[]);
    consume(&mut h, CH, "plain", "c", &[]);
    let c = consumer(&h, "c");
    assert_eq!((c.active, c.activity_status), (true, "up"));
    // Redeclared with another value: inequivalent.
    h.queue("q", &[("x-single-active-consumer", Value::Bool(true))]);
    let e = h.err(H::queue_cmd("q", false, FieldTable::new()));
    assert!(
        e.text
            .starts_with("inequivalent arg 'x-single-active-consumer'"),
        "{}",
        e.text
    );
}

#[test]
fn s_cons_5_cancel_hands_over_to_the_next_in_line_and_keeps_unacked_on_the_channel() {
    let mut h = H::new();
    h.queue("q", &[("x-single-active-consumer", Value::Bool(true))]);
    let (a, b, c) = (open(&mut h, 2, 0), open(&mut h, 3, 0), open(&mut h, 4, 0));
    consume(&mut h, a, "q", "first", &[]);
    consume(&mut h, b, "q", "later", &[]);
    consume(&mut h, c, "q", "urgent", &prio(3));
    assert_eq!(tags(&h.send("q", Properties::default())), ["first"]);
    h.ok(Command::Cancel {
        chan: a,
        consumer_tag: "first".into(),
    });
    // The highest priority waiting consumer is next; the cancelled one's delivery stays
    // unacked on its channel and can still be acked there.
    assert_eq!(consumer(&h, "urgent").activity_status, "single_active");
    assert_eq!(h.unacked("q"), 1);
    assert_eq!(tags(&h.send("q", Properties::default())), ["urgent"]);
    ack_on(&mut h, a, 1);
    h.ok(Command::Cancel {
        chan: c,
        consumer_tag: "urgent".into(),
    });
    assert_eq!(consumer(&h, "later").activity_status, "single_active");
}

#[test]
fn s_cons_5_channel_close_hands_over_and_requeues_to_the_next() {
    let mut h = H::new();
    h.queue("q", &[("x-single-active-consumer", Value::Bool(true))]);
    let (a, b) = (open(&mut h, 2, 0), open(&mut h, 3, 0));
    consume(&mut h, a, "q", "first", &[]);
    consume(&mut h, b, "q", "second", &[]);
    h.send("q", Properties::default());
    h.send("q", Properties::default());
    let o = h.ok(Command::ChannelClose { chan: a });
    let d: Vec<Delivery> = deliveries(&o);
    assert_eq!(
        d.len(),
        2,
        "both unacked messages go to the new active consumer"
    );
    assert!(
        d.iter()
            .all(|d| &*d.consumer_tag == "second" && d.redelivered)
    );
    assert_eq!(consumer(&h, "second").activity_status, "single_active");
}

#[test]
fn s_cons_6_exclusive_consumer_is_refused_on_a_single_active_queue() {
    let mut h = H::new();
    h.queue("q", &[("x-single-active-consumer", Value::Bool(true))]);
    let mut cmd = consume_cmd(CH, "q", "x", &[]);
    if let Command::Consume { exclusive, .. } = &mut cmd {
        *exclusive = true;
    }
    let e = h.err(cmd);
    assert_eq!(e.kind.reply_code(), 403);
    assert_eq!(e.text, "queue 'q' in vhost '/' in exclusive use");
}

fn timed_out(o: &Outcome) -> Option<(ChanRef, String)> {
    o.effects.iter().find_map(|e| match e {
        Effect::ChannelTimedOut { chan, error } => {
            assert_eq!(error.kind.reply_code(), 406);
            Some((chan.to_owned(), error.text.clone()))
        }
        _ => None,
    })
}

#[test]
fn s_cons_8_an_unacked_delivery_past_the_timeout_closes_its_channel_and_comes_back() {
    let mut h = H::new();
    h.queue(
        "q",
        &[
            ("x-consumer-timeout", Value::I32(1000)),
            ("x-message-ttl", Value::I32(5000)),
        ],
    );
    let a = open(&mut h, 2, 0);
    consume(&mut h, a, "q", "slow", &[]);
    let published = h.now;
    h.send("q", Properties::default());
    assert!(timed_out(&h.advance(999)).is_none());
    let (c, text) = timed_out(&h.advance(1)).expect("timed out at 1000 ms");
    assert_eq!(c, a);
    assert_eq!(
        text,
        "delivery acknowledgement on channel 2 timed out. Timeout value used: 1000 ms. \
         This timeout value can be configured, see consumers doc guide to learn more"
    );
    // The server closes the channel: the message is requeued, marked redelivered ...
    h.ok(Command::ChannelClose { chan: a });
    assert_eq!(h.ready("q"), 1);
    let g = h.get("q", false).unwrap();
    assert!(g.redelivered);
    h.reject(g.delivery_tag.0, true);
    // ... and keeps its deadline: it expires 5000 ms after it was published (S-TTL-7).
    h.advance_to(published + 4999);
    assert_eq!(h.ready("q"), 1);
    h.advance_to(published + 5000);
    assert_eq!(h.ready("q"), 0);
}

#[test]
fn s_cons_8_an_ack_in_time_keeps_the_channel_and_the_timer_follows_later_deliveries() {
    let mut h = H::new();
    h.queue("q", &[("x-consumer-timeout", Value::I32(1000))]);
    let a = open(&mut h, 2, 0);
    consume(&mut h, a, "q", "c", &[]);
    h.send("q", Properties::default());
    h.advance(600);
    h.send("q", Properties::default());
    ack_on(&mut h, a, 1);
    // The first was acked in time; the second was delivered at 600 and is due at 1600.
    assert!(timed_out(&h.advance(999)).is_none());
    assert!(timed_out(&h.advance(1)).is_some());
}

#[test]
fn s_cons_9_server_default_queue_policy_and_consumer_argument() {
    let mut h = H::new();
    h.b.set_consumer_timeout(Some(10_000));
    h.queue("q", &[]);
    h.queue("p", &[("x-consumer-timeout", Value::I32(5000))]);
    h.policy("short", "^p$", r#"{"consumer-timeout": 2000}"#, 0, false)
        .unwrap();
    let (a, b, c) = (open(&mut h, 2, 0), open(&mut h, 3, 0), open(&mut h, 4, 0));
    consume(&mut h, a, "q", "server", &[]);
    consume(&mut h, b, "p", "policy", &[]);
    consume(
        &mut h,
        c,
        "q",
        "own",
        &[("x-consumer-timeout", Value::I32(500))],
    );
    h.send("q", Properties::default()); // to "server" (round-robin starts there)
    h.send("q", Properties::default()); // to "own"
    h.send("p", Properties::default());
    let at = |o: &Outcome| timed_out(o).map(|(c, _)| c.channel.0);
    assert_eq!(at(&h.advance(500)), Some(4), "the consumer's own 500 ms");
    h.ok(Command::ChannelClose { chan: c });
    assert_eq!(
        at(&h.advance(1500)),
        Some(3),
        "the policy's 2000 ms beats 5000"
    );
    h.ok(Command::ChannelClose { chan: b });
    assert_eq!(at(&h.advance(7999)), None);
    assert_eq!(at(&h.advance(1)), Some(2), "the server's 10 s");
    let e = h.err(consume_cmd(
        CH,
        "q",
        "bad",
        &[("x-consumer-timeout", Value::I32(-1))],
    ));
    assert!(e.text.contains("{value_negative,-1}"), "{}", e.text);
}

#[test]
fn s_cons_9_without_any_timeout_nothing_closes() {
    let mut h = H::new();
    h.queue("q", &[]);
    consume(&mut h, CH, "q", "c", &[]);
    h.send("q", Properties::default());
    assert!(timed_out(&h.advance(365 * 24 * 3_600_000)).is_none());
    assert_eq!(h.b.next_deadline(), None);
}

#[test]
fn s_cons_5_a_quorum_queue_hands_over_to_a_higher_priority_consumer_once_the_active_is_idle() {
    let mut h = H::new();
    h.durable_queue(
        "qq",
        &[
            ("x-queue-type", s("quorum")),
            ("x-single-active-consumer", Value::Bool(true)),
        ],
    );
    let (a, b) = (open(&mut h, 2, 0), open(&mut h, 3, 0));
    consume(&mut h, a, "qq", "first", &[]);
    assert_eq!(tags(&h.send("qq", Properties::default())), ["first"]);
    consume(&mut h, b, "qq", "urgent", &prio(5));
    // The active one holds a message: it is quiescing, and nobody gets the next one.
    assert!(tags(&h.send("qq", Properties::default())).is_empty());
    assert_eq!(consumer(&h, "first").activity_status, "single_active");
    // Once it is idle, the higher priority takes over and gets what waited.
    assert_eq!(tags(&ack_on(&mut h, a, 1)), ["urgent"]);
    assert_eq!(consumer(&h, "urgent").activity_status, "single_active");
    assert_eq!(consumer(&h, "first").activity_status, "waiting");
    // An idle active consumer hands over at once.
    let c = open(&mut h, 4, 0);
    ack_on(&mut h, b, 1);
    consume(&mut h, c, "qq", "top", &prio(9));
    assert_eq!(consumer(&h, "top").activity_status, "single_active");
}
