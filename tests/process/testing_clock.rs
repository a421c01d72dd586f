//! Clock control drives every client-observable rule of SEMANTICS S-TTL, S-QEXP and S-SCHED
//! end to end: a `TestBroker` on a manual clock, lapin as the client, `clock().advance(..)`
//! as the only way time passes. Each test takes milliseconds of real time; waits are only for
//! network replies, with a timeout. Not here: S-TTL-11 and the policy halves of S-TTL-1,
//! S-TTL-3 and S-QEXP-1 (no client-side way to set a policy on this branch; the broker's own
//! tests cover them).
//!
//! Probing whether a queue exists with `queue.declare` would renew its lease (S-QEXP-2), so
//! the lease tests probe with a mandatory publish instead: returned (`NO_ROUTE`) means gone.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ExchangeKind};
use support::{reply_code, reply_text, within};
use wharf::testing::TestBroker;
use wharf_clock::ManualClock;

/// 2026-01-01T00:00:00Z.
const T0_MS: u64 = 1_767_225_600_000;

async fn broker() -> TestBroker {
    TestBroker::builder()
        .manual_clock(T0_MS)
        .start()
        .await
        .unwrap()
}

async fn channel(broker: &TestBroker) -> (Connection, Channel) {
    support::confirming_channel(&broker.amqp_url()).await
}

async fn advance_ms(broker: &TestBroker, ms: u64) {
    broker
        .clock()
        .advance(Duration::from_millis(ms))
        .await
        .unwrap();
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// Dead-lettering to the default exchange with routing key `dlq`, plus `extra`.
fn dlx(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = table(extra);
    t.insert("x-dead-letter-exchange".into(), text(""));
    t.insert("x-dead-letter-routing-key".into(), text("dlq"));
    t
}

async fn declare(ch: &Channel, queue: &str, args: FieldTable) {
    ch.queue_declare(queue.into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
}

/// A queue `work` dead-lettering into `dlq`, with `extra` arguments.
async fn work_and_dlq(ch: &Channel, extra: &[(&str, AMQPValue)]) {
    declare(ch, "dlq", FieldTable::default()).await;
    declare(ch, "work", dlx(extra)).await;
}

/// Publishes through the default exchange (mandatory) and waits for the confirm, so the
/// broker holds the message before the clock moves.
async fn publish(ch: &Channel, queue: &str, body: &[u8], props: BasicProperties) -> Confirmation {
    publish_to(ch, "", queue, body, props).await
}

async fn publish_to(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) -> Confirmation {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        body,
        props,
    )
    .await
    .unwrap()
    .await
    .unwrap()
}

fn expiring(ms: u64) -> BasicProperties {
    BasicProperties::default().with_expiration(ms.to_string().into())
}

/// Takes one message (no ack): its body, or `None` when the queue is empty.
async fn get(ch: &Channel, queue: &str) -> Option<Vec<u8>> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .map(|m| m.delivery.data.clone())
}

/// Every message of `queue`, taken (no ack).
async fn drain(ch: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(body) = get(ch, queue).await {
        out.push(body);
    }
    out
}

