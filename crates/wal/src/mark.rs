//! The durable mark (`durable.mark`, storage-format.md "Durable mark"): how far an fsync is
//! known to have covered the log. The writer rewrites it after each batch's `fdatasync`
//! without syncing it (so it costs one small positional write, never a second fsync), and
//! syncs it once at a clean stop. Whatever of it reaches the disk is at most what was durable
//! when it was written, so recovery may treat every record up to it as confirmed: a log that
//! ends before the mark is damage to synced data, never a torn tail (S-DISK-6).
//!
//! Two slots, 512 bytes apart (separate sectors), are written in turn, so a write torn by a
//! power loss leaves the other slot intact; a slot whose CRC fails is ignored. Pure encoding
//! plus the few storage calls; knows nothing of the writer.
#![warn(clippy::indexing_slicing)]

use std::io;
use std::path::{Path, PathBuf};

use crate::error::RecoveryError;
use crate::ids::{Lsn, SegmentId};
use crate::record::le;

/// The mark's own layout version: `2`, the log format that introduced it (the mark did not
/// change in format 3, which only allows segments sized to one large record).
const MARK_VERSION: u16 = 2;
use crate::storage::{Storage, StorageFile};

/// Name of the mark file in the log directory.
pub const MARK_FILE_NAME: &str = "durable.mark";
/// The mark magic, built as the segment magic (`WHD`: "wharf durable").
pub const MARK_MAGIC: [u8; 8] = *b"\x89WHD\r\n\x1a\n";
/// Bytes of one slot.
pub const MARK_SLOT_BYTES: usize = 40;
/// Where the second slot starts (the first is at 0): another 512-byte sector.
pub const MARK_SLOT_STRIDE: usize = 512;
/// Length of the mark file.
pub const MARK_FILE_BYTES: usize = MARK_SLOT_STRIDE + MARK_SLOT_BYTES;
/// Flag bit 0: written by a clean stop, after the writer drained everything.
const FLAG_CLEAN: u16 = 1;

/// What one valid slot says: every record through `lsn` was durable when it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableMark {
    /// The last durable record's Lsn (0: nothing yet).
    pub lsn: Lsn,
    /// The segment that record is in.
    pub segment: SegmentId,
    /// The offset just past that record in its segment.
    pub end: u64,
    /// Written by a clean stop: the log ended exactly here.
    pub clean: bool,
}

/// What recovery found in the mark file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MarkState {
    /// No mark file (a log written before format version 2, or a fresh directory).
    #[default]
    Missing,
    /// The file exists but neither slot checks out (both writes torn by a power loss).
    Unreadable,
    /// The newest valid slot.
    Found(DurableMark),
}

/// Encodes one slot.
///
/// # Panics
/// When the encoding does not read back as `mark` (a bug in this module).
pub fn encode_mark(mark: DurableMark) -> [u8; MARK_SLOT_BYTES] {
    let mut out = Vec::with_capacity(MARK_SLOT_BYTES);
    out.extend_from_slice(&MARK_MAGIC);
    le::put_u16(&mut out, MARK_VERSION);
    le::put_u16(&mut out, if mark.clean { FLAG_CLEAN } else { 0 });
    le::put_u64(&mut out, mark.lsn.0);
    le::put_u64(&mut out, mark.segment.0);
    le::put_u64(&mut out, mark.end);
    let crc = crc32fast::hash(&out);
    le::put_u32(&mut out, crc);
    let mut fixed = [0u8; MARK_SLOT_BYTES];
    fixed.copy_from_slice(&out);
    assert_eq!(
        decode_mark(&fixed),
        SlotCheck::Valid(mark),
        "mark round trip"
    );
    fixed
}

/// What one slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotCheck {
    /// Magic, version and CRC are right.
    Valid(DurableMark),
    /// Torn, never written, or not a mark.
    Invalid,
    /// Written by a newer format version.
    NewerVersion(u16),
}

/// Decodes the slot at the start of `buf` (untrusted bytes; never panics).
pub fn decode_mark(buf: &[u8]) -> SlotCheck {
    let Some(slot) = buf.get(..MARK_SLOT_BYTES) else {
        return SlotCheck::Invalid;
    };
    if slot.get(..8) != Some(&MARK_MAGIC[..]) {
        return SlotCheck::Invalid;
    }
    let (Some(version), Some(flags), Some(lsn), Some(segment), Some(end), Some(crc)) = (
        le::u16_at(slot, 8),
        le::u16_at(slot, 10),
        le::u64_at(slot, 12),
        le::u64_at(slot, 20),
        le::u64_at(slot, 28),
        le::u32_at(slot, 36),
    ) else {
        return SlotCheck::Invalid;
    };
    if version > MARK_VERSION {
        return SlotCheck::NewerVersion(version);
    }
    let covered = slot.get(..36).unwrap_or_default();
    if version != MARK_VERSION || flags & !FLAG_CLEAN != 0 || crc32fast::hash(covered) != crc {
        return SlotCheck::Invalid;
    }
    SlotCheck::Valid(DurableMark {
        lsn: Lsn(lsn),
        segment: SegmentId(segment),
        end,
        clean: flags & FLAG_CLEAN != 0,
    })
}

/// Path of the mark file of the log in `dir`.
pub fn mark_path(dir: &Path) -> PathBuf {
    dir.join(MARK_FILE_NAME)
}

