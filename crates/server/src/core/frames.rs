//! Effects to frames: a broker outcome's replies, deliveries, returns, cancels and confirms
//! encoded into the connections' outboxes, in order, and the metrics counters; plus the flow
//! control of a connection whose outbox passed its high mark.

use amq_protocol::protocol::{AMQPClass, basic, channel};
use tracing::{debug, info, warn};

use super::Core;
use crate::convert::{broker_error_close, delivery_properties, properties_to_wire, short};
use crate::methods::{self, MethodId};
use crate::outbox::OUTBOX_HIGH_BYTES;
use wharf_broker::{DeathFate, DeathReason, Effect, Outcome, QueueDeletedReason, Reply};
use wharf_protocol::{self as protocol, CLASS_BASIC, ChannelId, DeliverRef};

impl Core {
    /// Writes the reply of a successful command (before its effects: consume-ok before the
    /// first delivery, get-ok with its content).
    pub(super) fn send_reply(&mut self, conn: u64, ch: u16, method: MethodId, reply: &Reply) {
        if let Reply::GetOk(g) = reply {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let m = &g.message;
            let get_ok = AMQPClass::Basic(basic::AMQPMethod::GetOk(basic::GetOk {
                delivery_tag: g.delivery_tag.0,
                redelivered: g.redelivered,
                exchange: short(&m.exchange),
                routing_key: short(&m.routing_key),
                message_count: g.message_count,
            }));
            let props = delivery_properties(&m.properties, g.count_header);
            let size = m.body.len() as u64;
            let head = |buf: &mut _| {
                protocol::encode_method(buf, ChannelId(ch), &get_ok);
                protocol::encode_content_header(buf, ChannelId(ch), CLASS_BASIC, size, &props);
            };
            c.append_content(head, ch, &m.body);
            self.dirty.insert(conn);
            return;
        }
        if let Some(frame) = methods::reply(method, reply) {
            self.reply(conn, ch, &frame);
        }
    }

