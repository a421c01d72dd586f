//! S-DISK-6: the durable mark tells a torn tail (bytes no fsync covered) from damage to synced
//! data. The tail-damage cases of issue #19, on real files after a clean stop: zeroing the last
//! quarter of the last segment, truncating it at 90 %, zeroing its last 4 KiB, flipping one
//! byte of its last record; each is refused with the file, the offset and the number of durable
//! records lost, and salvage mode cuts it and reports the loss. A real torn tail (bytes written
//! after the last fsync, beyond the mark) is still cut.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test helpers: a panic is the test failing; casts are on small test values"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wharf_wal::{
    FileStorage, Lsn, MarkState, RecoveryError, RecoveryMode, RecoveryReport, SegmentId, Wal,
    WalConfig, segment_file_name,
};

const RECORDS: u64 = 2700;

fn config(mode: RecoveryMode) -> WalConfig {
    WalConfig {
        recovery_mode: mode,
        ..WalConfig::default()
    }
}

fn open(dir: &Path, mode: RecoveryMode) -> Result<(Wal, RecoveryReport, u64), RecoveryError> {
    let mut n = 0;
    let (wal, report) = Wal::open(dir, Arc::new(FileStorage), &config(mode), &mut |_| {
        n += 1;
        Ok(())
    })?;
    Ok((wal, report, n))
}

/// A log of `RECORDS` confirmed records (in write groups of ten), stopped cleanly; returns
/// the last segment's path and the offset where each record starts.
fn clean_log(dir: &Path) -> (PathBuf, Vec<u64>) {
    let (wal, _, _) = open(dir, RecoveryMode::Strict).unwrap();
    let app = wal.appender();
    let mut offsets = Vec::new();
    for group in 0..RECORDS / 10 {
        let appended: Vec<_> = (0..10)
            .map(|i| app.append(1, &[(group * 10 + i) as u8; 100]).unwrap())
            .collect();
        app.wait_durable(appended[9].lsn).unwrap();
        offsets.extend(appended.iter().map(|a| a.position.offset));
    }
    wal.close().unwrap();
    (dir.join(segment_file_name(SegmentId(0))), offsets)
}

/// End of the last record (the rest of the file is preallocated zeros).
fn log_end(offsets: &[u64]) -> u64 {
    offsets.last().unwrap() + 21 + 100
}

fn edit(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    change(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// Opens strictly (refused, with the loss counted), then with salvage (opens, the loss
/// reported), then strictly again (the salvaged log is accepted as it now is).
fn refused_then_salvaged(dir: &Path, path: &Path, first_lost: u64) {
    let lost = RECORDS - first_lost + 1;
    match open(dir, RecoveryMode::Strict) {
        Err(RecoveryError::DurableDamage {
            path: p,
            first_lost: f,
            durable,
            records,
            clean,
            ..
        }) => {
            assert_eq!(p, path);
            assert_eq!((f, durable), (Lsn(first_lost), Lsn(RECORDS)));
            assert_eq!((records, clean), (lost, true));
        }
        other => panic!("not refused: {:?}", other.map(|(_, r, n)| (r, n))),
    }
    let err = open(dir, RecoveryMode::Strict).map(|_| ()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&format!("{lost} durable")), "{text}");
    assert!(text.contains("--salvage"), "{text}");
    assert!(text.contains("not a torn tail"), "{text}");

    let (wal, report, n) = open(dir, RecoveryMode::Salvage).unwrap();
    assert_eq!(n, first_lost - 1);
    let salvaged = report.salvaged.last().expect("loss reported");
    assert_eq!(salvaged.lsns, Lsn(first_lost)..Lsn(RECORDS + 1));
    assert_eq!(salvaged.path, path);
    wal.appender().append_durable(1, b"after salvage").unwrap();
    wal.close().unwrap();
    let (_, report, n) = open(dir, RecoveryMode::Strict).unwrap();
    assert_eq!(n, first_lost);
    assert!(report.salvaged.is_empty() && report.torn_tail.is_none());
}

#[test]
fn s_disk_6_zeroing_the_last_quarter_of_the_last_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, offsets) = clean_log(tmp.path());
    let end = log_end(&offsets);
    let from = end - end / 4;
    edit(&path, |b| b[from as usize..end as usize].fill(0));
    let first_lost = offsets.iter().position(|&o| o + 121 > from).unwrap() as u64 + 1;
    refused_then_salvaged(tmp.path(), &path, first_lost);
}

