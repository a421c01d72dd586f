//! Relayed streams over the cluster link (S-CLU-70; docs/CLUSTER-WIRE.md, `RelayOpen` ..
//! `RelayClose`): a member's [`Relay`] to the other members' servers. The link is
//! request/reply, so a stream is carried by calls: `RelayOpen` gets a session on the far
//! node (a connection its server's door serves), `RelayPush` writes bytes into it and is
//! answered once they are written (so a server that reads no further holds the pusher back),
//! `RelayPull` waits (at most [`PULL_WAIT`]) for bytes from it and takes at most
//! [`CHUNK_BYTES`], and the next pull is sent only once those bytes were handed on (so a
//! client that reads no further holds the far server's output back, where its own bounds
//! apply). `RelayClose`, a stream's end, the end of the link connection its last request
//! came over, or a session unused for [`IDLE_MAX`] ends it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

use super::client::{CallError, Peers};
use super::wire::{self, Failure, Kind};
use crate::lock;
use crate::relay::{Door, Opening, Relay, RelayStream};
use crate::types::{NodeId, Raft};

/// The most bytes one push or pull carries.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// How long a pull waits for bytes before it is answered empty (and sent again).
pub const PULL_WAIT: Duration = Duration::from_secs(1);
/// A session nobody pushed to or pulled from for this long is ended (its caller is gone).
pub const IDLE_MAX: Duration = Duration::from_secs(30);
/// The bytes of a relayed stream's in-process buffer each way.
const STREAM_BUFFER_BYTES: usize = 64 * 1024;

/// One relayed stream on the serving node.
struct Session {
    read: tokio::sync::Mutex<ReadHalf<RelayStream>>,
    write: tokio::sync::Mutex<WriteHalf<RelayStream>>,
    /// Counts pushes and pulls, for the reaper of abandoned sessions.
    used: AtomicU64,
    /// The link connection (this node's number for it) its last request came over: once that
    /// connection ends, the caller's pump has ended too (it always has a pull in flight).
    conn: AtomicU64,
}

/// The serving node's sessions and its server's door.
#[derive(Clone, Default)]
pub struct Sessions {
    door: Arc<OnceLock<Door>>,
    open: Arc<Mutex<HashMap<u64, Arc<Session>>>>,
    next: Arc<AtomicU64>,
}

impl Sessions {
    /// This node's server serves relayed streams through `door` (once; later calls ignored).
    pub fn set_door(&self, door: Door) {
        let _ = self.door.set(door);
    }

    fn get(&self, session: u64, conn: u64) -> Option<Arc<Session>> {
        let s = lock(&self.open).get(&session).cloned()?;
        s.used.fetch_add(1, Ordering::Relaxed);
        s.conn.store(conn, Ordering::Relaxed);
        Some(s)
    }

    /// Link connection `conn` ended: the sessions whose last request came over it are ended
    /// (their caller's pump failed with it), so their connections on this node's server close
    /// now (consumers cancelled, unacked messages back in their queues), not after `IDLE_MAX`.
    pub(super) fn connection_ended(&self, conn: u64) {
        lock(&self.open).retain(|_, s| s.conn.load(Ordering::Relaxed) != conn);
    }

    /// Answers a relay request that came over link connection `conn` (the reply's status and
    /// body).
    pub(super) async fn answer(&self, kind: Kind, body: &[u8], conn: u64) -> Vec<u8> {
        let gone = || wire::failed(&Failure::Refused("no such relay session".into()));
        if kind == Kind::RelayOpen {
            return self.open_session(conn);
        }
        let Some((session, rest)) = body.split_first_chunk::<8>() else {
            return wire::failed(&Failure::BadRequest);
        };
        let session = u64::from_le_bytes(*session);
        match kind {
            Kind::RelayPush => {
                let Some(s) = self.get(session, conn) else {
                    return gone();
                };
                let mut write = s.write.lock().await;
                if write.write_all(rest).await.is_err() {
                    drop(write);
                    lock(&self.open).remove(&session);
                    return gone();
                }
                wire::ok(&[])
            }
            Kind::RelayPull => {
                let Some(s) = self.get(session, conn) else {
                    return gone();
                };
                let max = rest
                    .first_chunk::<4>()
                    .map_or(CHUNK_BYTES, |m| u32::from_le_bytes(*m) as usize)
                    .clamp(1, CHUNK_BYTES);
                let mut buf = vec![0u8; max];
                let mut read = s.read.lock().await;
                match tokio::time::timeout(PULL_WAIT, read.read(&mut buf)).await {
                    Err(_) => wire::ok(&[]),
                    Ok(Ok(n)) if n > 0 => wire::ok(buf.get(..n).unwrap_or_default()),
                    Ok(_) => {
                        drop(read);
                        lock(&self.open).remove(&session);
                        gone()
                    }
                }
            }
            Kind::RelayClose => {
                lock(&self.open).remove(&session);
                wire::ok(&[])
            }
            _ => wire::failed(&Failure::BadRequest),
        }
    }

