//! The Raft records a member writes into its WAL, byte for byte as `storage-format.md` ("Raft
//! records") describes them: the format marker, votes, log entries, truncations, purges and
//! the committed mark. The entry and membership encodings are also the cluster network's
//! (`net::wire`), so an entry crosses the wire in the bytes it is logged in.
//! An entry's events are the store's own record payloads (`wharf_store::codec`), so a logged
//! entry holds exactly the bytes a single node would log for the same events.
//!
//! Pure functions over byte slices; everything little-endian through `wharf_wal::le`. The
//! decoder distrusts every byte: lengths are checked against what is left before anything is
//! read, counts are never used to allocate, trailing bytes are refused, nothing panics
//! (S-ERR-2).
#![warn(clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};

use openraft::{BasicNode, CommittedLeaderId, EntryPayload};
use wharf_store::codec::{self, StoreRecord};
use wharf_wal::le;

use wharf_broker::Event;

use crate::types::{Entry, Events, LogId, Membership, NodeId, Origin, Proposal, Vote};

/// The Raft record format this build writes and the newest it reads (a `Format` record at
/// every open says which version follows).
pub const RAFT_FORMAT_VERSION: u16 = 3;

/// The WAL kind byte of each Raft record. Part of the format: never reuse or renumber one.
/// They sit apart from the store's kinds (`0x01`-`0x3F`), so one WAL can hold both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RaftKind {
    /// The format version, written at every open.
    Format = 0x50,
    /// A vote (`save_vote`).
    Vote = 0x51,
    /// One log entry.
    Entry = 0x52,
    /// Entries from an index on were removed (a conflict with the leader's log).
    Truncate = 0x53,
    /// Entries up to a log id were removed (covered by a snapshot).
    Purge = 0x54,
    /// The highest log id known committed (format 2).
    Committed = 0x55,
}

impl RaftKind {
    /// The kind of a WAL record's kind byte, if it is a Raft record.
    pub fn from_byte(byte: u8) -> Option<RaftKind> {
        [
            RaftKind::Format,
            RaftKind::Vote,
            RaftKind::Entry,
            RaftKind::Truncate,
            RaftKind::Purge,
            RaftKind::Committed,
        ]
        .into_iter()
        .find(|k| *k as u8 == byte)
    }
}

/// An entry payload's tag byte.
const TAG_BLANK: u8 = 0;
const TAG_NORMAL: u8 = 1;
const TAG_MEMBERSHIP: u8 = 2;
/// A normal entry with its origin (a forwarded proposal, S-CLU-50), since format 3.
const TAG_NORMAL_ORIGIN: u8 = 3;

/// One Raft record, decoded. Every record names the group it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub enum RaftRecord {
    /// The format of the records after it.
    Format {
        /// Group.
        group: u64,
        /// Version.
        version: u16,
    },
    /// A vote saved.
    Vote {
        /// Group.
        group: u64,
        /// The vote.
        vote: Vote,
    },
    /// An entry appended.
    Entry {
        /// Group.
        group: u64,
        /// The entry.
        entry: Entry,
    },
    /// Entries at `index` and after removed.
    Truncate {
        /// Group.
        group: u64,
        /// First removed index.
        index: u64,
    },
    /// Entries up to and including `log_id` removed.
    Purge {
        /// Group.
        group: u64,
        /// Last removed log id.
        log_id: LogId,
    },
    /// The highest log id known committed (openraft's `save_committed`), so a restarted member
    /// re-applies its committed entries before it hears from a leader.
    Committed {
        /// Group.
        group: u64,
        /// The committed log id (`None`: nothing committed).
        log_id: Option<LogId>,
    },
}

impl RaftRecord {
    /// The group the record belongs to.
    pub fn group(&self) -> u64 {
        match self {
            RaftRecord::Format { group, .. }
            | RaftRecord::Vote { group, .. }
            | RaftRecord::Entry { group, .. }
            | RaftRecord::Truncate { group, .. }
            | RaftRecord::Purge { group, .. }
            | RaftRecord::Committed { group, .. } => *group,
        }
    }
}

