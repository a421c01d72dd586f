//! Reading a checkpoint back: every byte checked (header, frames, sequence, trailing bytes),
//! each record decoded, or loaded into a fresh broker with carried messages left on disk.

use std::collections::BTreeSet;
use std::path::Path;

use super::files::io_err;
use super::layout::{
    CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC, CHUNK_BYTES, CheckpointHeader, FLAGS_OFFSET,
    HEADER_CRC_OFFSET, LSN_OFFSET, NEXT_ID_OFFSET, RECORDS_OFFSET, VERSION_OFFSET,
};
use crate::codec::{self, STORE_FORMAT_VERSION, StoreRecord};
use crate::error::{CheckpointDamage, StoreError};
use wharf_broker::{Broker, Event, MessageRef, StoredMessage};
use wharf_wal::{
    FRAME_HEADER_BYTES, FrameCheck, Lsn, Position, SegmentId, Storage, StorageFile, decode_frame,
    frame_bytes, le, peek_payload_len,
};

/// One record of a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointRecord {
    /// A definition or a scheduled message, for `Broker::apply`.
    Event(Event),
    /// A live message with its queues.
    Carried(codec::Carried),
    /// A live message with its queues, its content at a position in the log (format 4).
    Referenced(codec::Referenced),
}

/// Reads a checkpoint's bytes in chunks, so memory holds a few MiB, not the file.
struct ChunkReader<'f> {
    file: &'f dyn StorageFile,
    len: u64,
    start: u64,
    buf: Vec<u8>,
}

impl ChunkReader<'_> {
    /// The bytes `offset..offset + n`, or `None` when the file ends first.
    fn get(&mut self, offset: u64, n: usize) -> std::io::Result<Option<&[u8]>> {
        let end = offset.checked_add(n as u64);
        if end.is_none_or(|end| end > self.len) {
            return Ok(None);
        }
        let have_end = self.start + self.buf.len() as u64;
        if offset < self.start || end.is_none_or(|end| end > have_end) {
            let left = usize::try_from(self.len - offset).unwrap_or(usize::MAX);
            let want = n.max(CHUNK_BYTES).min(left);
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, offset)?;
            self.start = offset;
        }
        let from = usize::try_from(offset - self.start).unwrap_or(usize::MAX);
        Ok(from.checked_add(n).and_then(|to| self.buf.get(from..to)))
    }
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<CheckpointDamage>) -> StoreError {
    StoreError::CorruptCheckpoint {
        path: path.to_owned(),
        offset,
        reason: reason.into(),
    }
}

/// Checks a checkpoint header (magic, then version, then CRC, as for segments).
fn check_header(path: &Path, bytes: &[u8]) -> Result<CheckpointHeader, StoreError> {
    let bad = |reason: &'static str| corrupt(path, 0, reason);
    if bytes.get(..CHECKPOINT_MAGIC.len()) != Some(&CHECKPOINT_MAGIC[..]) {
        return Err(bad("not a checkpoint (bad magic)"));
    }
    let version = le::u16_at(bytes, VERSION_OFFSET).ok_or_else(|| bad("short header"))?;
    if version > STORE_FORMAT_VERSION {
        return Err(StoreError::UnsupportedVersion {
            path: path.to_owned(),
            found: version,
            supported: STORE_FORMAT_VERSION,
        });
    }
    let covered = bytes
        .get(..HEADER_CRC_OFFSET)
        .ok_or_else(|| bad("short header"))?;
    if le::u32_at(bytes, HEADER_CRC_OFFSET) != Some(crc32fast::hash(covered)) {
        return Err(bad("header CRC mismatch"));
    }
    if version < 2 {
        return Err(bad("checkpoint version below 2 (checkpoints start at 2)"));
    }
    if le::u16_at(bytes, FLAGS_OFFSET) != Some(0) {
        return Err(bad("unknown header flags"));
    }
    let field = |at| le::u64_at(bytes, at).ok_or_else(|| bad("short header"));
    Ok(CheckpointHeader {
        version,
        lsn: Lsn(field(LSN_OFFSET)?),
        next_message_id: field(NEXT_ID_OFFSET)?,
        records: field(RECORDS_OFFSET)?,
    })
}

