//! Which of a batch's broker events go through the group and which stay in the member's own
//! log (S-CLU-10): events of a replicated (quorum) queue are the group's; events of a classic
//! queue are the member's; definitions every queue may need (vhosts, exchanges, bindings
//! between exchanges, policies, users and permissions) go to both, so the group's committed
//! broker can route and a new leader's broker has them, and the member's own log stays whole
//! for its classic queues. An event that spans both (a message routed to a classic and a quorum
//! queue; a dead-lettering from one kind into the other) is cut in two, one part per side.

use std::collections::BTreeSet;

use wharf_broker::{DestName, Event, FieldTable, MessageId, MessageRecord};

/// The replicated queues of a member's live broker, by (vhost, name): the quorum queues
/// declared while it led, or taken over from the group. Kept in step with the events it splits.
#[derive(Debug, Default, Clone)]
pub struct Replicated {
    queues: BTreeSet<(String, String)>,
}

/// A batch's events, split.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Split {
    /// For the member's own log.
    pub local: Vec<Event>,
    /// For the group.
    pub replicated: Vec<Event>,
}

/// The definitions among `events` that both sides take (vhosts, exchanges, bindings between
/// exchanges, policies, users, permissions): what a group needs of a member's own definitions
/// for its queues' bindings, policies and dead-letter routes to apply.
pub fn shared_definitions(events: impl IntoIterator<Item = Event>) -> Vec<Event> {
    events.into_iter().filter(is_shared_definition).collect()
}

/// Whether `event` is one of the definitions [`shared_definitions`] keeps.
pub fn is_shared_definition(event: &Event) -> bool {
    match event {
        Event::Bound { destination, .. } | Event::Unbound { destination, .. } => {
            matches!(destination, DestName::Exchange(_))
        }
        _ => is_shared(event),
    }
}

/// Whether `event` is a definition both sides take, whatever queue it names (bindings aside).
fn is_shared(event: &Event) -> bool {
    matches!(
        event,
        Event::VhostAdded { .. }
            | Event::VhostDeleted { .. }
            | Event::ExchangeDeclared { .. }
            | Event::ExchangeDeleted { .. }
            | Event::PolicySet { .. }
            | Event::PolicyCleared { .. }
            | Event::UserPut { .. }
            | Event::UserDeleted { .. }
            | Event::PermissionSet { .. }
            | Event::PermissionCleared { .. }
            | Event::TopicPermissionSet { .. }
            | Event::TopicPermissionCleared { .. }
    )
}

/// Whether queue arguments declare a quorum queue (`x-queue-type: quorum`, S-QQ-1).
pub fn is_quorum(arguments: &FieldTable) -> bool {
    arguments.get("x-queue-type").and_then(|v| v.as_str()) == Some("quorum")
}

impl Replicated {
    /// Whether `queue` of `vhost` is replicated.
    pub fn contains(&self, vhost: &str, queue: &str) -> bool {
        self.queues.contains(&(vhost.to_owned(), queue.to_owned()))
    }

    /// Marks `queue` of `vhost` as replicated.
    pub fn insert(&mut self, vhost: &str, queue: &str) {
        self.queues.insert((vhost.to_owned(), queue.to_owned()));
    }

