//! The cluster link's messages, byte for byte as docs/CLUSTER-WIRE.md describes them: a
//! frame header (kind, request id, group) and a body per message. Entries, votes, log ids and
//! memberships are encoded as the Raft records encode them (`record.rs`), so an entry crosses
//! the wire in the bytes it is logged in. Pure functions over byte slices; the decoder
//! distrusts every byte (lengths checked against what is left, counts never used to
//! allocate, trailing bytes refused) and never panics (S-ERR-2).
#![warn(clippy::indexing_slicing)]

use bytes::Bytes;
use openraft::error::{InstallSnapshotError, SnapshotMismatch};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{EntryPayload, SnapshotSegmentId};
use wharf_wal::le;

use crate::record::{self, Dec, RecentEntries, RecordDecodeError, RecordEncodeError};
use crate::snapshot_file::{self, Meta};
use crate::types::{Entry, LogId, NodeId, Proposal, TypeConfig};

/// The first bytes a connecting member sends (then the version and its node id).
pub const HELLO_MAGIC: [u8; 8] = *b"wharfnet";
/// The link's version this build speaks.
pub const WIRE_VERSION: u16 = 4;
/// The largest frame accepted (the length field's value), checked before a byte of the body
/// is read: room for one entry as large as the largest record, twice over.
pub const FRAME_BYTES_MAX: usize = 2 * wharf_base::limits::RECORD_PAYLOAD_BYTES_MAX;
/// The largest first frame of a connection (a `Hello` is 35 bytes): anything else speaking
/// first is refused after 4 bytes.
pub const HELLO_BYTES_MAX: usize = 64;
/// An `AppendEntries` frame stops taking entries past this size (at least one is sent); the
/// rest go in the next request (openraft's partial success).
pub const APPEND_BYTES_SOFT: usize = 8 * 1024 * 1024;
/// The header every frame starts with after its length: kind, request id, group, target.
pub const FRAME_HEADER_BYTES: usize = 1 + 8 + 8 + 8;
/// A request's target when any member may answer it (not a Raft RPC).
pub const ANY_MEMBER: NodeId = 0;

/// A frame's kind byte. Part of the link's format: never reuse or renumber one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The first frame on a connection: magic, version, the sender's node id.
    Hello = 0x01,
    /// openraft's `AppendEntries`.
    AppendEntries = 0x10,
    /// openraft's `Vote`.
    Vote = 0x11,
    /// openraft's `InstallSnapshot` (one chunk).
    InstallSnapshot = 0x12,
    /// Does the receiver hold any state of the group (log, vote)? For the group's formation.
    Probe = 0x13,
    /// The receiver's status text (`status.rs`), for `wharfctl cluster_status`.
    Status = 0x14,
    /// Add the member at an address as a voter (`wharfctl add_member`).
    AddMember = 0x15,
    /// Remove a voter by member id (`wharfctl remove_member`).
    RemoveMember = 0x16,
    /// A proposal a member hands to the group's leader (S-CLU-50, `forward.rs`).
    Propose = 0x17,
    /// Open a relayed stream to the receiver's server (S-CLU-70, `relay.rs`).
    RelayOpen = 0x18,
    /// Bytes for a relayed stream.
    RelayPush = 0x19,
    /// Bytes from a relayed stream (waits a while for some).
    RelayPull = 0x1a,
    /// End a relayed stream.
    RelayClose = 0x1b,
    /// A reply (the request's id; status byte, then the body).
    Reply = 0x80,
}

impl Kind {
    /// The kind of a kind byte, if it is one.
    pub fn from_byte(byte: u8) -> Option<Kind> {
        [
            Kind::Hello,
            Kind::AppendEntries,
            Kind::Vote,
            Kind::InstallSnapshot,
            Kind::Probe,
            Kind::Status,
            Kind::AddMember,
            Kind::RemoveMember,
            Kind::Propose,
            Kind::RelayOpen,
            Kind::RelayPush,
            Kind::RelayPull,
            Kind::RelayClose,
            Kind::Reply,
        ]
        .into_iter()
        .find(|k| *k as u8 == byte)
    }
}

