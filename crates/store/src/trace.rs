//! The life of one message in the log (S-UI-7): published, routed, delivered, requeued,
//! settled, dead-lettered (following its copies) or moved back. One state machine,
//! [`Tracer`], fed the log's events in Lsn order; the offline inspector's `trace` feeds it from
//! its own scan, and [`trace_dir`] from a live data directory (the management API's
//! timeline). Both read the log through `wal::scan` and the store codec: there is no second
//! parser. Read-only; knows nothing of JSON or HTTP.
//!
//! Cost: [`trace_dir`] reads the newest checkpoint, then the log after it. A sealed segment
//! with an index (`segment_index`, storage-format.md "Segment index": the message ids its
//! records concern and where its queue definitions are) is not searched: for a trace by broker
//! id, the index says whether a record of it may concern a traced message (then the segment
//! is read whole) or not (then only its queue definitions are read, each frame alone and
//! checked: a few KiB, the rest of the file untouched). Indexes are small (ids as runs of
//! consecutive ids: a few bytes to a few hundred KiB per 64 MiB segment), so a cold trace
//! reads the indexes, the segments its story touches and the last segment (always read
//! whole). A segment without a usable index, and every segment for a selector by property
//! (the index holds no strings), is first searched whole for the traced ids' bytes (or the
//! selector's text), a SIMD substring search over its mapped bytes ([`Tracer::may_concern`]);
//! one without them holds no record about the story but queue definitions, so only those
//! are read from it (`wal::scan_selective` steps over the other frames by their lengths, no
//! CRC, no decode): that touches every page of the segment. A segment read whole is read as
//! recovery reads it, every frame's CRC checked, and decodes only the records that can
//! concern the traced messages: [`Tracer::concerns`] looks for the same bytes in each raw
//! payload first. Sealed segments a checkpoint covers (kept only for the messages it refers
//! to) are not read at all.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use memchr::arch::all::packedpair::HeuristicFrequencyRank;
use memchr::memmem;
use wharf_broker::{Death, Event, Message, MessageId, MessageRecord, SettleKind, Value};
use wharf_wal::{Lsn, RecordRef, RecoveryMode, SegmentPlan, Selective, Storage};

use crate::checkpoint::{self, CheckpointRecord};
use crate::codec::{self, CARRIED_KIND, REFERENCED_KIND, RecordKind, StoreRecord};
use crate::error::StoreError;
use crate::segment_index::{self, SegmentIndex};

/// How the message to trace is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The broker's message id.
    Id(u64),
    /// The `message-id` property.
    MessageId(String),
    /// The `correlation-id` property.
    CorrelationId(String),
    /// A header's value (strings as text, numbers in decimal).
    Header(String, String),
}

impl Selector {
    /// Parses `message_id=..`, `correlation_id=..` or `header:NAME=VALUE`.
    ///
    /// # Errors
    /// A message naming the accepted forms.
    pub fn parse_by(spec: &str) -> Result<Selector, String> {
        let (key, value) = spec
            .split_once('=')
            .ok_or_else(|| format!("--by {spec}: expected KEY=VALUE"))?;
        match key {
            "message_id" => Ok(Selector::MessageId(value.to_owned())),
            "correlation_id" => Ok(Selector::CorrelationId(value.to_owned())),
            _ => match key.strip_prefix("header:") {
                Some(name) if !name.is_empty() => {
                    Ok(Selector::Header(name.to_owned(), value.to_owned()))
                }
                _ => Err(format!(
                    "--by {spec}: use message_id=.., correlation_id=.. or header:NAME=VALUE"
                )),
            },
        }
    }

    /// Whether `m` is the message asked for.
    #[must_use]
    pub fn matches(&self, m: &Message) -> bool {
        let p = &m.properties;
        match self {
            Selector::Id(id) => m.id.0 == *id,
            Selector::MessageId(v) => p.message_id.as_deref() == Some(v.as_str()),
            Selector::CorrelationId(v) => p.correlation_id.as_deref() == Some(v.as_str()),
            Selector::Header(name, v) => p
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .is_some_and(|value| header_text(value).as_deref() == Some(v.as_str())),
        }
    }

