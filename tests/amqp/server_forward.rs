//! Clients on a follower use quorum queues led by another node (S-CLU-70..74): the channel
//! moves to the leader and the client sees what a client of the leader sees. Three servers in
//! one process (`tests/support/group_servers.rs`), relaying through their in-process doors.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap is a failed test"
)]

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, BasicRejectOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, QueueBindOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};

use crate::server_cluster::{durable, quorum};
use crate::support::group_servers::Cluster;
use crate::support::{ready_count, reply_code, reply_text};

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    crate::support::within(20, fut).await
}

/// Publishes `body` persistently to `exchange` with `key`; the confirm: true for an ack.
async fn publish(ch: &Channel, exchange: &str, key: &str, body: &str) -> bool {
    let confirm = within(ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_delivery_mode(2),
    ))
    .await
    .unwrap();
    within(confirm).await.unwrap().is_ack()
}

async fn get(ch: &Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    within(ch.basic_get(queue.into(), BasicGetOptions::default()))
        .await
        .unwrap()
}

/// S-CLU-70, S-CLU-71, S-CLU-1: a client of follower 2 declares a quorum queue (active, then
/// passively on a fresh channel), publishes with confirms through the default exchange and
/// through a named exchange bound on the forwarded channel, on a channel whose confirm
/// sequence had already run on this node (a classic queue's publish first); every message is
/// confirmed and in every member's committed state; `basic.get` with ack, nack (requeue) and
/// reject work from the follower; the leader's own client sees the same queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_70_a_followers_client_publishes_with_confirms_and_gets() {
    let cluster = Cluster::start_forwarding(3).await;
    let (_conn, ch) = cluster.channel(2).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    // The channel's confirm sequence runs on this node first: seq 1 is a classic queue's.
    within(ch.queue_declare("mine".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    assert!(publish(&ch, "", "mine", "local").await);
    // The quorum queue's declaration moves the channel to the leader (node 1).
    let ok = within(ch.queue_declare("qq".into(), durable(), quorum(None)))
        .await
        .unwrap();
    assert_eq!(ok.message_count(), 0);
    for i in 0..10 {
        assert!(
            publish(&ch, "", "qq", &format!("m{i}")).await,
            "m{i} confirmed"
        );
    }
    within(ch.exchange_declare(
        "ex".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(ch.queue_bind(
        "qq".into(),
        "ex".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert!(publish(&ch, "ex", "k", "via-ex").await);
    let mut expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    expected.push("via-ex".into());
    // S-CLU-1: confirmed means committed by a majority; every member gets it.
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    for id in 1..=3 {
        let got: Vec<String> = cluster
            .committed(id, "qq")
            .expect("the queue on every member")
            .into_iter()
            .map(|(b, _)| b)
            .collect();
        assert_eq!(got, expected, "member {id}");
    }
    // A passive declare from a fresh channel of the follower: the leader's count.
    let (_conn2, ch2) = cluster.channel(2).await;
    assert_eq!(ready_count(&ch2, "qq").await, 11);
    // basic.get from the follower: ack, nack with requeue, reject without.
    let first = get(&ch2, "qq").await.expect("m0");
    assert_eq!(first.delivery.data, b"m0");
    assert!(!first.delivery.redelivered);
    within(first.delivery.ack(BasicAckOptions::default()))
        .await
        .unwrap();
    let second = get(&ch2, "qq").await.expect("m1");
    assert_eq!(second.delivery.data, b"m1");
    within(second.delivery.nack(BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    }))
    .await
    .unwrap();
    let again = get(&ch2, "qq").await.expect("m1 again");
    assert_eq!(again.delivery.data, b"m1");
    assert!(
        again.delivery.redelivered,
        "a requeued message is redelivered"
    );
    within(again.delivery.reject(BasicRejectOptions { requeue: false }))
        .await
        .unwrap();
    // The leader's own client shares the queue: 11 published, 2 settled.
    let (_lconn, lch) = cluster.channel(1).await;
    assert_eq!(ready_count(&lch, "qq").await, 9);
    let from_leader = get(&lch, "qq").await.expect("m2 on the leader");
    assert_eq!(from_leader.delivery.data, b"m2");
    within(from_leader.delivery.ack(BasicAckOptions::default()))
        .await
        .unwrap();
    assert_eq!(ready_count(&ch2, "qq").await, 8);
    // The classic queue stayed the follower's own.
    assert_eq!(cluster.committed(1, "mine"), None);
    cluster.shutdown().await;
}

/// S-CLU-72: a forwarded channel that names this node's classic queue is closed with 406
/// naming both, and nothing is routed anywhere; the connection and its other channels go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_72_a_forwarded_channel_refuses_a_classic_queue() {
    let cluster = Cluster::start_forwarding(3).await;
    let (conn, ch) = cluster.channel(2).await;
    within(ch.queue_declare("mine".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    within(ch.queue_declare("qq".into(), durable(), quorum(None)))
        .await
        .unwrap();
    let err = within(ch.basic_get("mine".into(), BasicGetOptions::default()))
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
    let text = reply_text(&err);
    assert!(text.contains("'mine'") && text.contains("node 1"), "{text}");
    // S-CLU-71: a channel holding a classic queue's consumer does not move (once the
    // follower's committed state knows the quorum queue, S-CLU-70).
    cluster.wait_applied(2, 1).await;
    let other = conn.create_channel().await.unwrap();
    let _consumer = within(other.basic_consume(
        "mine".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let err = within(other.basic_get("qq".into(), BasicGetOptions::default()))
        .await
        .unwrap_err();
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
    assert!(reply_text(&err).contains("'qq'"), "{}", reply_text(&err));
    // The connection survives: a fresh channel uses the quorum queue.
    let third = conn.create_channel().await.unwrap();
    within(third.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    assert!(publish(&third, "", "qq", "after").await);
    assert_eq!(ready_count(&third, "qq").await, 1);
    cluster.shutdown().await;
}

/// S-CLU-73: a consumer on follower 3 with a prefetch of 2 gets the leader's deliveries
/// relayed, at most 2 unacked at a time, shares the queue with a consumer on the leader, and
/// its acks settle on the leader; after `basic.cancel` it gets nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_73_a_followers_consumer_gets_relayed_deliveries() {
    let cluster = Cluster::start_forwarding(3).await;
    let (_lconn, lch) = cluster.channel(1).await;
    within(lch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    within(lch.queue_declare("qq".into(), durable(), quorum(None)))
        .await
        .unwrap();
    for i in 0..6 {
        assert!(publish(&lch, "", "qq", &format!("m{i}")).await);
    }
    cluster.wait_applied(3, 1).await;
    let (_fconn, fch) = cluster.channel(3).await;
    within(fch.basic_qos(2, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(fch.basic_consume(
        "qq".into(),
        "relayed".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let d0 = within(consumer.next()).await.unwrap().unwrap();
    let d1 = within(consumer.next()).await.unwrap().unwrap();
    assert_eq!(
        (d0.data.as_slice(), d1.data.as_slice()),
        (&b"m0"[..], &b"m1"[..])
    );
    // The prefetch holds: the leader's own client gets the third.
    let third = get(&lch, "qq").await.expect("m2 for the leader's client");
    assert_eq!(third.delivery.data, b"m2");
    within(third.delivery.ack(BasicAckOptions::default()))
        .await
        .unwrap();
    within(d0.ack(BasicAckOptions::default())).await.unwrap();
    let d3 = within(consumer.next()).await.unwrap().unwrap();
    assert_eq!(d3.data, b"m3");
    within(d1.ack(BasicAckOptions::default())).await.unwrap();
    within(d3.ack(BasicAckOptions::default())).await.unwrap();
    let d4 = within(consumer.next()).await.unwrap().unwrap();
    assert_eq!(d4.data, b"m4");
    within(d4.ack(BasicAckOptions::default())).await.unwrap();
    let d5 = within(consumer.next()).await.unwrap().unwrap();
    assert_eq!(d5.data, b"m5");
    within(d5.ack(BasicAckOptions::default())).await.unwrap();
    within(fch.basic_cancel("relayed".into(), BasicCancelOptions::default()))
        .await
        .unwrap();
    assert!(publish(&lch, "", "qq", "after-cancel").await);
    assert_eq!(ready_count(&lch, "qq").await, 1);
    cluster.shutdown().await;
}

/// On follower 2 of a new forwarding cluster: a confirm-mode channel that declared the quorum
/// queue `qq` and published `n` confirmed messages, and a second channel of the same
/// connection consuming `qq` with prefetch `prefetch`.
async fn follower_consumer(
    n: usize,
    prefetch: u16,
) -> (
    Cluster,
    lapin::Connection,
    Channel,
    Channel,
    lapin::Consumer,
) {
    let cluster = Cluster::start_forwarding(3).await;
    let (conn, ch) = cluster.channel(2).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    within(ch.queue_declare("qq".into(), durable(), quorum(None)))
        .await
        .unwrap();
    for i in 0..n {
        assert!(publish(&ch, "", "qq", &format!("m{i}")).await);
    }
    cluster.wait_applied(2, 1).await;
    let consuming = conn.create_channel().await.unwrap();
    within(consuming.basic_qos(prefetch, BasicQosOptions::default()))
        .await
        .unwrap();
    let consumer = within(consuming.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    (cluster, conn, ch, consuming, consumer)
}

/// Leader 1 stops while a publish on `ch` waits for a confirm it cannot give (its followers
/// cut off, every earlier mark already on both): the publish is nacked (S-CLU-74).
async fn stop_leader_holding_a_publish(cluster: &mut Cluster, ch: &Channel) {
    cluster.wait_applied(2, 1).await;
    cluster.wait_applied(3, 1).await;
    let held = cluster.publish_without_majority(ch, "qq", b"held").await;
    cluster.stop(1).await;
    cluster.router.heal(2);
    cluster.router.heal(3);
    // Never committed, and now never will be: nacked, not left hanging.
    assert!(
        within(held).await.unwrap().is_nack(),
        "the unconfirmed publish is nacked"
    );
}

/// S-CLU-74, S-CLU-6: the leader stops while a consumer on follower 2 holds three unacked
/// deliveries and a publish waits for a confirm the leader cannot give (its followers cut
/// off): the client (lapin announces `consumer_cancel_notify`) gets `basic.cancel` and a
/// `basic.nack` for the publish, its channels and connection stay open; once a new leader took over, a consumer on the same
/// channel gets every message, the three delivered ones with `redelivered` set, and the
/// publishing channel's next publish is confirmed with its own sequence number going on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_74_leader_loss_cancels_forwarded_consumers_and_unacked_come_back() {
    let (mut cluster, conn, ch, consuming, mut consumer) = follower_consumer(5, 3).await;
    for i in 0..3 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
    }
    // The deliveries' marks are committed once the leader's gate passed them; the followers
    // have them before the leader stops.
    stop_leader_holding_a_publish(&mut cluster, &ch).await;
    // The consumer is cancelled (its stream ends); the channels stay open.
    let ended = within(consumer.next()).await;
    assert!(ended.is_none(), "the consumer was cancelled: {ended:?}");
    assert!(
        consuming.status().connected(),
        "the consumer's channel stays open"
    );
    assert!(
        ch.status().connected(),
        "the publisher's channel stays open"
    );
    assert!(conn.status().connected(), "the connection survives");
    let leader = cluster.new_leader(1, 2).await;
    cluster.wait_applied(2, leader).await;
    // The same channel consumes from the new leader.
    let mut again = within(consuming.basic_consume(
        "qq".into(),
        "again".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for i in 0..5 {
        let d = within(again.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
        assert_eq!(
            d.redelivered,
            i < 3,
            "m{i}: redelivered only if it was delivered"
        );
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    // The publisher's channel goes on: its seventh publish is confirmed as the seventh.
    assert!(publish(&ch, "", "qq", "after").await);
    let d = within(again.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"after");
    cluster.shutdown().await;
}

/// S-CLU-74: a client that did not announce `consumer_cancel_notify` (a raw client, no
/// capabilities): when the leader stops, its moved channel is closed with 541 saying why; its
/// connection goes on (another channel opens).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_74_without_cancel_notify_a_moved_channel_closes_with_541() {
    use amq_protocol::protocol::{AMQPClass, channel, queue};
    let mut cluster = Cluster::start_forwarding(3).await;
    let mut raw = crate::support::raw::Raw::open(cluster.addr(2), 0).await;
    raw.open_channel(1).await;
    let mut args = amq_protocol::types::FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        amq_protocol::types::AMQPValue::LongString("quorum".into()),
    );
    let declare = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: "qq".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: args,
    }));
    raw.send_method(1, declare).await;
    let ok = within(raw.method()).await;
    assert!(
        matches!(ok, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_))),
        "{ok:?}"
    );
    cluster.stop(1).await;
    let (code, text) = within(raw.expect_channel_close()).await;
    assert_eq!(code, 541, "{text}");
    assert!(text.contains("leader"), "{text}");
    raw.send_method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
    )
    .await;
    within(raw.open_channel(2)).await;
    cluster.shutdown().await;
}

/// S-CLU-75, S-CLU-74, S-CLU-31: the leader stops while a consumer on follower 2 has acked a
/// delivery that no reply of the leader followed: the client (lapin announces
/// `consumer_cancel_notify`) gets its publishing channel back (a `basic.nack`, then its next
/// methods answered), but the acking channel is closed with 541: taken back, its next
/// `basic.qos` would be answered here and say the ack took effect, which is not known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_75_a_moved_channel_with_unanswered_acks_is_closed_when_its_leader_goes() {
    let (mut cluster, conn, ch, consuming, mut consumer) = follower_consumer(3, 3).await;
    let d = within(consumer.next()).await.unwrap().unwrap();
    within(d.ack(BasicAckOptions::default())).await.unwrap();
    // A reply on the same connection: the member's reader passed the ack on before it.
    let _other = within(conn.create_channel()).await.unwrap();
    // The end of the relay was dealt with once the nack came (S-CLU-74).
    stop_leader_holding_a_publish(&mut cluster, &ch).await;
    let err = within(consuming.basic_qos(3, BasicQosOptions::default()))
        .await
        .expect_err("no reply may say the ack took effect");
    assert!(!consuming.status().connected(), "{err}");
    // The publishing channel, which settled nothing, was taken back and answers.
    within(ch.basic_qos(5, BasicQosOptions::default()))
        .await
        .unwrap();
    assert!(conn.status().connected(), "the connection survives");
    cluster.shutdown().await;
}