/// A reply's status byte.
const STATUS_OK: u8 = 0;
const STATUS_ERROR: u8 = 1;

/// Why a request failed on the receiver (a reply's error code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The receiver runs no such group (not opened yet, or shut down).
    NoGroup,
    /// The receiver's Raft of the group stopped (a fatal error, or shutting down).
    Stopped,
    /// A snapshot chunk at the wrong offset or of another snapshot.
    SnapshotMismatch(SnapshotMismatch),
    /// The request did not decode.
    BadRequest,
    /// A Raft request for another incarnation of the receiver (DESIGN "A wiped member").
    WrongMember,
    /// A membership change or a proposal refused, and why.
    Refused(String),
    /// A proposal sent to a member that does not lead the group; the leader it knows.
    NotLeader(Option<NodeId>),
}

const FAIL_NO_GROUP: u8 = 1;
const FAIL_STOPPED: u8 = 2;
const FAIL_SNAPSHOT_MISMATCH: u8 = 3;
const FAIL_BAD_REQUEST: u8 = 4;
const FAIL_WRONG_MEMBER: u8 = 5;
const FAIL_REFUSED: u8 = 6;
const FAIL_NOT_LEADER: u8 = 7;

/// A frame's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The kind.
    pub kind: Kind,
    /// The request id (a reply carries its request's).
    pub id: u64,
    /// The group (0 for `Hello` and replies).
    pub group: u64,
    /// The member id the request is for ([`ANY_MEMBER`] but for Raft's RPCs).
    pub target: NodeId,
}

/// A frame on its way out: its length field and header, then `body`, which is shared, not
/// copied (an early copy's body goes to every follower as one buffer).
#[derive(Debug, Clone)]
pub struct Frame {
    /// The length field and the header.
    pub head: [u8; 4 + FRAME_HEADER_BYTES],
    /// The body.
    pub body: Bytes,
}

impl Frame {
    /// The frame in one buffer, as it goes on the wire.
    pub fn to_vec(&self) -> Vec<u8> {
        [self.head.as_slice(), &self.body].concat()
    }
}

/// A frame: its length field, the header, then `body`.
///
/// # Errors
/// A frame over [`FRAME_BYTES_MAX`].
pub fn frame(
    kind: Kind,
    id: u64,
    group: u64,
    target: NodeId,
    body: Bytes,
) -> Result<Frame, RecordEncodeError> {
    let len = FRAME_HEADER_BYTES + body.len();
    if len > FRAME_BYTES_MAX {
        return Err(RecordEncodeError::TooLong { what: "frame" });
    }
    let len = record::count_u32(len, "frame")?.to_le_bytes();
    let fields: [&[u8]; 5] = [
        &len,
        &[kind as u8],
        &id.to_le_bytes(),
        &group.to_le_bytes(),
        &target.to_le_bytes(),
    ];
    let mut head = [0; 4 + FRAME_HEADER_BYTES];
    for (to, from) in head.iter_mut().zip(fields.into_iter().flatten()) {
        *to = *from;
    }
    Ok(Frame { head, body })
}

/// Splits a frame (without its length field) into its header and body.
///
/// # Errors
/// Shorter than the header, or an unknown kind.
pub fn split(frame: &[u8]) -> Result<(Header, &[u8]), RecordDecodeError> {
    let d = &mut Dec::new(0, frame);
    let byte = d.u8("frame kind")?;
    let kind = Kind::from_byte(byte).ok_or_else(|| d.err("unknown frame kind"))?;
    let id = d.u64("request id")?;
    let group = d.u64("group")?;
    let target = d.u64("target")?;
    let body = d.bytes(d.remaining(), "body")?;
    Ok((
        Header {
            kind,
            id,
            group,
            target,
        },
        body,
    ))
}

/// `Hello`'s body: magic, version, node id.
pub fn hello(node: NodeId) -> Vec<u8> {
    let mut out = HELLO_MAGIC.to_vec();
    le::put_u16(&mut out, WIRE_VERSION);
    le::put_u64(&mut out, node);
    out
}

