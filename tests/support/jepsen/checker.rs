//! The checker of a Jepsen-style run: reads a [`History`](super::history::History)'s events
//! and reports every violation of what a quorum queue with dead-lettering promises (S-CLU-30..33):
//!
//! - **no confirmed loss**: a message the broker confirmed (`basic.ack`) was delivered from
//!   the source queue or the dead-letter queue at least once (the final drain counts);
//!   a message whose reject took effect was delivered from the dead-letter queue;
//! - **exactly once, redeliveries flagged**: per queue, a message is delivered without
//!   `redelivered` at most once; once its ack or reject took effect (a later synchronous reply
//!   on the same connection came back, [`Op::Synced`]) it is never delivered from that queue
//!   again; a message acked from the source is never dead-lettered, and nothing reaches the
//!   dead-letter queue without a reject;
//! - **nothing never published**: every delivered body is a message some publisher sent;
//! - **order**: what RabbitMQ guarantees for a quorum queue, and no more: messages one
//!   channel publishes are enqueued in that order and a queue delivers in queue order, so
//!   the first deliveries (`redelivered` false) that one consumer channel receives from the
//!   source queue follow each publishing channel's order; across a publisher's channels
//!   (it reconnects after an error), a message acked by a confirm before another was
//!   published comes before it. A nacked or unconfirmed message of an earlier channel may
//!   come after a later channel's: the broker may still enqueue what it was sent before the
//!   channel was lost (S-CLU-74). Redeliveries may come in any order. The
//!   dead-letter queue is fed in the order of the rejects, so a consumer channel's first
//!   deliveries from it follow the order in which each rejecting channel rejected them
//!   (checked for messages rejected exactly once: a repeated reject means the first one may
//!   not have taken effect).
//!
//! Unconfirmed publishes (the connection lost before a confirm, or a `basic.nack`) are
//! "maybe": present or absent, but if present, held to every rule above. Depends on std.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::history::{Event, Msg, Op, Queue, Settle};

/// One thing the history shows going wrong. Positions are indexes into the events (the
/// history file's line numbers minus one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Confirmed, and delivered from neither queue.
    Lost { msg: Msg, confirmed: usize },
    /// Its reject took effect, and it was never delivered from the dead-letter queue.
    LostDeadLetter { msg: Msg, rejected: usize },
    /// A delivered body no publisher sent.
    Phantom { at: usize, body: String },
    /// Delivered from `queue` twice without the `redelivered` flag.
    DuplicateWithoutFlag {
        queue: Queue,
        msg: Msg,
        first: usize,
        again: usize,
    },
    /// Delivered from `queue` after an ack or reject of it there took effect.
    DeliveredAfterSettle {
        queue: Queue,
        msg: Msg,
        settled: usize,
        again: usize,
    },
    /// Acked from the source queue (the ack took effect) and also dead-lettered.
    AckedAndDeadLettered { msg: Msg, acked: usize, dead: usize },
    /// In the dead-letter queue without ever being rejected.
    DeadLetteredWithoutReject { msg: Msg, at: usize },
    /// A consumer channel's first deliveries from `queue` out of order: `later` was received
    /// before `earlier` though it comes after it.
    OrderInversion {
        queue: Queue,
        conn: u64,
        later: Msg,
        earlier: Msg,
        at: usize,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Lines of the history file count from 1.
        let l = |i: &usize| i + 1;
        match self {
            Violation::Lost { msg, confirmed } => write!(
                f,
                "lost: {msg:?} confirmed (line {}) and never delivered",
                l(confirmed)
            ),
            Violation::LostDeadLetter { msg, rejected } => write!(
                f,
                "lost dead letter: {msg:?} rejected (took effect, line {}) and never delivered \
                 from the dead-letter queue",
                l(rejected)
            ),
            Violation::Phantom { at, body } => {
                write!(
                    f,
                    "phantom: {body:?} delivered (line {}), never published",
                    l(at)
                )
            }
            Violation::DuplicateWithoutFlag {
                queue,
                msg,
                first,
                again,
            } => write!(
                f,
                "duplicate: {msg:?} delivered from {queue:?} without `redelivered` twice \
                 (lines {} and {})",
                l(first),
                l(again)
            ),
            Violation::DeliveredAfterSettle {
                queue,
                msg,
                settled,
                again,
            } => write!(
                f,
                "duplicate: {msg:?} delivered from {queue:?} (line {}) after its settlement \
                 took effect (line {})",
                l(again),
                l(settled)
            ),
            Violation::AckedAndDeadLettered { msg, acked, dead } => write!(
                f,
                "two outcomes: {msg:?} acked from the source (took effect, line {}) and \
                 delivered from the dead-letter queue (line {})",
                l(acked),
                l(dead)
            ),
            Violation::DeadLetteredWithoutReject { msg, at } => write!(
                f,
                "{msg:?} delivered from the dead-letter queue (line {}) but never rejected",
                l(at)
            ),
            Violation::OrderInversion {
                queue,
                conn,
                later,
                earlier,
                at,
            } => write!(
                f,
                "order: connection {conn} got {earlier:?} from {queue:?} (line {}) after \
                 {later:?}, which comes after it",
                l(at)
            ),
        }
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Publishes sent.
    pub published: usize,
    /// Publishes the broker confirmed with `basic.ack`.
    pub confirmed: usize,
    /// Publishes sent and never acked by a confirm: may or may not be in the queues.
    pub maybe: usize,
    /// Of the maybes, those delivered anyway.
    pub maybe_present: usize,
    /// Distinct messages delivered from the source queue.
    pub delivered: usize,
    /// Distinct messages delivered from the dead-letter queue.
    pub dead_lettered: usize,
    /// Deliveries flagged `redelivered`.
    pub redeliveries: usize,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "published {}, confirmed {}, maybe {} ({} of them present), delivered {} from the \
             source and {} from the dead-letter queue, {} redeliveries; {} violations",
            self.published,
            self.confirmed,
            self.maybe,
            self.maybe_present,
            self.delivered,
            self.dead_lettered,
            self.redeliveries,
            self.violations.len()
        )
    }
}

