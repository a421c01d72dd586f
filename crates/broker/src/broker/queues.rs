//! Queues: declare (server-named, exclusive, with validated arguments and RabbitMQ's
//! equivalence checks on a redeclare), purge and delete (ready messages discarded, consumers
//! cancelled, bindings removed; S-QEXP-5).

#![expect(
    clippy::expect_used,
    reason = "expect() only states internal invariants (ids taken from our own maps); each message says which"
)]

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Broker;
use super::refusals::{locked, no_queue};
use super::state::{Dest, Queue, QueueId, Timer};
use crate::args::{
    Overflow, QUEUE_ARGS, QUEUE_ARGS_CONS, QueueKind, QueueSettings, assert_args_equivalence,
    assert_field_equivalence, check_queue_properties, no_op_arguments, parse_queue_args,
    priority_lanes, rs_queue,
};
use crate::error::{BrokerError, ErrorKind};
use crate::queue::Ready;
use crate::types::{
    Command, ConnId, Effect, Event, MessageId, Outcome, QueueDeclare, QueueDeletedReason, Reply,
};
use crate::value::FieldTable;

impl Broker {
    /// `QueueDeclare` / `QueuePurge` / `QueueDelete`.
    pub(super) fn queue_command(
        &mut self,
        cmd: Command,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::QueueDeclare(d) => self.declare_queue(d, now, out),
            Command::QueuePurge {
                vhost,
                queue,
                owner,
            } => self.purge_queue(&vhost, &queue, owner, out),
            Command::QueueDelete {
                vhost,
                queue,
                if_unused,
                if_empty,
                owner,
            } => self.delete_queue_cmd(&vhost, &queue, if_unused, if_empty, owner, now, out),
            other => unreachable!("not a queue command: {other:?}"),
        }
    }

    fn declare_queue(
        &mut self,
        d: QueueDeclare,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let vhost = self.vhost(&d.vhost)?;
        if let Some(&id) = vhost.queues.get(&d.queue) {
            return self.redeclare_queue(id, &d, now, out);
        }
        if d.passive {
            return Err(no_queue(&d.vhost, &d.queue));
        }
        if d.queue.starts_with("amq.") {
            return Err(BrokerError::new(
                ErrorKind::AccessRefused,
                format!("queue name '{}' contains reserved prefix 'amq.*'", d.queue),
            ));
        }
        if d.exclusive && !d.owner.is_some_and(|o| self.conns.contains_key(&o)) {
            return Err(BrokerError::precondition(
                "an exclusive queue needs an open owning connection",
            ));
        }
        let name = if d.queue.is_empty() {
            let names: BTreeSet<String> = vhost.queues.keys().cloned().collect();
            self.gen_name("amq.gen-", |n| names.contains(n))
        } else {
            d.queue.clone()
        };
        let settings = parse_queue_args(&d.vhost, &name, &d.arguments)?;
        // S-QQ-2: a quorum queue is durable, shared and lasting.
        check_queue_properties(
            settings.kind(),
            &rs_queue(&d.vhost, &name),
            d.durable,
            d.exclusive,
            d.auto_delete,
        )?;
        let mut ignored = no_op_arguments(&d.arguments);
        // S-QQ-8: `reject-publish-dlx` acts as `drop-head` on a quorum queue; say so.
        if settings.kind() == QueueKind::Quorum
            && settings.overflow == Some(Overflow::RejectPublishDlx)
        {
            ignored.push("x-overflow");
        }
        // S-QQ-6, S-PRIO-8: accepted, validated, and ignored; said so once, at creation.
        for argument in ignored {
            out.effects.push(Effect::ArgumentIgnored {
                vhost: d.vhost.clone(),
                what: format!("queue '{name}'"),
                argument: argument.to_owned(),
            });
        }
        // S-QQ-7: at-least-once needs overflow `reject-publish`; otherwise at-most-once
        // applies, and RabbitMQ warns.
        if settings.at_least_once_falls_back() {
            out.effects.push(Effect::ArgumentIgnored {
                vhost: d.vhost.clone(),
                what: format!("queue '{name}'"),
                argument: "x-dead-letter-strategy (at-least-once needs x-overflow reject-publish; at-most-once applies)".to_owned(),
            });
        }
        let owner = if d.exclusive { d.owner } else { None };
        let qid = self.create_queue(
            &d.vhost,
            &name,
            d.durable,
            owner,
            d.auto_delete,
            d.arguments.clone(),
            settings,
            now,
        );
        if let Some(o) = owner
            && let Some(c) = self.conns.get_mut(&o)
        {
            c.exclusive.insert(qid);
        }
        if d.durable && owner.is_none() {
            out.events.push(Event::QueueDeclared {
                vhost: d.vhost,
                queue: name.clone(),
                auto_delete: d.auto_delete,
                arguments: d.arguments,
            });
        }
        out.reply = Reply::QueueDeclareOk {
            queue: name,
            message_count: 0,
            consumer_count: 0,
        };
        Ok(())
    }

    fn redeclare_queue(
        &mut self,
        id: QueueId,
        d: &QueueDeclare,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let q = &self.queues[&id];
        let what = rs_queue(&d.vhost, &d.queue);
        if let Some(owner) = q.owner
            && d.owner != Some(owner)
        {
            return Err(locked(&d.vhost, &d.queue));
        }
        if !d.passive {
            if q.owner.is_some() != d.exclusive {
                return Err(locked(&d.vhost, &d.queue));
            }
            let b = |v: bool| if v { "true" } else { "false" };
            assert_field_equivalence(&what, "durable", b(q.durable), b(d.durable))?;
            assert_field_equivalence(&what, "auto_delete", b(q.auto_delete), b(d.auto_delete))?;
            assert_args_equivalence(&what, &q.arguments, &d.arguments, &QUEUE_ARGS)?;
            assert_args_equivalence(&what, &q.arguments, &d.arguments, &QUEUE_ARGS_CONS)?;
        }
        // S-QEXP-2: a declare renews the lease.
        let q = self
            .queues
            .get_mut(&id)
            .expect("id came from the vhost map");
        q.last_used_ms = now;
        out.reply = Reply::QueueDeclareOk {
            queue: q.name.to_string(),
            message_count: u32::try_from(q.ready.len()).unwrap_or(u32::MAX),
            consumer_count: u32::try_from(q.consumers.len()).unwrap_or(u32::MAX),
        };
        self.mark_dirty(id);
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of a queue")]
    pub(super) fn create_queue(
        &mut self,
        vhost: &str,
        name: &str,
        durable: bool,
        owner: Option<ConnId>,
        auto_delete: bool,
        arguments: FieldTable,
        settings: QueueSettings,
        now: u64,
    ) -> QueueId {
        let id = QueueId(self.next_queue);
        self.next_queue += 1;
        let ready = Ready::counting_into(Arc::clone(&self.totals))
            .with_max_priority(priority_lanes(settings.max_priority));
        self.queues.insert(
            id,
            Queue {
                id,
                vhost: vhost.into(),
                name: name.into(),
                durable,
                owner,
                auto_delete,
                arguments,
                args: settings,
                policy: None,
                operator_policy: None,
                eff: QueueSettings::default(),
                ready,
                held: crate::held::DeadLetterHold::default(),
                unacked: 0,
                unacked_bytes: 0,
                consumers: Vec::new(),
                rr: 0,
                active: None,
                had_consumer: false,
                last_used_ms: now,
                armed_msg: None,
                armed_lease: None,
                dirty: false,
                stats: crate::QueueStats::default(),
            },
        );
        if let Some(v) = self.vhosts.get_mut(vhost) {
            v.queues.insert(name.to_owned(), id);
        }
        self.apply_policies(id, false, now, &mut Outcome::default());
        self.mark_dirty(id);
        id
    }

    fn purge_queue(
        &mut self,
        vhost: &str,
        queue: &str,
        owner: Option<ConnId>,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let qid = self.find_queue(vhost, queue, owner)?;
        let q = self.queues.get_mut(&qid).expect("found above");
        let mut taken = q.ready.drain_all();
        // The messages waiting to be dead-lettered go too, as RabbitMQ purges them (S-QQ-10).
        taken.extend(q.held.drain_all());
        let logged = q.logged();
        let ids: Vec<MessageId> = taken
            .iter()
            .filter(|t| logged && t.msg.is_persistent())
            .map(|t| t.msg.id())
            .collect();
        if !ids.is_empty() {
            out.events.push(Event::Purged {
                vhost: vhost.to_owned(),
                queue: queue.to_owned(),
                ids,
            });
        }
        out.reply = Reply::PurgeOk {
            message_count: u32::try_from(taken.len()).unwrap_or(u32::MAX),
        };
        self.mark_dirty(qid);
        Ok(())
    }

    #[expect(clippy::too_many_arguments, reason = "the fields of queue.delete")]
    fn delete_queue_cmd(
        &mut self,
        vhost: &str,
        queue: &str,
        if_unused: bool,
        if_empty: bool,
        owner: Option<ConnId>,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        // Deleting a queue that does not exist succeeds, as in RabbitMQ.
        if !self.vhost(vhost)?.queues.contains_key(queue) {
            out.reply = Reply::DeleteOk { message_count: 0 };
            return Ok(());
        }
        let qid = self.find_queue(vhost, queue, owner)?;
        let q = &self.queues[&qid];
        if if_unused && !q.consumers.is_empty() {
            return Err(BrokerError::precondition(format!(
                "{} in use",
                rs_queue(vhost, queue)
            )));
        }
        if if_empty && !q.ready.is_empty() {
            return Err(BrokerError::precondition(format!(
                "{} not empty",
                rs_queue(vhost, queue)
            )));
        }
        let count = u32::try_from(q.ready.len()).unwrap_or(u32::MAX);
        self.delete_queue(qid, QueueDeletedReason::Deleted, true, now, out);
        out.reply = Reply::DeleteOk {
            message_count: count,
        };
        Ok(())
    }

    /// Deletes a queue with its ready messages (discarded, not dead-lettered: S-QEXP-5),
    /// cancels its consumers (notifying them) and removes its bindings.
    pub(super) fn delete_queue(
        &mut self,
        qid: QueueId,
        reason: QueueDeletedReason,
        log: bool,
        _now: u64,
        out: &mut Outcome,
    ) {
        let Some(q) = self.queues.remove(&qid) else {
            return;
        };
        if let Some(v) = self.vhosts.get_mut(&*q.vhost) {
            v.queues.remove(&*q.name);
        }
        if let Some(t) = q.armed_msg {
            self.timers.remove(&(t, Timer::Messages(qid)));
        }
        if let Some(t) = q.armed_lease {
            self.timers.remove(&(t, Timer::Lease(qid)));
        }
        for c in &q.consumers {
            if let Some(ch) = self.channels.get_mut(&c.chan) {
                ch.consumers.remove(&c.tag);
            }
            out.effects.push(Effect::ConsumerCancelled {
                chan: c.chan,
                consumer_tag: c.tag.clone(),
            });
        }
        if let Some(owner) = q.owner
            && let Some(c) = self.conns.get_mut(&owner)
        {
            c.exclusive.remove(&qid);
        }
        if log && q.logged() {
            out.events.push(Event::QueueDeleted {
                vhost: q.vhost.to_string(),
                queue: q.name.to_string(),
            });
        }
        out.effects.push(Effect::QueueDeleted {
            vhost: q.vhost.to_string(),
            queue: q.name.to_string(),
            reason,
        });
        self.remove_bindings_to(&q.vhost, Dest::Queue(qid), log, out);
    }
}