    pub(super) fn reply(&mut self, conn: u64, ch: u16, method: &AMQPClass) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.append(|buf| protocol::encode_method(buf, ChannelId(ch), method));
            self.dirty.insert(conn);
        }
    }

    pub(super) fn apply_outcome(&mut self, out: Outcome, origin: Option<(u64, u16)>) {
        let Outcome {
            events, effects, ..
        } = out;
        self.events.extend(events);
        for effect in effects {
            self.effect(effect, origin);
        }
    }

    /// Bumps the metrics counters an effect stands for.
    pub(super) fn count(&mut self, effect: &Effect) {
        match effect {
            Effect::Deliver(d) => {
                let auto_ack = self
                    .conns
                    .get_mut(&d.chan.conn.0)
                    .and_then(|c| c.channels.get_mut(&d.chan.channel.0))
                    .is_some_and(|s| {
                        s.stats.deliver_get += 1; // S-MGMT-8
                        s.stats.redeliver += u64::from(d.redelivered);
                        let auto_ack = s.auto_ack_consumers.contains(&*d.consumer_tag);
                        if auto_ack {
                            s.stats.deliver_no_ack += 1; // S-OPS-10
                        } else {
                            s.stats.deliver_manual += 1;
                        }
                        auto_ack
                    });
                self.counters.deliver(
                    auto_ack,
                    d.redelivered,
                    d.queue_kind == wharf_broker::QueueKind::Quorum,
                );
            }
            Effect::QueueDeleted { .. } => self.counters.queues_deleted += 1,
            Effect::ConsumerCancelled { chan, consumer_tag } => {
                if let Some(s) = self.chan_mut(chan.conn.0, chan.channel.0) {
                    s.auto_ack_consumers.remove(&**consumer_tag);
                }
            }
            Effect::MessageDied { reason, fate, .. } => {
                // A held message (S-QQ-10) is counted when it goes.
                if *reason == DeathReason::Expired && *fate != DeathFate::Held {
                    self.counters.expired += 1;
                }
                if matches!(fate, DeathFate::DeadLettered { targets } if *targets > 0) {
                    self.counters.dead_lettered += 1;
                }
            }
            _ => {}
        }
    }

    pub(super) fn effect(&mut self, effect: Effect, origin: Option<(u64, u16)>) {
        self.count(&effect);
        match effect {
            Effect::Deliver(d) => {
                let conn = d.chan.conn.0;
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let m = &d.message;
                let tag = short(&d.consumer_tag);
                let exchange = short(&m.exchange);
                let key = short(&m.routing_key);
                let props = delivery_properties(&m.properties, d.count_header);
                let ch = ChannelId(d.chan.channel.0);
                let size = m.body.len() as u64;
                let head = |buf: &mut _| {
                    let deliver = DeliverRef {
                        consumer_tag: &tag,
                        delivery_tag: d.delivery_tag.0,
                        redelivered: d.redelivered,
                        exchange: &exchange,
                        routing_key: &key,
                    };
                    protocol::encode_deliver_method(buf, ch, deliver);
                    protocol::encode_content_header(buf, ch, CLASS_BASIC, size, &props);
                };
                let queued = c.append_content(head, ch.0, &m.body);
                self.dirty.insert(conn);
                if queued > OUTBOX_HIGH_BYTES {
                    self.throttle(conn);
                }
            }
            Effect::Return {
                reply_code,
                reply_text,
                exchange,
                routing_key,
                message,
            } => {
                let Some((conn, ch)) = origin else {
                    return;
                };
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let ret = AMQPClass::Basic(basic::AMQPMethod::Return(basic::Return {
                    reply_code,
                    reply_text: short(&reply_text),
                    exchange: short(&exchange),
                    routing_key: short(&routing_key),
                }));
                let props = properties_to_wire(&message.properties);
                let size = message.body.len() as u64;
                let head = |buf: &mut _| {
                    protocol::encode_method(buf, ChannelId(ch), &ret);
                    protocol::encode_content_header(buf, ChannelId(ch), CLASS_BASIC, size, &props);
                };
                c.append_content(head, ch, &message.body);
                self.dirty.insert(conn);
            }
            Effect::ConsumerCancelled { chan, consumer_tag } => {
                let conn = chan.conn.0;
                let notify = self.conns.get(&conn).is_some_and(|c| c.cancel_notify);
                if notify {
                    let cancel = AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                        consumer_tag: short(&consumer_tag),
                        nowait: true,
                    }));
                    self.reply(conn, chan.channel.0, &cancel);
                }
            }
            Effect::ChannelTimedOut { chan, error } => {
                let (conn, ch) = (chan.conn.0, chan.channel.0);
                warn!(conn, channel = ch, text = %error.text, "consumer timed out");
                // S-CONS-8: closing the channel requeues its unacked messages.
                if self.chan_open(conn, ch) {
                    self.fail(conn, ch, &broker_error_close(&error), MethodId::NONE);
                }
            }
            other => log_effect(&other),
        }
    }

    /// The connection's outbox is over the high mark: pause deliveries to all its channels
    /// until the writer reports it drained, so a slow consumer never makes us hold unbounded
    /// memory (messages wait in their queues instead).
    pub(super) fn throttle(&mut self, conn: u64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.throttled {
            return;
        }
        c.throttled = true;
        c.outbox.set_throttled();
        let chans: Vec<u16> = c.channels.keys().copied().collect();
        debug!(conn, "outbox over its bound; pausing deliveries");
        for ch in chans {
            self.flow(conn, ch, false);
        }
    }

    pub(super) fn unthrottle(&mut self, conn: u64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.throttled {
            return;
        }
        c.throttled = false;
        let chans: Vec<(u16, bool)> = c
            .channels
            .iter()
            .filter(|(_, s)| !s.closing)
            .map(|(&id, s)| (id, !s.client_flow_off))
            .collect();
        for (id, active) in chans {
            if active {
                self.flow(conn, id, true);
            }
        }
    }
}

/// Effects that only deserve a log line.
fn log_effect(effect: &Effect) {
    match effect {
        Effect::QueueDeleted {
            vhost,
            queue,
            reason,
        } => {
            if *reason == QueueDeletedReason::Expired {
                // S-QEXP-5: a queue deleted by its lease gets an info line.
                info!(%vhost, %queue, "queue deleted: unused for longer than its x-expires");
            } else {
                debug!(%vhost, %queue, ?reason, "queue deleted");
            }
        }
        Effect::ExchangeDeleted { vhost, exchange } => {
            debug!(%vhost, %exchange, "exchange deleted");
        }
        Effect::MessageDied {
            vhost,
            queue,
            id,
            reason,
            fate,
        } => {
            if *fate == DeathFate::ExchangeMissing {
                warn!(%vhost, %queue, id = id.0, reason = reason.name(),
                        "dead-letter exchange missing; message dropped");
            } else if *fate == DeathFate::Held {
                info!(%vhost, %queue, id = id.0, reason = reason.name(),
                        "message cannot be dead-lettered now; held in its queue until it can (at-least-once)");
            } else {
                debug!(%vhost, %queue, id = id.0, reason = reason.name(), ?fate, "message died");
            }
        }
        Effect::ArgumentIgnored {
            vhost,
            what,
            argument,
        } => {
            warn!(%vhost, %what, %argument,
                "argument accepted and not acted on: it changes nothing here, as on a one-node RabbitMQ");
        }
        _ => {}
    }
}

pub(super) fn method_channel(m: channel::AMQPMethod) -> AMQPClass {
    AMQPClass::Channel(m)
}
