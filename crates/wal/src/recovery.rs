//! The recovery scan: walks every segment in order and hands each intact record to a visitor,
//! one at a time (streaming: memory holds one segment's bytes, never all records). Decides,
//! for every bad frame or header, whether it is a torn tail (cut and reported), corruption
//! (an error naming file and offset, S-DUR-7) or, in salvage mode, a loss to skip and report.
//! The decisions are one exhaustive `match` over a tuple of enums (STYLE 3.1). Reads only; the
//! truncation of a torn tail happens in `Wal::open`. Must not depend on the writer.
#![warn(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::error::{CorruptReason, RecoveryError};
use crate::ids::{Lsn, Position, SegmentId};
use crate::known::{self, SegmentPlan, Selective, WindowFilter};
use crate::mark::{MarkState, read_mark};
use crate::record::{self, FrameCheck, HeaderCheck, SEGMENT_HEADER_BYTES};
use crate::storage::Storage;
use wharf_base::limits;

/// Whether recovery stops at corruption or skips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Corruption anywhere but a torn tail is an error (the default, S-DUR-7).
    #[default]
    Strict,
    /// Corrupt records are skipped (resynchronising on the next valid frame) and reported in
    /// [`RecoveryReport::salvaged`]: the operator's explicit choice to lose them.
    Salvage,
}

/// One intact record, as the recovery scan hands it to its visitor.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// The record's Lsn.
    pub lsn: Lsn,
    /// Where its frame starts, for `Reader::read_at` later.
    pub position: Position,
    /// The record kind (assigned by the layer above).
    pub kind: u8,
    /// The payload; borrowed from the segment being scanned.
    pub payload: &'a [u8],
    /// The whole segment `payload` is a slice of.
    segment: &'a Bytes,
}

impl RecordRef<'_> {
    /// The payload as a shared slice of the segment's bytes (a mapped segment stays mapped
    /// while it lives): for readers that keep many records without copying them.
    #[must_use]
    pub fn payload_shared(&self) -> Bytes {
        self.segment.slice_ref(self.payload)
    }
}

/// The torn tail cut from the last segment: an interrupted write that was never durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// Offset of the first byte cut (the end of the last intact record).
    pub offset: u64,
    /// Bytes cut that were not zero (preallocated zeros are not counted).
    pub bytes: u64,
    /// What the first cut frame looked like.
    pub reason: CorruptReason,
}

/// A stretch skipped in salvage mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvageLoss {
    /// The segment file.
    pub path: PathBuf,
    /// Offset where the damage starts.
    pub offset: u64,
    /// Bytes skipped.
    pub bytes: u64,
    /// What was wrong at `offset`.
    pub reason: CorruptReason,
    /// The Lsns lost, `first..next` (empty when unknown, e.g. at the end of a segment).
    pub lsns: std::ops::Range<Lsn>,
}

/// What recovery found. A torn tail is not an error; it is reported here (STYLE 3.3).
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Segments scanned, in order.
    pub segments: Vec<SegmentId>,
    /// Records handed to the visitor.
    pub records: u64,
    /// The Lsn the next appended record gets.
    pub next_lsn: Lsn,
    /// The torn tail of the last segment, if there was one.
    pub torn_tail: Option<TornTail>,
    /// What salvage mode skipped (always empty in strict mode).
    pub salvaged: Vec<SalvageLoss>,
    /// What the durable mark said (S-DISK-6).
    pub durable_mark: MarkState,
    /// The mark file is missing although the newest segment was written by a build that keeps
    /// one (strict recovery refuses; set only in salvage mode).
    pub mark_missing: bool,
    /// Where appending continues: the last segment and the end of its last intact record.
    /// `None` when there is no usable segment (empty log, or a last segment whose header never
    /// became durable).
    pub(crate) append_at: Option<Position>,
    /// A last segment whose header never became durable: to be removed before appending.
    pub(crate) unusable_last: Option<SegmentId>,
}

/// Name of a segment file: `{segment_id:020}.wal`, so file order is numeric order.
pub fn segment_file_name(id: SegmentId) -> String {
    format!("{:020}.wal", id.0)
}