/// The sender's node id from a `Hello` body.
///
/// # Errors
/// Not a wharf cluster link, or another version.
pub fn decode_hello(body: &[u8]) -> Result<NodeId, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Hello as u8, body);
    if d.bytes(8, "magic")? != HELLO_MAGIC {
        return Err(d.err("not a wharf cluster link (magic)"));
    }
    let version = d.u16("version")?;
    if version < WIRE_VERSION {
        return Err(d.err(
            "an older cluster link version (a node of an older build): upgrade the cluster whole",
        ));
    }
    if version > WIRE_VERSION {
        return Err(d.err(
            "a newer cluster link version (a node of a newer build): upgrade the cluster whole",
        ));
    }
    let node = d.u64("node id")?;
    d.end()?;
    Ok(node)
}

/// An `AppendEntries` body with as many of `rpc`'s entries as fit [`APPEND_BYTES_SOFT`] (at
/// least one); returns the body and how many entries it holds.
///
/// # Errors
/// An entry that does not encode.
pub fn append_entries(
    rpc: &AppendEntriesRequest<TypeConfig>,
) -> Result<(Vec<u8>, usize), RecordEncodeError> {
    // Sized for the entries up front (about: `entry_bytes`), not grown to them by copies.
    let mut about = 0usize;
    for entry in &rpc.entries {
        if about >= APPEND_BYTES_SOFT {
            break;
        }
        about = about.saturating_add(crate::log_store::entry_bytes(entry));
    }
    let mut out = Vec::with_capacity(about.saturating_add(64));
    record::put_vote(&mut out, &rpc.vote);
    record::put_opt_log_id(&mut out, rpc.prev_log_id.as_ref());
    record::put_opt_log_id(&mut out, rpc.leader_commit.as_ref());
    let count_at = out.len();
    le::put_u32(&mut out, 0);
    let entries_at = out.len();
    let mut count = 0;
    for entry in &rpc.entries {
        if count > 0 && out.len() - entries_at >= APPEND_BYTES_SOFT {
            break;
        }
        record::put_entry(&mut out, entry)?;
        count += 1;
    }
    let count = record::count_u32(count, "entry count")?;
    if let Some(field) = out.get_mut(count_at..entries_at) {
        field.copy_from_slice(&count.to_le_bytes());
    }
    Ok((out, count as usize))
}

/// Decodes an `AppendEntries` body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_append_entries(
    body: &[u8],
) -> Result<AppendEntriesRequest<TypeConfig>, RecordDecodeError> {
    decode_append_entries_with(body, &RecentEntries::default())
}

/// Decodes an `AppendEntries` body, taking the entries `recent` holds from there (S-CLU-90).
///
/// # Errors
/// A body that does not decode.
pub fn decode_append_entries_with(
    body: &[u8],
    recent: &RecentEntries,
) -> Result<AppendEntriesRequest<TypeConfig>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::AppendEntries as u8, body);
    let vote = d.vote()?;
    let prev_log_id = d.opt_log_id()?;
    let leader_commit = d.opt_log_id()?;
    let count = d.u32("entry count")?;
    let mut entries: Vec<Entry> = Vec::new();
    for _ in 0..count {
        entries.push(d.entry_or_recent(recent)?);
    }
    d.end()?;
    Ok(AppendEntriesRequest {
        vote,
        prev_log_id,
        entries,
        leader_commit,
    })
}

const APPEND_SUCCESS: u8 = 0;
const APPEND_PARTIAL: u8 = 1;
const APPEND_CONFLICT: u8 = 2;
const APPEND_HIGHER_VOTE: u8 = 3;

/// An `AppendEntries` reply body.
pub fn append_entries_response(resp: &AppendEntriesResponse<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    match resp {
        AppendEntriesResponse::Success => out.push(APPEND_SUCCESS),
        AppendEntriesResponse::PartialSuccess(id) => {
            out.push(APPEND_PARTIAL);
            record::put_opt_log_id(&mut out, id.as_ref());
        }
        AppendEntriesResponse::Conflict => out.push(APPEND_CONFLICT),
        AppendEntriesResponse::HigherVote(v) => {
            out.push(APPEND_HIGHER_VOTE);
            record::put_vote(&mut out, v);
        }
    }
    out
}

