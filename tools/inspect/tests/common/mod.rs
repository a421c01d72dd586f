//! Shared by the inspector's tests: the golden workload and helpers.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};

use wharf_broker::{FieldTable, Properties, Value};
use wharf_inspect::workload::Driver;

/// The fixed start of every scripted workload (ms since the epoch).
pub const T0_MS: u64 = 1_700_000_000_000;

/// `tools/inspect/tests/golden`.
pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("golden")
}

/// Copies a directory's files (flat) into a new temporary directory.
pub fn copy_dir(from: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    tmp
}

/// Runs the inspector in-process; returns the exit code and stdout.
pub fn inspect(args: &[&str]) -> (i32, String) {
    let mut out = Vec::new();
    let mut all = vec!["wharf-inspect"];
    all.extend_from_slice(args);
    let code = wharf_inspect::run(all, &mut out);
    (code, String::from_utf8(out).unwrap())
}

/// The golden "basic" workload: an `orders` direct exchange feeding `orders` (queue TTL 60 s,
/// dead-letter exchange `dlx`) and `audit`; `dlx` feeds `dlq`. Twelve persistent orders, some
/// with their own 5 s TTL; acks, a requeue, a reject into the DLQ, then expiry at +10 s
/// dead-letters the short-lived ones. Small segments (4 KiB) so the log spans several files.
pub fn scenario_basic(dir: &Path) -> anyhow::Result<()> {
    let mut d = Driver::create(dir, 4096, false, T0_MS)?;
    d.exchange("dlx", "fanout")?;
    d.queue("dlq", FieldTable::new())?;
    d.bind("dlq", "dlx", "")?;
    d.exchange("orders", "direct")?;
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", Value::long_str("dlx"));
    args.insert("x-message-ttl", Value::I32(60_000));
    d.queue("orders", args)?;
    d.queue("audit", FieldTable::new())?;
    d.bind("orders", "orders", "new")?;
    d.bind("audit", "orders", "new")?;
    for i in 0..12u64 {
        d.now_ms = T0_MS + i;
        let mut headers = FieldTable::new();
        let tenant = if i % 3 == 1 { "globex" } else { "acme" };
        headers.insert("tenant", Value::long_str(tenant));
        headers.insert("attempt", Value::I32(1));
        let props = Properties {
            content_type: Some("text/plain".to_owned()),
            message_id: Some(format!("order-{i}")),
            correlation_id: Some(format!("c-{i}")),
            headers: Some(headers),
            expiration: (i % 4 == 1).then(|| "5000".to_owned()),
            ..Properties::default()
        };
        let body: Vec<u8> = if i == 11 {
            vec![0, 159, 146, 150, 255]
        } else {
            format!("order {i}: {}", "item ".repeat(60)).into_bytes()
        };
        d.publish("orders", "new", props, &body)?;
    }
    d.now_ms = T0_MS + 100;
    // order-0 acked; order-1 requeued twice, then rejected into the DLQ (its audit copy
    // expires at +10 s); order-2 acked; the first audit copy acked.
    let t0 = d.get("orders")?.expect("order 0");
    d.ack(t0)?;
    let t1 = d.get("orders")?.expect("order 1 (has its own TTL)");
    d.reject(t1, true)?;
    let t1 = d.get("orders")?.expect("order 1 again");
    d.reject(t1, true)?;
    let t1 = d.get("orders")?.expect("order 1, a third time");
    d.reject(t1, false)?;
    let t2 = d.get("orders")?.expect("order 2");
    d.ack(t2)?;
    let a0 = d.get("audit")?.expect("audit 0");
    d.ack(a0)?;
    d.expire_at(T0_MS + 10_000)?;
    d.close()
}
