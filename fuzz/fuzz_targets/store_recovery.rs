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
use wharf_store::{Store, StoreConfig, checkpoint};
use wharf_wal::{Lsn, MARK_FILE_NAME, SegmentId, SimStorage, WalConfig, segment_file_name};

const SEP: &[u8] = b"WSEP";

fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(SEP.len()).position(|w| w == SEP) {
        out.push(&rest[..at]);
        rest = &rest[at + SEP.len()..];
    }
    out.push(rest);
    out
}

fn place(sim: &SimStorage, dir: &PathBuf, data: &[u8]) {
    let mut segment = 0u64;
    for chunk in chunks(data).into_iter().take(8) {
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
    }
}

fuzz_target!(|data: &[u8]| {
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
        let Ok((store, broker, _summary)) = Store::open_with(&config, Arc::new(sim), &wal) else {
            continue;
        };
        broker.check_invariants();
        store.close().expect("a recovered store closes");
    }
});
