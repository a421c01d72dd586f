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

use wharf_wal::{FrameFields, SegmentHeader, encode_frame, encode_segment_header};
use wharf_wal::{Lsn, SegmentId, SimStorage, Wal, WalConfig, segment_file_name};

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

#[test]
fn a_fresh_log_starts_with_the_documented_bytes() {
    let sim = SimStorage::new(1);
    let dir = PathBuf::from("/golden");
    let config = WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(&dir, Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap();
    wal.appender().append_durable(7, b"hello").unwrap();
    wal.close().unwrap();
    let bytes = sim
        .file_bytes(&dir.join(segment_file_name(SegmentId(0))))
        .unwrap();
    let mut expected = golden("segment-header");
    expected.extend(golden("record"));
    assert_eq!(bytes, expected);
}
