//! End-to-end tests of the AMQP server with lapin: handshake, declare, publish with confirms,
//! consume, get, ack/nack/reject/recover, prefetch, mandatory returns. In-process server on
//! 127.0.0.1:0 with a temporary data directory and a manual clock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation};
use support::{TestServer, within};

#[tokio::test]
async fn publish_confirm_consume_ack_round_trip() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    for i in 0..10u8 {
        let confirm = ch
            .basic_publish(
                "".into(),
                "q".into(),
                BasicPublishOptions::default(),
                &[i],
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    }
    let mut consumer = ch
        .basic_consume(
            "q".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..10u8 {
        let d = within(5, consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, vec![i]);
        assert!(!d.redelivered);
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    let q = ch
        .queue_declare(
            "q".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 0);
    server.handle.shutdown().await.unwrap();
}

/// Declares a transient queue with `args`.
async fn declare(ch: &lapin::Channel, name: &str, args: FieldTable) {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
}

async fn publish(
    ch: &lapin::Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body,
        props,
    )
    .await
    .unwrap();
}

/// The bodies in `queue`, drained with basic.get (no-ack).
async fn drain(ch: &lapin::Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(m.delivery.data.clone());
    }
    out
}

#[tokio::test]
async fn every_exchange_type_routes_as_rabbitmq() {
    use lapin::ExchangeKind;
    use lapin::types::{AMQPValue, LongString};
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    for (name, kind) in [
        ("x.direct", ExchangeKind::Direct),
        ("x.fanout", ExchangeKind::Fanout),
        ("x.topic", ExchangeKind::Topic),
        ("x.headers", ExchangeKind::Headers),
    ] {
        ch.exchange_declare(
            name.into(),
            kind,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    for q in ["d1", "d2", "f1", "f2", "t1", "t2", "h1"] {
        declare(&ch, q, FieldTable::default()).await;
    }
    let bind = |q: &'static str, x: &'static str, key: &'static str, args: FieldTable| {
        let ch = ch.clone();
        async move {
            ch.queue_bind(
                q.into(),
                x.into(),
                key.into(),
                QueueBindOptions::default(),
                args,
            )
            .await
            .unwrap();
        }
    };
    bind("d1", "x.direct", "a", FieldTable::default()).await;
    bind("d2", "x.direct", "b", FieldTable::default()).await;
    bind("f1", "x.fanout", "", FieldTable::default()).await;
    bind("f2", "x.fanout", "ignored", FieldTable::default()).await;
    bind("t1", "x.topic", "stock.*.nyse", FieldTable::default()).await;
    bind("t2", "x.topic", "stock.#", FieldTable::default()).await;
    let mut hargs = FieldTable::default();
    hargs.insert(
        "x-match".into(),
        AMQPValue::LongString(LongString::from("all")),
    );
    hargs.insert(
        "format".into(),
        AMQPValue::LongString(LongString::from("pdf")),
    );
    bind("h1", "x.headers", "", hargs).await;

    let plain = BasicProperties::default;
    publish(&ch, "x.direct", "a", b"da", plain()).await;
    publish(&ch, "x.direct", "c", b"dc", plain()).await;
    publish(&ch, "x.fanout", "whatever", b"f", plain()).await;
    publish(&ch, "x.topic", "stock.ibm.nyse", b"t-ibm", plain()).await;
    publish(&ch, "x.topic", "stock.x.y.z", b"t-deep", plain()).await;
    let mut pdf = FieldTable::default();
    pdf.insert(
        "format".into(),
        AMQPValue::LongString(LongString::from("pdf")),
    );
    publish(&ch, "x.headers", "", b"h-pdf", plain().with_headers(pdf)).await;
    let mut zip = FieldTable::default();
    zip.insert(
        "format".into(),
        AMQPValue::LongString(LongString::from("zip")),
    );
    publish(&ch, "x.headers", "", b"h-zip", plain().with_headers(zip)).await;

    assert_eq!(drain(&ch, "d1").await, vec![b"da".to_vec()]);
    assert!(drain(&ch, "d2").await.is_empty());
    assert_eq!(drain(&ch, "f1").await, vec![b"f".to_vec()]);
    assert_eq!(drain(&ch, "f2").await, vec![b"f".to_vec()]);
    assert_eq!(drain(&ch, "t1").await, vec![b"t-ibm".to_vec()]);
    assert_eq!(
        drain(&ch, "t2").await,
        vec![b"t-ibm".to_vec(), b"t-deep".to_vec()]
    );
    assert_eq!(drain(&ch, "h1").await, vec![b"h-pdf".to_vec()]);
}

#[tokio::test]
async fn get_reject_nack_and_recover_requeue_with_redelivered() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "q", FieldTable::default()).await;
    for body in [b"1", b"2", b"3"] {
        publish(&ch, "", "q", body, BasicProperties::default()).await;
    }
    let get = || ch.basic_get("q".into(), BasicGetOptions::default());
    let m1 = get().await.unwrap().unwrap();
    assert_eq!(m1.delivery.data, b"1");
    assert!(!m1.delivery.redelivered);
    assert_eq!(m1.message_count, 2);
    ch.basic_reject(
        m1.delivery.delivery_tag,
        BasicRejectOptions { requeue: true },
    )
    .await
    .unwrap();
    let again = get().await.unwrap().unwrap();
    assert_eq!(again.delivery.data, b"1");
    assert!(
        again.delivery.redelivered,
        "a requeued message is redelivered"
    );
    // nack without requeue drops it (no dead-letter exchange).
    ch.basic_nack(
        again.delivery.delivery_tag,
        BasicNackOptions {
            requeue: false,
            multiple: false,
        },
    )
    .await
    .unwrap();
    let m2 = get().await.unwrap().unwrap();
    assert_eq!(m2.delivery.data, b"2");
    ch.basic_recover(BasicRecoverOptions { requeue: true })
        .await
        .unwrap();
    let m2b = get().await.unwrap().unwrap();
    assert_eq!(m2b.delivery.data, b"2");
    assert!(m2b.delivery.redelivered);
    m2b.delivery.ack(BasicAckOptions::default()).await.unwrap();
    let m3 = get().await.unwrap().unwrap();
    assert_eq!(m3.delivery.data, b"3");
    m3.delivery.ack(BasicAckOptions::default()).await.unwrap();
    assert!(get().await.unwrap().is_none());
}