/// A delivery: where in the history, with which flag.
struct Delivery {
    at: usize,
    redelivered: bool,
}

/// The facts of a history, gathered in one pass.
#[derive(Default)]
struct Facts {
    published: BTreeSet<Msg>,
    /// Where each message was published (its first publish), and on which connection.
    publish: BTreeMap<Msg, (usize, u64)>,
    /// The first `basic.ack` confirm of each message.
    confirmed: BTreeMap<Msg, usize>,
    deliveries: BTreeMap<(Queue, Msg), Vec<Delivery>>,
    /// Deliveries in history order, for the order check.
    in_order: Vec<(usize, u64, Queue, Msg, bool)>,
    /// Every reject of a message from the source queue: where and on which connection.
    rejects: BTreeMap<Msg, Vec<(usize, u64)>>,
    /// Settlements not yet followed by a synchronous reply on their connection.
    pending: BTreeMap<u64, Vec<(Queue, Msg, Settle, usize)>>,
    /// Settlements that took effect, with where their reply came: the first of each.
    effective: BTreeMap<(Queue, Msg, Settle), usize>,
}

impl Facts {
    fn gather(events: &[Event], violations: &mut Vec<Violation>) -> Facts {
        let mut f = Facts::default();
        for (i, e) in events.iter().enumerate() {
            match &e.op {
                Op::Publish { conn, msg } => {
                    f.published.insert(*msg);
                    f.publish.entry(*msg).or_insert((i, *conn));
                }
                Op::Confirm { msg, ack: true, .. } => {
                    f.confirmed.entry(*msg).or_insert(i);
                }
                Op::Deliver {
                    conn,
                    queue,
                    body,
                    redelivered,
                } => match Msg::parse(body).filter(|m| f.published.contains(m)) {
                    Some(msg) => {
                        f.deliveries
                            .entry((*queue, msg))
                            .or_default()
                            .push(Delivery {
                                at: i,
                                redelivered: *redelivered,
                            });
                        f.in_order.push((i, *conn, *queue, msg, *redelivered));
                    }
                    None => violations.push(Violation::Phantom {
                        at: i,
                        body: body.clone(),
                    }),
                },
                Op::Settle {
                    conn,
                    queue,
                    msg,
                    how,
                } => {
                    if *queue == Queue::Source && *how == Settle::Reject {
                        f.rejects.entry(*msg).or_default().push((i, *conn));
                    }
                    f.pending
                        .entry(*conn)
                        .or_default()
                        .push((*queue, *msg, *how, i));
                }
                Op::Synced { conn } => {
                    for (queue, msg, how, _) in f.pending.remove(conn).unwrap_or_default() {
                        f.effective.entry((queue, msg, how)).or_insert(i);
                    }
                }
                Op::Confirm { ack: false, .. }
                | Op::Open { .. }
                | Op::Closed { .. }
                | Op::Nemesis { .. } => {}
            }
        }
        f
    }

    fn delivered(&self, queue: Queue, msg: Msg) -> &[Delivery] {
        self.deliveries
            .get(&(queue, msg))
            .map_or(&[], Vec::as_slice)
    }

    /// No confirmed loss, and no dead letter lost.
    fn losses(&self, out: &mut Vec<Violation>) {
        for (&msg, &confirmed) in &self.confirmed {
            if self.delivered(Queue::Source, msg).is_empty()
                && self.delivered(Queue::Dead, msg).is_empty()
            {
                out.push(Violation::Lost { msg, confirmed });
            }
        }
        for (&(queue, msg, how), &rejected) in &self.effective {
            if queue == Queue::Source
                && how == Settle::Reject
                && self.delivered(Queue::Dead, msg).is_empty()
            {
                out.push(Violation::LostDeadLetter { msg, rejected });
            }
        }
    }

