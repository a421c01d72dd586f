//! Rebuilding the model from its own events (`apply`), the end of recovery (`recovered`),
//! the invariant walk, and the read-only queries (management listings, the durable view used
//! to prove replay equivalence). Must not depend on anything outside `broker`.

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::access::{PermissionInfo, UserInfo};
use crate::args::{parse_policy, parse_queue_args};
use crate::error::BrokerError;
use crate::model::{Broker, Dest, QueueId, Timer};
use crate::queue::deadline_of;
use crate::types::{
    BindingInfo, ConsumerInfo, DestName, Event, ExchangeInfo, MessageId, MessageLoader, MessageRef,
    Outcome, PolicyInfo, QueueDeletedReason, QueueInfo, StoredEvent,
};

/// One persistent message of a durable queue as the log knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableMessage {
    /// Its id.
    pub id: MessageId,
    /// Enqueue time (ms).
    pub enqueued_at_ms: u64,
    /// Deadline in this queue (ms), if any.
    pub deadline_ms: Option<u64>,
    /// Times it came back.
    pub delivery_count: u32,
    /// Delivered before (unacked ones count as delivered).
    pub redelivered: bool,
}

/// Everything that must survive a restart, in a comparable form (S-DUR-1/2/5).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DurableState {
    /// Vhost names.
    pub vhosts: Vec<String>,
    /// Durable exchanges.
    pub exchanges: Vec<ExchangeInfo>,
    /// Bindings between durable entities, per vhost.
    pub bindings: Vec<(String, BindingInfo)>,
    /// Durable queues with their persistent messages in queue order.
    pub queues: Vec<(QueueInfo, Vec<DurableMessage>)>,
    /// Policies.
    pub policies: Vec<PolicyInfo>,
    /// Durable scheduled messages: (id, due time).
    pub scheduled: Vec<(MessageId, u64)>,
    /// Users, by name.
    pub users: Vec<UserInfo>,
    /// Permissions, by (user, vhost).
    pub permissions: Vec<PermissionInfo>,
}

/// A copy of the durable state taken for a checkpoint: cheap to take in the broker task (the
/// messages are shared `Arc`s, not copied) and `Send`, so it can be encoded on another thread.
/// Replaying `definitions`, then `scheduled`, then every message into its queues (in id order,
/// which is queue order) rebuilds what replaying the log up to the snapshot would (S-DUR-1/2).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Events that declare the durable definitions, in an order `Broker::apply` accepts:
    /// vhosts a fresh broker has but this one deleted, vhosts, then per vhost its durable
    /// exchanges, logged queues, policies and bindings between durable entities.
    pub definitions: Vec<Event>,
    /// `Event::Scheduled` for every durable scheduled message (S-SCHED-1).
    pub scheduled: Vec<Event>,
    /// Every logged queue with its persistent messages (ready and unacked) in queue order.
    pub queues: Vec<QueueSnapshot>,
    /// The id the next new message gets (so ids are never reused across a checkpoint).
    pub next_message_id: u64,
}

/// The persistent messages of one logged queue, in queue (= id) order.
#[derive(Debug, Clone)]
pub struct QueueSnapshot {
    /// Virtual host.
    pub vhost: String,
    /// Queue name.
    pub queue: String,
    /// Its messages, ids strictly increasing.
    pub messages: Vec<SnapshotMessage>,
}

/// One persistent message in one queue, with the per-queue marks replay keeps.
#[derive(Debug, Clone)]
pub struct SnapshotMessage {
    /// The message (in memory, shared with every queue it is in; or its stored reference).
    pub message: MessageRef,
    /// Times it came back to this queue (x-delivery-count).
    pub delivery_count: u32,
    /// Delivered before; unacked messages count as delivered (S-DUR-6).
    pub redelivered: bool,
}

/// Where a restored message sits: one queue and its marks there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Queue name.
    pub queue: String,
    /// Times it came back to this queue.
    pub delivery_count: u32,
    /// Delivered before.
    pub redelivered: bool,
}

fn corrupt(what: &str) -> BrokerError {
    BrokerError::new(
        crate::error::ErrorKind::InternalError,
        format!("event does not fit the state: {what}"),
    )
}

