//! Quorum queues of `wharf` processes in a cluster (issue #17): the binary hands its node's
//! queue group (`wharf_cluster::QUEUE_GROUP`) to its server, so a quorum queue declared on the
//! group's leader is replicated to the other nodes. Three processes behind the fault-injecting
//! proxy (tests/support/cluster.rs); what a node says of the group comes from `wharfctl
//! cluster_status`, what a client sees from lapin.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::support::cluster::{Cluster, now};
use crate::support::{reply_code, reply_text, within};

/// The group carrying the quorum queues.
const QUEUES: u64 = wharf_cluster::QUEUE_GROUP;
/// How long a test waits for a group to form or a node to catch up.
const WAIT: Duration = Duration::from_secs(20);

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

async fn connect(url: &str) -> Connection {
    within(
        20,
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    .unwrap()
}

/// Declares the quorum queue `queue` on node `id`, the group's leader, and returns a
/// confirm-mode channel on it. The node's server takes over a moment after its Raft leads (its
/// term's first entry applied); until then it refuses with 405 (S-CLU-11), and the declare is
/// retried on a new channel.
async fn declare_on_leader(c: &Cluster, id: u64, queue: &str) -> (Connection, Channel) {
    let conn = connect(&c.url(id)).await;
    let start = now();
    loop {
        let ch = within(20, conn.create_channel()).await.unwrap();
        match within(20, ch.queue_declare(queue.into(), durable(), quorum())).await {
            Ok(_) => {
                within(20, ch.confirm_select(ConfirmSelectOptions::default()))
                    .await
                    .unwrap();
                return (conn, ch);
            }
            Err(e) if reply_code(&e) == Some(405) && start.elapsed() < WAIT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("declaring {queue} on node {id}: {e}\n{}", c.output(id)),
        }
    }
}

/// Publishes `body` persistently to `queue` and waits for its confirm (an ack).
async fn publish_confirmed(ch: &Channel, queue: &str, body: &[u8]) {
    let confirm = within(
        20,
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default().with_delivery_mode(2),
        ),
    )
    .await
    .unwrap();
    assert!(within(20, confirm).await.unwrap().is_ack(), "confirmed");
}

/// Waits until every running node in `nodes` has applied the group's log up to `index`.
async fn applied_everywhere(c: &Cluster, nodes: &[u64], index: u64) {
    for &id in nodes {
        c.until(id, QUEUES, "applied the leader's log", WAIT, |v| {
            v.applied >= Some(index)
        })
        .await;
    }
}

/// S-CLU-1, S-CLU-10, S-CLU-11: three `wharf` processes form the queue group by themselves;
/// a quorum queue declared on its leader takes confirmed publishes, which every follower
/// commits and applies; a follower, whose committed state knows the queue, refuses it with 405
/// naming the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_10_a_quorum_queue_on_the_leader_is_committed_on_every_node() {
    let c = Cluster::start(3).await;
    let (leader, _) = c.leader(QUEUES, &[], 0, WAIT).await;
    let (_conn, ch) = declare_on_leader(&c, leader, "qq").await;
    for i in 0..10 {
        publish_confirmed(&ch, "qq", format!("m{i}").as_bytes()).await;
    }
    // Every confirm was released once its entry committed: the leader's log now holds them.
    let view = c.view(leader, QUEUES).unwrap();
    let last = view.last_log.unwrap();
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    applied_everywhere(&c, &followers, last).await;
    for &id in &followers {
        let conn = connect(&c.url(id)).await;
        let ch = within(20, conn.create_channel()).await.unwrap();
        let passive = QueueDeclareOptions {
            passive: true,
            ..durable()
        };
        let err = within(
            20,
            ch.queue_declare("qq".into(), passive, FieldTable::default()),
        )
        .await
        .unwrap_err();
        assert_eq!(reply_code(&err), Some(405), "{err}");
        let text = reply_text(&err);
        assert!(text.contains(&format!("node {leader}")), "{text}");
    }
}
