//! The calling side of the cluster link: one TCP connection per peer, shared by every group of
//! the node (requests carry their group and an id; replies come back by id, in any order).
//! A connection is opened on the first call and again on the first call after it broke;
//! a broken connection fails every call waiting on it at once (openraft retries after its
//! backoff). Each call is bounded by openraft's timeout for it.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::frames::{FrameReader, write_frames};
use super::wire::{self, Failure, Kind};
use crate::lock;
use crate::types::NodeId;

/// How long opening a connection to a peer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Frames waiting to be written on one connection.
const OUTBOX_FRAMES: usize = 1024;

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No connection (refused, unreachable, closed while waiting, a bad frame).
    #[error("peer {addr} unreachable: {reason}")]
    Unreachable {
        /// The peer's address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The peer answered that the request failed.
    #[error("peer {addr} refused: {failure:?}")]
    Failed {
        /// The peer's address.
        addr: String,
        /// What it said.
        failure: Failure,
    },
}

/// One open connection to a peer. Dropping it (with the [`Peers`] holding it) ends the
/// writer, which closes the socket, which ends the reader.
struct Conn {
    out: mpsc::Sender<wire::Frame>,
    shared: Arc<Shared>,
}

/// What a connection's reader shares with its callers.
struct Shared {
    pending: Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>,
    alive: AtomicBool,
}

/// A request on its way to a peer, its reply still to come ([`Peers::send`]). Dropped, it
/// stops waiting: the reply, if one comes, is let go.
pub struct Sent {
    addr: String,
    shared: Arc<Shared>,
    id: u64,
    reply: oneshot::Receiver<Vec<u8>>,
}

impl Sent {
    /// The reply's body (after its status).
    ///
    /// # Errors
    /// [`CallError`]: the connection broke, or the peer refused.
    pub async fn reply(mut self) -> Result<Vec<u8>, CallError> {
        let reply = (&mut self.reply)
            .await
            .map_err(|_| CallError::Unreachable {
                addr: self.addr.clone(),
                reason: "connection closed before the reply".into(),
            })?;
        match wire::decode_reply(&reply) {
            Ok(Ok(body)) => Ok(body.to_vec()),
            Ok(Err(failure)) => Err(CallError::Failed {
                addr: self.addr.clone(),
                failure,
            }),
            Err(e) => Err(CallError::Unreachable {
                addr: self.addr.clone(),
                reason: e.to_string(),
            }),
        }
    }
}

impl Drop for Sent {
    /// Removes the waiter however the call ends (a timeout included).
    fn drop(&mut self) {
        lock(&self.shared.pending).remove(&self.id);
    }
}

/// The connection to one peer, opened (again) by the first call that finds none.
type Link = Arc<tokio::sync::Mutex<Option<Arc<Conn>>>>;

/// The node's connections to its peers, by address.
pub struct Peers {
    me: NodeId,
    next_id: AtomicU64,
    links: Mutex<HashMap<String, Link>>,
}

impl Peers {
    /// No connections yet; `me` is announced in every connection's `Hello`.
    pub fn new(me: NodeId) -> Peers {
        Peers {
            me,
            next_id: AtomicU64::new(1),
            links: Mutex::new(HashMap::new()),
        }
    }

    /// Sends a request of `kind` for `group`, addressed to member `target` (or
    /// [`wire::ANY_MEMBER`]), to the peer at `addr` and waits for the reply's body (after its
    /// status).
    ///
    /// # Errors
    /// [`CallError`]: no connection, the connection broke, or the peer refused.
    pub async fn call(
        &self,
        addr: &str,
        kind: Kind,
        group: u64,
        target: NodeId,
        body: impl Into<Bytes>,
    ) -> Result<Vec<u8>, CallError> {
        self.send(addr, kind, group, target, body)
            .await?
            .reply()
            .await
    }

    /// Sends a request as [`Peers::call`] does, returning once it is queued on the
    /// connection: requests sent one after the other to one peer reach it in that order.
    ///
    /// # Errors
    /// [`CallError::Unreachable`]: no connection, or it closed.
    pub async fn send(
        &self,
        addr: &str,
        kind: Kind,
        group: u64,
        target: NodeId,
        body: impl Into<Bytes>,
    ) -> Result<Sent, CallError> {
        let unreachable = |reason: String| CallError::Unreachable {
            addr: addr.to_owned(),
            reason,
        };
        let conn = self
            .conn(addr)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = wire::frame(kind, id, group, target, body.into())
            .map_err(|e| unreachable(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        lock(&conn.shared.pending).insert(id, tx);
        let sent = Sent {
            addr: addr.to_owned(),
            shared: Arc::clone(&conn.shared),
            id,
            reply: rx,
        };
        if !conn.shared.alive.load(Ordering::Acquire) || conn.out.send(frame).await.is_err() {
            return Err(unreachable("connection closed".into()));
        }
        Ok(sent)
    }

    /// The open connection to `addr`, opened now if there is none or it broke.
    async fn conn(&self, addr: &str) -> io::Result<Arc<Conn>> {
        let link = Arc::clone(lock(&self.links).entry(addr.to_owned()).or_default());
        let mut slot = link.lock().await;
        if let Some(conn) = slot.as_ref()
            && conn.shared.alive.load(Ordering::Acquire)
        {
            return Ok(Arc::clone(conn));
        }
        *slot = None;
        let conn = self.connect(addr).await?;
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    async fn connect(&self, addr: &str) -> io::Result<Arc<Conn>> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        let (mut read, write) = stream.into_split();
        let (out, rx) = mpsc::channel(OUTBOX_FRAMES);
        let hello = wire::frame(
            Kind::Hello,
            0,
            0,
            wire::ANY_MEMBER,
            wire::hello(self.me).into(),
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        out.try_send(hello)
            .map_err(|_| io::Error::other("outbox full"))?;
        tokio::spawn(write_frames(write, rx));
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
        });
        let reader = Arc::clone(&shared);
        let peer = addr.to_owned();
        tokio::spawn(async move {
            let why = read_replies(&mut read, &reader).await;
            tracing::debug!(peer, reason = %why, "cluster connection closed");
            reader.alive.store(false, Ordering::Release);
            // Dropping the waiters' senders fails every call still waiting.
            lock(&reader.pending).clear();
        });
        Ok(Arc::new(Conn { out, shared }))
    }
}

/// Hands each reply to its waiter until the connection ends; returns why it ended.
async fn read_replies(read: &mut tokio::net::tcp::OwnedReadHalf, conn: &Shared) -> String {
    let mut frames = FrameReader::default();
    loop {
        let frame = match frames.next(read, wire::FRAME_BYTES_MAX).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return "closed by the peer".into(),
            Err(e) => return e.to_string(),
        };
        match wire::split(frame) {
            Ok((header, body)) if header.kind == Kind::Reply => {
                if let Some(waiter) = lock(&conn.pending).remove(&header.id) {
                    let _ = waiter.send(body.to_vec());
                }
            }
            Ok((header, _)) => return format!("a {:?} frame where replies come", header.kind),
            Err(e) => return e.to_string(),
        }
    }
}