    /// Bytes every record holding a matching message contains (its id, or the property's
    /// text): the prefilter of [`Tracer::concerns`].
    fn needle(&self) -> Vec<u8> {
        match self {
            Selector::Id(id) => id.to_le_bytes().to_vec(),
            Selector::MessageId(v) | Selector::CorrelationId(v) => v.as_bytes().to_vec(),
            Selector::Header(name, _) => name.as_bytes().to_vec(),
        }
    }
}

fn header_text(v: &Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_owned());
    }
    if let Some(n) = v.as_integer() {
        return Some(n.to_string());
    }
    match v {
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// How common a byte is in a log, for the substring search's prefilter, which looks first for
/// the needle's two rarest bytes: little-endian integers make 0x00 the commonest byte by far
/// and small values common (an id's high bytes are zeros and low numbers: memchr's default
/// ranks, made for text, call those rare), names and bodies are often text, bytes with the
/// high bit set are rare. So an id's search looks for its low, varied bytes.
struct LogBytes;

impl HeuristicFrequencyRank for LogBytes {
    fn rank(&self, byte: u8) -> u8 {
        match byte {
            0x00 => 255,
            0x01..=0x0f | 0xff => 230,
            0x20..=0x7e => 200,
            _ => 60,
        }
    }
}

/// The search for `needle` in the bytes of a log.
fn finder(needle: Vec<u8>) -> memmem::Finder<'static> {
    memmem::FinderBuilder::new().build_forward_with_ranker_owned(LogBytes, needle)
}

/// Where a step's record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    /// The segment or checkpoint file.
    pub file: String,
    /// Offset of the record's frame in it.
    pub offset: u64,
    /// The record's Lsn (for a checkpoint record, the checkpoint's Lsn).
    pub lsn: u64,
    /// The record is in the checkpoint in use (history before it is gone).
    pub in_checkpoint: bool,
}

impl At {
    /// Where a log record read by the scan is (not in a checkpoint).
    #[must_use]
    pub fn in_log(r: &RecordRef<'_>) -> At {
        At {
            file: wharf_wal::segment_file_name(r.position.segment),
            offset: r.position.offset,
            lsn: r.lsn.0,
            in_checkpoint: false,
        }
    }
}

/// How a message entered its queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Published by a client (or routed when its schedule ended).
    Published,
    /// Carried in the checkpoint: its history before it is gone.
    Carried,
    /// A dead-lettered copy entering the dead-letter exchange's queues.
    DeadLettered,
    /// Moved back from a dead-letter queue to its original route (S-UI-10).
    MovedBack,
}

/// What happened to a traced message at one record.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// It entered `queues` (durable ones only: only those are logged).
    Entered {
        /// How.
        how: Entry,
        /// The message as the record holds it.
        message: Arc<Message>,
        /// The durable queues it entered.
        queues: Vec<String>,
        /// Its deadline in each (enqueue time plus the lowest TTL), when it has one.
        deadlines_ms: Vec<(String, Option<u64>)>,
    },
    /// It was scheduled (delayed), due at `due_ms`.
    Scheduled {
        /// Due time, ms since the epoch.
        due_ms: u64,
        /// Carried in the checkpoint.
        carried: bool,
    },
    /// Handed to a consumer of `queue`; `delivery` counts them per queue.
    Delivered {
        /// The queue.
        queue: String,
        /// 1 for the first delivery from this queue.
        delivery: u32,
    },
    /// Back to `queue` (requeued, or its consumer went away).
    Requeued {
        /// The queue.
        queue: String,
    },
    /// Died in `queue` but could not be dead-lettered yet: held there until it can be
    /// (at-least-once dead-lettering, S-QQ-10).
    HeldForDeadLettering {
        /// The queue.
        queue: String,
        /// Why it died (the `x-death` reason it will carry).
        reason: &'static str,
    },
    /// Acked, expired or discarded in `queue`.
    Settled {
        /// The queue.
        queue: String,
        /// How.
        kind: SettleKind,
    },
    /// Purged from `queue`.
    Purged {
        /// The queue.
        queue: String,
    },
    /// `queue` was deleted while holding it.
    QueueDeleted {
        /// The queue.
        queue: String,
    },
    /// Removed from `from` (when logged there) and a copy (`copy`, when it entered a
    /// durable queue) enqueued into `targets`: a dead-lettering, or a move back.
    DeadLettered {
        /// Source queue, if it was logged there.
        from: Option<String>,
        /// The newest `x-death` reason of the copy.
        reason: Option<String>,
        /// The copy's id.
        copy: Option<MessageId>,
        /// Durable queues the copy entered.
        targets: Vec<String>,
        /// A move back to the original route (S-UI-10) rather than a death.
        moved_back: bool,
    },
}

