//! Shared helpers for the broker tests: a broker with one connection and channel, an
//! explicit clock (`now`), and short builders for commands. Invariants are checked after
//! every step.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use bytes::Bytes;
use wharf_broker::ApplyTo;
use wharf_broker::{
    Broker, BrokerError, ChanRef, Command, Delivery, Effect, Event, ExchangeDeclare, FieldTable,
    GetOk, Outcome, PolicySpec, Properties, Publish, QueueDeclare, QueueInfo, Reply, Value,
};

pub const CH: ChanRef = ChanRef {
    conn: wharf_broker::ConnId(1),
    channel: wharf_broker::ChannelId(1),
};

pub struct H {
    pub b: Broker,
    pub now: u64,
    pub events: Vec<Event>,
}

pub fn args(pairs: &[(&str, Value)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in pairs {
        t.insert(*k, v.clone());
    }
    t
}

pub fn s(v: &str) -> Value {
    Value::long_str(v)
}

pub fn props_ttl(ttl: &str) -> Properties {
    Properties {
        expiration: Some(ttl.to_owned()),
        ..Properties::default()
    }
}

pub fn persistent() -> Properties {
    Properties {
        delivery_mode: Some(2),
        ..Properties::default()
    }
}

pub fn header(p: &Properties, key: &str) -> Option<Value> {
    p.headers.as_ref().and_then(|h| h.get(key)).cloned()
}

impl H {
    pub fn new() -> Self {
        let mut h = Self {
            b: Broker::new(),
            now: 1_000_000,
            events: Vec::new(),
        };
        h.ok(Command::ConnectionOpen {
            conn: CH.conn,
            vhost: "/".into(),
        });
        h.ok(Command::ChannelOpen { chan: CH });
        h
    }

    pub fn try_cmd(&mut self, cmd: Command) -> Result<Outcome, BrokerError> {
        let r = self.b.handle(cmd, self.now);
        self.b.check_invariants();
        if let Ok(o) = &r {
            self.events.extend(o.events.iter().cloned());
        }
        r
    }

    pub fn ok(&mut self, cmd: Command) -> Outcome {
        self.try_cmd(cmd).expect("command refused")
    }

    pub fn err(&mut self, cmd: Command) -> BrokerError {
        self.try_cmd(cmd).expect_err("command accepted")
    }

    pub fn advance_to(&mut self, now: u64) -> Outcome {
        assert!(now >= self.now);
        self.now = now;
        let o = self.b.expire_due(now);
        self.b.check_invariants();
        self.events.extend(o.events.iter().cloned());
        o
    }

    pub fn advance(&mut self, ms: u64) -> Outcome {
        self.advance_to(self.now + ms)
    }

    pub fn queue_cmd(name: &str, durable: bool, a: FieldTable) -> Command {
        Command::QueueDeclare(QueueDeclare {
            vhost: "/".into(),
            queue: name.into(),
            passive: false,
            durable,
            exclusive: false,
            auto_delete: false,
            arguments: a,
            owner: Some(CH.conn),
        })
    }

    pub fn queue(&mut self, name: &str, a: &[(&str, Value)]) -> Outcome {
        self.ok(Self::queue_cmd(name, false, args(a)))
    }

    pub fn durable_queue(&mut self, name: &str, a: &[(&str, Value)]) -> Outcome {
        self.ok(Self::queue_cmd(name, true, args(a)))
    }

    pub fn exchange(&mut self, name: &str, kind: &str, durable: bool, a: FieldTable) -> Outcome {
        self.ok(Command::ExchangeDeclare(ExchangeDeclare {
            vhost: "/".into(),
            exchange: name.into(),
            kind: kind.into(),
            passive: false,
            durable,
            auto_delete: false,
            internal: false,
            arguments: a,
        }))
    }

    pub fn bind(&mut self, queue: &str, exchange: &str, key: &str) -> Outcome {
        self.ok(Command::QueueBind {
            vhost: "/".into(),
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: key.into(),
            arguments: FieldTable::new(),
            bind: true,
            owner: Some(CH.conn),
        })
    }

    pub fn publish_cmd(exchange: &str, key: &str, p: Properties, body: &'static [u8]) -> Command {
        Command::Publish(Publish {
            vhost: "/".into(),
            exchange: exchange.into(),
            routing_key: key.into(),
            mandatory: false,
            properties: p,
            body: Bytes::from_static(body),
        })
    }

    /// Publishes to the default exchange with routing key `queue`.
    pub fn send(&mut self, queue: &str, p: Properties) -> Outcome {
        self.ok(Self::publish_cmd("", queue, p, b"body"))
    }

    pub fn get(&mut self, queue: &str, no_ack: bool) -> Option<GetOk> {
        match self
            .ok(Command::Get {
                chan: CH,
                queue: queue.into(),
                no_ack,
            })
            .reply
        {
            Reply::GetOk(g) => Some(g),
            Reply::GetEmpty => None,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    pub fn consume(&mut self, queue: &str, tag: &str, no_ack: bool) -> Outcome {
        self.ok(Command::Consume {
            chan: CH,
            queue: queue.into(),
            consumer_tag: tag.into(),
            no_ack,
            exclusive: false,
            arguments: wharf_broker::FieldTable::new(),
        })
    }

    pub fn ack(&mut self, tag: u64, multiple: bool) -> Outcome {
        self.ok(Command::Ack {
            chan: CH,
            delivery_tag: tag,
            multiple,
        })
    }

    pub fn reject(&mut self, tag: u64, requeue: bool) -> Outcome {
        self.ok(Command::Reject {
            chan: CH,
            delivery_tag: tag,
            requeue,
        })
    }

    pub fn info(&self, queue: &str) -> Option<QueueInfo> {
        self.b.queues("/").into_iter().find(|q| q.name == queue)
    }

    pub fn ready(&self, queue: &str) -> u64 {
        self.info(queue).map_or(0, |q| q.ready)
    }

    pub fn unacked(&self, queue: &str) -> u64 {
        self.info(queue).map_or(0, |q| q.unacked)
    }

    pub fn policy(
        &mut self,
        name: &str,
        pattern: &str,
        def: &str,
        priority: i32,
        operator: bool,
    ) -> Result<Outcome, BrokerError> {
        self.try_cmd(Command::PolicySet {
            vhost: "/".into(),
            policy: PolicySpec {
                name: name.into(),
                pattern: pattern.into(),
                apply_to: ApplyTo::Queues,
                priority,
                definition: def.into(),
            },
            operator,
        })
    }

    /// Rebuilds a fresh broker from every event seen so far.
    pub fn replay(&self) -> Broker {
        let mut b = Broker::new();
        for e in &self.events {
            b.apply(e).expect("replay");
            b.check_invariants();
        }
        b
    }
}

pub fn deliveries(o: &Outcome) -> Vec<Delivery> {
    o.deliveries().cloned().collect()
}

pub fn deaths(o: &Outcome) -> Vec<(String, wharf_broker::DeathReason, wharf_broker::DeathFate)> {
    o.effects
        .iter()
        .filter_map(|e| match e {
            Effect::MessageDied {
                queue,
                reason,
                fate,
                ..
            } => Some((queue.clone(), *reason, *fate)),
            _ => None,
        })
        .collect()
}
