//! Direct reply-to (S-DRT), RabbitMQ's `amq.rabbitmq.reply-to` pseudo-queue: a channel consumes
//! from it (no-ack only) and becomes a reply consumer with a reply name of its own,
//! `amq.rabbitmq.reply-to.<suffix>`; a request published on that channel with `reply_to` set
//! to the pseudo-queue carries the reply name instead; a reply published to the default
//! exchange with the reply name as routing key goes straight to that consumer: no queue, no
//! log record, no ack. The reply name lives as long as the consumer (cancel, channel close).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Broker;
use super::refusals::no_queue;
use crate::error::{BrokerError, ErrorKind};
use crate::types::{
    ChanRef, Delivery, DeliveryTag, Effect, Message, Outcome, Publish, QueueDeclare, Reply,
};

/// The pseudo-queue's name.
pub const REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";
/// What every reply name starts with.
const REPLY_NAME_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// One channel's reply consumer.
#[derive(Debug, Clone)]
struct ReplyConsumer {
    tag: Arc<str>,
    suffix: Arc<str>,
}

/// The reply consumers of every channel, by channel and by reply-name suffix. Invariant: the
/// two maps describe the same consumers.
#[derive(Debug, Default)]
pub(super) struct ReplyConsumers {
    by_chan: BTreeMap<ChanRef, ReplyConsumer>,
    by_suffix: BTreeMap<Arc<str>, ChanRef>,
}

impl ReplyConsumers {
    /// Forgets `chan`'s reply consumer (its channel closed): replies to its name are dropped.
    pub(super) fn forget(&mut self, chan: ChanRef) {
        if let Some(c) = self.by_chan.remove(&chan) {
            self.by_suffix.remove(&c.suffix);
        }
    }

    /// True when `tag` is `chan`'s reply consumer.
    pub(super) fn is_tag(&self, chan: ChanRef, tag: &str) -> bool {
        self.by_chan.get(&chan).is_some_and(|c| &*c.tag == tag)
    }

    /// The channel whose reply name is `name`, if it still consumes.
    fn channel_of(&self, name: &str) -> Option<ChanRef> {
        let suffix = name.strip_prefix(REPLY_NAME_PREFIX)?;
        self.by_suffix.get(suffix).copied()
    }

    /// Checks the two maps agree (`check_invariants`).
    pub(super) fn check(&self) {
        assert_eq!(
            self.by_chan.len(),
            self.by_suffix.len(),
            "reply consumer maps"
        );
        for (chan, c) in &self.by_chan {
            assert_eq!(
                self.by_suffix.get(&c.suffix),
                Some(chan),
                "reply suffix of {chan:?}"
            );
        }
    }
}

/// True for the names RabbitMQ treats as direct reply-to (every declare of them is passive).
pub(super) fn is_reply_name(queue: &str) -> bool {
    queue.starts_with(REPLY_QUEUE)
}

impl Broker {
    /// S-DRT-1: `basic.consume` of the pseudo-queue. RabbitMQ's refusals: 406 for an acking
    /// consumer and for a second reply consumer on the channel, 530 for a tag in use.
    pub(super) fn reply_consume(
        &mut self,
        chan: ChanRef,
        tag: String,
        no_ack: bool,
        suffix: String,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        let ch = self.channel_mut(chan)?;
        if !tag.is_empty() && ch.consumers.contains_key(tag.as_str()) {
            return Err(BrokerError::new(
                ErrorKind::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        if !no_ack {
            return Err(BrokerError::precondition(
                "reply consumer cannot acknowledge",
            ));
        }
        if self.reply_to.by_chan.contains_key(&chan) {
            return Err(BrokerError::precondition("reply consumer already set"));
        }
        let suffix: Arc<str> = suffix.into();
        if suffix.is_empty() || self.reply_to.by_suffix.contains_key(&suffix) {
            return Err(BrokerError::new(
                ErrorKind::InternalError,
                "reply name suffix empty or in use",
            ));
        }
        let tag = if tag.is_empty() {
            self.gen_consumer_tag(chan)
        } else {
            tag
        };
        self.reply_to.by_suffix.insert(suffix.clone(), chan);
        let consumer = ReplyConsumer {
            tag: tag.as_str().into(),
            suffix,
        };
        self.reply_to.by_chan.insert(chan, consumer);
        out.reply = Reply::ConsumeOk { consumer_tag: tag };
        Ok(())
    }

    /// `basic.cancel` of `chan`'s reply consumer: its reply name stops working.
    pub(super) fn reply_cancel(&mut self, chan: ChanRef, out: &mut Outcome) {
        if let Some(c) = self.reply_to.by_chan.get(&chan) {
            out.reply = Reply::CancelOk {
                consumer_tag: c.tag.to_string(),
            };
        }
        self.reply_to.forget(chan);
    }

    /// S-DRT-5: every declare of a direct reply-to name is passive. The pseudo-queue and a live
    /// reply name exist, with no message and one consumer; any other such name is 404.
    pub(super) fn reply_declare(
        &self,
        d: &QueueDeclare,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        self.vhost(&d.vhost)?;
        if d.queue != REPLY_QUEUE && self.reply_to.channel_of(&d.queue).is_none() {
            return Err(no_queue(&d.vhost, &d.queue));
        }
        out.reply = Reply::QueueDeclareOk {
            queue: d.queue.clone(),
            message_count: 0,
            consumer_count: 1,
        };
        Ok(())
    }

    /// S-DRT-3: a publish on `chan` whose `reply_to` is the pseudo-queue carries the channel's
    /// reply name instead; without a reply consumer on the channel it is refused (406).
    pub(super) fn publish_on(
        &mut self,
        chan: ChanRef,
        mut p: Publish,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        if p.properties.reply_to.as_deref() == Some(REPLY_QUEUE) {
            let Some(c) = self.reply_to.by_chan.get(&chan) else {
                return Err(BrokerError::precondition(
                    "fast reply consumer does not exist",
                ));
            };
            p.properties.reply_to = Some(format!("{REPLY_NAME_PREFIX}{}", c.suffix));
        }
        self.publish(p, now, out)
    }

    /// S-DRT-4: a message published to the default exchange with a reply name as its routing
    /// key goes straight to that reply consumer, if it still consumes (otherwise nowhere).
    /// As RabbitMQ, the delivery tag is the channel's next one, not consumed (a reply consumer
    /// never acks), and the publish itself routed to no queue (so `mandatory` returns it).
    pub(super) fn deliver_reply(&mut self, msg: &Arc<Message>, out: &mut Outcome) {
        if !msg.exchange.is_empty() {
            return;
        }
        let Some(chan) = self.reply_to.channel_of(&msg.routing_key) else {
            return;
        };
        let (Some(c), Some(ch)) = (self.reply_to.by_chan.get(&chan), self.channels.get(&chan))
        else {
            return;
        };
        out.effects.push(Effect::Deliver(Delivery {
            chan,
            consumer_tag: c.tag.clone(),
            delivery_tag: DeliveryTag(ch.next_tag),
            redelivered: false,
            delivery_count: 0,
            queue: REPLY_QUEUE.into(),
            message: msg.clone(),
        }));
    }
}
