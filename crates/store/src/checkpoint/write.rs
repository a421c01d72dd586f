//! Writing a checkpoint: a snapshot's records (definitions, scheduled messages, then every live
//! message once with all its queues, in id order: referred to where its record is in the log,
//! or carried whole when it has no log position) framed as in the log, behind a header,
//! written to a temporary file and renamed into place durably.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::path::Path;

use super::files::{file_name, io_err, temporary_file_name};
use super::layout::{CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC, CHUNK_BYTES, CheckpointHeader};
use crate::codec::{self, STORE_FORMAT_VERSION};
use crate::error::StoreError;
use wharf_base::limits;
use wharf_broker::{Event, MessageRef, Placement, Snapshot, StoredMessage};
use wharf_wal::{Lsn, Position, Storage, encode_frame_header, le, seal_frame};

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
    /// The log segments the `Referenced` records point into.
    referenced: BTreeSet<u64>,
}

/// Reads a stored message's encoded Message part (the checkpoint copies it forward as is).
pub type PartSource<'a> = &'a dyn Fn(&StoredMessage) -> Result<Vec<u8>, String>;

/// Where a live message's record is in the log now, if it has one there: the checkpoint then
/// refers to it instead of carrying it.
pub type Locate<'a> = &'a dyn Fn(&MessageRef) -> Option<Position>;

/// What writing a checkpoint made.
#[derive(Debug, Default)]
pub struct Written {
    /// The file's size in bytes.
    pub bytes: u64,
    /// (message id, frame offset) of every carried message, in id order.
    pub index: Vec<(u64, u64)>,
    /// The log segments it refers to: they must stay while it is the newest checkpoint.
    pub referenced: BTreeSet<u64>,
}

