//! Segment files as the writer needs them: created durably with their whole size reserved
//! (so a full disk shows up here, before any record is written into one), zero-filled ahead
//! of the write position, and the last one readied for appending after recovery.

use std::path::Path;
use std::sync::Arc;

use super::{ActiveSegment, Shared};
use crate::config::WalConfig;
use crate::error::{IoOp, WalError};
use crate::ids::{Lsn, SegmentId};
use crate::record::{SEGMENT_HEADER_BYTES, SegmentHeader, encode_segment_header};
use crate::recovery::{RecoveryReport, segment_file_name};
use crate::storage::{Storage, StorageFile};
use wharf_base::limits;

pub(crate) fn failed(path: &Path, op: IoOp, e: std::io::Error) -> WalError {
    WalError::Failed {
        path: path.to_owned(),
        op,
        source: Arc::new(e),
    }
}

/// Creates a segment durably: space reserved for `segment_bytes_max` bytes (or `reserve`,
/// when larger: a segment for one large record), header, optional zero-fill to
/// `preallocate_to` bytes, fsync of the file, fsync of the directory (STYLE 3.8).
pub(crate) fn create_segment(
    shared: &Shared,
    id: SegmentId,
    first_lsn: Lsn,
    reserve: u64,
    preallocate_to: Option<u64>,
) -> Result<ActiveSegment, WalError> {
    let sizes = (shared.segment_bytes_max.max(reserve), preallocate_to);
    create_segment_in(&*shared.storage, &shared.dir, id, first_lsn, sizes)
}

/// [`create_segment`] without a `Shared` (used while opening). `sizes` is (bytes to reserve,
/// bytes to zero-fill). A full disk met before the segment is synced removes the file again
/// and returns an error for which [`WalError::is_disk_full`] holds.
pub(crate) fn create_segment_in(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    first_lsn: Lsn,
    (reserve_to, preallocate_to): (u64, Option<u64>),
) -> Result<ActiveSegment, WalError> {
    let path = dir.join(segment_file_name(id));
    let err = |e| failed(&path, IoOp::CreateSegment, e);
    let file = storage.create_new(&path).map_err(err)?;
    let header = encode_segment_header(SegmentHeader {
        segment_id: id,
        first_lsn,
    });
    let end = SEGMENT_HEADER_BYTES as u64;
    let prepared = file
        .reserve(reserve_to)
        .and_then(|()| file.write_all_at(&header, 0))
        .and_then(|()| match preallocate_to {
            Some(to) => zero_fill(&*file, end, to).map(|()| to),
            None => Ok(end),
        });
    let allocated = match prepared {
        Ok(allocated) => allocated,
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            // Nothing points into this segment yet: remove it so that a retry creates it
            // afresh. Its creation was never made durable, so a crash may only leave an
            // empty or partial file, which recovery removes (`unusable_last`).
            drop(file);
            storage
                .remove(&path)
                .map_err(|e| failed(&path, IoOp::Remove, e))?;
            return Err(err(e));
        }
        Err(e) => return Err(err(e)),
    };
    file.sync_all().map_err(err)?;
    storage
        .sync_dir(dir)
        .map_err(|e| failed(dir, IoOp::SyncDir, e))?;
    Ok(ActiveSegment {
        id,
        file,
        end,
        allocated,
    })
}

/// How far ahead of the write position a preallocating log keeps zeros (in `limits`).
pub(crate) const PREALLOCATE_STEP_BYTES: u64 = limits::PREALLOCATE_STEP_BYTES;

/// Recent write batches (smoothed) larger than this are not followed by zero-fill ahead.
///
/// Zero-filling pays for itself when it saves more than it costs: it saves the journal commit
/// of a file-size change at each `fdatasync` (~50 us here: ~5,600 extending vs ~7,900
/// overwriting 100 B write+fdatasync per second), and costs writing every byte twice, which
/// only matters once batches are bandwidth-bound: batches of 64 producers of 64 KiB records
/// (several MiB) lose by it, batches of 100 B records (a few KiB) need it. A single producer
/// of 64 KiB records (one record per batch) stays below the limit: its rate is bound by the
/// fsync latency, not by bandwidth. Figures: `benches/wal_append.rs`, see the commit message.
pub(crate) const PREFILL_BATCH_BYTES_MAX: u64 = 256 * 1024;