impl StepKind {
    /// The step's name as the dashboard's timeline shows it (S-UI-7).
    #[must_use]
    pub fn event(&self) -> &'static str {
        match self {
            StepKind::Entered { how, .. } => match how {
                Entry::Published => "published",
                Entry::Carried => "carried in checkpoint",
                Entry::DeadLettered => "enqueued (dead-lettered copy)",
                Entry::MovedBack => "enqueued (moved back)",
            },
            StepKind::Scheduled { .. } => "scheduled",
            StepKind::Delivered { .. } => "delivered",
            StepKind::Requeued { .. } => "requeued",
            StepKind::HeldForDeadLettering { .. } => "held for dead-lettering",
            StepKind::Settled { kind, .. } => match kind {
                SettleKind::Ack => "acked",
                SettleKind::Expire => "expired",
                SettleKind::Discard => "discarded",
            },
            StepKind::Purged { .. } => "purged",
            StepKind::QueueDeleted { .. } => "queue deleted",
            StepKind::DeadLettered { moved_back, .. } => {
                if *moved_back {
                    "moved back"
                } else {
                    "dead-lettered"
                }
            }
        }
    }
}

/// One step of a message's life.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Where its record is.
    pub at: At,
    /// The message it concerns.
    pub message: MessageId,
    /// Its vhost.
    pub vhost: String,
    /// What happened.
    pub kind: StepKind,
}

/// What a trace keeps while reading the log in Lsn order.
#[derive(Debug)]
pub struct Tracer {
    selector: Selector,
    /// Finds the selector's bytes in a raw payload.
    needle: memmem::Finder<'static>,
    /// Messages in the story (the matches and their copies).
    ids: HashSet<MessageId>,
    /// Finds each of `ids`' bytes in a raw payload (built once per id, not per record).
    id_finders: Vec<memmem::Finder<'static>>,
    /// Queues holding each traced message.
    held: HashMap<MessageId, Vec<(String, String)>>,
    deliveries: HashMap<(MessageId, String), u32>,
    /// Declared `x-message-ttl` per queue, for the deadline shown when it enters.
    queue_ttl_ms: HashMap<(String, String), u64>,
    /// The steps so far, in log order.
    pub steps: Vec<Step>,
    /// What [`trace_dir`] read of the log.
    pub read: ReadStats,
}

/// The window of a segment searched before its frames are stepped over
/// (`wal::Selective::window`): small enough that the frame headers are still in the cache.
const SEARCH_WINDOW_BYTES: usize = 256 * 1024;

/// What [`trace_dir`] read of the log: sealed segments searched for the story's bytes, and
/// those of them that held them, so were read whole (the others gave only their queue
/// definitions). The last segment is always read whole and counts in neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Sealed segments searched.
    pub searched: u64,
    /// Of those, the ones read whole.
    pub read_whole: u64,
    /// Sealed segments whose index said what to read: whole (not searched), or only their
    /// queue definitions.
    pub indexed: u64,
    /// Of those, the ones read whole.
    pub indexed_whole: u64,
}

impl Tracer {
    /// A trace of the messages `selector` picks.
    #[must_use]
    pub fn new(selector: Selector) -> Tracer {
        Tracer {
            needle: finder(selector.needle()),
            selector,
            ids: HashSet::new(),
            id_finders: Vec::new(),
            held: HashMap::new(),
            deliveries: HashMap::new(),
            queue_ttl_ms: HashMap::new(),
            steps: Vec::new(),
            read: ReadStats::default(),
        }
    }

