//! Shared by the store tests: a broker driven like the server drives it (every outcome's
//! events go to a `Store`; a refused command closes the channel or connection as the server
//! would), random operations for it, and opening stores on a simulated disk.

#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a failed step is a failed test"
)]

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use wharf_broker::{ApplyTo, ChannelId, ConnId};
use wharf_broker::{
    Broker, ChanRef, Command, Effect, Event, ExchangeDeclare, FieldTable, Outcome, PolicySpec,
    Properties, Publish, QueueDeclare, Reply, Value,
};
use wharf_store::{RecoverySummary, Store, StoreConfig, StoreError, Ticket};
use wharf_wal::{SimStorage, WalConfig};

pub const CH: ChanRef = ChanRef {
    conn: ConnId(1),
    channel: ChannelId(1),
};
pub const QUEUES: usize = 3;
pub const EXCHANGES: [&str; 4] = ["x0", "x1", "dlx", "delayed"];
pub const T0_MS: u64 = 1_700_000_000_000;

/// Small segments so that workloads roll segments (and sync the directory) often.
pub fn wal_config() -> WalConfig {
    WalConfig {
        segment_bytes_max: wharf_wal::SEGMENT_BYTES_MIN,
        ..WalConfig::default()
    }
}

pub fn store_config(salvage: bool) -> StoreConfig {
    StoreConfig {
        dir: PathBuf::from("/sim/data"),
        salvage,
    }
}

pub fn open(sim: &SimStorage) -> Result<(Store, Broker, RecoverySummary), StoreError> {
    Store::open_with(&store_config(false), Arc::new(sim.clone()), &wal_config())
}

pub fn queue_name(i: usize) -> String {
    format!("q{i}")
}

/// One step of a workload.
#[derive(Debug, Clone)]
pub enum Op {
    DeclareQueue {
        q: usize,
        durable: bool,
        ttl_ms: Option<u32>,
        dlx: bool,
        max_length: Option<u8>,
    },
    DeclareExchange {
        x: usize,
        kind: &'static str,
        durable: bool,
    },
    Bind {
        q: usize,
        x: usize,
        key: usize,
    },
    Publish {
        exchange: Option<usize>,
        key: usize,
        persistent: bool,
        expiration_ms: Option<u32>,
        /// `x-delay` header (ms), honoured by the delayed exchange only.
        delay_ms: Option<u32>,
        body_len: usize,
    },
    Get {
        q: usize,
        no_ack: bool,
    },
    Ack {
        pick: usize,
        multiple: bool,
    },
    Reject {
        pick: usize,
        requeue: bool,
    },
    Recover,
    Consume {
        q: usize,
        prefetch: u16,
    },
    Cancel {
        q: usize,
    },
    Purge {
        q: usize,
    },
    DeleteQueue {
        q: usize,
    },
    DeleteExchange {
        x: usize,
    },
    PolicySet {
        pattern: usize,
        ttl_ms: Option<u32>,
        max_length: Option<u8>,
    },
    PolicyClear,
    Advance {
        ms: u32,
    },
    ChannelCycle,
}

pub fn op() -> impl Strategy<Value = Op> {
    let q = 0..QUEUES;
    let x = 0..EXCHANGES.len();
    prop_oneof![
        3 => (q.clone(), prop::bool::weighted(0.8), prop::option::of(0u32..5000), any::<bool>(),
              prop::option::of(1u8..5))
            .prop_map(|(q, durable, ttl_ms, dlx, max_length)| Op::DeclareQueue {
                q, durable, ttl_ms, dlx, max_length
            }),
        2 => (x.clone(), prop_oneof![Just("direct"), Just("fanout"), Just("topic")],
              prop::bool::weighted(0.8))
            .prop_map(|(x, kind, durable)| Op::DeclareExchange { x, kind, durable }),
        2 => (q.clone(), x.clone(), 0..QUEUES).prop_map(|(q, x, key)| Op::Bind { q, x, key }),
        10 => (prop::option::of(x.clone()), 0..QUEUES, prop::bool::weighted(0.7),
               prop::option::of(prop_oneof![Just(0u32), 1u32..3000]),
               prop::option::of(1u32..3000), 0usize..200)
            .prop_map(|(exchange, key, persistent, expiration_ms, delay_ms, body_len)| {
                Op::Publish { exchange, key, persistent, expiration_ms, delay_ms, body_len }
            }),
        4 => (q.clone(), prop::bool::weighted(0.2)).prop_map(|(q, no_ack)| Op::Get { q, no_ack }),
        3 => (any::<usize>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, multiple)| Op::Ack { pick, multiple }),
        2 => (any::<usize>(), any::<bool>())
            .prop_map(|(pick, requeue)| Op::Reject { pick, requeue }),
        1 => Just(Op::Recover),
        1 => (q.clone(), 0u16..3).prop_map(|(q, prefetch)| Op::Consume { q, prefetch }),
        1 => q.clone().prop_map(|q| Op::Cancel { q }),
        1 => q.clone().prop_map(|q| Op::Purge { q }),
        1 => q.prop_map(|q| Op::DeleteQueue { q }),
        1 => x.prop_map(|x| Op::DeleteExchange { x }),
        1 => (0..QUEUES, prop::option::of(0u32..4000), prop::option::of(1u8..4))
            .prop_map(|(pattern, ttl_ms, max_length)| Op::PolicySet { pattern, ttl_ms, max_length }),
        1 => Just(Op::PolicyClear),
        3 => (0u32..4000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::ChannelCycle),
    ]
}

