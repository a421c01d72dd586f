//! Crash simulation of `TestBroker` seen from a client: `power_loss()` keeps every confirmed
//! message (S-DUR-3) and what recovery brings back is one consistent view (declare-ok counts,
//! a consumer's deliveries, and a prefix of what was published); `crash()` keeps unacked
//! messages, redelivered (S-DUR-6); time that passes while the broker is down is honoured by
//! recovery (S-DUR-5). Several seeds of the simulated disk, each run in milliseconds.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};
use support::within;
use wharf::testing::{TestBroker, TestBrokerError};

async fn channel(broker: &TestBroker) -> (Connection, Channel) {
    support::confirming_channel(&broker.amqp_url()).await
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

/// Publishes a persistent message; `None` when the broker refused it at once (connection
/// already closed).
async fn send(ch: &Channel, queue: &str, body: &str) -> Option<PublisherConfirm> {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        persistent(),
    )
    .await
    .ok()
}

/// The confirm's outcome: acked, or not (not sent, nacked, or the connection died first).
async fn acked(confirm: Option<PublisherConfirm>) -> bool {
    let Some(confirm) = confirm else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), confirm).await,
        Ok(Ok(Confirmation::Ack(_)))
    )
}

/// What the restarted broker shows for `queue`, checked for consistency: the declare-ok
/// count, then a consumer receives exactly that many messages; returns their bodies.
async fn recovered_view(broker: &TestBroker, queue: &str) -> Vec<String> {
    let (_conn, ch) = channel(broker).await;
    let count = ch
        .queue_declare(queue.into(), durable(), FieldTable::default())
        .await
        .unwrap()
        .message_count();
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "check".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut bodies = Vec::new();
    for _ in 0..count {
        let d = within(5, consumer.next()).await.unwrap().unwrap();
        assert!(
            !d.redelivered,
            "never delivered before the power loss, so not redelivered"
        );
        bodies.push(String::from_utf8(d.data.clone()).unwrap());
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    // Nothing beyond the count: the queue is empty once those are taken.
    let after = ch
        .queue_declare(queue.into(), durable(), FieldTable::default())
        .await
        .unwrap();
    assert_eq!(after.message_count(), 0, "declare-ok counted everything");
    bodies
}

/// Publishes `confirmed` messages and waits for each confirm, then `unconfirmed` more whose
/// confirms nobody waits for (with `stop_syncing`, the disk fails the next sync first, so
/// those are written but never made durable); then the power goes. Checks what comes back.
async fn power_loss_case(seed: u64, confirmed: usize, unconfirmed: usize, stop_syncing: bool) {
    let mut b = TestBroker::builder().seed(seed).start().await.unwrap();
    let (conn, ch) = channel(&b).await;
    ch.queue_declare("jobs".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    let bodies: Vec<String> = (0..confirmed + unconfirmed)
        .map(|i| format!("job-{i:04}"))
        .collect();
    let mut must_survive = 0;
    for body in &bodies[..confirmed] {
        assert!(acked(send(&ch, "jobs", body).await).await, "seed {seed}");
        must_survive += 1;
    }
    if stop_syncing {
        b.simulated_disk().unwrap().fail_sync_after(0);
    }
    let mut pending = Vec::new();
    for body in &bodies[confirmed..] {
        pending.push(send(&ch, "jobs", body).await);
    }
    if stop_syncing {
        // No confirm may come for what was never synced (S-DUR-3).
        for confirm in pending {
            assert!(!acked(confirm).await, "seed {seed}: confirm without fsync");
        }
    }
    b.power_loss().await.unwrap();
    drop((ch, conn));
    b.restart().await.unwrap();

    let view = recovered_view(&b, "jobs").await;
    assert!(
        view.len() >= must_survive,
        "seed {seed}: {} of {must_survive} confirmed messages survived",
        view.len()
    );
    assert_eq!(
        view[..],
        bodies[..view.len()],
        "seed {seed}: every confirmed message, then a prefix of the unconfirmed ones, in order"
    );
}

#[tokio::test]
async fn power_loss_while_the_disk_stops_syncing_keeps_exactly_the_confirmed_prefix() {
    for seed in 0..8 {
        power_loss_case(seed, 20, 10, true).await;
    }
}

#[tokio::test]
async fn power_loss_in_the_middle_of_a_publish_batch_keeps_every_confirmed_message() {
    for seed in 0..8 {
        power_loss_case(seed, 10, 50, false).await;
    }
}

#[tokio::test]
async fn crash_keeps_unacked_messages_and_redelivers_them() {
    let mut b = TestBroker::start().await.unwrap();
    let (conn, ch) = channel(&b).await;
    ch.queue_declare("work".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    for body in ["a", "b", "c"] {
        assert!(acked(send(&ch, "work", body).await).await);
    }
    let mut held = Vec::new();
    for _ in 0..3 {
        let m = ch
            .basic_get("work".into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap()
            .unwrap();
        assert!(!m.delivery.redelivered);
        held.push(m);
    }
    // The delivery marks are logged, not synced, before the deliveries go out (as in
    // RabbitMQ); a later confirmed publish makes them durable, since the log is one sequence.
    // Without it, a delivery in the last group commit before a kill may come back with
    // redelivered=false.
    ch.queue_declare("barrier".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    assert!(acked(send(&ch, "barrier", "sync").await).await);
    b.crash().await.unwrap();
    // The client sees its connection die, not a 320 close.
    let err = within(5, ch.basic_get("work".into(), BasicGetOptions::default()))
        .await
        .unwrap_err();
    assert_ne!(support::reply_code(&err), Some(320), "{err}");
    drop((held, ch, conn));

    b.restart().await.unwrap();
    let (_conn, ch) = channel(&b).await;
    let mut again = Vec::new();
    while let Some(m) = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        assert!(
            m.delivery.redelivered,
            "S-DUR-6: redelivered after the crash"
        );
        again.push(String::from_utf8(m.delivery.data.clone()).unwrap());
    }
    assert_eq!(again, ["a", "b", "c"], "all back, in order");
}

#[tokio::test]
async fn stop_closes_connections_with_320_and_restart_keeps_the_url() {
    let mut b = TestBroker::start().await.unwrap();
    let url = b.amqp_url();
    let (_conn, ch) = channel(&b).await;
    ch.queue_declare("q".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    assert!(acked(send(&ch, "q", "kept").await).await);
    b.stop().await.unwrap();
    assert!(!b.is_running());
    assert!(matches!(b.stop().await, Err(TestBrokerError::NotRunning)));
    b.restart().await.unwrap();
    assert_eq!(b.amqp_url(), url, "same address after a restart");
    let (_conn, ch) = channel(&b).await;
    let m = ch
        .basic_get("q".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"kept");
}

#[tokio::test]
async fn crash_on_real_files_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = TestBroker::builder()
        .data_dir(dir.path())
        .start()
        .await
        .unwrap();
    let (conn, ch) = channel(&b).await;
    ch.queue_declare("q".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    assert!(acked(send(&ch, "q", "on-disk").await).await);
    b.crash().await.unwrap();
    drop((ch, conn));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().count() > 0,
        "the log is in the real directory"
    );
    b.restart().await.unwrap();
    let (_conn, ch) = channel(&b).await;
    let m = ch
        .basic_get("q".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"on-disk");
}

#[tokio::test]
async fn power_loss_on_real_files_keeps_every_confirmed_message_and_only_synced_ones() {
    for _ in 0..3 {
        let mut b = TestBroker::builder().temp_data_dir().start().await.unwrap();
        let (conn, ch) = channel(&b).await;
        ch.queue_declare("jobs".into(), durable(), FieldTable::default())
            .await
            .unwrap();
        let bodies: Vec<String> = (0..60).map(|i| format!("job-{i:04}")).collect();
        for body in &bodies[..10] {
            assert!(acked(send(&ch, "jobs", body).await).await);
        }
        let mut pending = Vec::new();
        for body in &bodies[10..] {
            pending.push(send(&ch, "jobs", body).await);
        }
        b.power_loss().await.unwrap();
        drop((pending, ch, conn));
        b.restart().await.unwrap();
        let view = recovered_view(&b, "jobs").await;
        assert!(view.len() >= 10, "{} of 10 confirmed survived", view.len());
        assert_eq!(view[..], bodies[..view.len()], "a prefix, in order");
        // The check's acks, then a confirmed publish: the acks are synced with it (one log),
        // so a second cut brings nothing back.
        let (_conn, ch) = channel(&b).await;
        ch.queue_declare("barrier".into(), durable(), FieldTable::default())
            .await
            .unwrap();
        assert!(acked(send(&ch, "barrier", "sync").await).await);
        b.power_loss().await.unwrap();
        b.restart().await.unwrap();
        let (_conn, ch) = channel(&b).await;
        let again = ch
            .queue_declare("jobs".into(), durable(), FieldTable::default())
            .await
            .unwrap()
            .message_count();
        assert_eq!(again, 0, "the acks of the check were synced before the cut");
    }
}

#[tokio::test]
async fn s_dur_5_time_passing_while_down_expires_messages_during_recovery() {
    let mut b = TestBroker::builder()
        .manual_clock(1_767_225_600_000)
        .start()
        .await
        .unwrap();
    let (conn, ch) = channel(&b).await;
    ch.queue_declare("dlq".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(60_000));
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from("dlq")),
    );
    ch.queue_declare("work".into(), durable(), args.clone())
        .await
        .unwrap();
    assert!(acked(send(&ch, "work", "stale").await).await);
    b.crash().await.unwrap();
    drop((ch, conn));
    b.clock().advance(Duration::from_secs(3600)).await.unwrap();
    b.restart().await.unwrap();
    let (_conn, ch) = channel(&b).await;
    let work = ch
        .queue_declare("work".into(), durable(), args)
        .await
        .unwrap();
    assert_eq!(work.message_count(), 0, "expired during recovery");
    let dead = ch
        .basic_get("dlq".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("dead-lettered before any consumer could see it");
    assert_eq!(dead.delivery.data, b"stale");
}

#[tokio::test]
async fn temp_data_dir_holds_the_log_across_restarts_and_goes_with_the_broker() {
    let mut b = TestBroker::builder().temp_data_dir().start().await.unwrap();
    let dir = b.data_dir().to_owned();
    assert!(b.simulated_disk().is_none());
    let (conn, ch) = channel(&b).await;
    ch.queue_declare("q".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    assert!(acked(send(&ch, "q", "m").await).await);
    drop((ch, conn));
    b.crash().await.unwrap();
    assert!(
        std::fs::read_dir(&dir).unwrap().count() > 0,
        "the log is in {dir:?}"
    );
    b.restart().await.unwrap();
    let (_conn, ch) = channel(&b).await;
    let count = ch
        .queue_declare("q".into(), durable(), FieldTable::default())
        .await
        .unwrap()
        .message_count();
    assert_eq!(count, 1);
    drop(b);
    assert!(!dir.exists(), "removed with the broker");
}