    fn open_session(&self, conn: u64) -> Vec<u8> {
        let Some(stream) = self.door.get().and_then(|door| door()) else {
            return wire::failed(&Failure::Refused(
                "this node's server serves no relayed connections".into(),
            ));
        };
        let (read, write) = tokio::io::split(stream);
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let session = Arc::new(Session {
            read: tokio::sync::Mutex::new(read),
            write: tokio::sync::Mutex::new(write),
            used: AtomicU64::new(0),
            conn: AtomicU64::new(conn),
        });
        lock(&self.open).insert(id, Arc::clone(&session));
        let open = Arc::clone(&self.open);
        let weak = Arc::downgrade(&session);
        drop(session);
        // Ends a session its caller abandoned (a live caller always has a pull waiting).
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                tokio::time::sleep(IDLE_MAX).await;
                let Some(s) = weak.upgrade() else { return };
                let used = s.used.load(Ordering::Relaxed);
                if used == seen {
                    lock(&open).remove(&id);
                    return;
                }
                seen = used;
            }
        });
        wire::ok(&id.to_le_bytes())
    }
}

/// A member's [`Relay`] over the cluster link: streams to the members of `raft`'s group, at
/// the addresses its membership names; its own server's door serves the others' streams.
pub struct LinkRelay {
    raft: Raft,
    peers: Arc<Peers>,
    sessions: Sessions,
}

impl LinkRelay {
    /// The relay of the member running `raft`, calling through `peers`, serving `sessions`.
    pub fn new(raft: Raft, peers: Arc<Peers>, sessions: Sessions) -> LinkRelay {
        LinkRelay {
            raft,
            peers,
            sessions,
        }
    }
}

impl Relay for LinkRelay {
    fn set_door(&self, door: Door) {
        self.sessions.set_door(door);
    }

    fn open(&self, member: NodeId) -> Opening {
        let addr = super::member_addr(&self.raft, member);
        let peers = Arc::clone(&self.peers);
        Box::pin(async move {
            let addr = addr.ok_or_else(|| format!("member {member} has no address"))?;
            let reply = peers
                .call(&addr, Kind::RelayOpen, 0, wire::ANY_MEMBER, Vec::new())
                .await
                .map_err(|e| e.to_string())?;
            let session = reply
                .first_chunk::<8>()
                .map(|s| u64::from_le_bytes(*s))
                .ok_or("a relay session id that does not decode")?;
            let (ours, theirs) = tokio::io::duplex(STREAM_BUFFER_BYTES);
            tokio::spawn(pump(peers, addr, session, theirs));
            Ok(ours)
        })
    }
}

/// A `RelayPush` body: `session`, then `bytes` (docs/CLUSTER-WIRE.md).
pub fn relay_push(session: u64, bytes: &[u8]) -> Vec<u8> {
    let mut body = session.to_le_bytes().to_vec();
    body.extend_from_slice(bytes);
    body
}

/// A `RelayPull` body: `session`, then `max` (docs/CLUSTER-WIRE.md).
pub fn relay_pull(session: u64, max: u32) -> Vec<u8> {
    let mut body = session.to_le_bytes().to_vec();
    body.extend_from_slice(&max.to_le_bytes());
    body
}

/// Carries one stream's bytes both ways until either side ends, then closes the session.
async fn pump(peers: Arc<Peers>, addr: String, session: u64, stream: RelayStream) {
    let (mut read, mut write) = tokio::io::split(stream);
    let call = |kind: Kind, body: Vec<u8>| {
        let peers = Arc::clone(&peers);
        let addr = addr.clone();
        async move { peers.call(&addr, kind, 0, wire::ANY_MEMBER, body).await }
    };
    let up = async {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let n = match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let body = relay_push(session, buf.get(..n).unwrap_or_default());
            if call(Kind::RelayPush, body).await.is_err() {
                return;
            }
        }
    };
    let down = async {
        loop {
            let max = u32::try_from(CHUNK_BYTES).unwrap_or(u32::MAX);
            match call(Kind::RelayPull, relay_pull(session, max)).await {
                Ok(bytes) => {
                    if write.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Err(CallError::Failed { .. } | CallError::Unreachable { .. }) => return,
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
    let _ = call(Kind::RelayClose, session.to_le_bytes().to_vec()).await;
}
