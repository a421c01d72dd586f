//! Replays the scanned records into a fresh `Broker` with `Broker::apply`, exactly as
//! recovery does, and keeps beside it what an operator asks about: records and bytes by
//! kind, record times, which records are still live, and records that do not fit the state
//! (settles of unknown messages, dead-letters from missing queues, publishes into undeclared
//! queues). Must not read files itself; `scan` feeds it.

use std::collections::{BTreeMap, HashMap, HashSet};

use wharf_broker::{Broker, Event, MessageId, SettleKind};
use wharf_store::codec::{RecordKind, StoreRecord};

use crate::scan::{Finding, Scanned};

/// Declared durable queues by vhost then name, each with the messages it holds. Looked up
/// by `&str`, so checking a record allocates nothing.
type Queues = HashMap<String, HashMap<String, IdSet>>;

/// Counters of one record kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct KindStats {
    /// Records.
    pub records: u64,
    /// Frame bytes.
    pub bytes: u64,
}

/// The replay state.
#[derive(Debug)]
pub struct Replay {
    /// The broker rebuilt from the log.
    pub broker: Broker,
    /// Records and frame bytes by kind byte.
    pub kinds: BTreeMap<u8, KindStats>,
    /// Earliest and latest time carried by a record (enqueue times), ms since the epoch.
    pub time_range_ms: Option<(u64, u64)>,
    /// Frame bytes of definition records (always needed by recovery).
    pub definition_bytes: u64,
    /// Frame bytes of message records whose message is still queued or scheduled.
    pub live_message_bytes: u64,
    /// Records that do not fit the state, in log order.
    pub findings: Vec<Finding>,
    /// Records read, and their frame bytes.
    pub records: u64,
    /// Frame bytes of all records.
    pub record_bytes: u64,
    queues: Queues,
    /// Per message: frame bytes of its record and how many queues (or a schedule) hold it.
    live: Live,
}

