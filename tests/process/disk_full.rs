//! Issue #19's full disk, on the real binary (S-DISK-1 to S-DISK-5, S-DUR-3): a tmpfs volume of
//! 64 MiB and one of 256 MiB, mounted by the test (root only; skipped loudly otherwise and
//! unmounted in the cleanup). Confirmed publishes fill the disk until the disk alarm blocks the
//! publisher; then a new connection opens, a passive declare, `basic.get` and acks answer, the
//! management API answers, a consumer drains the queue, and the blocked publisher resumes
//! without a restart once the drained space is back. A SIGKILL (by pid) at the end loses no
//! confirmed message. Real time on a real process: every wait polls with a deadline.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::binary;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use binary::Broker;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};

const BODY_BYTES: usize = 32 * 1024;
const BATCH: usize = 20;

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
struct Volume {
    dir: tempfile::TempDir,
}

impl Volume {
    /// `None` (after saying so on stderr) when this process may not mount.
    fn mount(size: &str) -> Option<Volume> {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status();
        if status.is_ok_and(|s| s.success()) {
            Some(Volume { dir })
        } else {
            eprintln!(
                "SKIPPED disk_full on a {size} tmpfs: cannot mount (the test needs root); \
                 the full-disk scenario of issue #19 was NOT run"
            );
            None
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn body(id: u64) -> Vec<u8> {
    let mut b = format!("{id:012}").into_bytes();
    b.resize(BODY_BYTES, b'.');
    b
}

fn id_of(body: &[u8]) -> u64 {
    std::str::from_utf8(&body[..12]).unwrap().parse().unwrap()
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// Publishes batches of confirmed persistent messages until `stop`; records confirmed ids.
async fn publisher(ch: Channel, confirmed: Arc<Mutex<BTreeSet<u64>>>, stop: Arc<AtomicBool>) {
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let mut batch = Vec::new();
        for _ in 0..BATCH {
            let props = BasicProperties::default().with_delivery_mode(2);
            let c = ch
                .basic_publish(
                    "".into(),
                    "fill".into(),
                    BasicPublishOptions::default(),
                    &body(next),
                    props,
                )
                .await
                .unwrap();
            batch.push((next, c));
            next += 1;
        }
        for (id, c) in batch {
            assert!(c.await.unwrap().is_ack(), "nack for {id}");
            confirmed.lock().unwrap().insert(id);
        }
    }
}

/// Polls `cond` every 100 ms for up to `secs`.
async fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..secs * 10 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within {secs} s: {what}");
}

/// `GET path` on the management API with guest's credentials; the status line.
fn mgmt_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Connection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_owned()
}

fn mgmt_addr(broker: &Broker) -> String {
    let out = broker.output();
    let line = out
        .lines()
        .find(|l| l.contains("management API listening"))
        .expect("management API line");
    binary::field(line, "addr").unwrap().to_owned()
}

/// Everything that needs no new log space for publishes works under the disk alarm (S-DISK-2):
/// a new connection, a passive declare, the management API, `basic.get` and its ack.
async fn under_alarm(broker: &Broker, at_block: usize) -> (Connection, Channel, BTreeSet<u64>) {
    // Everything that needs no new log space for publishes still works.
    let (conn, ch) = tokio::time::timeout(Duration::from_secs(10), broker.channel())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "a new connection does not open under the disk alarm:\n{}",
                broker.output()
            )
        });
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let q = ch
        .queue_declare("fill".into(), passive, FieldTable::default())
        .await
        .unwrap();
    assert!(
        q.message_count() as usize >= at_block,
        "{}",
        q.message_count()
    );
    assert!(mgmt_get(&mgmt_addr(broker), "/api/overview").contains("200"));
    let mut acked = BTreeSet::new();
    let got = ch
        .basic_get("fill".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("basic.get answers under the disk alarm");
    acked.insert(id_of(&got.delivery.data));
    got.delivery.ack(BasicAckOptions::default()).await.unwrap();

    (conn, ch, acked)
}

