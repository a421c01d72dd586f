//! S-BIG-1: the largest message wharf accepts (`limits::MESSAGE_BODY_BYTES_MAX`), persistent,
//! is confirmed after fsync and delivered intact by the real binary, and the broker's peak
//! memory stays within a bound of the body's size. The target (a 100 MiB body under
//! 200 MiB of RSS) needs bodies written to the log in pieces, a format change; until then this
//! test measures the peak at today's maximum and prints it, and fails if a change adds whole
//! copies of the body on its way through (docs/SEMANTICS.md S-BIG-1).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation};

use crate::support::binary::Broker;
use crate::support::within;
use wharf_base::limits;

/// A `/proc/<pid>/status` field in KiB, as bytes.
fn status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

#[tokio::test]
async fn s_big_1_the_largest_persistent_message_is_stored_and_delivered_within_a_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path());
    let (_conn, ch) = broker.channel().await;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare("big".into(), durable, FieldTable::default())
        .await
        .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let body_bytes = usize::try_from(limits::MESSAGE_BODY_BYTES_MAX).unwrap();
    let body: Vec<u8> = (0..=250u8).cycle().take(body_bytes).collect();
    let before = status_bytes(broker.pid(), "VmRSS:");
    let confirm = within(60, async {
        ch.basic_publish(
            "".into(),
            "big".into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap()
    })
    .await;
    assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    let mut consumer = ch
        .basic_consume(
            "big".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let delivery = within(60, consumer.next()).await.unwrap().unwrap();
    assert!(delivery.data == body, "the body came back intact");
    delivery.ack(BasicAckOptions::default()).await.unwrap();
    let peak = status_bytes(broker.pid(), "VmHWM:");
    let grown = peak.saturating_sub(before);
    let tenths = grown * 10 / body_bytes as u64;
    println!(
        "S-BIG-1: body {body_bytes} B, RSS before {before} B, peak {peak} B, grown {grown} B \
         ({}.{} bodies)",
        tenths / 10,
        tenths % 10
    );
    // Today's copies: the gathered body, the store's record encoding, the WAL's pending
    // chunk, the delivery's outbox frames, plus buffer growth; more than that is a regression.
    let bound = 8 * body_bytes as u64;
    assert!(grown < bound, "peak grew by {grown} B, over {bound} B");
    broker.terminate();
}