/// Reads a checkpoint file, checking every byte, and hands each record to `visit` in order,
/// with its frame's offset in the file and its size in bytes. Returns the header.
///
/// # Errors
/// [`StoreError::CorruptCheckpoint`] naming the file and offset for any damage (a bad CRC, a
/// record out of sequence, a kind not allowed in a checkpoint, a record that does not decode,
/// missing or extra bytes); [`StoreError::UnsupportedVersion`]; I/O errors; `visit`'s error.
pub fn read(
    storage: &dyn Storage,
    path: &Path,
    visit: &mut dyn FnMut(CheckpointRecord, u64, u64) -> Result<(), StoreError>,
) -> Result<CheckpointHeader, StoreError> {
    read_frames(
        storage,
        path,
        &mut |_, kind, payload, offset, frame_bytes| {
            let decoded =
                decode_record(kind, payload).map_err(|reason| corrupt(path, offset, reason))?;
            visit(decoded, offset, frame_bytes)
        },
    )
}

/// What [`read_frames`] hands each frame to: the header, kind, payload, offset and size.
pub type FrameVisitor<'a> =
    &'a mut dyn FnMut(&CheckpointHeader, u8, &[u8], u64, u64) -> Result<(), StoreError>;

/// As [`read`], handing each intact frame's kind and payload, undecoded (after the header,
/// which comes first): for readers that decode only what they need (`trace`).
///
/// # Errors
/// As [`read`], but a record that does not decode is the visitor's to judge.
pub fn read_frames(
    storage: &dyn Storage,
    path: &Path,
    visit: FrameVisitor<'_>,
) -> Result<CheckpointHeader, StoreError> {
    let file = storage.open(path, false).map_err(io_err(path))?;
    let len = file.len_bytes().map_err(io_err(path))?;
    let mut reader = ChunkReader {
        file: &*file,
        len,
        start: 0,
        buf: Vec::new(),
    };
    let head = reader
        .get(0, CHECKPOINT_HEADER_BYTES)
        .map_err(io_err(path))?
        .ok_or_else(|| corrupt(path, 0, "shorter than its header"))?;
    let header = check_header(path, head)?;
    let mut offset = CHECKPOINT_HEADER_BYTES as u64;
    for seq in 1..=header.records {
        let frame_head = reader
            .get(offset, FRAME_HEADER_BYTES)
            .map_err(io_err(path))?
            .ok_or_else(|| corrupt(path, offset, "file ends before its last record"))?;
        let payload_len = peek_payload_len(frame_head)
            .ok_or_else(|| corrupt(path, offset, "record length over the limit"))?;
        let bytes = reader
            .get(offset, frame_bytes(payload_len))
            .map_err(io_err(path))?
            .ok_or_else(|| corrupt(path, offset, "file ends inside a record"))?;
        let frame = match decode_frame(bytes) {
            FrameCheck::Valid(f) if f.lsn == Lsn(seq) && f.group_delta == 0 => f,
            FrameCheck::Valid(_) => return Err(corrupt(path, offset, "record out of sequence")),
            _ => return Err(corrupt(path, offset, "record CRC mismatch")),
        };
        let frame_bytes = frame.len_bytes() as u64;
        visit(&header, frame.kind, frame.payload, offset, frame_bytes)?;
        offset += frame_bytes;
    }
    if offset != len {
        return Err(corrupt(path, offset, "bytes after the last record"));
    }
    Ok(header)
}

/// Decodes one checkpoint record: a definition, a scheduled message, a carried or a referenced
/// message. Any other kind (log-only records, the format marker) is damage.
///
/// # Errors
/// What is wrong: a record that does not decode, or a kind not allowed here.
pub fn decode_record(kind: u8, payload: &[u8]) -> Result<CheckpointRecord, CheckpointDamage> {
    if kind == codec::CARRIED_KIND {
        return codec::decode_carried(payload)
            .map(CheckpointRecord::Carried)
            .map_err(CheckpointDamage::Record);
    }
    if kind == codec::REFERENCED_KIND {
        return codec::decode_referenced(payload)
            .map(CheckpointRecord::Referenced)
            .map_err(CheckpointDamage::Record);
    }
    match codec::decode(kind, payload).map_err(CheckpointDamage::Record)? {
        StoreRecord::Event(
            e @ (Event::VhostAdded { .. }
            | Event::VhostDeleted { .. }
            | Event::ExchangeDeclared { .. }
            | Event::QueueDeclared { .. }
            | Event::Bound { .. }
            | Event::PolicySet { .. }
            | Event::UserPut { .. }
            | Event::UserDeleted { .. }
            | Event::PermissionSet { .. }
            | Event::TopicPermissionSet { .. }
            | Event::Scheduled { .. }),
        ) => Ok(CheckpointRecord::Event(e)),
        _ => Err(CheckpointDamage::KindNotAllowed(kind)),
    }
}

