//! The messages of one queue: ready entries in queue order and an index of them by deadline.
//! Must not depend on anything outside `broker`.
//!
//! Queue order is message-id order within a priority: ids are assigned when a message first
//! enters its queues (a dead-lettered copy or a due scheduled message gets a fresh id), so a
//! requeued message goes back to its original position by a binary search (RabbitMQ classic
//! queues requeue by position). A priority queue keeps one such list (a lane) per priority
//! and delivers from the highest non-empty one (S-PRIO-3); a plain queue has one lane. Removal from the middle (expiry, S-TTL-9; settles during replay) leaves a
//! tombstone that is dropped when it reaches the head or by an amortised compaction.

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::types::{Message, MessageId, MessageRef, PageOut};
use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;

/// One queued message: 56 bytes, the content either shared in memory by every queue it
/// entered or left on disk (a 32-byte reference inline, DESIGN "Memory").
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// `msg.id()`, kept inline so tombstones keep their place in the order.
    pub id: MessageId,
    /// `None` = tombstone.
    pub msg: Option<MessageRef>,
    /// Times it came back to the queue (x-delivery-count).
    pub delivery_count: u32,
    /// Delivered (or possibly delivered) before.
    pub redelivered: bool,
}

/// A message taken out of a queue.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    pub msg: MessageRef,
    pub delivery_count: u32,
    pub redelivered: bool,
}

/// The deadline of `msg` in a queue whose effective TTL is `queue_ttl_ms` (S-TTL-3, S-TTL-4):
/// enqueue time + the lowest TTL.
pub(crate) fn deadline_of(msg: &MessageRef, queue_ttl_ms: Option<u32>) -> Option<u64> {
    let (enqueued_at_ms, ttl_ms) = msg.timing();
    deadline_at(enqueued_at_ms, ttl_ms, queue_ttl_ms)
}

fn deadline_at(enqueued_at_ms: u64, ttl_ms: Option<u32>, queue_ttl_ms: Option<u32>) -> Option<u64> {
    let ttl = match (ttl_ms, queue_ttl_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }?;
    Some(enqueued_at_ms.saturating_add(u64::from(ttl)))
}

/// The ready messages of one priority, in id order, with tombstones (`msg: None`) where a
/// message was removed from the middle; never a tombstone at the front.
#[derive(Debug, Default)]
struct Lane {
    slots: VecDeque<Entry>,
    /// Entries with ids up to this one were paged out already (or were not pageable): where
    /// the next [`Ready::page_out`] starts in this lane. A hint, not an invariant (a requeue
    /// may put a loaded message back behind it; it is paged out when it comes back again).
    paged_through: MessageId,
    /// The tombstones among `slots`: in a lane without any, the n-th live entry is at index
    /// n ([`Ready::iter_from`]).
    tombstones: usize,
}

