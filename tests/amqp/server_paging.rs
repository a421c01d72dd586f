//! Bodies on disk (DESIGN "Memory"): with no memory for message content
//! (`message_memory_bytes = 0`), every persistent message of a durable queue is paged out as
//! soon as its record is durable, and a real client still gets every message back exactly as
//! published: body and properties on delivery and `basic.get`, redelivered after a requeue,
//! and dead-lettered with its content and `x-death` when it expires (S-TTL-4, S-DLX-5), and
//! after a restart (S-DUR-1).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::{TestServer, within};
use lapin::BasicProperties;
use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use tokio::sync::oneshot;
use wharf_server::AdminRequest;

/// Memory the broker holds for queued message content right now.
async fn loaded_bytes(server: &TestServer) -> u64 {
    let (tx, rx) = oneshot::channel();
    server
        .handle
        .admin_request(AdminRequest::Query(Box::new(move |view| {
            let _ = tx.send(view.broker.loaded_bytes());
        })))
        .await;
    rx.await.unwrap()
}

fn props(i: u32) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert("n".into(), AMQPValue::LongUInt(i));
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type(ShortString::from("text/plain"))
        .with_headers(headers)
}

fn body(i: u32) -> Vec<u8> {
    format!("message {i} {}", "x".repeat(i as usize)).into_bytes()
}

/// One message from `queue` (it must have one).
async fn get(ch: &lapin::Channel, queue: &str, no_ack: bool) -> lapin::message::BasicGetMessage {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack })
        .await
        .unwrap()
        .expect("a message")
}

async fn requeue(ch: &lapin::Channel, tag: u64) {
    let options = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    ch.basic_nack(tag, options).await.unwrap();
}

/// Declares `dead` and `paged` (TTL 60 s, dead-lettering to `dead`) and publishes 40
/// persistent messages into `paged` with confirms.
async fn declare_and_fill(ch: &lapin::Channel) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("dead".into(), durable, FieldTable::default())
        .await
        .unwrap();
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongUInt(60_000));
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from("dead")),
    );
    ch.queue_declare("paged".into(), durable, args)
        .await
        .unwrap();
    for i in 0..40 {
        ch.basic_publish(
            "".into(),
            "paged".into(),
            BasicPublishOptions::default(),
            &body(i),
            props(i),
        )
        .await
        .unwrap();
    }
    within(10, ch.wait_for_confirms()).await.unwrap();
}

fn header_n(p: &BasicProperties) -> Option<u32> {
    match p.headers().as_ref()?.inner().get("n")? {
        AMQPValue::LongUInt(n) => Some(*n),
        _ => None,
    }
}

#[tokio::test]
async fn s_dur_1_paged_out_messages_come_back_whole_on_get_requeue_dead_letter_and_restart() {
    let server = TestServer::start_with(|c| c.message_memory_bytes = 0).await;
    let (conn, ch) = server.channel().await;
    declare_and_fill(&ch).await;
    // A batch after the records are durable pages them out: nothing of them stays in memory.
    server.handle.tick().await;
    assert_eq!(loaded_bytes(&server).await, 0, "all paged out");

    // basic.get reads them back whole, in order.
    for i in 0..5 {
        let m = get(&ch, "paged", true).await;
        assert_eq!(m.delivery.data, body(i));
        assert_eq!(header_n(&m.delivery.properties), Some(i));
        assert_eq!(
            m.delivery
                .properties
                .content_type()
                .as_ref()
                .map(ShortString::as_str),
            Some("text/plain")
        );
        assert!(!m.delivery.redelivered);
    }
    // A requeued one comes back redelivered, still whole.
    let m = get(&ch, "paged", false).await;
    assert_eq!(m.delivery.data, body(5));
    requeue(&ch, m.delivery.delivery_tag).await;
    let again = get(&ch, "paged", false).await;
    assert!(again.delivery.redelivered);
    assert_eq!(again.delivery.data, body(5));
    assert_eq!(header_n(&again.delivery.properties), Some(5));
    requeue(&ch, again.delivery.delivery_tag).await;
    conn.close(200, "bye".into()).await.unwrap();

    // A restart restores them as references: the content is read back from disk.
    let server = server.restart().await;
    assert_eq!(
        loaded_bytes(&server).await,
        0,
        "recovery leaves content on disk"
    );
    let (_conn, ch) = server.channel().await;
    let m = get(&ch, "paged", true).await;
    assert_eq!(m.delivery.data, body(5));
    assert!(m.delivery.redelivered, "S-DUR-6 across the restart");

    // They expire on their original deadline and are dead-lettered whole (S-TTL-4, S-DLX-5).
    server.advance(60_000).await;
    let left = ch
        .basic_get("paged".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    assert!(left.is_none(), "all expired");
    for i in 6..40 {
        let d = get(&ch, "dead", true).await;
        assert_eq!(d.delivery.data, body(i));
        assert_eq!(header_n(&d.delivery.properties), Some(i));
        let headers = d.delivery.properties.headers().clone().unwrap();
        assert!(headers.inner().contains_key("x-death"), "{headers:?}");
    }
}