/// Ready messages (a passive declare: renews a lease, so not for the S-QEXP tests).
async fn ready(ch: &Channel, queue: &str) -> u32 {
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

/// Whether `queue` exists, without renewing its lease: a mandatory publish comes back
/// (`NO_ROUTE`) once the queue is gone.
async fn exists(ch: &Channel, queue: &str) -> bool {
    match publish(ch, queue, b"probe", BasicProperties::default()).await {
        Confirmation::Ack(None) => true,
        Confirmation::Ack(Some(_)) => false,
        other => panic!("unexpected confirm {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// S-TTL: message TTL

#[tokio::test]
async fn s_ttl_1_queue_ttl_argument_is_checked_and_any_integer_type_works() {
    let b = broker().await;
    let (conn, ch) = channel(&b).await;
    for bad in [
        AMQPValue::LongInt(-1),
        text("1000"),
        AMQPValue::LongLongInt(1 << 33),
    ] {
        let ch2 = conn.create_channel().await.unwrap();
        let err = ch2
            .queue_declare(
                "bad".into(),
                QueueDeclareOptions::default(),
                table(&[("x-message-ttl", bad.clone())]),
            )
            .await
            .unwrap_err();
        assert_eq!(reply_code(&err), Some(406), "{bad:?}");
        assert!(reply_text(&err).contains("x-message-ttl"), "{err}");
    }
    // A 64-bit integer is as good as a 32-bit one; the TTL then applies, to the millisecond.
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongLongInt(1_000))]).await;
    publish(&ch, "work", b"m", BasicProperties::default()).await;
    advance_ms(&b, 999).await;
    assert_eq!(get(&ch, "dlq").await, None);
    advance_ms(&b, 1).await;
    assert_eq!(get(&ch, "dlq").await.as_deref(), Some(&b"m"[..]));
}

#[tokio::test]
async fn s_ttl_2_expiration_property_must_be_a_decimal_integer() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[]).await;
    publish(&ch, "work", b"ok", expiring(500)).await;
    advance_ms(&b, 500).await;
    assert_eq!(get(&ch, "dlq").await.as_deref(), Some(&b"ok"[..]));

    let sent = ch
        .basic_publish(
            "".into(),
            "work".into(),
            BasicPublishOptions::default(),
            b"bad",
            BasicProperties::default().with_expiration("soon".into()),
        )
        .await;
    let err = match sent {
        Ok(confirm) => confirm.await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(reply_code(&err), Some(406), "{err}");
    assert!(!ch.status().connected(), "the channel is closed");
}

#[tokio::test]
async fn s_ttl_3_the_lowest_ttl_wins() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(10_000))]).await;
    publish(&ch, "work", b"own-3s", expiring(3_000)).await;
    publish(&ch, "work", b"own-20s", expiring(20_000)).await;
    advance_ms(&b, 3_000).await;
    assert_eq!(drain(&ch, "dlq").await, vec![b"own-3s".to_vec()]);
    advance_ms(&b, 6_999).await;
    assert_eq!(
        get(&ch, "dlq").await,
        None,
        "the queue's 10 s beat the message's 20 s"
    );
    advance_ms(&b, 1).await;
    assert_eq!(drain(&ch, "dlq").await, vec![b"own-20s".to_vec()]);
}

#[tokio::test]
async fn s_ttl_4_the_deadline_is_fixed_at_enqueue_time() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(10_000))]).await;
    publish(&ch, "work", b"first", BasicProperties::default()).await;
    advance_ms(&b, 4_000).await;
    publish(&ch, "work", b"second", BasicProperties::default()).await;
    advance_ms(&b, 6_000).await;
    assert_eq!(drain(&ch, "dlq").await, vec![b"first".to_vec()]);
    advance_ms(&b, 3_999).await;
    assert_eq!(get(&ch, "dlq").await, None);
    advance_ms(&b, 1).await;
    assert_eq!(drain(&ch, "dlq").await, vec![b"second".to_vec()]);
}

#[tokio::test]
async fn s_ttl_5_an_expired_message_is_never_handed_out_even_before_the_timer_runs() {
    // The broker's clock moves here WITHOUT waking it (no clock control), so only the check at
    // hand-out time stands between an expired message and the client.
    let clock = ManualClock::new(T0_MS);
    let shared = clock.clone();
    let b = TestBroker::builder()
        .configure(move |c| c.clock = Arc::new(shared))
        .start()
        .await
        .unwrap();
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(1_000))]).await;
    publish(&ch, "work", b"a", BasicProperties::default()).await;
    publish(&ch, "work", b"b", BasicProperties::default()).await;
    clock.advance(Duration::from_secs(1));
    assert_eq!(get(&ch, "work").await, None, "basic.get");
    let mut consumer = ch
        .basic_consume(
            "work".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    // Both were dead-lettered instead of delivered: they reach the DLQ, not the consumer.
    assert_eq!(drain(&ch, "dlq").await, vec![b"a".to_vec(), b"b".to_vec()]);
    publish(&ch, "work", b"fresh", BasicProperties::default()).await;
    let d = within(5, consumer.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"fresh", "basic.deliver skipped the expired ones");
}

