//! S-BIG-3 under crashes: a large body is written to a spool file as it arrives and copied
//! into its log record once routed. A power cut while the body streams loses the unconfirmed
//! message and leaves no spool behind; one right after the publish (the record written or
//! not, synced or not) brings back the message whole or not at all, never half; one after
//! the confirm brings it back whole (S-DUR-3). Every spool file a crash leaves is removed at
//! the restart. `TestBroker` on real files (its power cut undoes every unsynced write).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use amq_protocol::protocol::{AMQPClass, BasicProperties as WireProperties, basic};
use bytes::BytesMut;
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection};
use wharf::testing::TestBroker;
use wharf_protocol::{self as protocol, ChannelId};

use crate::support::raw::Raw;
use crate::support::{confirming_channel, within};

const BODY_BYTES: usize = 8 * 1024 * 1024 + 3;

fn big_body() -> Vec<u8> {
    (0..BODY_BYTES)
        .map(|i| u8::try_from(i % 241).unwrap())
        .collect()
}

/// Spool files (`*.body`) anywhere under `dir`.
fn spool_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(spool_files(&path));
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(wharf_wal::is_spool_file_name)
        {
            found.push(path);
        }
    }
    found
}

async fn files_broker() -> TestBroker {
    TestBroker::builder().temp_data_dir().start().await.unwrap()
}

/// A confirming channel with the durable queue `q` declared; returns its ready count.
async fn channel(broker: &TestBroker) -> (Connection, Channel, u32) {
    let (conn, ch) = confirming_channel(&broker.amqp_url()).await;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare("q".into(), durable, FieldTable::default())
        .await
        .unwrap();
    (conn, ch, q.message_count())
}

/// Takes every message of `q` (at most 2 expected), acked: their bodies.
async fn take_all(ch: &Channel) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get("q".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(m.delivery.data);
        assert!(out.len() <= 2, "no duplicate");
    }
    out
}

async fn publish(ch: &Channel, body: &[u8]) -> lapin::PublisherConfirm {
    ch.basic_publish(
        "".into(),
        "q".into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn s_big_3_a_power_cut_while_the_body_streams_loses_it_whole_and_leaves_no_spool() {
    let mut broker = files_broker().await;
    let (_conn, _ch, _) = channel(&broker).await;
    let mut raw = Raw::open(broker.local_addr(), 0).await;
    raw.open_channel(1).await;
    let mut buf = BytesMut::new();
    let method = basic::Publish {
        exchange: "".into(),
        routing_key: "q".into(),
        mandatory: false,
        immediate: false,
    };
    protocol::encode_method(
        &mut buf,
        ChannelId(1),
        &AMQPClass::Basic(basic::AMQPMethod::Publish(method)),
    );
    let props = WireProperties::default().with_delivery_mode(2);
    protocol::encode_content_header(&mut buf, ChannelId(1), 60, BODY_BYTES as u64, &props);
    let piece = vec![7u8; 128 * 1024 - 8];
    for _ in 0..20 {
        protocol::encode_body_frame(&mut buf, ChannelId(1), &piece);
    }
    raw.send(&buf).await;
    // The server handles a connection's frames in order: once channel 2 is open, the body
    // frames before it are in the spool.
    raw.open_channel(2).await;
    let spooled = spool_files(broker.data_dir());
    assert_eq!(
        spooled.len(),
        1,
        "the body streams to one spool: {spooled:?}"
    );
    assert_eq!(
        std::fs::metadata(&spooled[0]).unwrap().len(),
        20 * piece.len() as u64,
        "what arrived, and no more, is on disk"
    );

    broker.power_loss().await.unwrap();
    broker.restart().await.unwrap();
    assert!(spool_files(broker.data_dir()).is_empty());
    let (_conn, ch, count) = channel(&broker).await;
    assert_eq!(count, 0, "never confirmed, never routed: gone");
    // The log takes large bodies as before.
    let body = big_body();
    let confirm = within(60, publish(&ch, &body)).await;
    assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
    assert!(take_all(&ch).await == vec![body]);
}

#[tokio::test]
async fn s_big_3_a_power_cut_after_the_confirm_keeps_the_body_whole() {
    let mut broker = files_broker().await;
    let (_conn, ch, _) = channel(&broker).await;
    let body = big_body();
    let confirm = within(60, publish(&ch, &body)).await;
    assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
    broker.power_loss().await.unwrap();
    broker.restart().await.unwrap();
    assert!(spool_files(broker.data_dir()).is_empty());
    let (_conn, ch, count) = channel(&broker).await;
    assert_eq!(count, 1);
    assert!(
        take_all(&ch).await == vec![body],
        "confirmed: back whole, once"
    );
}

#[tokio::test]
async fn s_big_3_a_power_cut_right_after_the_publish_brings_it_back_whole_or_not_at_all() {
    // Where the cut falls varies (body still streaming, spooled and routed, record written
    // and not synced, synced): every outcome must be whole or nothing, and never confirmed
    // but missing.
    for round in 0..3u8 {
        let mut broker = files_broker().await;
        let (_conn, ch, _) = channel(&broker).await;
        let mut body = big_body();
        body[0] = round;
        let confirm = within(60, publish(&ch, &body)).await;
        if round == 2 {
            // Once confirmed, the cut falls after the record's fsync.
            assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
        }
        broker.power_loss().await.unwrap();
        broker.restart().await.unwrap();
        assert!(spool_files(broker.data_dir()).is_empty());
        let (_conn, ch, count) = channel(&broker).await;
        let got = take_all(&ch).await;
        assert_eq!(u32::try_from(got.len()).unwrap(), count);
        assert!(
            got.is_empty() || got == vec![body.clone()],
            "round {round}: whole or nothing"
        );
        if round == 2 {
            assert_eq!(got.len(), 1, "confirmed, so kept");
        }
    }
}
