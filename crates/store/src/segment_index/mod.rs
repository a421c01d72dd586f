//! The segment index (storage-format.md, "Segment index"): for each sealed segment, a small
//! sidecar file `{segment}.wal.idx` saying which broker message ids the segment's records
//! concern and where its queue definitions are ([`crate::trace::Tracer::always_concerns`]),
//! so a timeline (S-UI-7) reads only the segments its story touches and, of the others, only
//! those few frames. Written by the store, off the publish path, once the segment is sealed
//! and the next one durably started ([`writer`]); read by [`crate::trace`]. Never trusted
//! blindly: a missing, damaged, truncated or newer index is ignored (the segment is searched
//! as without one), and the frames it points at are checked when read.
//!
//! Ids are kept as sorted runs of consecutive ids (`gap`, `length - 1`, both LEB128 varints):
//! a segment's records mostly concern messages published close together, so ids come in long
//! runs and a segment of 64 MiB takes a few bytes to a few hundred KiB (at most about two
//! bytes per id when small gaps break every run). Exact, unlike a Bloom filter of the same
//! size, so a segment is never read whole for nothing. A lookup decodes the runs (memory
//! speed) and binary-searches them.

pub(crate) mod writer;

use std::path::{Path, PathBuf};

use wharf_broker::Event;
use wharf_wal::{Lsn, SegmentId, Storage, le};

/// The file's magic: `WHARFIDX`.
pub const MAGIC: [u8; 8] = *b"WHARFIDX";
/// The index format this build writes and the newest it reads.
pub const INDEX_VERSION: u16 = 1;
/// Bytes before the id runs: magic, version, flags, segment id, next first Lsn, and the four
/// counts.
pub const HEADER_BYTES: usize = 8 + 2 + 2 + 8 + 8 + 4 * 4;
/// An index file larger than this is not read (a damaged length never allocates much).
pub const FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The file name suffix after the segment's.
const SUFFIX: &str = ".idx";
/// A file being written (renamed over the index when complete).
const TMP_SUFFIX: &str = ".idx.tmp";

/// What an index says of one sealed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    /// The segment.
    pub segment: SegmentId,
    /// The first Lsn of the next segment: every record of this one has a lower one.
    pub next_first: Lsn,
    /// Runs of consecutive message ids `(first, last)`, sorted, disjoint and not adjacent:
    /// every id a record of the segment concerns is in one.
    pub runs: Vec<(u64, u64)>,
    /// Offsets of the frames of the kinds every trace reads, ascending.
    pub definitions: Vec<u64>,
}

impl SegmentIndex {
    /// The index of `ids` (any order, repeats allowed) and `definitions` (ascending).
    #[must_use]
    pub fn new(
        segment: SegmentId,
        next_first: Lsn,
        mut ids: Vec<u64>,
        definitions: Vec<u64>,
    ) -> Self {
        ids.sort_unstable();
        ids.dedup();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for id in ids {
            match runs.last_mut() {
                Some((_, last)) if last.checked_add(1) == Some(id) => *last = id,
                _ => runs.push((id, id)),
            }
        }
        SegmentIndex {
            segment,
            next_first,
            runs,
            definitions,
        }
    }

    /// Whether a record of the segment may concern message `id`.
    #[must_use]
    pub fn holds(&self, id: u64) -> bool {
        let at = self.runs.partition_point(|&(_, last)| last < id);
        self.runs.get(at).is_some_and(|&(first, _)| first <= id)
    }