#[tokio::test]
async fn s_ttl_6_ttl_zero_delivers_only_to_a_waiting_consumer() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(0))]).await;
    // No consumer: expires at once, dead-lettered, and no basic.return even when mandatory.
    let confirm = publish(&ch, "work", b"nobody", BasicProperties::default()).await;
    assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    assert_eq!(drain(&ch, "dlq").await, vec![b"nobody".to_vec()]);
    assert_eq!(ready(&ch, "work").await, 0);

    let (_c2, ch2) = channel(&b).await;
    let mut consumer = ch2
        .basic_consume(
            "work".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    publish(&ch, "work", b"taken", BasicProperties::default()).await;
    let d = within(5, consumer.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"taken");
    assert_eq!(get(&ch, "dlq").await, None);
}

#[tokio::test]
async fn s_ttl_7_requeue_keeps_the_original_deadline() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(10_000))]).await;
    publish(&ch, "work", b"m", BasicProperties::default()).await;
    advance_ms(&b, 6_000).await;
    let m = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("ready at 6 s");
    m.delivery
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ready(&ch, "work").await, 1, "back in the queue");
    advance_ms(&b, 3_999).await;
    assert_eq!(get(&ch, "dlq").await, None);
    advance_ms(&b, 1).await;
    assert_eq!(
        get(&ch, "dlq").await.as_deref(),
        Some(&b"m"[..]),
        "expired at 10 s, not 16 s"
    );
}

#[tokio::test]
async fn s_ttl_8_a_held_message_does_not_expire_until_it_comes_back() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(1_000))]).await;
    publish(&ch, "work", b"held", BasicProperties::default()).await;
    let m = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("ready");
    advance_ms(&b, 60_000).await;
    assert_eq!(get(&ch, "dlq").await, None, "held: no expiry");
    m.delivery
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    // Back after its deadline: expires at once, without the clock moving.
    assert_eq!(get(&ch, "dlq").await.as_deref(), Some(&b"held"[..]));
    assert_eq!(ready(&ch, "work").await, 0);
}

#[tokio::test]
async fn s_ttl_9_expiry_happens_anywhere_in_the_queue() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[]).await;
    publish(&ch, "work", b"head-forever", BasicProperties::default()).await;
    publish(&ch, "work", b"middle-1s", expiring(1_000)).await;
    publish(&ch, "work", b"tail-forever", BasicProperties::default()).await;
    advance_ms(&b, 1_000).await;
    assert_eq!(drain(&ch, "dlq").await, vec![b"middle-1s".to_vec()]);
    assert_eq!(
        ready(&ch, "work").await,
        2,
        "counts exclude the expired one"
    );
    assert_eq!(
        drain(&ch, "work").await,
        vec![b"head-forever".to_vec(), b"tail-forever".to_vec()]
    );
}