/// Whether the writer zero-fills ahead after writing up to `end` in a file allocated (written)
/// up to `allocated`: only when less than half a step of zeros is left, and only while recent
/// batches (`recent_batch_bytes`, see [`smoothed_batch_bytes`]) are small enough that the
/// metadata commit of an extending write would be a large part of each batch's cost.
pub(crate) fn should_prefill(recent_batch_bytes: u64, end: u64, allocated: u64) -> bool {
    recent_batch_bytes <= PREFILL_BATCH_BYTES_MAX
        && end.saturating_add(PREALLOCATE_STEP_BYTES / 2) > allocated
}

/// Moving average of batch sizes (weight 1/4 on the newest), so that one small batch between
/// large ones (a lull of a few producers) does not trigger a whole step of zeros.
pub(crate) fn smoothed_batch_bytes(recent: u64, batch: u64) -> u64 {
    recent - recent / 4 + batch / 4
}

/// Where preallocation ends for a write position `end`: a step ahead, within the segment.
pub(crate) fn preallocation_end(end: u64, segment_bytes_max: u64) -> u64 {
    end.saturating_add(PREALLOCATE_STEP_BYTES)
        .min(segment_bytes_max)
}

/// Writes zeros over `from..to`: real blocks, so later overwrites followed by `fdatasync` do
/// not have to commit block allocation or size changes to the file system journal.
pub(crate) fn zero_fill(file: &dyn StorageFile, from: u64, to: u64) -> std::io::Result<()> {
    const STEP_BYTES: u64 = 1 << 20;
    let zeros = vec![0u8; usize::try_from(STEP_BYTES).unwrap_or(1 << 20)];
    let mut at = from;
    while at < to {
        let n = STEP_BYTES.min(to - at);
        let chunk = zeros
            .get(..usize::try_from(n).unwrap_or(0))
            .unwrap_or_default();
        file.write_all_at(chunk, at)?;
        at += n;
    }
    Ok(())
}

/// Readies the segment to append to: the last one, its torn tail truncated, the rest of its
/// size reserved (and re-zeroed when preallocating), or a new one. The flag is set when the
/// last one could not reserve its space (a full disk): nothing more is written into it.
pub(crate) fn prepare_active(
    storage: &dyn Storage,
    dir: &Path,
    config: &WalConfig,
    report: &RecoveryReport,
) -> Result<(ActiveSegment, bool), WalError> {
    let Some(at) = report.append_at else {
        return create_first(storage, dir, config, report).map(|active| (active, false));
    };
    let max = config.segment_bytes_max;
    let path = dir.join(segment_file_name(at.segment));
    let err = |e| failed(&path, IoOp::Write, e);
    let file = storage.open(&path, true).map_err(err)?;
    let mut allocated = file.len_bytes().map_err(err)?;
    if report.torn_tail.is_some() {
        // S-DUR-7: the torn tail is cut before anything is appended after it.
        file.set_len(at.offset).map_err(err)?;
        allocated = at.offset;
    }
    // Always sync once: the records recovery just handed out may have been read from the page
    // cache after a process crash; they must not vanish in a later power loss, since the layer
    // above has acted on them. The directory too: the segment's own creation may never have
    // become durable (a write failed while it was being prepared, then the process stopped),
    // and a power loss would then take the whole file with records synced into it since.
    file.sync_all().map_err(err)?;
    storage
        .sync_dir(dir)
        .map_err(|e| failed(dir, IoOp::SyncDir, e))?;
    assert!(
        at.offset >= SEGMENT_HEADER_BYTES as u64,
        "append position inside the header"
    );
    // The segment was reserved when created, but not necessarily by this build, and the
    // reservation may not have survived a crash: reserve again (a no-op when it is there).
    let unreserved = match file.reserve(max) {
        Ok(()) => false,
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => true,
        Err(e) => return Err(err(e)),
    };
    let preallocate_to = config
        .preallocate
        .then(|| preallocation_end(at.offset, max))
        .filter(|_| !unreserved);
    if let Some(to) = preallocate_to.filter(|&to| to > allocated) {
        zero_fill(&*file, allocated, to).map_err(err)?;
        file.sync_all().map_err(err)?;
        allocated = to;
    }
    let active = ActiveSegment {
        id: at.segment,
        file,
        end: at.offset,
        allocated,
    };
    Ok((active, unreserved))
}

