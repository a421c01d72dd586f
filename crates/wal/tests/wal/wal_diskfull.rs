//! A full disk pauses the write-ahead log instead of failing it (S-DUR-3: nothing confirmed is
//! harmed). Method: `SimStorage` with a capacity; segments are small (4 KiB) so that a roll
//! happens within a few records. Each test fills the disk so that the next segment cannot be
//! reserved, checks that the writer reports `disk_full` and holds the records (none reported
//! durable, none failed), gives the space back and checks that every record, those
//! acknowledged before and those held, comes back exactly once and in order.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test helpers: a panic is the test failing; casts are on small test values"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wharf_wal::{
    Appended, Appender, Lsn, RecordRef, SimStorage, Wal, WalConfig, WalError, segment_file_name,
};

const SEGMENT_BYTES: u64 = 4096;
const PAYLOAD_BYTES: usize = 200;

fn dir() -> PathBuf {
    PathBuf::from("/sim/wal")
}

fn config(preallocate: bool) -> WalConfig {
    WalConfig {
        segment_bytes_max: SEGMENT_BYTES,
        preallocate,
        ..WalConfig::default()
    }
}

fn open(sim: &SimStorage, preallocate: bool) -> (Wal, Vec<(Lsn, Vec<u8>)>) {
    let mut recs = Vec::new();
    let (wal, _report) = Wal::open(
        &dir(),
        Arc::new(sim.clone()),
        &config(preallocate),
        &mut |r: RecordRef<'_>| {
            recs.push((r.lsn, r.payload.to_vec()));
            Ok(())
        },
    )
    .unwrap();
    (wal, recs)
}

fn payload(i: u64) -> Vec<u8> {
    (0..PAYLOAD_BYTES).map(|j| (i as u8) ^ (j as u8)).collect()
}

