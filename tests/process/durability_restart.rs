//! Restarts of the real `wharf` binary, seen through lapin (S-DUR-1/2/4/5/6, S-TTL-4,
//! S-QEXP-4). Each test spawns the binary on a temporary data directory with `--port 0`,
//! stops it with SIGTERM or SIGKILL by the pid it spawned, and starts it again on the same
//! directory. Real time is the point here (a real binary on the system clock), so the waits
//! are real: the scenario's downtime is a sleep, and every check of a deadline polls the
//! broker and asserts a window, so no sleep stands in for the rule being tested.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::binary;

use std::time::{Duration, Instant};

use binary::{Broker, is_not_found};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};

/// Real monotonic time: these tests measure a real binary on the system clock.
#[expect(
    clippy::disallowed_methods,
    reason = "the restart tests measure real deadlines of a real process"
)]
fn now() -> Instant {
    Instant::now()
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Publishes and waits for the broker's confirm (the channel is in confirm mode).
async fn publish_confirmed(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        confirm.is_ack(),
        "publish to {exchange}/{key} not confirmed"
    );
}

/// Ready messages of `queue` (a passive declare).
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

/// The bodies of every ready message of `queue`, taken with `basic.get` and acked.
async fn drain(ch: &Channel, queue: &str) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions::default())
        .await
        .unwrap()
    {
        m.delivery.ack(BasicAckOptions::default()).await.unwrap();
        out.push((m.delivery.data.clone(), m.delivery.redelivered));
    }
    out
}

fn dlx_args(dlq: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(dlq)),
    );
    args
}

#[derive(Clone, Copy, Debug)]
enum Stop {
    Graceful,
    Kill,
}

fn stop(broker: Broker, how: Stop) {
    match how {
        Stop::Graceful => broker.terminate(),
        Stop::Kill => broker.kill(),
    }
}