/// The header of segment `id` in `dir`, if it can be read, checks, and names `id`.
pub fn read_segment_header(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
) -> Option<record::SegmentHeader> {
    known::header_at(storage, &dir.join(segment_file_name(id)), id)
}

/// Parses a segment file name; `None` for any other file.
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(SegmentId)
}

/// The segments of a log directory, in order.
///
/// # Errors
/// [`RecoveryError::Io`] when the directory cannot be listed.
pub fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegmentId>, RecoveryError> {
    let names = storage.list(dir).map_err(|source| RecoveryError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut ids: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The visitor the scan calls for every intact record, in Lsn order.
pub type Visitor<'v> =
    dyn FnMut(RecordRef<'_>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + 'v;

/// Scans the log in `dir` read-only, calling `visit` for every intact record in order.
///
/// # Errors
/// [`RecoveryError::Corrupt`] for damage a torn tail cannot explain (strict mode),
/// [`RecoveryError::UnsupportedVersion`], I/O errors, and a visitor's refusal.
pub fn scan(
    storage: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
    visit: &mut Visitor<'_>,
) -> Result<RecoveryReport, RecoveryError> {
    scan_after(storage, dir, mode, Lsn(0), visit)
}

/// As [`scan`], but reading only what `select` asks for. A sealed segment not read whole is
/// stepped through by its frames' length fields: the frames of the accepted kinds are checked
/// (CRC, Lsn) and handed over in order, the others are not read beyond their header. When a
/// step does not land where a full scan would (a length past the end, an Lsn out of
/// sequence, an accepted frame that does not check), the segment is read whole instead
/// (every record handed over), so the visitor sees at least the records of the accepted
/// kinds a full scan would hand it. One
/// difference: damage inside a frame stepped over goes unnoticed, so it is neither reported
/// nor an error in strict mode, and in salvage mode the intact accepted records after it that
/// a full scan would give up with it (the rest of its write group) are handed over. The last
/// segment is always read whole. `report.records` counts the records handed over.
///
/// # Errors
/// As [`scan`].
pub fn scan_selective(
    storage: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
    select: &mut Selective<'_>,
    visit: &mut Visitor<'_>,
) -> Result<RecoveryReport, RecoveryError> {
    let covered = select.covered;
    scan_segments(storage, dir, mode, covered, Some(select), visit)
}

/// As [`scan`], but sealed segments whose records all have an Lsn of at most `covered` (the
/// segment after starts at most at `covered + 1`) are not read: a checkpoint covers them,
/// and they are kept only for the messages it refers to, which are checked when read back.
/// Their header is checked (and the next one's); `report.records` does not count them.
///
/// # Errors
/// As [`scan`].
pub(crate) fn scan_after(
    storage: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
    covered: Lsn,
    visit: &mut Visitor<'_>,
) -> Result<RecoveryReport, RecoveryError> {
    scan_segments(storage, dir, mode, covered, None, visit)
}

/// The scan of [`scan_after`] and [`scan_selective`].
fn scan_segments(
    storage: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
    covered: Lsn,
    mut select: Option<&mut Selective<'_>>,
    visit: &mut Visitor<'_>,
) -> Result<RecoveryReport, RecoveryError> {
    let ids = list_segments(storage, dir)?;
    let mut report = RecoveryReport {
        next_lsn: Lsn(1),
        durable_mark: read_mark(storage, dir)?,
        ..RecoveryReport::default()
    };
    let mut last_version = None;
    let mut previous: Option<SegmentId> = None;
    for (index, &id) in ids.iter().enumerate() {
        let role = if index + 1 == ids.len() {
            Role::Last
        } else {
            Role::Sealed
        };
        let path = dir.join(segment_file_name(id));
        if role == Role::Sealed
            && covered.0 > 0
            && let Some(next) = ids.get(index + 1)
            && let Some(next_first) = covered_segment(storage, dir, id, *next, covered)?
        {
            report.next_lsn = next_first;
            report.segments.push(id);
            previous = Some(id);
            continue;
        }
        let contiguous = previous.is_some_and(|p| p.0.checked_add(1) == Some(id.0));
        let plan = match select.as_deref_mut() {
            Some(s) if role == Role::Sealed => (s.plan)(id),
            _ => SegmentPlan::Search,
        };
        if let SegmentPlan::Only {
            offsets,
            next_first,
        } = &plan
        {
            // As `SegmentScan::run` checks the first Lsn.
            let expected = if report.segments.is_empty() {
                Err(Lsn(0))
            } else if contiguous {
                Ok(report.next_lsn)
            } else {
                Err(report.next_lsn)
            };
            let next_path = dir.join(segment_file_name(SegmentId(id.0.saturating_add(1))));
            let known = known::read_known(
                storage,
                (&path, id),
                &next_path,
                offsets,
                *next_first,
                expected,
            );
            if let Some(frames) = known {
                hand_over_known(id, frames, &mut report, visit)?;
                report.next_lsn = *next_first;
                report.segments.push(id);
                previous = Some(id);
                continue;
            }
        }
        let bytes = read_segment(storage, &path, role)?;
        last_version = record::segment_header_version(&bytes);
        let skim = match select.as_deref_mut() {
            Some(s) if role == Role::Sealed && plan != SegmentPlan::Whole => Some(Skim {
                whole: &mut *s.whole,
                kinds: s.kinds,
                window: s.window.max(1),
            }),
            _ => None,
        };
        let mut scan = SegmentScan {
            path: &path,
            id,
            role,
            mode,
            bytes: &bytes,
            segment: &bytes,
            report: &mut report,
            visit,
            skim,
        };
        scan.run(contiguous || previous.is_none())?;
        report.segments.push(id);
        previous = Some(id);
    }
    check_durable(dir, mode, last_version, &mut report)?;
    Ok(report)
}

/// Hands over the frames of segment `id` a [`SegmentPlan::Only`] read, in order.
fn hand_over_known(
    id: SegmentId,
    frames: Vec<(u64, crate::frame_at::Record)>,
    report: &mut RecoveryReport,
    visit: &mut Visitor<'_>,
) -> Result<(), RecoveryError> {
    for (offset, record) in frames {
        let (lsn, kind) = (record.lsn, record.kind);
        let segment = known::payload_bytes(record);
        let r = RecordRef {
            lsn,
            position: Position {
                segment: id,
                offset,
            },
            kind,
            payload: &segment,
            segment: &segment,
        };
        visit(r).map_err(|source| RecoveryError::Visitor { lsn, source })?;
        report.records += 1;
    }
    Ok(())
}

/// When every record of sealed segment `id` has an Lsn of at most `covered` (segment `next`
/// starts at most at `covered + 1`) and both headers check: the first Lsn of `next`. `None`
/// (read the segment whole, which reports any damage) otherwise.
fn covered_segment(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    next: SegmentId,
    covered: Lsn,
) -> Result<Option<Lsn>, RecoveryError> {
    let header = |id: SegmentId| -> Result<Option<Lsn>, RecoveryError> {
        let path = dir.join(segment_file_name(id));
        let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
        let read = storage
            .open(&path, false)
            .and_then(|f| f.read_exact_at(&mut bytes, 0));
        if let Err(source) = read {
            return if source.kind() == std::io::ErrorKind::UnexpectedEof {
                Ok(None)
            } else {
                Err(RecoveryError::Io { path, source })
            };
        }
        Ok(match record::check_segment_header(&bytes) {
            HeaderCheck::Valid(h) if h.segment_id == id => Some(h.first_lsn),
            _ => None,
        })
    };
    let Some(next_first) = header(next)? else {
        return Ok(None);
    };
    if next_first.0 > covered.0.saturating_add(1) || header(id)?.is_none() {
        return Ok(None);
    }
    Ok(Some(next_first))
}

/// Holds the end of the log against the durable mark (S-DISK-6): a log that ends (torn or
/// not) at or before a record an fsync covered is damage, not a torn tail. A log whose newest
/// segment was written by a build that keeps the mark must have one.
fn check_durable(
    dir: &Path,
    mode: RecoveryMode,
    last_version: Option<u16>,
    report: &mut RecoveryReport,
) -> Result<(), RecoveryError> {
    let mark = match report.durable_mark {
        MarkState::Found(mark) => mark,
        MarkState::Missing if last_version >= Some(record::MARK_SINCE_VERSION) => {
            if mode == RecoveryMode::Strict {
                return Err(RecoveryError::MarkMissing {
                    path: crate::mark::mark_path(dir),
                });
            }
            report.mark_missing = true;
            return Ok(());
        }
        MarkState::Missing | MarkState::Unreadable => return Ok(()),
    };
    let first_lost = report.next_lsn;
    if first_lost > mark.lsn {
        return Ok(());
    }
    let (path, offset, bytes, reason) = match (&report.torn_tail, report.append_at) {
        (Some(t), _) => (t.path.clone(), t.offset, t.bytes, t.reason.clone()),
        (None, Some(at)) => (
            dir.join(segment_file_name(at.segment)),
            at.offset,
            0,
            CorruptReason::EndsBeforeDurable,
        ),
        (None, None) => (dir.to_owned(), 0, 0, CorruptReason::EndsBeforeDurable),
    };
    let records = mark.lsn.0 - first_lost.0 + 1;
    if mode == RecoveryMode::Strict {
        return Err(RecoveryError::DurableDamage {
            path,
            offset,
            reason,
            first_lost,
            durable: mark.lsn,
            records,
            clean: mark.clean,
        });
    }
    report.salvaged.push(SalvageLoss {
        path,
        offset,
        bytes,
        reason,
        lsns: first_lost..mark.lsn.next(),
    });
    Ok(())
}

/// Bytes of one segment: mapped when sealed and the storage can map, read otherwise.
fn read_segment(storage: &dyn Storage, path: &Path, role: Role) -> Result<Bytes, RecoveryError> {
    let io = |source| RecoveryError::Io {
        path: path.to_owned(),
        source,
    };
    let file = storage.open(path, false).map_err(io)?;
    let len = file.len_bytes().map_err(io)?;
    // Distrust the file size as any length: nothing bigger than a segment (or a segment
    // holding one maximal record, format 3) is read into memory.
    let file_max = limits::SEGMENT_BYTES_MAX
        .max((SEGMENT_HEADER_BYTES + record::frame_bytes(limits::RECORD_PAYLOAD_BYTES_MAX)) as u64);
    if len > file_max {
        return Err(RecoveryError::Corrupt {
            path: path.to_owned(),
            offset: file_max,
            reason: CorruptReason::Truncated,
        });
    }
    if role == Role::Sealed
        && let Some(map) = file.map_sealed().map_err(io)?
    {
        return Ok(Bytes::from_owner(map));
    }
    let len = usize::try_from(len).map_err(|_| io(std::io::Error::other("segment too large")))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).map_err(io)?;
    Ok(Bytes::from(buf))
}

/// Whether a segment is the last one (its tail may be torn) or sealed (it may not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Sealed,
    Last,
}

/// What a bad frame is, judged by what follows it in the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beyond {
    /// No valid frame follows.
    Nothing,
    /// Valid frames follow, all from the same write group as the bad one: the whole group was
    /// in flight at a crash (a write reordered by the disk), so the bad frame can be torn.
    SameGroup,
    /// A valid frame of a later write group follows. Each write group is synced before the
    /// next is written, so the bad frame was durable: it is damage, not a torn write.
    LaterGroup { offset: usize, lsn: Lsn },
}

