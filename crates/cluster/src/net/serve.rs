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
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;

use super::frames::{FrameReader, write_frames};
use super::wire::{self, Failure, Header, Kind};
use crate::forward::{self, ForwardError};
use crate::record::RecentEntries;
use crate::status;
use crate::types::{NodeId, Raft, TypeConfig};
use openraft::raft::AppendEntriesRequest;

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

/// A group this node serves: its Raft, the entries its appends decoded last (S-CLU-90), and
/// the queue its appends go through ([`append_in_order`]).
#[derive(Clone)]
struct Served {
    raft: Raft,
    recent: Arc<RecentEntries>,
    appends: mpsc::UnboundedSender<Append>,
}

/// An `AppendEntries` waiting for the group's Raft, and where its answer goes.
type Append = (AppendEntriesRequest<TypeConfig>, oneshot::Sender<Vec<u8>>);

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
        let (appends, queue) = mpsc::unbounded_channel();
        tokio::spawn(append_in_order(raft.clone(), queue));
        let served = Served {
            raft,
            recent: Arc::default(),
            appends,
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
    let mut frames = FrameReader::default();
    let from = match frames.next(&mut read, wire::HELLO_BYTES_MAX).await {
        Ok(Some(frame)) => match wire::split(frame) {
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
    let (out, rx) = mpsc::channel::<wire::Frame>(OUTBOX_FRAMES);
    tokio::spawn(write_frames(write, rx));
    let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    loop {
        let frame = match frames.next(&mut read, wire::FRAME_BYTES_MAX).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return format!("node {from} hung up"),
            Err(e) => return format!("node {from}: {e}"),
        };
        let (header, body) = match wire::split(frame) {
            Ok(split) => split,
            Err(e) => return format!("node {from}: {e}"),
        };
        if matches!(header.kind, Kind::Hello | Kind::Reply) {
            return format!("node {from}: a {:?} frame where requests come", header.kind);
        }
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return "semaphore closed".into();
        };
        // An append is decoded and queued for its group's Raft before the next frame is read,
        // so that a leader's appends reach it in the order they were sent (a task each could
        // reorder them, and an early copy that overtook the one before it is refused:
        // S-CLU-90). Any other request is answered by a task of its own, with its own copy of
        // the body (the read buffer is the next frame's).
        let answering: Answering = if header.kind == Kind::AppendEntries {
            start_append(header, body, &groups)
        } else {
            let body = body.to_vec();
            let groups = groups.clone();
            Box::pin(async move { answer(header, &body, &groups, conn).await })
        };
        let out = out.clone();
        tokio::spawn(async move {
            let reply = answering.await;
            if let Ok(frame) =
                wire::frame(Kind::Reply, header.id, 0, wire::ANY_MEMBER, reply.into())
            {
                let _ = out.send(frame).await;
            }
            drop(slot);
        });
    }
}

/// An answer on its way.
type Answering = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// The group a Raft request is for, as this node serves it; or the refusal. A request for
/// another incarnation of this node (its directory was wiped since), or before it settled
/// which member it is, is never answered, so this node never votes or acknowledges as a member
/// it is not (S-CLU-21).
fn raft_request(header: Header, groups: &Groups) -> Result<Served, Vec<u8>> {
    let member = groups.member();
    if member == wire::ANY_MEMBER || header.target != member {
        return Err(wire::failed(&Failure::WrongMember));
    }
    groups
        .served(header.group)
        .ok_or_else(|| wire::failed(&Failure::NoGroup))
}

/// The answer to a request that does not decode.
fn bad_request(header: Header) -> impl Fn(crate::record::RecordDecodeError) -> Vec<u8> {
    move |e| {
        tracing::warn!(group = header.group, error = %e, "cluster link: a request that does not decode");
        wire::failed(&Failure::BadRequest)
    }
}

/// Decodes an `AppendEntries` and queues it for its group's Raft now ([`append_in_order`]);
/// the answer is what the returned future yields.
fn start_append(header: Header, body: &[u8], groups: &Groups) -> Answering {
    let served = match raft_request(header, groups) {
        Ok(served) => served,
        Err(refused) => return Box::pin(std::future::ready(refused)),
    };
    let rpc = match wire::decode_append_entries_with(body, &served.recent) {
        Ok(rpc) => rpc,
        Err(e) => return Box::pin(std::future::ready(bad_request(header)(e))),
    };
    let (answer, answered) = oneshot::channel();
    if served.appends.send((rpc, answer)).is_err() {
        return Box::pin(std::future::ready(wire::failed(&Failure::Stopped)));
    }
    Box::pin(async move {
        answered
            .await
            .unwrap_or_else(|_| wire::failed(&Failure::Stopped))
    })
}

