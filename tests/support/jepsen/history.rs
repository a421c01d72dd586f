//! The history of a Jepsen-style run: every operation a client attempted or saw, and every
//! fault the nemesis caused, in the order they were recorded, with the microseconds since the
//! run started. The checker reads nothing else; the file written from it is how a failure is
//! diagnosed. Depends on std.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The two queues of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Queue {
    /// Where publishers publish; consumers ack most messages and reject some.
    Source,
    /// Where the source queue dead-letters what consumers reject.
    Dead,
}

/// A published message: its publisher and the publisher's sequence number (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Msg {
    pub publisher: u32,
    pub seq: u64,
}

impl Msg {
    /// The message's body: its publisher and sequence number, nothing else.
    pub fn body(self) -> String {
        format!("jepsen p={} s={}", self.publisher, self.seq)
    }

    /// The message a body names, if it is one of ours.
    pub fn parse(body: &str) -> Option<Msg> {
        let rest = body.strip_prefix("jepsen p=")?;
        let (p, s) = rest.split_once(" s=")?;
        Some(Msg {
            publisher: p.parse().ok()?,
            seq: s.parse().ok()?,
        })
    }

    /// Whether consumers reject this message (into the dead-letter queue) instead of acking
    /// it: one in five, decided by the message alone so every delivery of it is treated alike.
    pub fn rejected(self) -> bool {
        self.seq % 5 == 2
    }
}

/// How a delivery was settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Settle {
    Ack,
    /// `basic.reject` without requeue: the source queue dead-letters it.
    Reject,
}

/// One operation. `conn` is a connection's incarnation: unique in the run, one channel each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A connection (and its channel) opened to `node`.
    Open { conn: u64, node: u64 },
    /// A connection given up: an error, a timeout, or the client's own close.
    Closed { conn: u64, why: String },
    /// A publish sent (persistent, confirm mode), before its confirm.
    Publish { conn: u64, msg: Msg },
    /// The broker's confirm of a publish: `ack` true for `basic.ack`, false for `basic.nack`.
    Confirm { conn: u64, msg: Msg, ack: bool },
    /// A message received from `queue` (a consumer's delivery or a `basic.get`), its body as
    /// received.
    Deliver {
        conn: u64,
        queue: Queue,
        body: String,
        redelivered: bool,
    },
    /// An ack or reject sent for a delivery of `msg` from `queue`.
    Settle {
        conn: u64,
        queue: Queue,
        msg: Msg,
        how: Settle,
    },
    /// A synchronous reply on `conn` (`basic.qos-ok`) received: the broker processed and
    /// committed everything sent on `conn` before it (replies leave in order, each only once
    /// its batch is committed: S-CLU-10), so the settlements sent before it took effect.
    Synced { conn: u64 },
    /// The nemesis did something.
    Nemesis { what: String },
}

/// One recorded operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Microseconds since the run started.
    pub at_us: u64,
    /// Who: a publisher, a consumer, the drain, or the nemesis.
    pub client: String,
    pub op: Op,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>6}.{:06} {:<6} {:?}",
            self.at_us / 1_000_000,
            self.at_us % 1_000_000,
            self.client,
            self.op
        )
    }
}

/// The run's history, shared by every client.
pub struct History {
    start: Instant,
    events: Mutex<Vec<Event>>,
    next_conn: AtomicU64,
}

impl History {
    /// An empty history starting now.
    pub fn new(start: Instant) -> History {
        History {
            start,
            events: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(1),
        }
    }

    /// A new connection incarnation.
    pub fn conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `op` by `client` now. The order of the history is the order of these calls.
    pub fn record(&self, client: &str, op: Op) {
        let mut events = self.events.lock().unwrap();
        let at_us = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        events.push(Event {
            at_us,
            client: client.to_owned(),
            op,
        });
    }

    /// How many events were recorded so far.
    pub fn count(&self) -> usize {
        self.events.lock().unwrap().len()
    }

    /// Everything recorded so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Writes the history to `path`, one event a line.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for e in self.events.lock().unwrap().iter() {
            writeln!(out, "{e}")?;
        }
        out.flush()
    }
}
