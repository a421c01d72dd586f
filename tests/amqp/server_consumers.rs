//! Consumers and quorum queues as a client sees them (S-CONS, S-QQ): consumer priorities,
//! single active consumer failover, the consumer timeout on the manual clock (a raw client
//! reads the channel.close), quorum declare refusals, the delivery limit and
//! `x-delivery-count`. Waits are only for network replies, with a timeout; no sleeps.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use amq_protocol::protocol::{AMQPClass, basic, channel};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Consumer};
use support::raw::Raw;
use support::{TestServer, reply_code, reply_text, within};
use wharf_protocol::Frame;

fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

async fn declare(ch: &Channel, name: &str, durable: bool, args: FieldTable) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable,
            ..Default::default()
        },
        args,
    )
    .await
    .unwrap();
}

async fn publish(ch: &Channel, queue: &str, body: &[u8]) {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// A consumer on its own channel with prefetch `prefetch`.
async fn consumer(
    conn: &lapin::Connection,
    queue: &str,
    tag: &str,
    prefetch: u16,
    args: FieldTable,
) -> (Channel, Consumer) {
    let ch = conn.create_channel().await.unwrap();
    ch.basic_qos(prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    let c = ch
        .basic_consume(
            queue.into(),
            tag.into(),
            BasicConsumeOptions::default(),
            args,
        )
        .await
        .unwrap();
    (ch, c)
}

async fn next(c: &mut Consumer) -> lapin::message::Delivery {
    within(5, c.next()).await.unwrap().unwrap()
}

#[tokio::test]
async fn s_cons_1_the_higher_priority_consumer_is_served_first() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    declare(&ch, "q", false, FieldTable::default()).await;
    let prio = |p: i32| table(&[("x-priority", AMQPValue::LongInt(p))]);
    let (_l, mut low) = consumer(&conn, "q", "low", 1, prio(1)).await;
    let (_h, mut high) = consumer(&conn, "q", "high", 1, prio(10)).await;
    publish(&ch, "q", b"m1").await;
    publish(&ch, "q", b"m2").await;
    // S-CONS-3: the high one holds m1 (prefetch 1), so m2 goes down a level.
    assert_eq!(next(&mut high).await.data, b"m1");
    assert_eq!(next(&mut low).await.data, b"m2");
    let err = ch
        .basic_consume(
            "q".into(),
            "bad".into(),
            BasicConsumeOptions::default(),
            table(&[("x-priority", text("high"))]),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(406));
    assert_eq!(
        reply_text(&err),
        "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': \"expected integer, got longstr\""
    );
}

fn sac() -> FieldTable {
    table(&[("x-single-active-consumer", AMQPValue::Boolean(true))])
}

#[tokio::test]
async fn s_cons_5_single_active_consumer_fails_over_on_cancel() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    declare(&ch, "q", false, sac()).await;
    let (c1, mut first) = consumer(&conn, "q", "first", 0, FieldTable::default()).await;
    let (_c2, mut second) = consumer(&conn, "q", "second", 0, FieldTable::default()).await;
    publish(&ch, "q", b"m1").await;
    publish(&ch, "q", b"m2").await;
    let d1 = next(&mut first).await;
    let d2 = next(&mut first).await;
    assert_eq!((&d1.data[..], &d2.data[..]), (&b"m1"[..], &b"m2"[..]));
    c1.basic_cancel("first".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    publish(&ch, "q", b"m3").await;
    assert_eq!(next(&mut second).await.data, b"m3");
    // The cancelled consumer's deliveries stay on its channel and can be acked there.
    d1.ack(BasicAckOptions::default()).await.unwrap();
}

#[tokio::test]
async fn s_cons_5_single_active_consumer_fails_over_on_channel_close_with_its_unacked() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    declare(&ch, "q", false, sac()).await;
    let (c1, mut first) = consumer(&conn, "q", "first", 0, FieldTable::default()).await;
    let (_c2, mut second) = consumer(&conn, "q", "second", 0, FieldTable::default()).await;
    publish(&ch, "q", b"m1").await;
    let d = next(&mut first).await;
    assert!(!d.redelivered);
    c1.close(200, "bye".into()).await.unwrap();
    let d = next(&mut second).await;
    assert_eq!(d.data, b"m1");
    assert!(d.redelivered, "requeued by the close");
}