/// Restarts on `dir` after the SIGKILL: each confirmed message was acked or is still queued.
async fn assert_nothing_lost(
    dir: &Path,
    extra: &[&str],
    confirmed: &BTreeSet<u64>,
    acked: &BTreeSet<u64>,
) -> Broker {
    // No confirmed message is lost: each was acked, or is still queued after the restart.
    let again = Broker::start_with_args(env!("CARGO_BIN_EXE_wharf"), dir, extra);
    let (_conn, ch) = again.channel().await;
    let mut left = BTreeSet::new();
    while let Some(m) = ch
        .basic_get("fill".into(), BasicGetOptions::default())
        .await
        .unwrap()
    {
        left.insert(id_of(&m.delivery.data));
        m.delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    let lost: Vec<u64> = confirmed
        .iter()
        .filter(|id| !acked.contains(id) && !left.contains(id))
        .copied()
        .collect();
    assert!(lost.is_empty(), "confirmed messages lost: {lost:?}");
    again
}

async fn scenario(size: &str, extra: &[&str]) {
    let Some(volume) = Volume::mount(size) else {
        return;
    };
    let dir = volume.path();
    let bin = env!("CARGO_BIN_EXE_wharf");
    let broker = Broker::start_with_args(bin, &dir, extra);
    let out = broker.output();
    if size == "64m" {
        assert!(
            out.contains("volume is small"),
            "no warning about the volume:\n{out}"
        );
    }
    let (_pub_conn, pub_ch) = broker.channel().await;
    pub_ch
        .queue_declare("fill".into(), durable(), FieldTable::default())
        .await
        .unwrap();
    pub_ch
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirmed = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = tokio::spawn(publisher(pub_ch, confirmed.clone(), stop.clone()));

    // Fill until the disk alarm blocks the publisher.
    eventually(300, "the disk alarm", || {
        broker.output().contains("disk alarm: blocking publishers")
    })
    .await;
    assert!(!publishing.is_finished(), "the publisher failed");
    let at_block = confirmed.lock().unwrap().len();
    assert!(at_block > 0);

    let (_conn, ch, mut acked) = under_alarm(&broker, at_block).await;

    // A consumer drains what was confirmed; its acks free the space by themselves.
    ch.basic_qos(200, BasicQosOptions::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(
            "fill".into(),
            "drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    while acked.len() < at_block {
        let d = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .expect("the consumer keeps receiving under the disk alarm")
            .unwrap()
            .unwrap();
        acked.insert(id_of(&d.data));
        d.ack(BasicAckOptions::default()).await.unwrap();
    }

    // The publisher resumes without a restart.
    eventually(120, "publishers resuming", || {
        confirmed.lock().unwrap().len() >= at_block + 2 * BATCH
    })
    .await;
    assert!(
        broker.output().contains("disk alarm cleared"),
        "{}",
        broker.output()
    );
    // Keep draining while the publisher runs on, then stop it and cut the power.
    stop.store(true, Ordering::SeqCst);
    let _ = tokio::time::timeout(Duration::from_secs(60), publishing).await;
    let mut drained_more = 0;
    while let Ok(Some(Ok(d))) =
        tokio::time::timeout(Duration::from_millis(500), consumer.next()).await
    {
        acked.insert(id_of(&d.data));
        d.ack(BasicAckOptions::default()).await.unwrap();
        drained_more += 1;
        if drained_more > 100 {
            break;
        }
    }
    let confirmed: BTreeSet<u64> = confirmed.lock().unwrap().clone();
    assert!(!dir.join("00000000000000000000.checkpoint.tmp").exists());
    broker.kill();

    let again = assert_nothing_lost(&dir, extra, &confirmed, &acked).await;
    drop(again);
    drop(volume);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_disk_2_a_full_64_mib_volume_keeps_consumers_draining_and_publishers_resume() {
    scenario("64m", &["--disk-free-limit", "12MB"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_disk_2_a_full_256_mib_volume_keeps_consumers_draining_and_publishers_resume() {
    scenario("256m", &[]).await;
}
