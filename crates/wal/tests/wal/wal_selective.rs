//! `scan_selective`: a sealed segment the reader does not want whole hands over only its
//! records of the accepted kinds, exactly those a full scan would hand over, damage included
//! (a step that does not land where a full scan would reads the segment whole).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_truncation,
    reason = "test helpers: a panic is the test failing; casts are on small test values"
)]

use std::path::Path;
use std::sync::Arc;

use wharf_wal::{
    FileStorage, Lsn, Position, RecordRef, RecoveryMode, SegmentId, SegmentPlan, Selective,
    Storage, Wal, WalConfig, segment_file_name,
};

/// A record handed over, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    lsn: Lsn,
    position: Position,
    kind: u8,
    payload: Vec<u8>,
}

/// The kind the selective scans below accept from segments not read whole.
const ACCEPTED: u8 = 3;

/// A log of 600 records of kinds 0..5 over 4 KiB segments (many of them).
fn write_log(dir: &Path) {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage);
    let config = WalConfig {
        segment_bytes_max: 4096,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(dir, storage, &config, &mut |_| Ok(())).unwrap();
    let app = wal.appender();
    for i in 0..600u64 {
        let payload: Vec<u8> = (0..40 + i % 60).map(|j| (i * 7 + j) as u8).collect();
        app.append_durable((i % 5) as u8, &payload).unwrap();
    }
    wal.close().unwrap();
}

fn full(dir: &Path, mode: RecoveryMode) -> (Vec<Rec>, Lsn) {
    let mut recs = Vec::new();
    let report = wharf_wal::scan(&FileStorage, dir, mode, &mut |r: RecordRef<'_>| {
        recs.push(owned(&r));
        Ok(())
    })
    .unwrap();
    (recs, report.next_lsn)
}

fn owned(r: &RecordRef<'_>) -> Rec {
    Rec {
        lsn: r.lsn,
        position: r.position,
        kind: r.kind,
        payload: r.payload.to_vec(),
    }
}

/// Reads odd segments whole (and the last one, always); returns what was handed over, the
/// next Lsn, and the segments asked about with whether their bytes were the file's.
fn selective(dir: &Path, mode: RecoveryMode) -> (Vec<Rec>, Lsn, Vec<(SegmentId, bool)>) {
    let mut recs = Vec::new();
    let mut asked = Vec::new();
    // Windows of 100 bytes: each asked in order, together the whole segment.
    let mut next = (SegmentId(u64::MAX), 0);
    let mut whole = |id: SegmentId, bytes: &[u8], window: std::ops::Range<usize>| {
        if window.start == 0 {
            let file = std::fs::read(dir.join(segment_file_name(id))).unwrap();
            asked.push((id, file == bytes));
        } else {
            assert_eq!((id, window.start), next, "windows in order, none left out");
        }
        assert!(window.end > window.start && window.end <= bytes.len());
        next = (id, window.end);
        id.0 % 2 == 1
    };
    let mut select = Selective {
        covered: Lsn(0),
        whole: &mut whole,
        kinds: &|k| k == ACCEPTED,
        window: 100,
        plan: &mut |_| SegmentPlan::Search,
    };
    let report = wharf_wal::scan_selective(&FileStorage, dir, mode, &mut select, &mut |r| {
        recs.push(owned(&r));
        Ok(())
    })
    .unwrap();
    (recs, report.next_lsn, asked)
}

/// What `selective` must hand over: the full scan's records of the segments read whole, and
/// those of the accepted kind elsewhere.
fn expected(all: &[Rec], last: SegmentId) -> Vec<Rec> {
    all.iter()
        .filter(|r| {
            r.position.segment.0 % 2 == 1 || r.position.segment == last || r.kind == ACCEPTED
        })
        .cloned()
        .collect()
}

fn last_segment(dir: &Path) -> SegmentId {
    *wharf_wal::list_segments(&FileStorage, dir)
        .unwrap()
        .last()
        .unwrap()
}

#[test]
fn a_selective_scan_hands_over_what_a_full_scan_would_of_the_segments_it_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write_log(&dir);
    let segments = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
    assert!(segments.len() > 8, "many segments: {}", segments.len());
    let (all, next) = full(&dir, RecoveryMode::Strict);
    let (got, got_next, asked) = selective(&dir, RecoveryMode::Strict);
    assert_eq!(got, expected(&all, last_segment(&dir)));
    assert!(got.len() < all.len() * 3 / 4, "even segments were skimmed");
    assert_eq!(got_next, next);
    // Asked once per sealed segment, in order, with the segment's bytes.
    let sealed: Vec<(SegmentId, bool)> = segments[..segments.len() - 1]
        .iter()
        .map(|s| (*s, true))
        .collect();
    assert_eq!(asked, sealed);
}

/// Offsets of the frames of segment `id` of kind `kind` (a full scan's positions).
fn frames_of(all: &[Rec], id: SegmentId, kind: Option<u8>) -> Vec<u64> {
    all.iter()
        .filter(|r| r.position.segment == id && kind.is_none_or(|k| r.kind == k))
        .map(|r| r.position.offset)
        .collect()
}

