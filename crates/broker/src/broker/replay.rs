//! Replay: rebuilding the model from its own events ([`Broker::apply`],
//! [`Broker::apply_stored`]) and from a checkpoint ([`Broker::restore_message`]). Nothing
//! fires, expires or is delivered while replaying (as nats's `recovering`);
//! [`Broker::recovered`] ends it.

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use super::Broker;
use super::refusals::corrupt;
use super::state::Dest;
use crate::args::{parse_logged_queue_args, parse_policy};
use crate::error::BrokerError;
use crate::queue::Taken;
use crate::types::{
    DestName, Event, HeldDeath, MessageId, MessageRef, Outcome, PermissionInfo, Placement,
    QueueDeletedReason, StoredEvent, UserInfo,
};

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

    /// Hands each event to the part of replay for its domain.
    fn apply_inner(&mut self, event: &Event, out: &mut Outcome) -> Result<(), BrokerError> {
        match event {
            Event::VhostAdded { vhost } => {
                self.add_vhost(vhost);
                Ok(())
            }
            Event::VhostDeleted { vhost } => {
                self.delete_vhost(vhost, 0, out);
                Ok(())
            }
            Event::ExchangeDeclared { .. }
            | Event::ExchangeDeleted { .. }
            | Event::QueueDeclared { .. }
            | Event::QueueDeleted { .. } => self.replay_definition(event, out),
            Event::Bound { .. } | Event::Unbound { .. } => self.replay_binding(event, out),
            Event::PolicySet { .. } | Event::PolicyCleared { .. } => self.replay_policy(event, out),
            Event::Published { .. }
            | Event::Scheduled { .. }
            | Event::Unscheduled { .. }
            | Event::Settled { .. }
            | Event::Purged { .. }
            | Event::Delivered { .. }
            | Event::Returned { .. }
            | Event::DeadLettered { .. }
            | Event::DeadLetterHeld { .. } => self.replay_message(event),
            Event::UserPut { .. }
            | Event::UserDeleted { .. }
            | Event::PermissionSet { .. }
            | Event::PermissionCleared { .. } => self.replay_access(event),
            Event::TopicPermissionSet { .. } | Event::TopicPermissionCleared { .. } => {
                self.replay_topic_access(event)
            }
        }
    }

    /// A durable exchange or queue declared or deleted.
    fn replay_definition(&mut self, event: &Event, out: &mut Outcome) -> Result<(), BrokerError> {
        match event {
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
                let settings = parse_logged_queue_args(vhost, queue, arguments)?;
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
            other => unreachable!("not an exchange or queue event: {other:?}"),
        }
        Ok(())
    }

    /// A binding between durable entities added or removed.
    fn replay_binding(&mut self, event: &Event, out: &mut Outcome) -> Result<(), BrokerError> {
        match event {
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
            other => unreachable!("not a binding event: {other:?}"),
        }
        Ok(())
    }

    /// A policy set or cleared: effective settings are recomputed, nothing is enforced (the
    /// log holds what the enforcement did).
    fn replay_policy(&mut self, event: &Event, out: &mut Outcome) -> Result<(), BrokerError> {
        match event {
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
            other => unreachable!("not a policy event: {other:?}"),
        }
        Ok(())
    }

    /// A message event: into, out of or marked in its queues, or (un)scheduled.
    fn replay_message(&mut self, event: &Event) -> Result<(), BrokerError> {
        match event {
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
            Event::DeadLetterHeld {
                vhost,
                queue,
                reason,
                at_ms,
                ids,
            } => {
                let Some(&qid) = self.vhost(vhost)?.queues.get(queue) else {
                    return Ok(());
                };
                let death = HeldDeath {
                    reason: *reason,
                    at_ms: *at_ms,
                };
                for id in ids {
                    // A message the queue does not hold ready was settled by an earlier
                    // record, as for a settle.
                    let q = self.queues.get_mut(&qid).expect("vhost map is consistent");
                    if let Some(taken) = q.ready.remove(*id) {
                        self.restore_held(qid, taken, death);
                    }
                }
            }
            other => unreachable!("not a message event: {other:?}"),
        }
        Ok(())
    }

    /// A user or permission put or removed.
    fn replay_access(&mut self, event: &Event) -> Result<(), BrokerError> {
        match event {
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
            other => unreachable!("not an access event: {other:?}"),
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
            let Some(death) = p.held else {
                self.replay_push_marked(
                    vhost,
                    &p.queue,
                    message.clone(),
                    p.delivery_count,
                    p.redelivered,
                )?;
                continue;
            };
            let qid = *self
                .vhost(vhost)?
                .queues
                .get(&p.queue)
                .ok_or_else(|| corrupt("message for an unknown queue"))?;
            if self.queues[&qid].held.contains(message.id()) {
                return Err(corrupt("message held twice"));
            }
            let taken = Taken {
                msg: message.clone(),
                delivery_count: p.delivery_count,
                redelivered: p.redelivered,
            };
            self.restore_held(qid, taken, death);
        }
        self.rearm_dirty();
        Ok(())
    }

    /// Restarts the lease of `queue` of `vhost` at `now_ms` (S-QEXP-4), as
    /// [`Broker::recovered`] restarts every queue's: for a queue a live broker adopted while
    /// serving (a cluster member's take-over, S-CLU-6). Nothing when there is no such queue.
    pub fn restart_lease(&mut self, vhost: &str, queue: &str, now_ms: u64) {
        let Some(&qid) = self.vhosts.get(vhost).and_then(|v| v.queues.get(queue)) else {
            return;
        };
        if let Some(q) = self.queues.get_mut(&qid) {
            q.last_used_ms = now_ms;
        }
        self.mark_dirty(qid);
        self.rearm_dirty();
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

    /// Raises the next message id to at least `next` (a checkpoint carries it, so that ids
    /// of messages settled before it are never handed out again).
    pub fn restore_next_message_id(&mut self, next: u64) {
        self.next_message = self.next_message.max(next);
    }

    fn see_id(&mut self, id: MessageId) {
        self.next_message = self.next_message.max(id.0.saturating_add(1));
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
        // O(1): replay must stay linear in the number of messages.
        if !q.ready.is_newest(&msg) {
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
        if let Some(q) = self.queues.get_mut(&qid)
            && q.ready.remove(id).is_none()
        {
            q.held.remove(id);
        }
        self.mark_dirty(qid);
    }
}
