//! The fuzz targets' decoders in CI (STYLE 2.4): checkpoint files and whole data directories
//! (segments, durable mark, checkpoint) from arbitrary bytes and from real files (the fuzz
//! corpora, written by a simulated run) with bytes flipped, cut or inserted. Recovery
//! recovers or refuses with an error; it never panics (S-ERR-2), and what it recovers is a
//! consistent broker.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::path::Path;

use proptest::prelude::*;
use wharf_broker::Broker;
use wharf_store::checkpoint;
use wharf_wal::{Lsn, SimStorage};

use crate::store_fuzz_regressions::recover;

const CHECKPOINTS: [&[u8]; 2] = [
    include_bytes!("../../../../fuzz/seeds/checkpoint_decode/11-00000000000000000027.checkpoint"),
    include_bytes!("../../../../fuzz/seeds/checkpoint_decode/13-00000000000000000025.checkpoint"),
];
const DIRECTORIES: [&[u8]; 2] = [
    include_bytes!("../../../../fuzz/seeds/store_recovery/run-11"),
    include_bytes!("../../../../fuzz/seeds/store_recovery/run-12"),
];

fn read_checkpoint(bytes: Vec<u8>) {
    let sim = SimStorage::new(0);
    let path = Path::new("/sim/data").join(checkpoint::file_name(Lsn(7)));
    sim.set_file_bytes(&path, bytes);
    let _ = checkpoint::read(&sim, &path, &mut |_, _, _| Ok(()));
    let mut broker = Broker::new();
    let _ = checkpoint::load(&sim, &path, &mut broker);
    broker.check_invariants();
}

#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        4 => (any::<usize>(), 1..=255u8).prop_map(|(at, x)| Damage::Flip(at, x)),
        1 => any::<usize>().prop_map(Damage::Cut),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, b)| Damage::Insert(at, b)),
    ]
}

fn damaged(original: &[u8], damages: &[Damage]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for d in damages {
        let len = bytes.len().max(1);
        match d {
            Damage::Flip(at, x) => {
                if let Some(b) = bytes.get_mut(at % len) {
                    *b ^= x;
                }
            }
            Damage::Cut(at) => bytes.truncate(at % len),
            Damage::Insert(at, b) => {
                let at = (at % len).min(bytes.len());
                bytes.splice(at..at, b.iter().copied());
            }
        }
    }
    bytes
}

#[test]
fn the_corpus_files_read_back_intact() {
    for c in CHECKPOINTS {
        let sim = SimStorage::new(0);
        let path = Path::new("/sim/data").join(checkpoint::file_name(Lsn(7)));
        sim.set_file_bytes(&path, c.to_vec());
        checkpoint::read(&sim, &path, &mut |_, _, _| Ok(())).unwrap();
    }
    for d in DIRECTORIES {
        assert!(recover(d), "a corpus directory does not recover");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn s_err_2_arbitrary_checkpoint_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        read_checkpoint(bytes);
    }

    #[test]
    fn s_err_2_damaged_checkpoints_never_panic(which in 0..2usize, d in prop::collection::vec(damage(), 1..4)) {
        read_checkpoint(damaged(CHECKPOINTS[which], &d));
    }

    #[test]
    fn s_err_2_damaged_data_directories_never_panic(which in 0..2usize, d in prop::collection::vec(damage(), 1..4)) {
        let _ = recover(&damaged(DIRECTORIES[which], &d));
    }

    #[test]
    fn s_err_2_arbitrary_data_directories_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
        let _ = recover(&bytes);
    }
}