/// A durable starting point so random operations meet queues that exist: `q0` plain, `q1`
/// with a TTL and a dead-letter exchange, `q2` with a length limit; `x0` direct to `q0`, `x1`
/// fanout to all three, `dlx` fanout to `q2` (so one publish can both reach `q2` and
/// dead-letter into it), `delayed` an `x-delayed-message` fanout to `q0` (S-SCHED-1).
pub fn setup() -> Vec<Op> {
    vec![
        Op::DeclareQueue {
            q: 0,
            durable: true,
            ttl_ms: None,
            dlx: false,
            max_length: None,
        },
        Op::DeclareQueue {
            q: 1,
            durable: true,
            ttl_ms: Some(2000),
            dlx: true,
            max_length: None,
        },
        Op::DeclareQueue {
            q: 2,
            durable: true,
            ttl_ms: None,
            dlx: false,
            max_length: Some(3),
        },
        Op::DeclareExchange {
            x: 0,
            kind: "direct",
            durable: true,
        },
        Op::DeclareExchange {
            x: 1,
            kind: "fanout",
            durable: true,
        },
        Op::DeclareExchange {
            x: 2,
            kind: "fanout",
            durable: true,
        },
        Op::Bind { q: 0, x: 0, key: 0 },
        Op::Bind { q: 0, x: 1, key: 1 },
        Op::Bind { q: 1, x: 1, key: 1 },
        Op::Bind { q: 2, x: 1, key: 1 },
        Op::Bind { q: 2, x: 2, key: 2 },
        Op::DeclareExchange {
            x: 3,
            kind: "fanout",
            durable: true,
        },
        Op::Bind { q: 0, x: 3, key: 0 },
    ]
}

/// A broker driven as the server drives it, with every event it produced.
pub struct Driver {
    pub broker: Broker,
    pub now_ms: u64,
    /// Delivery tags the channel holds unacked, oldest first.
    pub tags: Vec<u64>,
    /// Every event of every outcome, in order.
    pub events: Vec<Event>,
}

impl Driver {
    pub fn new() -> Self {
        let mut d = Self {
            broker: Broker::new(),
            now_ms: T0_MS,
            tags: Vec::new(),
            events: Vec::new(),
        };
        d.open_channel();
        d
    }