#[test]
fn damage_in_a_skimmed_segment_changes_nothing_a_full_salvage_scan_would_hand_over() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("log");
    write_log(&clean);
    let (all, _) = full(&clean, RecoveryMode::Strict);
    let skimmed = SegmentId(2);
    // A frame's length field (the step lands elsewhere), an accepted frame's payload (its CRC
    // fails), another frame's payload (not read by the skim, dropped by the full scan).
    let length = frames_of(&all, skimmed, Some(1))[0];
    let accepted = frames_of(&all, skimmed, Some(ACCEPTED))[0] + 30;
    let other = frames_of(&all, skimmed, Some(4))[0] + 30;
    for (case, at) in [("length", length), ("accepted", accepted), ("other", other)] {
        let dir = tmp.path().join(case);
        std::fs::create_dir(&dir).unwrap();
        for entry in std::fs::read_dir(&clean).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        let path = dir.join(segment_file_name(skimmed));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at as usize] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        let (salvaged, next) = full(&dir, RecoveryMode::Salvage);
        assert!(
            salvaged.len() < all.len(),
            "{case}: the damage loses a record"
        );
        let (got, got_next, _) = selective(&dir, RecoveryMode::Salvage);
        // A step that does not land, or an accepted frame that does not check, reads the
        // segment whole; damage the skim steps over does not.
        let mut want = expected(&salvaged, last_segment(&dir));
        if case != "other" {
            want = salvaged
                .iter()
                .filter(|r| r.position.segment == skimmed || want.contains(r))
                .cloned()
                .collect();
        }
        assert_eq!(got, want, "{case}");
        assert_eq!(got_next, next, "{case}");
    }
}

/// `scan_selective` with `plan`, searching (and reading whole) nothing when a plan falls
/// back: returns the records handed over, the next Lsn, and the segments searched.
fn planned(
    dir: &Path,
    plan: &mut dyn FnMut(SegmentId) -> SegmentPlan,
) -> (Vec<Rec>, Lsn, Vec<SegmentId>) {
    let mut recs = Vec::new();
    let mut searched = Vec::new();
    let mut whole = |id: SegmentId, _: &[u8], window: std::ops::Range<usize>| {
        if window.start == 0 {
            searched.push(id);
        }
        false
    };
    let mut select = Selective {
        covered: Lsn(0),
        whole: &mut whole,
        kinds: &|k| k == ACCEPTED,
        window: 100,
        plan,
    };
    let report = wharf_wal::scan_selective(
        &FileStorage,
        dir,
        RecoveryMode::Strict,
        &mut select,
        &mut |r| {
            recs.push(owned(&r));
            Ok(())
        },
    )
    .unwrap();
    (recs, report.next_lsn, searched)
}

#[test]
fn a_planned_segment_hands_over_only_the_frames_named_and_falls_back_when_they_do_not_check() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    write_log(&dir);
    let (all, next) = full(&dir, RecoveryMode::Strict);
    let segments = wharf_wal::list_segments(&FileStorage, &dir).unwrap();
    let last = last_segment(&dir);
    let next_first = |id: SegmentId| {
        wharf_wal::read_segment_header(&FileStorage, &dir, SegmentId(id.0 + 1))
            .unwrap()
            .first_lsn
    };
    // Odd segments read whole, even ones by their accepted frames only: none searched.
    let (got, got_next, searched) = planned(&dir, &mut |id| {
        if id.0 % 2 == 1 {
            SegmentPlan::Whole
        } else {
            SegmentPlan::Only {
                offsets: frames_of(&all, id, Some(ACCEPTED)),
                next_first: next_first(id),
            }
        }
    });
    assert_eq!(got, expected(&all, last));
    assert_eq!(got_next, next);
    assert!(searched.is_empty(), "{searched:?}");
    // What does not check falls back to the search: an offset that is no frame's, a frame
    // out of order, a wrong next Lsn.
    let bad = segments[2];
    let frames = frames_of(&all, bad, Some(ACCEPTED));
    let cases: [(&str, Vec<u64>, Lsn); 3] = [
        ("offset", vec![frames[0] + 1], next_first(bad)),
        (
            "order",
            frames.iter().rev().copied().collect(),
            next_first(bad),
        ),
        ("next", frames.clone(), Lsn(next_first(bad).0 + 1)),
    ];
    for (case, offsets, lsn) in cases {
        let mut offsets = Some(offsets);
        let (got, got_next, searched) = planned(&dir, &mut |id| {
            if id == bad {
                SegmentPlan::Only {
                    offsets: offsets.take().unwrap(),
                    next_first: lsn,
                }
            } else {
                SegmentPlan::Only {
                    offsets: frames_of(&all, id, Some(ACCEPTED)),
                    next_first: next_first(id),
                }
            }
        });
        let want: Vec<Rec> = all
            .iter()
            .filter(|r| r.kind == ACCEPTED || r.position.segment == last)
            .cloned()
            .collect();
        assert_eq!(got, want, "{case}");
        assert_eq!(got_next, next, "{case}");
        assert_eq!(searched, vec![bad], "{case}");
    }
}