/// What to do with one bad frame or header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    CutTornTail,
    Fail,
    SkipTo { offset: usize, lsn: Lsn },
    SkipRest,
}

/// The recovery decision table (STYLE 3.1): exhaustive over role, mode and what follows.
fn decide(role: Role, mode: RecoveryMode, beyond: Beyond) -> Decision {
    match (role, mode, beyond) {
        (Role::Last, _, Beyond::Nothing | Beyond::SameGroup) => Decision::CutTornTail,
        (Role::Last | Role::Sealed, RecoveryMode::Strict, Beyond::LaterGroup { .. })
        | (Role::Sealed, RecoveryMode::Strict, Beyond::Nothing | Beyond::SameGroup) => {
            Decision::Fail
        }
        (Role::Last | Role::Sealed, RecoveryMode::Salvage, Beyond::LaterGroup { offset, lsn }) => {
            Decision::SkipTo { offset, lsn }
        }
        (Role::Sealed, RecoveryMode::Salvage, Beyond::Nothing | Beyond::SameGroup) => {
            Decision::SkipRest
        }
    }
}

struct SegmentScan<'s, 'v, 'w> {
    path: &'s Path,
    id: SegmentId,
    role: Role,
    mode: RecoveryMode,
    bytes: &'s [u8],
    /// The same bytes, shared (for [`RecordRef::payload_shared`]).
    segment: &'s Bytes,
    report: &'s mut RecoveryReport,
    visit: &'v mut Visitor<'w>,
    /// Hand over only the records of some kinds, if the segment allows it
    /// ([`scan_selective`]).
    skim: Option<Skim<'s>>,
}