/// Decodes an `AppendEntries` reply body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_append_entries_response(
    body: &[u8],
) -> Result<AppendEntriesResponse<NodeId>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Reply as u8, body);
    let resp = match d.u8("append result")? {
        APPEND_SUCCESS => AppendEntriesResponse::Success,
        APPEND_PARTIAL => AppendEntriesResponse::PartialSuccess(d.opt_log_id()?),
        APPEND_CONFLICT => AppendEntriesResponse::Conflict,
        APPEND_HIGHER_VOTE => AppendEntriesResponse::HigherVote(d.vote()?),
        _ => return Err(d.err("unknown append result")),
    };
    d.end()?;
    Ok(resp)
}

/// A `Vote` body.
pub fn vote(rpc: &VoteRequest<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    record::put_vote(&mut out, &rpc.vote);
    record::put_opt_log_id(&mut out, rpc.last_log_id.as_ref());
    out
}

/// Decodes a `Vote` body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_vote(body: &[u8]) -> Result<VoteRequest<NodeId>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Vote as u8, body);
    let vote = d.vote()?;
    let last_log_id = d.opt_log_id()?;
    d.end()?;
    Ok(VoteRequest { vote, last_log_id })
}

/// A `Vote` reply body.
pub fn vote_response(resp: &VoteResponse<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    record::put_vote(&mut out, &resp.vote);
    out.push(u8::from(resp.vote_granted));
    record::put_opt_log_id(&mut out, resp.last_log_id.as_ref());
    out
}

/// Decodes a `Vote` reply body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_vote_response(body: &[u8]) -> Result<VoteResponse<NodeId>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Reply as u8, body);
    let vote = d.vote()?;
    let vote_granted = match d.u8("granted")? {
        0 => false,
        1 => true,
        _ => return Err(d.err("granted not 0 or 1")),
    };
    let last_log_id = d.opt_log_id()?;
    d.end()?;
    Ok(VoteResponse {
        vote,
        vote_granted,
        last_log_id,
    })
}

/// An `InstallSnapshot` body: vote, metadata (as the snapshot file holds it), offset, done,
/// the chunk.
///
/// # Errors
/// Metadata or a chunk over its length field.
pub fn install_snapshot(
    rpc: &InstallSnapshotRequest<TypeConfig>,
) -> Result<Vec<u8>, RecordEncodeError> {
    let mut out = Vec::new();
    record::put_vote(&mut out, &rpc.vote);
    let meta = snapshot_file::encode_meta(&rpc.meta)?;
    le::put_u32(
        &mut out,
        record::count_u32(meta.len(), "snapshot metadata")?,
    );
    out.extend_from_slice(&meta);
    le::put_u64(&mut out, rpc.offset);
    out.push(u8::from(rpc.done));
    le::put_u32(
        &mut out,
        record::count_u32(rpc.data.len(), "snapshot chunk")?,
    );
    out.extend_from_slice(&rpc.data);
    Ok(out)
}

/// Decodes an `InstallSnapshot` body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_install_snapshot(
    body: &[u8],
) -> Result<InstallSnapshotRequest<TypeConfig>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::InstallSnapshot as u8, body);
    let vote = d.vote()?;
    let meta_len = d.len("snapshot metadata length")?;
    let meta: Meta = snapshot_file::decode_meta(d.bytes(meta_len, "snapshot metadata")?)?;
    let offset = d.u64("offset")?;
    let done = match d.u8("done")? {
        0 => false,
        1 => true,
        _ => return Err(d.err("done not 0 or 1")),
    };
    let len = d.len("chunk length")?;
    let data = d.bytes(len, "chunk")?.to_vec();
    d.end()?;
    Ok(InstallSnapshotRequest {
        vote,
        meta,
        offset,
        data,
        done,
    })
}

