//! Where the clients of a group's leader connect (S-CLU-13): a follower refuses quorum-queue
//! work naming its leader, and names the leader's AMQP address when it knows it, so a client
//! can act on the refusal. Each node names its AMQP address in its status text
//! (`status::render`, `Node::advertise_amqp`); a member learns its leader's by asking the
//! leader's cluster listener for that text whenever the leader changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::node::remote_status;
use crate::status;
use crate::types::NodeId;

/// A member's view of its group, as openraft publishes it.
type Metrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;

/// How long a member waits before asking a leader that did not answer again.
const RETRY: Duration = Duration::from_millis(300);

/// The AMQP addresses of the members this member learned (cheap to clone; shared).
#[derive(Debug, Clone, Default)]
pub struct LeaderAddrs(Arc<Mutex<BTreeMap<NodeId, String>>>);

impl LeaderAddrs {
    /// Member `id`'s AMQP address, if learned.
    pub fn get(&self, id: NodeId) -> Option<String> {
        self.lock().get(&id).cloned()
    }

    /// Records member `id`'s AMQP address.
    pub fn set(&self, id: NodeId, amqp: String) {
        self.lock().insert(id, amqp);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Keeps `addrs` up to date for member `me`: each time another member becomes the leader
/// `metrics` show, asks it for its status and records the AMQP address it names (retried until
/// it answers or the leader changes). Ends when the group's Raft stops.
pub(crate) fn learn(
    me: NodeId,
    mut metrics: tokio::sync::watch::Receiver<Metrics>,
    addrs: LeaderAddrs,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut learned: Option<NodeId> = None;
        loop {
            let target = {
                let m = metrics.borrow_and_update();
                m.current_leader.filter(|l| *l != me).and_then(|l| {
                    let addr = m.membership_config.membership().get_node(&l)?.addr.clone();
                    Some((l, addr))
                })
            };
            match target {
                Some((leader, addr)) if learned != Some(leader) => {
                    if let Ok(text) = remote_status(&addr).await
                        && let Some(amqp) = status::parse_amqp(&text)
                    {
                        addrs.set(leader, amqp);
                        learned = Some(leader);
                    } else {
                        // Not answering yet (or its server not listening yet): ask again soon.
                        tokio::select! {
                            () = tokio::time::sleep(RETRY) => continue,
                            changed = metrics.changed() => if changed.is_err() { return },
                        }
                        continue;
                    }
                }
                Some(_) => {}
                None => learned = None,
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    })
}
