//! Connections and channels: opening them, and closing them (a channel's consumers are
//! cancelled and its unacked messages requeued, S-TTL-7; a connection's exclusive queues go).

use std::collections::{BTreeMap, BTreeSet};

use super::Broker;
use super::state::{Channel, Conn, QueueId, Timer};
use crate::error::{BrokerError, ErrorKind};
use crate::types::{ChanRef, ChannelId, Command, ConnId, Outcome, QueueDeletedReason};

impl Broker {
    /// `ConnectionOpen` / `ConnectionClose` / `ChannelOpen` / `ChannelClose`.
    pub(super) fn connection_command(
        &mut self,
        cmd: Command,
        now: u64,
        out: &mut Outcome,
    ) -> Result<(), BrokerError> {
        match cmd {
            Command::ConnectionOpen { conn, vhost } => self.open_connection(conn, vhost),
            Command::ConnectionClose { conn } => {
                self.close_connection(conn, now, out);
                Ok(())
            }
            Command::ChannelOpen { chan } => self.open_channel(chan),
            Command::ChannelClose { chan } => {
                self.close_channel(chan, now, out);
                Ok(())
            }
            other => unreachable!("not a connection command: {other:?}"),
        }
    }

    fn open_connection(&mut self, conn: ConnId, vhost: String) -> Result<(), BrokerError> {
        self.vhost(&vhost)?;
        if self.conns.contains_key(&conn) {
            return Err(BrokerError::new(
                ErrorKind::CommandInvalid,
                format!("connection {} is already open", conn.0),
            ));
        }
        self.conns.insert(
            conn,
            Conn {
                vhost,
                channels: BTreeSet::new(),
                exclusive: BTreeSet::new(),
            },
        );
        Ok(())
    }

    pub(super) fn close_connection(&mut self, conn: ConnId, now: u64, out: &mut Outcome) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let channels: Vec<ChannelId> = c.channels.iter().copied().collect();
        for ch in channels {
            self.close_channel(ChanRef { conn, channel: ch }, now, out);
        }
        let exclusive: Vec<QueueId> = self
            .conns
            .get(&conn)
            .map(|c| c.exclusive.iter().copied().collect())
            .unwrap_or_default();
        for q in exclusive {
            self.delete_queue(q, QueueDeletedReason::OwnerClosed, true, now, out);
        }
        self.conns.remove(&conn);
    }

    fn open_channel(&mut self, chan: ChanRef) -> Result<(), BrokerError> {
        let Some(c) = self.conns.get_mut(&chan.conn) else {
            return Err(BrokerError::new(
                ErrorKind::ChannelError,
                "connection is not open",
            ));
        };
        if !c.channels.insert(chan.channel) {
            return Err(BrokerError::new(
                ErrorKind::ChannelError,
                "second 'channel.open' seen",
            ));
        }
        self.channels.insert(
            chan,
            Channel {
                flow: true,
                prefetch: 0,
                global_prefetch: 0,
                next_tag: 1,
                unacked: BTreeMap::new(),
                consumer_unacked: 0,
                consumers: BTreeMap::new(),
                ack_timer: None,
            },
        );
        Ok(())
    }

    /// Closes a channel: cancels its consumers, then requeues its unacked messages in their
    /// original positions with their original deadlines (S-TTL-7).
    fn close_channel(&mut self, chan: ChanRef, now: u64, out: &mut Outcome) {
        let Some(ch) = self.channels.remove(&chan) else {
            return;
        };
        if let Some(c) = self.conns.get_mut(&chan.conn) {
            c.channels.remove(&chan.channel);
        }
        if let Some(t) = ch.ack_timer {
            self.timers.remove(&(t, Timer::AckTimeout(chan)));
        }
        self.reply_to.forget(chan);
        for (tag, qid) in &ch.consumers {
            self.remove_consumer(*qid, chan, tag, now, out);
        }
        for (_, u) in ch.unacked {
            self.unacked_released(&u, None);
            self.requeue(u.queue, u.taken, now, out);
        }
    }
}
