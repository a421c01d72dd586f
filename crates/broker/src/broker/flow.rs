//! Publisher flow control (S-FLOW-1): which publishing connections must be read more slowly
//! because a queue they publish into holds a backlog its consumers are not taking fast enough.
//!
//! The broker decides and the server paces: a publish into a queue that has a consumer on
//! another connection and more than the high mark of ready messages marks its publishing
//! connection (`PublishResult::flow`); the server stops reading that connection's socket.
//! After each batch the server asks [`Broker::flow_released`] which connections may be read
//! again: those whose every marked queue is back at or below the low mark, has no consumer on
//! another connection any more, or is gone. Costs nothing while no queue is marked, and one
//! look per marked queue per batch otherwise (never a walk over every queue).

use std::collections::BTreeSet;

use super::Broker;
use super::state::QueueId;
use crate::types::ConnId;

impl Broker {
    /// Sets the flow control marks (S-FLOW-1): above `high` ready messages a queue with a
    /// consumer on another connection slows the connections publishing into it, until it is
    /// back at or below `low`. `high` 0 turns flow control off.
    pub fn set_flow_marks(&mut self, high: usize, low: usize) {
        self.flow.high = high;
        self.flow.low = low.min(high);
    }

    /// S-FLOW-1: after `conn` published into `targets`, whether it must be slowed: one of them
    /// holds more ready messages than the high mark and has a consumer on another connection
    /// (a connection's own consumers never slow it: their acks come through the same socket).
    pub(super) fn flow_after_publish(&mut self, conn: ConnId, targets: &[QueueId]) -> bool {
        if self.flow.high == 0 {
            return false;
        }
        let mut slowed = false;
        for t in targets {
            let Some(q) = self.queues.get(t) else {
                continue;
            };
            if q.ready.len() > self.flow.high && q.consumers.iter().any(|c| c.chan.conn != conn) {
                self.flow.marked.entry(*t).or_default().insert(conn);
                slowed = true;
            }
        }
        slowed
    }

    /// S-FLOW-1: the connections slowed before that may be read again now, each once: every
    /// queue that slowed them is back at or below the low mark, has no consumer on another
    /// connection, or is gone. Closed connections are forgotten.
    pub fn flow_released(&mut self) -> Vec<ConnId> {
        if self.flow.marked.is_empty() {
            return Vec::new();
        }
        let mut freed: BTreeSet<ConnId> = BTreeSet::new();
        let (queues, conns, low) = (&self.queues, &self.conns, self.flow.low);
        self.flow.marked.retain(|id, marked| {
            let backlog = queues.get(id).filter(|q| q.ready.len() > low);
            marked.retain(|&p| {
                let held = conns.contains_key(&p)
                    && backlog.is_some_and(|q| q.consumers.iter().any(|c| c.chan.conn != p));
                if !held {
                    freed.insert(p);
                }
                held
            });
            !marked.is_empty()
        });
        freed
            .retain(|c| conns.contains_key(c) && !self.flow.marked.values().any(|m| m.contains(c)));
        freed.into_iter().collect()
    }
}
