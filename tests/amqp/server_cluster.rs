//! Quorum queues replicated between servers (S-CLU): publishers confirmed only once a
//! majority holds their messages, a new leader that has every confirmed message and expires
//! them at the same instants, classic queues that stay on their node, and followers that refuse
//! what they cannot serve. The set-up is `tests/support/cluster.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap is a failed test"
)]

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use crate::support::group_servers::Cluster;
use crate::support::{T0_MS, ready_count, reply_code, reply_text};

/// Waits for a reply, failing the test after 20 s instead of hanging.
async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    crate::support::within(20, fut).await
}

pub(crate) fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// Arguments of a quorum queue, with a message TTL if given.
pub(crate) fn quorum(ttl_ms: Option<i64>) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    if let Some(ttl) = ttl_ms {
        args.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ttl));
    }
    args
}

/// Publishes `body` persistently to `queue` and waits for its confirm (an ack).
async fn publish_confirmed(ch: &Channel, queue: &str, body: &str) {
    let confirm = within(ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_delivery_mode(2),
    ))
    .await
    .unwrap();
    let confirmation = within(confirm).await.unwrap();
    assert!(confirmation.is_ack(), "{body} confirmed");
}

/// A confirm-mode channel on node `id` with the quorum queue `qq` declared (a message TTL if
/// given); its connection must be kept open.
async fn quorum_channel(
    cluster: &Cluster,
    id: u64,
    ttl_ms: Option<i64>,
) -> (lapin::Connection, Channel) {
    let (conn, ch) = cluster.channel(id).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    within(ch.queue_declare("qq".into(), durable(), quorum(ttl_ms)))
        .await
        .unwrap();
    (conn, ch)
}

fn bodies(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}")).collect()
}