/// Durable exchange `dx` bound to durable queue `dq`, transient exchange `tx` and queue
/// `tq`; a persistent and a transient message in `dq`, a persistent one in `tq`.
async fn declare_and_publish(broker: &Broker) {
    let (_conn, ch) = broker.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let durable_x = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        "dx".into(),
        lapin::ExchangeKind::Direct,
        durable_x,
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.exchange_declare(
        "tx".into(),
        lapin::ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare("dq".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    ch.queue_declare(
        "tq".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "dq".into(),
        "dx".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish_confirmed(&ch, "dx", "k", b"persistent", persistent()).await;
    publish_confirmed(&ch, "dx", "k", b"transient", BasicProperties::default()).await;
    publish_confirmed(&ch, "", "tq", b"in-transient-queue", persistent()).await;
    assert_eq!(ready(&ch, "dq").await, 2);
}

/// S-DUR-1/2: durable definitions and persistent messages in durable queues come back;
/// transient queues, exchanges and messages do not. The start line counts what came back.
async fn definitions_and_messages_survive(how: Stop) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    assert_eq!(broker.start_field("queues"), 0);
    declare_and_publish(&broker).await;
    stop(broker, how);

    let broker = Broker::start(dir.path());
    assert_eq!(broker.start_field("queues"), 1, "{}", broker.start_line);
    assert_eq!(broker.start_field("messages"), 1, "{}", broker.start_line);
    let (conn, ch) = broker.channel().await;
    assert_eq!(
        drain(&ch, "dq").await,
        vec![(b"persistent".to_vec(), false)],
        "only the persistent message survives, never delivered so not redelivered"
    );
    // The durable binding survived: dx routes to dq again.
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    publish_confirmed(&ch, "dx", "k", b"again", persistent()).await;
    assert_eq!(ready(&ch, "dq").await, 1);
    let passive_x = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    ch.exchange_declare(
        "dx".into(),
        lapin::ExchangeKind::Direct,
        passive_x,
        FieldTable::default(),
    )
    .await
    .unwrap();
    let gone = conn.create_channel().await.unwrap();
    let err = gone
        .queue_declare(
            "tq".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert!(is_not_found(&err), "{err:?}");
    let gone = conn.create_channel().await.unwrap();
    let err = gone
        .exchange_declare(
            "tx".into(),
            lapin::ExchangeKind::Direct,
            passive_x,
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert!(is_not_found(&err), "{err:?}");
    broker.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_dur_1_2_durable_state_survives_sigterm_and_transient_does_not() {
    definitions_and_messages_survive(Stop::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_dur_1_2_durable_state_survives_sigkill_and_transient_does_not() {
    definitions_and_messages_survive(Stop::Kill).await;
}

/// S-TTL-4: a message's deadline is fixed when it is enqueued and survives a crash. Published
/// with a 3000 ms TTL, broker killed and restarted after about 1000 ms: it is still there
/// until about 3000 ms after its publish, and gone soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_ttl_4_message_deadline_survives_a_kill() {
    const TTL_MS: u64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let published = {
        let (_conn, ch) = broker.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        ch.queue_declare("ttl".into(), durable(), FieldTable::default())
            .await
            .unwrap();
        let published = now();
        let props = persistent().with_expiration(TTL_MS.to_string().into());
        publish_confirmed(&ch, "", "ttl", b"m", props).await;
        published
    };
    // The downtime of the scenario: the broker dies about 1 s after the publish.
    std::thread::sleep(Duration::from_secs(1).saturating_sub(published.elapsed()));
    broker.kill();
    let broker = Broker::start(dir.path());
    assert_eq!(broker.start_field("expired_in_downtime"), 0);
    let (_conn, ch) = broker.channel().await;
    // A count of 0 answered at `answered` means it expired before then; a count of 1 asked
    // at `asked` means it had not expired by then.
    let gone_at = loop {
        let asked = published.elapsed();
        let count = ready(&ch, "ttl").await;
        let answered = published.elapsed();
        if count == 0 {
            break answered;
        }
        assert_eq!(count, 1);
        // The broker answered after `asked`: it still held the message then.
        assert!(
            asked < Duration::from_millis(3_500),
            "still there {asked:?} after its publish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        gone_at >= Duration::from_millis(2_900),
        "expired {gone_at:?} after its publish, before its 3000 ms TTL"
    );
    broker.terminate();
}

/// S-QEXP-4: the lease of a durable queue restarts at recovery. A queue with a 2000 ms
/// `x-expires`, unused for 1800 ms before a kill, still exists right after the restart and
/// is deleted one full period after recovery (S-QEXP-3: within about a second of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_qexp_4_durable_queue_lease_restarts_after_recovery() {
    const EXPIRES_MS: i32 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let declared = {
        let (_conn, ch) = broker.channel().await;
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongInt(EXPIRES_MS));
        let declared = now();
        ch.queue_declare("lease".into(), durable(), args)
            .await
            .unwrap();
        declared
    };
    std::thread::sleep(Duration::from_millis(1_800).saturating_sub(declared.elapsed()));
    broker.kill();
    let broker = Broker::start(dir.path());
    let recovered = now();
    // queue.bind does not renew a lease (S-QEXP-2 lists consumers, declares and gets), so it
    // tells whether the queue exists without changing when it expires.
    let (conn, mut ch) = broker.channel().await;
    let mut first = true;
    let gone_after = loop {
        let bound = ch
            .queue_bind(
                "lease".into(),
                "amq.direct".into(),
                "probe".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await;
        let answered = recovered.elapsed();
        match bound {
            Ok(()) => {
                assert!(
                    answered < Duration::from_millis(3_200),
                    "queue still there {answered:?} after recovery"
                );
            }
            Err(e) => {
                assert!(is_not_found(&e), "{e:?}");
                assert!(!first, "the queue did not survive the restart");
                break answered;
            }
        }
        first = false;
        if !ch.status().connected() {
            ch = conn.create_channel().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert!(
        gone_after >= Duration::from_millis(1_900),
        "deleted {gone_after:?} after recovery, before a full period ({}s since its declare)",
        declared.elapsed().as_secs_f64()
    );
    broker.terminate();
}

/// S-DUR-6 and S-DUR-4: after a kill, delivered-but-unacked messages come back, in order,
/// with `redelivered=true`; a message whose ack was followed by a reply (every frame is
/// released only once what was logged before it is durable) does not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_dur_6_unacked_come_back_redelivered_and_acked_stay_acked() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    {
        let (_conn, ch) = broker.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        ch.queue_declare("work".into(), durable(), FieldTable::default())
            .await
            .unwrap();
        for body in [b"m1", b"m2", b"m3"] {
            publish_confirmed(&ch, "", "work", body, persistent()).await;
        }
        let mut consumer = ch
            .basic_consume(
                "work".into(),
                "c".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            let d = tokio::time::timeout(Duration::from_secs(5), consumer.next())
                .await
                .expect("delivery in time")
                .unwrap()
                .unwrap();
            assert!(!d.redelivered);
            got.push(d);
        }
        got[0].ack(BasicAckOptions::default()).await.unwrap();
        // A reply after the ack on the same channel: released only once the ack is durable.
        assert_eq!(ready(&ch, "work").await, 0);
    }
    broker.kill();
    let broker = Broker::start(dir.path());
    assert_eq!(broker.start_field("messages"), 2, "{}", broker.start_line);
    let (_conn, ch) = broker.channel().await;
    assert_eq!(
        drain(&ch, "work").await,
        vec![(b"m2".to_vec(), true), (b"m3".to_vec(), true)]
    );
    broker.terminate();
}

/// S-DUR-5: messages whose deadline passed while the broker was down are dead-lettered during
/// recovery, before any consumer can see them; the start line counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_dur_5_expired_in_downtime_are_dead_lettered_before_any_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let published = {
        let (_conn, ch) = broker.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        ch.queue_declare("dlq".into(), durable(), FieldTable::default())
            .await
            .unwrap();
        ch.queue_declare("src".into(), durable(), dlx_args("dlq"))
            .await
            .unwrap();
        let published = now();
        for body in [b"short1", b"short2", b"short3"] {
            let props = persistent().with_expiration("400".into());
            publish_confirmed(&ch, "", "src", body, props).await;
        }
        publish_confirmed(&ch, "", "src", b"long", persistent()).await;
        published
    };
    broker.kill();
    // The downtime: the short messages' deadlines pass while nothing runs.
    std::thread::sleep(Duration::from_millis(600).saturating_sub(published.elapsed()));
    let broker = Broker::start(dir.path());
    assert_eq!(
        broker.start_field("expired_in_downtime"),
        3,
        "{}",
        broker.start_line
    );
    assert_eq!(
        broker.start_field("dead_lettered"),
        3,
        "{}",
        broker.start_line
    );
    let (_conn, ch) = broker.channel().await;
    // The first consumer sees only the live message.
    let mut consumer = ch
        .basic_consume(
            "src".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("delivery in time")
        .unwrap()
        .unwrap();
    assert_eq!(d.data, b"long");
    d.ack(BasicAckOptions::default()).await.unwrap();
    let dead = drain(&ch, "dlq").await;
    let bodies: Vec<&[u8]> = dead.iter().map(|(b, _)| b.as_slice()).collect();
    assert_eq!(bodies, vec![&b"short1"[..], b"short2", b"short3"]);
    broker.terminate();
}