#[tokio::test]
async fn prefetch_two_holds_at_most_two_unacked() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let (_conn2, probe) = server.channel().await;
    declare(&ch, "q", FieldTable::default()).await;
    for i in 0..5u8 {
        publish(&ch, "", "q", &[i], BasicProperties::default()).await;
    }
    ch.basic_qos(2, BasicQosOptions::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(
            "q".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d0 = within(5, consumer.next()).await.unwrap().unwrap();
    let d1 = within(5, consumer.next()).await.unwrap().unwrap();
    assert_eq!((d0.data[0], d1.data[0]), (0, 1));
    // The broker's view, from another connection: 3 ready, so no third delivery is out.
    let q = probe
        .queue_declare(
            "q".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 3);
    d0.ack(BasicAckOptions::default()).await.unwrap();
    let d2 = within(5, consumer.next()).await.unwrap().unwrap();
    assert_eq!(d2.data[0], 2);
    let q = probe
        .queue_declare(
            "q".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 2);
}

#[tokio::test]
async fn s_len_2_reject_publish_overflow_is_nacked() {
    use lapin::types::{AMQPValue, LongString};
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(1));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    declare(&ch, "small", args).await;
    let send = |body: &'static [u8]| {
        let ch = ch.clone();
        async move {
            ch.basic_publish(
                "".into(),
                "small".into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap()
        }
    };
    assert!(matches!(send(b"a").await, Confirmation::Ack(None)));
    assert!(matches!(send(b"b").await, Confirmation::Nack(_)));
}