/// S-CLU-1, S-CLU-2, S-CLU-10: every message the leader confirmed is in every member's committed
/// state, in publish order; none is confirmed while no majority holds it; a classic queue
/// declared beside it stays in the leader's own log and in no member's committed state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_1_every_confirmed_message_is_in_every_members_committed_state() {
    let cluster = Cluster::start(3).await;
    let (_conn, ch) = quorum_channel(&cluster, 1, None).await;
    within(ch.queue_declare("cq".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    let sent = bodies(20);
    for body in &sent {
        publish_confirmed(&ch, "qq", body).await;
    }
    publish_confirmed(&ch, "cq", "classic").await;
    // S-CLU-1: with both followers cut off, no majority holds the next message: no confirm
    // comes; once they are back, it does.
    let pending = cluster
        .publish_without_majority(&ch, "qq", b"held back")
        .await;
    cluster.router.heal(2);
    cluster.router.heal(3);
    assert!(within(pending).await.unwrap().is_ack());
    let mut sent = sent;
    sent.push("held back".to_owned());
    // A confirm means a majority holds the entry; the third member may still be on its way.
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    for id in 1..=3 {
        let committed = cluster
            .committed(id, "qq")
            .expect("the queue on every member");
        let got: Vec<String> = committed.into_iter().map(|(b, _)| b).collect();
        assert_eq!(got, sent, "member {id}");
        assert_eq!(
            cluster.committed(id, "cq"),
            None,
            "a classic queue is not replicated"
        );
    }
    assert_eq!(ready_count(&ch, "qq").await, 21);
    assert_eq!(ready_count(&ch, "cq").await, 1);
    cluster.shutdown().await;
}

/// S-CLU-2, S-CLU-6: the leader stops with ten confirmed messages, three of them delivered and
/// unacked; the new leader has all ten and a consumer there receives them in publish order,
/// the three delivered ones with `redelivered` set. S-CLU-11: the remaining follower refuses a
/// consumer of the queue with 405 naming the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_6_a_new_leader_has_every_confirmed_message_and_redelivers_the_unacked() {
    let mut cluster = Cluster::start(3).await;
    let sent = bodies(10);
    {
        let (_conn, ch) = quorum_channel(&cluster, 1, None).await;
        for body in &sent {
            publish_confirmed(&ch, "qq", body).await;
        }
        for body in &sent[..3] {
            let got = within(ch.basic_get("qq".into(), BasicGetOptions::default()))
                .await
                .unwrap()
                .expect("a message");
            assert_eq!(got.delivery.data, body.as_bytes());
            assert!(!got.delivery.redelivered);
        }
        // The get-oks came through the gate: their delivery marks are committed.
        cluster.stop(1).await;
    }
    let leader = cluster.new_leader(1, 2).await;
    let follower = if leader == 2 { 3 } else { 2 };

    let (_conn, ch) = cluster.channel(leader).await;
    let mut consumer = within(ch.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for (i, body) in sent.iter().enumerate() {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&d.data), *body);
        assert_eq!(
            d.redelivered,
            i < 3,
            "{body}: redelivered only if it was delivered"
        );
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }

    cluster.wait_applied(follower, leader).await;
    let (fconn, fch) = cluster.channel(follower).await;
    let err = within(fch.basic_consume(
        "qq".into(),
        "f".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(reply_code(&err), Some(405), "{err:?}");
    assert_eq!(
        reply_text(&err),
        format!(
            "RESOURCE_LOCKED - quorum queue 'qq' in vhost '/' is led by node {leader}, not this \
             node, which cannot forward to it now; connect to its leader"
        )
    );
    // S-CLU-11 on the management path: an operator's quorum queue declare on the follower is
    // refused as a client's is, not taken as a queue of the follower's own.
    let mut args = wharf_broker::FieldTable::default();
    args.insert(
        "x-queue-type",
        wharf_broker::Value::LongStr(b"quorum".to_vec()),
    );
    let declare = wharf_broker::Command::QueueDeclare(wharf_broker::QueueDeclare {
        vhost: "/".into(),
        queue: "ops-qq".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: args,
        owner: None,
    });
    let server = cluster.nodes[&follower].server.as_ref().unwrap();
    let err = within(server.admin(declare)).await.unwrap_err();
    assert_eq!(err.kind, wharf_broker::ErrorKind::ResourceLocked, "{err:?}");
    assert!(err.text.contains("'ops-qq'"), "{}", err.text);
    // S-CLU-10: the follower's own classic queues work as on a single node.
    let fch = fconn.create_channel().await.unwrap();
    within(fch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    within(fch.queue_declare("mine".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    publish_confirmed(&fch, "mine", "local").await;
    let got = within(fch.basic_get("mine".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .expect("the follower's own message");
    assert_eq!(got.delivery.data, b"local");
    assert_eq!(cluster.committed(leader, "mine"), None);
    cluster.shutdown().await;
}

/// S-CLU-5, S-CLU-6: messages with a queue TTL of 10 s published at T0 and T0+3 s on the old
/// leader expire on the new leader at T0+10 s and T0+13 s exactly, not a millisecond before,
/// whatever the new leader's clock read when it took over; the expiries are committed on the
/// remaining follower too. S-CLU-11: a follower refuses a publish routed to the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_6_a_new_leader_expires_at_the_same_deadlines() {
    let mut cluster = Cluster::start(3).await;
    {
        let (_conn, ch) = quorum_channel(&cluster, 1, Some(10_000)).await;
        publish_confirmed(&ch, "qq", "first").await;
        cluster.set_clock(1, T0_MS + 3_000).await;
        publish_confirmed(&ch, "qq", "second").await;

        // S-CLU-11: a follower's client cannot publish into the queue; it is told so, once the
        // follower's committed state knows the queue.
        cluster.wait_applied(3, 1).await;
        let (_fconn, fch) = cluster.channel(3).await;
        within(fch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .unwrap();
        let err = within(async {
            fch.basic_publish(
                "".into(),
                "qq".into(),
                BasicPublishOptions::default(),
                b"lost?",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await?
            .await
        })
        .await
        .unwrap_err();
        assert_eq!(reply_code(&err), Some(405), "{err:?}");
        cluster.stop(1).await;
    }
    // The others' clocks read T0+1 s, behind the log's T0+3 s (S-CLU-5).
    for id in [2, 3] {
        cluster.nodes[&id].clock.set(T0_MS + 1_000);
    }
    let leader = cluster.new_leader(1, 2).await;
    let follower = if leader == 2 { 3 } else { 2 };
    let (_conn, ch) = cluster.channel(leader).await;
    assert_eq!(ready_count(&ch, "qq").await, 2);
    cluster.set_clock(leader, T0_MS + 9_999).await;
    assert_eq!(
        ready_count(&ch, "qq").await,
        2,
        "nothing due before T0+10 s"
    );
    cluster.set_clock(leader, T0_MS + 10_000).await;
    assert_eq!(ready_count(&ch, "qq").await, 1, "the first at T0+10 s");
    cluster.set_clock(leader, T0_MS + 12_999).await;
    assert_eq!(ready_count(&ch, "qq").await, 1);
    cluster.set_clock(leader, T0_MS + 13_000).await;
    assert_eq!(ready_count(&ch, "qq").await, 0, "the second at T0+13 s");
    // The passive declare's answer came through the gate: the expiries are committed.
    cluster.wait_applied(follower, leader).await;
    assert_eq!(cluster.committed(follower, "qq"), Some(Vec::new()));
    cluster.shutdown().await;
}

/// S-CLU-60: the leader's live broker drifts from the committed state (the test commits the
/// deletion of quorum queue `qq` through the group's propose API, behind the broker's back), so
/// the next publish into `qq` is decided into a queue the committed state lacks: every member
/// voids that entry; the publisher gets no confirm (its connection closes with 541); the leader
/// takes over again from the committed state, so clients see what it says (`qq` gone, `kept`
/// with its message), and the group goes on confirming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_60_a_leaders_voided_entry_is_never_confirmed_and_its_live_broker_is_rebuilt() {
    let cluster = Cluster::start(3).await;
    let (conn, ch) = quorum_channel(&cluster, 1, None).await;
    within(ch.queue_declare("kept".into(), durable(), quorum(None)))
        .await
        .unwrap();
    publish_confirmed(&ch, "qq", "m0").await;
    publish_confirmed(&ch, "kept", "k0").await;

    let group = &cluster.nodes[&1].group;
    let behind_its_back = wharf_cluster::Proposal {
        now_ms: T0_MS,
        events: vec![wharf_broker::Event::QueueDeleted {
            vhost: "/".into(),
            queue: "qq".into(),
        }]
        .into(),
        origin: None,
    };
    let deleted_at = within(group.submit(behind_its_back).await.unwrap())
        .await
        .unwrap();

    let mut events = conn.events_listener();
    let confirm = within(ch.basic_publish(
        "".into(),
        "qq".into(),
        BasicPublishOptions::default(),
        b"lost",
        BasicProperties::default().with_delivery_mode(2),
    ))
    .await;
    let confirmed = match confirm {
        Ok(c) => within(c).await.is_ok_and(|c| c.is_ack()),
        Err(_) => false,
    };
    assert!(!confirmed, "a message of a voided entry is never confirmed");
    let err = loop {
        if let lapin::Event::Error(e) = within(events.next()).await.unwrap() {
            break e;
        }
    };
    assert_eq!(reply_code(&err), Some(541), "{err:?}");
    assert!(reply_text(&err).contains("voided"), "{err:?}");

    // The voided entry is `deleted_at + 1`; the take-over's first entry comes after it.
    let metrics = group.metrics();
    within(async {
        let mut m = metrics;
        m.wait_for(|m| m.last_applied.is_some_and(|l| l.index >= deleted_at + 2))
            .await
            .unwrap();
    })
    .await;
    for id in [2, 3] {
        cluster.wait_applied(id, 1).await;
    }
    for id in 1..=3 {
        let voided = cluster.nodes[&id]
            .group
            .machine
            .with(wharf_cluster::Machine::voided);
        assert_eq!(voided, 1, "member {id} voided the entry");
        assert_eq!(cluster.committed(id, "qq"), None, "member {id}");
        assert_eq!(
            cluster.committed(id, "kept"),
            Some(vec![("k0".to_owned(), false)]),
            "member {id}"
        );
    }

    let (_conn, ch) = cluster.channel(1).await;
    let gone = within(ch.queue_declare(
        "qq".into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(reply_code(&gone), Some(404), "{}", reply_text(&gone));
    let (_conn, ch) = cluster.channel(1).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    assert_eq!(ready_count(&ch, "kept").await, 1);
    publish_confirmed(&ch, "kept", "k1").await;
    cluster.wait_applied(2, 1).await;
    assert_eq!(
        cluster.committed(2, "kept"),
        Some(vec![("k0".to_owned(), false), ("k1".to_owned(), false)])
    );
    cluster.shutdown().await;
}
