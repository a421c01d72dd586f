//! What the simulation found, each reduced to the few steps that show it.

use std::path::PathBuf;
use std::sync::Arc;

use wharf_wal::{RecordRef, SimStorage, Wal, WalConfig};

fn open(sim: &SimStorage) -> Result<(Wal, u64), wharf_wal::RecoveryError> {
    let mut n = 0u64;
    let config = WalConfig {
        segment_bytes_max: wharf_wal::SEGMENT_BYTES_MIN,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(
        &PathBuf::from("/sim/wal"),
        Arc::new(sim.clone()),
        &config,
        &mut |_: RecordRef<'_>| {
            n += 1;
            Ok(())
        },
    )?;
    Ok((wal, n))
}

/// S-DISK-6: only bytes that no fsync covered can be a torn tail, and a torn tail is cut,
/// never refused. A process dies after writing records whose fsync failed (they are in the
/// page cache, never synced); the next start reads them (they are intact) and recovers them;
/// then the power goes before anyone syncs them. The start after that must cut them as a
/// torn tail, not refuse to start because the durable mark claims them.
#[test]
fn s_disk_6_records_recovered_from_the_page_cache_then_lost_to_power_are_a_torn_tail() {
    let sim = SimStorage::new(7);
    let (wal, _) = open(&sim).unwrap();
    let appender = wal.appender();
    for i in 0..10u8 {
        appender.append_durable(1, &[i; 100]).unwrap();
    }
    sim.fail_sync_after(0);
    for i in 10..15u8 {
        let _ = appender.append(1, &[i; 100]);
    }
    assert!(
        appender.wait_durable(wharf_wal::Lsn(15)).is_err(),
        "the sync fails"
    );
    drop(wal); // the process dies; its unsynced writes stay in the page cache
    let (wal, recovered) = open(&sim).unwrap();
    assert!(recovered >= 10, "{recovered}");
    drop(wal);
    let after_power = sim.power_loss();
    let reopened = open(&after_power);
    assert!(
        reopened.is_ok(),
        "a start refused over records no fsync ever covered: {:?}",
        reopened.err()
    );
}

/// S-DUR-3 (found by seed 73): a write fails while a new segment is being zero-filled (its
/// header is written, its directory entry not yet durable), the process stops (fail-stop) and
/// restarts without a power loss. Recovery adopts that segment as the last one and the new
/// process appends to it and fsyncs its data, but nothing ever fsyncs the directory: after a
/// power loss the segment can vanish with records that were confirmed, and the start is
/// refused (`EndsBeforeDurable`). Seeds of the power loss that drop the entry show it. Fixed:
/// the WAL fsyncs the directory when it reopens the last segment.
#[test]
fn s_dur_3_records_fsynced_into_a_segment_adopted_after_a_failed_roll_survive_power_loss() {
    for seed in 0..16u64 {
        check_failed_roll_then_power(seed);
    }
}

fn check_failed_roll_then_power(seed: u64) {
    let sim = SimStorage::new(seed);
    let (wal, _) = open(&sim).unwrap();
    let appender = wal.appender();
    let len = 3000;
    let mut segment = 0;
    let mut i = 0u8;
    // Append until the next record would need a new segment.
    loop {
        let at = appender.append_durable(1, &vec![i; len]).unwrap();
        i = i.wrapping_add(1);
        if at.position.offset + 2 * (len as u64) > wharf_wal::SEGMENT_BYTES_MIN {
            segment = at.position.segment.0;
            break;
        }
        let _ = segment;
    }
    // The roll's header write succeeds, its zero fill fails.
    sim.fail_write_after(1);
    let _ = appender.append_durable(1, &vec![i; len]);
    let _ = appender.append_durable(1, &vec![i; len]);
    drop(appender);
    drop(wal);
    sim.fail_write_after(u64::MAX);
    let (wal, before) = open(&sim).unwrap_or_else(|e| panic!("seed {seed}: restart: {e:?}"));
    let appender = wal.appender();
    let mut durable = before;
    for _ in 0..3 {
        i = i.wrapping_add(1);
        let at = appender.append_durable(1, &[i; 100]).unwrap();
        assert!(
            at.position.segment.0 > segment,
            "seed {seed}: not in the new segment"
        );
        durable += 1;
    }
    drop(appender);
    drop(wal);
    let after_power = sim.power_loss();
    match open(&after_power) {
        Ok((_, n)) => assert!(
            n >= durable,
            "seed {seed}: {n} records back of {durable} fsynced"
        ),
        Err(e) => panic!("seed {seed}: the start after the power loss is refused: {e:?}"),
    }
}
