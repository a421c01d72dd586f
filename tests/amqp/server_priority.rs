//! Priority queues on the wire (S-PRIO), with lapin: a consumer gets higher priorities first
//! and first in first out within a priority, `priority` delivered unchanged; `x-max-priority`,
//! `x-queue-mode` and `x-queue-version` are refused with RabbitMQ's 406 texts and the
//! connection stays usable; a durable priority queue keeps its order across a restart, also
//! when its bodies were paged out.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::{TestServer, reply_code, reply_text, within};
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};

fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn max_priority(n: i32) -> FieldTable {
    table(&[("x-max-priority", AMQPValue::LongInt(n))])
}

/// Publishes one persistent message per `(body, priority)` with confirms.
async fn publish_all(ch: &Channel, queue: &str, msgs: &[(u8, Option<u8>)]) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for &(body, priority) in msgs {
        let mut props = BasicProperties::default().with_delivery_mode(2);
        if let Some(p) = priority {
            props = props.with_priority(p);
        }
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &[body],
            props,
        )
        .await
        .unwrap();
    }
    ch.wait_for_confirms().await.unwrap();
}

/// Every ready body of `queue`, by `basic.get` with no ack.
async fn drain(ch: &Channel, queue: &str) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(m.delivery.data[0]);
    }
    out
}

const MIXED: [(u8, Option<u8>); 8] = [
    (0, None),
    (1, Some(1)),
    (2, Some(5)),
    (3, Some(9)),
    (4, Some(0)),
    (5, Some(5)),
    (6, Some(3)),
    (7, Some(200)),
];
/// `MIXED` in a queue with `x-max-priority` 5 (9 and 200 count as 5): 2 3 5 7 | 6 | 1 | 0 4.
const MIXED_ORDER: [u8; 8] = [2, 3, 5, 7, 6, 1, 0, 4];

#[tokio::test]
async fn s_prio_3_a_consumer_gets_higher_priorities_first() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare("p".into(), QueueDeclareOptions::default(), max_priority(5))
        .await
        .unwrap();
    publish_all(&ch, "p", &MIXED).await;
    let mut consumer = ch
        .basic_consume(
            "p".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..MIXED.len() {
        let d = within(5, consumer.next()).await.unwrap().unwrap();
        let sent = MIXED.iter().find(|m| m.0 == d.data[0]).unwrap().1;
        assert_eq!(
            *d.properties.priority(),
            sent,
            "S-PRIO-2: delivered unchanged"
        );
        d.ack(BasicAckOptions::default()).await.unwrap();
        got.push(d.data[0]);
    }
    assert_eq!(got, MIXED_ORDER);
}

#[tokio::test]
async fn s_prio_1_8_bad_arguments_get_rabbitmqs_406_and_the_connection_survives() {
    let server = TestServer::start().await;
    let (conn, _ch) = server.channel().await;
    let long = |s: &str| AMQPValue::LongString(LongString::from(s));
    let cases = [
        (
            "x-max-priority",
            AMQPValue::LongInt(-1),
            "{value_negative,-1}",
        ),
        (
            "x-max-priority",
            AMQPValue::LongInt(256),
            "{max_value_exceeded,256}",
        ),
        (
            "x-max-priority",
            long("5"),
            "\"expected integer, got longstr\"",
        ),
        (
            "x-queue-mode",
            long("bogus"),
            "\"unsupported queue mode 'bogus'\"",
        ),
        (
            "x-queue-version",
            AMQPValue::LongInt(3),
            "\"unsupported queue version '3'\"",
        ),
    ];
    for (key, value, reason) in cases {
        let ch = conn.create_channel().await.unwrap();
        let err = ch
            .queue_declare(
                "bad".into(),
                QueueDeclareOptions::default(),
                table(&[(key, value)]),
            )
            .await
            .unwrap_err();
        assert_eq!(reply_code(&err), Some(406), "{key}");
        assert_eq!(
            reply_text(&err),
            format!(
                "PRECONDITION_FAILED - invalid arg '{key}' for queue 'bad' in vhost '/': {reason}"
            )
        );
    }
    // The no-op arguments are accepted, and the connection is still usable.
    let ch = conn.create_channel().await.unwrap();
    let args = table(&[
        ("x-queue-mode", long("lazy")),
        ("x-queue-version", AMQPValue::ShortShortUInt(2)),
    ]);
    ch.queue_declare("lazy".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    ch.queue_declare("p".into(), QueueDeclareOptions::default(), max_priority(5))
        .await
        .unwrap();
    let err = ch
        .queue_declare("p".into(), QueueDeclareOptions::default(), max_priority(6))
        .await
        .unwrap_err();
    assert_eq!(
        reply_text(&err),
        "PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue 'p' in vhost '/': received '6' but current is '5'"
    );
}

/// S-PRIO-7: the same order after a clean restart; with `paged`, every body was on disk.
async fn survives_restart(paged: bool) {
    let budget = |c: &mut wharf_server::ServerConfig| {
        if paged {
            c.message_memory_bytes = 0;
        }
    };
    let server = TestServer::start_with(budget).await;
    {
        let (conn, ch) = server.channel().await;
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare("kept".into(), durable, max_priority(5))
            .await
            .unwrap();
        publish_all(&ch, "kept", &MIXED).await;
        conn.close(200, "bye".into()).await.unwrap();
    }
    let server = server.restart().await;
    let (_conn, ch) = server.channel().await;
    assert_eq!(drain(&ch, "kept").await, MIXED_ORDER);
}

#[tokio::test]
async fn s_prio_7_a_durable_priority_queue_keeps_its_order_across_a_restart() {
    survives_restart(false).await;
}

#[tokio::test]
async fn s_prio_7_paged_out_priority_messages_keep_their_order_across_a_restart() {
    survives_restart(true).await;
}
