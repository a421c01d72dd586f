//! Lookups every domain shares: a vhost, channel, queue or exchange by name (with the error
//! RabbitMQ gives when it is missing), the dirty-queue mark, generated names and message ids.

use std::sync::Arc;

use super::Broker;
use super::refusals::{locked, no_exchange, no_queue};
use super::state::{Channel, ExchangeId, Queue, QueueId, Vhost};
use crate::error::{BrokerError, ErrorKind};
use crate::types::{ChanRef, ConnId, MessageId};

/// A fixed bijective mix (splitmix64's finaliser), so generated names look random yet depend
/// only on the broker's own counter.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Broker {
    pub(super) fn vhost(&self, name: &str) -> Result<&Vhost, BrokerError> {
        self.vhosts.get(name).ok_or_else(|| {
            BrokerError::new(ErrorKind::NotAllowed, format!("vhost '{name}' not found"))
        })
    }

    pub(super) fn channel_mut(&mut self, chan: ChanRef) -> Result<&mut Channel, BrokerError> {
        self.channels.get_mut(&chan).ok_or_else(|| {
            BrokerError::new(
                ErrorKind::ChannelError,
                format!("channel {} is not open", chan.channel.0),
            )
        })
    }

    pub(super) fn chan_vhost(&self, chan: ChanRef) -> Result<String, BrokerError> {
        if !self.channels.contains_key(&chan) {
            return Err(BrokerError::new(
                ErrorKind::ChannelError,
                format!("channel {} is not open", chan.channel.0),
            ));
        }
        self.conns
            .get(&chan.conn)
            .map(|c| c.vhost.clone())
            .ok_or_else(|| BrokerError::new(ErrorKind::ChannelError, "connection is not open"))
    }

    /// The queue `name` of `vhost`, if both exist (the read-only views' lookup).
    pub(super) fn queue_named(&self, vhost: &str, name: &str) -> Option<&Queue> {
        self.vhosts
            .get(vhost)
            .and_then(|v| v.queues.get(name))
            .and_then(|id| self.queues.get(id))
    }

    /// The queue `name`, checking exclusive ownership against `accessor` (None = the admin
    /// API, which may touch any queue).
    pub(super) fn find_queue(
        &self,
        vhost: &str,
        name: &str,
        accessor: Option<ConnId>,
    ) -> Result<QueueId, BrokerError> {
        let id = *self
            .vhost(vhost)?
            .queues
            .get(name)
            .ok_or_else(|| no_queue(vhost, name))?;
        let q = &self.queues[&id];
        if let (Some(owner), Some(who)) = (q.owner, accessor)
            && owner != who
        {
            return Err(locked(vhost, name));
        }
        Ok(id)
    }

    pub(super) fn find_exchange(&self, vhost: &str, name: &str) -> Result<ExchangeId, BrokerError> {
        self.vhost(vhost)?
            .exchanges
            .get(name)
            .copied()
            .ok_or_else(|| no_exchange(vhost, name))
    }

    pub(super) fn mark_dirty(&mut self, qid: QueueId) {
        if let Some(q) = self.queues.get_mut(&qid)
            && !q.dirty
        {
            q.dirty = true;
            self.dirty.push(qid);
        }
    }

    pub(super) fn mark_channel_queues(&mut self, chan: ChanRef) {
        let qs: Vec<QueueId> = self
            .channels
            .get(&chan)
            .map(|c| c.consumers.values().copied().collect())
            .unwrap_or_default();
        for q in qs {
            self.mark_dirty(q);
        }
    }

    pub(super) fn gen_name(&mut self, prefix: &str, taken: impl Fn(&str) -> bool) -> String {
        loop {
            self.name_seq += 1;
            let name = format!("{prefix}{:016x}", mix(self.name_seq));
            if !taken(&name) {
                return name;
            }
        }
    }

    pub(super) fn gen_consumer_tag(&mut self, chan: ChanRef) -> String {
        let existing: Vec<Arc<str>> = self
            .channels
            .get(&chan)
            .map(|c| c.consumers.keys().cloned().collect())
            .unwrap_or_default();
        self.gen_name("amq.ctag-", |n| existing.iter().any(|e| &**e == n))
    }

    pub(super) fn next_id(&mut self) -> MessageId {
        let id = MessageId(self.next_message);
        self.next_message += 1;
        id
    }
}
