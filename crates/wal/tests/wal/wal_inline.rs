//! The inline writer (`WalConfig::inline_writer`), the deterministic simulation's log: no
//! thread; nothing is written until someone waits, and then everything pending is written
//! and synced as one batch, on the waiter's thread. So which records share an fsync, which
//! fsync an injected fault hits and what a power loss can take depend only on the calls made,
//! never on timing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::path::PathBuf;
use std::sync::Arc;

use wharf_wal::{Lsn, RecordRef, SimStorage, Wal, WalConfig, WalError};

fn dir() -> PathBuf {
    PathBuf::from("/sim/wal")
}

fn config() -> WalConfig {
    WalConfig {
        segment_bytes_max: wharf_wal::SEGMENT_BYTES_MIN,
        preallocate: false,
        inline_writer: true,
        ..WalConfig::default()
    }
}

fn open(sim: &SimStorage) -> (Wal, Vec<Vec<u8>>) {
    open_with(sim, &config())
}

fn open_with(sim: &SimStorage, config: &WalConfig) -> (Wal, Vec<Vec<u8>>) {
    let mut recs = Vec::new();
    let (wal, _) = Wal::open(
        &dir(),
        Arc::new(sim.clone()),
        config,
        &mut |r: RecordRef<'_>| {
            recs.push(r.payload.to_vec());
            Ok(())
        },
    )
    .unwrap();
    (wal, recs)
}

fn log_bytes(sim: &SimStorage) -> usize {
    let names = wharf_wal::list_segments(sim, &dir()).unwrap();
    names
        .iter()
        .map(|id| sim.file_bytes(&dir().join(wharf_wal::segment_file_name(*id))))
        .map(|b| b.map_or(0, |b| b.len()))
        .sum()
}

#[test]
fn nothing_is_written_until_a_wait_and_then_all_pending_in_one_sync() {
    let sim = SimStorage::new(1);
    let (wal, _) = open(&sim);
    let appender = wal.appender();
    let before = log_bytes(&sim);
    let mut last = Lsn(0);
    for i in 0..5u8 {
        last = appender.append(1, &[i; 50]).unwrap().lsn;
    }
    assert_eq!(log_bytes(&sim), before, "appends alone write nothing");
    assert_eq!(appender.stats().syncs, 0);
    appender.wait_durable(Lsn(last.0 - 3)).unwrap();
    assert_eq!(
        appender.durable_lsn(),
        last,
        "the wait took everything pending"
    );
    assert_eq!(appender.stats().syncs, 1);
    assert_eq!(appender.stats().records, 5);
    assert!(matches!(
        appender.wait_durable(Lsn(last.0 + 1)),
        Err(WalError::NotAppended { .. })
    ));
    // The future runs the writer when polled, as the blocking wait does.
    let next = appender.append(1, b"polled").unwrap().lsn;
    let mut durable = std::pin::pin!(appender.durable(next));
    let waker = std::task::Waker::noop();
    let polled = durable
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker));
    assert!(matches!(polled, std::task::Poll::Ready(Ok(()))));
    // Closing drains what is pending.
    appender.append(1, b"at close").unwrap();
    drop(appender);
    wal.close().unwrap();
    let (_, recs) = open(&sim);
    assert_eq!(recs.len(), 7);
    assert_eq!(recs.last().unwrap(), b"at close");
}