    /// Whether a record of `kind` with `payload` may concern the trace, so must be decoded:
    /// queue definitions always (TTLs, deletions: [`Tracer::always_concerns`]), message
    /// records only when their payload holds a traced id's bytes or the selector's. Never
    /// false for a record that matters.
    #[must_use]
    pub fn concerns(&self, kind: u8, payload: &[u8]) -> bool {
        let traced = || self.id_finders.iter().any(|f| f.find(payload).is_some());
        let selected = || self.needle.find(payload).is_some();
        match RecordKind::from_byte(kind) {
            _ if Self::always_concerns(kind) => true,
            // Records that may carry a message the selector picks.
            Some(RecordKind::Published | RecordKind::Scheduled | RecordKind::DeadLettered) => {
                selected() || traced()
            }
            Some(
                RecordKind::Settled
                | RecordKind::Delivered
                | RecordKind::Returned
                | RecordKind::Purged
                | RecordKind::DeadLetterHeld,
            ) => traced(),
            // A checkpoint's reference holds the id but no properties: found by id only.
            _ if kind == REFERENCED_KIND => selected() || traced(),
            _ => kind == CARRIED_KIND && selected(),
        }
    }

    /// The record kinds that concern every trace, whatever their bytes: queue declarations
    /// (a queue's TTL, for the deadlines of a message entering it) and deletions.
    #[must_use]
    pub fn always_concerns(kind: u8) -> bool {
        matches!(
            RecordKind::from_byte(kind),
            Some(RecordKind::QueueDeclared | RecordKind::QueueDeleted)
        )
    }

    /// Whether `bytes` (a whole segment) may hold a record that concerns the trace other than
    /// those of [`Tracer::always_concerns`]: whether the selector's bytes or a traced id's
    /// occur anywhere in them. [`Tracer::concerns`] looks for the same bytes in a payload, a
    /// part of the segment, so when this is false it is false for every other record there.
    /// Ids join the story only at records that concern it, so the answer stays right while
    /// the segment's records are visited.
    #[must_use]
    pub fn may_concern(&self, bytes: &[u8]) -> bool {
        let selected = self.needle.needle();
        // A pass over the segment per needle: the selector's, then the other ids' (the id
        // asked for is the selector's needle already).
        self.needle.find(bytes).is_some()
            || self
                .id_finders
                .iter()
                .any(|f| f.needle() != selected && f.find(bytes).is_some())
    }

    /// [`Tracer::may_concern`] for the part of a segment that `window` (a range of `bytes`)
    /// adds to the windows before it: an occurrence ending in the window is found, looking
    /// back from its start as far as the longest needle reaches.
    #[must_use]
    pub fn may_concern_window(&self, bytes: &[u8], window: std::ops::Range<usize>) -> bool {
        let longest = self
            .id_finders
            .iter()
            .chain([&self.needle])
            .map(|f| f.needle().len())
            .max()
            .unwrap_or(0);
        let from = window.start.saturating_sub(longest.saturating_sub(1));
        self.may_concern(bytes.get(from..window.end).unwrap_or_default())
    }

    /// What to read of a sealed segment by its index (storage-format.md, "Segment index"):
    /// whole, unsearched, when one of its records may concern a traced message (or the
    /// selected id); otherwise only the records [`Tracer::always_concerns`] reads, which the
    /// index locates. Without an index, searched. For a selector by id only: a property's
    /// text is not in the index.
    fn plan(&mut self, index: Option<SegmentIndex>) -> SegmentPlan {
        let Some(index) = index else {
            return SegmentPlan::Search;
        };
        let selected = match self.selector {
            Selector::Id(id) => index.holds(id),
            _ => return SegmentPlan::Search,
        };
        self.read.indexed += 1;
        if selected || self.ids.iter().any(|id| index.holds(id.0)) {
            self.read.indexed_whole += 1;
            return SegmentPlan::Whole;
        }
        SegmentPlan::Only {
            offsets: index.definitions,
            next_first: index.next_first,
        }
    }

    /// The traced messages still in a queue at the end of the log, by id.
    #[must_use]
    pub fn still_queued(&self) -> Vec<(MessageId, Vec<(String, String)>)> {
        let mut finals: Vec<_> = self
            .held
            .iter()
            .filter(|(_, qs)| !qs.is_empty())
            .map(|(id, qs)| (*id, qs.clone()))
            .collect();
        finals.sort();
        finals
    }

