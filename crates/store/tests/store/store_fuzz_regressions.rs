//! Inputs the fuzz targets found to crash, replayed as the target replays them, so that each
//! stays fixed (STYLE 2.4). The files are in `fuzz/regressions/<target>/`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wharf_store::{Store, StoreConfig, checkpoint};
use wharf_wal::{Lsn, MARK_FILE_NAME, SegmentId, SimStorage, WalConfig, segment_file_name};

/// `fuzz/fuzz_targets/store_recovery.rs`'s layout: files separated by `WSEP`; `MARK…` is the
/// durable mark, `CKPT…` a checkpoint, anything else the next segment.
pub(crate) fn place(sim: &SimStorage, dir: &Path, data: &[u8]) {
    let mut segment = 0u64;
    let mut rest = data;
    for _ in 0..8 {
        let at = rest.windows(4).position(|w| w == b"WSEP");
        let chunk = at.map_or(rest, |at| &rest[..at]);
        let named = chunk.strip_prefix(b"FILE").and_then(|c| {
            let end = c.iter().take(40).position(|&b| b == 0)?;
            Some((
                String::from_utf8_lossy(&c[..end]).into_owned(),
                &c[end + 1..],
            ))
        });
        let (name, bytes) = if let Some((name, bytes)) = named {
            (name, bytes)
        } else if let Some(mark) = chunk.strip_prefix(b"MARK") {
            (MARK_FILE_NAME.to_owned(), mark)
        } else if let Some(ckpt) = chunk.strip_prefix(b"CKPT") {
            (checkpoint::file_name(Lsn(segment * 3 + 1)), ckpt)
        } else {
            segment += 1;
            (segment_file_name(SegmentId(segment)), chunk)
        };
        sim.set_file_bytes(&dir.join(name), bytes.to_vec());
        let Some(at) = at else { break };
        rest = &rest[at + 4..];
    }
}

/// Recovers the directory `data` describes, strictly and in salvage mode; returns whether
/// the strict recovery succeeded.
pub(crate) fn recover(data: &[u8]) -> bool {
    let mut strict_ok = false;
    for salvage in [false, true] {
        let sim = SimStorage::new(0);
        let config = StoreConfig {
            dir: PathBuf::from("/sim/data"),
            salvage,
        };
        place(&sim, &config.dir, data);
        let wal = WalConfig {
            segment_bytes_max: wharf_wal::SEGMENT_BYTES_MIN,
            preallocate: false,
            ..WalConfig::default()
        };
        if let Ok((store, broker, _)) = Store::open_with(&config, Arc::new(sim), &wal) {
            strict_ok |= !salvage;
            broker.check_invariants();
            store.close().unwrap();
        }
    }
    strict_ok
}

/// S-ERR-2: a log that publishes a message id again after it was settled in the same queue
/// (a damaged or forged file) is refused as damage, not an assertion in the queue.
#[test]
fn s_err_2_a_log_repeating_a_settled_message_id_is_refused_not_a_panic() {
    let _ = recover(include_bytes!(
        "../../../../fuzz/regressions/store_recovery/replay-repeated-settled-id"
    ));
}
