//! A group's committed broker leaves queued bodies on disk (S-CLU-82, DESIGN "Memory"): the
//! Raft log is the WAL, so every message a follower applies is already on its disk, in the
//! record of the entry that enqueued it. The log stamps each message of an entry it appends
//! as a follower with where that record is ([`stamp`]): the record's Lsn and a position
//! packing its segment, its frame's offset and the event's index in the entry. The committed
//! broker pages messages out as the store's broker does (`Broker::page_out`, within the
//! node's `message_memory_bytes`), and reads one back through a [`GroupLoader`]: the frame,
//! checked (CRC), decoded, the event at the index, its message's id checked.
//!
//! A position ([`wharf_broker::StoredAt`]) of a group's log sets `GROUP_LOG_BIT` (bit 62),
//! which the store's positions never set: bits 42..62 are the segment id, 14..42 the frame's
//! offset, 0..14 the event's index. A message that does not fit (a segment id from 2^20, an
//! offset from 2^28, an event from 2^14) is not stamped and stays in memory. Positions are
//! never written to disk.
//!
//! A leader's own entries are not stamped: its live broker holds their messages in memory
//! anyway. Nor are messages a snapshot brought (installed, or read at a restart): those stay in
//! memory until a queue lets them go.
//!
//! The log keeps every segment a message of the committed broker was left in: at each snapshot
//! build (the committed broker held still) `WalLogReader::keep_segments_from` takes the oldest
//! segment a message on disk is in, or the newest entry's if older; reclamations keep it and
//! every later one, and until the next build only messages of those are left on disk (one
//! still in memory from an older segment stays there: at most what the budget held then). As
//! RabbitMQ's release cursor, the oldest message on disk holds the log's disk space from its
//! entry on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use wharf_broker::{
    Event, GROUP_LOG_BIT, Message, MessageLoader, PageOut, StoredAt, StoredMessage,
};
use wharf_wal::{Lsn, Position, Reader, SegmentId};

use crate::record::{self, RaftRecord};
use crate::types::Entry;

const EVENT_BITS: u32 = 14;
const OFFSET_BITS: u32 = 28;
const SEGMENT_BITS: u32 = 20;

/// The position of event `event` of the entry whose record is at `position`, if it fits.
pub fn pack(position: Position, event: usize) -> Option<StoredAt> {
    let event = u64::try_from(event).ok()?;
    let fits = position.segment.0 < 1 << SEGMENT_BITS
        && position.offset < 1 << OFFSET_BITS
        && event < 1 << EVENT_BITS;
    fits.then_some(
        GROUP_LOG_BIT
            | position.segment.0 << (OFFSET_BITS + EVENT_BITS)
            | position.offset << EVENT_BITS
            | event,
    )
}

/// The record's position and the event's index `at` stands for, if it is a group's position.
pub fn unpack(at: StoredAt) -> Option<(Position, usize)> {
    if at & GROUP_LOG_BIT == 0 || at & (1 << 63) != 0 {
        return None;
    }
    let event = at & ((1 << EVENT_BITS) - 1);
    let offset = (at >> EVENT_BITS) & ((1 << OFFSET_BITS) - 1);
    let segment = (at >> (OFFSET_BITS + EVENT_BITS)) & ((1 << SEGMENT_BITS) - 1);
    Some((
        Position {
            segment: SegmentId(segment),
            offset,
        },
        usize::try_from(event).ok()?,
    ))
}

/// Which log a stamp is from: each log opened in the process takes the next of these 16-bit
/// tags, carried in the stamp's top 16 bits of Lsn. A message is one `Arc` wherever it is held,
/// so a message two logs of one process both took (members of one group in one test process,
/// whose in-memory network hands the same entries around) is stamped by the first; the other
/// log's broker must not read it back from its own WAL at that position.
pub(crate) fn next_log_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed) & TAG_MASK
}

const TAG_SHIFT: u32 = 48;
const TAG_MASK: u64 = 0xffff;
const LSN_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// Stamps every message `entry` carries with where its record is, in the log tagged `tag`: at
/// `lsn` and `position`. A message stamped already (by the member's store: one routed to a
/// classic queue too) keeps its stamp.
pub(crate) fn stamp(entry: &Entry, tag: u64, lsn: Lsn, position: Position) {
    let openraft::EntryPayload::Normal(proposal) = &entry.payload else {
        return;
    };
    if lsn.0 > LSN_MASK {
        return;
    }
    for (i, event) in proposal.events.iter().enumerate() {
        if let (Some(message), Some(at)) = (event.message(), pack(position, i)) {
            message.set_group_stored(tag << TAG_SHIFT | lsn.0, at);
        }
    }
}

/// The oldest segment a message `snapshot` left on disk is in, if any: it and every later one
/// must stay for as long as the committed broker may read it back.
pub(crate) fn oldest_segment(snapshot: &wharf_broker::Snapshot) -> Option<u64> {
    snapshot
        .queues
        .iter()
        .flat_map(|q| &q.messages)
        .filter_map(|m| match &m.message {
            wharf_broker::MessageRef::Stored(s) => unpack(s.at),
            wharf_broker::MessageRef::Loaded(_) => None,
        })
        .map(|(p, _)| p.segment.0)
        .min()
}

