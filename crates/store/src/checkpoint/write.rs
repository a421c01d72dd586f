//! Writing a checkpoint: a snapshot's records (definitions, scheduled messages, then every live
//! message once with all its queues, in id order) framed as in the log, behind a header,
//! written to a temporary file and renamed into place durably.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use super::files::{file_name, io_err, remove_older, temporary_file_name};
use super::layout::{CHECKPOINT_HEADER_BYTES, CHECKPOINT_MAGIC, CHUNK_BYTES, CheckpointHeader};
use crate::codec::{self, STORE_FORMAT_VERSION};
use crate::error::StoreError;
use wharf_base::limits;
use wharf_broker::{Event, MessageRef, Placement, Snapshot, StoredMessage};
use wharf_wal::{Lsn, Storage, encode_frame_header, le, seal_frame};

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
        let (kind, body) = codec::encode_event_leaving_body(event, &mut self.payload)?;
        self.frame(kind.byte(), &body)
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
                    held: m.held,
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
/// removes older checkpoints (a failure there is logged, not returned: the new checkpoint is
/// complete and in use, S-DUR-8). Stored messages' Message parts come from `parts`. Returns the
/// file's size in bytes and the offset of each carried message by id.
///
/// The caller must have made the log durable through `lsn` first: a checkpoint must never
/// describe records a crash could still lose.
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
) -> Result<(u64, Vec<(u64, u64)>), StoreError> {
    let tmp = dir.join(temporary_file_name(lsn));
    let tmp_exists = |storage: &dyn Storage| -> Result<bool, StoreError> {
        let names = storage.list(dir).map_err(io_err(dir))?;
        Ok(names.iter().any(|n| dir.join(n) == tmp))
    };
    if tmp_exists(storage)? {
        storage.remove(&tmp).map_err(io_err(&tmp))?;
    }
    let written = write_and_install(storage, dir, lsn, snapshot, parts);
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
) -> Result<(u64, Vec<(u64, u64)>), StoreError> {
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
    // The new checkpoint is durable and complete: from here on it is the one in use (S-DUR-8),
    // and only now may older ones go. Failing to remove them, or to make their removal
    // durable, costs space until the next checkpoint or start removes them, nothing else: an
    // error here would have the caller keep reading from a checkpoint already removed.
    if let Err(e) = remove_older(storage, dir, lsn) {
        tracing::warn!(error = %e, "superseded checkpoints not removed; the next checkpoint or start removes them");
    }
    Ok((bytes, index))
}
