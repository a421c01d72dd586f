//! The answering side of the cluster link: the node's listener. Each connection must open with
//! a `Hello`; then every request runs in a task of its own (so a vote never waits behind a
//! large append), at most [`IN_FLIGHT_MAX`] at once per connection, and its reply is queued
//! on the connection's writer. A request that does not decode is answered `BadRequest`; a
//! frame that breaks the framing (a length out of bounds, a stream cut inside a frame, an
//! unknown kind) closes the connection. Nothing a peer sends can panic the node (S-ERR-2).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use openraft::ServerState;
use openraft::error::RaftError;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use super::frames::{read_frame, write_frames};
use super::wire::{self, Failure, Header, Kind};
use crate::forward::{self, ForwardError};
use crate::record::RecentEntries;
use crate::status;
use crate::types::{NodeId, Raft};

/// Requests of one connection running at once; the reader waits for a slot before it reads on.
pub const IN_FLIGHT_MAX: usize = 256;
/// Replies waiting to be written on one connection.
const OUTBOX_FRAMES: usize = 1024;

/// What answers a membership request (`AddMember`, `RemoveMember`): the request's header and
/// body in, the reply's body (status and answer) out.
pub type Admin =
    Arc<dyn Fn(Header, Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> + Send + Sync>;

/// The groups this node runs, by group id: where requests go.
#[derive(Clone)]
pub struct Groups {
    me: NodeId,
    addr: String,
    amqp: Arc<RwLock<Option<String>>>,
    served: Arc<RwLock<BTreeMap<u64, Served>>>,
    /// This node's member id, [`wire::ANY_MEMBER`] until its incarnation is settled.
    member: Arc<AtomicU64>,
    admin: Arc<OnceLock<Admin>>,
    relays: super::relay::Sessions,
}

/// A group this node serves: its Raft, and the entries its appends decoded last (S-CLU-90).
#[derive(Clone)]
struct Served {
    raft: Raft,
    recent: Arc<RecentEntries>,
}

impl Groups {
    /// No groups yet, on node `me` listening at `addr` (both named in its status).
    pub fn new(me: NodeId, addr: String) -> Groups {
        Groups {
            me,
            addr,
            amqp: Arc::default(),
            served: Arc::default(),
            member: Arc::new(AtomicU64::new(wire::ANY_MEMBER)),
            admin: Arc::default(),
            relays: super::relay::Sessions::default(),
        }
    }

    /// This node's member id ([`wire::ANY_MEMBER`] until settled).
    pub fn member(&self) -> NodeId {
        self.member.load(Ordering::Acquire)
    }

    /// The node's incarnation is settled: Raft requests for `member` are served from now on,
    /// and requests for any other member id refused (`WrongMember`).
    pub fn settle(&self, member: NodeId) {
        self.member.store(member, Ordering::Release);
    }

    /// Membership requests go to `admin` (once; later calls are ignored).
    pub fn set_admin(&self, admin: Admin) {
        let _ = self.admin.set(admin);
    }

    /// The relayed streams this node serves (S-CLU-70).
    pub fn relays(&self) -> super::relay::Sessions {
        self.relays.clone()
    }

    /// The node's status text (`status.rs`).
    pub fn status(&self) -> String {
        let groups: Vec<_> = self
            .all()
            .iter()
            .map(|(g, raft)| status::group_status(*g, raft))
            .collect();
        let amqp = self
            .amqp
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        status::render(self.me, self.member(), &self.addr, amqp.as_deref(), &groups)
    }

    /// Names `amqp`, where the node's AMQP clients connect, in its status from now on.
    pub fn set_amqp(&self, amqp: String) {
        *self
            .amqp
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(amqp);
    }

    /// Requests for `group` go to `raft` from now on.
    pub fn insert(&self, group: u64, raft: Raft) {
        let served = Served {
            raft,
            recent: Arc::default(),
        };
        self.served
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(group, served);
    }

    /// Requests for `group` are answered `NoGroup` from now on.
    pub fn remove(&self, group: u64) -> Option<Raft> {
        self.served
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&group)
            .map(|served| served.raft)
    }

    /// The Raft of `group`, if this node runs it.
    pub fn get(&self, group: u64) -> Option<Raft> {
        self.served(group).map(|served| served.raft)
    }

    /// What this node serves of `group`, if it runs it.
    fn served(&self, group: u64) -> Option<Served> {
        self.served
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&group)
            .cloned()
    }

    /// Every group, by id.
    pub fn all(&self) -> Vec<(u64, Raft)> {
        self.served
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(g, served)| (*g, served.raft.clone()))
            .collect()
    }
}

