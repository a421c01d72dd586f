//! Read-only queries for management and tests: queues, exchanges, bindings, policies,
//! consumers, ready messages, vhost names, dead-letter drops.

use std::sync::Arc;

use super::Broker;
use crate::args::priority_lanes;
use crate::types::{
    BindingInfo, ConsumerInfo, ExchangeInfo, ExchangeKind, Message, PolicyInfo, QueueInfo, Totals,
};

impl Broker {
    /// Messages dropped because their dead-letter exchange did not exist (S-DLX-4).
    pub fn dead_letter_dropped(&self) -> u64 {
        self.dead_letter_dropped
    }

    /// Messages acknowledged (`basic.ack`) out of quorum queues since start; the rest of the
    /// acks the server counts were of classic queues.
    pub fn acked_quorum(&self) -> u64 {
        self.acked_quorum
    }

    /// The type of one queue, if it exists (a lookup, no copy).
    pub fn queue_kind(&self, vhost: &str, queue: &str) -> Option<crate::args::QueueKind> {
        let id = self.vhosts.get(vhost)?.queues.get(queue)?;
        self.queues.get(id).map(|q| q.eff.kind())
    }

    /// The queues a publish to `exchange` with `routing_key` (and the `CC`/`BCC` keys of
    /// `headers`) would enter now, by name; empty when the vhost or exchange is unknown. A
    /// query: nothing changes (a cluster member asks it of a group's committed state to learn
    /// whether a publish would reach a queue led elsewhere, S-CLU-11).
    pub fn routed_queue_names(
        &self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        headers: Option<&crate::value::FieldTable>,
    ) -> Vec<String> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        let Some(&xid) = v.exchanges.get(exchange) else {
            return Vec::new();
        };
        let keys = super::publish::routing_keys(routing_key, headers);
        self.route(v, xid, &keys, headers)
            .iter()
            .filter_map(|q| self.queues.get(q).map(|q| q.name.to_string()))
            .collect()
    }

    /// Counts over every vhost, in one walk over the queues that copies nothing (for the
    /// overview and the aggregated metrics, polled often: no listing per poll).
    pub fn totals(&self) -> Totals {
        count_queues(self.exchanges.len(), self.queues.values())
    }

    /// Counts over the queues of `vhost` (as [`Broker::totals`] over one vhost; `exchanges`
    /// counts the vhost's exchanges), copying nothing.
    pub fn totals_in(&self, vhost: &str) -> Totals {
        let Some(v) = self.vhosts.get(vhost) else {
            return Totals::default();
        };
        let queues = v.queues.values().filter_map(|id| self.queues.get(id));
        count_queues(v.exchanges.len(), queues)
    }

    /// Queues of `vhost`, by name.
    pub fn queues(&self, vhost: &str) -> Vec<QueueInfo> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        v.queues
            .values()
            .filter_map(|id| self.queues.get(id))
            .map(queue_info)
            .collect()
    }

    /// One queue of `vhost`, as [`Broker::queues`] lists it (a lookup: a queue's page polls
    /// it).
    pub fn queue(&self, vhost: &str, name: &str) -> Option<QueueInfo> {
        self.queue_named(vhost, name).map(queue_info)
    }

    /// The names of the queues of `vhost`, in order (the default exchange's implicit
    /// bindings), copying nothing else.
    pub fn queue_names(&self, vhost: &str) -> Vec<String> {
        self.vhosts
            .get(vhost)
            .map(|v| v.queues.keys().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    /// Exchanges of `vhost`, by name.
    pub fn exchanges(&self, vhost: &str) -> Vec<ExchangeInfo> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        v.exchanges
            .values()
            .filter_map(|id| self.exchanges.get(id))
            .map(|x| ExchangeInfo {
                vhost: x.vhost.to_string(),
                name: x.name.to_string(),
                kind: x.kind,
                durable: x.durable,
                auto_delete: x.auto_delete,
                internal: x.internal,
                arguments: x.arguments.clone(),
                stats: x.stats.clone(),
            })
            .collect()
    }

    /// The type of one exchange, if it exists (a lookup, no copy: the server asks it before
    /// checking topic permissions, S-TPERM-2).
    pub fn exchange_kind(&self, vhost: &str, exchange: &str) -> Option<ExchangeKind> {
        let id = self.vhosts.get(vhost)?.exchanges.get(exchange)?;
        self.exchanges.get(id).map(|x| x.kind)
    }

    /// Bindings of `vhost`, by source exchange then binding order.
    pub fn bindings(&self, vhost: &str) -> Vec<BindingInfo> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for x in v.exchanges.values().filter_map(|id| self.exchanges.get(id)) {
            for b in &x.bindings {
                if let Some((destination, _)) = self.dest_name(b.dest) {
                    out.push(BindingInfo {
                        source: x.name.to_string(),
                        destination,
                        routing_key: b.key.clone(),
                        arguments: b.args.clone(),
                    });
                }
            }
        }
        out
    }

    /// Policies and operator policies of `vhost`.
    pub fn policies(&self, vhost: &str) -> Vec<PolicyInfo> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        let normal = v.policies.values().map(|p| (p, false));
        let op = v.operator_policies.values().map(|p| (p, true));
        normal
            .chain(op)
            .map(|(p, operator)| PolicyInfo {
                vhost: vhost.to_owned(),
                policy: p.spec.clone(),
                operator,
            })
            .collect()
    }

    /// Consumers of `vhost`.
    pub fn consumers(&self, vhost: &str) -> Vec<ConsumerInfo> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        v.queues
            .values()
            .filter_map(|id| self.queues.get(id))
            .flat_map(|q| {
                q.consumers.iter().map(|c| {
                    // S-CONS-7: RabbitMQ's words for who receives.
                    let (active, activity_status) = match q.active {
                        _ if !q.single_active() => (true, "up"),
                        Some(s) if s == c.serial => (true, "single_active"),
                        _ => (false, "waiting"),
                    };
                    ConsumerInfo {
                        chan: c.chan,
                        consumer_tag: c.tag.to_string(),
                        queue: q.name.to_string(),
                        no_ack: c.no_ack,
                        exclusive: c.exclusive,
                        prefetch_count: c.prefetch,
                        unacked: c.unacked,
                        arguments: c.arguments.clone(),
                        active,
                        activity_status,
                    }
                })
            })
            .collect()
    }

    /// The ready messages of a queue in queue order, with their redelivered flags (for
    /// management "peek" and tests); empty if there is no such queue.
    pub fn ready_messages(&self, vhost: &str, queue: &str) -> Vec<(Arc<Message>, bool)> {
        self.peek_messages(vhost, queue, usize::MAX)
    }

    /// The first `limit` ready messages of a queue, as [`Broker::ready_messages`]; stored
    /// messages are read back (one that cannot be is left out and logged by the loader's
    /// caller when delivered).
    pub fn peek_messages(
        &self,
        vhost: &str,
        queue: &str,
        limit: usize,
    ) -> Vec<(Arc<Message>, bool)> {
        let Some(q) = self
            .vhosts
            .get(vhost)
            .and_then(|v| v.queues.get(queue))
            .and_then(|id| self.queues.get(id))
        else {
            return Vec::new();
        };
        q.ready
            .iter()
            .filter_map(|(m, e)| Some((self.read(m).ok()?, e.redelivered)))
            .take(limit)
            .collect()
    }

    /// Virtual host names.
    pub fn vhost_names(&self) -> Vec<String> {
        self.vhosts.keys().cloned().collect()
    }
}