    /// Exactly once per queue, redeliveries flagged; one outcome per message.
    fn duplicates(&self, out: &mut Vec<Violation>) {
        for (&(queue, msg), ds) in &self.deliveries {
            let mut unflagged = ds.iter().filter(|d| !d.redelivered);
            if let (Some(first), Some(again)) = (unflagged.next(), unflagged.next()) {
                out.push(Violation::DuplicateWithoutFlag {
                    queue,
                    msg,
                    first: first.at,
                    again: again.at,
                });
            }
            let settled = [Settle::Ack, Settle::Reject]
                .iter()
                .filter_map(|how| self.effective.get(&(queue, msg, *how)))
                .min();
            if let Some(&settled) = settled
                && let Some(again) = ds.iter().find(|d| d.at > settled)
            {
                out.push(Violation::DeliveredAfterSettle {
                    queue,
                    msg,
                    settled,
                    again: again.at,
                });
            }
            if queue == Queue::Dead {
                if let Some(&acked) = self.effective.get(&(Queue::Source, msg, Settle::Ack)) {
                    out.push(Violation::AckedAndDeadLettered {
                        msg,
                        acked,
                        dead: ds[0].at,
                    });
                }
                if !self.rejects.contains_key(&msg) {
                    out.push(Violation::DeadLetteredWithoutReject { msg, at: ds[0].at });
                }
            }
        }
    }

    /// Where a message stands in its queue's order, as far as the history shows it: its
    /// stream (messages ordered among themselves) and its rank in the stream. Source: the
    /// connection (one channel) that published it, by sequence number. Dead-letter queue: the
    /// connection that rejected it, by when (only for a message rejected exactly once).
    fn rank(&self, queue: Queue, msg: Msg) -> Option<(u64, u64)> {
        match queue {
            Queue::Source => Some((self.publish.get(&msg)?.1, msg.seq)),
            Queue::Dead => match self.rejects.get(&msg).map(Vec::as_slice) {
                Some(&[(at, conn)]) => Some((conn, at as u64)),
                _ => None,
            },
        }
    }

    /// Whether `earlier` must come before `later`, two messages of one publisher on
    /// different channels: only when `earlier` was acked by a confirm before `later` was
    /// published (then it was in the queue already).
    fn acked_before(&self, earlier: Msg, later: Msg) -> bool {
        match (self.confirmed.get(&earlier), self.publish.get(&later)) {
            (Some(&acked), Some(&(published, _))) => acked < published,
            _ => false,
        }
    }

    /// Per consumer channel and queue, first deliveries follow each stream's order, and a
    /// publisher's messages follow each other across its channels where a confirm ordered
    /// them ([`Facts::acked_before`]).
    fn order(&self, out: &mut Vec<Violation>) {
        // (conn, queue, stream) -> the highest-ranked message first-delivered so far.
        let mut last: BTreeMap<(u64, Queue, u64), (u64, Msg)> = BTreeMap::new();
        // (conn, publisher) -> the highest message first-delivered from the source so far: a
        // publisher publishes in sequence order, so it was published last of those delivered.
        let mut newest: BTreeMap<(u64, u32), Msg> = BTreeMap::new();
        for &(at, conn, queue, msg, redelivered) in &self.in_order {
            if redelivered {
                continue;
            }
            let Some((stream, rank)) = self.rank(queue, msg) else {
                continue;
            };
            let later = match last.get(&(conn, queue, stream)) {
                Some(&(top, later)) if top > rank => Some(later),
                _ => {
                    last.insert((conn, queue, stream), (rank, msg));
                    None
                }
            };
            let later = later.or_else(|| {
                if queue != Queue::Source {
                    return None;
                }
                let newest = newest.entry((conn, msg.publisher)).or_insert(msg);
                if newest.seq < msg.seq {
                    *newest = msg;
                }
                let newest = *newest;
                (newest.seq > msg.seq && self.acked_before(msg, newest)).then_some(newest)
            });
            if let Some(later) = later {
                out.push(Violation::OrderInversion {
                    queue,
                    conn,
                    later,
                    earlier: msg,
                    at,
                });
            }
        }
    }
}

/// Checks a history; the report lists every violation found.
pub fn check(events: &[Event]) -> Report {
    let mut violations = Vec::new();
    let facts = Facts::gather(events, &mut violations);
    facts.losses(&mut violations);
    facts.duplicates(&mut violations);
    facts.order(&mut violations);
    let present = |m: &Msg| {
        !facts.delivered(Queue::Source, *m).is_empty()
            || !facts.delivered(Queue::Dead, *m).is_empty()
    };
    let maybe: Vec<&Msg> = facts
        .published
        .iter()
        .filter(|m| !facts.confirmed.contains_key(m))
        .collect();
    let distinct = |q: Queue| facts.deliveries.keys().filter(|(k, _)| *k == q).count();
    Report {
        published: facts.published.len(),
        confirmed: facts.confirmed.len(),
        maybe: maybe.len(),
        maybe_present: maybe.iter().filter(|m| present(m)).count(),
        delivered: distinct(Queue::Source),
        dead_lettered: distinct(Queue::Dead),
        redeliveries: facts.in_order.iter().filter(|d| d.4).count(),
        violations,
    }
}