/// Waits (bounded) until the writer reports the disk full: an event of the writer thread.
fn wait_disk_full(appender: &Appender) {
    // Bounded: at most 5000 polls of 2 ms.
    for _ in 0..5000 {
        if appender.disk_full() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("the writer never reported the disk full");
}

/// Appends durably until the active segment has no room for another record, then fills the
/// disk; returns the records acknowledged so far.
fn fill_first_segment_then_the_disk(sim: &SimStorage, appender: &Appender) -> Vec<Appended> {
    let mut acked = Vec::new();
    for i in 0.. {
        let a = appender.append_durable(1, &payload(i)).unwrap();
        acked.push(a);
        // The next frame (header + payload) would not fit: it rolls.
        if a.position.offset + 2 * (PAYLOAD_BYTES as u64 + 64) > SEGMENT_BYTES {
            break;
        }
    }
    assert_eq!(
        acked[0].position.segment,
        acked.last().unwrap().position.segment
    );
    sim.set_capacity(Some(sim.used_bytes()));
    acked
}

fn check_recovered(recs: &[(Lsn, Vec<u8>)], expected: u64) {
    assert_eq!(
        recs.len() as u64,
        expected,
        "nothing lost, nothing duplicated"
    );
    for (i, (lsn, bytes)) in recs.iter().enumerate() {
        assert_eq!(*lsn, Lsn(i as u64 + 1), "in order");
        assert_eq!(bytes, &payload(i as u64), "record {lsn} intact");
    }
}

fn s_dur_3_full_disk_pauses_then_resumes(preallocate: bool) {
    let sim = SimStorage::new(7);
    let (wal, recs) = open(&sim, preallocate);
    assert!(recs.is_empty());
    let appender = wal.appender();
    let acked = fill_first_segment_then_the_disk(&sim, &appender);
    let durable_before = appender.durable_lsn();
    assert_eq!(durable_before, acked.last().unwrap().lsn);

    // These need a new segment, which cannot be reserved: held, not failed.
    let first_held = acked.len() as u64;
    let held: Vec<Appended> = (first_held..first_held + 20)
        .map(|i| appender.append(1, &payload(i)).unwrap())
        .collect();
    wait_disk_full(&appender);
    assert!(appender.failure().is_none(), "a full disk is not a failure");
    assert_eq!(
        appender.durable_lsn(),
        durable_before,
        "held records are not durable"
    );
    assert_ne!(held[0].position.segment, acked[0].position.segment);
    let new_segment = dir().join(segment_file_name(held[0].position.segment));
    assert!(
        sim.file_bytes(&new_segment).is_none(),
        "the segment that found no space is removed"
    );
    // Appends keep being taken while paused (up to the pending bound).
    let more = appender.append(1, &payload(first_held + 20)).unwrap();
    // Everything acknowledged reads back intact meanwhile.
    let reader = wal.reader();
    for (i, a) in acked.iter().enumerate() {
        assert_eq!(
            reader.read_at(a.position).unwrap().payload,
            payload(i as u64)
        );
    }

    sim.set_capacity(None);
    appender.retry_now();
    appender.wait_durable(more.lsn).unwrap();
    assert!(!appender.disk_full());
    assert!(appender.failure().is_none());
    wal.close().unwrap();

    let (wal, recs) = open(&sim, preallocate);
    check_recovered(&recs, more.lsn.0);
    wal.close().unwrap();
}

#[test]
fn s_dur_3_a_full_disk_pauses_appends_and_space_resumes_them() {
    s_dur_3_full_disk_pauses_then_resumes(true);
}

#[test]
fn s_dur_3_a_full_disk_pauses_appends_without_preallocation_too() {
    s_dur_3_full_disk_pauses_then_resumes(false);
}

#[test]
fn s_dur_3_power_loss_while_paused_keeps_every_acknowledged_record() {
    let sim = SimStorage::new(11);
    let (wal, _) = open(&sim, true);
    let appender = wal.appender();
    let acked = fill_first_segment_then_the_disk(&sim, &appender);
    let first_held = acked.len() as u64;
    for i in first_held..first_held + 5 {
        appender.append(1, &payload(i)).unwrap();
    }
    wait_disk_full(&appender);
    let rebooted = sim.power_loss();
    drop(wal);
    rebooted.set_capacity(None);
    let (wal, recs) = open(&rebooted, true);
    // The held records were never acknowledged and never written: only the acknowledged
    // ones come back.
    check_recovered(&recs, acked.len() as u64);
    // The log goes on after them.
    let next = wal
        .appender()
        .append_durable(1, &payload(first_held))
        .unwrap();
    assert_eq!(next.lsn, Lsn(first_held + 1));
    wal.close().unwrap();
}

#[test]
fn closing_while_the_disk_is_full_fails_only_the_held_records() {
    let sim = SimStorage::new(13);
    let (wal, _) = open(&sim, true);
    let appender = wal.appender();
    let acked = fill_first_segment_then_the_disk(&sim, &appender);
    let held = appender.append(1, &payload(acked.len() as u64)).unwrap();
    wait_disk_full(&appender);
    let err = wal.close().unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    assert!(matches!(
        appender.wait_durable(held.lsn),
        Err(WalError::Failed { .. })
    ));
    appender.wait_durable(acked.last().unwrap().lsn).unwrap();
    sim.set_capacity(None);
    let (wal, recs) = open(&sim, true);
    check_recovered(&recs, acked.len() as u64);
    wal.close().unwrap();
}

#[test]
fn opening_on_a_full_disk_waits_for_space_before_writing_again() {
    // Without preallocation, so that the active segment's file is short and its reservation
    // is what the disk lacks (a preallocated one already holds its zeros).
    let sim = SimStorage::new(17);
    let (wal, _) = open(&sim, false);
    let appender = wal.appender();
    for i in 0..3 {
        appender.append_durable(1, &payload(i)).unwrap();
    }
    wal.close().unwrap();
    // After a power loss the active segment's reservation is gone and the disk is full: it
    // cannot be reserved again, so nothing more may be written into it.
    let sim = sim.power_loss();
    sim.set_capacity(Some(sim.used_bytes()));
    let (wal, recs) = open(&sim, false);
    check_recovered(&recs, 3);
    let appender = wal.appender();
    let held = appender.append(1, &payload(3)).unwrap();
    assert_eq!(held.position.segment.0, 1, "the first record rolls");
    wait_disk_full(&appender);
    sim.set_capacity(None);
    appender.retry_now();
    appender.wait_durable(held.lsn).unwrap();
    wal.close().unwrap();
    let (wal, recs) = open(&sim, false);
    check_recovered(&recs, 4);
    wal.close().unwrap();
}

#[test]
fn a_write_error_inside_a_segment_stays_fail_stop() {
    let sim = SimStorage::new(19);
    let (wal, _) = open(&sim, false);
    let appender = wal.appender();
    appender.append_durable(1, &payload(0)).unwrap();
    sim.fail_write_after(0);
    let err = appender.append_durable(1, &payload(1)).unwrap_err();
    assert!(matches!(err, WalError::Failed { .. }), "{err}");
    assert!(!err.is_disk_full());
    assert!(!appender.disk_full());
    assert!(appender.append(1, &payload(2)).is_err(), "latched");
}