/// A checkpoint loaded into a broker.
#[derive(Debug)]
pub struct Loaded {
    /// Its header.
    pub header: CheckpointHeader,
    /// Messages carried or referred to.
    pub messages: u64,
    /// (message id, frame offset) of every carried message, in id order.
    pub index: Vec<(u64, u64)>,
    /// The log segments its referenced messages are in.
    pub referenced: BTreeSet<u64>,
}

/// Loads the checkpoint at `path` into `broker` (a fresh one). Carried messages are restored
/// as stored references into the file, referenced ones as stored references into the log
/// (their content stays on disk, read back when needed: nothing of a message is read here).
///
/// # Errors
/// As [`read`]; a record the model refuses is [`StoreError::CorruptCheckpoint`] too.
pub fn load(storage: &dyn Storage, path: &Path, broker: &mut Broker) -> Result<Loaded, StoreError> {
    let mut index_of = 0u64;
    let mut index = Vec::new();
    let mut referenced = BTreeSet::new();
    let mut by_reference = 0u64;
    let header = read_frames(storage, path, &mut |header, kind, payload, offset, _| {
        index_of += 1;
        let refused = |reason: wharf_broker::BrokerError| {
            let record = index_of;
            corrupt(path, offset, CheckpointDamage::Refused { record, reason })
        };
        if kind == codec::CARRIED_KIND {
            if index.capacity() == 0 {
                // Sized once from the (checked) header, bounded: no doubling over millions.
                index.reserve(usize::try_from(header.records.min(1 << 26)).unwrap_or(0));
            }
            let at = crate::stored::pack_checkpoint(header.lsn.0, offset)
                .ok_or_else(|| corrupt(path, offset, "checkpoint over 1 TiB"))?;
            let (vhost, placements, message) = codec::decode_carried_stored(payload, at)
                .map_err(|e| corrupt(path, offset, CheckpointDamage::Record(e)))?;
            if index.last().is_some_and(|&(last, _)| last >= message.id.0) {
                return Err(corrupt(path, offset, "carried messages out of id order"));
            }
            index.push((message.id.0, offset));
            return broker
                .restore_message(&vhost, &MessageRef::Stored(message), &placements)
                .map_err(refused);
        }
        match decode_record(kind, payload).map_err(|reason| corrupt(path, offset, reason))? {
            CheckpointRecord::Event(event) => broker.apply(&event).map_err(refused),
            CheckpointRecord::Referenced(r) => {
                let f = r.message;
                let position = Position {
                    segment: SegmentId(f.segment),
                    offset: f.offset,
                };
                let at = crate::stored::pack_log(position)
                    .ok_or_else(|| corrupt(path, offset, "log position out of range"))?;
                referenced.insert(f.segment);
                by_reference += 1;
                let message = StoredMessage {
                    id: f.id,
                    enqueued_at_ms: f.enqueued_at_ms,
                    ttl_ms: f.ttl_ms,
                    body_len: f.body_len,
                    priority: f.priority,
                    at,
                };
                broker
                    .restore_message(&r.vhost, &MessageRef::Stored(message), &r.placements)
                    .map_err(refused)
            }
            CheckpointRecord::Carried(_) => Err(corrupt(path, offset, "carried record misread")),
        }
    })?;
    broker.restore_next_message_id(header.next_message_id);
    index.shrink_to_fit();
    Ok(Loaded {
        header,
        messages: index.len() as u64 + by_reference,
        index,
        referenced,
    })
}