impl Default for Replay {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a record kind is a definition (vhost, exchange, queue, binding, policy, user,
/// permission).
pub fn is_definition(kind: u8) -> bool {
    matches!(
        RecordKind::from_byte(kind),
        Some(
            RecordKind::VhostAdded
                | RecordKind::VhostDeleted
                | RecordKind::ExchangeDeclared
                | RecordKind::ExchangeDeleted
                | RecordKind::QueueDeclared
                | RecordKind::QueueDeleted
                | RecordKind::Bound
                | RecordKind::Unbound
                | RecordKind::PolicySet
                | RecordKind::PolicyCleared
                | RecordKind::UserPut
                | RecordKind::UserDeleted
                | RecordKind::PermissionSet
                | RecordKind::PermissionCleared
                | RecordKind::TopicPermissionSet
                | RecordKind::TopicPermissionCleared
        )
    )
}

/// The name of a kind byte (`Published`, ...), or `unknown(0x..)`.
pub fn kind_name(kind: u8) -> String {
    if kind == wharf_store::codec::CARRIED_KIND {
        return "Carried".to_owned();
    }
    if kind == wharf_store::codec::REFERENCED_KIND {
        return "Referenced".to_owned();
    }
    RecordKind::from_byte(kind)
        .map_or_else(|| format!("unknown(0x{kind:02x})"), |k| format!("{k:?}"))
}

/// The time a record carries, if any: a message's enqueue time.
pub fn event_time_ms(e: &Event) -> Option<u64> {
    match e {
        Event::Published { message, .. } | Event::Scheduled { message, .. } => {
            Some(message.message.enqueued_at_ms)
        }
        Event::DeadLettered {
            message: Some(m), ..
        } => Some(m.message.enqueued_at_ms),
        Event::DeadLetterHeld { at_ms, .. } => Some(*at_ms),
        _ => None,
    }
}

impl Replay {
    /// A fresh broker and empty counters.
    pub fn new() -> Self {
        Replay {
            broker: Broker::new(),
            kinds: BTreeMap::new(),
            time_range_ms: None,
            definition_bytes: 0,
            live_message_bytes: 0,
            findings: Vec::new(),
            records: 0,
            record_bytes: 0,
            queues: HashMap::new(),
            live: Live::default(),
        }
    }

    /// Takes one scanned record: counts it, checks it against the state, applies it.
    pub fn visit(&mut self, s: &Scanned<'_>) {
        self.records += 1;
        self.record_bytes += s.frame_bytes;
        let k = self.kinds.entry(s.kind).or_default();
        k.records += 1;
        k.bytes += s.frame_bytes;
        if is_definition(s.kind) {
            self.definition_bytes += s.frame_bytes;
        }
        let event = match &s.record {
            // A copy compaction made: replay skips it (the checkpoint refers to it).
            Ok(StoreRecord::Format { .. } | StoreRecord::Copied { .. }) => return,
            Ok(StoreRecord::Event(e)) => e,
            Err(err) => {
                self.find(s, format!("record does not decode: {err}"));
                return;
            }
        };
        if let Some(t) = event_time_ms(event) {
            self.time_range_ms = Some(match self.time_range_ms {
                Some((lo, hi)) => (lo.min(t), hi.max(t)),
                None => (t, t),
            });
        }
        self.check(s, event);
        // A message carried in a checkpoint is restored with its marks, as recovery does.
        let applied = match (&s.placements, event) {
            (Some(p), Event::Published { vhost, message, .. }) => self.broker.restore_message(
                vhost,
                &wharf_broker::MessageRef::Loaded(message.message.clone()),
                p,
            ),
            _ => self.broker.apply(event),
        };
        if let Err(err) = applied {
            self.find(s, format!("recovery refuses this record: {err}"));
        }
    }

    fn find(&mut self, s: &Scanned<'_>, what: String) {
        self.findings.push(Finding {
            segment: s.segment,
            offset: s.offset,
            file: s.file.to_owned(),
            lsn: Some(s.lsn),
            severity: "error",
            what,
        });
    }

    /// The consistency checks, and the bookkeeping of which records are live.
    fn check(&mut self, s: &Scanned<'_>, e: &Event) {
        match e {
            Event::QueueDeclared { vhost, queue, .. } => {
                self.queues
                    .entry(vhost.clone())
                    .or_default()
                    .entry(queue.clone())
                    .or_default();
            }
            Event::QueueDeleted { vhost, queue } => {
                let held = self.queues.get_mut(vhost).and_then(|v| v.remove(queue));
                self.drop_queue(held);
            }
            Event::VhostDeleted { vhost } => {
                for (_, held) in self.queues.remove(vhost).unwrap_or_default() {
                    self.drop_queue(Some(held));
                }
            }
            Event::Published {
                vhost,
                message,
                queues,
                scheduled,
            } => {
                if let Some(id) = scheduled {
                    self.release(*id);
                }
                self.enqueue(s, vhost, message.message.id, queues, "publish");
            }
            Event::Scheduled { message, .. } => {
                self.live_message_bytes += s.frame_bytes;
                self.live.insert(message.message.id, (s.frame_bytes, 1));
            }
            Event::Unscheduled { id, .. } => self.release(*id),
            Event::Settled {
                vhost,
                queue,
                ids,
                kind,
            } => {
                let what = match kind {
                    SettleKind::Ack => "ack",
                    SettleKind::Expire => "expiry",
                    SettleKind::Discard => "discard",
                };
                self.remove(s, vhost, queue, ids, what, true);
            }
            Event::Purged { vhost, queue, ids } => self.remove(s, vhost, queue, ids, "purge", true),
            Event::Delivered { vhost, queue, ids } => {
                self.remove(s, vhost, queue, ids, "delivery mark", false);
            }
            Event::Returned { vhost, queue, ids } => {
                self.remove(s, vhost, queue, ids, "return", false);
            }
            // Still in its queue, waiting to be dead-lettered (S-QQ-10).
            Event::DeadLetterHeld {
                vhost, queue, ids, ..
            } => {
                self.remove(s, vhost, queue, ids, "dead-letter hold", false);
            }
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            } => {
                if let Some(from) = from {
                    if self.members(vhost, from).is_some() {
                        self.remove(s, vhost, from, &[*id], "dead-lettering", true);
                    } else {
                        self.find(s, format!(
                            "dead-lettering of message {} from queue '{from}' (vhost '{vhost}'), which does not exist",
                            id.0
                        ));
                    }
                }
                if let Some(m) = message {
                    self.enqueue(s, vhost, m.message.id, targets, "dead-lettered copy");
                }
            }
            _ => {}
        }
    }

    fn enqueue(
        &mut self,
        s: &Scanned<'_>,
        vhost: &str,
        id: MessageId,
        queues: &[String],
        what: &str,
    ) {
        let mut refs = 0u32;
        for q in queues {
            if let Some(members) = self.members(vhost, q) {
                if members.insert(id) {
                    refs += 1;
                }
            } else {
                self.find(s, format!(
                    "{what} of message {} into queue '{q}' (vhost '{vhost}'), which was never declared",
                    id.0
                ));
            }
        }
        if refs > 0 {
            self.live_message_bytes += s.frame_bytes;
            self.live.insert(id, (s.frame_bytes, refs));
        }
    }

    fn remove(
        &mut self,
        s: &Scanned<'_>,
        vhost: &str,
        queue: &str,
        ids: &[MessageId],
        what: &str,
        removes: bool,
    ) {
        let Some(members) = self.queues.get_mut(vhost).and_then(|v| v.get_mut(queue)) else {
            self.find(
                s,
                format!("{what} in queue '{queue}' (vhost '{vhost}'), which does not exist"),
            );
            return;
        };
        let mut unknown = Vec::new();
        for id in ids {
            let member = if removes {
                members.remove(id)
            } else {
                members.contains(id)
            };
            if !member {
                unknown.push(*id);
            } else if removes {
                release(&mut self.live, &mut self.live_message_bytes, *id);
            }
        }
        for id in unknown {
            self.find(
                s,
                format!(
                    "{what} of message {} unknown in queue '{queue}' (vhost '{vhost}')",
                    id.0
                ),
            );
        }
    }

    fn members(&mut self, vhost: &str, queue: &str) -> Option<&mut IdSet> {
        self.queues.get_mut(vhost)?.get_mut(queue)
    }

    /// A queue is gone with the messages it held.
    fn drop_queue(&mut self, held: Option<IdSet>) {
        for id in held.unwrap_or_default() {
            self.release(id);
        }
    }

    /// One queue (or the schedule) let go of `id`; its record is reclaimable with the last.
    fn release(&mut self, id: MessageId) {
        release(&mut self.live, &mut self.live_message_bytes, id);
    }

    /// Messages still held by some queue or schedule at the end of the log.
    pub fn live_messages(&self) -> usize {
        self.live.len()
    }
}

/// `Replay::release` on the two fields it touches, for callers that hold a queue's set.
fn release(live: &mut Live, live_message_bytes: &mut u64, id: MessageId) {
    if let Some((bytes, refs)) = live.get_mut(&id) {
        *refs -= 1;
        if *refs == 0 {
            *live_message_bytes -= *bytes;
            live.remove(&id);
        }
    }
}

/// Hashes message ids, which are distinct sequential integers from the log: one multiply
/// spreads them (`SipHash`'s flood resistance buys nothing for them and costs a tenth of a scan).
#[derive(Debug, Clone, Copy, Default)]
struct IdHash(u64);

impl std::hash::Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdState = std::hash::BuildHasherDefault<IdHash>;
type IdSet = HashSet<MessageId, IdState>;
/// Per message: frame bytes of its record and how many queues (or a schedule) hold it.
type Live = HashMap<MessageId, (u64, u32), IdState>;
