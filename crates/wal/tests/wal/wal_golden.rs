//! The examples in `storage-format.md` are the encoder's output, byte for byte: this test reads
//! the hex blocks from the document itself, so the document and the code cannot drift apart.
//! It also checks that a log written through the public API starts with exactly those bytes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a panic is the test failing"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wharf_wal::{DurableMark, MARK_FILE_NAME, MarkState, RecoveryError, RecoveryMode};
use wharf_wal::{FrameFields, SegmentHeader, encode_frame, encode_segment_header};
use wharf_wal::{Lsn, SegmentId, SimStorage, Wal, WalConfig, segment_file_name};
use wharf_wal::{Storage, encode_mark, read_mark};

/// The bytes of the fenced block after `<!-- golden:{name} -->` in storage-format.md.
fn golden(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../storage-format.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let marker = format!("<!-- golden:{name} -->");
    let after = &doc[doc.find(&marker).expect("marker in storage-format.md") + marker.len()..];
    let block = after
        .split("```")
        .nth(1)
        .expect("fenced block after marker");
    block
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

#[test]
fn segment_header_matches_the_document() {
    let header = encode_segment_header(SegmentHeader {
        segment_id: SegmentId(0),
        first_lsn: Lsn(1),
    });
    assert_eq!(header.to_vec(), golden("segment-header"));
}

#[test]
fn record_frame_matches_the_document() {
    let mut out = Vec::new();
    let fields = FrameFields {
        lsn: Lsn(1),
        kind: 7,
        group_delta: 0,
    };
    encode_frame(&mut out, fields, b"hello", crc32fast::hash(b"hello"));
    assert_eq!(out, golden("record"));
}

fn unpreallocated() -> WalConfig {
    WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        ..WalConfig::default()
    }
}