/// Reads frames until a `channel.close` arrives on `n`, answering it.
async fn channel_close(raw: &mut Raw, n: u16) -> (u16, String) {
    loop {
        match raw.frame().await {
            Some(Frame::Method(ch, AMQPClass::Channel(channel::AMQPMethod::Close(c))))
                if ch.0 == n =>
            {
                let ok = AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}));
                raw.send_method(n, ok).await;
                return (c.reply_code, c.reply_text.to_string());
            }
            Some(_) => {}
            None => panic!("the connection closed"),
        }
    }
}

/// Reads frames until a `basic.deliver` arrives.
async fn delivered(raw: &mut Raw) {
    loop {
        if let Some(Frame::Method(_, AMQPClass::Basic(basic::AMQPMethod::Deliver(_)))) =
            raw.frame().await
        {
            return;
        }
    }
}

#[tokio::test]
async fn s_cons_8_an_unacked_delivery_past_the_timeout_closes_the_channel_and_comes_back() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let args = table(&[("x-consumer-timeout", AMQPValue::LongInt(60_000))]);
    declare(&ch, "slow", false, args).await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.open_channel(7).await;
    let consume = basic::Consume {
        queue: "slow".into(),
        consumer_tag: "c".into(),
        no_local: false,
        no_ack: false,
        exclusive: false,
        nowait: false,
        arguments: amq_protocol::types::FieldTable::default(),
    };
    raw.send_method(7, AMQPClass::Basic(basic::AMQPMethod::Consume(consume)))
        .await;
    publish(&ch, "slow", b"m").await;
    delivered(&mut raw).await;
    server.advance(59_999).await;
    server.advance(1).await;
    let (code, text) = channel_close(&mut raw, 7).await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - delivery acknowledgement on channel 7 timed out. Timeout value \
         used: 60000 ms. This timeout value can be configured, see consumers doc guide to \
         learn more"
    );
    // The message is back, redelivered; the connection's other channel still works.
    let got = within(5, ch.basic_get("slow".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .expect("requeued");
    assert!(got.delivery.redelivered);
    raw.open_channel(8).await;
}

fn quorum(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = table(extra);
    t.insert("x-queue-type".into(), text("quorum"));
    t
}

#[tokio::test]
async fn s_qq_2_quorum_declare_refusals_have_rabbitmq_texts() {
    let server = TestServer::start().await;
    let (conn, _ch) = server.channel().await;
    for (opts, want) in [
        (QueueDeclareOptions::default(), "non-durable"),
        (
            QueueDeclareOptions {
                durable: true,
                auto_delete: true,
                ..Default::default()
            },
            "auto-delete",
        ),
        (
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            "exclusive-owner",
        ),
    ] {
        let ch = conn.create_channel().await.unwrap();
        let err = ch
            .queue_declare("qq".into(), opts, quorum(&[]))
            .await
            .unwrap_err();
        assert_eq!(reply_code(&err), Some(406));
        assert_eq!(
            reply_text(&err),
            format!("PRECONDITION_FAILED - invalid property '{want}' for queue 'qq' in vhost '/'")
        );
    }
    let ch = conn.create_channel().await.unwrap();
    let err = ch
        .queue_declare(
            "qq".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            quorum(&[("x-max-priority", AMQPValue::LongInt(5))]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        reply_text(&err),
        "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'qq' in vhost '/' of queue type rabbit_quorum_queue"
    );
    let ch = conn.create_channel().await.unwrap();
    let err = ch
        .queue_declare(
            "s".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            table(&[("x-queue-type", text("stream"))]),
        )
        .await
        .unwrap_err();
    assert!(
        reply_text(&err).contains("'stream' is not supported"),
        "{err:?}"
    );
}

fn delivery_count(d: &lapin::message::Delivery) -> Option<i64> {
    let headers = d.properties.headers().as_ref()?;
    match headers.inner().get("x-delivery-count")? {
        AMQPValue::LongLongInt(n) => Some(*n),
        other => panic!("x-delivery-count of type {other:?}"),
    }
}

#[tokio::test]
async fn s_qq_3_and_9_delivery_limit_and_x_delivery_count_over_the_wire() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    declare(&ch, "dead", true, FieldTable::default()).await;
    let args = quorum(&[
        ("x-delivery-limit", AMQPValue::LongInt(2)),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text("dead")),
    ]);
    declare(&ch, "qq", true, args).await;
    publish(&ch, "qq", b"m").await;
    let (_c, mut c) = consumer(&conn, "qq", "c", 1, FieldTable::default()).await;
    for want in [None, Some(1), Some(2)] {
        let d = next(&mut c).await;
        assert_eq!(delivery_count(&d), want);
        assert_eq!(d.redelivered, want.is_some());
        d.nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // Returned a third time, over the limit of 2: dead-lettered.
    // The nack and this get travel on one connection, so the server handles them in order.
    let got = within(5, ch.basic_get("dead".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .expect("dead-lettered");
    assert_eq!(got.delivery.data, b"m");
}

#[tokio::test]
async fn s_qq_1_the_queue_type_survives_a_restart() {
    let server = TestServer::start().await;
    {
        let (_conn, ch) = server.channel().await;
        declare(&ch, "qq", true, quorum(&[])).await;
    }
    let server = server.restart().await;
    let (conn, ch) = server.channel().await;
    declare(&ch, "qq", true, quorum(&[])).await;
    let ch = conn.create_channel().await.unwrap();
    let err = ch
        .queue_declare(
            "qq".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert!(
        reply_text(&err).contains("inequivalent arg 'x-queue-type'"),
        "{err:?}"
    );
}

/// S-QQ-10 over the wire: a rejected message with nowhere to go waits in its quorum queue
/// (not delivered, kept across a restart) and reaches the dead-letter queue once it is bound.
#[tokio::test]
async fn s_qq_10_at_least_once_holds_a_message_until_its_route_exists() {
    let server = TestServer::start().await;
    {
        let (_conn, ch) = server.channel().await;
        ch.exchange_declare(
            "dlx".into(),
            lapin::ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        let args = quorum(&[
            ("x-dead-letter-strategy", text("at-least-once")),
            ("x-overflow", text("reject-publish")),
            ("x-dead-letter-exchange", text("dlx")),
            ("x-dead-letter-routing-key", text("k")),
        ]);
        declare(&ch, "qq", true, args).await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        support::publish_persistent(&ch, "qq", b"m").await;
        let got = within(5, ch.basic_get("qq".into(), BasicGetOptions::default()))
            .await
            .unwrap()
            .expect("ready");
        got.delivery
            .nack(BasicNackOptions {
                requeue: false,
                ..Default::default()
            })
            .await
            .unwrap();
        // Held: neither ready nor dropped.
        let again = within(5, ch.basic_get("qq".into(), BasicGetOptions::default()))
            .await
            .unwrap();
        assert!(again.is_none(), "a held message is not delivered");
    }
    let server = server.restart().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "dead", true, FieldTable::default()).await;
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let got = within(5, ch.basic_get("dead".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .expect("dead-lettered once bound");
    assert_eq!(got.delivery.data, b"m");
    let headers = got.delivery.properties.headers().clone().unwrap();
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("x-death missing: {headers:?}");
    };
    assert_eq!(deaths.as_slice().len(), 1);
    let none = within(5, ch.basic_get("dead".into(), BasicGetOptions::default()))
        .await
        .unwrap();
    assert!(none.is_none(), "exactly once");
}