#[tokio::test]
async fn s_ttl_10_each_queue_has_its_own_deadline() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    declare(&ch, "dlq", FieldTable::default()).await;
    ch.exchange_declare(
        "fan".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for (queue, ttl) in [("short", 1_000), ("long", 5_000)] {
        declare(
            &ch,
            queue,
            dlx(&[("x-message-ttl", AMQPValue::LongInt(ttl))]),
        )
        .await;
        ch.queue_bind(
            queue.into(),
            "fan".into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    publish_to(&ch, "fan", "", b"m", BasicProperties::default()).await;
    advance_ms(&b, 1_000).await;
    assert_eq!(drain(&ch, "dlq").await.len(), 1, "died in 'short'");
    assert_eq!(ready(&ch, "long").await, 1, "still alive in 'long'");
    advance_ms(&b, 4_000).await;
    assert_eq!(drain(&ch, "dlq").await.len(), 1, "died in 'long' at 5 s");
    assert_eq!(ready(&ch, "long").await, 0);
}

// ---------------------------------------------------------------------------------------
// S-QEXP: queue leases

#[tokio::test]
async fn s_qexp_1_x_expires_must_be_positive_and_deletes_an_unused_queue() {
    let b = broker().await;
    let (conn, ch) = channel(&b).await;
    for bad in [AMQPValue::LongInt(0), AMQPValue::LongInt(-5), text("1000")] {
        let ch2 = conn.create_channel().await.unwrap();
        let err = ch2
            .queue_declare(
                "bad".into(),
                QueueDeclareOptions::default(),
                table(&[("x-expires", bad.clone())]),
            )
            .await
            .unwrap_err();
        assert_eq!(reply_code(&err), Some(406), "{bad:?}");
    }
    declare(
        &ch,
        "lease",
        table(&[("x-expires", AMQPValue::LongInt(5_000))]),
    )
    .await;
    advance_ms(&b, 4_999).await;
    assert!(exists(&ch, "lease").await);
    advance_ms(&b, 1).await;
    assert!(!exists(&ch, "lease").await);
}

#[tokio::test]
async fn s_qexp_2_get_redeclare_and_consumers_renew_the_lease() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    let lease = || table(&[("x-expires", AMQPValue::LongInt(10_000))]);
    declare(&ch, "by-get", lease()).await;
    declare(&ch, "by-redeclare", lease()).await;
    declare(&ch, "by-consumer", lease()).await;
    let (_consumer_conn, consumer_ch) = channel(&b).await;
    // Kept: dropping lapin's consumer cancels it.
    let _consumer = consumer_ch
        .basic_consume(
            "by-consumer".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    advance_ms(&b, 6_000).await;
    get(&ch, "by-get").await;
    declare(&ch, "by-redeclare", lease()).await;
    advance_ms(&b, 9_999).await; // 15.999 s: past the first lease, within the renewed ones
    assert!(exists(&ch, "by-get").await);
    assert!(exists(&ch, "by-redeclare").await);
    advance_ms(&b, 1).await;
    assert!(!exists(&ch, "by-get").await);
    assert!(!exists(&ch, "by-redeclare").await);
    advance_ms(&b, 3_600_000).await;
    assert!(exists(&ch, "by-consumer").await, "in use for an hour");
    consumer_ch
        .basic_cancel("c".into(), lapin::options::BasicCancelOptions::default())
        .await
        .unwrap();
    advance_ms(&b, 9_999).await;
    assert!(
        exists(&ch, "by-consumer").await,
        "the lease restarts when the consumer goes"
    );
    advance_ms(&b, 1).await;
    assert!(!exists(&ch, "by-consumer").await);
}

#[tokio::test]
async fn s_qexp_3_deletion_happens_exactly_when_the_lease_ends() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    declare(
        &ch,
        "q",
        table(&[("x-expires", AMQPValue::LongInt(86_400_000))]),
    )
    .await;
    advance_ms(&b, 86_399_999).await;
    assert!(exists(&ch, "q").await);
    // One millisecond later it is gone before the advance returns: no timer granularity.
    advance_ms(&b, 1).await;
    assert!(!exists(&ch, "q").await);
}

#[tokio::test]
async fn s_qexp_4_a_restart_grants_a_full_lease_from_the_end_of_recovery() {
    let mut b = broker().await;
    {
        let (_conn, ch) = channel(&b).await;
        ch.queue_declare(
            "durable-lease".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            table(&[("x-expires", AMQPValue::LongInt(10_000))]),
        )
        .await
        .unwrap();
    }
    advance_ms(&b, 8_000).await;
    b.restart().await.unwrap();
    let (_conn, ch) = channel(&b).await;
    advance_ms(&b, 9_999).await; // 17.999 s after the declare, 9.999 s after the restart
    assert!(exists(&ch, "durable-lease").await);
    advance_ms(&b, 1).await;
    assert!(!exists(&ch, "durable-lease").await);
}

#[tokio::test]
async fn s_qexp_5_an_expired_queue_discards_its_messages_without_dead_lettering() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-expires", AMQPValue::LongInt(1_000))]).await;
    publish(
        &ch,
        "work",
        b"lost-with-the-queue",
        BasicProperties::default(),
    )
    .await;
    advance_ms(&b, 1_000).await;
    assert!(!exists(&ch, "work").await);
    assert_eq!(get(&ch, "dlq").await, None);
}

// ---------------------------------------------------------------------------------------
// S-SCHED: scheduled messages

async fn delayed_exchange(ch: &Channel, durable: bool) {
    ch.exchange_declare(
        "delayed".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable,
            ..Default::default()
        },
        table(&[("x-delayed-type", text("direct"))]),
    )
    .await
    .unwrap();
}

