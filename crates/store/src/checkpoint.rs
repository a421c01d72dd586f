//! Checkpoints: a snapshot of the live durable state at an Lsn, written atomically (temporary
//! file, fsync, rename, directory fsync), so that recovery reads the newest checkpoint and
//! then only the log records after it, and every segment whose records it covers can be
//! deleted (garbage collection and compaction at once: a live message is carried forward into
//! each checkpoint, so it never pins an old segment).
//!
//! The file is a header followed by records framed exactly as in the log (`wal::record`'s
//! frame, with the record's sequence number in the Lsn field), holding the store's own record
//! payloads (`codec`) plus the checkpoint-only `Carried` kind. The layout is
//! `storage-format.md`, section "Checkpoints". Depends on `broker` (the snapshot, `apply`),
//! `wal` (storage, frames) and `codec`; knows nothing of AMQP, tokio or the server.

#![warn(clippy::indexing_slicing)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use crate::codec::{self, STORE_FORMAT_VERSION, StoreRecord};
use crate::error::{CheckpointDamage, StoreError};
use wharf_base::limits;
use wharf_broker::{Broker, Event, MessageRef, Placement, Snapshot, StoredMessage};
use wharf_wal::{
    FRAME_HEADER_BYTES, FrameCheck, FrameFields, Lsn, Storage, StorageFile, decode_frame,
    encode_frame, frame_bytes, le, peek_payload_len,
};

/// First bytes of a checkpoint file: PNG-style, as the segment magic, with `WHC` ("wharf
/// checkpoint") so a hex dump names the file.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"\x89WHC\r\n\x1a\n";

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + CHECKPOINT_MAGIC.len();
const FLAGS_OFFSET: usize = VERSION_OFFSET + size_of::<u16>();
const LSN_OFFSET: usize = FLAGS_OFFSET + size_of::<u16>();
const NEXT_ID_OFFSET: usize = LSN_OFFSET + size_of::<u64>();
const RECORDS_OFFSET: usize = NEXT_ID_OFFSET + size_of::<u64>();
const HEADER_CRC_OFFSET: usize = RECORDS_OFFSET + size_of::<u64>();
/// Bytes of the checkpoint header.
pub const CHECKPOINT_HEADER_BYTES: usize = HEADER_CRC_OFFSET + size_of::<u32>();

/// Bytes gathered before one positional write (and read ahead when loading).
const CHUNK_BYTES: usize = 4 * 1024 * 1024;

const SUFFIX: &str = ".checkpoint";
const TMP_SUFFIX: &str = ".checkpoint.tmp";

/// What a checkpoint's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointHeader {
    /// Store format version of the records inside.
    pub version: u16,
    /// Every log record up to and including this Lsn is reflected in the checkpoint.
    pub lsn: Lsn,
    /// The id the broker gives its next new message.
    pub next_message_id: u64,
    /// Number of records after the header.
    pub records: u64,
}

/// Name of the checkpoint covering the log through `lsn`: `{lsn:020}.checkpoint`.
pub fn file_name(lsn: Lsn) -> String {
    format!("{:020}{SUFFIX}", lsn.0)
}

/// The Lsn a checkpoint file name covers; `None` for any other file (temporary ones too).
pub fn parse_file_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Lsn)
}

