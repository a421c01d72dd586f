//! The inspector on a data directory whose oldest segments were deleted after a checkpoint:
//! it reads the checkpoint in use and then the log after it, as recovery does, so `summary`
//! names the checkpoint, `verify` is clean, `queues` and `export` agree with the recovered
//! broker, and `trace` tells that history before the checkpoint is carried in it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use crate::common;

use std::sync::Arc;

use common::{T0_MS, inspect};
use serde_json::Value as Json;
use wharf_broker::{FieldTable, Properties};
use wharf_inspect::workload::Driver;
use wharf_store::{Store, StoreConfig};
use wharf_wal::{FileStorage, WalConfig};

fn props(id: &str) -> Properties {
    Properties {
        message_id: Some(id.to_owned()),
        ..Properties::default()
    }
}

/// Writes: queue `keep` with two messages (one delivered and requeued), 200 publish/ack pairs
/// through queue `churn`, a checkpoint, then one more message. Returns the checkpoint's Lsn.
fn write_dir(dir: &std::path::Path) -> u64 {
    let mut d = Driver::create(dir, 4096, false, T0_MS).unwrap();
    d.queue("keep", FieldTable::new()).unwrap();
    d.queue("churn", FieldTable::new()).unwrap();
    d.publish("", "keep", props("old-1"), b"first").unwrap();
    d.publish("", "keep", props("old-2"), b"second").unwrap();
    let tag = d.get("keep").unwrap().unwrap();
    d.reject(tag, true).unwrap();
    for i in 0..200 {
        d.publish("", "churn", props(&format!("c{i}")), &[b'x'; 200])
            .unwrap();
        let tag = d.get("churn").unwrap().unwrap();
        d.ack(tag).unwrap();
    }
    let snapshot = d.broker.snapshot();
    let done = d.store.checkpoint_now(snapshot).unwrap().unwrap();
    assert!(done.segments_deleted > 5, "{done:?}");
    d.publish("", "keep", props("new-1"), b"third").unwrap();
    d.close().unwrap();
    done.lsn
}

#[test]
fn the_inspector_reads_the_checkpoint_in_use_and_the_log_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let lsn = write_dir(dir);
    assert!(!dir.join("00000000000000000000.wal").exists());
    let d = dir.to_str().unwrap();
    let now = (T0_MS + 1000).to_string();

    let (code, out) = inspect(&["summary", d, "--now", &now]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("in use: covers the log through Lsn {lsn}")),
        "{out}"
    );
    let (code, out) = inspect(&["--json", "summary", d, "--now", &now]);
    assert_eq!(code, 0, "{out}");
    let summary: Json = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["checkpoint"]["lsn"], lsn);
    assert_eq!(summary["problems"], 0);
    assert_eq!(summary["live_messages"], 3);

    let (code, out) = inspect(&["verify", d]);
    assert_eq!(code, 0, "{out}");

    // queues and export agree with what recovery rebuilds.
    let (code, out) = inspect(&["--json", "queues", d, "--now", &now]);
    assert_eq!(code, 0, "{out}");
    let rows: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keep = rows.iter().find(|r| r["queue"] == "keep").unwrap();
    assert_eq!(keep["ready"], 3);
    let (code, out) = inspect(&["export", d, "--queue", "keep", "--now", &now]);
    assert_eq!(code, 0, "{out}");
    let exported: Vec<Json> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let config = StoreConfig {
        dir: dir.to_owned(),
        salvage: false,
    };
    let wal = WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        ..WalConfig::default()
    };
    let (store, mut broker, summary) =
        Store::open_with(&config, Arc::new(FileStorage), &wal).unwrap();
    assert_eq!(summary.checkpoint_lsn, Some(lsn));
    let _ = broker.recovered(T0_MS + 1000);
    drop(store);
    let recovered = broker.ready_messages("/", "keep");
    assert_eq!(exported.len(), recovered.len());
    for (e, (m, redelivered)) in exported.iter().zip(&recovered) {
        assert_eq!(e["id"], m.id.0, "{e}");
        assert_eq!(e["redelivered"], *redelivered, "{e}");
    }

    // History before the checkpoint is carried in it; what came after is in the log.
    let (code, out) = inspect(&["trace", d, "--by", "message_id=old-1"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("carried in checkpoint at Lsn {lsn}")),
        "{out}"
    );
    assert!(out.contains(".checkpoint"), "{out}");
    let (code, out) = inspect(&["trace", d, "--by", "message_id=new-1"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("published"), "{out}");
    assert!(!out.contains("carried"), "{out}");
    // The checkpoint refers to the two live messages (format 4): their segment was mostly
    // dead, so compaction copied them forward in the log first.
    let (code, out) = inspect(&["dump", d, "--kind", "referenced", "--body", "none"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, out) = inspect(&["dump", d, "--kind", "copied"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
}

#[test]
fn a_damaged_checkpoint_is_a_problem_verify_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let lsn = write_dir(dir);
    let path = dir.join(wharf_store::checkpoint::file_name(wharf_wal::Lsn(lsn)));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 2;
    bytes[at] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let (code, out) = inspect(&["verify", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("corrupt checkpoint"), "{out}");
}
