//! The dashboard's time views (S-UI-20, S-UI-21): how many of a queue's ready messages expire
//! within each of a few horizons, read from the queue's deadline index (the deadlines expiry
//! itself uses, S-TTL-3, S-TTL-9), and the scheduled messages (S-SCHED) waiting to be routed,
//! with their due times. Read-only queries: they take `&self`.

use std::sync::Arc;

use super::Broker;
use super::publish::routing_keys;
use super::state::{Scheduled, Timer};
use crate::types::{Message, MessageId};

/// A queue's upcoming expiries ([`Broker::expiry_horizon`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiryHorizon {
    /// The queue's ready messages.
    pub ready: u64,
    /// How many of them have a deadline at all (a message TTL or the queue's).
    pub with_deadline: u64,
    /// How many are already past their deadline and not yet expired (the broker expires them
    /// at its next timer step).
    pub overdue: u64,
    /// For each asked horizon `h` (ms): how many expire by `now + h` (overdue ones included).
    pub within: Vec<(u64, u64)>,
    /// The earliest deadline, if any.
    pub next_deadline_ms: Option<u64>,
}

/// Which scheduled messages [`Broker::scheduled`] lists.
#[derive(Debug, Clone, Copy)]
pub enum ScheduledFor<'a> {
    /// Those waiting on this `x-delayed-message` exchange.
    Exchange(&'a str),
    /// Those the current bindings would route to this queue if they were due now.
    Queue(&'a str),
}

/// One scheduled message as [`Broker::scheduled`] lists it.
#[derive(Debug, Clone)]
pub struct ScheduledMessage {
    /// When it is due to be routed (ms since the epoch, S-SCHED-2).
    pub due_ms: u64,
    /// Its id while it waits (it gets a fresh one when routed).
    pub id: MessageId,
    /// The message (its exchange is the delayed exchange it waits on).
    pub message: Arc<Message>,
    /// Whether it is logged (durable exchange and persistent message): it survives a restart.
    pub durable: bool,
}

/// A page of scheduled messages, in due order.
#[derive(Debug, Clone)]
pub struct ScheduledPage {
    /// How many match among those looked at: all of them when `complete`.
    pub total: u64,
    /// Whether every scheduled message of the vhost was looked at.
    pub complete: bool,
    /// From the requested offset on, earliest due first.
    pub messages: Vec<ScheduledMessage>,
}

impl Broker {
    /// How many of a queue's ready messages expire by `now_ms + h` for each horizon `h`
    /// (S-UI-20), counted from the queue's deadline index: the cost is the smaller side of
    /// each bound in that index, never the messages without a deadline nor their content.
    /// `None` when there is no such queue.
    pub fn expiry_horizon(
        &self,
        vhost: &str,
        queue: &str,
        now_ms: u64,
        horizons_ms: &[u64],
    ) -> Option<ExpiryHorizon> {
        let q = self.queue_named(vhost, queue)?;
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let within = horizons_ms
            .iter()
            .map(|&h| (h, count(q.ready.deadlines_until(now_ms.saturating_add(h)))))
            .collect();
        Some(ExpiryHorizon {
            ready: count(q.ready.len()),
            with_deadline: count(q.ready.with_deadline()),
            overdue: count(q.ready.deadlines_until(now_ms)),
            within,
            next_deadline_ms: q.ready.first_deadline(),
        })
    }

    /// The scheduled messages of `vhost` waiting on an exchange or bound for a queue
    /// (S-UI-21), earliest due first, `count` of them from `offset`. For a queue, "bound for"
    /// is what the exchange's bindings route to now; a binding made or removed before the
    /// message is due changes it, as it changes where the message goes (S-SCHED-2). `None`
    /// when the vhost, exchange or queue does not exist.
    ///
    /// It walks the broker's timers in due order and stops once the page is full and `scan`
    /// scheduled messages of the vhost were looked at, so a poll's work is bounded whatever
    /// waits; [`ScheduledPage::complete`] says whether `total` counted them all.
    pub fn scheduled(
        &self,
        vhost: &str,
        of: ScheduledFor<'_>,
        offset: usize,
        count: usize,
        scan: usize,
    ) -> Option<ScheduledPage> {
        let v = self.vhosts.get(vhost)?;
        let queue = match of {
            ScheduledFor::Exchange(name) => {
                v.exchanges.get(name)?;
                None
            }
            ScheduledFor::Queue(name) => Some(*v.queues.get(name)?),
        };
        let bound_here = |s: &Scheduled| match (of, queue) {
            (ScheduledFor::Exchange(name), _) => s.exchange == name,
            (_, Some(qid)) => v.exchanges.get(s.exchange.as_str()).is_some_and(|&xid| {
                let headers = s.msg.properties.headers.as_ref();
                let keys = routing_keys(&s.msg.routing_key, headers);
                self.route(v, xid, &keys, headers).contains(&qid)
            }),
            (ScheduledFor::Queue(_), None) => false,
        };
        let (mut looked, mut total, mut complete) = (0usize, 0usize, true);
        let mut messages = Vec::new();
        let waiting = self.timers.iter().filter_map(|&(due, t)| match t {
            Timer::Scheduled(id) => self.scheduled.get(&id).map(|s| (due, id, s)),
            _ => None,
        });
        for (due, id, s) in waiting.filter(|(_, _, s)| s.vhost == vhost) {
            if looked >= scan && total >= offset.saturating_add(count) {
                complete = false;
                break;
            }
            looked += 1;
            if !bound_here(s) {
                continue;
            }
            if total >= offset && messages.len() < count {
                messages.push(ScheduledMessage {
                    due_ms: due,
                    id,
                    message: Arc::clone(&s.msg),
                    durable: s.durable,
                });
            }
            total += 1;
        }
        Some(ScheduledPage {
            total: u64::try_from(total).unwrap_or(u64::MAX),
            complete,
            messages,
        })
    }
}
