//! A smoke test with a second, independent client library (amqprs): declare, publish,
//! consume, ack against the in-process server, so wharf is not only tested against lapin's
//! reading of the protocol.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use amqprs::BasicProperties;
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicPublishArguments, QueueDeclareArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use support::{TestServer, within};

#[tokio::test]
async fn amqprs_declares_publishes_consumes_and_acks() {
    let server = TestServer::start().await;
    let addr = server.handle.local_addr();
    let args = OpenConnectionArguments::new(&addr.ip().to_string(), addr.port(), "guest", "guest");
    let conn = Connection::open(&args).await.unwrap();
    let ch = conn.open_channel(None).await.unwrap();
    let (queue, _, _) = ch
        .queue_declare(QueueDeclareArguments::durable_client_named("amqprs-q"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue, "amqprs-q");
    for i in 0..3u8 {
        ch.basic_publish(
            BasicProperties::default().with_persistence(true).finish(),
            vec![i; 100],
            BasicPublishArguments::new("", "amqprs-q"),
        )
        .await
        .unwrap();
    }
    let (_tag, mut rx) = ch
        .basic_consume_rx(BasicConsumeArguments::new("amqprs-q", "amqprs-c"))
        .await
        .unwrap();
    for i in 0..3u8 {
        let msg = within(5, rx.recv()).await.unwrap();
        assert_eq!(msg.content.unwrap(), vec![i; 100]);
        let tag = msg.deliver.unwrap().delivery_tag();
        ch.basic_ack(BasicAckArguments::new(tag, false))
            .await
            .unwrap();
    }
    // Everything acked: the queue is empty.
    let (_, ready, consumers) = ch
        .queue_declare(
            QueueDeclareArguments::new("amqprs-q")
                .passive(true)
                .finish(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((ready, consumers), (0, 1));
    ch.close().await.unwrap();
    conn.close().await.unwrap();
}
