//! Segment compaction: before a checkpoint is written, the live messages of sparse segments
//! it covers are copied forward in the log (one `Copied` record each, a no-op for replay), so
//! the checkpoint refers to the copies and the old segment goes with the dead records around
//! them: one old message never pins a segment. A segment is sparse when its live messages
//! take less than half of it; so every segment a checkpoint keeps is at least half live, and
//! the directory holds at most about twice the queued bytes plus the log since the last
//! checkpoint (S-DISK-9).
//!
//! Crash safety, step by step: the copies are appended and made durable before the checkpoint
//! that refers to them is written; until that checkpoint is durable (its rename and the
//! directory sync returned) the old one, still on disk, refers to the originals, and nothing is
//! deleted. A crash in between leaves copies no checkpoint refers to: replay skips them. So a
//! message is in exactly one place recovery looks: never lost, never twice.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use bytes::Bytes;

use crate::codec;
use crate::error::StoreError;
use crate::stored::{StoredReader, log_position, pack_log};
use wharf_broker::{MessageRef, Snapshot, StoredAt, StoredMessage};
use wharf_wal::{Appender, SegmentId, Storage, segment_file_name};

/// What a message's record takes beyond its body: about the fixed part of a `Published`
/// record (frame 21 bytes, ids, times, lengths) with short names. Erring low makes a segment
/// look less live, so it is compacted sooner: the directory bound holds (S-DISK-9).
const RECORD_OVERHEAD_BYTES: u64 = 64;

/// Where each live message's record is now, if in the log or a checkpoint: what the job
/// compares segments by.
pub(super) type Current<'a> = &'a dyn Fn(&MessageRef) -> Option<StoredAt>;

/// What compaction works with: the checkpoint's snapshot and the store's files, log and
/// reader (borrowed from the checkpoint job).
pub(super) struct Compaction<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) storage: &'a dyn Storage,
    pub(super) dir: &'a Path,
    pub(super) reader: &'a StoredReader,
    pub(super) appender: &'a Appender,
    /// The log's segment size (compaction keeps room for two).
    pub(super) segment_bytes: u64,
}

/// Copies forward the live messages of the sparse segments among `covered` (and the messages
/// still held in an older checkpoint), durably; returns where each copy is, by message id.
/// Copies nothing when the disk could not take the copies and two segments more: compaction
/// never needs more space than it frees (S-DISK-3).
///
/// # Errors
/// A message cannot be read back, or the log fails (the checkpoint then fails; nothing was
/// deleted, the copies are skipped at replay).
pub(super) fn copy_forward(
    job: &Compaction<'_>,
    covered: &[SegmentId],
    current: Current<'_>,
) -> Result<HashMap<u64, StoredAt>, StoreError> {
    let sparse = sparse_segments(job, covered, current)?;
    let mut seen = HashSet::new();
    let mut wanted: Vec<(&str, StoredMessage)> = Vec::new();
    let mut bytes = 0u64;
    for q in &job.snapshot.queues {
        for m in &q.messages {
            let Some(at) = current(&m.message) else {
                continue; // not written anywhere yet: carried whole
            };
            let moves = log_position(at).is_none_or(|p| sparse.contains(&p.segment.0));
            let stored = match &m.message {
                MessageRef::Stored(s) => Some(StoredMessage { at, ..*s }),
                MessageRef::Loaded(l) => l.stored_ref().map(|(_, s)| StoredMessage { at, ..s }),
            };
            if let Some(stored) = stored.filter(|s| moves && seen.insert(s.id.0)) {
                bytes += u64::from(stored.body_len) + RECORD_OVERHEAD_BYTES;
                wanted.push((q.vhost.as_str(), stored));
            }
        }
    }
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    let room = bytes.saturating_add(job.segment_bytes.saturating_mul(2));
    if let Ok(Some(available)) = job.storage.available_bytes(job.dir)
        && available < room
    {
        tracing::info!(
            messages = wanted.len(),
            bytes,
            available_bytes = available,
            "compaction skipped: the disk has no room for the copies"
        );
        return Ok(HashMap::new());
    }
    let mut copies = HashMap::with_capacity(wanted.len());
    let mut last = None;
    let mut head = Vec::new();
    for (vhost, stored) in wanted {
        let part = job.reader.message_part(&stored).map_err(StoreError::Log)?;
        head.clear();
        let kind = codec::encode_copied(vhost, &[], &mut head)?;
        let appended = job
            .appender
            .append_parts(kind.byte(), &head, &Bytes::from(part))?;
        last = Some(appended.lsn);
        if let Some(at) = pack_log(appended.position) {
            copies.insert(stored.id.0, at);
        }
    }
    if let Some(lsn) = last {
        job.appender.wait_durable(lsn)?;
    }
    Ok(copies)
}

/// The segments among `covered` whose live messages take less than half of the file, and
/// hold at least one (a segment holding none is deleted without copying anything).
fn sparse_segments(
    job: &Compaction<'_>,
    covered: &[SegmentId],
    current: Current<'_>,
) -> Result<HashSet<u64>, StoreError> {
    let covered: HashSet<u64> = covered.iter().map(|s| s.0).collect();
    let mut live: HashMap<u64, u64> = HashMap::new();
    for m in job.snapshot.queues.iter().flat_map(|q| &q.messages) {
        if let Some(p) = current(&m.message).and_then(log_position)
            && covered.contains(&p.segment.0)
        {
            *live.entry(p.segment.0).or_default() += m.message.body_len() + RECORD_OVERHEAD_BYTES;
        }
    }
    let mut sparse = HashSet::new();
    for (segment, live) in live {
        let path = job.dir.join(segment_file_name(SegmentId(segment)));
        let len = job
            .storage
            .open(&path, false)
            .and_then(|f| f.len_bytes())
            .map_err(|source| StoreError::Io { path, source })?;
        if live.saturating_mul(2) < len {
            sparse.insert(segment);
        }
    }
    Ok(sparse)
}

/// Where memory holds message `m`'s record: its stored reference, or the slot of a message in
/// memory (`None` before the store reported it).
pub(super) fn held_at(m: &MessageRef) -> Option<StoredAt> {
    match m {
        MessageRef::Stored(s) => Some(s.at),
        MessageRef::Loaded(m) => m.stored_ref().map(|(_, s)| s.at),
    }
}