/// A new segment to append to, when no segment holds a place to append at: the one after the
/// last, or the last again when its creation never became durable (it is removed first).
fn create_first(
    storage: &dyn Storage,
    dir: &Path,
    config: &WalConfig,
    report: &RecoveryReport,
) -> Result<ActiveSegment, WalError> {
    let max = config.segment_bytes_max;
    let id = match (report.unusable_last, report.segments.last()) {
        (Some(unusable), _) => {
            // Its creation never became durable and nothing in it was acknowledged.
            let path = dir.join(segment_file_name(unusable));
            storage
                .remove(&path)
                .map_err(|e| failed(&path, IoOp::Remove, e))?;
            storage
                .sync_dir(dir)
                .map_err(|e| failed(dir, IoOp::SyncDir, e))?;
            unusable
        }
        (None, Some(last)) => last.next(),
        (None, None) => SegmentId(0),
    };
    let preallocate_to = config
        .preallocate
        .then(|| preallocation_end(SEGMENT_HEADER_BYTES as u64, max));
    let sizes = (max, preallocate_to);
    create_segment_in(storage, dir, id, report.next_lsn, sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn small_batches_prefill_when_less_than_half_a_step_is_left() {
        let end = 10 * KIB * KIB;
        assert!(should_prefill(100, end, end));
        assert!(should_prefill(
            64 * KIB,
            end,
            end + PREALLOCATE_STEP_BYTES / 2 - 1
        ));
        assert!(!should_prefill(100, end, end + PREALLOCATE_STEP_BYTES / 2));
        assert!(!should_prefill(100, end, end + PREALLOCATE_STEP_BYTES));
    }

    #[test]
    fn large_batches_never_prefill() {
        let end = 10 * KIB * KIB;
        assert!(should_prefill(PREFILL_BATCH_BYTES_MAX, end, end));
        assert!(!should_prefill(PREFILL_BATCH_BYTES_MAX + 1, end, end));
        assert!(!should_prefill(4 * KIB * KIB, end, 0));
        assert!(!should_prefill(u64::MAX, u64::MAX, 0));
    }

    #[test]
    fn one_small_batch_among_large_ones_does_not_prefill() {
        let mut recent = 0;
        for _ in 0..8 {
            recent = smoothed_batch_bytes(recent, 4 * KIB * KIB);
        }
        assert!(recent > PREFILL_BATCH_BYTES_MAX);
        recent = smoothed_batch_bytes(recent, 100);
        assert!(!should_prefill(recent, 0, 0), "{recent}");
        // A sustained run of small batches brings zero-fill back.
        for _ in 0..16 {
            recent = smoothed_batch_bytes(recent, 2 * KIB);
        }
        assert!(should_prefill(recent, 0, 0), "{recent}");
    }

    #[test]
    fn smoothing_converges_to_a_steady_batch_size() {
        let mut recent = 0;
        for _ in 0..64 {
            recent = smoothed_batch_bytes(recent, 64 * KIB + 21);
        }
        assert!(recent.abs_diff(64 * KIB + 21) < 8, "{recent}");
        assert_eq!(
            smoothed_batch_bytes(u64::MAX, u64::MAX),
            u64::MAX,
            "no overflow"
        );
    }
}
