//! The management API's requests (`crate::admin`): commands applied as an operator (answered
//! once durable), queries against the broker's state, taking messages, and the connection and
//! channel listings.

use std::collections::HashMap;

use super::ConnState;
use super::{Core, TICKET_THIS_BATCH};
use crate::admin::{
    AdminDone, AdminRequest, AdminView, ChannelInfo, ChannelStats, ConnectionCounts,
    ConnectionInfo, ConnectionTraffic, Connections,
};
use wharf_broker::{BrokerError, ChanRef, Command, GetOk, Reply};
use wharf_store::Store;

impl Core {
    pub(super) fn admin(&mut self, req: AdminRequest) {
        match req {
            AdminRequest::Command { cmd, done } => match self
                .admin_refusal(&cmd)
                .map_or_else(|| self.broker.handle(*cmd, self.now()), Err)
            {
                Ok(mut out) => {
                    let reply = std::mem::take(&mut out.reply);
                    let durable = !out.events.is_empty();
                    self.apply_outcome(out, None);
                    // Users, permissions and vhosts may have changed: connections see the
                    // new definitions from their next operation on (the generation moves).
                    self.refresh_access();
                    self.admin_answer(AdminDone::Command(done, reply), durable);
                }
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            },
            AdminRequest::Take {
                vhost,
                queue,
                count,
                done,
            } => match self.admin_take(&vhost, &queue, count) {
                Ok((taken, durable)) => self.admin_answer(AdminDone::Take(done, taken), durable),
                Err(e) => {
                    let _ = done.send(Err(e));
                }
            },
            AdminRequest::Query(query) => {
                let view = AdminView {
                    broker: &self.broker,
                    connections: &ConnTable {
                        conns: &self.conns,
                        broker: &self.broker,
                    },
                    counters: self.counters,
                    now_ms: self.now(),
                    sync: self.store.as_ref().map(Store::sync_stats),
                    timings: self.timings.snapshot(),
                };
                query(&view);
            }
            AdminRequest::CloseConnection { id, reason, done } => {
                let open = self.conns.contains_key(&id);
                let close = crate::convert::Close {
                    code: wharf_protocol::reply_code::CONNECTION_FORCED,
                    text: format!("CONNECTION_FORCED - {reason}"),
                    connection: true,
                };
                self.close_connection(id, &close, crate::methods::MethodId::NONE);
                let _ = done.send(open);
            }
        }
    }

    /// Answers now when nothing was logged, else once this batch's records are durable.
    pub(super) fn admin_answer(&mut self, answer: AdminDone, durable: bool) {
        if durable || !self.admin_waiting.is_empty() {
            // Behind earlier durable answers too, so answers keep their order.
            let ticket = if durable { TICKET_THIS_BATCH } else { 0 };
            self.admin_waiting.push_back((ticket, answer));
        } else {
            answer.send();
        }
    }

    /// `basic.get` with `no_ack` on a private connection and channel (the id no client gets:
    /// the accept loop counts up from 1), closed again before returning.
    pub(super) fn admin_take(
        &mut self,
        vhost: &str,
        queue: &str,
        count: u32,
    ) -> Result<(Vec<GetOk>, bool), BrokerError> {
        const ADMIN_CONN: u64 = u64::MAX;
        let now = self.now();
        let conn = wharf_broker::ConnId(ADMIN_CONN);
        let chan = ChanRef::new(ADMIN_CONN, 1);
        let opened = self.broker.handle(
            Command::ConnectionOpen {
                conn,
                vhost: vhost.to_owned(),
            },
            now,
        )?;
        self.apply_outcome(opened, None);
        let mut result = self
            .broker
            .handle(Command::ChannelOpen { chan }, now)
            .map(|out| self.apply_outcome(out, None));
        let mut taken = Vec::new();
        let mut durable = false;
        while result.is_ok() && taken.len() < count as usize {
            let get = Command::Get {
                chan,
                queue: queue.to_owned(),
                no_ack: true,
            };
            match self.broker.handle(get, now) {
                Ok(mut out) => {
                    durable |= !out.events.is_empty();
                    let reply = std::mem::take(&mut out.reply);
                    self.apply_outcome(out, None);
                    match reply {
                        Reply::GetOk(g) => {
                            // The management API's get acks at once: a get with auto-ack.
                            let quorum = g.queue_kind == wharf_broker::QueueKind::Quorum;
                            self.counters.get(true, g.redelivered, quorum);
                            taken.push(g);
                        }
                        _ => break,
                    }
                }
                Err(e) => result = Err(e),
            }
        }
        if let Ok(out) = self.broker.handle(Command::ConnectionClose { conn }, now) {
            durable |= !out.events.is_empty();
            self.apply_outcome(out, None);
        }
        result.map(|()| (taken, durable))
    }
}