/// [`Totals`] of `queues`, with `exchanges` exchanges: one walk that copies nothing.
fn count_queues<'a>(
    exchanges: usize,
    queues: impl Iterator<Item = &'a super::state::Queue>,
) -> Totals {
    let mut t = Totals {
        exchanges: exchanges as u64,
        ..Totals::default()
    };
    for q in queues {
        t.queues += 1;
        t.ready += q.ready.len() as u64;
        t.ready_bytes += q.ready.bytes();
        t.unacked += q.unacked;
        t.consumers += q.consumers.len() as u64;
    }
    t
}

/// A queue as the management API lists it: copies of its names and arguments and its
/// counters, nothing per message.
fn queue_info(q: &super::state::Queue) -> QueueInfo {
    QueueInfo {
        vhost: q.vhost.to_string(),
        name: q.name.to_string(),
        durable: q.durable,
        exclusive_owner: q.owner,
        auto_delete: q.auto_delete,
        arguments: q.arguments.clone(),
        policy: q.policy.clone(),
        operator_policy: q.operator_policy.clone(),
        ready: u64::try_from(q.ready.len()).unwrap_or(u64::MAX),
        unacked: q.unacked,
        ready_bytes: q.ready.bytes(),
        unacked_bytes: q.unacked_bytes,
        consumers: u32::try_from(q.consumers.len()).unwrap_or(u32::MAX),
        dead_letter_held: u64::try_from(q.held.len()).unwrap_or(u64::MAX),
        dead_letter_held_bytes: q.held.bytes(),
        kind: q.eff.kind(),
        max_priority: priority_lanes(q.args.max_priority),
        stats: q.stats,
    }
}
