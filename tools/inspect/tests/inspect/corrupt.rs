//! Damaged copies of the golden log: a flipped byte in a sealed segment, a truncated last
//! segment, a deleted middle segment, and random flips. `verify` must name the right file and
//! offset, exit non-zero, and never panic; the fatal cases (no directory, not a data
//! directory, a newer format) exit 2.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use crate::common;

use std::path::Path;

use common::{copy_dir, golden_dir, inspect};
use proptest::prelude::*;
use serde_json::Value as Json;

fn golden_data() -> std::path::PathBuf {
    golden_dir().join("basic").join("data")
}

/// (file, offset) of every record of the clean log, from `dump --json`.
fn records(dir: &Path) -> Vec<(String, u64)> {
    let (code, out) = inspect(&["--json", "dump", dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    out.lines()
        .map(|l| {
            let v: Json = serde_json::from_str(l).unwrap();
            (
                v["file"].as_str().unwrap().to_owned(),
                v["offset"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn verify_all(dir: &Path) -> (i32, Json) {
    let (code, out) = inspect(&["--json", "verify", dir.to_str().unwrap(), "--all"]);
    (code, serde_json::from_str(out.trim()).unwrap())
}

fn seg(dir: &Path, id: u64) -> std::path::PathBuf {
    dir.join(format!("{id:020}.wal"))
}

#[test]
fn s_dur_7_flipped_byte_in_a_sealed_segment_is_named_by_file_and_frame_offset() {
    let tmp = copy_dir(&golden_data());
    let dir = tmp.path();
    let path = seg(dir, 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    // The frame holding the flipped byte: the last record of segment 1 starting at or before it.
    let clean = copy_dir(&golden_data());
    let frame = records(clean.path())
        .into_iter()
        .filter(|(f, o)| f.ends_with("00000000000000000001.wal") && *o <= mid as u64)
        .map(|(_, o)| o)
        .max()
        .unwrap();
    let (code, report) = verify_all(dir);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["clean"], Json::Bool(false));
    let first = &report["findings"][0];
    assert_eq!(first["file"].as_str().unwrap(), path.display().to_string());
    assert_eq!(first["offset"].as_u64().unwrap(), frame, "{report}");
    assert_eq!(first["severity"], "error");
    // Without --all only the first problem is listed, with the count.
    let (code, out) = inspect(&["--json", "verify", dir.to_str().unwrap()]);
    assert_eq!(code, 1);
    let v: Json = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 1);
    assert_eq!(&v["findings"][0], first);
}

#[test]
fn truncated_last_segment_is_a_torn_tail_at_the_last_record() {
    let tmp = copy_dir(&golden_data());
    let dir = tmp.path();
    let last = records(dir).last().cloned().unwrap();
    let path = seg(dir, 2);
    assert!(last.0.ends_with("00000000000000000002.wal"));
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(last.1 + 5).unwrap();
    let (code, report) = verify_all(dir);
    assert_eq!(code, 1, "{report}");
    let f = &report["findings"][0];
    assert_eq!(f["file"].as_str().unwrap(), path.display().to_string());
    assert_eq!(f["offset"].as_u64().unwrap(), last.1);
    assert_eq!(f["severity"], "warning");
    assert!(f["problem"].as_str().unwrap().contains("torn tail"));
    // summary says recovery would cut it.
    let (code, out) = inspect(&["--json", "summary", dir.to_str().unwrap(), "--now", "0"]);
    assert_eq!(code, 0);
    let s: Json = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        s["recovery"]["torn_tail"]["offset"].as_u64().unwrap(),
        last.1
    );
}

#[test]
fn deleted_middle_segment_is_named_and_its_orphans_are_listed() {
    let tmp = copy_dir(&golden_data());
    let dir = tmp.path();
    std::fs::remove_file(seg(dir, 1)).unwrap();
    let (code, report) = verify_all(dir);
    assert_eq!(code, 1, "{report}");
    let findings = report["findings"].as_array().unwrap();
    let first = &findings[0];
    assert_eq!(
        first["file"].as_str().unwrap(),
        seg(dir, 2).display().to_string()
    );
    assert_eq!(first["offset"].as_u64().unwrap(), 0);
    assert!(
        first["problem"]
            .as_str()
            .unwrap()
            .contains("00000000000000000001.wal")
    );
    // Records of segment 2 that settle messages published in segment 1 no longer fit.
    assert!(
        findings
            .iter()
            .skip(1)
            .any(|f| f["problem"].as_str().unwrap().contains("unknown")),
        "{report}"
    );
}

#[test]
fn a_missing_or_foreign_directory_exits_2() {
    let (code, _) = inspect(&["summary", "/nonexistent/wharf-data"]);
    assert_eq!(code, 2);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"hello").unwrap();
    for cmd in ["summary", "verify", "dump", "queues"] {
        let (code, _) = inspect(&[cmd, tmp.path().to_str().unwrap()]);
        assert_eq!(code, 2, "{cmd}");
    }
}

#[test]
fn a_newer_store_format_exits_2() {
    use std::sync::Arc;
    use wharf_wal::{FileStorage, Wal, WalConfig};
    let tmp = tempfile::tempdir().unwrap();
    let config = WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(tmp.path(), Arc::new(FileStorage), &config, &mut |_| Ok(())).unwrap();
    // A format marker (kind 0x01) announcing store format 99.
    wal.appender()
        .append_durable(0x01, &99u16.to_le_bytes())
        .unwrap();
    wal.close().unwrap();
    let (code, _) = inspect(&["verify", tmp.path().to_str().unwrap()]);
    assert_eq!(code, 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// S-ERR-2: any flipped bytes, any truncation: every command answers, none panics.
    #[test]
    fn random_damage_never_panics(
        flips in prop::collection::vec((0u64..3, any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in prop::option::of((0u64..3, any::<prop::sample::Index>())),
    ) {
        let tmp = copy_dir(&golden_data());
        let dir = tmp.path();
        for (id, at, mask) in flips {
            let path = seg(dir, id);
            let mut bytes = std::fs::read(&path).unwrap();
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
            std::fs::write(&path, &bytes).unwrap();
        }
        let cut_some = cut.is_some();
        if let Some((id, at)) = cut {
            let path = seg(dir, id);
            let len = std::fs::metadata(&path).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(at.index(usize::try_from(len).unwrap()) as u64).unwrap();
        }
        let d = dir.to_str().unwrap();
        for args in [
            vec!["verify", d, "--all"],
            vec!["summary", d, "--now", "0"],
            vec!["queues", d, "--now", "0"],
            vec!["dump", d],
            vec!["trace", d, "3"],
        ] {
            let (code, _) = inspect(&args);
            prop_assert!((0..=2).contains(&code), "{args:?} exit {code}");
        }
        // A cut at a record boundary may remove the flips with it; without one, every byte
        // is in a checksummed header or frame, so the damage is always found.
        if !cut_some {
            let (code, _) = inspect(&["verify", d]);
            prop_assert_ne!(code, 0, "damage must not verify clean");
        }
    }
}

#[test]
fn every_command_leaves_the_directory_unchanged() {
    let tmp = copy_dir(&golden_data());
    let dir = tmp.path();
    let snapshot = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    };
    let before = snapshot();
    let d = dir.to_str().unwrap();
    for args in [
        vec!["summary", d],
        vec!["--progress", "verify", d, "--all"],
        vec!["dump", d],
        vec!["trace", d, "2"],
        vec!["queues", d],
        vec!["export", d, "--queue", "dlq"],
    ] {
        let (code, _) = inspect(&args);
        assert!(code == 0, "{args:?}");
    }
    assert!(
        before == snapshot(),
        "the inspector wrote to the data directory"
    );
}

/// S-DISK-6 and S-DISK-8: with a durable mark naming the last record (as a clean stop leaves
/// it), the same truncation is damage to synced data, not a torn tail: `verify` says so, with
/// the number of durable records lost and `wharf --salvage` as the way forward, as the broker's
/// refusal does.
#[test]
fn s_disk_6_truncation_before_the_durable_mark_is_damage_not_a_torn_tail() {
    let tmp = copy_dir(&golden_data());
    let dir = tmp.path();
    let (code, out) = inspect(&["--json", "dump", dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    let last: Json = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let last_lsn = last["lsn"].as_u64().unwrap();
    let last_offset = last["offset"].as_u64().unwrap();
    let slot = wharf_wal::encode_mark(wharf_wal::DurableMark {
        lsn: wharf_wal::Lsn(last_lsn),
        segment: wharf_wal::SegmentId(2),
        end: std::fs::metadata(seg(dir, 2)).unwrap().len(),
        clean: true,
    });
    let mut mark = vec![0u8; 552];
    mark[..40].copy_from_slice(&slot);
    mark[512..].copy_from_slice(&slot);
    std::fs::write(dir.join(wharf_wal::MARK_FILE_NAME), mark).unwrap();
    // Clean with the mark in place: the mark agrees with the log.
    let (code, report) = verify_all(dir);
    assert_eq!(code, 0, "{report}");

    let path = seg(dir, 2);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(last_offset + 5).unwrap();
    let (code, report) = verify_all(dir);
    assert_eq!(code, 1, "{report}");
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "no torn-tail warning besides: {report}");
    let f = &findings[0];
    assert_eq!(f["file"].as_str().unwrap(), path.display().to_string());
    assert_eq!(f["offset"].as_u64().unwrap(), last_offset);
    assert_eq!(f["severity"], "error");
    let problem = f["problem"].as_str().unwrap();
    assert!(
        problem.contains("1 durable (confirmed) record"),
        "{problem}"
    );
    assert!(problem.contains("not a torn"), "{problem}");
    assert!(problem.contains("wharf --salvage"), "{problem}");
}
