//! Fuzzes recovery of a whole data directory: the input is split at each `WSEP` into files
//! (`FILE<name>\0<bytes>` names its file; otherwise segments `…01.wal`, `…02.wal`, …; a chunk starting with `MARK` becomes `durable.mark`, one
//! starting with `CKPT` a checkpoint), placed on the simulated disk, and the store is opened
//! through the real recovery path (checkpoint, log scan, replay into the broker), strictly and
//! in salvage mode. It must recover or refuse with an error, never panic; what it recovers is
//! a consistent broker, and a recovered store takes a new record and closes.
#![no_main]

use std::path::PathBuf;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;

#[path = "data_dir.rs"]
mod data_dir;
use wharf_store::{Store, StoreConfig};
use wharf_wal::{SimStorage, WalConfig};

fuzz_target!(|data: &[u8]| {
    for salvage in [false, true] {
        let sim = SimStorage::new(0);
        let config = StoreConfig {
            dir: PathBuf::from("/sim/data"),
            salvage,
        };
        data_dir::place(&sim, &config.dir, data);
        let wal = WalConfig {
            segment_bytes_max: wharf_wal::SEGMENT_BYTES_MIN,
            preallocate: false,
            ..WalConfig::default()
        };
        let Ok((store, mut broker, _summary)) = Store::open_with(&config, Arc::new(sim), &wal)
        else {
            continue;
        };
        // As the server does before it listens (replay leaves queues to be re-indexed).
        let _ = broker.recovered(1_700_000_000_000);
        broker.check_invariants();
        store.close().expect("a recovered store closes");
    }
});