    fn step(&mut self, at: &At, id: MessageId, vhost: &str, kind: StepKind) {
        self.steps.push(Step {
            at: at.clone(),
            message: id,
            vhost: vhost.to_owned(),
            kind,
        });
    }

    fn enter(&mut self, at: &At, vhost: &str, m: &Arc<Message>, queues: &[String], how: Entry) {
        let deadlines_ms = queues
            .iter()
            .map(|q| {
                let queue_ttl = self
                    .queue_ttl_ms
                    .get(&(vhost.to_owned(), q.clone()))
                    .copied();
                let ttl = [m.ttl_ms.map(u64::from), queue_ttl]
                    .into_iter()
                    .flatten()
                    .min();
                (q.clone(), ttl.map(|t| m.enqueued_at_ms.saturating_add(t)))
            })
            .collect();
        self.trace_id(m.id);
        let kind = StepKind::Entered {
            how,
            message: m.clone(),
            queues: queues.to_vec(),
            deadlines_ms,
        };
        self.step(at, m.id, vhost, kind);
        let held = queues
            .iter()
            .map(|q| (vhost.to_owned(), q.clone()))
            .collect();
        self.held.insert(m.id, held);
    }

    /// Adds `id` to the story (and to the prefilter).
    fn trace_id(&mut self, id: MessageId) {
        if self.ids.insert(id) {
            self.id_finders.push(finder(id.0.to_le_bytes().to_vec()));
        }
    }

    fn leave(&mut self, id: MessageId, vhost: &str, queue: &str) {
        if let Some(h) = self.held.get_mut(&id) {
            h.retain(|(v, q)| !(v == vhost && q == queue));
        }
    }

    /// The traced ids among `ids`, in order.
    fn traced(&self, ids: &[MessageId]) -> Vec<MessageId> {
        ids.iter()
            .filter(|i| self.ids.contains(i))
            .copied()
            .collect()
    }

