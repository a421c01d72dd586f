//! Direct reply-to (S-DRT), RabbitMQ's `amq.rabbitmq.reply-to` pseudo-queue: a channel consumes
//! from it (no-ack only) and becomes a reply consumer with a reply name of its own,
//! `amq.rabbitmq.reply-to.<suffix>`; a request published on that channel with `reply_to` set
//! to the pseudo-queue carries the reply name instead; a reply published to the default
//! exchange with the reply name as routing key goes straight to that consumer: no queue, no
//! log record, no ack. The reply name lives as long as the consumer (cancel, channel close).

use std::sync::Arc;

use super::Broker;
use super::refusals::no_queue;
use super::reply_names::{REPLY_NAME_PREFIX, REPLY_QUEUE, ReplyConsumer};
use crate::error::{BrokerError, ErrorKind};
use crate::types::{
    ChanRef, Delivery, DeliveryTag, Effect, Message, Outcome, Publish, QueueDeclare, Reply,
};

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
        self.publish(p, Some(chan.conn), now, out)
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
            count_header: None,
            queue: REPLY_QUEUE.into(),
            // wharf counts the pseudo-queue's deliveries as a classic queue's.
            queue_kind: crate::args::QueueKind::Classic,
            message: msg.clone(),
        }));
    }
}
