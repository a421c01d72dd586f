//! Moving dead-lettered messages back (S-UI-10): each selected ready message of a
//! dead-letter queue is republished to the exchange and routing keys of its newest `x-death`
//! entry, `x-death` kept, in one `DeadLettered` event that removes it from the queue and
//! enqueues the copy into every durable target, so a crash leaves it in exactly one of the
//! two places (S-DLX-7). A message that cannot move stays where it is, with the reason.

use std::sync::Arc;

use super::Broker;
use super::state::QueueId;
use crate::error::BrokerError;
use crate::types::{Death, Event, Message, MessageId, MessageRecord, Outcome, Reply, StoredSlot};
use wharf_base::limits::MOVE_BACK_MESSAGES_MAX;

impl Broker {
    /// `Command::MoveBack`: every message of `ids` (or the first
    /// [`MOVE_BACK_MESSAGES_MAX`] ready messages) that can move, moved; the reply lists what
    /// moved and what stayed. 404 for an unknown vhost or queue; 406 for more than
    /// [`MOVE_BACK_MESSAGES_MAX`] ids.
    pub(super) fn move_back(
        &mut self,
        vhost: &str,
        queue: &str,
        ids: Option<Vec<MessageId>>,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let qid = self.find_queue(vhost, queue, None)?;
        if ids
            .as_ref()
            .is_some_and(|ids| ids.len() > MOVE_BACK_MESSAGES_MAX)
        {
            return Err(BrokerError::precondition(format!(
                "at most {MOVE_BACK_MESSAGES_MAX} messages move back at once"
            )));
        }
        // "All" is the first MOVE_BACK_MESSAGES_MAX: the broker task does this work at once.
        let ids = ids.unwrap_or_else(|| {
            self.queues
                .get(&qid)
                .map(|q| {
                    q.ready
                        .iter()
                        .take(MOVE_BACK_MESSAGES_MAX)
                        .map(|(m, _)| m.id())
                        .collect()
                })
                .unwrap_or_default()
        });
        let (mut moved, mut skipped) = (Vec::new(), Vec::new());
        for id in ids {
            match self.move_one(vhost, qid, id, now, out) {
                Ok(()) => moved.push(id),
                Err(reason) => skipped.push((id, reason)),
            }
        }
        out.reply = Reply::MovedBack { moved, skipped };
        Ok(())
    }

    /// Moves one message, or says why it stays.
    fn move_one(
        &mut self,
        vhost: &str,
        qid: QueueId,
        id: MessageId,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), String> {
        let q = self.queues.get(&qid).ok_or("no such queue")?;
        let qname = q.name.to_string();
        let mref = q
            .ready
            .get(id)
            .cloned()
            .ok_or_else(|| format!("message {} is not a ready message of the queue", id.0))?;
        let original = self
            .loaded(&mref)
            .ok_or_else(|| format!("message {} cannot be read back", id.0))?;
        let death = Death::newest(&original.properties)
            .ok_or_else(|| format!("message {} was never dead-lettered (no x-death)", id.0))?;
        let v = self.vhosts.get(vhost).ok_or("no such vhost")?;
        let xid = *v.exchanges.get(death.exchange.as_str()).ok_or_else(|| {
            format!(
                "message {}: its original exchange '{}' no longer exists",
                id.0, death.exchange
            )
        })?;
        let keys = if death.routing_keys.is_empty() {
            vec![String::new()]
        } else {
            death.routing_keys.clone()
        };
        let mut targets = self.route(v, xid, &keys, original.properties.headers.as_ref());
        // S-LEN-2: a queue at its limit that refuses publishes refuses this one too.
        targets.retain(|t| self.refuses(*t, original.body.len()).is_none());
        let copy = Message {
            id: MessageId(0),
            enqueued_at_ms: now,
            ttl_ms: original.ttl_ms,
            exchange: death.exchange.clone(),
            routing_key: keys.first().cloned().unwrap_or_default(),
            properties: original.properties.clone(),
            body: original.body.clone(),
            stored: StoredSlot::default(),
        };
        if targets.is_empty() {
            return Err(format!(
                "message {}: exchange '{}' routes keys {:?} to no queue that accepts it",
                id.0, death.exchange, keys
            ));
        }
        if copy.is_persistent() && !self.record_fits(vhost, &copy, &targets) {
            return Err(format!("message {}: its record would be too large", id.0));
        }
        let copy = Arc::new(Message {
            id: self.next_id(),
            ..copy
        });
        let q = self.queues.get_mut(&qid).ok_or("no such queue")?;
        let taken = q.ready.remove(id).ok_or("no longer ready")?;
        let from_logged = q.logged() && taken.msg.is_persistent();
        self.mark_dirty(qid);
        let durable = self.logged_names(&copy, &targets);
        if from_logged || !durable.is_empty() {
            out.events.push(Event::DeadLettered {
                vhost: vhost.to_owned(),
                from: from_logged.then_some(qname),
                id,
                message: (!durable.is_empty()).then(|| MessageRecord {
                    message: copy.clone(),
                }),
                targets: durable,
            });
        }
        self.enqueue_all(&targets, &copy, now, out);
        Ok(())
    }
}