    /// Feeds one event, in Lsn order.
    pub fn visit(&mut self, at: &At, event: &Event) {
        match event {
            Event::QueueDeclared {
                vhost,
                queue,
                arguments,
                ..
            } => {
                if let Some(ttl) = arguments
                    .get("x-message-ttl")
                    .and_then(Value::as_integer)
                    .and_then(|t| u64::try_from(t).ok())
                {
                    self.queue_ttl_ms
                        .insert((vhost.clone(), queue.clone()), ttl);
                }
            }
            Event::Published {
                vhost,
                message,
                queues,
                scheduled,
            } => {
                let m = &message.message;
                // A scheduled message routed when due gets a new id: follow it.
                let was_scheduled = scheduled.is_some_and(|id| self.ids.contains(&id));
                if was_scheduled || self.selector.matches(m) {
                    let how = if at.in_checkpoint {
                        Entry::Carried
                    } else {
                        Entry::Published
                    };
                    self.enter(at, vhost, m, queues, how);
                }
            }
            Event::Scheduled { vhost, message, .. } => {
                let m = &message.message;
                if self.selector.matches(m) {
                    self.trace_id(m.id);
                    let kind = StepKind::Scheduled {
                        due_ms: m.enqueued_at_ms,
                        carried: at.in_checkpoint,
                    };
                    self.step(at, m.id, vhost, kind);
                }
            }
            Event::QueueDeleted { vhost, queue } => self.queue_deleted(at, vhost, queue),
            Event::DeadLetterHeld {
                vhost,
                queue,
                reason,
                ids,
                ..
            } => {
                for id in self.traced(ids) {
                    let kind = StepKind::HeldForDeadLettering {
                        queue: queue.clone(),
                        reason: reason.name(),
                    };
                    self.step(at, id, vhost, kind);
                }
            }
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            } => self.dead_lettered(at, vhost, from.as_deref(), *id, message.as_ref(), targets),
            _ => self.settled(at, event),
        }
    }

    /// Deliveries, returns, settles and purges: per traced id of the batch.
    fn settled(&mut self, at: &At, event: &Event) {
        let (Event::Delivered { vhost, queue, ids }
        | Event::Returned { vhost, queue, ids }
        | Event::Settled {
            vhost, queue, ids, ..
        }
        | Event::Purged { vhost, queue, ids }) = event
        else {
            return;
        };
        for id in self.traced(ids) {
            let kind = match event {
                Event::Delivered { .. } => {
                    let n = self.deliveries.entry((id, queue.clone())).or_insert(0);
                    *n += 1;
                    StepKind::Delivered {
                        queue: queue.clone(),
                        delivery: *n,
                    }
                }
                Event::Returned { .. } => StepKind::Requeued {
                    queue: queue.clone(),
                },
                Event::Settled { kind, .. } => {
                    self.leave(id, vhost, queue);
                    StepKind::Settled {
                        queue: queue.clone(),
                        kind: *kind,
                    }
                }
                _ => {
                    self.leave(id, vhost, queue);
                    StepKind::Purged {
                        queue: queue.clone(),
                    }
                }
            };
            self.step(at, id, vhost, kind);
        }
    }

    fn queue_deleted(&mut self, at: &At, vhost: &str, queue: &str) {
        let mut held: Vec<MessageId> = self
            .held
            .iter()
            .filter(|(_, qs)| qs.iter().any(|(v, q)| v == vhost && q == queue))
            .map(|(id, _)| *id)
            .collect();
        held.sort();
        for id in held {
            let kind = StepKind::QueueDeleted {
                queue: queue.to_owned(),
            };
            self.step(at, id, vhost, kind);
            self.leave(id, vhost, queue);
        }
    }

    fn dead_lettered(
        &mut self,
        at: &At,
        vhost: &str,
        from: Option<&str>,
        id: MessageId,
        copy: Option<&MessageRecord>,
        targets: &[String],
    ) {
        let death = copy.and_then(|m| Death::newest(&m.message.properties));
        // A dead-lettering puts its own death first: the source queue. A move back keeps the
        // x-death it had, whose newest entry names the queue it died in before (S-UI-10).
        let moved_back = matches!((&death, from), (Some(d), Some(f)) if d.queue != f);
        let how = if moved_back {
            Entry::MovedBack
        } else {
            Entry::DeadLettered
        };
        let copy_asked = copy.is_some_and(|m| self.selector.matches(&m.message));
        if !self.ids.contains(&id) && !copy_asked {
            return;
        }
        // A copy asked for by itself starts its story here, naming the message it came from.
        let kind = StepKind::DeadLettered {
            from: from.map(str::to_owned),
            reason: death.map(|d| d.reason),
            copy: copy.map(|m| m.message.id),
            targets: targets.to_vec(),
            moved_back,
        };
        self.step(at, id, vhost, kind);
        if let Some(from) = from {
            self.leave(id, vhost, from);
        }
        if let Some(m) = copy {
            self.enter(at, vhost, &m.message, targets, how);
        }
    }
}

/// A carried checkpoint message read as the `Published` event that puts it in its queues
/// (what recovery makes of it), with its placements.
#[must_use]
pub fn carried_as_published(c: codec::Carried) -> (Event, Vec<wharf_broker::Placement>) {
    let queues = c.placements.iter().map(|p| p.queue.clone()).collect();
    let event = Event::Published {
        vhost: c.vhost,
        message: MessageRecord { message: c.message },
        queues,
        scheduled: None,
    };
    (event, c.placements)
}

/// A checkpoint's reference (store format 4) as the `Published` its message reads as where
/// the reference points in the log; `None` when that record cannot be read (a checkpoint
/// replaced it meanwhile: the caller's next read starts from the new one).
fn referenced_as_published(
    storage: &dyn Storage,
    dir: &Path,
    r: codec::Referenced,
) -> Option<Event> {
    let segment = wharf_wal::SegmentId(r.message.segment);
    let file = storage
        .open(&dir.join(wharf_wal::segment_file_name(segment)), false)
        .ok()?;
    let record = wharf_wal::read_frame_at(&*file, r.message.offset)
        .ok()?
        .ok()?;
    let part = codec::message_part(record.kind, &record.payload).ok()?;
    let message = codec::decode_message_part(record.kind, part).ok()?;
    let carried = codec::Carried {
        vhost: r.vhost,
        placements: r.placements,
        message: Arc::new(message),
    };
    Some(carried_as_published(carried).0)
}

