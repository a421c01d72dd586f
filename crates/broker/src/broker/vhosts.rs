//! Virtual hosts: adding one (with its predeclared exchanges) and deleting one with
//! everything in it (connections, queues, exchanges, scheduled messages, permissions).

use std::collections::BTreeSet;

use super::Broker;
use super::state::{ExchangeId, QueueId, Timer, Vhost};
use crate::types::{Command, ConnId, Event, ExchangeKind, MessageId, Outcome, QueueDeletedReason};
use crate::value::FieldTable;

/// The exchanges every vhost has (RabbitMQ's predeclared set, without `amq.rabbitmq.trace`).
const PREDECLARED: [(&str, ExchangeKind); 6] = [
    ("", ExchangeKind::Direct),
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

impl Broker {
    /// `VhostAdd` / `VhostDelete` (both idempotent; logged only when something changed).
    pub(super) fn vhost_command(&mut self, cmd: Command, now: u64, out: &mut Outcome) {
        match cmd {
            Command::VhostAdd { vhost } => {
                if !self.vhosts.contains_key(&vhost) {
                    self.add_vhost(&vhost);
                    out.events.push(Event::VhostAdded { vhost });
                }
            }
            Command::VhostDelete { vhost } => {
                if self.vhosts.contains_key(&vhost) {
                    self.delete_vhost(&vhost, now, out);
                    out.events.push(Event::VhostDeleted { vhost });
                }
            }
            other => unreachable!("not a vhost command: {other:?}"),
        }
    }

    pub(super) fn add_vhost(&mut self, name: &str) {
        if self.vhosts.contains_key(name) {
            return;
        }
        self.vhosts.insert(name.to_owned(), Vhost::default());
        for (x, kind) in PREDECLARED {
            self.create_exchange(name, x, kind, true, false, false, FieldTable::new());
        }
    }

    pub(super) fn delete_vhost(&mut self, name: &str, now: u64, out: &mut Outcome) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.vhost == name)
            .map(|(id, _)| *id)
            .collect();
        for c in conns {
            self.close_connection(c, now, out);
        }
        let Some(v) = self.vhosts.get(name) else {
            return;
        };
        let queues: Vec<QueueId> = v.queues.values().copied().collect();
        for q in queues {
            self.delete_queue(q, QueueDeletedReason::Deleted, false, now, out);
        }
        let xs: Vec<ExchangeId> = self
            .vhosts
            .get(name)
            .map(|v| v.exchanges.values().copied().collect())
            .unwrap_or_default();
        for x in xs {
            self.exchanges.remove(&x);
        }
        self.scheduled.retain(|_, s| s.vhost != name);
        let sched: BTreeSet<MessageId> = self.scheduled.keys().copied().collect();
        self.timers
            .retain(|(_, t)| !matches!(t, Timer::Scheduled(id) if !sched.contains(id)));
        self.vhosts.remove(name);
        self.forget_vhost_permissions(name);
    }
}