#[test]
fn an_injected_sync_failure_hits_the_same_records_every_time() {
    let outcome = |seed: u64| {
        let sim = SimStorage::new(seed);
        let (wal, _) = open(&sim);
        let appender = wal.appender();
        for i in 0..4u8 {
            appender.append_durable(1, &[i; 100]).unwrap();
        }
        sim.fail_sync_after(1);
        let mut results = Vec::new();
        for round in 0..3u8 {
            let mut last = Lsn(0);
            for i in 0..3u8 {
                match appender.append(1, &[round * 10 + i; 100]) {
                    Ok(a) => last = a.lsn,
                    Err(_) => results.push(u64::MAX),
                }
            }
            results.push(appender.wait_durable(last).map_or(0, |()| last.0));
        }
        drop(appender);
        drop(wal);
        let (_, recs) = open(&sim.power_loss());
        (results, recs)
    };
    let (results, recs) = outcome(9);
    // The second batch's fsync fails: the first batch is durable, nothing after.
    assert_eq!(results[0], 7);
    assert_eq!(results[1], 0);
    assert!(recs.len() >= 7, "{}", recs.len());
    for seed in [9, 9, 10] {
        let (again, _) = outcome(seed);
        assert_eq!(again, results);
    }
    assert_eq!(outcome(9).1, recs, "the same power loss for the same seed");
}

/// A log with one durable record, then a disk with no room for a second segment and 20
/// records of 4000 bytes appended (they need one): the log, its appender, the last Lsn.
fn full_after_first(sim: &SimStorage, config: &WalConfig) -> (Wal, wharf_wal::Appender, Lsn) {
    let (wal, _) = open_with(sim, config);
    let appender = wal.appender();
    appender.append_durable(1, b"first").unwrap();
    sim.set_capacity(Some(sim.used_bytes() + 1024));
    let big = vec![7u8; 4000];
    let mut last = Lsn(0);
    for _ in 0..20 {
        last = appender.append(1, &big).unwrap().lsn;
    }
    (wal, appender, last)
}

#[test]
fn a_full_disk_is_returned_to_the_waiter_and_the_next_wait_retries() {
    let sim = SimStorage::new(3);
    let (wal, appender, last) = full_after_first(&sim, &config());
    let err = appender.wait_durable(last).unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    assert!(appender.disk_full());
    assert!(appender.failure().is_none(), "a full disk is not latched");
    sim.set_capacity(None);
    appender.wait_durable(last).unwrap();
    assert!(!appender.disk_full());
    drop(appender);
    wal.close().unwrap();
    let (_, recs) = open(&sim);
    assert_eq!(recs.len(), 21);
}

/// A waker that records whether it was woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// S-DUR-3, S-DISK-2: an async waiter of an inline log does not fail on a full disk (the
/// server would stop on it); it waits, as a waiter of a paused writer thread does, and
/// `retry_now` (the resource monitor's nudge) wakes it to try again. Appends past the pending
/// bound are taken meanwhile (no caller wedges), and everything is written once space is back.
#[test]
fn s_disk_2_a_full_disk_keeps_the_future_waiting_until_retry_now() {
    use std::future::Future;
    use std::sync::atomic::{AtomicBool, Ordering};
    let sim = SimStorage::new(4);
    let small = WalConfig {
        pending_bytes_max: 64 * 1024,
        ..config()
    };
    let (wal, appender, mut last) = full_after_first(&sim, &small);
    let big = vec![7u8; 4000];
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = std::task::Waker::from(Arc::clone(&flag));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut durable = std::pin::pin!(appender.durable(last));
    assert!(durable.as_mut().poll(&mut cx).is_pending());
    assert!(appender.disk_full());
    assert!(appender.failure().is_none(), "a full disk is not latched");
    // Ten times what the pending buffer holds: taken, not refused, not blocking.
    for _ in 0..160 {
        last = appender.append(1, &big).unwrap().lsn;
    }
    appender.retry_now();
    assert!(flag.0.swap(false, Ordering::SeqCst), "retry_now wakes it");
    assert!(durable.as_mut().poll(&mut cx).is_pending(), "still full");
    sim.set_capacity(None);
    appender.retry_now();
    assert!(flag.0.swap(false, Ordering::SeqCst));
    assert!(matches!(
        durable.as_mut().poll(&mut cx),
        std::task::Poll::Ready(Ok(()))
    ));
    assert!(!appender.disk_full());
    appender.wait_durable(last).unwrap();
    drop(appender);
    wal.close().unwrap();
    let (_, recs) = open(&sim);
    assert_eq!(recs.len(), 181);
}