    /// How many queues are replicated.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// The replicated queues, as (vhost, name).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.queues.iter().map(|(v, q)| (v.as_str(), q.as_str()))
    }

    /// No queue is replicated.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Splits `events` (in order) into `into`, following declarations and deletions as they
    /// pass.
    pub fn split(&mut self, events: impl IntoIterator<Item = Event>, into: &mut Split) {
        for event in events {
            self.split_one(event, into);
        }
    }

    fn split_one(&mut self, event: Event, into: &mut Split) {
        let queue = match &event {
            Event::QueueDeclared {
                vhost,
                queue,
                arguments,
                ..
            } => {
                if is_quorum(arguments) {
                    self.insert(vhost, queue);
                }
                Some((vhost, queue))
            }
            Event::Bound {
                vhost,
                destination: DestName::Queue(queue),
                ..
            }
            | Event::Unbound {
                vhost,
                destination: DestName::Queue(queue),
                ..
            }
            | Event::QueueDeleted { vhost, queue }
            | Event::Settled { vhost, queue, .. }
            | Event::Delivered { vhost, queue, .. }
            | Event::Returned { vhost, queue, .. }
            | Event::Purged { vhost, queue, .. }
            | Event::DeadLetterHeld { vhost, queue, .. } => Some((vhost, queue)),
            _ => None,
        };
        if let Some((vhost, queue)) = queue {
            let replicated = self.contains(vhost, queue);
            if let Event::QueueDeleted { vhost, queue } = &event {
                self.queues.remove(&(vhost.clone(), queue.clone()));
            }
            let side = if replicated {
                &mut into.replicated
            } else {
                &mut into.local
            };
            side.push(event);
            return;
        }
        match event {
            Event::Published {
                vhost,
                message,
                queues,
                scheduled,
            } => self.split_published(vhost, message, queues, scheduled, into),
            Event::DeadLettered {
                vhost,
                from,
                id,
                message,
                targets,
            } => self.split_dead_lettered(&vhost, from, id, message.as_ref(), targets, into),
            Event::Scheduled { .. } | Event::Unscheduled { .. } => into.local.push(event),
            Event::VhostDeleted { ref vhost } => {
                self.queues.retain(|(v, _)| v != vhost);
                into.replicated.push(event.clone());
                into.local.push(event);
            }
            // Every other event is a definition both sides take (`is_shared`, and bindings
            // between exchanges).
            _ => {
                into.replicated.push(event.clone());
                into.local.push(event);
            }
        }
    }

    /// A message routed to queues of both kinds: one `Published` per side, with the same id.
    /// A schedule ending with it is the member's own (delayed exchanges are not replicated):
    /// it ends there even when the message went only to replicated queues.
    fn split_published(
        &self,
        vhost: String,
        message: MessageRecord,
        queues: Vec<String>,
        scheduled: Option<MessageId>,
        into: &mut Split,
    ) {
        let (rep, loc): (Vec<String>, Vec<String>) =
            queues.into_iter().partition(|q| self.contains(&vhost, q));
        if !rep.is_empty() {
            into.replicated.push(Event::Published {
                vhost: vhost.clone(),
                message: message.clone(),
                queues: rep,
                scheduled: None,
            });
        }
        match (loc.is_empty(), scheduled) {
            (false, scheduled) => into.local.push(Event::Published {
                vhost,
                message,
                queues: loc,
                scheduled,
            }),
            (true, Some(id)) => into.local.push(Event::Unscheduled { vhost, id }),
            (true, None) => {}
        }
    }

    /// A dead-lettering: its removal from the source goes with the source's side, its new copy
    /// with each target's side (cut in two when they differ).
    fn split_dead_lettered(
        &self,
        vhost: &str,
        from: Option<String>,
        id: MessageId,
        message: Option<&MessageRecord>,
        targets: Vec<String>,
        into: &mut Split,
    ) {
        let (rep, loc): (Vec<String>, Vec<String>) =
            targets.into_iter().partition(|q| self.contains(vhost, q));
        let (from_rep, from_loc) = match from {
            Some(f) if self.contains(vhost, &f) => (Some(f), None),
            other => (None, other),
        };
        for (from, targets, side) in [
            (from_rep, rep, &mut into.replicated),
            (from_loc, loc, &mut into.local),
        ] {
            if from.is_none() && targets.is_empty() {
                continue;
            }
            side.push(Event::DeadLettered {
                vhost: vhost.to_owned(),
                from,
                id,
                message: if targets.is_empty() {
                    None
                } else {
                    message.cloned()
                },
                targets,
            });
        }
    }
}

impl Replicated {
    /// The part of `snapshot` (a member's live broker's) that belongs in the member's own
    /// checkpoint: everything but the replicated queues, their declarations, bindings and
    /// messages, which live in the group (its own snapshots are checkpoints of the committed
    /// state, S-CLU-4).
    pub fn local_snapshot(&self, mut snapshot: wharf_broker::Snapshot) -> wharf_broker::Snapshot {
        if self.is_empty() {
            return snapshot;
        }
        let mut split = Split::default();
        let mut probe = self.clone();
        probe.split(std::mem::take(&mut snapshot.definitions), &mut split);
        snapshot.definitions = split.local;
        snapshot
            .queues
            .retain(|q| !self.contains(&q.vhost, &q.queue));
        snapshot
    }
}