impl Lane {
    /// Finds `id` in `slots` like `binary_search`: `Ok(index)` or `Err(insertion point)`.
    /// Ids in a lane are sorted and roughly evenly spread, so an interpolation search
    /// lands within a few slots in a handful of probes; after a few rounds it falls back to
    /// plain bisection, so the worst case stays O(log n).
    fn locate(&self, id: MessageId) -> Result<usize, usize> {
        let key = |i: usize| self.slots.get(i).map_or(u64::MAX, |e| e.id.0);
        let (mut lo, mut hi) = (0usize, self.slots.len());
        for _ in 0..4 {
            if lo >= hi {
                return Err(lo);
            }
            let (first, last) = (key(lo), key(hi - 1));
            if id.0 < first {
                return Err(lo);
            }
            if id.0 > last {
                return Err(hi);
            }
            let span = last - first;
            let offset = if span == 0 {
                0
            } else {
                let scaled = u128::from(id.0 - first) * (hi - lo - 1) as u128 / u128::from(span);
                usize::try_from(scaled).unwrap_or(0)
            };
            let guess = lo + offset;
            match key(guess).cmp(&id.0) {
                std::cmp::Ordering::Equal => return Ok(guess),
                std::cmp::Ordering::Less => lo = guess + 1,
                std::cmp::Ordering::Greater => hi = guess,
            }
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match key(mid).cmp(&id.0) {
                std::cmp::Ordering::Equal => return Ok(mid),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        Err(lo)
    }

    /// The index of the live entry `id`, if it is in this lane.
    fn find_live(&self, id: MessageId) -> Option<usize> {
        let i = self.locate(id).ok()?;
        self.slots.get(i)?.msg.as_ref().map(|_| i)
    }

    fn trim_front(&mut self) {
        while self.slots.front().is_some_and(|e| e.msg.is_none()) {
            self.slots.pop_front();
            self.tombstones -= 1;
        }
    }

    /// Live entries in this lane.
    fn live(&self) -> usize {
        self.slots.len() - self.tombstones
    }
}

/// Ready messages of one queue, in delivery order: a lane per priority (S-PRIO-3; a plain
/// queue has one), the highest lane first, each lane in id order. Invariant: every lane is
/// sorted by id and holds only messages whose priority files them there (capped at the top
/// lane); `live` counts the non-tombstones of every lane and `bytes` their body bytes; a live
/// message with a deadline is in `deadlines` exactly once, a tombstone never.
#[derive(Debug)]
pub(crate) struct Ready {
    lanes: Vec<Lane>,
    live: usize,
    bytes: u64,
    deadlines: BTreeSet<(u64, MessageId)>,
    ttl_ms: Option<u32>,
    /// Memory the content of the live entries held in memory takes (`loaded_len`).
    loaded_bytes: u64,
    /// The same, and what every live entry takes in memory or not, summed over every queue of
    /// the broker (shared, so a total is O(1) to read: the broker task checks it after every
    /// batch, a group's state machine after every apply). A queue's share leaves with it
    /// (`Drop`).
    totals: Arc<ContentTotals>,
}

/// What the ready messages of every queue of a broker take, summed ([`Ready`]'s `totals`).
#[derive(Debug, Default)]
pub(crate) struct ContentTotals {
    /// In memory: `loaded_len` of each.
    pub(crate) loaded: AtomicU64,
    /// In memory or left on disk: each body plus `LOADED_OVERHEAD_BYTES`.
    pub(crate) queued: AtomicU64,
}

impl Default for Ready {
    fn default() -> Self {
        Self::counting_into(Arc::default())
    }
}

fn body_len(msg: &MessageRef) -> u64 {
    msg.body_len()
}

/// A paged-out message with a body at least this large is remembered weakly, so that while
/// its content is still held elsewhere (a log write in flight, another queue, a channel) it
/// is used again rather than read back into a second copy (S-BIG-3).
pub(crate) const REUSE_BODY_BYTES_MIN: u64 = 1024 * 1024;

/// What a message in memory costs besides its body: the shared `Message` (properties,
/// exchange and routing key) and its allocations, about.
pub(crate) const LOADED_OVERHEAD_BYTES: u64 = 512;

/// Memory a queued message's content takes (0 once stored).
fn loaded_len(msg: &MessageRef) -> u64 {
    match msg {
        MessageRef::Loaded(m) => u64::from(m.body_len()) + LOADED_OVERHEAD_BYTES,
        MessageRef::Stored(_) => 0,
    }
}

/// A live entry with its message; `None` for a tombstone.
fn live_entry(e: &Entry) -> Option<(&MessageRef, &Entry)> {
    e.msg.as_ref().map(|m| (m, e))
}

impl Drop for Ready {
    fn drop(&mut self) {
        self.totals
            .loaded
            .fetch_sub(self.loaded_bytes, Ordering::Relaxed);
        self.totals
            .queued
            .fetch_sub(self.queued_bytes(), Ordering::Relaxed);
    }
}

impl Ready {
    /// An empty plain queue (one lane) whose bytes count into `totals` (the broker's).
    pub fn counting_into(totals: Arc<ContentTotals>) -> Self {
        Self {
            lanes: vec![Lane::default()],
            live: 0,
            bytes: 0,
            deadlines: BTreeSet::new(),
            ttl_ms: None,
            loaded_bytes: 0,
            totals,
        }
    }

    /// Makes this (empty) queue a priority queue with priorities 0..=`max` (S-PRIO-1): a lane
    /// each. `None` keeps one lane (a plain queue).
    pub fn with_max_priority(mut self, max: Option<u8>) -> Self {
        assert!(self.live == 0, "priorities are fixed before any message");
        let lanes = max.map_or(1, |m| usize::from(m) + 1);
        self.lanes.resize_with(lanes, Lane::default);
        self
    }

    /// The lane a message is filed in: its priority, capped at the highest (S-PRIO-2).
    fn lane_of(&self, msg: &MessageRef) -> usize {
        usize::from(msg.priority()).min(self.lanes.len() - 1)
    }

    /// The highest lane holding a message: where the head of the queue is.
    fn top_lane(&self) -> Option<usize> {
        self.lanes.iter().rposition(|l| !l.slots.is_empty())
    }

    /// The lane and index of the live message `id` (searched from the highest lane: a plain
    /// queue searches its one lane).
    fn find(&self, id: MessageId) -> Option<(usize, usize)> {
        self.lanes
            .iter()
            .enumerate()
            .rev()
            .find_map(|(l, lane)| lane.find_live(id).map(|i| (l, i)))
    }

    fn add_loaded(&mut self, n: u64) {
        self.loaded_bytes += n;
        self.totals.loaded.fetch_add(n, Ordering::Relaxed);
    }

    fn sub_loaded(&mut self, n: u64) {
        let n = n.min(self.loaded_bytes);
        self.loaded_bytes -= n;
        self.totals.loaded.fetch_sub(n, Ordering::Relaxed);
    }

    /// What its live entries take, in memory or not: each body plus `LOADED_OVERHEAD_BYTES`.
    fn queued_bytes(&self) -> u64 {
        self.bytes + self.live as u64 * LOADED_OVERHEAD_BYTES
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives back what the entry lists grew beyond their length (after recovery, which pushes
    /// millions of entries one by one: a doubling list holds up to twice what it needs).
    pub fn shrink_to_fit(&mut self) {
        for lane in &mut self.lanes {
            lane.slots.shrink_to_fit();
        }
    }

    /// Memory the content of the live entries held in memory takes.
    pub fn loaded_bytes(&self) -> u64 {
        self.loaded_bytes
    }

    /// Replaces in-memory content by its stored reference, oldest first in each lane (the
    /// lowest lane first: it is delivered last), for messages `pages` lets go (whose record is
    /// durable, in a log the broker's loader reads), until about `want` body bytes are freed;
    /// a lane is left at the first message `pages` stops at (one the store has not made
    /// durable yet: its later ones are not either). Only for a queue whose messages are all in
    /// a log (a logged queue): a stored message must stay readable for as long as it is
    /// queued, and the log (or a checkpoint) keeps exactly those. Returns the bytes freed.
    /// Large messages paged out go into `large` (as weak references), so that one still
    /// held elsewhere can be used again instead of read back (S-BIG-3).
    pub fn page_out(&mut self, pages: Pages<'_>, want: u64, large: &mut Vec<Weak<Message>>) -> u64 {
        let mut freed = 0;
        for lane in &mut self.lanes {
            if freed >= want {
                break;
            }
            freed += page_out_lane(lane, pages, want - freed, large);
        }
        self.sub_loaded(freed);
        freed
    }

    /// The earliest deadline of a ready message.
    pub fn first_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|&(d, _)| d)
    }

    /// The queue TTL the deadline index was built with.
    pub fn ttl_ms(&self) -> Option<u32> {
        self.ttl_ms
    }

    /// True when `msg` is newer than every message of its lane: what [`Ready::push_back`]
    /// asks (replay checks it on data read from disk before pushing).
    pub fn is_newest(&self, msg: &MessageRef) -> bool {
        let lane = &self.lanes[self.lane_of(msg)];
        lane.slots.back().is_none_or(|e| e.id < msg.id())
    }

    /// Appends a message newer than every message in its lane.
    pub fn push_back(&mut self, msg: MessageRef, delivery_count: u32, redelivered: bool) {
        assert!(
            self.is_newest(&msg),
            "push_back out of order: {:?} is not the newest of its lane",
            msg.id()
        );
        let id = msg.id();
        let lane = self.lane_of(&msg);
        self.count_in(&msg);
        self.lanes[lane].slots.push_back(Entry {
            id,
            msg: Some(msg),
            delivery_count,
            redelivered,
        });
    }

    /// Puts a message back at its position by id in its lane (requeue, S-TTL-7, S-PRIO-4: the
    /// deadline is derived from the original enqueue time, so it is unchanged).
    pub fn insert(&mut self, msg: MessageRef, delivery_count: u32, redelivered: bool) {
        let id = msg.id();
        let lane = self.lane_of(&msg);
        self.count_in(&msg);
        let entry = Entry {
            id,
            msg: Some(msg),
            delivery_count,
            redelivered,
        };
        let lane = &mut self.lanes[lane];
        match lane.locate(id) {
            Ok(i) => {
                let slot = lane.slots.get_mut(i).expect("binary_search found index i");
                assert!(slot.msg.is_none(), "message {id:?} is already ready");
                *slot = entry;
                lane.tombstones -= 1;
            }
            Err(i) => lane.slots.insert(i, entry),
        }
    }

    /// Counts a message entering the ready list: deadline index, live count, bytes.
    fn count_in(&mut self, msg: &MessageRef) {
        if let Some(d) = deadline_of(msg, self.ttl_ms) {
            let fresh = self.deadlines.insert((d, msg.id()));
            assert!(
                fresh,
                "message {:?} already in the deadline index",
                msg.id()
            );
        }
        self.live += 1;
        self.bytes += body_len(msg);
        self.totals
            .queued
            .fetch_add(body_len(msg) + LOADED_OVERHEAD_BYTES, Ordering::Relaxed);
        self.add_loaded(loaded_len(msg));
    }

    /// Counts a message leaving the ready list (the pair of [`Ready::count_in`]).
    fn count_out(&mut self, msg: &MessageRef) {
        if let Some(d) = deadline_of(msg, self.ttl_ms) {
            let was = self.deadlines.remove(&(d, msg.id()));
            assert!(
                was,
                "message {:?} missing from the deadline index",
                msg.id()
            );
        }
        self.live -= 1;
        self.bytes -= body_len(msg);
        self.totals
            .queued
            .fetch_sub(body_len(msg) + LOADED_OVERHEAD_BYTES, Ordering::Relaxed);
        self.sub_loaded(loaded_len(msg));
    }

    /// The next message to deliver: the oldest of the highest priority (S-PRIO-3).
    pub fn front(&self) -> Option<&Entry> {
        let top = self.top_lane()?;
        self.lanes[top].slots.front()
    }

    /// Takes the next message to deliver (the oldest of the highest priority).
    pub fn pop_front(&mut self) -> Option<Taken> {
        let top = self.top_lane()?;
        let lane = &mut self.lanes[top];
        let entry = lane.slots.pop_front()?;
        lane.trim_front();
        let msg = entry.msg.expect("the front is never a tombstone");
        self.count_out(&msg);
        Some(Taken {
            msg,
            delivery_count: entry.delivery_count,
            redelivered: entry.redelivered,
        })
    }

    /// Takes the message `id` wherever it is; `None` if it is not ready here.
    pub fn remove(&mut self, id: MessageId) -> Option<Taken> {
        let (l, i) = self.find(id)?;
        let live = self.live;
        let lane = &mut self.lanes[l];
        let slot = lane.slots.get_mut(i)?;
        let msg = slot.msg.take()?;
        lane.tombstones += 1;
        let taken = Taken {
            msg,
            delivery_count: slot.delivery_count,
            redelivered: slot.redelivered,
        };
        lane.trim_front();
        // Amortised compaction: tombstones never outnumber live entries by much.
        if lane.slots.len() > 2 * live + 64 {
            lane.slots.retain(|e| e.msg.is_some());
            lane.tombstones = 0;
        }
        self.count_out(&taken.msg);
        Some(taken)
    }

    /// The ready message `id`, if it is ready here.
    pub fn get(&self, id: MessageId) -> Option<&MessageRef> {
        let (l, i) = self.find(id)?;
        self.lanes[l].slots.get(i)?.msg.as_ref()
    }

    /// A mutable view of the live entry `id` (replay's delivery marks).
    pub fn get_mut(&mut self, id: MessageId) -> Option<&mut Entry> {
        let (l, i) = self.find(id)?;
        self.lanes[l].slots.get_mut(i)
    }

    /// The earliest-deadline message if it is due at `now_ms`.
    pub fn first_due(&self, now_ms: u64) -> Option<MessageId> {
        self.deadlines
            .first()
            .filter(|&&(d, _)| d <= now_ms)
            .map(|&(_, id)| id)
    }

    /// How many ready messages have a deadline at or before `bound_ms`, read from the
    /// deadline index (S-UI-20): it walks the index from both ends at once and stops when
    /// either side ends, so the cost is the smaller side, never the messages without a TTL.
    pub fn deadlines_until(&self, bound_ms: u64) -> usize {
        let split = (bound_ms, MessageId(u64::MAX));
        let mut below = self.deadlines.range(..=split);
        let mut above = self
            .deadlines
            .range((Bound::Excluded(split), Bound::Unbounded));
        let (mut b, mut a) = (0, 0);
        loop {
            if below.next().is_none() {
                return b;
            }
            b += 1;
            if above.next().is_none() {
                return self.deadlines.len() - a;
            }
            a += 1;
        }
    }

    /// How many ready messages have a deadline at all.
    pub fn with_deadline(&self) -> usize {
        self.deadlines.len()
    }

    /// Changes the queue TTL and rebuilds the deadline index (S-TTL-11).
    pub fn set_ttl(&mut self, ttl_ms: Option<u32>) {
        if self.ttl_ms == ttl_ms {
            return;
        }
        self.ttl_ms = ttl_ms;
        self.deadlines.clear();
        for e in self.lanes.iter().flat_map(|l| &l.slots) {
            if let Some(msg) = &e.msg
                && let Some(d) = deadline_of(msg, ttl_ms)
            {
                self.deadlines.insert((d, msg.id()));
            }
        }
    }

    /// Removes every ready message, in delivery order.
    pub fn drain_all(&mut self) -> Vec<Taken> {
        let out = self
            .lanes
            .iter_mut()
            .rev()
            .flat_map(|l| l.slots.drain(..))
            .filter_map(|e| {
                e.msg.map(|msg| Taken {
                    msg,
                    delivery_count: e.delivery_count,
                    redelivered: e.redelivered,
                })
            })
            .collect();
        for lane in &mut self.lanes {
            lane.tombstones = 0;
        }
        self.deadlines.clear();
        self.totals
            .queued
            .fetch_sub(self.queued_bytes(), Ordering::Relaxed);
        self.live = 0;
        self.bytes = 0;
        self.sub_loaded(self.loaded_bytes);
        out
    }

    /// The live entries in delivery order (the highest lane first, each lane in id order).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&MessageRef, &Entry)> {
        self.lanes
            .iter()
            .rev()
            .flat_map(|l| &l.slots)
            .filter_map(|e| e.msg.as_ref().map(|m| (m, e)))
    }

    /// The live entries from position `offset` on (0 is the next to deliver), in delivery
    /// order: `iter().skip(offset)`, but the lanes before the position are passed by their
    /// counts and a lane without tombstones is entered at the position directly, so reaching
    /// it costs the lanes passed, not the entries (a walk only inside a lane with tombstones,
    /// which compaction keeps fewer than its live entries plus 64).
    pub fn iter_from(&self, offset: usize) -> impl Iterator<Item = (&MessageRef, &Entry)> {
        let mut rest = offset;
        // The lane the position is in, where to enter it and the live entries to pass there;
        // past the end, an empty range of the lowest lane.
        let mut at = (0, self.lanes[0].slots.len(), 0);
        for (l, lane) in self.lanes.iter().enumerate().rev() {
            if rest < lane.live() {
                at = if lane.tombstones == 0 {
                    (l, rest, 0)
                } else {
                    (l, 0, rest)
                };
                break;
            }
            rest -= lane.live();
        }
        let (lane, from, skip) = at;
        let head = self.lanes[lane]
            .slots
            .range(from..)
            .filter_map(live_entry)
            .skip(skip);
        let tail = self.lanes[..lane]
            .iter()
            .rev()
            .flat_map(|l| &l.slots)
            .filter_map(live_entry);
        head.chain(tail)
    }

    /// Walks the structure (STYLE 3.1).
    pub fn check_invariants(&self) {
        let mut live = 0;
        let mut bytes = 0;
        let mut loaded = 0;
        let mut with_deadline = 0;
        for (l, lane) in self.lanes.iter().enumerate() {
            assert!(
                lane.slots.front().is_none_or(|e| e.msg.is_some()),
                "tombstone at the head of lane {l}"
            );
            let dead = lane.slots.iter().filter(|e| e.msg.is_none()).count();
            assert_eq!(dead, lane.tombstones, "tombstone count of lane {l}");
            let mut prev: Option<MessageId> = None;
            for e in &lane.slots {
                if let Some(p) = prev {
                    assert!(p < e.id, "lane {l} order broken: {p:?} before {:?}", e.id);
                }
                prev = Some(e.id);
                let Some(msg) = &e.msg else { continue };
                assert_eq!(msg.id(), e.id, "entry id differs from its message's");
                assert_eq!(self.lane_of(msg), l, "message {:?} in the wrong lane", e.id);
                live += 1;
                bytes += body_len(msg);
                loaded += loaded_len(msg);
                if let Some(d) = deadline_of(msg, self.ttl_ms) {
                    with_deadline += 1;
                    assert!(
                        self.deadlines.contains(&(d, e.id)),
                        "ready message {:?} missing from the deadline index",
                        e.id
                    );
                }
            }
        }
        assert_eq!(live, self.live, "live count");
        assert_eq!(bytes, self.bytes, "byte count");
        assert_eq!(loaded, self.loaded_bytes, "loaded byte count");
        assert_eq!(
            with_deadline,
            self.deadlines.len(),
            "deadline index holds messages that are not ready"
        );
    }
}

/// What a page-out does with each message in memory, from its slot ([`MessageLoader::pages`]
/// with the log's durable Lsn).
pub type Pages<'a> = &'a dyn Fn(Option<(u64, crate::types::StoredAt)>) -> PageOut;

/// [`Ready::page_out`] in one lane: oldest first from its hint, until `want` bytes are freed
/// or `pages` stops at a message. Returns the bytes freed.
fn page_out_lane(
    lane: &mut Lane,
    pages: Pages<'_>,
    want: u64,
    large: &mut Vec<Weak<Message>>,
) -> u64 {
    let start = match lane.locate(lane.paged_through) {
        Ok(i) => i + 1,
        Err(i) => i,
    };
    let mut freed = 0;
    for e in lane.slots.range_mut(start..) {
        if freed >= want {
            break;
        }
        let Some(MessageRef::Loaded(m)) = &e.msg else {
            lane.paged_through = e.id;
            continue;
        };
        if !m.is_persistent() {
            lane.paged_through = e.id;
            continue;
        }
        match pages(m.slot()) {
            PageOut::Stop => break,
            PageOut::Skip => {
                lane.paged_through = e.id;
                continue;
            }
            PageOut::Page => {}
        }
        let Some((_, stored)) = m.stored_ref() else {
            break;
        };
        freed += u64::from(stored.body_len) + LOADED_OVERHEAD_BYTES;
        if u64::from(stored.body_len) >= REUSE_BODY_BYTES_MIN {
            large.push(Arc::downgrade(m));
        }
        e.msg = Some(MessageRef::Stored(stored));
        lane.paged_through = e.id;
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Message;
    use crate::types::Properties;
    use crate::types::store_pages;
    use std::sync::Arc;

    fn msg(id: u64, at: u64, ttl: Option<u32>) -> MessageRef {
        MessageRef::Loaded(Arc::new(Message {
            id: MessageId(id),
            enqueued_at_ms: at,
            ttl_ms: ttl,
            exchange: String::new(),
            routing_key: "q".into(),
            properties: Properties::default(),
            body: bytes::Bytes::from_static(b"abc"),
            stored: crate::types::StoredSlot::default(),
        }))
    }

    fn with_priority(id: u64, priority: u8) -> MessageRef {
        MessageRef::Loaded(Arc::new(Message {
            id: MessageId(id),
            enqueued_at_ms: 0,
            ttl_ms: None,
            exchange: String::new(),
            routing_key: "q".into(),
            properties: Properties {
                priority: Some(priority),
                ..Properties::default()
            },
            body: bytes::Bytes::from_static(b"abc"),
            stored: crate::types::StoredSlot::default(),
        }))
    }

    /// S-UI-1: a browse page entered at its position gives what walking to it gives, in a
    /// priority queue whose lanes have tombstones (removed from the middle) or not.
    #[test]
    fn s_ui_1_iter_from_is_iter_skip() {
        let mut r = Ready::default().with_max_priority(Some(3));
        for id in 1..=200u64 {
            r.push_back(with_priority(id, u8::try_from(id % 4).unwrap()), 0, false);
        }
        // Lane 1 gets tombstones (and one refilled); lane 3 and the others none.
        for id in [5, 9, 13, 41, 101] {
            r.remove(MessageId(id)).unwrap();
        }
        let taken = r.remove(MessageId(41)).is_none();
        assert!(taken, "41 was removed already");
        r.insert(with_priority(13, 1), 1, true);
        r.pop_front().unwrap();
        r.check_invariants();
        let ids = |it: &mut dyn Iterator<Item = (&MessageRef, &Entry)>| -> Vec<u64> {
            it.map(|(m, _)| m.id().0).collect()
        };
        for offset in 0..=r.len() + 2 {
            assert_eq!(
                ids(&mut r.iter_from(offset)),
                ids(&mut r.iter().skip(offset)),
                "offset {offset}"
            );
        }
        let _ = r.drain_all();
        r.check_invariants();
        assert_eq!(r.iter_from(0).count(), 0);
    }

    /// S-UI-20: counts by deadline from the index, whichever side of the bound is smaller.
    #[test]
    fn s_ui_20_deadlines_until_counts_from_the_index() {
        let mut r = Ready::default();
        r.push_back(msg(1, 0, None), 0, false);
        for id in 2..=11 {
            // Deadlines 10, 20, ..., 100.
            r.push_back(
                msg(id, 0, Some(u32::try_from(id - 1).unwrap() * 10)),
                0,
                false,
            );
        }
        assert_eq!(r.with_deadline(), 10);
        for (bound, want) in [
            (0, 0),
            (9, 0),
            (10, 1),
            (11, 1),
            (55, 5),
            (90, 9),
            (100, 10),
            (u64::MAX, 10),
        ] {
            assert_eq!(r.deadlines_until(bound), want, "until {bound}");
        }
        r.remove(MessageId(3)).unwrap();
        assert_eq!(r.deadlines_until(20), 1);
        r.set_ttl(Some(5));
        // Every message now has a deadline: the queue TTL's 5 ms, or its own if shorter.
        assert_eq!((r.with_deadline(), r.deadlines_until(5)), (10, 10));
    }

    #[test]
    fn s_ttl_9_expiry_from_the_middle_uses_the_index() {
        let mut r = Ready::default();
        r.push_back(msg(1, 0, None), 0, false);
        r.push_back(msg(2, 0, Some(10)), 0, false);
        r.push_back(msg(3, 0, None), 0, false);
        r.check_invariants();
        assert_eq!(r.first_due(9), None);
        assert_eq!(r.first_due(10), Some(MessageId(2)));
        let t = r.remove(MessageId(2)).unwrap();
        assert_eq!(t.msg.id(), MessageId(2));
        r.check_invariants();
        assert_eq!(r.len(), 2);
        assert_eq!(r.bytes(), 6);
        assert_eq!(r.pop_front().unwrap().msg.id(), MessageId(1));
        assert_eq!(r.pop_front().unwrap().msg.id(), MessageId(3));
        r.check_invariants();
        assert!(r.is_empty());
    }

    #[test]
    fn s_ttl_7_requeue_goes_back_to_its_position_with_its_deadline() {
        let mut r = Ready::default();
        r.set_ttl(Some(100));
        for i in 1..=3 {
            r.push_back(msg(i, i * 10, None), 0, false);
        }
        let first = r.pop_front().unwrap();
        r.insert(first.msg, 1, true);
        r.check_invariants();
        assert_eq!(r.front().unwrap().id, MessageId(1));
        assert_eq!(r.first_deadline(), Some(110));
    }

    fn stored_msg(id: u64, lsn: u64) -> MessageRef {
        let m = Message {
            id: MessageId(id),
            enqueued_at_ms: 0,
            ttl_ms: Some(1000),
            exchange: String::new(),
            routing_key: "q".into(),
            properties: crate::types::Properties {
                delivery_mode: Some(2),
                ..Default::default()
            },
            body: bytes::Bytes::from_static(b"0123456789"),
            stored: crate::types::StoredSlot::default(),
        };
        if lsn > 0 {
            m.set_stored(lsn, 1000 + id);
        }
        MessageRef::Loaded(Arc::new(m))
    }

    #[test]
    fn page_out_frees_oldest_durable_content_and_keeps_order_and_deadlines() {
        let mut r = Ready::default();
        // Ids 1-4 written at Lsns 1-4, id 5 not written yet.
        for id in 1..=5 {
            r.push_back(stored_msg(id, if id == 5 { 0 } else { id }), 0, false);
        }
        let each = 10 + LOADED_OVERHEAD_BYTES;
        assert_eq!(r.loaded_bytes(), 5 * each);
        // Only what is durable (Lsn <= 2), oldest first.
        assert_eq!(
            r.page_out(&|s| store_pages(s, 2), u64::MAX, &mut Vec::new()),
            2 * each
        );
        assert_eq!(r.loaded_bytes(), 3 * each);
        r.check_invariants();
        // A small want stops after the first message that reaches it.
        assert_eq!(
            r.page_out(&|s| store_pages(s, 10), 5, &mut Vec::new()),
            each
        );
        assert_eq!(
            r.page_out(&|s| store_pages(s, 10), u64::MAX, &mut Vec::new()),
            each
        );
        // The unwritten one stays in memory.
        assert_eq!(r.loaded_bytes(), each);
        r.check_invariants();
        assert_eq!(r.first_deadline(), Some(1000));
        let first = r.pop_front().unwrap();
        let MessageRef::Stored(s) = first.msg else {
            panic!("paged out: {:?}", first.msg);
        };
        assert_eq!(
            (s.id, s.at, s.body_len, s.ttl_ms),
            (MessageId(1), 1001, 10, Some(1000))
        );
        assert_eq!(r.bytes(), 40);
        r.check_invariants();
    }

    #[test]
    fn s_prio_7_an_entry_stays_56_bytes_with_its_priority() {
        // DESIGN "Memory": the priority a stored message keeps fits in its padding.
        assert_eq!(std::mem::size_of::<crate::types::StoredMessage>(), 40);
        assert_eq!(std::mem::size_of::<Entry>(), 56);
    }

    #[test]
    fn locate_agrees_with_binary_search() {
        let mut r = Ready::default();
        let mut id = 1;
        for i in 0..500u64 {
            id += 1 + (i * 7919) % 13; // uneven gaps
            r.push_back(msg(id, 0, None), 0, false);
        }
        for probe in 0..=id + 2 {
            let want = r.lanes[0]
                .slots
                .binary_search_by_key(&MessageId(probe), |e| e.id);
            assert_eq!(r.lanes[0].locate(MessageId(probe)), want, "id {probe}");
        }
    }

    #[test]
    fn s_ttl_11_changing_the_queue_ttl_rebuilds_deadlines() {
        let mut r = Ready::default();
        r.push_back(msg(1, 1000, None), 0, false);
        r.push_back(msg(2, 2000, Some(50)), 0, false);
        assert_eq!(r.first_deadline(), Some(2050));
        r.set_ttl(Some(10));
        assert_eq!(r.first_deadline(), Some(1010));
        r.check_invariants();
        r.set_ttl(None);
        assert_eq!(r.first_deadline(), Some(2050));
        r.check_invariants();
    }
}
