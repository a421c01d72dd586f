//! The durable state, taken two ways: [`Broker::snapshot`] (the copy a checkpoint encodes:
//! definitions as events, messages as shared references) and [`Broker::durable_state`] (the
//! comparable view a restart must restore, for replay equivalence tests).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Broker;
use super::state::QueueId;
use crate::queue::deadline_of;
use crate::types::{
    BindingInfo, DurableMessage, DurableState, Event, ExchangeInfo, HeldDeath, MessageId,
    MessageRecord, MessageRef, QueueInfo, QueueSnapshot, Snapshot, SnapshotMessage,
};

impl Broker {
    /// Takes a [`Snapshot`] of the durable state: definitions as events, and every logged
    /// queue's persistent messages (unacked ones included, marked redelivered, S-DUR-6) as
    /// references (in memory or stored). Costs one reference per message, nothing per body byte.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot {
            next_message_id: self.next_message,
            definitions: self.definitions(),
            ..Snapshot::default()
        };
        let mut unacked: BTreeMap<QueueId, Vec<SnapshotMessage>> = BTreeMap::new();
        for u in self.channels.values().flat_map(|c| c.unacked.values()) {
            if u.taken.msg.is_persistent() {
                unacked.entry(u.queue).or_default().push(SnapshotMessage {
                    message: u.taken.msg.clone(),
                    delivery_count: u.taken.delivery_count,
                    redelivered: true,
                    held: None,
                });
            }
        }
        for (vhost, v) in &self.vhosts {
            for &qid in v.queues.values() {
                let q = &self.queues[&qid];
                if !q.logged() {
                    continue;
                }
                let ready = q
                    .ready
                    .iter()
                    .filter(|(m, _)| m.is_persistent())
                    .map(|(m, e)| SnapshotMessage {
                        message: m.clone(),
                        delivery_count: e.delivery_count,
                        redelivered: e.redelivered,
                        held: None,
                    });
                let held =
                    q.held
                        .iter()
                        .filter(|(t, _)| t.msg.is_persistent())
                        .map(|(t, death)| SnapshotMessage {
                            message: t.msg.clone(),
                            delivery_count: t.delivery_count,
                            redelivered: t.redelivered,
                            held: Some(death),
                        });
                // Sized once: a checkpoint of millions of messages must not double a vector
                // on the way (the snapshot is the checkpoint's peak memory).
                let mut listed = Vec::with_capacity(q.ready.len() + q.held.len());
                listed.extend(ready);
                listed.extend(held);
                // Listed by id, as a checkpoint holds them: a priority queue iterates lane by
                // lane (S-PRIO-6). A plain queue's list is sorted already, which the sort
                // sees in one pass.
                listed.sort_unstable_by_key(|m| m.message.id());
                let messages = match unacked.remove(&qid) {
                    None => listed,
                    Some(held) => merge_by_id(listed, held),
                };
                s.queues.push(QueueSnapshot {
                    vhost: vhost.clone(),
                    queue: q.name.to_string(),
                    messages,
                });
            }
        }
        for sch in self.scheduled.values().filter(|sch| sch.durable) {
            s.scheduled.push(Event::Scheduled {
                vhost: sch.vhost.clone(),
                exchange: sch.exchange.clone(),
                message: MessageRecord {
                    message: Arc::clone(&sch.msg),
                },
            });
        }
        s
    }

    /// The definitions alone, as [`Broker::snapshot`] lists them (vhosts, exchanges, queues,
    /// bindings, policies, users, permissions), without a reference to any message: what a
    /// comparison of definitions needs (the cluster's `reconcile`), at a cost that does not
    /// grow with the messages queued.
    pub fn definitions(&self) -> Vec<Event> {
        let mut out = Vec::new();
        for vhost in Broker::new().vhost_names() {
            if !self.vhosts.contains_key(&vhost) {
                out.push(Event::VhostDeleted { vhost });
            }
        }
        for vhost in self.vhosts.keys() {
            out.push(Event::VhostAdded {
                vhost: vhost.clone(),
            });
            self.snapshot_definitions(vhost, &mut out);
        }
        self.snapshot_access(&mut out);
        out
    }

    /// The user and permission events, after every vhost (a permission names one).
    fn snapshot_access(&self, out: &mut Vec<Event>) {
        // A broker whose history defined users but holds none now must not get the default
        // user back at the next start: a deletion of no user keeps that fact
        // (`users_ever_defined`).
        for u in self.users() {
            out.push(Event::UserPut {
                name: u.name,
                password_hash: u.password_hash,
                tags: u.tags,
            });
        }
        if self.users_ever_defined() && self.access.users.is_empty() {
            out.push(Event::UserDeleted {
                name: String::new(),
            });
        }
        for p in self.permissions() {
            out.push(Event::PermissionSet {
                user: p.user,
                vhost: p.vhost,
                configure: p.configure,
                write: p.write,
                read: p.read,
            });
        }
        self.snapshot_topic_permissions(out);
    }

    /// The definition events of one vhost: durable exchanges, logged queues, policies, then
    /// the bindings between durable entities (both ends exist by then).
    fn snapshot_definitions(&self, vhost: &str, out: &mut Vec<Event>) {
        for x in self.exchanges(vhost).into_iter().filter(|x| x.durable) {
            out.push(Event::ExchangeDeclared {
                vhost: vhost.to_owned(),
                exchange: x.name,
                kind: x.kind,
                auto_delete: x.auto_delete,
                internal: x.internal,
                arguments: x.arguments,
            });
        }
        let v = &self.vhosts[vhost];
        for &qid in v.queues.values() {
            let q = &self.queues[&qid];
            if q.logged() {
                out.push(Event::QueueDeclared {
                    vhost: vhost.to_owned(),
                    queue: q.name.to_string(),
                    auto_delete: q.auto_delete,
                    arguments: q.arguments.clone(),
                });
            }
        }
        for p in self.policies(vhost) {
            out.push(Event::PolicySet {
                vhost: vhost.to_owned(),
                policy: p.policy,
                operator: p.operator,
            });
        }
        for x in v.exchanges.values().filter_map(|id| self.exchanges.get(id)) {
            if !x.durable {
                continue;
            }
            for b in &x.bindings {
                if let Some((destination, true)) = self.dest_name(b.dest) {
                    out.push(Event::Bound {
                        vhost: vhost.to_owned(),
                        source: x.name.to_string(),
                        destination,
                        routing_key: b.key.clone(),
                        arguments: b.args.clone(),
                    });
                }
            }
        }
    }

    /// The durable view of the model: what a restart must bring back. Unacked persistent
    /// messages count as in their queue, delivered (S-DUR-6).
    pub fn durable_state(&self) -> DurableState {
        let mut s = DurableState {
            vhosts: self.vhost_names(),
            ..DurableState::default()
        };
        for vhost in &s.vhosts {
            // The message counts are not durable state (S-MGMT-8): left out.
            s.exchanges.extend(
                self.exchanges(vhost)
                    .into_iter()
                    .filter(|x| x.durable)
                    .map(|x| ExchangeInfo {
                        stats: crate::ExchangeStats::default(),
                        ..x
                    }),
            );
            let v = &self.vhosts[vhost];
            for x in v.exchanges.values().filter_map(|id| self.exchanges.get(id)) {
                if !x.durable {
                    continue;
                }
                for b in &x.bindings {
                    if let Some((destination, true)) = self.dest_name(b.dest) {
                        s.bindings.push((
                            vhost.clone(),
                            BindingInfo {
                                source: x.name.to_string(),
                                destination,
                                routing_key: b.key.clone(),
                                arguments: b.args.clone(),
                            },
                        ));
                    }
                }
            }
            s.policies.extend(self.policies(vhost));
            for info in self.queues(vhost) {
                let qid = v.queues[&info.name];
                let q = &self.queues[&qid];
                if !q.logged() {
                    continue;
                }
                let mut msgs: BTreeMap<MessageId, DurableMessage> = BTreeMap::new();
                let ttl = q.ready.ttl_ms();
                let mut add = |m: &MessageRef,
                               count: u32,
                               redelivered: bool,
                               held: Option<HeldDeath>| {
                    if m.is_persistent() {
                        msgs.insert(
                            m.id(),
                            DurableMessage {
                                id: m.id(),
                                enqueued_at_ms: m.timing().0,
                                deadline_ms: held.is_none().then(|| deadline_of(m, ttl)).flatten(),
                                delivery_count: count,
                                redelivered,
                                held,
                            },
                        );
                    }
                };
                for (m, e) in q.ready.iter() {
                    add(m, e.delivery_count, e.redelivered, None);
                }
                for (t, death) in q.held.iter() {
                    add(&t.msg, t.delivery_count, t.redelivered, Some(death));
                }
                for u in self.channels.values().flat_map(|c| c.unacked.values()) {
                    if u.queue == qid {
                        add(&u.taken.msg, u.taken.delivery_count, true, None);
                    }
                }
                let info = QueueInfo {
                    ready: 0,
                    unacked: 0,
                    ready_bytes: 0,
                    unacked_bytes: 0,
                    consumers: 0,
                    dead_letter_held: 0,
                    dead_letter_held_bytes: 0,
                    stats: crate::QueueStats::default(),
                    ..info
                };
                s.queues.push((info, msgs.into_values().collect()));
            }
        }
        for (id, sch) in &self.scheduled {
            if sch.durable {
                s.scheduled.push((*id, sch.msg.enqueued_at_ms));
            }
        }
        s.users = self.users();
        s.permissions = self.permissions();
        s
    }
}

/// Merges two lists sorted by message id (ready and unacked messages of one queue; an id is
/// in at most one of them).
fn merge_by_id(a: Vec<SnapshotMessage>, b: Vec<SnapshotMessage>) -> Vec<SnapshotMessage> {
    let mut b = b;
    b.sort_unstable_by_key(|m| m.message.id());
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.message.id() < y.message.id(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
}
