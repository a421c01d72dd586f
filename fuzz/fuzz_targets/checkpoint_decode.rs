//! Fuzzes checkpoint decoding: the input is one checkpoint file on the simulated disk, read
//! with `checkpoint::read` (header, frames, CRCs, sequence, record kinds) and loaded into a
//! fresh broker with `checkpoint::load`. Damage must be an error naming the file, never a
//! panic, and a file that reads must load.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use wharf_broker::Broker;
use wharf_store::checkpoint;
use wharf_wal::{Lsn, SimStorage};

fuzz_target!(|data: &[u8]| {
    let sim = SimStorage::new(0);
    let path = Path::new("/sim/data").join(checkpoint::file_name(Lsn(7)));
    sim.set_file_bytes(&path, data.to_vec());
    let mut records = 0u64;
    let read = checkpoint::read(&sim, &path, &mut |_, _, _| {
        records += 1;
        Ok(())
    });
    let mut broker = Broker::new();
    let loaded = checkpoint::load(&sim, &path, &mut broker);
    if read.is_ok() {
        // `load` may still refuse what `apply` refuses (a message for a queue that does not
        // exist); it must not panic, and the broker stays consistent either way.
        let _ = loaded;
    }
    broker.check_invariants();
});