/// Traces `selector` through the data directory `dir` of a running (or stopped) broker,
/// read-only: the newest checkpoint, then the log after it, in Lsn order.
///
/// A live log changes under the reader: a torn tail is the record being written (ignored);
/// a checkpoint may delete the segments being read, which fails the read with an I/O error
/// (the caller may try again: the next read starts from the new checkpoint).
///
/// # Errors
/// I/O errors and damage of the checkpoint; a log that cannot be scanned.
pub fn trace_dir(
    storage: &dyn Storage,
    dir: &Path,
    selector: Selector,
) -> Result<Tracer, StoreError> {
    let mut tracer = Tracer::new(selector);
    let covered = match checkpoint::list(storage, dir)?.into_iter().next() {
        Some((lsn, path)) => {
            let file = path.display().to_string();
            checkpoint::read_frames(storage, &path, &mut |_, kind, payload, offset, _| {
                if !tracer.concerns(kind, payload) {
                    return Ok(());
                }
                let at = At {
                    file: file.clone(),
                    offset,
                    lsn: lsn.0,
                    in_checkpoint: true,
                };
                let event = match checkpoint::decode_record(kind, payload) {
                    Ok(CheckpointRecord::Event(e)) => e,
                    Ok(CheckpointRecord::Carried(c)) => carried_as_published(c).0,
                    Ok(CheckpointRecord::Referenced(r)) => {
                        match referenced_as_published(storage, dir, r) {
                            Some(e) => e,
                            None => return Ok(()),
                        }
                    }
                    Err(_) => return Ok(()),
                };
                tracer.visit(&at, &event);
                Ok(())
            })?;
            lsn.0
        }
        None => 0,
    };
    // The segment filter and the visitor both look at the tracer, never at once.
    let tracer = RefCell::new(tracer);
    let mut visitor = |r: RecordRef<'_>| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut tracer = tracer.borrow_mut();
        if r.lsn.0 <= covered || !tracer.concerns(r.kind, r.payload) {
            return Ok(());
        }
        let shared: Bytes = r.payload_shared();
        if let Ok(StoreRecord::Event(e)) = codec::decode_shared(r.kind, &shared) {
            tracer.visit(&At::in_log(&r), &e);
        }
        Ok(())
    };
    let mut select = Selective {
        covered: Lsn(covered),
        whole: &mut |_, bytes, window| {
            let mut tracer = tracer.borrow_mut();
            tracer.read.searched += u64::from(window.start == 0);
            let whole = tracer.may_concern_window(bytes, window);
            tracer.read.read_whole += u64::from(whole);
            whole
        },
        kinds: &Tracer::always_concerns,
        window: SEARCH_WINDOW_BYTES,
        plan: &mut |segment| {
            let mut tracer = tracer.borrow_mut();
            match tracer.selector {
                Selector::Id(_) => tracer.plan(segment_index::load(storage, dir, segment)),
                _ => SegmentPlan::Search,
            }
        },
    };
    wharf_wal::scan_selective(
        storage,
        dir,
        RecoveryMode::Salvage,
        &mut select,
        &mut visitor,
    )
    .map_err(StoreError::Open)?;
    Ok(tracer.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S-UI-7: searched window by window, a segment holds the story's bytes exactly when it
    /// does searched whole, wherever the windows cut the needle.
    #[test]
    fn s_ui_7_a_segment_searched_by_windows_finds_what_a_whole_search_finds() {
        let tracer = Tracer::new(Selector::Id(0x0102_0304_0506_0708));
        let needle = 0x0102_0304_0506_0708_u64.to_le_bytes();
        for at in 0..40 {
            let mut bytes = vec![0xee_u8; 48];
            if at + needle.len() <= bytes.len() {
                bytes[at..at + needle.len()].copy_from_slice(&needle);
            }
            let whole = tracer.may_concern(&bytes);
            assert_eq!(whole, at + needle.len() <= bytes.len(), "at {at}");
            for size in [1, 3, 5, 8, 13, 48] {
                let windows = (0..bytes.len()).step_by(size);
                let found = windows
                    .map(|start| start..(start + size).min(bytes.len()))
                    .any(|w| tracer.may_concern_window(&bytes, w));
                assert_eq!(found, whole, "at {at}, windows of {size}");
            }
        }
    }
}