impl Encoder<'_> {
    fn event(&mut self, event: &Event) -> Result<(), StoreError> {
        self.payload.clear();
        let (kind, body) = codec::encode_event_leaving_body(event, &mut self.payload)?;
        self.frame(kind.byte(), &body)
    }

    /// One live message: referred to where `locate` finds its record in the log, else
    /// carried whole.
    fn message(
        &mut self,
        vhost: &str,
        placements: &[Placement],
        message: &MessageRef,
        parts: PartSource<'_>,
        locate: Locate<'_>,
    ) -> Result<(), StoreError> {
        let Some(position) = locate(message) else {
            return self.carried(vhost, placements, message, parts);
        };
        let (enqueued_at_ms, ttl_ms) = message.timing();
        let fields = codec::ReferenceFields {
            id: message.id(),
            enqueued_at_ms,
            ttl_ms,
            priority: message.priority(),
            body_len: u32::try_from(message.body_len()).unwrap_or(u32::MAX),
            segment: position.segment.0,
            offset: position.offset,
        };
        self.payload.clear();
        codec::encode_reference(vhost, placements, &fields, &mut self.payload)?;
        self.frame(codec::REFERENCED_KIND, &[])?;
        self.referenced.insert(position.segment.0);
        Ok(())
    }

    fn carried(
        &mut self,
        vhost: &str,
        placements: &[Placement],
        message: &MessageRef,
        parts: PartSource<'_>,
    ) -> Result<(), StoreError> {
        self.payload.clear();
        // The body (or a stored message's whole Message part) is not copied into the
        // payload: it follows it in the frame, written from where it is (S-BIG-3).
        let offset = CHECKPOINT_HEADER_BYTES as u64 + self.flushed + self.buf.len() as u64;
        match message {
            MessageRef::Loaded(m) => {
                let body =
                    codec::encode_carried_leaving_body(vhost, placements, m, &mut self.payload)?;
                self.frame(codec::CARRIED_KIND, &body)?;
            }
            MessageRef::Stored(s) => {
                let part = parts(s).map_err(StoreError::Log)?;
                codec::encode_carried_part(vhost, placements, &[], &mut self.payload)?;
                self.frame(codec::CARRIED_KIND, &part)?;
            }
        }
        self.index.push((message.id().0, offset));
        Ok(())
    }

    /// Frames the payload just encoded, followed by `tail`, as the next record; a large
    /// tail goes to the sink as it is, not through the buffer.
    fn frame(&mut self, kind: u8, tail: &[u8]) -> Result<(), StoreError> {
        let len = self.payload.len() + tail.len();
        if len > limits::RECORD_PAYLOAD_BYTES_MAX {
            return Err(StoreError::RecordTooLarge {
                len,
                max: limits::RECORD_PAYLOAD_BYTES_MAX,
            });
        }
        self.records += 1;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.payload);
        hasher.update(tail);
        let crc = hasher.finalize();
        let start = self.buf.len();
        encode_frame_header(&mut self.buf, len, Lsn(self.records), kind);
        self.buf.extend_from_slice(&self.payload);
        seal_frame(self.buf.get_mut(start..).unwrap_or_default(), 0, crc);
        if tail.len() >= CHUNK_BYTES {
            self.flush()?;
            (self.sink)(tail)?;
            self.flushed += tail.len() as u64;
        } else {
            self.buf.extend_from_slice(tail);
        }
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
    locate: Locate<'_>,
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
    // Reused from message to message (with their queue names' buffers): a checkpoint of
    // millions of messages allocates nothing per message.
    let mut placements: Vec<Placement> = Vec::new();
    while let Some(Reverse((id, first))) = heap.pop() {
        let Some(q) = queues.get(first) else { break };
        let Some(first_msg) = q.messages.get(cursor.get(first).copied().unwrap_or(0)) else {
            break;
        };
        let message = first_msg.message.clone();
        let vhost = q.vhost.as_str();
        let mut used = 0;
        let mut take = |i: usize, heap: &mut BinaryHeap<Reverse<(u64, usize)>>| {
            let (Some(q), Some(at)) = (queues.get(i), cursor.get_mut(i)) else {
                return;
            };
            if let Some(m) = q.messages.get(*at) {
                match placements.get_mut(used) {
                    Some(p) => {
                        p.queue.clear();
                        p.queue.push_str(&q.queue);
                        p.delivery_count = m.delivery_count;
                        p.redelivered = m.redelivered;
                        p.held = m.held;
                    }
                    None => placements.push(Placement {
                        queue: q.queue.clone(),
                        delivery_count: m.delivery_count,
                        redelivered: m.redelivered,
                        held: m.held,
                    }),
                }
                used += 1;
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
        let placed = placements.get(..used).unwrap_or_default();
        enc.message(vhost, placed, &message, parts, locate)?;
    }
    Ok(())
}

/// The log position memory holds for `m` (its stored reference, or the slot of a message in
/// memory), if it is one.
pub fn held_position(m: &MessageRef) -> Option<Position> {
    let at = match m {
        MessageRef::Stored(s) => s.at,
        MessageRef::Loaded(m) => m.stored_ref()?.1.at,
    };
    crate::stored::log_position(at)
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

/// The whole checkpoint file for `snapshot` at `lsn`, in memory (tests, golden examples). A
/// message whose position (stored reference, or the slot of one in memory) is in the log is
/// referred to there; every other must be in memory (`MessageRef::Loaded`).
///
/// # Errors
/// An event or message that does not fit the record format, or a stored message with no log
/// position.
pub fn encode_to_vec(snapshot: &Snapshot, lsn: Lsn) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    let no_store = |s: &StoredMessage| Err(format!("message {} is stored, not in memory", s.id.0));
    encode_into(snapshot, lsn, &mut out, &no_store, &held_position)?;
    Ok(out)
}

/// As [`encode_to_vec`], appended to `out` (after what a caller puts before it: a snapshot's
/// header), so a checkpoint of every queued body is not copied once more into place; a message
/// `locate` finds in the log is referred to there, the others carried, stored ones' Message
/// parts read from `parts`.
///
/// # Errors
/// As [`encode_to_vec`], and `parts`'.
pub fn encode_into(
    snapshot: &Snapshot,
    lsn: Lsn,
    out: &mut Vec<u8>,
    parts: PartSource<'_>,
    locate: Locate<'_>,
) -> Result<(), StoreError> {
    let start = out.len();
    out.resize(start + CHECKPOINT_HEADER_BYTES, 0);
    let header = encode_streamed(
        snapshot,
        lsn,
        &mut |bytes: &[u8]| {
            out.extend_from_slice(bytes);
            Ok(())
        },
        parts,
        locate,
    )?;
    if let Some(head) = out.get_mut(start..start + CHECKPOINT_HEADER_BYTES) {
        head.copy_from_slice(&header);
    }
    Ok(())
}

/// As [`encode_into`], handed to `sink` in chunks of about `CHUNK_BYTES` as it is encoded,
/// but for its header: the caller leaves `CHECKPOINT_HEADER_BYTES` before the first chunk and
/// writes the header returned there (it counts the records, known only at the end). A
/// snapshot written to its file so needs no buffer the size of every queued body.
///
/// # Errors
/// As [`encode_into`], and `sink`'s.
pub fn encode_streamed(
    snapshot: &Snapshot,
    lsn: Lsn,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), StoreError>,
    parts: PartSource<'_>,
    locate: Locate<'_>,
) -> Result<[u8; CHECKPOINT_HEADER_BYTES], StoreError> {
    let mut enc = Encoder {
        sink,
        buf: Vec::new(),
        payload: Vec::new(),
        records: 0,
        flushed: 0,
        index: Vec::new(),
        referenced: BTreeSet::new(),
    };
    encode_records(snapshot, &mut enc, parts, locate)?;
    enc.flush()?;
    Ok(encode_header(CheckpointHeader {
        version: STORE_FORMAT_VERSION,
        lsn,
        next_message_id: snapshot.next_message_id,
        records: enc.records,
    }))
}