/// Reads the mark of the log in `dir`: the valid slot with the higher Lsn.
///
/// # Errors
/// I/O errors.
pub fn read_mark(storage: &dyn Storage, dir: &Path) -> Result<MarkState, RecoveryError> {
    let path = mark_path(dir);
    let io = |source| RecoveryError::Io {
        path: path.clone(),
        source,
    };
    let names = storage.list(dir).map_err(io)?;
    if !names.iter().any(|n| n == MARK_FILE_NAME) {
        return Ok(MarkState::Missing);
    }
    let file = storage.open(&path, false).map_err(io)?;
    let len = file.len_bytes().map_err(io)?;
    let len = usize::try_from(len.min(MARK_FILE_BYTES as u64)).unwrap_or(0);
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).map_err(io)?;
    let mut best: Option<DurableMark> = None;
    for at in [0, MARK_SLOT_STRIDE] {
        match decode_mark(buf.get(at..).unwrap_or_default()) {
            SlotCheck::Valid(m) if best.is_none_or(|b| m.lsn > b.lsn) => best = Some(m),
            // A slot of a newer version is ignored, not refused: a power loss garbles
            // unsynced slots (the version field included), and the segment headers already
            // refuse a log of a newer format.
            SlotCheck::Valid(_) | SlotCheck::Invalid | SlotCheck::NewerVersion(_) => {}
        }
    }
    Ok(best.map_or(MarkState::Unreadable, MarkState::Found))
}

/// The open mark file, as the writer keeps it.
#[derive(Debug)]
pub(crate) struct MarkFile {
    file: Box<dyn StorageFile>,
    /// The slot the next write goes to.
    next_slot: usize,
}

impl MarkFile {
    /// Opens the mark file of `dir` for writing, creating it (durably, with both slots
    /// saying `initial`) when missing. `initial` must be durable already.
    pub(crate) fn open(
        storage: &dyn Storage,
        dir: &Path,
        initial: DurableMark,
    ) -> io::Result<MarkFile> {
        let path = mark_path(dir);
        let exists = storage.list(dir)?.iter().any(|n| n == MARK_FILE_NAME);
        let file = if exists {
            storage.open(&path, true)?
        } else {
            storage.create_new(&path)?
        };
        let mut mark = MarkFile { file, next_slot: 0 };
        if !exists || mark.file.len_bytes()? != MARK_FILE_BYTES as u64 {
            mark.file.set_len(MARK_FILE_BYTES as u64)?;
            mark.write(initial)?;
            mark.write(initial)?;
            mark.file.sync_all()?;
            storage.sync_dir(dir)?;
        }
        Ok(mark)
    }

    /// Writes `mark` into the next slot, without syncing (see the module doc).
    pub(crate) fn write(&mut self, mark: DurableMark) -> io::Result<()> {
        let at = self.next_slot * MARK_SLOT_STRIDE;
        self.file.write_all_at(&encode_mark(mark), at as u64)?;
        self.next_slot = 1 - self.next_slot;
        Ok(())
    }

    /// Writes `mark` into both slots and syncs: a clean stop, or the state recovery just
    /// made durable at open.
    pub(crate) fn write_durably(&mut self, mark: DurableMark) -> io::Result<()> {
        self.write(mark)?;
        self.write(mark)?;
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(lsn: u64) -> DurableMark {
        DurableMark {
            lsn: Lsn(lsn),
            segment: SegmentId(3),
            end: 4096,
            clean: false,
        }
    }

    #[test]
    fn slots_round_trip_and_reject_damage() {
        let bytes = encode_mark(mark(7));
        assert_eq!(decode_mark(&bytes), SlotCheck::Valid(mark(7)));
        for i in 0..MARK_SLOT_BYTES {
            let mut bad = bytes;
            bad[i] ^= 0x10;
            assert_ne!(decode_mark(&bad), SlotCheck::Valid(mark(7)), "byte {i}");
        }
        assert_eq!(decode_mark(&bytes[..39]), SlotCheck::Invalid);
        assert_eq!(decode_mark(&[0u8; 40]), SlotCheck::Invalid);
    }

    #[test]
    fn the_newest_valid_slot_wins_and_a_torn_one_is_ignored() {
        let sim = crate::SimStorage::new(1);
        let dir = Path::new("/mark");
        sim.create_dir_all(dir).unwrap();
        assert_eq!(read_mark(&sim, dir).unwrap(), MarkState::Missing);
        let mut file = MarkFile::open(&sim, dir, mark(0)).unwrap();
        file.write(mark(5)).unwrap();
        file.write(mark(9)).unwrap();
        assert_eq!(read_mark(&sim, dir).unwrap(), MarkState::Found(mark(9)));
        let mut bytes = sim.file_bytes(&mark_path(dir)).unwrap();
        bytes[MARK_SLOT_STRIDE + 3] ^= 1;
        sim.set_file_bytes(&mark_path(dir), bytes.clone());
        assert_eq!(read_mark(&sim, dir).unwrap(), MarkState::Found(mark(5)));
        bytes[3] ^= 1;
        sim.set_file_bytes(&mark_path(dir), bytes);
        assert_eq!(read_mark(&sim, dir).unwrap(), MarkState::Unreadable);
    }
}