    /// The file's bytes (storage-format.md, "Segment index").
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut runs = Vec::new();
        let mut after = 0u64;
        for &(first, last) in &self.runs {
            put_varint(&mut runs, first - after);
            put_varint(&mut runs, last - first);
            after = last.saturating_add(1);
        }
        let mut defs = Vec::new();
        let mut previous = 0u64;
        for &offset in &self.definitions {
            put_varint(&mut defs, offset - previous);
            previous = offset;
        }
        let mut out = Vec::with_capacity(HEADER_BYTES + runs.len() + defs.len() + 4);
        out.extend_from_slice(&MAGIC);
        le::put_u16(&mut out, INDEX_VERSION);
        le::put_u16(&mut out, 0);
        le::put_u64(&mut out, self.segment.0);
        le::put_u64(&mut out, self.next_first.0);
        for n in [
            self.runs.len(),
            runs.len(),
            self.definitions.len(),
            defs.len(),
        ] {
            le::put_u32(&mut out, u32::try_from(n).unwrap_or(u32::MAX));
        }
        out.extend_from_slice(&runs);
        out.extend_from_slice(&defs);
        let crc = crc32fast::hash(&out);
        le::put_u32(&mut out, crc);
        out
    }

    /// Reads an index file's bytes; why not, when they are not a valid index of `segment`.
    ///
    /// # Errors
    /// A short file, another magic, a newer version, unknown flags, a CRC that does not
    /// match, counts that do not match the bytes, ids or offsets out of order, another
    /// segment.
    pub fn decode(bytes: &[u8], segment: SegmentId) -> Result<Self, &'static str> {
        let (body, crc) = bytes
            .split_last_chunk::<4>()
            .filter(|(body, _)| body.len() >= HEADER_BYTES)
            .ok_or("truncated")?;
        if body.get(..8) != Some(&MAGIC[..]) {
            return Err("not a segment index");
        }
        let version = le::u16_at(body, 8).ok_or("truncated")?;
        if version > INDEX_VERSION {
            return Err("newer version");
        }
        if version == 0 || le::u16_at(body, 10) != Some(0) {
            return Err("unknown version or flags");
        }
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err("bad crc");
        }
        let u32_at = |at| le::u32_at(body, at).map(|n| n as usize).ok_or("truncated");
        let named = le::u64_at(body, 12).ok_or("truncated")?;
        if named != segment.0 {
            return Err("index of another segment");
        }
        let next_first = Lsn(le::u64_at(body, 20).ok_or("truncated")?);
        let (runs_n, runs_len, defs_n, defs_len) =
            (u32_at(28)?, u32_at(32)?, u32_at(36)?, u32_at(40)?);
        let rest = body.get(HEADER_BYTES..).unwrap_or_default();
        if rest.len() != runs_len.checked_add(defs_len).ok_or("bad lengths")? {
            return Err("bad lengths");
        }
        let (runs_bytes, defs_bytes) = rest.split_at(runs_len);
        // Every varint takes at least a byte: counts beyond the bytes are damage.
        if runs_n.saturating_mul(2) > runs_len || defs_n > defs_len {
            return Err("bad counts");
        }
        let mut reader = Varints(runs_bytes);
        let mut runs = Vec::with_capacity(runs_n);
        let mut after = Some(0u64);
        for _ in 0..runs_n {
            let first = after
                .and_then(|a| a.checked_add(reader.next()?))
                .ok_or("bad runs")?;
            let last = first
                .checked_add(reader.next().ok_or("bad runs")?)
                .ok_or("bad runs")?;
            runs.push((first, last));
            after = last.checked_add(1);
        }
        if !reader.0.is_empty() {
            return Err("bad runs");
        }
        let mut reader = Varints(defs_bytes);
        let mut definitions = Vec::with_capacity(defs_n);
        let mut previous = 0u64;
        for i in 0..defs_n {
            let delta = reader.next().ok_or("bad offsets")?;
            if i > 0 && delta == 0 {
                return Err("bad offsets");
            }
            previous = previous.checked_add(delta).ok_or("bad offsets")?;
            definitions.push(previous);
        }
        if !reader.0.is_empty() {
            return Err("bad offsets");
        }
        Ok(SegmentIndex {
            segment,
            next_first,
            runs,
            definitions,
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(low_bits(v) | 0x80);
        v >>= 7;
    }
    out.push(low_bits(v));
}

/// The low seven bits of `v`.
fn low_bits(v: u64) -> u8 {
    u8::try_from(v & 0x7f).unwrap_or_default()
}

/// LEB128 varints read off a slice.
struct Varints<'a>(&'a [u8]);

impl Varints<'_> {
    /// The next varint; `None` at the end or for one longer than a u64 holds.
    fn next(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                return None;
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                self.0 = self.0.get(i + 1..).unwrap_or_default();
                return Some(v);
            }
        }
        None
    }
}

/// The index file of segment `id` in `dir`.
#[must_use]
pub fn path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(format!("{}{SUFFIX}", wharf_wal::segment_file_name(id)))
}

