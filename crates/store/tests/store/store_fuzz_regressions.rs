//! Inputs the fuzz targets found to crash, replayed as the target replays them, so that each
//! stays fixed (STYLE 2.4). The files are in `fuzz/regressions/<target>/`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step is a failed test"
)]

use std::path::PathBuf;
use std::sync::Arc;

use wharf_store::{Store, StoreConfig};
use wharf_wal::{SimStorage, WalConfig};

use crate::data_dir::place;

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
        if let Ok((store, mut broker, _)) = Store::open_with(&config, Arc::new(sim), &wal) {
            strict_ok |= !salvage;
            // As the server does before it listens (replay leaves queues to be re-indexed).
            let _ = broker.recovered(1_700_000_000_000);
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

/// A damaged directory the recovery target found: replay leaves a queue to be re-indexed,
/// which `Broker::recovered` does before anything else (the target checked the broker's
/// invariants too early). Recovered or refused, it never panics.
#[test]
fn s_err_2_a_damaged_directory_recovers_or_is_refused_without_a_panic() {
    let _ = recover(include_bytes!(
        "../../../../fuzz/regressions/store_recovery/recovered-queue-left-dirty"
    ));
}
