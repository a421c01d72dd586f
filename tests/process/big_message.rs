//! S-BIG-1, S-BIG-3: a 100 MiB persistent message, published with confirms to the real
//! binary, is confirmed once durable, delivered intact (checksum) and survives a restart,
//! while the broker's peak resident memory (`VmHWM`) stays within a bound over its idle size:
//! on its way to the log the body is not held in memory at all (spooled to a file as it
//! arrives, mapped, copied into its record in 1 MiB pieces), and its body frames are sent from
//! the message itself. One message only: it runs in CI on two cores.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation};

use crate::support::binary::Broker;
use crate::support::within;

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

const BODY_BYTES: usize = 100 * 1024 * 1024;
/// How much storing the body may grow the broker's peak RSS: a small part of it (S-BIG-3).
const STORE_GROWTH_MAX: u64 = 8 * 1024 * 1024;

/// Consumes the one message of `big` and returns its body's length and CRC-32; acks it when
/// `ack` (else it stays unacked until the channel closes).
async fn take_one(ch: &Channel, ack: bool) -> (usize, u32) {
    let mut consumer = ch
        .basic_consume(
            "big".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let delivery = within(120, consumer.next()).await.unwrap().unwrap();
    let sum = (delivery.data.len(), crc32fast::hash(&delivery.data));
    if ack {
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    sum
}

#[tokio::test]
async fn s_big_3_a_100_mib_persistent_message_is_confirmed_delivered_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // No periodic checkpoint during the measure: only the body's own copies are measured.
    // (A checkpoint refers to a stored message where its record is and reads nothing of it,
    // S-DISK-9; the clean stop below ends with one, and the restart loads it.)
    let config = dir.path().join("wharf.toml");
    std::fs::write(&config, "checkpoint_log_bytes_min = \"1GiB\"\n").unwrap();
    let data = dir.path().join("data");
    let start = || {
        let args = ["--config", config.to_str().unwrap()];
        Broker::start_with_args(env!("CARGO_BIN_EXE_wharf"), &data, &args)
    };
    let broker = start();
    let (conn, ch) = broker.channel().await;
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
    let body: Vec<u8> = (0..=250u8).cycle().take(BODY_BYTES).collect();
    let sent = (body.len(), crc32fast::hash(&body));
    let idle = status_bytes(broker.pid(), "VmRSS:");
    let confirm = within(120, async {
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
    drop(body);
    assert!(matches!(confirm, Confirmation::Ack(None)), "{confirm:?}");
    let stored_peak = status_bytes(broker.pid(), "VmHWM:");
    // Storing it costs no body: it streamed to its spool and was copied into the log in
    // pieces. The bound leaves room for the socket's read buffers, the log's 1 MiB copy
    // buffer and the allocator, a small part of one body.
    let publish_bound = STORE_GROWTH_MAX;
    let stored_grown = stored_peak.saturating_sub(idle);
    assert!(
        stored_grown < publish_bound,
        "storing grew the peak by {stored_grown} B, over {publish_bound} B"
    );
    // Delivered, but not acked before the restart: requeued by the channel's close.
    assert_eq!(
        take_one(&ch, false).await,
        sent,
        "the body came back intact"
    );
    let peak = status_bytes(broker.pid(), "VmHWM:");
    let grown = peak.saturating_sub(idle);
    let tenths = grown * 10 / BODY_BYTES as u64;
    println!(
        "S-BIG-3: body {BODY_BYTES} B, idle RSS {idle} B, peak when confirmed {stored_peak} B, \
         peak {peak} B, grown {grown} B ({}.{} bodies)",
        tenths / 10,
        tenths % 10
    );
    // Storing it costs no body (above), delivering it about one: the body is sent from the
    // message itself, its spool's map while still held or else read back from its record
    // once. The bound was under two bodies; this one is a quarter over one body.
    // (Five bodies before the body was logged by reference and sent from where it is, two
    // before a paged-out message still held was used again, one before spooling.)
    let bound = BODY_BYTES as u64 * 5 / 4;
    assert!(grown < bound, "peak grew by {grown} B, over {bound} B");
    drop(ch);
    drop(conn);
    broker.terminate();
    // S-DUR-3: what was confirmed survives a restart, whole.
    let broker = start();
    let (_conn, ch) = broker.channel().await;
    assert_eq!(take_one(&ch, true).await, sent, "intact after the restart");
    broker.terminate();
}