#[tokio::test]
async fn unroutable_mandatory_message_is_returned_before_its_confirm() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            "nowhere".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"lost",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let Confirmation::Ack(Some(returned)) = confirm else {
        panic!("expected an ack carrying the returned message, got {confirm:?}");
    };
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.data, b"lost");
}

#[tokio::test]
async fn tx_buffers_publishes_and_acks_until_commit() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "q", FieldTable::default()).await;
    ch.tx_select().await.unwrap();
    publish(&ch, "", "q", b"rolled back", BasicProperties::default()).await;
    ch.tx_rollback().await.unwrap();
    let get = |ch: lapin::Channel| async move {
        ch.basic_get("q".into(), BasicGetOptions::default())
            .await
            .unwrap()
    };
    assert!(get(ch.clone()).await.is_none());
    publish(&ch, "", "q", b"kept", BasicProperties::default()).await;
    assert!(get(ch.clone()).await.is_none(), "not visible before commit");
    ch.tx_commit().await.unwrap();
    let m = get(ch.clone()).await.unwrap();
    assert_eq!(m.delivery.data, b"kept");
    // The ack is buffered too: after a rollback the message is still unacked, and after a
    // commit it is gone for good.
    ch.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default())
        .await
        .unwrap();
    ch.tx_commit().await.unwrap();
    ch.basic_recover(BasicRecoverOptions { requeue: true })
        .await
        .unwrap();
    assert!(get(ch.clone()).await.is_none());
}

#[tokio::test]
async fn deleting_a_queue_cancels_its_consumers() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let (_conn2, other) = server.channel().await;
    declare(&ch, "q", FieldTable::default()).await;
    let mut consumer = ch
        .basic_consume(
            "q".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    other
        .queue_delete("q".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    // lapin advertises consumer_cancel_notify; the server's basic.cancel ends the stream.
    assert!(within(5, consumer.next()).await.is_none());
}

#[tokio::test]
async fn plain_login_works_and_close_is_clean() {
    let server = TestServer::start().await;
    let conn = server.connect().await;
    assert!(conn.status().connected());
    conn.close(200, "bye".into()).await.unwrap();
}

#[tokio::test]
async fn s_dur_2_confirmed_persistent_messages_survive_a_restart_and_transient_ones_do_not() {
    let server = TestServer::start().await;
    {
        let (conn, ch) = server.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare("kept".into(), durable, FieldTable::default())
            .await
            .unwrap();
        declare(&ch, "transient", FieldTable::default()).await;
        for i in 0..100u8 {
            let mode = if i % 2 == 0 { 2 } else { 1 };
            let props = BasicProperties::default().with_delivery_mode(mode);
            publish(&ch, "", "kept", &[i], props.clone()).await;
            publish(&ch, "", "transient", &[i], props).await;
        }
        ch.wait_for_confirms().await.unwrap();
        // One consumed and acked before the restart (S-DUR-4: the ack is logged).
        let m = ch
            .basic_get("kept".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.delivery.data, [0]);
        m.delivery.ack(BasicAckOptions::default()).await.unwrap();
        // A synchronous round trip so the ack has reached the server before it stops.
        ch.queue_declare(
            "kept".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        conn.close(200, "bye".into()).await.unwrap();
    }
    let server = server.restart().await;
    let (_conn, ch) = server.channel().await;
    let bodies = drain(&ch, "kept").await;
    let expected: Vec<Vec<u8>> = (2..100u8).step_by(2).map(|i| vec![i]).collect();
    assert_eq!(
        bodies, expected,
        "persistent messages in a durable queue, in order"
    );
    let err = ch
        .queue_declare(
            "transient".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        support::reply_code(&err),
        Some(404),
        "a transient queue is gone"
    );
}