/// An `InstallSnapshot` reply body.
pub fn install_snapshot_response(resp: &InstallSnapshotResponse<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    record::put_vote(&mut out, &resp.vote);
    out
}

/// Decodes an `InstallSnapshot` reply body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_install_snapshot_response(
    body: &[u8],
) -> Result<InstallSnapshotResponse<NodeId>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Reply as u8, body);
    let vote = d.vote()?;
    d.end()?;
    Ok(InstallSnapshotResponse { vote })
}

/// What a `Probe` finds out about the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    /// Whether the receiver holds state of the group.
    pub has_state: bool,
    /// The receiver's member id; [`ANY_MEMBER`] while it has not settled its incarnation.
    pub member: NodeId,
}

/// A `Probe` reply body: whether the receiver holds state of the group, its member id.
pub fn probe_response(probed: Probed) -> Vec<u8> {
    let mut out = vec![u8::from(probed.has_state)];
    le::put_u64(&mut out, probed.member);
    out
}

/// Decodes a `Probe` reply body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_probe_response(body: &[u8]) -> Result<Probed, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Reply as u8, body);
    let has_state = match d.u8("has state")? {
        0 => false,
        1 => true,
        _ => return Err(d.err("has state not 0 or 1")),
    };
    let member = d.u64("member id")?;
    d.end()?;
    Ok(Probed { has_state, member })
}

/// An `AddMember` body: how many nodes forwarded it, the new member's cluster address.
pub fn add_member(hops: u8, addr: &str) -> Vec<u8> {
    let mut out = vec![hops];
    out.extend_from_slice(addr.as_bytes());
    out
}

/// Decodes an `AddMember` body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_add_member(body: &[u8]) -> Result<(u8, String), RecordDecodeError> {
    let d = &mut Dec::new(Kind::AddMember as u8, body);
    let hops = d.u8("hops")?;
    let addr = std::str::from_utf8(d.bytes(d.remaining(), "address")?)
        .map_err(|_| d.err("address not UTF-8"))?
        .to_owned();
    Ok((hops, addr))
}

/// A `RemoveMember` body: how many nodes forwarded it, the member id.
pub fn remove_member(hops: u8, member: NodeId) -> Vec<u8> {
    let mut out = vec![hops];
    le::put_u64(&mut out, member);
    out
}

/// Decodes a `RemoveMember` body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_remove_member(body: &[u8]) -> Result<(u8, NodeId), RecordDecodeError> {
    let d = &mut Dec::new(Kind::RemoveMember as u8, body);
    let hops = d.u8("hops")?;
    let member = d.u64("member id")?;
    d.end()?;
    Ok((hops, member))
}

/// A `Propose` body: the proposal, as a normal entry's tag and body (with its origin).
///
/// # Errors
/// An event that does not encode.
pub fn propose(proposal: &Proposal) -> Result<Vec<u8>, RecordEncodeError> {
    let mut out = Vec::new();
    record::put_payload(&mut out, &EntryPayload::Normal(proposal.clone()))?;
    Ok(out)
}

/// Decodes a `Propose` body: a normal entry's payload carrying an origin.
///
/// # Errors
/// A body that does not decode, another kind of entry, or one without an origin.
pub fn decode_propose(body: &[u8]) -> Result<Proposal, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Propose as u8, body);
    let payload = record::decode_payload(d, true)?;
    d.end()?;
    match payload {
        EntryPayload::Normal(p) if p.origin.is_some() => Ok(p),
        _ => Err(d.err("a proposal without its origin")),
    }
}

/// A `Propose` reply body: the log id the entry committed at.
pub fn propose_response(log_id: &LogId) -> Vec<u8> {
    let mut out = Vec::new();
    record::put_log_id(&mut out, log_id);
    out
}

/// Decodes a `Propose` reply body.
///
/// # Errors
/// A body that does not decode.
pub fn decode_propose_response(body: &[u8]) -> Result<LogId, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Reply as u8, body);
    let log_id = d.log_id()?;
    d.end()?;
    Ok(log_id)
}