/// A fresh log holding the record "hello" of kind 7, closed cleanly.
fn hello_log() -> (SimStorage, PathBuf) {
    let sim = SimStorage::new(1);
    let dir = PathBuf::from("/golden");
    let config = unpreallocated();
    let (wal, _) = Wal::open(&dir, Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap();
    wal.appender().append_durable(7, b"hello").unwrap();
    wal.close().unwrap();
    (sim, dir)
}

#[test]
fn a_fresh_log_starts_with_the_documented_bytes() {
    let (sim, dir) = hello_log();
    let bytes = sim
        .file_bytes(&dir.join(segment_file_name(SegmentId(0))))
        .unwrap();
    let mut expected = golden("segment-header");
    expected.extend(golden("record"));
    assert_eq!(bytes, expected);
}

#[test]
fn s_disk_6_the_durable_mark_of_a_clean_stop_matches_the_document() {
    let (sim, dir) = hello_log();
    let mark = sim.file_bytes(&dir.join(MARK_FILE_NAME)).unwrap();
    assert_eq!(mark.len(), 552);
    assert_eq!(mark[..40].to_vec(), golden("durable-mark"));
    assert_eq!(mark[512..].to_vec(), golden("durable-mark"));
    let expected = DurableMark {
        lsn: Lsn(1),
        segment: SegmentId(0),
        end: 58,
        clean: true,
    };
    assert_eq!(encode_mark(expected).to_vec(), golden("durable-mark"));
}

/// A version-1 log (no mark) is read as before: its torn tail is cut by the write-group rule
/// alone, the first open creates the mark, and the next start knows where the log ended.
#[test]
fn s_disk_6_a_version_1_log_without_mark_is_read_as_before() {
    let sim = SimStorage::new(2);
    let dir = PathBuf::from("/v1");
    let segment = dir.join(segment_file_name(SegmentId(0)));
    let mut bytes = golden("segment-header-v1");
    bytes.extend(golden("record"));
    bytes.extend([9u8; 13]); // a torn write after the record
    sim.create_dir_all(&dir).unwrap();
    sim.set_file_bytes(&segment, bytes);
    let config = unpreallocated();
    let mut lsns = Vec::new();
    let (wal, report) = Wal::open(&dir, Arc::new(sim.clone()), &config, &mut |r| {
        lsns.push(r.lsn);
        Ok(())
    })
    .unwrap();
    assert_eq!(lsns, [Lsn(1)]);
    assert_eq!(report.durable_mark, MarkState::Missing);
    assert_eq!(report.torn_tail.unwrap().offset, 58);
    wal.close().unwrap();
    assert!(matches!(
        read_mark(&sim, &dir).unwrap(),
        MarkState::Found(m) if m.lsn == Lsn(1) && m.clean
    ));
}

/// A log whose newest segment says version 2 must have its mark: without it wharf cannot tell
/// a torn tail from lost data, refuses, and only salvage mode starts (and says so).
#[test]
fn s_disk_6_a_version_2_log_without_its_mark_is_refused() {
    let sim = SimStorage::new(3);
    let dir = PathBuf::from("/v2");
    let config = WalConfig {
        segment_bytes_max: 4096,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(&dir, Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap();
    wal.appender().append_durable(7, b"hello").unwrap();
    wal.close().unwrap();
    sim.remove(&dir.join(MARK_FILE_NAME)).unwrap();
    let err = Wal::open(&dir, Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap_err();
    assert!(matches!(err, RecoveryError::MarkMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("--salvage"), "{err}");
    let salvage = WalConfig {
        recovery_mode: RecoveryMode::Salvage,
        ..config
    };
    let (wal, report) = Wal::open(&dir, Arc::new(sim), &salvage, &mut |_| Ok(())).unwrap();
    assert!(report.mark_missing);
    wal.close().unwrap();
}

/// S-BIG-3: a version-2 log (its mark included) is read as it is by a version-3 build, which
/// appends to it; a record larger than a segment's room then gets a segment of its own (the
/// first to say version 3), whole, and the next record starts the segment after it; all of
/// it reads back after a restart.
#[test]
fn s_big_3_a_version_2_log_is_read_and_a_record_larger_than_a_segment_gets_its_own() {
    let sim = SimStorage::new(4);
    let dir = PathBuf::from("/v2-big");
    let mut segment = golden("segment-header-v2");
    segment.extend(golden("record"));
    let mut mark = golden("durable-mark");
    mark.resize(512, 0);
    mark.extend(golden("durable-mark"));
    sim.create_dir_all(&dir).unwrap();
    sim.set_file_bytes(&dir.join(segment_file_name(SegmentId(0))), segment);
    sim.set_file_bytes(&dir.join(MARK_FILE_NAME), mark);
    let config = WalConfig {
        segment_bytes_max: 4096,
        ..unpreallocated()
    };
    let big: Vec<u8> = (0..=250u8).cycle().take(3 * 4096).collect();
    let (wal, _) = Wal::open(&dir, Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap();
    let app = wal.appender();
    let tail = bytes::Bytes::from(big.clone());
    let at = app.append_parts(8, b"head", &tail).unwrap();
    let after = app.append(9, b"next").unwrap();
    app.wait_durable(after.lsn).unwrap();
    wal.close().unwrap();
    assert_eq!(
        at.position.offset, 32,
        "alone, right after its segment's header"
    );
    assert_eq!(after.position.segment, at.position.segment.next());
    let own = sim
        .file_bytes(&dir.join(segment_file_name(at.position.segment)))
        .unwrap();
    assert_eq!(own[8], 3, "the new segment says version 3");
    assert_eq!(own.len(), 32 + 21 + 4 + big.len());
    let mut records = Vec::new();
    let (wal, _) = Wal::open(&dir, Arc::new(sim), &config, &mut |r| {
        records.push((r.lsn, r.kind, r.payload.to_vec()));
        Ok(())
    })
    .unwrap();
    wal.close().unwrap();
    let mut expected = b"head".to_vec();
    expected.extend(&big);
    assert_eq!(
        records,
        [
            (Lsn(1), 7, b"hello".to_vec()),
            (Lsn(2), 8, expected),
            (Lsn(3), 9, b"next".to_vec())
        ]
    );
}
