//! The cluster's nodes as a member reaches them ([`Peers`]): every node's seed and a way to ask
//! it for its status text (`status.rs`), over the cluster link in a `wharf` process
//! ([`SeedPeers`]), through the in-memory router in tests (`testing.rs`).
//!
//! **Names (S-CLU-40).** A node's name is `wharf-<slot>@<host>`, its seed slot (position in
//! `--cluster-seeds`, from 1) and the host of its seed address: the same on every node, stable
//! across a wiped directory (a new incarnation keeps its slot), and the slot `wharfctl
//! cluster_status` and the refusals name (`node 2`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How long a node's status is waited for before it counts as not running.
pub const PROBE_WAIT: Duration = Duration::from_secs(1);

/// An answer to come.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The nodes of a cluster as a member reaches them: every node's cluster address (its seed)
/// and a way to ask a node for its status text.
pub trait Peers: Send + Sync {
    /// Every node's cluster address, by slot (the first is slot 1).
    fn seeds(&self) -> Vec<String>;
    /// The status text (`status::render`) of the node at `addr`, or `None` when it does not
    /// answer within [`PROBE_WAIT`].
    fn status<'a>(&'a self, addr: &'a str) -> Pending<'a, Option<String>>;
}

/// [`Peers`] over the cluster link: the seeds a `wharf` process was started with, asked with
/// `wharfctl cluster_status`'s call.
#[derive(Debug, Clone)]
pub struct SeedPeers {
    /// The seeds, in order.
    pub seeds: Vec<String>,
}

impl Peers for SeedPeers {
    fn seeds(&self) -> Vec<String> {
        self.seeds.clone()
    }

    fn status<'a>(&'a self, addr: &'a str) -> Pending<'a, Option<String>> {
        Box::pin(async move {
            tokio::time::timeout(PROBE_WAIT, crate::node::remote_status(addr))
                .await
                .ok()?
                .ok()
        })
    }
}

/// The name of the node of seed slot `slot` at cluster address `addr`: `wharf-2@127.0.0.1`
/// (an address that is not `IP:PORT` is used whole).
pub fn node_name(slot: u64, addr: &str) -> String {
    let host = addr
        .parse::<SocketAddr>()
        .map_or_else(|_| addr.to_owned(), |a| a.ip().to_string());
    format!("wharf-{slot}@{host}")
}

/// A shared [`Peers`].
pub type SharedPeers = Arc<dyn Peers>;

#[cfg(test)]
mod tests {
    use super::node_name;

    /// S-CLU-40: a node is named by its slot and its seed's host.
    #[test]
    fn s_clu_40_names_come_from_the_slot_and_the_seed() {
        assert_eq!(node_name(2, "127.0.0.1:7002"), "wharf-2@127.0.0.1");
        assert_eq!(node_name(3, "[::1]:7003"), "wharf-3@::1");
        assert_eq!(node_name(1, "member-1"), "wharf-1@member-1");
    }
}
