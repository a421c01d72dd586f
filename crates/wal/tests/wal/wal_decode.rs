//! Decoder robustness (STYLE 3.4, S-ERR-2): arbitrary bytes and mutations of valid segments,
//! fed to the frame and header decoders, the recovery scan (strict and salvage) and
//! `read_at`, never panic. Errors are fine; a panic or a hang is the failure. This is the CI
//! side of the fuzz targets (proptest, bounded cases).

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test helpers: a panic is the test failing; casts on small test values"
)]

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use wharf_wal::{
    Position, RecoveryMode, SegmentHeader, SegmentId, SimStorage, Wal, WalConfig,
    check_segment_header, decode_frame, encode_segment_header, peek_payload_len, scan,
    segment_file_name,
};

fn dir() -> PathBuf {
    PathBuf::from("/fuzz")
}

/// A valid log of a few records over small segments, as the starting point for mutations.
fn valid_log(records: usize) -> SimStorage {
    let sim = SimStorage::new(9);
    let config = WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        ..WalConfig::default()
    };
    let (wal, _) = Wal::open(&dir(), Arc::new(sim.clone()), &config, &mut |_| Ok(())).unwrap();
    for i in 0..records {
        let body = vec![i as u8; 40 + i * 13 % 300];
        wal.appender().append_durable(i as u8, &body).unwrap();
    }
    wal.close().unwrap();
    sim
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0..8u8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..32)
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Flip { at, bit } => {
            let i = at % bytes.len();
            bytes[i] ^= 1 << bit;
        }
        Mutation::Set { at, byte } => {
            let i = at % bytes.len();
            bytes[i] = *byte;
        }
        Mutation::Truncate { at } => bytes.truncate(at % bytes.len()),
        Mutation::Insert { at, bytes: ins } => {
            let i = at % bytes.len();
            bytes.splice(i..i, ins.iter().copied());
        }
    }
}

/// Runs everything that reads segment bytes over the disk; only panics matter.
fn read_everything(sim: &SimStorage, positions: &[u64]) {
    for mode in [RecoveryMode::Strict, RecoveryMode::Salvage] {
        let mut n = 0u64;
        let _ = scan(sim, &dir(), mode, &mut |r| {
            n += 1;
            assert!(r.payload.len() <= wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX);
            Ok(())
        });
    }
    let config = WalConfig {
        segment_bytes_max: 4096,
        preallocate: false,
        recovery_mode: RecoveryMode::Salvage,
        ..WalConfig::default()
    };
    if let Ok((wal, _)) = Wal::open(&dir(), Arc::new(sim.clone()), &config, &mut |_| Ok(())) {
        let reader = wal.reader();
        for &offset in positions {
            for segment in 0..3 {
                let _ = reader.read_at(Position {
                    segment: SegmentId(segment),
                    offset,
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn frame_and_header_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_frame(&bytes);
        let _ = check_segment_header(&bytes);
        let _ = peek_payload_len(&bytes);
        for start in 0..bytes.len().min(40) {
            let _ = decode_frame(&bytes[start..]);
        }
    }

    #[test]
    fn recovery_and_read_at_never_panic_on_mutated_segments(
        records in 1..30usize,
        mutations in proptest::collection::vec(mutation(), 1..6),
        positions in proptest::collection::vec(0..5000u64, 0..8),
    ) {
        let sim = valid_log(records);
        let files: Vec<_> = (0..3u64)
            .map(|id| dir().join(segment_file_name(SegmentId(id))))
            .filter(|p| sim.file_bytes(p).is_some())
            .collect();
        for (i, m) in mutations.iter().enumerate() {
            let path = &files[i % files.len()];
            let mut bytes = sim.file_bytes(path).unwrap();
            apply(&mut bytes, m);
            sim.set_file_bytes(path, bytes);
        }
        read_everything(&sim, &positions);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn recovery_never_panics_on_arbitrary_segment_files(
        files in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..2000), 1..3),
        with_header in any::<bool>(),
    ) {
        let sim = SimStorage::new(1);
        for (id, mut bytes) in files.into_iter().enumerate() {
            if with_header {
                let header = encode_segment_header(SegmentHeader {
                    segment_id: SegmentId(id as u64),
                    first_lsn: wharf_wal::Lsn(1),
                });
                bytes.splice(0..0, header);
            }
            sim.set_file_bytes(&dir().join(segment_file_name(SegmentId(id as u64))), bytes);
        }
        read_everything(&sim, &[32, 53, 100]);
    }
}