impl Broker {
    /// Replays one logged event into the model: no delivery, no expiry, no timer fires (as
    /// nats's `recovering`); [`Broker::recovered`] ends the replay.
    ///
    /// # Errors
    /// The event names an entity the state lacks or carries invalid definitions: the log is
    /// not this broker's, or is damaged.
    pub fn apply(&mut self, event: &Event) -> Result<(), BrokerError> {
        let mut out = Outcome::default();
        let result = self.apply_inner(event, &mut out);
        self.rearm_dirty();
        result
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per event kind, each a few lines"
    )]
    fn apply_inner(&mut self, event: &Event, out: &mut Outcome) -> Result<(), BrokerError> {
        match event {
            Event::VhostAdded { vhost } => self.add_vhost(vhost),
            Event::VhostDeleted { vhost } => self.delete_vhost(vhost, 0, out),
            Event::ExchangeDeclared {
                vhost,
                exchange,
                kind,
                auto_delete,
                internal,
                arguments,
            } => {
                self.vhost(vhost)?;
                if !self.vhost(vhost)?.exchanges.contains_key(exchange) {
                    self.create_exchange(
                        vhost,
                        exchange,
                        *kind,
                        true,
                        *auto_delete,
                        *internal,
                        arguments.clone(),
                    );
                }
            }
            Event::ExchangeDeleted { vhost, exchange } => {
                if let Some(&id) = self.vhost(vhost)?.exchanges.get(exchange) {
                    self.delete_exchange(id, false, out);
                }
            }
            Event::QueueDeclared {
                vhost,
                queue,
                auto_delete,
                arguments,
            } => {
                let settings = parse_queue_args(vhost, queue, arguments)?;
                if !self.vhost(vhost)?.queues.contains_key(queue) {
                    self.create_queue(
                        vhost,
                        queue,
                        true,
                        None,
                        *auto_delete,
                        arguments.clone(),
                        settings,
                        0,
                    );
                }
            }
            Event::QueueDeleted { vhost, queue } => {
                if let Some(&id) = self.vhost(vhost)?.queues.get(queue) {
                    self.delete_queue(id, QueueDeletedReason::Deleted, false, 0, out);
                }
            }
            Event::Bound {
                vhost,
                source,
                destination,
                routing_key,
                arguments,
            }
            | Event::Unbound {
                vhost,
                source,
                destination,
                routing_key,
                arguments,
            } => {
                let bind = matches!(event, Event::Bound { .. });
                let v = self.vhost(vhost)?;
                let src = *v
                    .exchanges
                    .get(source)
                    .ok_or_else(|| corrupt("binding source"))?;
                let dest = match destination {
                    DestName::Queue(q) => v.queues.get(q).map(|&q| Dest::Queue(q)),
                    DestName::Exchange(x) => v.exchanges.get(x).map(|&x| Dest::Exchange(x)),
                }
                .ok_or_else(|| corrupt("binding destination"))?;
                self.set_binding(
                    vhost,
                    src,
                    dest,
                    routing_key.clone(),
                    arguments.clone(),
                    bind,
                    false,
                    out,
                );
            }
            Event::PolicySet {
                vhost,
                policy,
                operator,
            } => {
                self.vhost(vhost)?;
                let p = parse_policy(policy, *operator)?;
                self.install_policy(vhost, p, *operator);
                self.reapply_policies(vhost, false, 0, out);
            }
            Event::PolicyCleared {
                vhost,
                name,
                operator,
            } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    if *operator {
                        v.operator_policies.remove(name);
                    } else {
                        v.policies.remove(name);
                    }
                }
                self.reapply_policies(vhost, false, 0, out);
            }
            Event::Published {
                vhost,
                message,
                queues,
                scheduled,
            } => {
                let msg = MessageRef::Loaded(message.message.clone());
                self.replay_published(vhost, &msg, queues, *scheduled)?;
            }
            Event::Scheduled {
                vhost,
                exchange: _,
                message,
            } => {
                self.see_id(message.message.id);
                self.schedule(vhost.clone(), message.message.clone(), true);
            }
            Event::Unscheduled { id, .. } => self.unschedule(*id),
            Event::Settled {
                vhost, queue, ids, ..
            }
            | Event::Purged { vhost, queue, ids } => {
                for id in ids {
                    self.replay_remove(vhost, queue, *id);
                }
            }
            Event::Delivered { vhost, queue, ids } | Event::Returned { vhost, queue, ids } => {
                let returned = matches!(event, Event::Returned { .. });
                let Some(&qid) = self.vhost(vhost)?.queues.get(queue) else {
                    return Ok(());
                };
                let q = self.queues.get_mut(&qid).expect("vhost map is consistent");
                for id in ids {
                    if let Some(e) = q.ready.get_mut(*id) {
                        e.redelivered = true;
                        if returned {
                            e.delivery_count = e.delivery_count.saturating_add(1);
                        }
                    }
                }
            }
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            } => {
                let copy = message
                    .as_ref()
                    .map(|m| MessageRef::Loaded(m.message.clone()));
                self.replay_dead_lettered(vhost, from.as_deref(), *id, copy.as_ref(), targets)?;
            }
            Event::UserPut {
                name,
                password_hash,
                tags,
            } => self.apply_user_put(UserInfo {
                name: name.clone(),
                password_hash: password_hash.clone(),
                tags: tags.clone(),
            }),
            Event::UserDeleted { name } => self.apply_user_deleted(name),
            Event::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read,
            } => self.apply_permission_set(&PermissionInfo {
                user: user.clone(),
                vhost: vhost.clone(),
                configure: configure.clone(),
                write: write.clone(),
                read: read.clone(),
            })?,
            Event::PermissionCleared { user, vhost } => {
                self.access
                    .permissions
                    .remove(&(user.clone(), vhost.clone()));
            }
        }
        Ok(())
    }

    /// Restores one message of a checkpoint into its queues with its marks: the same as its
    /// `Published` followed by the deliveries and returns that gave it those marks. Messages
    /// must come in id order (queue order).
    ///
    /// # Errors
    /// A queue is unknown or the ids are out of order: the checkpoint does not fit.
    pub fn restore_message(
        &mut self,
        vhost: &str,
        message: &MessageRef,
        placements: &[Placement],
    ) -> Result<(), BrokerError> {
        self.see_id(message.id());
        for p in placements {
            self.replay_push_marked(
                vhost,
                &p.queue,
                message.clone(),
                p.delivery_count,
                p.redelivered,
            )?;
        }
        self.rearm_dirty();
        Ok(())
    }

    /// Applies a message event recovery read with the content left on disk: the same as
    /// [`Broker::apply`] of the whole event, with the messages held as stored references.
    ///
    /// # Errors
    /// As [`Broker::apply`].
    pub fn apply_stored(&mut self, event: &StoredEvent) -> Result<(), BrokerError> {
        match event {
            StoredEvent::Published {
                vhost,
                message,
                queues,
                scheduled,
            } => {
                self.replay_published(vhost, &MessageRef::Stored(*message), queues, *scheduled)?;
            }
            StoredEvent::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            } => {
                let copy = message.map(MessageRef::Stored);
                self.replay_dead_lettered(vhost, from.as_deref(), *id, copy.as_ref(), targets)?;
            }
        }
        self.rearm_dirty();
        Ok(())
    }

    /// A `Published` event: the message enters its queues (and ends its schedule).
    fn replay_published(
        &mut self,
        vhost: &str,
        msg: &MessageRef,
        queues: &[String],
        scheduled: Option<MessageId>,
    ) -> Result<(), BrokerError> {
        self.see_id(msg.id());
        if let Some(s) = scheduled {
            self.unschedule(s);
        }
        for name in queues {
            self.replay_push(vhost, name, msg.clone())?;
        }
        Ok(())
    }

    /// A `DeadLettered` event: out of the source queue, the copy into its targets (S-DLX-7).
    fn replay_dead_lettered(
        &mut self,
        vhost: &str,
        from: Option<&str>,
        id: MessageId,
        copy: Option<&MessageRef>,
        targets: &[String],
    ) -> Result<(), BrokerError> {
        if let Some(from) = from {
            self.replay_remove(vhost, from, id);
        }
        if let Some(m) = copy {
            self.see_id(m.id());
            for t in targets {
                self.replay_push(vhost, t, m.clone())?;
            }
        }
        Ok(())
    }

    /// Hands the broker the store's reader of stored messages (before `recovered`, which may
    /// dead-letter stored messages).
    pub fn set_loader(&mut self, loader: Arc<dyn MessageLoader>) {
        self.loader = Some(loader);
    }

    /// The first failure to read a stored message back, if any: the store is damaged and the
    /// server must stop (S-DUR-7). Nothing about that message was logged.
    pub fn storage_failure(&self) -> Option<&str> {
        self.storage_failure.as_deref()
    }

    /// Memory the content of queued messages held in memory takes (bodies plus about 512
    /// bytes each), over every queue.
    pub fn loaded_bytes(&self) -> u64 {
        self.loaded_total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps memory bounded (DESIGN "Memory"): when the content of queued messages in memory
    /// exceeds `budget` bytes, the oldest whose record is durable (Lsn at most `durable_lsn`)
    /// in logged queues are replaced by stored references until a quarter of the budget is
    /// free again. Returns the body bytes released from the queues (a message still held
    /// elsewhere, unacked or in another queue, is freed when the last holder lets go).
    pub fn page_out(&mut self, durable_lsn: u64, budget: u64) -> u64 {
        let loaded = self.loaded_bytes();
        if loaded <= budget {
            return 0;
        }
        let mut want = loaded - budget / 4 * 3;
        let mut freed = 0;
        for q in self.queues.values_mut().filter(|q| q.logged()) {
            if want == 0 {
                break;
            }
            let got = q.ready.page_out(durable_lsn, want);
            want = want.saturating_sub(got);
            freed += got;
        }
        freed
    }

    /// Raises the next message id to at least `next` (a checkpoint carries it, so that ids
    /// of messages settled before it are never handed out again).
    pub fn restore_next_message_id(&mut self, next: u64) {
        self.next_message = self.next_message.max(next);
    }

    /// Takes a [`Snapshot`] of the durable state: definitions as events, and every logged
    /// queue's persistent messages (unacked ones included, marked redelivered, S-DUR-6) as
    /// references (in memory or stored). Costs one reference per message, nothing per body byte.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot {
            next_message_id: self.next_message,
            ..Snapshot::default()
        };
        for vhost in Broker::new().vhost_names() {
            if !self.vhosts.contains_key(&vhost) {
                s.definitions.push(Event::VhostDeleted { vhost });
            }
        }
        let mut unacked: BTreeMap<QueueId, Vec<SnapshotMessage>> = BTreeMap::new();
        for u in self.channels.values().flat_map(|c| c.unacked.values()) {
            if u.taken.msg.is_persistent() {
                unacked.entry(u.queue).or_default().push(SnapshotMessage {
                    message: u.taken.msg.clone(),
                    delivery_count: u.taken.delivery_count,
                    redelivered: true,
                });
            }
        }
        for (vhost, v) in &self.vhosts {
            s.definitions.push(Event::VhostAdded {
                vhost: vhost.clone(),
            });
            self.snapshot_definitions(vhost, &mut s.definitions);
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
                    });
                // Sized once: a checkpoint of millions of messages must not double a vector
                // on the way (the snapshot is the checkpoint's peak memory).
                let mut listed = Vec::with_capacity(q.ready.len());
                listed.extend(ready);
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
        // Users and permissions after every vhost (a permission names one). A broker whose
        // history defined users but holds none now must not get the default user back at the
        // next start: a deletion of no user keeps that fact (`users_ever_defined`).
        for u in self.users() {
            s.definitions.push(Event::UserPut {
                name: u.name,
                password_hash: u.password_hash,
                tags: u.tags,
            });
        }
        if self.users_ever_defined() && self.access.users.is_empty() {
            s.definitions.push(Event::UserDeleted {
                name: String::new(),
            });
        }
        for p in self.permissions() {
            s.definitions.push(Event::PermissionSet {
                user: p.user,
                vhost: p.vhost,
                configure: p.configure,
                write: p.write,
                read: p.read,
            });
        }
        for sch in self.scheduled.values().filter(|sch| sch.durable) {
            s.scheduled.push(Event::Scheduled {
                vhost: sch.vhost.clone(),
                exchange: sch.exchange.clone(),
                message: crate::types::MessageRecord {
                    message: Arc::clone(&sch.msg),
                },
            });
        }
        s
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

    fn see_id(&mut self, id: MessageId) {
        self.next_message = self.next_message.max(id.0.saturating_add(1));
    }

    fn unschedule(&mut self, id: MessageId) {
        if let Some(s) = self.scheduled.remove(&id) {
            self.timers
                .remove(&(s.msg.enqueued_at_ms, Timer::Scheduled(id)));
        }
    }

    fn replay_push(
        &mut self,
        vhost: &str,
        queue: &str,
        msg: MessageRef,
    ) -> Result<(), BrokerError> {
        self.replay_push_marked(vhost, queue, msg, 0, false)
    }

    fn replay_push_marked(
        &mut self,
        vhost: &str,
        queue: &str,
        msg: MessageRef,
        delivery_count: u32,
        redelivered: bool,
    ) -> Result<(), BrokerError> {
        let qid = *self
            .vhost(vhost)?
            .queues
            .get(queue)
            .ok_or_else(|| corrupt("message for an unknown queue"))?;
        let q = self.queues.get_mut(&qid).expect("vhost map is consistent");
        // next_back, not last: replay must stay linear in the number of messages.
        if q.ready.front().is_some()
            && q.ready
                .iter()
                .next_back()
                .is_some_and(|(m, _)| m.id() >= msg.id())
        {
            return Err(corrupt("message ids out of order"));
        }
        q.ready.push_back(msg, delivery_count, redelivered);
        self.mark_dirty(qid);
        Ok(())
    }

    fn replay_remove(&mut self, vhost: &str, queue: &str, id: MessageId) {
        let Some(&qid) = self.vhosts.get(vhost).and_then(|v| v.queues.get(queue)) else {
            return;
        };
        if let Some(q) = self.queues.get_mut(&qid) {
            q.ready.remove(id);
        }
        self.mark_dirty(qid);
    }

    /// Ends recovery at `now_ms`: transient state is dropped (connections, channels,
    /// consumers, transient queues, exchanges and messages), unacked messages come back ready
    /// and redelivered (S-DUR-6), every lease restarts from now (S-QEXP-4), and what died
    /// while the broker was down expires now, before any consumer can see it (S-DUR-5).
    ///
    /// # Panics
    /// Only on a broken internal invariant (a bug).
    pub fn recovered(&mut self, now_ms: u64) -> Outcome {
        let mut out = Outcome::default();
        let chans: Vec<_> = self.channels.keys().copied().collect();
        for chan in chans {
            if let Some(ch) = self.channels.remove(&chan) {
                for (_, u) in ch.unacked {
                    self.unacked_released(&u, None);
                    if let Some(q) = self.queues.get_mut(&u.queue) {
                        q.ready.insert(u.taken.msg, u.taken.delivery_count, true);
                    }
                }
            }
        }
        self.conns.clear();
        let transient: Vec<_> = self
            .queues
            .values()
            .filter(|q| !q.logged())
            .map(|q| q.id)
            .collect();
        for q in transient {
            self.delete_queue(q, QueueDeletedReason::Deleted, false, now_ms, &mut out);
        }
        let transient_x: Vec<_> = self
            .exchanges
            .values()
            .filter(|x| !x.durable)
            .map(|x| x.id)
            .collect();
        for x in transient_x {
            self.delete_exchange(x, false, &mut out);
        }
        self.scheduled.retain(|_, s| s.durable);
        let live: std::collections::BTreeSet<MessageId> = self.scheduled.keys().copied().collect();
        self.timers
            .retain(|(_, t)| !matches!(t, Timer::Scheduled(id) if !live.contains(id)));
        let ids: Vec<_> = self.queues.keys().copied().collect();
        for qid in ids {
            let q = self.queues.get_mut(&qid).expect("listed above");
            q.consumers.clear();
            q.rr = 0;
            q.unacked = 0;
            q.last_used_ms = now_ms;
            let transient_msgs: Vec<MessageId> = q
                .ready
                .iter()
                .filter(|(m, _)| !m.is_persistent())
                .map(|(m, _)| m.id())
                .collect();
            for id in transient_msgs {
                q.ready.remove(id);
            }
            q.ready.shrink_to_fit();
            self.mark_dirty(qid);
        }
        self.rearm_dirty();
        let expired = self.expire_due(now_ms);
        out.events.extend(expired.events);
        out.effects.extend(expired.effects);
        out
    }

    /// Walks the whole structure and panics on a broken invariant (STYLE 3.1).
    ///
    /// # Panics
    /// When an invariant is broken: that is a bug in the broker.
    #[expect(clippy::too_many_lines, reason = "one flat walk over every structure")]
    pub fn check_invariants(&self) {
        self.check_access_invariants();
        assert_eq!(
            self.loaded_bytes(),
            self.queues
                .values()
                .map(|q| q.ready.loaded_bytes())
                .sum::<u64>(),
            "loaded bytes total"
        );
        let mut armed = 0usize;
        for (qid, q) in &self.queues {
            assert_eq!(*qid, q.id, "queue keyed under another id");
            q.ready.check_invariants();
            assert_eq!(
                q.ready.ttl_ms(),
                q.eff.message_ttl_ms,
                "deadline index built with a stale TTL"
            );
            assert!(!q.dirty, "queue {} left dirty", q.name);
            let v = self
                .vhosts
                .get(&*q.vhost)
                .expect("queue in a missing vhost");
            assert_eq!(
                v.queues.get(&*q.name),
                Some(qid),
                "vhost map misses queue {}",
                q.name
            );
            assert_eq!(
                q.armed_msg,
                q.ready.first_deadline(),
                "message timer of {}",
                q.name
            );
            assert_eq!(
                q.armed_lease,
                q.lease_deadline(),
                "lease timer of {}",
                q.name
            );
            if let Some(t) = q.armed_msg {
                assert!(self.timers.contains(&(t, Timer::Messages(*qid))));
                armed += 1;
            }
            if let Some(t) = q.armed_lease {
                assert!(self.timers.contains(&(t, Timer::Lease(*qid))));
                armed += 1;
            }
            let held = self
                .channels
                .values()
                .flat_map(|c| c.unacked.values())
                .filter(|u| u.queue == *qid)
                .count();
            assert_eq!(
                u64::try_from(held).unwrap_or(u64::MAX),
                q.unacked,
                "unacked count of {}",
                q.name
            );
            for c in &q.consumers {
                let ch = self
                    .channels
                    .get(&c.chan)
                    .expect("consumer on a closed channel");
                assert_eq!(
                    ch.consumers.get(&c.tag),
                    Some(qid),
                    "channel does not know consumer"
                );
                let mine = ch
                    .unacked
                    .values()
                    .filter(|u| u.consumer == Some(c.serial))
                    .count();
                assert_eq!(
                    mine,
                    usize::try_from(c.unacked).unwrap_or(usize::MAX),
                    "consumer unacked"
                );
                if !c.no_ack && c.prefetch > 0 {
                    assert!(c.unacked <= u32::from(c.prefetch), "prefetch exceeded");
                }
            }
            // S-TTL-8: held messages are not in the deadline index (Ready checks the count).
            if let Some(owner) = q.owner {
                assert!(
                    self.conns
                        .get(&owner)
                        .is_none_or(|c| c.exclusive.contains(qid))
                );
            }
        }
        for (id, s) in &self.scheduled {
            assert!(
                self.timers
                    .contains(&(s.msg.enqueued_at_ms, Timer::Scheduled(*id)))
            );
            armed += 1;
        }
        assert_eq!(armed, self.timers.len(), "timers without an owner");
        for (chan, ch) in &self.channels {
            let c = self
                .conns
                .get(&chan.conn)
                .expect("channel without a connection");
            assert!(c.channels.contains(&chan.channel));
            let by_consumers = ch.unacked.values().filter(|u| u.consumer.is_some()).count();
            assert_eq!(
                by_consumers,
                usize::try_from(ch.consumer_unacked).unwrap_or(usize::MAX)
            );
            if let Some((&last, _)) = ch.unacked.last_key_value() {
                assert!(last < ch.next_tag, "tag {last} from the future");
            }
            if ch.global_prefetch > 0 {
                assert!(
                    ch.consumer_unacked <= u32::from(ch.global_prefetch),
                    "global prefetch exceeded"
                );
            }
            for (tag, qid) in &ch.consumers {
                let q = self
                    .queues
                    .get(qid)
                    .expect("channel consumer of a deleted queue");
                assert!(q.consumers.iter().any(|c| c.chan == *chan && c.tag == *tag));
            }
        }
        for (xid, x) in &self.exchanges {
            let v = self
                .vhosts
                .get(&*x.vhost)
                .expect("exchange in a missing vhost");
            assert_eq!(v.exchanges.get(&*x.name), Some(xid));
            for b in &x.bindings {
                match b.dest {
                    Dest::Queue(q) => {
                        assert!(self.queues.contains_key(&q), "binding to a deleted queue");
                    }
                    Dest::Exchange(e) => assert!(
                        self.exchanges.contains_key(&e),
                        "binding to a deleted exchange"
                    ),
                }
            }
        }
        for m in self.queues.values().flat_map(|q| q.ready.iter()) {
            assert!(m.0.id().0 < self.next_message, "message id from the future");
        }
    }

    // ----- queries -----

    /// Queues of `vhost`, by name.
    pub fn queues(&self, vhost: &str) -> Vec<QueueInfo> {
        let Some(v) = self.vhosts.get(vhost) else {
            return Vec::new();
        };
        v.queues
            .values()
            .filter_map(|id| self.queues.get(id))
            .map(|q| QueueInfo {
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
                consumers: u32::try_from(q.consumers.len()).unwrap_or(u32::MAX),
            })
            .collect()
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
            })
            .collect()
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
                q.consumers.iter().map(|c| ConsumerInfo {
                    chan: c.chan,
                    consumer_tag: c.tag.to_string(),
                    queue: q.name.to_string(),
                    no_ack: c.no_ack,
                    exclusive: c.exclusive,
                    prefetch_count: c.prefetch,
                    unacked: c.unacked,
                })
            })
            .collect()
    }

    /// The ready messages of a queue in queue order, with their redelivered flags (for
    /// management "peek" and tests); empty if there is no such queue.
    pub fn ready_messages(
        &self,
        vhost: &str,
        queue: &str,
    ) -> Vec<(Arc<crate::types::Message>, bool)> {
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
    ) -> Vec<(Arc<crate::types::Message>, bool)> {
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

    /// The durable view of the model: what a restart must bring back. Unacked persistent
    /// messages count as in their queue, delivered (S-DUR-6).
    pub fn durable_state(&self) -> DurableState {
        let mut s = DurableState {
            vhosts: self.vhost_names(),
            ..DurableState::default()
        };
        for vhost in &s.vhosts {
            s.exchanges
                .extend(self.exchanges(vhost).into_iter().filter(|x| x.durable));
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
                let mut add = |m: &MessageRef, count: u32, redelivered: bool| {
                    if m.is_persistent() {
                        msgs.insert(
                            m.id(),
                            DurableMessage {
                                id: m.id(),
                                enqueued_at_ms: m.timing().0,
                                deadline_ms: deadline_of(m, ttl),
                                delivery_count: count,
                                redelivered,
                            },
                        );
                    }
                };
                for (m, e) in q.ready.iter() {
                    add(m, e.delivery_count, e.redelivered);
                }
                for u in self.channels.values().flat_map(|c| c.unacked.values()) {
                    if u.queue == qid {
                        add(&u.taken.msg, u.taken.delivery_count, true);
                    }
                }
                let info = QueueInfo {
                    ready: 0,
                    unacked: 0,
                    ready_bytes: 0,
                    consumers: 0,
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