/// A record that cannot be written: an event the store codec refuses.
#[derive(Debug, thiserror::Error)]
pub enum RecordEncodeError {
    /// An event of the entry does not fit the store's format.
    #[error("an event of the entry does not encode")]
    Event(#[from] codec::EncodeError),
    /// A count or length over the format's field size.
    #[error("{what} does not fit its length field")]
    TooLong {
        /// Which field.
        what: &'static str,
    },
}

/// A payload that is not a valid Raft record. `offset` is inside the payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable Raft record (kind {kind:#04x}) at payload byte {offset}: {what}")]
pub struct RecordDecodeError {
    /// The record kind byte.
    pub kind: u8,
    /// Byte offset in the payload where decoding failed.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}

/// Encodes `record`; returns its WAL kind byte and payload.
///
/// # Errors
/// An event the store codec refuses, or a count over its field.
pub fn encode(record: &RaftRecord) -> Result<(u8, Vec<u8>), RecordEncodeError> {
    let mut out = Vec::new();
    let kind = match record {
        RaftRecord::Format { group, version } => {
            le::put_u64(&mut out, *group);
            le::put_u16(&mut out, *version);
            RaftKind::Format
        }
        RaftRecord::Vote { group, vote } => {
            le::put_u64(&mut out, *group);
            put_vote(&mut out, vote);
            RaftKind::Vote
        }
        RaftRecord::Entry { group, entry } => {
            le::put_u64(&mut out, *group);
            put_entry(&mut out, entry)?;
            RaftKind::Entry
        }
        RaftRecord::Truncate { group, index } => {
            le::put_u64(&mut out, *group);
            le::put_u64(&mut out, *index);
            RaftKind::Truncate
        }
        RaftRecord::Purge { group, log_id } => {
            le::put_u64(&mut out, *group);
            put_log_id(&mut out, log_id);
            RaftKind::Purge
        }
        RaftRecord::Committed { group, log_id } => {
            le::put_u64(&mut out, *group);
            put_opt_log_id(&mut out, log_id.as_ref());
            RaftKind::Committed
        }
    };
    Ok((kind as u8, out))
}

pub(crate) fn put_log_id(out: &mut Vec<u8>, log_id: &LogId) {
    le::put_u64(out, log_id.leader_id.term);
    le::put_u64(out, log_id.leader_id.node_id);
    le::put_u64(out, log_id.index);
}

/// An optional log id: `0` (none), or `1` and the log id.
pub(crate) fn put_opt_log_id(out: &mut Vec<u8>, log_id: Option<&LogId>) {
    match log_id {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            put_log_id(out, id);
        }
    }
}

/// A vote: `term u64`, `node u64`, `committed u8`.
pub(crate) fn put_vote(out: &mut Vec<u8>, vote: &Vote) {
    le::put_u64(out, vote.leader_id.term);
    le::put_u64(out, vote.leader_id.node_id);
    out.push(u8::from(vote.committed));
}

/// An entry as a record's payload holds it after the group: log id, tag, body.
pub(crate) fn put_entry(out: &mut Vec<u8>, entry: &Entry) -> Result<(), RecordEncodeError> {
    put_log_id(out, &entry.log_id);
    put_payload(out, &entry.payload)
}

pub(crate) fn count_u32(n: usize, what: &'static str) -> Result<u32, RecordEncodeError> {
    u32::try_from(n).map_err(|_| RecordEncodeError::TooLong { what })
}

pub(crate) fn put_payload(
    out: &mut Vec<u8>,
    payload: &EntryPayload<crate::TypeConfig>,
) -> Result<(), RecordEncodeError> {
    match payload {
        EntryPayload::Blank => out.push(TAG_BLANK),
        EntryPayload::Normal(p) => {
            match p.origin {
                None => out.push(TAG_NORMAL),
                Some(o) => {
                    out.push(TAG_NORMAL_ORIGIN);
                    le::put_u64(out, o.session);
                    le::put_u64(out, o.seq);
                }
            }
            le::put_u64(out, p.now_ms);
            le::put_u32(out, count_u32(p.events.len(), "event count")?);
            p.events.put_encoded(out, put_events)?;
        }
        EntryPayload::Membership(m) => {
            out.push(TAG_MEMBERSHIP);
            put_membership(out, m)?;
        }
    }
    Ok(())
}

/// Each event: its kind byte, its length, its store record payload.
fn put_events(events: &[Event], out: &mut Vec<u8>) -> Result<(), RecordEncodeError> {
    for event in events {
        out.push(0);
        let kind_at = out.len() - 1;
        let len_at = out.len();
        le::put_u32(out, 0);
        let kind = codec::encode_event(event, out)?;
        let len = count_u32(out.len() - len_at - 4, "event payload")?;
        if let Some(b) = out.get_mut(kind_at) {
            *b = kind.byte();
        }
        if let Some(field) = out.get_mut(len_at..len_at + 4) {
            field.copy_from_slice(&len.to_le_bytes());
        }
    }
    Ok(())
}

/// A membership: its configs (voter sets), then its nodes and their addresses.
pub(crate) fn put_membership(out: &mut Vec<u8>, m: &Membership) -> Result<(), RecordEncodeError> {
    let configs = m.get_joint_config();
    le::put_u32(out, count_u32(configs.len(), "config count")?);
    for config in configs {
        le::put_u32(out, count_u32(config.len(), "voter count")?);
        for id in config {
            le::put_u64(out, *id);
        }
    }
    let nodes: Vec<_> = m.nodes().collect();
    le::put_u32(out, count_u32(nodes.len(), "node count")?);
    for (id, node) in nodes {
        le::put_u64(out, *id);
        le::put_u32(out, count_u32(node.addr.len(), "node address")?);
        out.extend_from_slice(node.addr.as_bytes());
    }
    Ok(())
}

/// A cursor over an untrusted payload.
pub(crate) struct Dec<'a> {
    kind: u8,
    buf: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    /// A cursor at the start of `buf`; `kind` names the record (or message) in errors.
    pub(crate) fn new(kind: u8, buf: &'a [u8]) -> Dec<'a> {
        Dec { kind, buf, at: 0 }
    }

    pub(crate) fn err(&self, what: &'static str) -> RecordDecodeError {
        RecordDecodeError {
            kind: self.kind,
            offset: self.at,
            what,
        }
    }

    pub(crate) fn bytes(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [u8], RecordDecodeError> {
        let end = self.at.checked_add(n).ok_or_else(|| self.err(what))?;
        let got = self.buf.get(self.at..end).ok_or_else(|| self.err(what))?;
        self.at = end;
        Ok(got)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, RecordDecodeError> {
        let b = self.bytes(1, what)?;
        b.first().copied().ok_or_else(|| self.err(what))
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, RecordDecodeError> {
        let v = le::u16_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += 2;
        Ok(v)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, RecordDecodeError> {
        let v = le::u32_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += 4;
        Ok(v)
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, RecordDecodeError> {
        let v = le::u64_at(self.buf, self.at).ok_or_else(|| self.err(what))?;
        self.at += 8;
        Ok(v)
    }

    pub(crate) fn len(&mut self, what: &'static str) -> Result<usize, RecordDecodeError> {
        let n = self.u32(what)?;
        usize::try_from(n).map_err(|_| self.err(what))
    }

    pub(crate) fn log_id(&mut self) -> Result<LogId, RecordDecodeError> {
        let term = self.u64("log id term")?;
        let node = self.u64("log id node")?;
        let index = self.u64("log id index")?;
        Ok(LogId::new(CommittedLeaderId::new(term, node), index))
    }

    /// An optional log id (see [`put_opt_log_id`]).
    pub(crate) fn opt_log_id(&mut self) -> Result<Option<LogId>, RecordDecodeError> {
        match self.u8("log id flag")? {
            0 => Ok(None),
            1 => Ok(Some(self.log_id()?)),
            _ => Err(self.err("log id flag not 0 or 1")),
        }
    }

    /// A vote (see [`put_vote`]).
    pub(crate) fn vote(&mut self) -> Result<Vote, RecordDecodeError> {
        let term = self.u64("vote term")?;
        let node = self.u64("vote node")?;
        let mut vote = Vote::new(term, node);
        match self.u8("vote committed")? {
            0 => {}
            1 => vote.commit(),
            _ => return Err(self.err("vote committed flag not 0 or 1")),
        }
        Ok(vote)
    }

    /// An entry (see [`put_entry`]); it keeps its events' bytes as their encoding
    /// ([`crate::Events`]) when `keep`: one a follower received, to write to its WAL as it
    /// came.
    pub(crate) fn entry(&mut self, keep: bool) -> Result<Entry, RecordDecodeError> {
        let log_id = self.log_id()?;
        let payload = decode_payload(self, keep)?;
        Ok(Entry { log_id, payload })
    }

    /// An entry, or the one `recent` holds under the same log id, whose bytes are then only
    /// stepped over (their framing checked, their events not decoded): a leader makes one
    /// entry per log id, so the same log id is the same entry. A decoded entry joins `recent`.
    pub(crate) fn entry_or_recent(
        &mut self,
        recent: &RecentEntries,
    ) -> Result<Entry, RecordDecodeError> {
        let at = self.at;
        let log_id = self.log_id()?;
        if let Some(entry) = recent.get(&log_id) {
            self.skip_payload()?;
            return Ok(entry);
        }
        self.at = at;
        let entry = self.entry(true)?;
        recent.put(&entry, self.at - at);
        Ok(entry)
    }

    /// Steps over a payload (see [`put_payload`]): a normal one's events by their lengths.
    fn skip_payload(&mut self) -> Result<(), RecordDecodeError> {
        match self.u8("entry tag")? {
            TAG_BLANK => {}
            tag @ (TAG_NORMAL | TAG_NORMAL_ORIGIN) => {
                if tag == TAG_NORMAL_ORIGIN {
                    self.bytes(16, "origin")?;
                }
                self.u64("now")?;
                for _ in 0..self.u32("event count")? {
                    self.u8("event kind")?;
                    let len = self.len("event length")?;
                    self.bytes(len, "event payload")?;
                }
            }
            TAG_MEMBERSHIP => {
                decode_membership(self)?;
            }
            _ => return Err(self.err("unknown entry tag")),
        }
        Ok(())
    }

    /// How many bytes are left.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.at)
    }

    pub(crate) fn end(&self) -> Result<(), RecordDecodeError> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(self.err("bytes after the record"))
        }
    }
}

/// Decodes a Raft record from its WAL kind byte and payload.
///
/// # Errors
/// A kind that is not a Raft record, or a payload that does not decode.
pub fn decode(kind: u8, payload: &[u8]) -> Result<RaftRecord, RecordDecodeError> {
    let d = &mut Dec::new(kind, payload);
    let raft_kind = RaftKind::from_byte(kind).ok_or_else(|| d.err("not a Raft record kind"))?;
    let group = d.u64("group")?;
    let record = match raft_kind {
        RaftKind::Format => RaftRecord::Format {
            group,
            version: d.u16("version")?,
        },
        RaftKind::Vote => RaftRecord::Vote {
            group,
            vote: d.vote()?,
        },
        RaftKind::Entry => RaftRecord::Entry {
            group,
            entry: d.entry(false)?,
        },
        RaftKind::Truncate => RaftRecord::Truncate {
            group,
            index: d.u64("truncate index")?,
        },
        RaftKind::Purge => RaftRecord::Purge {
            group,
            log_id: d.log_id()?,
        },
        RaftKind::Committed => RaftRecord::Committed {
            group,
            log_id: d.opt_log_id()?,
        },
    };
    d.end()?;
    Ok(record)
}

/// The entries a follower decoded last, by log id (a lookup per entry it receives, so a map,
/// not a scan), up to [`RecentEntries::BYTES_MAX`] of their encoding: a leader sends an entry
/// early (S-CLU-90), then again in openraft's own append, and the second copy is taken from
/// here instead of decoded again.
#[derive(Default)]
pub struct RecentEntries {
    inner: std::sync::Mutex<Recent>,
}

#[derive(Default)]
struct Recent {
    /// Each entry and its encoded length, by log id: the lowest (the oldest in the log's
    /// order) goes first past the bound.
    entries: BTreeMap<LogId, (Entry, usize)>,
    bytes: usize,
}

impl RecentEntries {
    /// The most encoded bytes of entries kept.
    pub const BYTES_MAX: usize = 16 * 1024 * 1024;

    fn get(&self, log_id: &LogId) -> Option<Entry> {
        let recent = crate::lock(&self.inner);
        recent.entries.get(log_id).map(|(e, _)| e.clone())
    }

    /// Keeps `entry`, `bytes` long encoded, dropping the lowest log ids beyond the bound.
    fn put(&self, entry: &Entry, bytes: usize) {
        let mut recent = crate::lock(&self.inner);
        if let Some((_, replaced)) = recent.entries.insert(entry.log_id, (entry.clone(), bytes)) {
            recent.bytes -= replaced;
        }
        recent.bytes += bytes;
        while recent.bytes > Self::BYTES_MAX {
            let Some((_, (_, b))) = recent.entries.pop_first() else {
                break;
            };
            recent.bytes -= b;
        }
    }
}

/// An entry's payload; a normal one keeps its events' bytes as their encoding when `keep`.
pub(crate) fn decode_payload(
    d: &mut Dec<'_>,
    keep: bool,
) -> Result<EntryPayload<crate::TypeConfig>, RecordDecodeError> {
    match d.u8("entry tag")? {
        TAG_BLANK => Ok(EntryPayload::Blank),
        tag @ (TAG_NORMAL | TAG_NORMAL_ORIGIN) => {
            let origin = if tag == TAG_NORMAL_ORIGIN {
                Some(Origin {
                    session: d.u64("origin session")?,
                    seq: d.u64("origin seq")?,
                })
            } else {
                None
            };
            let now_ms = d.u64("now")?;
            let count = d.u32("event count")?;
            let start = d.at;
            // Sized from the count, bounded by what the bytes left can hold (an event takes at
            // least its kind and length): a follower keeps an applied entry's list until the
            // log is purged, and one grown by doubling kept up to twice the room.
            let mut events = Vec::with_capacity((count as usize).min(d.remaining() / 5));
            for _ in 0..count {
                let kind = d.u8("event kind")?;
                let len = d.len("event length")?;
                let at = d.at;
                let body = d.bytes(len, "event payload")?;
                match codec::decode(kind, body) {
                    Ok(StoreRecord::Event(event)) => events.push(event),
                    Ok(StoreRecord::Format { .. }) => {
                        d.at = at;
                        return Err(d.err("a format marker inside an entry"));
                    }
                    Ok(StoreRecord::Copied { .. }) => {
                        d.at = at;
                        return Err(d.err("a compaction copy inside an entry"));
                    }
                    Err(_) => {
                        d.at = at;
                        return Err(d.err("event payload does not decode"));
                    }
                }
            }
            let events = match d.buf.get(start..d.at) {
                Some(bytes) if keep => Events::decoded(events, bytes.to_vec()),
                _ => events.into(),
            };
            Ok(EntryPayload::Normal(Proposal {
                now_ms,
                events,
                origin,
            }))
        }
        TAG_MEMBERSHIP => Ok(EntryPayload::Membership(decode_membership(d)?)),
        _ => Err(d.err("unknown entry tag")),
    }
}

pub(crate) fn decode_membership(d: &mut Dec<'_>) -> Result<Membership, RecordDecodeError> {
    let configs_n = d.u32("config count")?;
    let mut configs = Vec::new();
    for _ in 0..configs_n {
        let voters = d.u32("voter count")?;
        let mut config = BTreeSet::new();
        for _ in 0..voters {
            config.insert(d.u64("voter id")?);
        }
        configs.push(config);
    }
    let nodes_n = d.u32("node count")?;
    let mut nodes = BTreeMap::new();
    for _ in 0..nodes_n {
        let id = d.u64("node id")?;
        let len = d.len("node address length")?;
        let at = d.at;
        let addr = std::str::from_utf8(d.bytes(len, "node address")?).map_err(|_| {
            d.at = at;
            d.err("node address not UTF-8")
        });
        let addr = addr?.to_owned();
        nodes.insert(id, BasicNode { addr });
    }
    let voters: BTreeSet<NodeId> = configs.iter().flatten().copied().collect();
    if voters.iter().any(|v| !nodes.contains_key(v)) {
        return Err(d.err("a voter without its node"));
    }
    Ok(Membership::new(configs, nodes))
}
