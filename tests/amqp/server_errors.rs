//! Every error path as a client sees it (S-ERR-1): channel errors (403, 404, 405, 406) close
//! the channel with RabbitMQ's reply text and leave the connection usable; connection errors
//! (530, 403 at login) close the connection. The raw-socket paths (501, 504, 505, 540) are in
//! `server_raw.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use support::{TestServer, reply_code, reply_text};

#[tokio::test]
async fn wrong_password_is_refused_with_403() {
    let server = TestServer::start().await;
    let url = format!("amqp://guest:wrong@{}/%2f", server.handle.local_addr());
    let err = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
    assert!(
        reply_text(&err).starts_with("ACCESS_REFUSED - Login was refused"),
        "{err:?}"
    );
}

#[tokio::test]
async fn unknown_user_is_refused_with_403() {
    let server = TestServer::start().await;
    let url = format!("amqp://nobody:x@{}/%2f", server.handle.local_addr());
    let err = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
}

#[tokio::test]
async fn unknown_vhost_is_refused_with_530() {
    let server = TestServer::start().await;
    let url = format!("amqp://guest:guest@{}/nope", server.handle.local_addr());
    let err = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
    assert!(reply_text(&err).starts_with("NOT_ALLOWED"), "{err:?}");
}

#[tokio::test]
async fn missing_queue_is_404_with_rabbitmq_text_and_the_connection_survives() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    let err = ch
        .queue_declare(
            "nope".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(404));
    assert_eq!(reply_text(&err), "NOT_FOUND - no queue 'nope' in vhost '/'");
    // Only the channel closed.
    let ch2 = conn.create_channel().await.unwrap();
    ch2.queue_declare(
        "fine".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn publishing_to_a_missing_exchange_closes_the_channel_with_404() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "no-such-x".into(),
            "k".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await;
    let err = match confirm {
        Ok(pending) => pending.await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(reply_code(&err), Some(404), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "NOT_FOUND - no exchange 'no-such-x' in vhost '/'"
    );
}

#[tokio::test]
async fn exclusive_queue_of_another_connection_is_405() {
    let server = TestServer::start().await;
    let (_c1, ch1) = server.channel().await;
    let (_c2, ch2) = server.channel().await;
    ch1.queue_declare(
        "mine".into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = ch2
        .basic_consume(
            "mine".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(405), "{err:?}");
    assert!(reply_text(&err).starts_with("RESOURCE_LOCKED - cannot obtain exclusive access"));
}

#[tokio::test]
async fn invalid_queue_argument_is_406_with_text() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(-1));
    let err = ch
        .queue_declare("q".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(406));
    assert!(
        reply_text(&err).starts_with(
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/'"
        ),
        "{}",
        reply_text(&err)
    );
}

#[tokio::test]
async fn inequivalent_redeclare_is_406() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(1000));
    ch.queue_declare("q".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    let mut other = FieldTable::default();
    other.insert("x-message-ttl".into(), AMQPValue::LongInt(2000));
    let ch2 = conn.create_channel().await.unwrap();
    let err = ch2
        .queue_declare("q".into(), QueueDeclareOptions::default(), other)
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(406));
    assert!(reply_text(&err).contains("inequivalent arg 'x-message-ttl'"));
}

#[tokio::test]
async fn unknown_delivery_tag_is_406() {
    use futures_lite::StreamExt;
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    let mut events = conn.events_listener();
    ch.basic_ack(99, BasicAckOptions::default()).await.unwrap();
    // The ack has no reply: the channel's close arrives as an error event.
    let err = loop {
        if let lapin::Event::Error(e) = support::within(5, events.next()).await.unwrap() {
            break e;
        }
    };
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "PRECONDITION_FAILED - unknown delivery tag 99"
    );
}

#[tokio::test]
async fn binding_to_the_default_exchange_is_403() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = ch
        .queue_bind(
            "q".into(),
            "".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
    assert!(
        reply_text(&err).contains("default exchange"),
        "{}",
        reply_text(&err)
    );
}

#[tokio::test]
async fn reserved_exchange_name_is_refused() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    let err = ch
        .exchange_declare(
            "amq.mine".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(403), "{err:?}");
    assert!(reply_text(&err).contains("reserved prefix 'amq.*'"));
}

#[tokio::test]
async fn reusing_a_consumer_tag_is_530_and_closes_the_connection() {
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.basic_consume(
        "q".into(),
        "tag".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = ch
        .basic_consume(
            "q".into(),
            "tag".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
    assert!(!conn.status().connected());
}

#[tokio::test]
async fn switching_from_confirm_to_tx_is_406() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let err = ch.tx_select().await.unwrap_err();
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode"
    );
}

#[tokio::test]
async fn header_exchange_with_bad_x_match_is_406() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.exchange_declare(
        "h".into(),
        ExchangeKind::Headers,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut args = FieldTable::default();
    args.insert(
        "x-match".into(),
        AMQPValue::LongString(LongString::from("sometimes")),
    );
    let err = ch
        .queue_bind(
            "q".into(),
            "h".into(),
            "".into(),
            QueueBindOptions::default(),
            args,
        )
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
}
