//! Stored messages: where a message's record is (a log segment or the checkpoint), and reading
//! it back when the broker needs the content of a message whose body stayed on disk (DESIGN
//! "Memory"). Depends on `wal` (segment reads, frames), `store::codec` and `broker::types`;
//! knows nothing of AMQP.
//!
//! A position ([`StoredAt`]) packs into 64 bits: bit 63 clear = a log record, segment id in
//! bits 40..62 and the frame's offset in bits 0..40; bit 63 set = a checkpoint record, the low
//! 22 bits of the checkpoint's Lsn in bits 40..62 and the frame's offset below. Bit 62 is
//! never set: it marks a replicated group's positions (`wharf_broker::GROUP_LOG_BIT`), which a
//! message routed to a classic and a quorum queue may hold instead. Positions are never
//! written to disk: they live in memory for one run.
//!
//! A position can go stale: compaction copies a live message forward in the log (a `Copied`
//! record) and its old segment is deleted, a checkpoint carries a message that has no log
//! position, and a newer checkpoint replaces the older one. So a read checks that the record
//! found holds the message asked for (its id) and otherwise looks the message up by id: in
//! the relocations the newest checkpoint made (where it refers to each live message whose
//! position held in memory is no longer its record), then in the current checkpoint's index
//! of carried messages. Both are published here before any segment or checkpoint the old
//! positions point into is deleted, so a message is always found.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::codec;
use wharf_broker::{Message, MessageId, MessageLoader, StoredAt, StoredMessage, StoredSlot};
use wharf_wal::{Position, Reader, SegmentId, StorageFile, read_frame_at};

const CHECKPOINT_BIT: u64 = 1 << 63;
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const FILE_MASK: u64 = (1 << 22) - 1;

/// The position of a log record, if it fits the packing (segment ids below 2^22, offsets
/// below 2^40; beyond, the message simply stays in memory).
pub fn pack_log(position: Position) -> Option<StoredAt> {
    (position.segment.0 <= FILE_MASK && position.offset <= OFFSET_MASK)
        .then_some((position.segment.0 << OFFSET_BITS) | position.offset)
}

/// The position of a record in the checkpoint covering `lsn`.
pub fn pack_checkpoint(lsn: u64, offset: u64) -> Option<StoredAt> {
    (offset <= OFFSET_MASK).then_some(CHECKPOINT_BIT | ((lsn & FILE_MASK) << OFFSET_BITS) | offset)
}

/// The log position `at` stands for, if it is one (not a checkpoint's).
pub fn log_position(at: StoredAt) -> Option<Position> {
    match unpack(at) {
        Unpacked::Log(p) => Some(p),
        Unpacked::Checkpoint { .. } => None,
    }
}

enum Unpacked {
    Log(Position),
    Checkpoint { lsn_low: u64, offset: u64 },
}

fn unpack(at: StoredAt) -> Unpacked {
    let file = (at >> OFFSET_BITS) & FILE_MASK;
    let offset = at & OFFSET_MASK;
    if at & CHECKPOINT_BIT == 0 {
        Unpacked::Log(Position {
            segment: SegmentId(file),
            offset,
        })
    } else {
        Unpacked::Checkpoint {
            lsn_low: file,
            offset,
        }
    }
}

/// A checkpoint file open for reading messages back, with the offset of every message it
/// carries by id (16 bytes per message; ids are in file order, so sorted).
#[derive(Debug)]
pub struct CheckpointView {
    /// The Lsn it covers.
    pub lsn: u64,
    /// Its path (for errors).
    pub path: PathBuf,
    /// The open file (kept open: a newer checkpoint may unlink it while it is still read).
    pub file: Arc<dyn StorageFile>,
    /// (message id, frame offset) of every carried message, by id.
    pub index: Vec<(u64, u64)>,
}

impl CheckpointView {
    fn offset_of(&self, id: MessageId) -> Option<u64> {
        let i = self.index.binary_search_by_key(&id.0, |&(id, _)| id).ok()?;
        self.index.get(i).map(|&(_, offset)| offset)
    }
}

/// One intact frame at `offset` of `file` (the log's frame reader): `(kind, payload)`, or
/// `None` when the bytes there are not one.
fn frame_at(file: &dyn StorageFile, offset: u64) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    Ok(read_frame_at(file, offset)?
        .ok()
        .map(|r| (r.kind, r.payload)))
}

/// Reads stored messages back for the broker: the log's segments and the current checkpoint.
/// Cheap to share (`Arc`), `Send + Sync`.
#[derive(Debug)]
pub struct StoredReader {
    log: Reader,
    checkpoint: Mutex<Option<Arc<CheckpointView>>>,
    /// Where the newest checkpoint refers to each live message whose position held in memory
    /// is not its record any more (copied forward by compaction), by id.
    relocated: Mutex<Arc<HashMap<u64, StoredAt>>>,
}

/// One record holding a message, as read back.
struct Found {
    kind: u8,
    payload: Vec<u8>,
    /// Where the Message part starts in `payload` (found once, by the id check).
    part: usize,
    at: StoredAt,
}

impl Found {
    /// The record's Message part, taken out of the payload without a copy (the head is
    /// removed in place; `split_off` would copy the part, a whole body, S-BIG-3).
    fn into_part(mut self) -> Vec<u8> {
        self.payload.drain(..self.part.min(self.payload.len()));
        self.payload
    }
}

impl StoredReader {
    /// A reader over `log` and, if any, the checkpoint recovery started from.
    pub fn new(log: Reader, checkpoint: Option<CheckpointView>) -> Self {
        Self {
            log,
            checkpoint: Mutex::new(checkpoint.map(Arc::new)),
            relocated: Mutex::new(Arc::default()),
        }
    }

