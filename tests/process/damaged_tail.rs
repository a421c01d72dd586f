//! S-DISK-6 and S-DISK-8 on the real binary: after a clean stop with 2,700 confirmed messages
//! queued, each of issue #19's tail damages (zeroing the last quarter of the last segment,
//! truncating it at 90 %, zeroing its last 4 KiB, flipping one byte of its last record) makes
//! `wharf` refuse to start with the file, the offset and the number of confirmed records lost,
//! and `wharf --salvage` starts on it, logging the loss.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test code: a failed unwrap is a failed test; casts are on file offsets"
)]

use crate::support::binary;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use binary::Broker;
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;

const MESSAGES: usize = 2700;

/// A data directory holding `MESSAGES` confirmed persistent messages in queue `q`, stopped
/// cleanly (SIGTERM).
async fn clean_stop_with_messages(dir: &Path) {
    let broker = Broker::start(dir);
    let (conn, ch) = broker.channel().await;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("q".into(), durable, FieldTable::default())
        .await
        .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut confirms = Vec::new();
    for i in 0..MESSAGES {
        let body = format!("message {i:05} {}", "x".repeat(100));
        let props = BasicProperties::default().with_delivery_mode(2);
        let confirm = ch
            .basic_publish(
                "".into(),
                "q".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                props,
            )
            .await
            .unwrap();
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(confirm.await.unwrap().is_ack());
    }
    conn.close(200, "bye".into()).await.unwrap();
    broker.terminate();
}

/// The newest segment and where its records end (the rest is preallocated zeros).
fn last_segment(dir: &Path) -> (PathBuf, usize) {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segments.sort();
    let path = segments.pop().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    (path, end)
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
    }
    to
}

/// Runs the binary on `dir` expecting it to refuse to start; returns its output.
fn refused_start(dir: &Path) -> String {
    let out = binary::command(env!("CARGO_BIN_EXE_wharf"), dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "started on a damaged log:\n{text}");
    text
}

type Damage = fn(&mut Vec<u8>, usize);

#[expect(
    clippy::ptr_arg,
    reason = "one signature for every damage, truncation included"
)]
fn zero_last_quarter(b: &mut Vec<u8>, end: usize) {
    b[end - end / 4..end].fill(0);
}
fn truncate_at_90_percent(b: &mut Vec<u8>, end: usize) {
    b.truncate(end * 9 / 10);
}
#[expect(
    clippy::ptr_arg,
    reason = "one signature for every damage, truncation included"
)]
fn zero_last_4_kib(b: &mut Vec<u8>, end: usize) {
    b[end - 4096..end].fill(0);
}
#[expect(
    clippy::ptr_arg,
    reason = "one signature for every damage, truncation included"
)]
fn flip_a_byte_of_the_last_record(b: &mut Vec<u8>, end: usize) {
    b[end - 20] ^= 0x5a;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_disk_6_tail_damage_after_a_clean_stop_is_refused_and_salvage_is_explicit() {
    let clean = tempfile::tempdir().unwrap();
    clean_stop_with_messages(clean.path()).await;
    let cases: [(&str, Damage); 4] = [
        ("zero the last quarter", zero_last_quarter),
        ("truncate at 90%", truncate_at_90_percent),
        ("zero the last 4 KiB", zero_last_4_kib),
        (
            "flip one byte of the last record",
            flip_a_byte_of_the_last_record,
        ),
    ];
    for (what, damage) in cases {
        let copy = copy_dir(clean.path());
        let (path, end) = last_segment(copy.path());
        let mut bytes = std::fs::read(&path).unwrap();
        damage(&mut bytes, end);
        std::fs::write(&path, bytes).unwrap();
        let out = refused_start(copy.path());
        assert!(out.contains(&path.display().to_string()), "{what}: {out}");
        assert!(out.contains("durable (confirmed) record"), "{what}: {out}");
        assert!(out.contains("not a torn tail"), "{what}: {out}");
        assert!(out.contains("--salvage"), "{what}: {out}");
        assert!(!out.contains("torn tail of the log cut"), "{what}: {out}");
    }

    // The way forward is explicit, logged, and reports what was lost.
    let copy = copy_dir(clean.path());
    let (path, end) = last_segment(copy.path());
    let mut bytes = std::fs::read(&path).unwrap();
    zero_last_quarter(&mut bytes, end);
    std::fs::write(&path, bytes).unwrap();
    let broker = Broker::start_with_args(env!("CARGO_BIN_EXE_wharf"), copy.path(), &["--salvage"]);
    let output = broker.output();
    assert!(
        output.contains("--salvage: damaged log records"),
        "{output}"
    );
    assert!(output.contains("its records are lost"), "{output}");
    let lost = broker.start_field("salvaged_records");
    assert!(lost > 0, "{}", broker.start_line);
    let left = broker.start_field("messages");
    assert!(left > 0 && left < MESSAGES as u64, "{}", broker.start_line);
    broker.terminate();
    // Salvaged once, the log is whole again: a plain start accepts it.
    let again = Broker::start(copy.path());
    assert_eq!(again.start_field("salvaged_records"), 0);
    assert_eq!(again.start_field("messages"), left);
    again.terminate();
}