fn delayed(ms: i32) -> BasicProperties {
    BasicProperties::default()
        .with_headers(table(&[("x-delay", AMQPValue::LongInt(ms))]))
        .with_delivery_mode(2)
}

#[tokio::test]
async fn s_sched_1_a_delayed_message_is_invisible_until_due_even_across_a_restart() {
    let mut b = broker().await;
    {
        let (_conn, ch) = channel(&b).await;
        delayed_exchange(&ch, true).await;
        ch.queue_declare(
            "later".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.queue_bind(
            "later".into(),
            "delayed".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        publish_to(&ch, "delayed", "k", b"in-1h", delayed(3_600_000)).await;
        publish_to(&ch, "delayed", "k", b"in-5s", delayed(5_000)).await;
        advance_ms(&b, 4_999).await;
        assert_eq!(ready(&ch, "later").await, 0, "invisible before its time");
        advance_ms(&b, 1).await;
        assert_eq!(drain(&ch, "later").await, vec![b"in-5s".to_vec()]);
        // Acks are logged, not synced, before they take effect; a confirmed persistent
        // publish after them makes them durable (one log), so "in-5s" stays taken.
        ch.queue_declare(
            "barrier".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        let persistent = BasicProperties::default().with_delivery_mode(2);
        publish(&ch, "barrier", b"sync", persistent).await;
    }
    b.crash().await.unwrap();
    advance_ms(&b, 1_800_000).await; // half an hour passes while the broker is down
    b.restart().await.unwrap();
    let (_conn, ch) = channel(&b).await;
    assert_eq!(
        ready(&ch, "later").await,
        0,
        "still scheduled after the crash"
    );
    advance_ms(&b, 1_794_999).await; // 1 h after the publish, less 1 ms
    assert_eq!(ready(&ch, "later").await, 0);
    advance_ms(&b, 1).await;
    assert_eq!(drain(&ch, "later").await, vec![b"in-1h".to_vec()]);
}

#[tokio::test]
async fn s_sched_2_the_deadline_counts_from_the_scheduled_time() {
    let b = broker().await;
    let (_conn, ch) = channel(&b).await;
    delayed_exchange(&ch, false).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(10_000))]).await;
    ch.queue_bind(
        "work".into(),
        "delayed".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish_to(&ch, "delayed", "k", b"m", delayed(5_000)).await;
    advance_ms(&b, 14_999).await;
    assert_eq!(get(&ch, "dlq").await, None, "not at send time + TTL");
    assert_eq!(ready(&ch, "work").await, 1);
    advance_ms(&b, 1).await;
    assert_eq!(
        get(&ch, "dlq").await.as_deref(),
        Some(&b"m"[..]),
        "at 5 s + 10 s"
    );
}

// ---------------------------------------------------------------------------------------
// Clock control itself

#[tokio::test]
async fn clock_control_is_refused_without_a_manual_clock_and_never_goes_back() {
    let plain = TestBroker::start().await.unwrap();
    assert!(plain.clock().advance(Duration::from_secs(1)).await.is_err());
    assert!(plain.server().unwrap().clock_now().is_err());

    let b = broker().await;
    assert_eq!(b.clock().now_ms(), T0_MS);
    assert_eq!(b.clock().set(T0_MS + 5).await.unwrap(), T0_MS + 5);
    assert!(b.clock().set(T0_MS).await.is_err(), "backwards");
    assert!(
        b.clock().advance(Duration::MAX).await.is_err(),
        "past u64::MAX ms"
    );
    assert_eq!(b.clock().now_ms(), T0_MS + 5);
    // A consumer waiting on the dead-letter queue has its delivery when advance returns.
    let (_conn, ch) = channel(&b).await;
    work_and_dlq(&ch, &[("x-message-ttl", AMQPValue::LongInt(1_000))]).await;
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut dead = ch
        .basic_consume(
            "dlq".into(),
            "d".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    publish(&ch, "work", b"m", BasicProperties::default()).await;
    advance_ms(&b, 1_000).await;
    let d = within(5, dead.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"m");
    d.ack(BasicAckOptions::default()).await.unwrap();
}