    /// Where the newest checkpoint put message `id`, if it moved it.
    pub fn relocated(&self, id: MessageId) -> Option<StoredAt> {
        self.relocations().get(&id.0).copied()
    }

    /// The relocations of the newest checkpoint (shared: the checkpoint thread reads them
    /// while the broker task reads messages back).
    pub fn relocations(&self) -> Arc<HashMap<u64, StoredAt>> {
        Arc::clone(
            &self
                .relocated
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Replaces the relocations: called once the checkpoint that made them is durable and
    /// before any segment the old positions point into is deleted.
    pub fn set_relocations(&self, relocated: HashMap<u64, StoredAt>) {
        *self
            .relocated
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(relocated);
    }

    /// Makes `view` the current checkpoint: called once it is durable and before any segment
    /// it covers is deleted.
    pub fn install(&self, view: CheckpointView) {
        *self
            .checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(view));
    }

    fn view(&self) -> Option<Arc<CheckpointView>> {
        self.checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The record holding `s`, checked to be that message.
    fn find(&self, s: &StoredMessage) -> Result<Found, String> {
        // Where the Message part starts, if the record holds the message asked for.
        let holds = |kind: u8, payload: &[u8]| {
            let part = codec::message_part(kind, payload).ok()?;
            (codec::message_part_id(part) == Some(s.id)).then(|| payload.len() - part.len())
        };
        match unpack(s.at) {
            Unpacked::Log(position) => {
                // A segment deleted after a checkpoint fails to open: the checkpoint has it.
                if let Ok(rec) = self.log.read_at(position)
                    && let Some(part) = holds(rec.kind, &rec.payload)
                {
                    return Ok(Found {
                        kind: rec.kind,
                        payload: rec.payload,
                        part,
                        at: s.at,
                    });
                }
            }
            Unpacked::Checkpoint { lsn_low, offset } => {
                if let Some(view) = self.view().filter(|v| v.lsn & FILE_MASK == lsn_low)
                    && let Ok(Some((kind, payload))) = frame_at(&*view.file, offset)
                    && let Some(part) = holds(kind, &payload)
                {
                    return Ok(Found {
                        kind,
                        payload,
                        part,
                        at: s.at,
                    });
                }
            }
        }
        if let Some(at) = self.relocated(s.id).filter(|&at| at != s.at)
            && let Some(position) = log_position(at)
            && let Ok(rec) = self.log.read_at(position)
            && let Some(part) = holds(rec.kind, &rec.payload)
        {
            return Ok(Found {
                kind: rec.kind,
                payload: rec.payload,
                part,
                at,
            });
        }
        let view = self.view().ok_or_else(|| {
            format!(
                "message {} is neither in the log nor in a checkpoint",
                s.id.0
            )
        })?;
        let offset = view.offset_of(s.id).ok_or_else(|| {
            format!(
                "message {} is not in the log nor in checkpoint {}",
                s.id.0,
                view.path.display()
            )
        })?;
        let bad = |why: &str| format!("{} at offset {offset}: {why}", view.path.display());
        let (kind, payload) = frame_at(&*view.file, offset)
            .map_err(|e| bad(&e.to_string()))?
            .ok_or_else(|| bad("damaged record"))?;
        let part = holds(kind, &payload).ok_or_else(|| bad("record holds another message"))?;
        Ok(Found {
            kind,
            payload,
            part,
            at: pack_checkpoint(view.lsn, offset).unwrap_or(s.at),
        })
    }

    /// The encoded Message part of `s` (a checkpoint copies it forward as it is).
    ///
    /// # Errors
    /// The record cannot be read or is damaged.
    pub fn message_part(&self, s: &StoredMessage) -> Result<Vec<u8>, String> {
        Ok(self.find(s)?.into_part())
    }
}

impl MessageLoader for StoredReader {
    fn load(&self, s: &StoredMessage) -> Result<Message, String> {
        let found = self.find(s)?;
        let (kind, at) = (found.kind, found.at);
        let part = bytes::Bytes::from(found.into_part());
        let mut message =
            codec::decode_message_part_shared(kind, &part).map_err(|e| e.to_string())?;
        // Durable already (it was read back): it may be paged out again at once.
        message.stored = StoredSlot::written(0, at);
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_pack_and_unpack() {
        let p = Position {
            segment: SegmentId(12_345),
            offset: 64 << 20,
        };
        let at = pack_log(p).unwrap();
        assert!(matches!(unpack(at), Unpacked::Log(q) if q == p));
        let at = pack_checkpoint(0xABC_DEF0_1234, 1 << 35).unwrap();
        assert!(matches!(
            unpack(at),
            Unpacked::Checkpoint { lsn_low, offset }
                if lsn_low == 0xABC_DEF0_1234 & FILE_MASK && offset == 1 << 35
        ));
        assert_eq!(
            pack_log(Position {
                segment: SegmentId(1 << 22),
                offset: 0
            }),
            None
        );
        assert_eq!(pack_checkpoint(1, 1 << 40), None);
        // The largest of either never sets the bit a replicated group's positions set.
        let largest = [
            pack_log(Position {
                segment: SegmentId(FILE_MASK),
                offset: OFFSET_MASK,
            }),
            pack_checkpoint(u64::MAX, OFFSET_MASK),
        ];
        for at in largest {
            assert_eq!(at.unwrap() & wharf_broker::GROUP_LOG_BIT, 0);
        }
    }
}