/// What [`SegmentScan::records_of_kinds`] asks and hands over ([`Selective`]).
struct Skim<'s> {
    whole: &'s mut WindowFilter<'s>,
    kinds: &'s dyn Fn(u8) -> bool,
    window: usize,
}

impl SegmentScan<'_, '_, '_> {
    fn corrupt(&self, offset: usize, reason: CorruptReason) -> RecoveryError {
        RecoveryError::Corrupt {
            path: self.path.to_owned(),
            offset: offset as u64,
            reason,
        }
    }

    /// Scans the segment. `strict_lsn`: the first Lsn must continue the previous segment
    /// exactly (false when segments in between were deleted).
    fn run(&mut self, strict_lsn: bool) -> Result<(), RecoveryError> {
        let Some(first_lsn) = self.header()? else {
            return Ok(());
        };
        let expected = self.report.next_lsn;
        let lsn_ok = if strict_lsn {
            first_lsn == expected || self.report.segments.is_empty()
        } else {
            first_lsn >= expected
        };
        if !lsn_ok && self.mode == RecoveryMode::Strict {
            return Err(self.corrupt(
                0,
                CorruptReason::LsnOutOfOrder {
                    expected,
                    found: first_lsn,
                },
            ));
        }
        self.report.next_lsn = first_lsn;
        if let Some(mut skim) = self.skim.take()
            && self.records_of_kinds(SEGMENT_HEADER_BYTES, &mut skim)?
        {
            return Ok(());
        }
        self.records(SEGMENT_HEADER_BYTES)
    }

    /// Steps through the frames from `offset` by their length fields and hands over those of
    /// `kinds`, checked ([`scan_selective`]); `false`, having handed over nothing, when a step
    /// does not land where a full scan would, or an accepted frame does not check: the
    /// caller then reads the segment whole.
    fn records_of_kinds(
        &mut self,
        mut offset: usize,
        skim: &mut Skim<'_>,
    ) -> Result<bool, RecoveryError> {
        let bytes = self.bytes;
        let mut lsn = self.report.next_lsn;
        let mut wanted = Vec::new();
        // Bytes `..asked` were asked about, window by window.
        let mut asked = 0;
        while offset < bytes.len() {
            if offset >= asked {
                let end = offset.saturating_add(skim.window).min(bytes.len());
                if (skim.whole)(self.id, bytes, asked..end) {
                    return Ok(false);
                }
                asked = end;
            }
            let rest = bytes.get(offset..).unwrap_or_default();
            let (Some(len), Some(found), Some(kind)) = (
                record::peek_payload_len(rest),
                record::peek_lsn(rest),
                record::peek_kind(rest),
            ) else {
                return Ok(false);
            };
            let end = offset.saturating_add(record::frame_bytes(len));
            if found != lsn || end > bytes.len() {
                return Ok(false);
            }
            if (skim.kinds)(kind) {
                wanted.push(offset);
            }
            offset = end;
            lsn = lsn.next();
        }
        if asked < bytes.len() && (skim.whole)(self.id, bytes, asked..bytes.len()) {
            return Ok(false);
        }
        let mut frames = Vec::with_capacity(wanted.len());
        for at in wanted {
            match record::decode_frame(bytes.get(at..).unwrap_or_default()) {
                FrameCheck::Valid(frame) => frames.push((at, frame)),
                _ => return Ok(false),
            }
        }
        for (at, frame) in frames {
            self.deliver(at, frame)?;
        }
        self.report.next_lsn = lsn;
        self.clean_end(offset);
        Ok(true)
    }

    /// Checks the header; `None` when the segment is to be ignored (a last segment whose
    /// creation never became durable).
    fn header(&mut self) -> Result<Option<Lsn>, RecoveryError> {
        let reason = match record::check_segment_header(self.bytes) {
            HeaderCheck::Valid(h) if h.segment_id == self.id => return Ok(Some(h.first_lsn)),
            // A checksummed header naming another segment is no torn write: a file was
            // renamed or copied. Never guess, in either mode.
            HeaderCheck::Valid(h) => {
                let reason = CorruptReason::SegmentIdMismatch {
                    named: self.id,
                    header: h.segment_id,
                };
                return Err(self.corrupt(0, reason));
            }
            HeaderCheck::NewerVersion(found) => {
                return Err(RecoveryError::UnsupportedVersion {
                    path: self.path.to_owned(),
                    found,
                    supported: record::FORMAT_VERSION,
                });
            }
            HeaderCheck::Short | HeaderCheck::Damaged => CorruptReason::BadHeader,
        };
        // Records are only written after the header was synced, so a bad header with intact
        // records behind it is damage; without any, it is a creation cut short by a crash.
        let beyond = self.beyond(SEGMENT_HEADER_BYTES, Lsn(1), Lsn(0));
        match decide(self.role, self.mode, beyond) {
            Decision::CutTornTail => {
                self.report.torn_tail = Some(self.torn(0, reason));
                self.report.unusable_last = Some(self.id);
                self.report.append_at = None;
                Ok(None)
            }
            Decision::Fail => Err(self.corrupt(0, reason)),
            Decision::SkipTo { offset, lsn } => {
                self.lose(0, offset, reason, self.report.next_lsn..lsn);
                self.report.next_lsn = lsn;
                self.records(offset)?;
                Ok(None)
            }
            Decision::SkipRest => {
                self.lose(
                    0,
                    self.bytes.len(),
                    reason,
                    self.report.next_lsn..self.report.next_lsn,
                );
                Ok(None)
            }
        }
    }

    /// Scans frames from `offset` to the end of the segment.
    fn records(&mut self, mut offset: usize) -> Result<(), RecoveryError> {
        loop {
            let rest = self.bytes.get(offset..).unwrap_or_default();
            let expected = self.report.next_lsn;
            let reason = match record::decode_frame(rest) {
                _ if rest.is_empty() => {
                    self.clean_end(offset);
                    return Ok(());
                }
                FrameCheck::Valid(frame) if frame.lsn == expected => {
                    self.deliver(offset, frame)?;
                    offset += frame.len_bytes();
                    continue;
                }
                FrameCheck::Zeros if self.role == Role::Last => {
                    self.clean_end(offset);
                    return Ok(());
                }
                FrameCheck::Zeros => CorruptReason::UnexpectedZeros,
                FrameCheck::Valid(frame) => CorruptReason::LsnOutOfOrder {
                    expected,
                    found: frame.lsn,
                },
                FrameCheck::Truncated => CorruptReason::Truncated,
                FrameCheck::LengthTooLarge(n) => CorruptReason::LengthTooLarge(n),
                FrameCheck::BadCrc => CorruptReason::BadCrc,
            };
            let beyond = self.beyond(offset + 1, expected, expected);
            match decide(self.role, self.mode, beyond) {
                Decision::CutTornTail => {
                    self.report.torn_tail = Some(self.torn(offset, reason));
                    self.report.append_at = Some(Position {
                        segment: self.id,
                        offset: offset as u64,
                    });
                    return Ok(());
                }
                Decision::Fail => return Err(self.corrupt(offset, reason)),
                Decision::SkipTo { offset: to, lsn } => {
                    self.lose(offset, to, reason, expected..lsn);
                    self.report.next_lsn = lsn;
                    offset = to;
                }
                Decision::SkipRest => {
                    self.lose(offset, self.bytes.len(), reason, expected..expected);
                    self.clean_end(self.bytes.len());
                    return Ok(());
                }
            }
        }
    }

    fn deliver(&mut self, offset: usize, frame: record::Frame<'_>) -> Result<(), RecoveryError> {
        let record = RecordRef {
            lsn: frame.lsn,
            position: Position {
                segment: self.id,
                offset: offset as u64,
            },
            kind: frame.kind,
            payload: frame.payload,
            segment: self.segment,
        };
        (self.visit)(record).map_err(|source| RecoveryError::Visitor {
            lsn: frame.lsn,
            source,
        })?;
        self.report.records += 1;
        self.report.next_lsn = frame.lsn.next();
        Ok(())
    }

    fn clean_end(&mut self, offset: usize) {
        self.report.append_at = Some(Position {
            segment: self.id,
            offset: offset as u64,
        });
    }

    fn torn(&self, offset: usize, reason: CorruptReason) -> TornTail {
        let rest = self.bytes.get(offset..).unwrap_or_default();
        let nonzero = rest.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        TornTail {
            path: self.path.to_owned(),
            offset: offset as u64,
            bytes: nonzero as u64,
            reason,
        }
    }

    fn lose(&mut self, from: usize, to: usize, reason: CorruptReason, lsns: std::ops::Range<Lsn>) {
        self.report.salvaged.push(SalvageLoss {
            path: self.path.to_owned(),
            offset: from as u64,
            bytes: to.saturating_sub(from) as u64,
            reason,
            lsns,
        });
    }

    /// Looks at everything from `from` on for valid frames with an Lsn of at least `min_lsn`,
    /// and classifies them (see [`Beyond`]): a frame whose write group started after
    /// `group_after` proves the bad spot was durable. After a bad header that is any frame at
    /// all (`min_lsn` 1, `group_after` 0): records are only written once the header is synced.
    fn beyond(&self, from: usize, min_lsn: Lsn, group_after: Lsn) -> Beyond {
        // Lsns beyond this are implausible: random bytes almost never fall below it.
        let lsn_max = self.report.next_lsn.0.saturating_add(1 << 32);
        let mut found = Beyond::Nothing;
        let mut offset = from;
        // Past the last non-zero byte there are only preallocated zeros: nothing to find.
        let zeros_from = self
            .bytes
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |p| p + 1);
        while offset < zeros_from {
            let rest = self.bytes.get(offset..).unwrap_or_default();
            // A cheap plausibility test first, so garbage costs no CRC: the Lsn must be within
            // reach of the one expected (a random 64-bit value almost never is).
            let plausible =
                record::peek_lsn(rest).is_some_and(|lsn| lsn >= min_lsn && lsn.0 < lsn_max);
            if plausible && let FrameCheck::Valid(frame) = record::decode_frame(rest) {
                if frame.group_first_lsn() > group_after {
                    return Beyond::LaterGroup {
                        offset,
                        lsn: frame.lsn,
                    };
                }
                found = Beyond::SameGroup;
                offset += frame.len_bytes();
                continue;
            }
            offset += 1;
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_sort_numerically() {
        let name = segment_file_name(SegmentId(42));
        assert_eq!(name, "00000000000000000042.wal");
        assert_eq!(parse_segment_file_name(&name), Some(SegmentId(42)));
        assert_eq!(parse_segment_file_name("42.wal"), None);
        assert_eq!(
            parse_segment_file_name("00000000000000000042.wal.tmp"),
            None
        );
        assert!(segment_file_name(SegmentId(9)) < segment_file_name(SegmentId(10)));
    }

    #[test]
    fn decision_table_never_cuts_a_sealed_segment_or_skips_in_strict_mode() {
        let beyonds = [
            Beyond::Nothing,
            Beyond::SameGroup,
            Beyond::LaterGroup {
                offset: 9,
                lsn: Lsn(5),
            },
        ];
        for role in [Role::Sealed, Role::Last] {
            for mode in [RecoveryMode::Strict, RecoveryMode::Salvage] {
                for beyond in beyonds {
                    let d = decide(role, mode, beyond);
                    if role == Role::Sealed {
                        assert_ne!(d, Decision::CutTornTail);
                    }
                    if mode == RecoveryMode::Strict {
                        assert!(matches!(d, Decision::Fail | Decision::CutTornTail));
                    }
                }
            }
        }
    }
}
