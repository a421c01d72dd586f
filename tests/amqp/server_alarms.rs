//! Resource protection through a real client (lapin): disk and memory alarms block publishing
//! connections (RabbitMQ's rule: their publishes wait, nothing is refused or lost, consumers on
//! other connections keep receiving and acking) and clearing them delivers the held
//! publishes' confirms; connection and channel limits are refused with RabbitMQ's codes and
//! texts. Free disk and memory come from a fake `ResourceProbe` driven by the test, and
//! `ServerHandle::check_resources` runs the monitor's check at once (no waiting for its
//! period). "No confirm while blocked" is observed over a short bounded wait.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, channel};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use support::raw::Raw;
use support::{TestServer, reply_code, reply_text, within};
use wharf_server::{MemoryLimit, ResourceProbe};

/// How long a confirm must stay away to count as held.
const HELD_FOR: Duration = Duration::from_millis(300);
const DISK_LIMIT: u64 = 1_000_000;
/// What the monitor counts as about to be used on top (S-DISK-1): the log's next segment.
const NEXT_SEGMENT: u64 = wharf_base::limits::SEGMENT_BYTES_MAX;
const MEMORY_LIMIT: u64 = 1_000_000;

#[derive(Debug)]
struct FakeProbe {
    free: AtomicU64,
    used: AtomicU64,
}

impl ResourceProbe for FakeProbe {
    fn disk_free_bytes(&self) -> io::Result<u64> {
        Ok(self.free.load(Ordering::SeqCst))
    }
    fn memory_used_bytes(&self) -> io::Result<u64> {
        Ok(self.used.load(Ordering::SeqCst))
    }
}

async fn start() -> (TestServer, Arc<FakeProbe>) {
    let probe = Arc::new(FakeProbe {
        free: AtomicU64::new(10 * DISK_LIMIT + NEXT_SEGMENT),
        used: AtomicU64::new(0),
    });
    let p = probe.clone();
    let server = TestServer::start_with(move |c| {
        c.resource_probe = Some(p);
        c.disk_free_limit_bytes = DISK_LIMIT;
        c.memory_high_watermark = MemoryLimit::Bytes(MEMORY_LIMIT);
    })
    .await;
    (server, probe)
}

async fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn confirming_channel(server: &TestServer) -> (Connection, Channel) {
    let (conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    (conn, ch)
}

async fn publish(ch: &Channel, queue: &str, body: &[u8]) -> lapin::PublisherConfirm {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .unwrap()
}

async fn next_blocked_event(
    events: &mut (impl futures_lite::Stream<Item = lapin::Event> + Unpin),
) -> String {
    loop {
        if let lapin::Event::ConnectionBlocked(reason) = within(5, events.next()).await.unwrap() {
            return reason;
        }
    }
}

async fn next_unblocked_event(
    events: &mut (impl futures_lite::Stream<Item = lapin::Event> + Unpin),
) {
    loop {
        if let lapin::Event::ConnectionUnblocked = within(5, events.next()).await.unwrap() {
            return;
        }
    }
}

async fn message_count(ch: &Channel, queue: &str) -> u32 {
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

/// The disk alarm: a publisher's publish is held (no confirm), it is told "low on disk"; a
/// consumer on another connection drains and acks meanwhile and is not blocked; clearing the
/// alarm confirms the held publish and delivers it, and unblocks the publisher.
#[tokio::test]
async fn s_dur_3_disk_alarm_holds_publishes_while_consumers_drain() {
    let (server, probe) = start().await;
    let (pub_conn, pub_ch) = confirming_channel(&server).await;
    declare(&pub_ch, "q").await;
    for i in 0..5u8 {
        let c = publish(&pub_ch, "q", &[i]).await.await.unwrap();
        assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
    }
    let mut pub_events = pub_conn.events_listener();

    probe
        .free
        .store(DISK_LIMIT - 1 + NEXT_SEGMENT, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert_eq!(
        server.handle.blocked_reason().as_deref(),
        Some("low on disk")
    );

    let held = publish(&pub_ch, "q", b"held").await;
    assert_eq!(next_blocked_event(&mut pub_events).await, "low on disk");
    let mut held = Box::pin(held);
    assert!(
        tokio::time::timeout(HELD_FOR, &mut held).await.is_err(),
        "a confirm arrived while the alarm was on"
    );

    // Another connection consumes and acks everything queued before the alarm.
    let (cons_conn, cons_ch) = server.channel().await;
    let mut consumer = cons_ch
        .basic_consume(
            "q".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..5u8 {
        let d = within(5, consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, vec![i]);
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    assert_eq!(message_count(&cons_ch, "q").await, 0, "acks went through");
    assert!(!cons_conn.status().blocked(), "a consumer is never blocked");
    assert!(
        tokio::time::timeout(HELD_FOR, &mut held).await.is_err(),
        "still held"
    );

    // Still below the limit plus hysteresis: stays on.
    probe
        .free
        .store(DISK_LIMIT + NEXT_SEGMENT, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert!(server.handle.blocked_reason().is_some());

    probe
        .free
        .store(2 * DISK_LIMIT + NEXT_SEGMENT, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert_eq!(server.handle.blocked_reason(), None);
    let c = within(5, held).await.unwrap();
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
    next_unblocked_event(&mut pub_events).await;
    let d = within(5, consumer.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"held", "the held publish was delivered, once");
    d.ack(BasicAckOptions::default()).await.unwrap();
    let c = publish(&pub_ch, "q", b"after").await.await.unwrap();
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
}

/// The memory alarm, with its hysteresis: on at the limit, off only 5 % below it.
#[tokio::test]
async fn memory_alarm_blocks_publishers_and_clears_with_hysteresis() {
    let (server, probe) = start().await;
    let (pub_conn, pub_ch) = confirming_channel(&server).await;
    declare(&pub_ch, "m").await;
    let mut pub_events = pub_conn.events_listener();

    probe.used.store(MEMORY_LIMIT, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert_eq!(
        server.handle.blocked_reason().as_deref(),
        Some("low on memory")
    );
    let mut held = Box::pin(publish(&pub_ch, "m", b"x").await);
    assert_eq!(next_blocked_event(&mut pub_events).await, "low on memory");
    assert!(tokio::time::timeout(HELD_FOR, &mut held).await.is_err());

    probe
        .used
        .store(MEMORY_LIMIT - MEMORY_LIMIT / 40, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert!(server.handle.blocked_reason().is_some(), "hysteresis");
    assert!(tokio::time::timeout(HELD_FOR, &mut held).await.is_err());

    probe.used.store(MEMORY_LIMIT / 2, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert_eq!(server.handle.blocked_reason(), None);
    let c = within(5, held).await.unwrap();
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
    next_unblocked_event(&mut pub_events).await;
    let (_c, ch) = server.channel().await;
    assert_eq!(message_count(&ch, "m").await, 1);
}

/// `set_blocked` throttles too (it only notified before), and both alarms together give the
/// reasons joined.
#[tokio::test]
async fn set_blocked_holds_publishes_until_every_alarm_clears() {
    let (server, probe) = start().await;
    let (pub_conn, pub_ch) = confirming_channel(&server).await;
    declare(&pub_ch, "s").await;
    let mut pub_events = pub_conn.events_listener();
    server.handle.set_blocked(Some("maintenance".into())).await;
    probe.free.store(0, Ordering::SeqCst);
    server.handle.check_resources().await;
    assert_eq!(
        server.handle.blocked_reason().as_deref(),
        Some("low on disk & maintenance")
    );
    let mut held = Box::pin(publish(&pub_ch, "s", b"x").await);
    assert_eq!(
        next_blocked_event(&mut pub_events).await,
        "low on disk & maintenance"
    );
    server.handle.set_blocked(None).await;
    assert!(
        tokio::time::timeout(HELD_FOR, &mut held).await.is_err(),
        "disk still low"
    );
    probe.free.store(u64::MAX, Ordering::SeqCst);
    server.handle.check_resources().await;
    let c = within(5, held).await.unwrap();
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
}

/// One connection over `connection_max` is refused at `connection.open` with RabbitMQ's 530
/// and text; a place given back is usable again.
#[tokio::test]
async fn connection_max_refuses_with_530_and_frees_places_on_close() {
    let server = TestServer::start_with(|c| c.connection_max = 2).await;
    let a = server.connect().await;
    let _b = server.connect().await;
    let err = Connection::connect(&server.url(), ConnectionProperties::default())
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(530), "{err:?}");
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - connection refused: node connection limit (2) is reached"
    );
    a.close(200, "bye".into()).await.unwrap();
    // The closed connection's place comes back once its task ends: bounded retries.
    let mut again = None;
    for _ in 0..100 {
        if let Ok(c) = Connection::connect(&server.url(), ConnectionProperties::default()).await {
            again = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again
            .expect("the place never came back")
            .status()
            .connected()
    );
}

/// `channel_max` is offered in tune, and one channel more is RabbitMQ's 530 (it counts open
/// channels first).
#[tokio::test]
async fn channel_max_is_negotiated_and_one_more_channel_is_530() {
    let server = TestServer::start_with(|c| c.channel_max = 2).await;
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.open_channel(1).await;
    raw.open_channel(2).await;
    raw.send_method(
        3,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )
    .await;
    let (code, text) = raw.expect_connection_close().await;
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    );
    // A channel number above channel_max, with room left, breaks the spec's rule: 504.
    let mut raw = Raw::open(server.handle.local_addr(), 0).await;
    raw.send_method(
        5,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )
    .await;
    let (code, _) = raw.expect_connection_close().await;
    assert_eq!(code, 504);
    // lapin sees the lower channel_max in tune and keeps to it.
    let conn = server.connect().await;
    assert_eq!(conn.configuration().channel_max(), 2);
}

/// A configured `max_message_size` below the hard limit refuses larger bodies (406).
#[tokio::test]
async fn a_lowered_max_message_size_refuses_larger_bodies() {
    let server = TestServer::start_with(|c| c.message_bytes_max = 1000).await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "small").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let c = publish(&ch, "small", &[0; 1000]).await.await.unwrap();
    assert!(matches!(c, Confirmation::Ack(None)), "{c:?}");
    let confirm = ch
        .basic_publish(
            "".into(),
            "small".into(),
            BasicPublishOptions::default(),
            &[0; 1001],
            BasicProperties::default(),
        )
        .await;
    let err = match confirm {
        Ok(pending) => within(5, pending).await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
}

/// The safety cap on unacked deliveries holds for a consumer with prefetch 0, and an ack
/// makes room for the next delivery.
#[tokio::test]
async fn unacked_per_channel_max_caps_a_consumer_without_prefetch() {
    let server = TestServer::start_with(|c| c.unacked_per_channel_max = 3).await;
    let (_conn, ch) = confirming_channel(&server).await;
    declare(&ch, "cap").await;
    for i in 0..5u8 {
        publish(&ch, "cap", &[i]).await.await.unwrap();
    }
    let (_c2, cons) = server.channel().await;
    let mut consumer = cons
        .basic_consume(
            "cap".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(within(5, consumer.next()).await.unwrap().unwrap());
    }
    assert!(
        tokio::time::timeout(HELD_FOR, consumer.next())
            .await
            .is_err(),
        "a fourth delivery over the cap"
    );
    got.remove(0).ack(BasicAckOptions::default()).await.unwrap();
    let d = within(5, consumer.next()).await.unwrap().unwrap();
    assert_eq!(d.data, vec![3]);
}

/// A graceful shutdown does not wait for an alarm to clear: a held publisher is closed with
/// 320 like every other connection, and its held publish was never confirmed.
#[tokio::test]
async fn shutdown_closes_a_held_publisher() {
    let (server, probe) = start().await;
    let (pub_conn, pub_ch) = confirming_channel(&server).await;
    declare(&pub_ch, "h").await;
    let mut pub_events = pub_conn.events_listener();
    probe.free.store(0, Ordering::SeqCst);
    server.handle.check_resources().await;
    let held = publish(&pub_ch, "h", b"x").await;
    assert_eq!(next_blocked_event(&mut pub_events).await, "low on disk");
    within(5, server.handle.shutdown()).await.unwrap();
    let outcome = within(5, held).await;
    assert!(
        !matches!(outcome, Ok(Confirmation::Ack(_))),
        "a held publish was confirmed: {outcome:?}"
    );
}