#[test]
fn s_disk_6_truncating_the_last_segment_at_90_percent_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, offsets) = clean_log(tmp.path());
    let cut = log_end(&offsets) * 9 / 10;
    edit(&path, |b| b.truncate(cut as usize));
    let first_lost = offsets.iter().position(|&o| o + 121 > cut).unwrap() as u64 + 1;
    refused_then_salvaged(tmp.path(), &path, first_lost);
}

#[test]
fn s_disk_6_zeroing_the_last_4_kib_of_the_log_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, offsets) = clean_log(tmp.path());
    let end = log_end(&offsets);
    edit(&path, |b| b[(end - 4096) as usize..end as usize].fill(0));
    let first_lost = offsets.iter().position(|&o| o + 121 > end - 4096).unwrap() as u64 + 1;
    refused_then_salvaged(tmp.path(), &path, first_lost);
}

#[test]
fn s_disk_6_one_flipped_byte_in_the_last_record_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, offsets) = clean_log(tmp.path());
    let last = *offsets.last().unwrap();
    edit(&path, |b| b[last as usize + 50] ^= 0xff);
    refused_then_salvaged(tmp.path(), &path, RECORDS);
}

#[test]
fn s_disk_6_a_deleted_last_segment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let config = WalConfig {
        segment_bytes_max: 64 * 1024,
        ..WalConfig::default()
    };
    let storage = Arc::new(FileStorage);
    let (wal, _) = Wal::open(tmp.path(), storage.clone(), &config, &mut |_| Ok(())).unwrap();
    let app = wal.appender();
    let mut last = None;
    for i in 0..1000u32 {
        last = Some(app.append_durable(1, &i.to_le_bytes().repeat(25)).unwrap());
    }
    wal.close().unwrap();
    let last = last.unwrap();
    assert!(last.position.segment.0 > 0);
    std::fs::remove_file(tmp.path().join(segment_file_name(last.position.segment))).unwrap();
    let err = Wal::open(tmp.path(), storage, &config, &mut |_| Ok(())).unwrap_err();
    assert!(
        matches!(err, RecoveryError::DurableDamage { durable, .. } if durable == last.lsn),
        "{err:?}"
    );
}

/// A torn tail the mark does not cover is still only a torn tail: bytes written after the last
/// record the mark names (here: a write group that never got its fsync) are cut with a report.
#[test]
fn s_disk_6_a_torn_tail_beyond_the_mark_is_still_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, offsets) = clean_log(tmp.path());
    let end = log_end(&offsets);
    // Half a frame of a later write group, as a crash mid-write leaves it.
    edit(&path, |b| {
        b[end as usize..end as usize + 4].copy_from_slice(&100u32.to_le_bytes());
        b[end as usize + 4..end as usize + 30].fill(0xab);
    });
    let (wal, report, n) = open(tmp.path(), RecoveryMode::Strict).unwrap();
    assert_eq!(n, RECORDS);
    let torn = report.torn_tail.expect("torn tail cut");
    assert_eq!((torn.path, torn.offset), (path, end));
    assert!(matches!(report.durable_mark, MarkState::Found(m) if m.lsn == Lsn(RECORDS) && m.clean));
    wal.close().unwrap();
}

/// The mark is rewritten after every group commit without a sync of its own: exactly one
/// fsync per batch, as before the mark (every sync of every file is counted). A crash (the
/// process gone, the page cache kept) leaves a mark naming the last confirmed record, so damage
/// to that record is refused there too, not only after a clean stop.
#[test]
fn s_disk_6_the_mark_follows_every_group_commit_without_another_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    let syncs = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&syncs);
    let storage = Arc::new(crate::hooked::SyncHooked {
        inner: FileStorage,
        hook: Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
    });
    let (wal, _) = Wal::open(
        tmp.path(),
        storage,
        &config(RecoveryMode::Strict),
        &mut |_| Ok(()),
    )
    .unwrap();
    let app = wal.appender();
    let opened = syncs.load(Ordering::SeqCst);
    let mut last = None;
    for i in 0..50u8 {
        last = Some(app.append_durable(1, &[i; 64]).unwrap());
    }
    let last = last.unwrap();
    assert_eq!(
        syncs.load(Ordering::SeqCst) - opened,
        50,
        "one fsync per batch"
    );
    // Read while the log is still open, as a crash would leave it.
    match wharf_wal::read_mark(&FileStorage, tmp.path()).unwrap() {
        MarkState::Found(m) => {
            assert_eq!(m.lsn, last.lsn);
            assert!(!m.clean);
            assert_eq!(m.end, last.position.offset + 21 + 64);
        }
        other => panic!("{other:?}"),
    }
    wal.close().unwrap();
}