    fn open_channel(&mut self) {
        self.must(Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".into(),
        });
        self.must(Command::ChannelOpen { chan: CH });
    }

    fn must(&mut self, cmd: Command) {
        let o = self
            .broker
            .handle(cmd, self.now_ms)
            .expect("lifecycle command");
        self.take(&o);
    }

    /// Records what an outcome produced: events, and deliveries to our channel.
    fn take(&mut self, o: &Outcome) -> usize {
        self.events.extend(o.events.iter().cloned());
        for e in &o.effects {
            if let Effect::Deliver(d) = e
                && d.chan == CH
                && !self.consumer_no_ack(&d.consumer_tag)
            {
                self.tags.push(d.delivery_tag.0);
            }
        }
        if let Reply::GetOk(g) = &o.reply {
            self.tags.push(g.delivery_tag.0);
        }
        o.events.len()
    }

    fn consumer_no_ack(&self, tag: &str) -> bool {
        self.broker
            .consumers("/")
            .iter()
            .any(|c| c.consumer_tag == tag && c.no_ack)
    }

    /// Runs one command; a refusal closes the channel (or connection) and reopens it, as the
    /// server does. Returns the events it produced (all of them, also the closes').
    pub fn run(&mut self, cmd: Command) -> Vec<Event> {
        let before = self.events.len();
        let no_ack_get = matches!(cmd, Command::Get { no_ack: true, .. });
        match self.broker.handle(cmd, self.now_ms) {
            Ok(o) => {
                self.take(&o);
                if no_ack_get {
                    // A no-ack get holds nothing.
                    if let Reply::GetOk(_) = o.reply {
                        self.tags.pop();
                    }
                }
            }
            Err(err) => {
                self.tags.clear();
                let close = if err.kind.closes_connection() {
                    Command::ConnectionClose { conn: CH.conn }
                } else {
                    Command::ChannelClose { chan: CH }
                };
                self.must(close);
                if err.kind.closes_connection() {
                    self.open_channel();
                } else {
                    self.must(Command::ChannelOpen { chan: CH });
                }
            }
        }
        self.broker.check_invariants();
        self.events[before..].to_vec()
    }

    pub fn advance(&mut self, ms: u64) -> Vec<Event> {
        self.now_ms += ms;
        let o = self.broker.expire_due(self.now_ms);
        let before = self.events.len();
        self.take(&o);
        self.broker.check_invariants();
        self.events[before..].to_vec()
    }

    /// Applies one operation; returns the events it produced.
    pub fn apply(&mut self, op: &Op) -> Vec<Event> {
        match op {
            Op::Advance { ms } => return self.advance(u64::from(*ms)),
            Op::Ack { pick, multiple } => {
                let Some(&tag) = self.pick(*pick) else {
                    return Vec::new();
                };
                self.tags
                    .retain(|&t| if *multiple { t > tag } else { t != tag });
                return self.run(Command::Ack {
                    chan: CH,
                    delivery_tag: tag,
                    multiple: *multiple,
                });
            }
            Op::Reject { pick, requeue } => {
                let Some(&tag) = self.pick(*pick) else {
                    return Vec::new();
                };
                self.tags.retain(|&t| t != tag);
                return self.run(Command::Reject {
                    chan: CH,
                    delivery_tag: tag,
                    requeue: *requeue,
                });
            }
            Op::Recover => self.tags.clear(),
            Op::ChannelCycle => {
                self.tags.clear();
                let mut ev = self.run(Command::ChannelClose { chan: CH });
                ev.extend(self.run(Command::ChannelOpen { chan: CH }));
                return ev;
            }
            _ => {}
        }
        let cmd = command(op);
        self.run(cmd)
    }

    /// The held tag `pick` names (modulo how many are held).
    fn pick(&self, pick: usize) -> Option<&u64> {
        self.tags.get(pick.checked_rem(self.tags.len())?)
    }
}

