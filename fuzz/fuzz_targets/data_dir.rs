//! The layout the `store_recovery` fuzz target reads a data directory from, shared with the
//! store's regression tests (`crates/store/tests/store/store_fuzz_regressions.rs`): the input
//! is split at each `WSEP` into at most 8 files; `FILE<name>\0<bytes>` names its file, a chunk
//! starting with `MARK` is `durable.mark`, one starting with `CKPT` a checkpoint, anything
//! else the next segment (`…01.wal`, `…02.wal`, …).

use std::path::Path;

use wharf_store::checkpoint;
use wharf_wal::{Lsn, MARK_FILE_NAME, SegmentId, SimStorage, segment_file_name};

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

pub fn place(sim: &SimStorage, dir: &Path, data: &[u8]) {
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
