//! Expiry and dead-lettering seen from a client, on a manual clock: advance the clock, run
//! the server's timer step (`ServerHandle::tick`), observe the dead-letter queue. No sleep
//! stands in for the clock; waits are only for network replies, with a timeout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use futures_lite::StreamExt;
use lapin::BasicProperties;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use support::{TestServer, within};

fn dlx_args(ttl_ms: Option<i32>) -> FieldTable {
    let mut args = FieldTable::default();
    if let Some(ttl) = ttl_ms {
        args.insert("x-message-ttl".into(), AMQPValue::LongInt(ttl));
    }
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from("dlq")),
    );
    args
}

async fn ready(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

#[tokio::test]
async fn s_ttl_queue_ttl_dead_letters_exactly_at_the_deadline() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "dlq".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        "work".into(),
        QueueDeclareOptions::default(),
        dlx_args(Some(10_000)),
    )
    .await
    .unwrap();
    let mut dead = ch
        .basic_consume(
            "dlq".into(),
            "d".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    ch.basic_publish(
        "".into(),
        "work".into(),
        BasicPublishOptions::default(),
        b"m",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    assert_eq!(ready(&ch, "work").await, 1);
    server.advance(9_999).await;
    assert_eq!(
        ready(&ch, "work").await,
        1,
        "not expired 1 ms before its deadline"
    );
    server.advance(1).await;
    let d = within(5, dead.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"m");
    assert_eq!(d.routing_key.as_str(), "dlq");
    let headers = d.properties.headers().clone().unwrap();
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("no x-death in {headers:?}");
    };
    let Some(AMQPValue::FieldTable(death)) = deaths.as_slice().first() else {
        panic!("empty x-death");
    };
    let reason = death.inner().get("reason").unwrap();
    assert!(
        matches!(reason, AMQPValue::LongString(s) if s.as_bytes() == b"expired"),
        "{reason:?}"
    );
    assert_eq!(ready(&ch, "work").await, 0);
}

#[tokio::test]
async fn s_ttl_per_message_expiration_dead_letters_from_the_middle() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "dlq".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        "work".into(),
        QueueDeclareOptions::default(),
        dlx_args(None),
    )
    .await
    .unwrap();
    let publish = |body: &'static [u8], expiration: Option<&'static str>| {
        let ch = ch.clone();
        async move {
            let mut props = BasicProperties::default();
            if let Some(e) = expiration {
                props = props.with_expiration(e.into());
            }
            ch.basic_publish(
                "".into(),
                "work".into(),
                BasicPublishOptions::default(),
                body,
                props,
            )
            .await
            .unwrap();
        }
    };
    publish(b"keep-1", None).await;
    publish(b"short", Some("500")).await;
    publish(b"keep-2", Some("60000")).await;
    assert_eq!(ready(&ch, "work").await, 3);
    server.advance(500).await;
    assert_eq!(ready(&ch, "work").await, 2);
    assert_eq!(ready(&ch, "dlq").await, 1);
    let m = ch
        .basic_get("dlq".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"short");
    let m = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"keep-1");
}

#[tokio::test]
async fn rejected_messages_are_dead_lettered() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "dlq".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        "work".into(),
        QueueDeclareOptions::default(),
        dlx_args(None),
    )
    .await
    .unwrap();
    ch.basic_publish(
        "".into(),
        "work".into(),
        BasicPublishOptions::default(),
        b"bad",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let m = ch
        .basic_get("work".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .unwrap();
    m.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    assert_eq!(ready(&ch, "dlq").await, 1);
}

#[tokio::test]
async fn s_qexp_unused_queue_is_deleted_when_its_lease_runs_out() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongInt(1_000));
    ch.queue_declare("lease".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    server.advance(999).await;
    assert_eq!(ready(&ch, "lease").await, 0, "still there 1 ms before");
    server.advance(1_001).await;
    let err = ch
        .queue_declare(
            "lease".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(support::reply_code(&err), Some(404));
}