fn table(pairs: Vec<(&str, Value)>) -> FieldTable {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The broker command for the operations that are plain commands.
#[expect(clippy::too_many_lines, reason = "one short arm per operation")]
fn command(op: &Op) -> Command {
    match op {
        Op::DeclareQueue {
            q,
            durable,
            ttl_ms,
            dlx,
            max_length,
        } => {
            let mut a = Vec::new();
            if let Some(t) = ttl_ms {
                a.push(("x-message-ttl", Value::U32(*t)));
            }
            if *dlx {
                a.push(("x-dead-letter-exchange", Value::long_str("dlx")));
            }
            if let Some(m) = max_length {
                a.push(("x-max-length", Value::I32(i32::from(*m))));
            }
            Command::QueueDeclare(QueueDeclare {
                vhost: "/".into(),
                queue: queue_name(*q),
                passive: false,
                durable: *durable,
                exclusive: false,
                auto_delete: false,
                arguments: table(a),
                owner: Some(CH.conn),
            })
        }
        Op::DeclareExchange { x, kind, durable } => {
            // The last exchange is an `x-delayed-message` one routing as `kind` (S-SCHED-1).
            let delayed = *x == EXCHANGES.len() - 1;
            Command::ExchangeDeclare(ExchangeDeclare {
                vhost: "/".into(),
                exchange: EXCHANGES[*x].into(),
                kind: if delayed { "x-delayed-message" } else { kind }.into(),
                passive: false,
                durable: *durable,
                auto_delete: false,
                internal: false,
                arguments: if delayed {
                    table(vec![("x-delayed-type", Value::long_str(*kind))])
                } else {
                    FieldTable::new()
                },
            })
        }
        Op::Bind { q, x, key } => Command::QueueBind {
            vhost: "/".into(),
            queue: queue_name(*q),
            exchange: EXCHANGES[*x].into(),
            routing_key: queue_name(*key),
            arguments: FieldTable::new(),
            bind: true,
            owner: Some(CH.conn),
        },
        Op::Publish {
            exchange,
            key,
            persistent,
            expiration_ms,
            delay_ms,
            body_len,
        } => Command::Publish(Publish {
            vhost: "/".into(),
            exchange: exchange.map_or(String::new(), |x| EXCHANGES[x].to_owned()),
            routing_key: queue_name(*key),
            mandatory: false,
            properties: Properties {
                delivery_mode: Some(if *persistent { 2 } else { 1 }),
                expiration: expiration_ms.map(|e| e.to_string()),
                headers: delay_ms.map(|d| table(vec![("x-delay", Value::I64(i64::from(d)))])),
                ..Properties::default()
            },
            body: Bytes::from(vec![0xab; *body_len]),
        }),
        Op::Get { q, no_ack } => Command::Get {
            chan: CH,
            queue: queue_name(*q),
            no_ack: *no_ack,
        },
        Op::Consume { q, prefetch } => Command::Consume {
            chan: CH,
            queue: queue_name(*q),
            consumer_tag: format!("c{q}-{prefetch}"),
            no_ack: false,
            exclusive: false,
            arguments: wharf_broker::FieldTable::new(),
        },
        Op::Cancel { q } => Command::Cancel {
            chan: CH,
            consumer_tag: format!("c{q}-0"),
        },
        Op::Purge { q } => Command::QueuePurge {
            vhost: "/".into(),
            queue: queue_name(*q),
            owner: Some(CH.conn),
        },
        Op::DeleteQueue { q } => Command::QueueDelete {
            vhost: "/".into(),
            queue: queue_name(*q),
            if_unused: false,
            if_empty: false,
            owner: Some(CH.conn),
        },
        Op::DeleteExchange { x } => Command::ExchangeDelete {
            vhost: "/".into(),
            exchange: EXCHANGES[*x].into(),
            if_unused: false,
        },
        Op::PolicySet {
            pattern,
            ttl_ms,
            max_length,
        } => {
            let mut def = Vec::new();
            if let Some(t) = ttl_ms {
                def.push(format!("\"message-ttl\": {t}"));
            }
            if let Some(m) = max_length {
                def.push(format!("\"max-length\": {m}"));
            }
            if def.is_empty() {
                def.push("\"dead-letter-exchange\": \"dlx\"".to_owned());
            }
            Command::PolicySet {
                vhost: "/".into(),
                policy: PolicySpec {
                    name: "p".into(),
                    pattern: format!("^q{pattern}$"),
                    apply_to: ApplyTo::Queues,
                    priority: 0,
                    definition: format!("{{{}}}", def.join(", ")),
                },
                operator: false,
            }
        }
        Op::PolicyClear => Command::PolicyClear {
            vhost: "/".into(),
            name: "p".into(),
            operator: false,
        },
        Op::Recover => Command::Recover {
            chan: CH,
            requeue: true,
        },
        Op::Ack { .. } | Op::Reject { .. } | Op::Advance { .. } | Op::ChannelCycle => {
            unreachable!("handled by Driver::apply")
        }
    }
}

/// A live broker logging to a store on a simulated disk, as the server drives it.
pub struct Live {
    pub store: wharf_store::Store,
    pub driver: Driver,
    pub ticket: u64,
    pub paging: bool,
}

impl Live {
    /// A fresh store on `sim` with a fresh driven broker that reads stored messages back
    /// through it.
    pub fn open(sim: &SimStorage, paging: bool) -> Self {
        let (store, _, _) = open(sim).unwrap();
        let mut live = Live {
            store,
            driver: Driver::new(),
            ticket: 0,
            paging,
        };
        live.driver.broker.set_loader(live.store.loader());
        live
    }

    /// Runs `cmd`, logs its events and waits for them; with `paging`, leaves every durable
    /// body on disk at once (a memory budget of 0).
    pub fn step(&mut self, cmd: Command) {
        let events = self.driver.run(cmd);
        let t = log_for(&self.store, &mut self.driver.broker, &events).unwrap();
        self.ticket = self.ticket.max(t);
        self.store.wait_durable(self.ticket).unwrap();
        if self.paging {
            self.driver.broker.page_out(self.ticket, 0);
        }
    }

    pub fn settle(&mut self, requeue: Option<bool>) {
        let tag = *self.driver.tags.last().unwrap();
        self.step(match requeue {
            Some(requeue) => Command::Reject {
                chan: CH,
                delivery_tag: tag,
                requeue,
            },
            None => Command::Ack {
                chan: CH,
                delivery_tag: tag,
                multiple: false,
            },
        });
    }
}

/// A fresh broker rebuilt from `events` with `Broker::apply` alone (no store).
pub fn replay(events: &[Event]) -> Broker {
    let mut b = Broker::new();
    for e in events {
        b.apply(e).expect("the model replays its own events");
    }
    b
}

/// Logs `events` and returns the ticket (0 when there were none). Where the messages' records
/// went is not handed to any broker: for tests that never page content out.
pub fn log(store: &Store, events: &[Event]) -> Result<Ticket, StoreError> {
    Ok(store.log(events, &mut Vec::new())?.unwrap_or(0))
}

/// Logs `events` as the server does: where the messages' records went is handed to `broker`,
/// which may then leave their content on disk once durable (`Broker::page_out`).
pub fn log_for(store: &Store, broker: &mut Broker, events: &[Event]) -> Result<Ticket, StoreError> {
    let mut logged = Vec::new();
    let ticket = store.log(events, &mut logged)?.unwrap_or(0);
    broker.messages_logged(&logged);
    Ok(ticket)
}