fn tmp_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(format!("{}{TMP_SUFFIX}", wharf_wal::segment_file_name(id)))
}

/// The segment an index file (or one being written) belongs to, by its name.
fn segment_of(name: &str) -> Option<SegmentId> {
    let segment = name
        .strip_suffix(SUFFIX)
        .or_else(|| name.strip_suffix(TMP_SUFFIX))?;
    wharf_wal::parse_segment_file_name(segment)
}

/// The index of segment `id`, if there is a valid one. A missing index is normal (the last
/// segment, a segment sealed before a restart or by an older build); any other reason to
/// ignore one is logged at debug level. The caller checks what the index points at.
#[must_use]
pub fn load(storage: &dyn Storage, dir: &Path, id: SegmentId) -> Option<SegmentIndex> {
    let path = path(dir, id);
    let file = storage.open(&path, false).ok()?;
    let read = || -> Result<SegmentIndex, String> {
        let len = file.len_bytes().map_err(|e| e.to_string())?;
        if len > FILE_BYTES_MAX {
            return Err("too large".into());
        }
        let mut bytes = vec![0u8; usize::try_from(len).map_err(|e| e.to_string())?];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| e.to_string())?;
        SegmentIndex::decode(&bytes, id).map_err(str::to_owned)
    };
    read()
        .inspect_err(|reason| {
            tracing::debug!(path = %path.display(), reason, "segment index ignored: the segment is searched");
        })
        .ok()
}

/// Writes the index of segment `id`, encoded as `bytes` (a temporary file renamed over the
/// index, not synced: an index lost by a crash only costs its timeline a search). Returns the
/// bytes written.
///
/// # Errors
/// I/O errors; the temporary file is removed then.
pub fn store(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    bytes: &[u8],
) -> std::io::Result<u64> {
    let tmp = tmp_path(dir, id);
    let written = storage
        .create_new(&tmp)
        .and_then(|f| f.write_all_at(bytes, 0))
        .and_then(|()| storage.rename(&tmp, &path(dir, id)));
    if written.is_err() {
        let _ = storage.remove(&tmp);
    }
    written.map(|()| bytes.len() as u64)
}

/// Removes segment `id`'s index (when the segment is deleted); a missing one is fine.
pub fn remove(storage: &dyn Storage, dir: &Path, id: SegmentId) {
    let path = path(dir, id);
    if let Err(e) = storage.remove(&path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(path = %path.display(), error = %e, "segment index not removed");
    }
}

/// At open: removes index files being written, those of segments no longer in the log, and
/// those of the segments from `appending` on (the log appends to it now, so its index would
/// be short). Failures are logged and left: an orphan is never read.
pub fn remove_stale(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[SegmentId],
    appending: SegmentId,
) {
    let Ok(names) = storage.list(dir) else {
        return;
    };
    for name in names {
        let Some(id) = segment_of(&name) else {
            continue;
        };
        if name.ends_with(TMP_SUFFIX) || id >= appending || !segments.contains(&id) {
            let path = dir.join(&name);
            if let Err(e) = storage.remove(&path) {
                tracing::debug!(path = %path.display(), error = %e, "stale segment index not removed");
            }
        }
    }
}

/// The message ids a record of `event` concerns, for the index: what
/// [`crate::trace::Tracer::concerns`] finds in a record's bytes when the record matters to a
/// trace by id (the message, the copy a dead-lettering makes, the scheduled message a
/// publish follows, the ids of a batch).
pub(crate) fn event_ids(event: &Event, out: &mut Vec<u64>) {
    match event {
        Event::Published {
            message, scheduled, ..
        } => {
            out.push(message.message.id.0);
            out.extend(scheduled.map(|s| s.0));
        }
        Event::Scheduled { message, .. } => out.push(message.message.id.0),
        Event::DeadLettered { id, message, .. } => {
            out.push(id.0);
            out.extend(message.as_ref().map(|m| m.message.id.0));
        }
        Event::Settled { ids, .. }
        | Event::Delivered { ids, .. }
        | Event::Returned { ids, .. }
        | Event::Purged { ids, .. }
        | Event::DeadLetterHeld { ids, .. } => out.extend(ids.iter().map(|i| i.0)),
        _ => {}
    }
}