/// Reads back the messages a group's log stamped (the committed broker's
/// [`MessageLoader`]). Keeps the last entry it read decoded: a queue's messages are read
/// back in order, many from one entry.
pub struct GroupLoader {
    group: u64,
    /// Its log's tag ([`next_log_tag`]).
    tag: u64,
    reader: Reader,
    /// The oldest segment the log keeps for the committed broker
    /// (`WalLogReader::keep_segments_from`): only messages of it or later ones go to disk.
    keep_segment: Arc<AtomicU64>,
    last: Mutex<Option<(Position, crate::types::Events)>>,
}

impl GroupLoader {
    pub(crate) fn new(
        group: u64,
        tag: u64,
        reader: Reader,
        keep_segment: Arc<AtomicU64>,
    ) -> GroupLoader {
        GroupLoader {
            group,
            tag,
            reader,
            keep_segment,
            last: Mutex::new(None),
        }
    }

    /// Another loader of the same log, with a cache of its own (a snapshot build's, reading
    /// every message once, beside the committed broker's).
    #[must_use]
    pub fn fresh(&self) -> GroupLoader {
        GroupLoader::new(
            self.group,
            self.tag,
            self.reader.clone(),
            Arc::clone(&self.keep_segment),
        )
    }

    /// The events of the entry whose record is at `position`.
    fn events_at(&self, position: Position) -> Result<crate::types::Events, String> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, events)) = &*last
            && *at == position
        {
            return Ok(events.clone());
        }
        let record = self
            .reader
            .read_at(position)
            .map_err(|e| format!("reading the Raft log at {position:?}: {e}"))?;
        let events = match record::decode(record.kind, &record.payload) {
            Ok(RaftRecord::Entry { group, entry }) if group == self.group => match entry.payload {
                openraft::EntryPayload::Normal(p) => p.events,
                _ => return Err(format!("the entry at {position:?} carries no events")),
            },
            Ok(_) => {
                return Err(format!(
                    "the record at {position:?} is no entry of this group"
                ));
            }
            Err(e) => return Err(format!("the record at {position:?}: {e}")),
        };
        *last = Some((position, events.clone()));
        Ok(events)
    }
}

impl MessageLoader for GroupLoader {
    fn load(&self, stored: &StoredMessage) -> Result<Message, String> {
        let (position, index) = unpack(stored.at).ok_or("not a position in a group's log")?;
        let events = self.events_at(position)?;
        let message = events
            .get(index)
            .and_then(Event::message)
            .filter(|m| m.id == stored.id)
            .ok_or_else(|| {
                format!(
                    "event {index} of the entry at {position:?} is not message {}",
                    stored.id.0
                )
            })?;
        // A clone's slot starts empty; durable already (it was read back), it may be paged
        // out again at once.
        let message = Message::clone(message);
        message.set_group_stored(self.tag << TAG_SHIFT, stored.at);
        Ok(message)
    }

    /// Only what this log stamped, in a segment it keeps, once durable; a message with no
    /// stamp (a leader's own, or one a snapshot brought), another log's, or in an older
    /// segment, stays in memory without holding back the rest of its queue.
    fn pages(&self, slot: Option<(u64, StoredAt)>, durable_lsn: u64) -> PageOut {
        let Some((tagged, (position, _))) = slot.and_then(|(lsn, at)| Some((lsn, unpack(at)?)))
        else {
            return PageOut::Skip;
        };
        if tagged >> TAG_SHIFT != self.tag
            || position.segment.0 < self.keep_segment.load(Ordering::Acquire)
        {
            PageOut::Skip
        } else if tagged & LSN_MASK > durable_lsn {
            PageOut::Stop
        } else {
            PageOut::Page
        }
    }
}

impl std::fmt::Debug for GroupLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLoader")
            .field("group", &self.group)
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_pack_and_unpack_and_are_told_from_the_stores() {
        let p = Position {
            segment: SegmentId(12_345),
            offset: 64 << 20,
        };
        let at = pack(p, 171).unwrap();
        assert_eq!(unpack(at), Some((p, 171)));
        assert_ne!(at & GROUP_LOG_BIT, 0);
        let largest = Position {
            segment: SegmentId((1 << SEGMENT_BITS) - 1),
            offset: (1 << OFFSET_BITS) - 1,
        };
        let at = pack(largest, (1 << EVENT_BITS) - 1).unwrap();
        assert_eq!(unpack(at), Some((largest, (1 << EVENT_BITS) - 1)));
        assert_eq!(at & (1 << 63), 0);
        assert_eq!(pack(p, 1 << EVENT_BITS), None);
        let far = Position {
            segment: SegmentId(1 << SEGMENT_BITS),
            offset: 0,
        };
        assert_eq!(pack(far, 0), None);
        // The store's positions (bit 62 clear) are not a group's.
        assert_eq!(unpack((3 << 40) | 4_096), None);
        assert_eq!(unpack(1 << 63 | 5), None);
    }
}