/// Hands a group's appends to its Raft one at a time, in the order they came, and the ones
/// that came meanwhile as one (S-CLU-90): openraft 0.9's core handles an append by writing its
/// entries and waiting for their fsync before anything else, so a follower sent a leader's
/// entries early, an append each, would otherwise sync once per entry, each append waiting
/// behind the ones before it. Appends merge only when they are the same leader's and each
/// starts right after the one before it ([`merge`]); the merged append's answer is each one's.
/// Ends when the group is no longer served.
async fn append_in_order(raft: Raft, mut queue: mpsc::UnboundedReceiver<Append>) {
    let mut next = None;
    loop {
        let (mut rpc, first) = match next.take() {
            Some(append) => append,
            None => match queue.recv().await {
                Some(append) => append,
                None => return,
            },
        };
        let mut answers = vec![first];
        while let Ok((more, answer)) = queue.try_recv() {
            match merge(rpc, more) {
                Ok(merged) => {
                    rpc = merged;
                    answers.push(answer);
                }
                Err(both) => {
                    let [kept, more] = *both;
                    rpc = kept;
                    next = Some((more, answer));
                    break;
                }
            }
        }
        let reply = match raft.append_entries(rpc).await {
            Ok(resp) => wire::ok(&wire::append_entries_response(&resp)),
            Err(e) => stopped(&e),
        };
        for answer in answers {
            let _ = answer.send(reply.clone());
        }
    }
}

/// `b` appended to `a`, when it is the same leader's (the same vote) and starts right after
/// `a`'s last entry (or `a`'s previous one, for an `a` without entries): then handling the
/// one append is handling `a` and then `b`, and its answer is both's. Otherwise both back.
fn merge(
    mut a: AppendEntriesRequest<TypeConfig>,
    b: AppendEntriesRequest<TypeConfig>,
) -> Result<AppendEntriesRequest<TypeConfig>, Box<[AppendEntriesRequest<TypeConfig>; 2]>> {
    let last = a.entries.last().map(|e| e.log_id).or(a.prev_log_id);
    if a.vote != b.vote || b.prev_log_id != last {
        return Err(Box::new([a, b]));
    }
    a.entries.extend(b.entries);
    a.leader_commit = a.leader_commit.max(b.leader_commit);
    Ok(a)
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
    let (raft, bad) = match raft_request(header, groups) {
        Ok(served) => (served.raft, bad_request(header)),
        Err(refused) => return refused,
    };
    match header.kind {
        Kind::AppendEntries => start_append(header, body, groups).await,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Entry, LogId, Vote};
    use openraft::{CommittedLeaderId, EntryPayload};

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    /// An append of term `term`'s entries `from..=to` (none when `to < from`).
    fn append(term: u64, from: u64, to: u64, commit: u64) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(term, 1),
            prev_log_id: from.checked_sub(1).map(|i| id(term, i)),
            entries: (from..=to)
                .map(|i| Entry {
                    log_id: id(term, i),
                    payload: EntryPayload::Blank,
                })
                .collect(),
            leader_commit: Some(id(term, commit)),
        }
    }

    fn indexes(rpc: &AppendEntriesRequest<TypeConfig>) -> Vec<u64> {
        rpc.entries.iter().map(|e| e.log_id.index).collect()
    }

    /// S-CLU-90: appends that came while the follower's Raft was busy merge into one when each
    /// is the same leader's and starts right after the one before it; others stay apart.
    #[test]
    fn appends_merge_only_when_the_same_leaders_and_contiguous() {
        let merged = merge(append(3, 5, 6, 2), append(3, 7, 7, 4)).expect("follows");
        assert_eq!(indexes(&merged), [5, 6, 7]);
        assert_eq!(merged.prev_log_id, Some(id(3, 4)));
        assert_eq!(merged.leader_commit, Some(id(3, 4)), "the later commit");
        // A heartbeat (no entries) right after the last entry merges, and so does an append
        // after a heartbeat.
        let merged = merge(merged, append(3, 8, 7, 6)).expect("heartbeat");
        assert_eq!(indexes(&merged), [5, 6, 7]);
        assert_eq!(merged.leader_commit, Some(id(3, 6)));
        let merged = merge(append(3, 8, 7, 6), append(3, 8, 9, 6)).expect("after a heartbeat");
        assert_eq!(indexes(&merged), [8, 9]);
        // A gap, an overlap, and another leader's append stay apart, both given back.
        for (a, b) in [
            (append(3, 5, 6, 2), append(3, 8, 8, 2)),
            (append(3, 5, 6, 2), append(3, 6, 7, 2)),
            (append(3, 5, 6, 2), append(4, 7, 7, 2)),
        ] {
            let both = merge(a, b).expect_err("apart");
            assert_eq!(indexes(&both[0]), [5, 6]);
            assert!(!both[1].entries.is_empty());
        }
    }
}