/// A successful reply's body: the status, then `body`.
pub fn ok(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + body.len());
    out.push(STATUS_OK);
    out.extend_from_slice(body);
    out
}

/// A failed reply's body.
pub fn failed(failure: &Failure) -> Vec<u8> {
    let mut out = vec![STATUS_ERROR];
    match failure {
        Failure::NoGroup => out.push(FAIL_NO_GROUP),
        Failure::Stopped => out.push(FAIL_STOPPED),
        Failure::BadRequest => out.push(FAIL_BAD_REQUEST),
        Failure::WrongMember => out.push(FAIL_WRONG_MEMBER),
        Failure::NotLeader(leader) => {
            out.push(FAIL_NOT_LEADER);
            le::put_u64(&mut out, leader.unwrap_or(ANY_MEMBER));
        }
        Failure::Refused(why) => {
            out.push(FAIL_REFUSED);
            let why = why.as_bytes();
            let why = why
                .get(..why.len().min(usize::from(u16::MAX)))
                .unwrap_or(why);
            le::put_u16(&mut out, u16::try_from(why.len()).unwrap_or(0));
            out.extend_from_slice(why);
        }
        Failure::SnapshotMismatch(m) => {
            out.push(FAIL_SNAPSHOT_MISMATCH);
            for seg in [&m.expect, &m.got] {
                // A snapshot id is short (`index-count`); an absurd one is cut, not refused.
                let id = seg.id.as_bytes();
                let id = id.get(..id.len().min(usize::from(u16::MAX))).unwrap_or(id);
                le::put_u16(&mut out, u16::try_from(id.len()).unwrap_or(0));
                out.extend_from_slice(id);
                le::put_u64(&mut out, seg.offset);
            }
        }
    }
    out
}

/// A reply's body: `Ok` and what follows the status, or the failure.
///
/// # Errors
/// A body that does not decode.
pub fn decode_reply(body: &[u8]) -> Result<Result<&[u8], Failure>, RecordDecodeError> {
    let d = &mut Dec::new(Kind::Reply as u8, body);
    match d.u8("status")? {
        STATUS_OK => Ok(Ok(d.bytes(d.remaining(), "reply")?)),
        STATUS_ERROR => {
            let failure = match d.u8("failure")? {
                FAIL_NO_GROUP => Failure::NoGroup,
                FAIL_STOPPED => Failure::Stopped,
                FAIL_BAD_REQUEST => Failure::BadRequest,
                FAIL_WRONG_MEMBER => Failure::WrongMember,
                FAIL_NOT_LEADER => {
                    let leader = d.u64("leader")?;
                    Failure::NotLeader((leader != ANY_MEMBER).then_some(leader))
                }
                FAIL_REFUSED => {
                    let len = usize::from(d.u16("reason length")?);
                    let why = d.bytes(len, "reason")?;
                    Failure::Refused(String::from_utf8_lossy(why).into_owned())
                }
                FAIL_SNAPSHOT_MISMATCH => {
                    let mut segs = Vec::with_capacity(2);
                    for _ in 0..2 {
                        let len = usize::from(d.u16("snapshot id length")?);
                        let id = std::str::from_utf8(d.bytes(len, "snapshot id")?)
                            .map_err(|_| d.err("snapshot id not UTF-8"))?
                            .to_owned();
                        let offset = d.u64("snapshot offset")?;
                        segs.push(SnapshotSegmentId { id, offset });
                    }
                    let got = segs.pop().ok_or_else(|| d.err("segment"))?;
                    let expect = segs.pop().ok_or_else(|| d.err("segment"))?;
                    Failure::SnapshotMismatch(SnapshotMismatch { expect, got })
                }
                _ => return Err(d.err("unknown failure")),
            };
            d.end()?;
            Ok(Err(failure))
        }
        _ => Err(d.err("unknown reply status")),
    }
}

/// The failure a receiver reports for openraft's `InstallSnapshotError`.
pub fn install_failure(e: &InstallSnapshotError) -> Failure {
    match e {
        InstallSnapshotError::SnapshotMismatch(m) => Failure::SnapshotMismatch(m.clone()),
    }
}