/// Whether `raft` holds any state: a vote, a log entry, or a snapshot.
pub fn has_state(raft: &Raft) -> bool {
    let m = raft.metrics().borrow().clone();
    m.last_log_index.is_some()
        || m.snapshot.is_some()
        || m.current_term > 0
        || m.state == ServerState::Leader
}

/// Numbers the link connections this process serves (for their relay sessions).
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Accepts connections on `listener` and serves `groups` on them until the task is aborted,
/// which ends every connection it accepted too.
pub async fn serve(listener: TcpListener, groups: Groups) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let groups = groups.clone();
                    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(async move {
                        let why = serve_conn(stream, groups.clone(), conn).await;
                        groups.relays.connection_ended(conn);
                        tracing::debug!(%peer, reason = %why, "cluster connection from a peer closed");
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "cluster listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Serves one connection; returns why it ended.
async fn serve_conn(stream: TcpStream, groups: Groups, conn: u64) -> String {
    if let Err(e) = stream.set_nodelay(true) {
        return e.to_string();
    }
    let (mut read, write) = stream.into_split();
    let from = match read_frame(&mut read, wire::HELLO_BYTES_MAX).await {
        Ok(Some(frame)) => match wire::split(&frame) {
            Ok((h, body)) if h.kind == Kind::Hello => match wire::decode_hello(body) {
                Ok(node) => node,
                Err(e) => {
                    // Another build's node (an older or newer link version) or a stranger:
                    // said at warn, so a half-upgraded cluster is plain in the log.
                    tracing::warn!(error = %e, "cluster link: refused a connection's hello");
                    return format!("bad hello: {e}");
                }
            },
            Ok((h, _)) => return format!("a {:?} frame before hello", h.kind),
            Err(e) => return e.to_string(),
        },
        Ok(None) => return "closed before hello".into(),
        Err(e) => return e.to_string(),
    };
    let (out, rx) = mpsc::channel::<Vec<u8>>(OUTBOX_FRAMES);
    tokio::spawn(write_frames(write, rx));
    let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    loop {
        let frame = match read_frame(&mut read, wire::FRAME_BYTES_MAX).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return format!("node {from} hung up"),
            Err(e) => return format!("node {from}: {e}"),
        };
        let header = match wire::split(&frame) {
            Ok((h, _)) => h,
            Err(e) => return format!("node {from}: {e}"),
        };
        if matches!(header.kind, Kind::Hello | Kind::Reply) {
            return format!("node {from}: a {:?} frame where requests come", header.kind);
        }
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return "semaphore closed".into();
        };
        let groups = groups.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let reply = match wire::split(&frame) {
                Ok((header, body)) => answer(header, body, &groups, conn).await,
                Err(_) => wire::failed(&Failure::BadRequest),
            };
            if let Ok(frame) = wire::frame(Kind::Reply, header.id, 0, wire::ANY_MEMBER, &reply) {
                let _ = out.send(frame).await;
            }
            drop(slot);
        });
    }
}

