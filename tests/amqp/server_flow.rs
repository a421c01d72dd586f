//! Flow control and lifecycle: a consumer that stops reading its socket makes the server pause
//! its deliveries (messages wait in the queue, so the server's memory stays bounded) and resume
//! once it reads again; a graceful shutdown closes every connection with 320; a resource alarm
//! blocks (and tells) connections that publish.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use amq_protocol::protocol::{AMQPClass, basic};
use amq_protocol::types::FieldTable as WireTable;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use support::raw::Raw;
use support::{TestServer, reply_code, within};
use wharf_protocol::Frame;

const BODY_BYTES: usize = 8 * 1024;
const MESSAGES: usize = 3_000; // 24 MiB: far more than the outbox bound plus socket buffers

#[tokio::test]
async fn slow_consumer_is_paused_and_resumed_without_losing_anything() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.queue_declare(
        "big".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    // A raw consumer without prefetch that does not read its socket for now.
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.send_method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "big".into(),
            consumer_tag: "slow".into(),
            no_local: false,
            no_ack: true,
            exclusive: false,
            nowait: false,
            arguments: WireTable::default(),
        })),
    )
    .await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let body = vec![7u8; BODY_BYTES];
    for _ in 0..MESSAGES {
        ch.basic_publish(
            "".into(),
            "big".into(),
            BasicPublishOptions::default(),
            &body,
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    ch.wait_for_confirms().await.unwrap();
    let ready = ch
        .queue_declare(
            "big".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count();
    assert!(
        ready > 0,
        "every message was pushed towards a consumer that reads nothing"
    );
    // Now read everything: the server resumes as its buffer drains.
    let mut delivered = 0;
    while delivered < MESSAGES {
        match raw.frame().await {
            Some(Frame::Method(_, AMQPClass::Basic(basic::AMQPMethod::Deliver(_)))) => {
                delivered += 1;
            }
            Some(_) => {}
            None => panic!("server closed the consumer after {delivered} deliveries"),
        }
    }
}

#[tokio::test]
async fn shutdown_closes_connections_with_320() {
    let server = TestServer::start().await;
    let (conn, _ch) = server.channel().await;
    let mut events = conn.events_listener();
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    let stopping = tokio::spawn(server.handle.shutdown());
    let (code, text) = raw.expect_connection_close().await;
    assert_eq!(code, 320);
    assert!(text.starts_with("CONNECTION_FORCED"), "{text}");
    let err = loop {
        if let lapin::Event::Error(e) = within(5, events.next()).await.unwrap() {
            break e;
        }
    };
    assert_eq!(reply_code(&err), Some(320), "{err:?}");
    within(5, stopping).await.unwrap().unwrap();
}

#[tokio::test]
async fn resource_alarm_sends_connection_blocked_and_unblocked() {
    // RabbitMQ's rule: a connection is blocked (and told so) when it publishes during the
    // alarm, including one opened during it; both are told when it ends.
    let server = TestServer::start().await;
    let (conn, ch) = server.channel().await;
    let mut events = conn.events_listener();
    server.handle.set_blocked(Some("low on disk".into())).await;
    let publish = |ch: lapin::Channel| async move {
        ch.basic_publish(
            "".into(),
            "nowhere".into(),
            BasicPublishOptions::default(),
            b"x",
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap();
    };
    publish(ch).await;
    let blocked = loop {
        if let lapin::Event::ConnectionBlocked(reason) = within(5, events.next()).await.unwrap() {
            break reason;
        }
    };
    assert_eq!(blocked, "low on disk");
    let (late, late_ch) = server.channel().await;
    let mut late_events = late.events_listener();
    publish(late_ch).await;
    loop {
        if let lapin::Event::ConnectionBlocked(_) = within(5, late_events.next()).await.unwrap() {
            break;
        }
    }
    server.handle.set_blocked(None).await;
    loop {
        if let lapin::Event::ConnectionUnblocked = within(5, events.next()).await.unwrap() {
            break;
        }
    }
    loop {
        if let lapin::Event::ConnectionUnblocked = within(5, late_events.next()).await.unwrap() {
            break;
        }
    }
}