/// Writes the checkpoint of `snapshot` covering the log through `lsn` atomically: into
/// `{lsn}.checkpoint.tmp`, fsync, rename to `{lsn}.checkpoint`, fsync the directory. A message
/// `locate` finds in the log is referred to there; the others are carried, stored ones' Message
/// parts read from `parts`. Older checkpoints are left for the caller to remove (once it has
/// switched its readers to this one).
///
/// The caller must have made the log durable through `lsn` first (and every record `locate`
/// names): a checkpoint must never describe records a crash could still lose. Returned `Ok`,
/// the checkpoint is durable (the directory sync returned); on an error it may or may not be
/// on disk after a crash, so nothing either checkpoint relies on may go.
///
/// # Errors
/// I/O errors (a full disk included: the temporary file is then removed at once, S-DISK-4,
/// so a failed checkpoint never keeps the space it took), a record that does not fit the
/// format, or a stored message that cannot be read.
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    lsn: Lsn,
    snapshot: &Snapshot,
    parts: PartSource<'_>,
    locate: Locate<'_>,
) -> Result<Written, StoreError> {
    let tmp = dir.join(temporary_file_name(lsn));
    let tmp_exists = |storage: &dyn Storage| -> Result<bool, StoreError> {
        let names = storage.list(dir).map_err(io_err(dir))?;
        Ok(names.iter().any(|n| dir.join(n) == tmp))
    };
    if tmp_exists(storage)? {
        storage.remove(&tmp).map_err(io_err(&tmp))?;
    }
    let written = write_and_install(storage, dir, lsn, snapshot, parts, locate);
    if written.is_err() && tmp_exists(storage).unwrap_or(false) {
        // Whatever failed, the partial file goes now, not at the next start: on a full disk
        // it holds the very space the log needs.
        match storage.remove(&tmp) {
            Ok(()) => tracing::warn!(path = %tmp.display(), "failed checkpoint removed"),
            Err(e) => {
                tracing::warn!(path = %tmp.display(), error = %e, "cannot remove a failed checkpoint");
            }
        }
    }
    written
}

/// [`write`] once the temporary file is known not to exist.
fn write_and_install(
    storage: &dyn Storage,
    dir: &Path,
    lsn: Lsn,
    snapshot: &Snapshot,
    parts: PartSource<'_>,
    locate: Locate<'_>,
) -> Result<Written, StoreError> {
    let path = dir.join(file_name(lsn));
    let tmp = dir.join(temporary_file_name(lsn));
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
        index: Vec::new(),
        referenced: BTreeSet::new(),
    };
    encode_records(snapshot, &mut enc, parts, locate)?;
    enc.flush()?;
    let records = enc.records;
    let mut index = std::mem::take(&mut enc.index);
    index.shrink_to_fit();
    let referenced = std::mem::take(&mut enc.referenced);
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
    Ok(Written {
        bytes,
        index,
        referenced,
    })
}
