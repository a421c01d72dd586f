//! S-FLOW-1: publisher flow control seen by real clients. A publisher whose queue holds a
//! backlog behind a consumer on another connection is put in `flow` (its socket is read no
//! further) and resumes once the consumer caught up; a connection consuming its own
//! publishes is never slowed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use crate::support::{TestServer, ready_count, within};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use tokio::sync::oneshot;
use wharf_base::limits::{FLOW_READY_HIGH, FLOW_READY_LOW};
use wharf_server::AdminRequest;

/// More than the high mark, so that the queue goes over it.
const MESSAGES: usize = FLOW_READY_HIGH + 500;

/// Whether each open connection (by id, ascending) is in flow, and whether it publishes.
async fn flow_states(server: &TestServer) -> Vec<(bool, bool)> {
    let (tx, rx) = oneshot::channel();
    server
        .handle
        .admin_request(AdminRequest::Query(Box::new(move |view| {
            let states = view
                .connections
                .list()
                .iter()
                .map(|c| (c.flow, c.channels.iter().any(|ch| ch.publishing)))
                .collect();
            let _ = tx.send(states);
        })))
        .await;
    rx.await.unwrap()
}

/// Whether the publishing connection is in flow now.
async fn publisher_in_flow(server: &TestServer) -> bool {
    flow_states(server)
        .await
        .iter()
        .any(|&(flow, publishing)| flow && publishing)
}

/// Polls until the publisher's flow state is `on` (a state change, not a timing figure).
async fn wait_publisher_flow(server: &TestServer, on: bool) {
    within(10, async {
        while publisher_in_flow(server).await != on {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

async fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn ready(ch: &Channel, queue: &str) -> usize {
    ready_count(ch, queue).await as usize
}

/// Publishes `n` small messages to `queue` with confirms, without waiting for them.
async fn publish_many(ch: &Channel, queue: &str, n: usize) {
    for i in 0..n {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn s_flow_1_a_publisher_is_slowed_while_another_connections_consumer_is_behind() {
    let server = TestServer::start().await;
    // The consumer's connection first: it takes one message and holds it, unacked.
    let (_cons_conn, cons) = server.channel().await;
    declare(&cons, "fq").await;
    cons.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = cons
        .basic_consume(
            "fq".into(),
            "slow".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let (_pub_conn, publisher) = server.channel().await;
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(!publisher_in_flow(&server).await);
    let publishing = tokio::spawn({
        let publisher = publisher.clone();
        async move {
            publish_many(&publisher, "fq", MESSAGES).await;
            publisher.wait_for_confirms().await.unwrap()
        }
    });
    // The backlog passes the high mark behind a consumer that holds its one message.
    wait_publisher_flow(&server, true).await;
    assert!(ready(&cons, "fq").await > FLOW_READY_HIGH);
    // The consumer catches up: it acks each message, and so gets the next.
    let mut received = 0;
    while received < MESSAGES {
        let delivery = within(10, consumer.next()).await.unwrap().unwrap();
        delivery.ack(BasicAckOptions::default()).await.unwrap();
        received += 1;
    }
    // Every publish went through, and the publisher was let go on the way.
    let returned = within(10, publishing).await.unwrap();
    assert!(returned.is_empty(), "all {MESSAGES} confirmed");
    wait_publisher_flow(&server, false).await;
    assert!(ready(&cons, "fq").await <= FLOW_READY_LOW);
}

#[tokio::test]
async fn s_flow_1_a_connection_consuming_its_own_publishes_is_never_slowed() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "own").await;
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let _consumer = ch
        .basic_consume(
            "own".into(),
            "holds-one".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    publish_many(&ch, "own", MESSAGES).await;
    let returned = within(10, ch.wait_for_confirms()).await.unwrap();
    assert!(returned.is_empty());
    assert_eq!(ready(&ch, "own").await, MESSAGES - 1);
    let states = flow_states(&server).await;
    assert!(states.iter().all(|&(flow, _)| !flow), "{states:?}");
}