/// The reply body (status and body) to one request.
async fn answer(header: Header, body: &[u8], groups: &Groups, conn: u64) -> Vec<u8> {
    let served = groups.served(header.group);
    let raft = served.as_ref().map(|served| served.raft.clone());
    match header.kind {
        Kind::Status => return wire::ok(groups.status().as_bytes()),
        Kind::Probe => {
            return wire::ok(&wire::probe_response(wire::Probed {
                has_state: raft.as_ref().is_some_and(has_state),
                member: groups.member(),
            }));
        }
        Kind::AddMember | Kind::RemoveMember => {
            return match groups.admin.get() {
                Some(admin) => admin(header, body.to_vec()).await,
                None => wire::failed(&Failure::NoGroup),
            };
        }
        Kind::Propose => return propose(raft, body).await,
        Kind::RelayOpen | Kind::RelayPush | Kind::RelayPull | Kind::RelayClose => {
            return groups.relays.answer(header.kind, body, conn).await;
        }
        _ => {}
    }
    // A Raft request for another incarnation of this node (its directory was wiped since), or
    // before it settled which member it is: never answered, so this node never votes or
    // acknowledges as a member it is not (S-CLU-21).
    let member = groups.member();
    if member == wire::ANY_MEMBER || header.target != member {
        return wire::failed(&Failure::WrongMember);
    }
    let Some(Served { raft, recent }) = served else {
        return wire::failed(&Failure::NoGroup);
    };
    let bad = |e: crate::record::RecordDecodeError| {
        tracing::warn!(group = header.group, error = %e, "cluster link: a request that does not decode");
        wire::failed(&Failure::BadRequest)
    };
    match header.kind {
        Kind::AppendEntries => match wire::decode_append_entries_with(body, &recent) {
            Ok(rpc) => match raft.append_entries(rpc).await {
                Ok(resp) => wire::ok(&wire::append_entries_response(&resp)),
                Err(e) => stopped(&e),
            },
            Err(e) => bad(e),
        },
        Kind::Vote => match wire::decode_vote(body) {
            Ok(rpc) => match raft.vote(rpc).await {
                Ok(resp) => wire::ok(&wire::vote_response(&resp)),
                Err(e) => stopped(&e),
            },
            Err(e) => bad(e),
        },
        Kind::InstallSnapshot => match wire::decode_install_snapshot(body) {
            Ok(rpc) => match raft.install_snapshot(rpc).await {
                Ok(resp) => wire::ok(&wire::install_snapshot_response(&resp)),
                Err(RaftError::APIError(e)) => wire::failed(&wire::install_failure(&e)),
                Err(e) => stopped(&e),
            },
            Err(e) => bad(e),
        },
        Kind::Hello
        | Kind::Reply
        | Kind::Status
        | Kind::Probe
        | Kind::AddMember
        | Kind::RemoveMember
        | Kind::Propose
        | Kind::RelayOpen
        | Kind::RelayPush
        | Kind::RelayPull
        | Kind::RelayClose => wire::failed(&Failure::BadRequest),
    }
}

/// Answers a `Propose` (S-CLU-50): on the group's leader, once the entry committed.
async fn propose(raft: Option<Raft>, body: &[u8]) -> Vec<u8> {
    let Some(raft) = raft else {
        return wire::failed(&Failure::NoGroup);
    };
    let proposal = match wire::decode_propose(body) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cluster link: a proposal that does not decode");
            return wire::failed(&Failure::BadRequest);
        }
    };
    match forward::lead(&raft, proposal).await {
        Ok(log_id) => wire::ok(&wire::propose_response(&log_id)),
        Err(ForwardError::NotLeader(leader)) => wire::failed(&Failure::NotLeader(leader)),
        Err(ForwardError::Refused(why) | ForwardError::Unreachable(why)) => {
            wire::failed(&Failure::Refused(why))
        }
    }
}

fn stopped<E: std::fmt::Display>(e: &E) -> Vec<u8> {
    tracing::debug!(error = %e, "cluster link: the group's Raft refused a request");
    wire::failed(&Failure::Stopped)
}