/// The broker task's connection table as a query sees it: listed only when asked (a listing
/// copies every connection's properties; the overview and the metrics only count).
struct ConnTable<'a> {
    conns: &'a HashMap<u64, ConnState>,
    broker: &'a wharf_broker::Broker,
}

impl ConnTable<'_> {
    /// Consumers per channel, counted once for every vhost with a connection.
    fn consumers_per_channel(&self) -> HashMap<ChanRef, u64> {
        let mut consumers: HashMap<ChanRef, u64> = HashMap::new();
        let vhosts: std::collections::BTreeSet<&str> =
            self.conns.values().map(|c| c.vhost.as_str()).collect();
        for v in vhosts {
            for c in self.broker.consumers(v) {
                *consumers.entry(c.chan).or_default() += 1;
            }
        }
        consumers
    }

    /// A connection's open channels, by number, with their counts.
    fn channels(
        &self,
        id: u64,
        c: &ConnState,
        consumers: &HashMap<ChanRef, u64>,
    ) -> Vec<ChannelInfo> {
        let mut channels: Vec<ChannelInfo> = c
            .channels
            .iter()
            .filter(|(_, s)| !s.closing)
            .map(|(&number, s)| {
                let chan = ChanRef::new(id, number);
                ChannelInfo {
                    number,
                    confirm: s.confirm_next.is_some(),
                    transactional: s.tx.is_some(),
                    publishing: s.publishing,
                    stats: ChannelStats {
                        unacked: u64::try_from(self.broker.channel_unacked(chan))
                            .unwrap_or(u64::MAX),
                        consumers: consumers.get(&chan).copied().unwrap_or(0),
                        ..s.stats
                    },
                }
            })
            .collect();
        channels.sort_by_key(|ch| ch.number);
        channels
    }

    /// The connections by id.
    fn by_id(&self) -> Vec<(u64, &ConnState)> {
        let mut conns: Vec<(u64, &ConnState)> = self.conns.iter().map(|(&id, c)| (id, c)).collect();
        conns.sort_by_key(|&(id, _)| id);
        conns
    }
}

impl Connections for ConnTable<'_> {
    fn list(&self) -> Vec<ConnectionInfo> {
        let consumers = self.consumers_per_channel();
        self.by_id()
            .into_iter()
            .map(|(id, c)| ConnectionInfo {
                id,
                vhost: c.vhost.clone(),
                user: c.user.clone(),
                peer: c.peer,
                opened_at_ms: c.opened_at_ms,
                frame_max: c.frame_max,
                throttled: c.throttled,
                blocked: c.outbox.is_blocked(),
                flow: c.outbox.in_flow(),
                client_properties: c.client_properties.clone(),
                channels: self.channels(id, c, &consumers),
                traffic: c.outbox.traffic(),
            })
            .collect()
    }

    fn traffic(&self) -> Vec<ConnectionTraffic> {
        let consumers = self.consumers_per_channel();
        self.by_id()
            .into_iter()
            .map(|(id, c)| ConnectionTraffic {
                peer: c.peer,
                traffic: c.outbox.traffic(),
                channels: self
                    .channels(id, c, &consumers)
                    .into_iter()
                    .map(|ch| (ch.number, ch.stats))
                    .collect(),
            })
            .collect()
    }

    fn counts(&self) -> ConnectionCounts {
        let mut counts = ConnectionCounts {
            connections: self.conns.len() as u64,
            ..ConnectionCounts::default()
        };
        for s in self.conns.values().flat_map(|c| c.channels.values()) {
            if !s.closing {
                counts.channels += 1;
                counts.publishing += u64::from(s.publishing);
            }
        }
        counts
    }
}