fn is_temporary(name: &str) -> bool {
    name.strip_suffix(TMP_SUFFIX)
        .is_some_and(|digits| parse_file_name(&format!("{digits}{SUFFIX}")).is_some())
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The checkpoint files of `dir`, newest first (by the Lsn in their names).
///
/// # Errors
/// The directory cannot be listed.
pub fn list(storage: &dyn Storage, dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, StoreError> {
    let names = storage.list(dir).map_err(io_err(dir))?;
    let mut found: Vec<(Lsn, PathBuf)> = names
        .iter()
        .filter_map(|n| parse_file_name(n).map(|lsn| (lsn, dir.join(n))))
        .collect();
    found.sort_unstable_by_key(|f| Reverse(f.0));
    Ok(found)
}

/// Removes temporary checkpoint files (a write cut short by a crash; never renamed, so never
/// in use), durably.
///
/// # Errors
/// The directory cannot be listed or synced, or a file cannot be removed.
pub fn remove_temporaries(storage: &dyn Storage, dir: &Path) -> Result<(), StoreError> {
    let names = storage.list(dir).map_err(io_err(dir))?;
    let mut removed = false;
    for name in names.iter().filter(|n| is_temporary(n)) {
        let path = dir.join(name);
        tracing::warn!(path = %path.display(), "removing a checkpoint never completed");
        storage.remove(&path).map_err(io_err(&path))?;
        removed = true;
    }
    if removed {
        storage.sync_dir(dir).map_err(io_err(dir))?;
    }
    Ok(())
}

/// Removes the checkpoints older than `lsn` (superseded once the one at `lsn` is durable).
///
/// # Errors
/// The directory cannot be listed or synced, or a file cannot be removed.
pub fn remove_older(storage: &dyn Storage, dir: &Path, lsn: Lsn) -> Result<(), StoreError> {
    let older: Vec<_> = list(storage, dir)?
        .into_iter()
        .filter(|(l, _)| *l < lsn)
        .collect();
    for (_, path) in &older {
        storage.remove(path).map_err(io_err(path))?;
    }
    if !older.is_empty() {
        storage.sync_dir(dir).map_err(io_err(dir))?;
    }
    Ok(())
}

// ----- writing -----

/// Encodes a snapshot as checkpoint records (header excluded), handing the bytes to `sink`
/// in chunks; returns the number of records.
struct Encoder<'s> {
    sink: &'s mut dyn FnMut(&[u8]) -> Result<(), StoreError>,
    buf: Vec<u8>,
    payload: Vec<u8>,
    records: u64,
    /// Bytes handed to `sink` so far.
    flushed: u64,
    /// (message id, frame offset) of every carried message, in id order.
    index: Vec<(u64, u64)>,
}

/// Reads a stored message's encoded Message part (the checkpoint copies it forward as is).
pub type PartSource<'a> = &'a dyn Fn(&StoredMessage) -> Result<Vec<u8>, String>;

impl Encoder<'_> {
    fn event(&mut self, event: &Event) -> Result<(), StoreError> {
        self.payload.clear();
        let kind = codec::encode_event(event, &mut self.payload)?;
        self.frame(kind.byte())
    }

    fn carried(
        &mut self,
        vhost: &str,
        placements: &[Placement],
        message: &MessageRef,
        parts: PartSource<'_>,
    ) -> Result<(), StoreError> {
        self.payload.clear();
        match message {
            MessageRef::Loaded(m) => {
                codec::encode_carried(vhost, placements, m, &mut self.payload)?;
            }
            MessageRef::Stored(s) => {
                let part = parts(s).map_err(StoreError::Log)?;
                codec::encode_carried_part(vhost, placements, &part, &mut self.payload)?;
            }
        }
        let offset = CHECKPOINT_HEADER_BYTES as u64 + self.flushed + self.buf.len() as u64;
        self.index.push((message.id().0, offset));
        self.frame(codec::CARRIED_KIND)
    }

    /// Frames the payload just encoded as the next record.
    fn frame(&mut self, kind: u8) -> Result<(), StoreError> {
        if self.payload.len() > limits::RECORD_PAYLOAD_BYTES_MAX {
            return Err(StoreError::RecordTooLarge {
                len: self.payload.len(),
                max: limits::RECORD_PAYLOAD_BYTES_MAX,
            });
        }
        self.records += 1;
        let fields = FrameFields {
            lsn: Lsn(self.records),
            kind,
            group_delta: 0,
        };
        let crc = crc32fast::hash(&self.payload);
        encode_frame(&mut self.buf, fields, &self.payload, crc);
        if self.buf.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if !self.buf.is_empty() {
            (self.sink)(&self.buf)?;
            self.flushed += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Writes every record of `snapshot`: definitions, scheduled messages, then the messages of
/// all queues merged by id (queue order), each message once with all its queues.
fn encode_records(
    snapshot: &Snapshot,
    enc: &mut Encoder<'_>,
    parts: PartSource<'_>,
) -> Result<(), StoreError> {
    for event in snapshot.definitions.iter().chain(&snapshot.scheduled) {
        enc.event(event)?;
    }
    // A k-way merge over the queues by message id: a message in several queues (fanout) is
    // the same `Arc` everywhere and is written once.
    let queues = &snapshot.queues;
    let mut cursor = vec![0usize; queues.len()];
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = queues
        .iter()
        .enumerate()
        .filter_map(|(i, q)| q.messages.first().map(|m| Reverse((m.message.id().0, i))))
        .collect();
    let mut placements: Vec<Placement> = Vec::new();
    while let Some(Reverse((id, first))) = heap.pop() {
        let Some(q) = queues.get(first) else { break };
        let Some(first_msg) = q.messages.get(cursor.get(first).copied().unwrap_or(0)) else {
            break;
        };
        let message = first_msg.message.clone();
        let vhost = q.vhost.as_str();
        placements.clear();
        let mut take = |i: usize, heap: &mut BinaryHeap<Reverse<(u64, usize)>>| {
            let (Some(q), Some(at)) = (queues.get(i), cursor.get_mut(i)) else {
                return;
            };
            if let Some(m) = q.messages.get(*at) {
                placements.push(Placement {
                    queue: q.queue.clone(),
                    delivery_count: m.delivery_count,
                    redelivered: m.redelivered,
                });
            }
            *at += 1;
            if let Some(next) = q.messages.get(*at) {
                heap.push(Reverse((next.message.id().0, i)));
            }
        };
        take(first, &mut heap);
        // Same id, same vhost: the same message in another queue.
        while let Some(&Reverse((next_id, i))) = heap.peek() {
            if next_id != id || queues.get(i).is_none_or(|q| q.vhost != vhost) {
                break;
            }
            heap.pop();
            take(i, &mut heap);
        }
        enc.carried(vhost, &placements, &message, parts)?;
    }
    Ok(())
}

fn encode_header(h: CheckpointHeader) -> [u8; CHECKPOINT_HEADER_BYTES] {
    let mut out = Vec::with_capacity(CHECKPOINT_HEADER_BYTES);
    out.extend_from_slice(&CHECKPOINT_MAGIC);
    le::put_u16(&mut out, h.version);
    le::put_u16(&mut out, 0);
    le::put_u64(&mut out, h.lsn.0);
    le::put_u64(&mut out, h.next_message_id);
    le::put_u64(&mut out, h.records);
    let crc = crc32fast::hash(&out);
    le::put_u32(&mut out, crc);
    let mut header = [0u8; CHECKPOINT_HEADER_BYTES];
    header.copy_from_slice(out.get(..CHECKPOINT_HEADER_BYTES).unwrap_or_default());
    header
}

/// The whole checkpoint file for `snapshot` at `lsn`, in memory (tests, golden examples).
/// Every message must be in memory (`MessageRef::Loaded`).
///
/// # Errors
/// An event or message that does not fit the record format, or a stored message.
pub fn encode_to_vec(snapshot: &Snapshot, lsn: Lsn) -> Result<Vec<u8>, StoreError> {
    let mut body = vec![0u8; CHECKPOINT_HEADER_BYTES];
    let mut sink = |bytes: &[u8]| {
        body.extend_from_slice(bytes);
        Ok(())
    };
    let mut enc = Encoder {
        sink: &mut sink,
        buf: Vec::new(),
        payload: Vec::new(),
        records: 0,
        flushed: 0,
        index: Vec::new(),
    };
    let no_store = |s: &StoredMessage| Err(format!("message {} is stored, not in memory", s.id.0));
    encode_records(snapshot, &mut enc, &no_store)?;
    enc.flush()?;
    let records = enc.records;
    let header = encode_header(CheckpointHeader {
        version: STORE_FORMAT_VERSION,
        lsn,
        next_message_id: snapshot.next_message_id,
        records,
    });
    if let Some(head) = body.get_mut(..CHECKPOINT_HEADER_BYTES) {
        head.copy_from_slice(&header);
    }
    Ok(body)
}

/// Writes the checkpoint of `snapshot` covering the log through `lsn` atomically: into
/// `{lsn}.checkpoint.tmp`, fsync, rename to `{lsn}.checkpoint`, fsync the directory; then
/// removes older checkpoints. Stored messages' Message parts come from `parts`. Returns the
/// file's size in bytes and the offset of each carried message by id.
///
/// The caller must have made the log durable through `lsn` first: a checkpoint must never
/// describe records a crash could still lose.
///
/// # Errors
/// I/O errors (the temporary file is then left behind and removed at the next open), a
/// record that does not fit the format, or a stored message that cannot be read.
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    lsn: Lsn,
    snapshot: &Snapshot,
    parts: PartSource<'_>,
) -> Result<(u64, Vec<(u64, u64)>), StoreError> {
    let path = dir.join(file_name(lsn));
    let tmp = dir.join(format!("{:020}{TMP_SUFFIX}", lsn.0));
    if storage
        .list(dir)
        .map_err(io_err(dir))?
        .iter()
        .any(|n| dir.join(n) == tmp)
    {
        storage.remove(&tmp).map_err(io_err(&tmp))?;
    }
    let file = storage.create_new(&tmp).map_err(io_err(&tmp))?;
    let mut offset = CHECKPOINT_HEADER_BYTES as u64;
    let mut sink = |bytes: &[u8]| {
        file.write_all_at(bytes, offset).map_err(io_err(&tmp))?;
        offset += bytes.len() as u64;
        Ok(())
    };
    let mut enc = Encoder {
        sink: &mut sink,
        buf: Vec::new(),
        payload: Vec::new(),
        records: 0,
        flushed: 0,
        index: Vec::with_capacity(snapshot.queues.iter().map(|q| q.messages.len()).sum()),
    };
    encode_records(snapshot, &mut enc, parts)?;
    enc.flush()?;
    let records = enc.records;
    let index = std::mem::take(&mut enc.index);
    let header = encode_header(CheckpointHeader {
        version: STORE_FORMAT_VERSION,
        lsn,
        next_message_id: snapshot.next_message_id,
        records,
    });
    file.write_all_at(&header, 0).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    let bytes = offset;
    drop(file);
    storage.rename(&tmp, &path).map_err(io_err(&path))?;
    storage.sync_dir(dir).map_err(io_err(dir))?;
    // Only now, with the new one durable, may older checkpoints go.
    remove_older(storage, dir, lsn)?;
    Ok((bytes, index))
}

// ----- reading -----

/// One record of a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointRecord {
    /// A definition or a scheduled message, for `Broker::apply`.
    Event(Event),
    /// A live message with its queues.
    Carried(codec::Carried),
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
type FrameVisitor<'a> =
    &'a mut dyn FnMut(&CheckpointHeader, u8, &[u8], u64, u64) -> Result<(), StoreError>;

/// As [`read`], handing each intact frame's kind and payload, undecoded (after the header,
/// which comes first).
fn read_frames(
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

/// Decodes one checkpoint record: a definition, a scheduled message or a carried message.
/// Any other kind (log-only events, the format marker) is damage.
///
/// # Errors
/// What is wrong: a record that does not decode, or a kind not allowed here.
pub fn decode_record(kind: u8, payload: &[u8]) -> Result<CheckpointRecord, CheckpointDamage> {
    if kind == codec::CARRIED_KIND {
        return codec::decode_carried(payload)
            .map(CheckpointRecord::Carried)
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
    /// Messages carried.
    pub messages: u64,
    /// (message id, frame offset) of every carried message, in id order.
    pub index: Vec<(u64, u64)>,
}

/// Loads the checkpoint at `path` into `broker` (a fresh one). Carried messages are restored
/// as stored references into the file (their content stays on disk, read back when needed).
///
/// # Errors
/// As [`read`]; a record the model refuses is [`StoreError::CorruptCheckpoint`] too.
pub fn load(storage: &dyn Storage, path: &Path, broker: &mut Broker) -> Result<Loaded, StoreError> {
    let mut index_of = 0u64;
    let mut index = Vec::new();
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
            CheckpointRecord::Carried(_) => Err(corrupt(path, offset, "carried record misread")),
        }
    })?;
    broker.restore_next_message_id(header.next_message_id);
    index.shrink_to_fit();
    Ok(Loaded {
        header,
        messages: index.len() as u64,
        index,
    })
}
