//! Forwarding a client's quorum-queue work to the group's leader (DESIGN "Replication",
//! "Forwarding"; S-CLU-70..): a member opens a byte stream to another member's server, which
//! serves it as one AMQP connection already authenticated by the member (the link between
//! members is trusted, as Erlang distribution is between RabbitMQ nodes). What runs on that
//! stream is the server's business; this crate only carries the bytes.
//!
//! A [`Relay`] is one member's way to the others: in a node, over the cluster link
//! (`net::LinkRelay`, docs/CLUSTER-WIRE.md `RelayOpen`..`RelayClose`); in one process, directly
//! ([`LocalRelays`], for tests on the in-memory network).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::types::NodeId;

/// One end of a relayed byte stream: AMQP bytes both ways.
pub type RelayStream = tokio::io::DuplexStream;

/// A server's door for relayed connections: a new connection it serves as an authenticated
/// one (the peer's server did the login), or `None` once the server stopped accepting.
pub type Door = Arc<dyn Fn() -> Option<RelayStream> + Send + Sync>;

/// A relayed stream being opened.
pub type Opening = Pin<Box<dyn Future<Output = Result<RelayStream, String>> + Send>>;

/// One member's way to the servers of the others.
pub trait Relay: Send + Sync {
    /// This member's own server: streams the other members open here are served by `door`.
    fn set_door(&self, door: Door);
    /// Opens a stream to member `member`'s server.
    fn open(&self, member: NodeId) -> Opening;
}

/// Decides whether member `from` reaches member `to` now (a test's network).
pub type Reachable = Box<dyn Fn(NodeId, NodeId) -> bool + Send + Sync>;

/// The servers of one process's members, reached directly (tests on the in-memory network).
/// A stream is opened only between members `reachable` says can talk; once open it is not cut
/// by the network (the server at its far end may still close it).
pub struct LocalRelays {
    doors: Mutex<HashMap<NodeId, Door>>,
    reachable: Reachable,
}

impl LocalRelays {
    /// No doors yet.
    pub fn new(reachable: Reachable) -> Arc<LocalRelays> {
        Arc::new(LocalRelays {
            doors: Mutex::new(HashMap::new()),
            reachable,
        })
    }

    /// Member `me`'s relay.
    pub fn member(self: &Arc<Self>, me: NodeId) -> Arc<dyn Relay> {
        Arc::new(LocalRelay {
            me,
            relays: Arc::clone(self),
        })
    }

    fn doors(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Door>> {
        self.doors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct LocalRelay {
    me: NodeId,
    relays: Arc<LocalRelays>,
}

impl Relay for LocalRelay {
    fn set_door(&self, door: Door) {
        self.relays.doors().insert(self.me, door);
    }

    fn open(&self, member: NodeId) -> Opening {
        let opened = if (self.relays.reachable)(self.me, member) {
            let door = self.relays.doors().get(&member).cloned();
            door.and_then(|d| d())
                .ok_or_else(|| format!("member {member}'s server does not serve relays"))
        } else {
            Err(format!("member {member} unreachable"))
        };
        Box::pin(std::future::ready(opened))
    }
}
